/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The flow of a frame in XDP, for rsspp-runtime's XDP programs (the afxdp
 * backend's software and hardware modes): classify.h read through
 * bpf_xdp_load_bytes, with up to two VLAN tags in the frame skipped
 * (nothing has taken one out before XDP), and the flow's Toeplitz hash
 * (rsspp-linux's toeplitz.h, the same hash as
 * rsspp_core::Toeplitz::hash_flow).
 */
#ifndef RSSPP_RUNTIME_XDP_FLOW_H
#define RSSPP_RUNTIME_XDP_FLOW_H

#define CTX struct xdp_md
#define LOAD bpf_xdp_load_bytes
#define CTX_LEN(ctx) bpf_xdp_get_buff_len(ctx)
#include "classify.h"

/*
 * Fills `in` with the frame's hash input and `hash` with its Toeplitz hash
 * under `t`; returns 0, or -1 for a frame that is not IP, or malformed
 * (neither counted nor steered by the programs).
 */
static __always_inline int xdp_flow_hash(struct xdp_md *ctx, struct key_table *t,
					 struct hash_input *in, __u32 *hash)
{
	struct flow_input f = {};
	__be16 proto;
	__u32 off = 12;
	int has_ports = 0, r;

	if (bpf_xdp_load_bytes(ctx, off, &proto, sizeof(proto)))
		return -1;
	off += sizeof(proto);
#pragma unroll
	for (int i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr vh;

		if (proto != bpf_htons(ETH_P_8021Q) &&
		    proto != bpf_htons(ETH_P_8021AD))
			break;
		/* The tag's TCI, then the protocol it encloses. */
		if (bpf_xdp_load_bytes(ctx, off, &vh, sizeof(vh)))
			return -1;
		proto = vh.encap_proto;
		off += sizeof(vh);
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		r = parse_v4(ctx, off, in, &has_ports);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		r = parse_v6(ctx, off, in, &has_ports);
		f.ipv6 = 1;
	} else {
		return -1;
	}
	if (r != PARSE_IP)
		return -1;
	f.addrs = in->bytes;
	if (has_ports)
		f.ports = f.ipv6 ? in->bytes + 32 : in->bytes + 8;
	*hash = toeplitz_flow(t, &f);
	return 0;
}

#endif
