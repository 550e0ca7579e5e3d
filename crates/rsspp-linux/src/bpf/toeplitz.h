/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The Toeplitz hash NICs use for RSS, table-driven as in rsspp_core::Toeplitz:
 * userspace precomputes, for each input byte position i and byte value v,
 * the XOR of the 32-bit key windows the set bits of v select at position i.
 * A hash is then one lookup and one XOR per input byte (12 for an IPv4
 * 4-tuple, 36 for IPv6) instead of one key window per set input bit.
 *
 * Input, in network byte order: source address, destination address, then
 * source and destination ports when the packet has them.
 */
#ifndef RSSPP_TOEPLITZ_H
#define RSSPP_TOEPLITZ_H

#include "parse.h"

/* Two IPv6 addresses and two ports. */
#define HASH_INPUT_MAX 36

struct key_table {
	__u32 v[HASH_INPUT_MAX][256];
};

/* Hash contribution of `len` packet bytes at input positions pos.. */
static __always_inline __u32 toeplitz_run(const struct key_table *t,
					  const __u8 *in, const int pos,
					  const int len)
{
	__u32 h = 0;

#pragma unroll
	for (int i = 0; i < len; i++)
		h ^= t->v[pos + i][in[i]];
	return h;
}

/* Hash of a parsed IP packet, exactly what rsspp_core::Toeplitz::hash_flow
 * returns for the same flow. */
static __always_inline __u32 toeplitz_flow(const struct key_table *t,
					   const struct flow_input *f)
{
	__u32 h;

	if (f->ipv6) {
		h = toeplitz_run(t, f->addrs, 0, 32);
		if (f->ports)
			h ^= toeplitz_run(t, f->ports, 32, 4);
	} else {
		h = toeplitz_run(t, f->addrs, 0, 8);
		if (f->ports)
			h ^= toeplitz_run(t, f->ports, 8, 4);
	}
	return h;
}

#endif /* RSSPP_TOEPLITZ_H */
