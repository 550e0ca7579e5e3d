/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The per-bucket words and the per-flow overrides shared by rsspp-runtime's
 * programs (the fanout program and the afxdp backend's XDP program), and
 * the one step both take per frame: find the word that steers it, count
 * the frame there and read the word's owner.
 *
 * Each bucket is one 64-bit word of rsspp_words: the owner in the top 16
 * bits (0: nobody, w + 1: worker w), the number of the bucket's frames
 * steered so far in the low 48. One fetch-and-add takes the owner and
 * numbers the frame in a single atomic step, so that the controller's
 * compare-and-swap that changes the owner returns exactly how many of the
 * bucket's frames went to the old owner (the mark of
 * rsspp_core::state::marks).
 *
 * Per-flow overrides (rsspp nf --elephants on): in a bucket flagged in
 * rsspp_flagged, a flow found in rsspp_overrides (keyed by its hash input)
 * is steered by the word of its override slot s, words[buckets + s], in
 * the same format, instead of its bucket's: counted there, and handed to
 * the owner's second socket, so that its worker knows which word numbered
 * each frame it takes.
 *
 * Include after classify.h (struct hash_input); the includer defines
 * bucket_mask.
 */
#ifndef RSSPP_RUNTIME_WORDS_H
#define RSSPP_RUNTIME_WORDS_H

#define WORD_OWNER_SHIFT 48

/* One word per bucket, then one per override slot (see above); sized by
 * the loader, mapped by it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_words SEC(".maps");

/* Per bucket: nonzero when some of its flows have an override. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_flagged SEC(".maps");

/*
 * Never read by the programs: the loader's barrier. Writing a map-of-maps'
 * entry from user space returns only after an RCU grace period, so after
 * every run of a program (under rcu_read_lock: the fanout's demux, XDP's
 * NAPI poll) that began before the write has ended: a flow looked up
 * before an override table write is counted before the mark read after it.
 */
struct barrier_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_barrier_inner SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct barrier_inner);
} rsspp_barrier SEC(".maps");

/* Flow (its hash input) → override slot; sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct hash_input);
	__type(value, __u32);
} rsspp_overrides SEC(".maps");

/*
 * Counts a frame of `bucket` (hash input `in`) in the word that steers it
 * and returns that word's owner (0: nobody); *overridden says whether an
 * override's word did. Returns 0 when a word is missing (the loader's bug).
 */
static __always_inline __u32 take_owner(__u32 bucket, struct hash_input *in,
					int *overridden)
{
	__u32 *flagged, *slot, index = bucket;
	__u64 *word, old;

	*overridden = 0;
	flagged = bpf_map_lookup_elem(&rsspp_flagged, &bucket);
	if (flagged && *flagged) {
		slot = bpf_map_lookup_elem(&rsspp_overrides, in);
		if (slot) {
			index = bucket_mask + 1 + *slot;
			*overridden = 1;
		}
	}
	word = bpf_map_lookup_elem(&rsspp_words, &index);
	if (!word)
		return 0;
	old = __sync_fetch_and_add(word, 1);
	return (__u32)(old >> WORD_OWNER_SHIFT);
}

#endif
