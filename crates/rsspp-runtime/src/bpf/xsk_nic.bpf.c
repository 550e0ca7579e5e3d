/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The XDP program of rsspp-runtime's afxdp backend in hardware mode
 * (rsspp nf --mode hardware): the NIC's RSS spreads frames over its
 * queues, worker w holding queue w, and the controller rewrites the NIC's
 * indirection table; this program only counts and hands each frame to its
 * queue's socket (xsks index = rx_queue_index).
 *
 * The bucket is the NIC's: the low bits of the NIC's own RSS hash, read
 * through bpf_xdp_metadata_rx_hash (rsspp_xsk_nic_rxh, loaded bound to the
 * device) and handed to the worker in the frame's metadata; where the
 * driver gives none, the flow's Toeplitz hash under the NIC's key
 * (xdp_flow.h, the software mode's classification; rsspp_xsk_nic). Its word
 * (words.h's format: owner in the top 16 bits, count below) numbers only
 * the frames that arrive on the owner's queue, so that the controller's
 * compare-and-swap of the owner returns how many of the bucket's frames
 * went to the old worker, as in software mode. A move writes the NIC's
 * table first, waits until the old queue has passed every frame it held
 * (the controller's fence), and switches the word after: a frame of the
 * bucket that arrives in between on the new worker's queue, while the word
 * still names the old worker, is counted in rsspp_early instead (the
 * controller adds that count to the new worker's marks), and parked by the
 * new worker, which expects the bucket. A frame that comes on a queue the
 * table no longer names once the word has left that queue's worker came
 * after its fence: counted in rsspp_late (it reaches its worker as a
 * stray, or too late for the mark).
 *
 * rsspp_queue_frames counts every frame each queue's XDP run saw: the
 * controller's fence. Frames that are not IP, or malformed, and frames of
 * a bucket nobody owns (before the start, in the final drain; counted in
 * the word) go on to the kernel's stack (XDP_PASS), as do frames of a
 * queue no worker holds.
 */
#include "toeplitz.h"

/* Table size - 1 (the NIC's table size, a power of two, - 1); set before
 * load. */
const volatile __u32 bucket_mask = 0;

/* One socket per worker's queue; sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_xsks SEC(".maps");

/* Per bucket: frames that came on a queue other than its owner's. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_early SEC(".maps");

/* Per bucket: the queue the NIC's table names, as the controller last
 * wrote it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_nic_queue SEC(".maps");

/* Frames that came on a queue the NIC's table no longer names, after the
 * word left its worker: a fence that passed too soon (entry 0). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_late SEC(".maps");

/* Per queue: frames seen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_queue_frames SEC(".maps");

/* Frames bucketed by the NIC's own hash (entry 0), by the Toeplitz hash
 * computed here (entry 1). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_hashes SEC(".maps");

#include "xdp_flow.h"
#include "words.h"

/* The kernel's enum; only its size matters here. */
enum xdp_rss_hash_type { XDP_RSS_TYPE_NONE = 0 };

/* Weak: kernels before 6.3 lack the kfunc (rsspp_xsk_nic runs there). */
extern int bpf_xdp_metadata_rx_hash(const struct xdp_md *ctx, __u32 *hash,
				    enum xdp_rss_hash_type *rss_type) __ksym __weak;

/* The metadata before a frame whose bucket is the NIC's hash: the hash,
 * then this, for the worker (see rsspp-runtime's afxdp.rs). */
#define RX_HASH_MAGIC 0x52535348u

static __always_inline int steer(struct xdp_md *ctx, int rx_hash)
{
	struct hash_input in = {};
	__u32 zero = 0, one = 1, queue = ctx->rx_queue_index, hash, nic_hash = 0, bucket, owner;
	enum xdp_rss_hash_type type;
	struct key_table *t;
	__u64 *seen, *word, *early, *named, *late, *used, old;
	int have = 0;

	seen = bpf_map_lookup_elem(&rsspp_queue_frames, &queue);
	if (!seen)
		return XDP_PASS;
	__sync_fetch_and_add(seen, 1);
	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t || xdp_flow_hash(ctx, t, &in, &hash))
		return XDP_PASS;
	/* The NIC's hash where the driver gives it (it fails with -ENODATA
	 * or -EOPNOTSUPP otherwise): the NIC chose the queue by it. */
	if (rx_hash && bpf_ksym_exists(bpf_xdp_metadata_rx_hash))
		have = bpf_xdp_metadata_rx_hash(ctx, &nic_hash, &type) == 0;
	if (have)
		hash = nic_hash;
	used = bpf_map_lookup_elem(&rsspp_hashes, have ? &zero : &one);
	if (used)
		__sync_fetch_and_add(used, 1);
	bucket = hash & bucket_mask;
	word = bpf_map_lookup_elem(&rsspp_words, &bucket);
	early = bpf_map_lookup_elem(&rsspp_early, &bucket);
	named = bpf_map_lookup_elem(&rsspp_nic_queue, &bucket);
	late = bpf_map_lookup_elem(&rsspp_late, &zero);
	if (!word || !early || !named || !late)
		return XDP_PASS;
	/* Numbered only if the word names this queue's worker: a
	 * compare-and-swap, retried if the controller switched the word in
	 * between (it does so rarely; one queue's runs never race). */
#pragma unroll
	for (int i = 0; i < 4; i++) {
		old = *(volatile __u64 *)word;
		owner = (__u32)(old >> WORD_OWNER_SHIFT);
		if (owner == 0) {
			__sync_fetch_and_add(word, 1);
			return XDP_PASS;
		}
		if (owner != queue + 1) {
			if (*named == queue)
				__sync_fetch_and_add(early, 1);
			else
				__sync_fetch_and_add(late, 1);
			break;
		}
		if (__sync_val_compare_and_swap(word, old, old + 1) == old)
			break;
	}
	/* The NIC's hash goes with the frame, so that its worker buckets it
	 * as this program did (a frame without it: the worker's Toeplitz,
	 * the same as this program's). */
	if (have && bpf_xdp_adjust_meta(ctx, -8) == 0) {
		__u32 *meta = (void *)(long)ctx->data_meta;

		if ((void *)(meta + 2) <= (void *)(long)ctx->data) {
			meta[0] = hash;
			meta[1] = RX_HASH_MAGIC;
		}
	}
	return bpf_redirect_map(&rsspp_xsks, queue, XDP_PASS);
}

SEC("xdp")
int rsspp_xsk_nic(struct xdp_md *ctx)
{
	return steer(ctx, 0);
}

/* Bound to the device at load (the kfunc is the driver's). */
SEC("xdp")
int rsspp_xsk_nic_rxh(struct xdp_md *ctx)
{
	return steer(ctx, 1);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
