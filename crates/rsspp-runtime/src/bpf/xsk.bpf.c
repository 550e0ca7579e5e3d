/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The XDP program of rsspp-runtime's afxdp backend: for each received
 * frame, the Toeplitz hash of its flow (rsspp-linux's toeplitz.h, the same
 * hash as rsspp_core::Toeplitz::hash_flow), its bucket, the bucket's owner,
 * and a redirect into that worker's AF_XDP socket on the queue the frame
 * came in on (xsks index = rx_queue_index * queue_sockets + worker).
 *
 * The per-bucket words, and the per-flow overrides that steer a few flows
 * by words of their own (rsspp nf --elephants on), are words.h's, shared
 * with the fanout program, so that the controller's counted-mark handoff
 * is the same for both backends. The steering is done here, per bucket,
 * rather than by the NIC's indirection table: every worker has a socket on
 * every queue (two with overrides: the second takes the frames an override
 * steered), all of a queue's sockets sharing one UMEM. A queue's sockets
 * are, in order, each worker's bucket-steered one, then each worker's
 * override-steered one.
 *
 * The classification is the fanout program's (one function set, read
 * through bpf_xdp_load_bytes instead of bpf_skb_load_bytes), with up to two
 * VLAN tags in the frame skipped (nothing has taken one out before XDP).
 * Frames that are not IP, or malformed, are not counted; they and those of
 * a bucket nobody owns (before the start, during the final drain: counted,
 * as the fanout program's member 0) go on to the kernel's stack (XDP_PASS).
 */
#include "toeplitz.h"

/* Table size - 1 (a power of two - 1); set before load. */
const volatile __u32 bucket_mask = 0;
/* Workers, each with a socket on every queue; set before load. */
const volatile __u32 workers = 1;
/* Sockets of a queue: workers, or 2 * workers with overrides; set before
 * load. */
const volatile __u32 queue_sockets = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_xsk_key SEC(".maps");

/* The sockets, queue-major; sized by the loader (queues * queue_sockets). */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_xsks SEC(".maps");

#define CTX struct xdp_md
#define LOAD bpf_xdp_load_bytes
#define CTX_LEN(ctx) bpf_xdp_get_buff_len(ctx)
#include "classify.h"

#include "words.h"

SEC("xdp")
int rsspp_xsk(struct xdp_md *ctx)
{
	struct hash_input in = {};
	struct flow_input f = {};
	__be16 proto;
	__u32 off = 12, zero = 0, bucket, owner, slot;
	int has_ports = 0, overridden, r;
	struct key_table *t;

	if (bpf_xdp_load_bytes(ctx, off, &proto, sizeof(proto)))
		return XDP_PASS;
	off += sizeof(proto);
#pragma unroll
	for (int i = 0; i < VLAN_MAX_DEPTH; i++) {
		struct vlan_hdr vh;

		if (proto != bpf_htons(ETH_P_8021Q) &&
		    proto != bpf_htons(ETH_P_8021AD))
			break;
		/* The tag's TCI, then the protocol it encloses. */
		if (bpf_xdp_load_bytes(ctx, off, &vh, sizeof(vh)))
			return XDP_PASS;
		proto = vh.encap_proto;
		off += sizeof(vh);
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		r = parse_v4(ctx, off, &in, &has_ports);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		r = parse_v6(ctx, off, &in, &has_ports);
		f.ipv6 = 1;
	} else {
		return XDP_PASS;
	}
	if (r != PARSE_IP)
		return XDP_PASS;
	f.addrs = in.bytes;
	if (has_ports)
		f.ports = f.ipv6 ? in.bytes + 32 : in.bytes + 8;

	t = bpf_map_lookup_elem(&rsspp_xsk_key, &zero);
	if (!t)
		return XDP_PASS;
	bucket = toeplitz_flow(t, &f) & bucket_mask;
	owner = take_owner(bucket, &in, &overridden);
	/* Nobody owns it (before the start, in the final drain). */
	if (owner == 0)
		return XDP_PASS;
	slot = ctx->rx_queue_index * queue_sockets + (owner - 1);
	if (overridden)
		slot += workers;
	/* A missing socket is the loader's bug: dropped, never passed, so
	 * that the frame counted for its owner is not seen twice. */
	return bpf_redirect_map(&rsspp_xsks, slot, XDP_DROP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
