/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The AF_PACKET fanout program of rsspp-runtime (PACKET_FANOUT_EBPF): for
 * each received frame, the Toeplitz hash of its flow (rsspp-linux's
 * toeplitz.h, the same hash as rsspp_core::Toeplitz::hash_flow), its bucket,
 * and the index of the fanout group's socket that owns the bucket.
 *
 * Each bucket is one 64-bit word of rsspp_words: the owning member's index
 * in the top 16 bits, the number of the bucket's frames steered so far in
 * the low 48. One fetch-and-add takes the owner and numbers the frame in a
 * single atomic step, so that the controller's compare-and-swap that
 * changes the owner returns exactly how many of the bucket's frames went to
 * the old owner (the mark of rsspp_core::state::marks).
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
 *
 * Per-flow overrides (rsspp nf --elephants on): in a bucket flagged in
 * rsspp_flagged, a flow found in rsspp_overrides (keyed by its hash input)
 * is steered by the word of its override slot s, words[buckets + s], in
 * the same format, instead of its bucket's: counted there, and sent to the
 * owner's second socket, member workers + owner (0 stays 0), so that its
 * worker knows which word numbered each frame it takes.
 */
#include "toeplitz.h"

#define WORD_OWNER_SHIFT 48

/* Table size - 1 (a power of two - 1); set before load. */
const volatile __u32 bucket_mask = 0;
/* Workers (members 1..workers: bucket-steered frames; workers + 1..2 *
 * workers: override-steered ones); set before load. */
const volatile __u32 workers = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_fanout_key SEC(".maps");

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

#define CTX struct __sk_buff
#define LOAD bpf_skb_load_bytes
#define CTX_LEN(ctx) ((ctx)->len)
#include "classify.h"

/*
 * Never read by the program: the loader's barrier. Writing a map-of-maps'
 * entry from user space returns only after an RCU grace period, so after
 * every run of this program (under rcu_read_lock in the fanout's demux)
 * that began before the write has ended: a flow looked up before an
 * override table write is counted before the mark read after it.
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

SEC("socket")
int rsspp_fanout(struct __sk_buff *skb)
{
	struct hash_input in = {};
	struct flow_input f = {};
	__u32 proto = skb->protocol;
	__u32 off = 0, zero = 0, bucket, index, owner;
	int has_ports = 0, r;
	struct key_table *t;
	__u32 *flagged, *slot;
	__u64 *word, old;

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

	t = bpf_map_lookup_elem(&rsspp_fanout_key, &zero);
	if (!t)
		return 0;
	bucket = toeplitz_flow(t, &f) & bucket_mask;
	flagged = bpf_map_lookup_elem(&rsspp_flagged, &bucket);
	if (flagged && *flagged) {
		slot = bpf_map_lookup_elem(&rsspp_overrides, &in);
		if (slot) {
			index = bucket_mask + 1 + *slot;
			word = bpf_map_lookup_elem(&rsspp_words, &index);
			if (!word)
				return 0;
			old = __sync_fetch_and_add(word, 1);
			owner = (__u32)(old >> WORD_OWNER_SHIFT);
			return owner ? owner + workers : 0;
		}
	}
	word = bpf_map_lookup_elem(&rsspp_words, &bucket);
	if (!word)
		return 0;
	old = __sync_fetch_and_add(word, 1);
	return (__u32)(old >> WORD_OWNER_SHIFT);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
