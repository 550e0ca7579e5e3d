/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The XDP program of rsspp-runtime's afxdp backend: for each received
 * frame, the Toeplitz hash of its flow (rsspp-linux's toeplitz.h, the same
 * hash as rsspp_core::Toeplitz::hash_flow), its bucket, the bucket's owner,
 * and a redirect into that worker's AF_XDP socket on the queue the frame
 * came in on (xsks index = rx_queue_index * workers + worker).
 *
 * The per-bucket words are those of the fanout program (fanout.bpf.c), in
 * the same format: the owner in the top 16 bits (0: nobody, w + 1: worker
 * w), the number of the bucket's frames steered so far in the low 48, both
 * taken and advanced by one fetch-and-add, so that the controller's
 * compare-and-swap that changes the owner returns the mark of
 * rsspp_core::state::marks. The steering is done here, per bucket, rather
 * than by the NIC's indirection table: every worker has a socket on every
 * queue, all of a queue's sockets sharing one UMEM.
 *
 * The classification is the fanout program's (one function set, read
 * through bpf_xdp_load_bytes instead of bpf_skb_load_bytes), with up to two
 * VLAN tags in the frame skipped (nothing has taken one out before XDP).
 * Frames that are not IP, or malformed, are not counted; they and those of
 * a bucket nobody owns (before the start, during the final drain: counted,
 * as the fanout program's member 0) go on to the kernel's stack (XDP_PASS).
 */
#include "toeplitz.h"

#define WORD_OWNER_SHIFT 48

/* Table size - 1 (a power of two - 1); set before load. */
const volatile __u32 bucket_mask = 0;
/* Workers, each with a socket on every queue; set before load. */
const volatile __u32 workers = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_xsk_key SEC(".maps");

/* One word per bucket (see above); sized by the loader, mapped by it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_words SEC(".maps");

/* The sockets, queue-major; sized by the loader (queues * workers). */
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

SEC("xdp")
int rsspp_xsk(struct xdp_md *ctx)
{
	struct hash_input in = {};
	struct flow_input f = {};
	__be16 proto;
	__u32 off = 12, zero = 0, bucket, owner, slot;
	int has_ports = 0, r;
	struct key_table *t;
	__u64 *word, old;

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
	word = bpf_map_lookup_elem(&rsspp_words, &bucket);
	if (!word)
		return XDP_PASS;
	old = __sync_fetch_and_add(word, 1);
	owner = (__u32)(old >> WORD_OWNER_SHIFT);
	/* Nobody owns it (before the start, in the final drain). */
	if (owner == 0)
		return XDP_PASS;
	slot = ctx->rx_queue_index * workers + (owner - 1);
	/* A missing socket is the loader's bug: dropped, never passed, so
	 * that the frame counted for its owner is not seen twice. */
	return bpf_redirect_map(&rsspp_xsks, slot, XDP_DROP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
