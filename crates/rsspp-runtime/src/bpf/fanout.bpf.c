/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The AF_PACKET fanout program of rsspp-runtime (PACKET_FANOUT_EBPF): for
 * each received frame, the Toeplitz hash of its flow (rsspp-linux's
 * toeplitz.h, the same hash as rsspp_core::Toeplitz::hash_flow), its bucket,
 * and the index of the fanout group's socket that owns the bucket.
 *
 * The per-bucket words, and the per-flow overrides that steer a few flows
 * by words of their own (rsspp nf --elephants on), are words.h's: member
 * w + 1 takes worker w's bucket-steered frames, member workers + w + 1 its
 * override-steered ones, member 0 those of nobody (the parking socket).
 *
 * A socket filter may not read packet memory directly: the headers are
 * copied out with bpf_skb_load_bytes, from the network header (where
 * skb->data is when AF_PACKET's fanout runs on receive). The classification
 * follows rsspp-linux's parse.h: one VLAN tag left in the frame skipped (the
 * stack has already taken the outer one into skb->vlan_tci), IPv4 with its
 * options, fragments hashed on their addresses, IPv6 with up to four
 * extension headers; ports of TCP and UDP only, when their whole fixed
 * header is there; an unfragmented ICMPv4 error by the flow it quotes,
 * reversed. Frames that are not IP, or malformed, are not counted and go
 * to member 0.
 */
#include "toeplitz.h"

/* Table size - 1 (a power of two - 1); set before load. */
const volatile __u32 bucket_mask = 0;
/* Workers (members 1..workers: bucket-steered frames; workers + 1..2 *
 * workers: override-steered ones); set before load. */
const volatile __u32 workers = 1;

#define CTX struct __sk_buff
#define LOAD bpf_skb_load_bytes
#define CTX_LEN(ctx) ((ctx)->len)
#include "classify.h"

#include "words.h"

SEC("socket")
int rsspp_fanout(struct __sk_buff *skb)
{
	struct hash_input in = {};
	struct flow_input f = {};
	__u32 proto = skb->protocol;
	__u32 off = 0, zero = 0, bucket, owner;
	int has_ports = 0, overridden, r;
	struct key_table *t;

	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr vh;

		if (bpf_skb_load_bytes(skb, 0, &vh, sizeof(vh)))
			return 0;
		proto = vh.encap_proto;
		off = sizeof(vh);
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		r = parse_v4(skb, off, &in, &has_ports);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		r = parse_v6(skb, off, &in, &has_ports);
		f.ipv6 = 1;
	} else {
		return 0;
	}
	if (r != PARSE_IP)
		return 0;
	f.addrs = in.bytes;
	if (has_ports)
		f.ports = f.ipv6 ? in.bytes + 32 : in.bytes + 8;

	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t)
		return 0;
	bucket = toeplitz_flow(t, &f) & bucket_mask;
	owner = take_owner(bucket, &in, &overridden);
	return owner && overridden ? owner + workers : owner;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
