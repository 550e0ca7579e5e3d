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
 * The classification is the fanout program's (xdp_flow.h: one function
 * set, read through bpf_xdp_load_bytes instead of bpf_skb_load_bytes),
 * with up to two VLAN tags in the frame skipped (nothing has taken one out
 * before XDP).
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

/* The sockets, queue-major; sized by the loader (queues * queue_sockets). */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_xsks SEC(".maps");

#include "xdp_flow.h"
#include "words.h"

SEC("xdp")
int rsspp_xsk(struct xdp_md *ctx)
{
	struct hash_input in = {};
	__u32 zero = 0, hash, bucket, owner, slot;
	int overridden;
	struct key_table *t;

	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t || xdp_flow_hash(ctx, t, &in, &hash))
		return XDP_PASS;
	bucket = hash & bucket_mask;
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
