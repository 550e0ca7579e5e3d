// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Affinity-Accept's connection placement on stock Linux: a
 * BPF_PROG_TYPE_SK_REUSEPORT program, attached to a SO_REUSEPORT group of
 * one listener per worker core, runs on the CPU that processes a new
 * connection's SYN and picks the listener of the CPU the connection's
 * bucket maps to:
 *
 *   bucket = Toeplitz(saddr, daddr, sport, dport) & bucket_mask
 *   cpu    = rsspp_reta[bucket] & 0xffff
 *   socket = accept_socks[accept_workers[cpu] - 1]
 *
 * The table's entries have the layout of rsspp's XDP steering table (the
 * CPU in the low 16 bits; the daemon keeps a moving bucket's next CPU
 * above), so that the loader can hand this program either a table of its
 * own or the daemon's table map itself, with the daemon's key map. The two
 * maps carry the daemon's names (rsspp_reta, rsspp_key): libbpf renames a
 * map whose fd it reuses after the map it reuses, and the skeleton finds
 * its maps by name.
 *
 * Anything else (not IPv4, a CPU without a worker, a failed selection)
 * returns SK_PASS without a selection: the kernel then picks a listener by
 * its own hash, as plain SO_REUSEPORT does. Each outcome is counted.
 */
#include "toeplitz.h"

/* Set by the loader: table size - 1. */
const volatile __u32 bucket_mask = 0;

enum select_counter {
	SELECT_TABLE = 0,   /* the bucket's CPU's listener was selected */
	SELECT_NOT_IPV4,    /* not IPv4 TCP: the kernel's hash */
	SELECT_NO_WORKER,   /* the bucket's CPU has no listener: the kernel's hash */
	SELECT_FAILED,      /* bpf_sk_select_reuseport refused: the kernel's hash */
	SELECT_COUNTER_MAX,
};

/* The 36 x 256 table of the Toeplitz key (see toeplitz.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_key SEC(".maps");

/* bucket -> CPU (low 16 bits). Sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_reta SEC(".maps");

/* CPU -> its listener's index in accept_socks, plus one (0: none). Sized by
 * the loader to the possible CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} accept_workers SEC(".maps");

/* The listeners, one per worker. Sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} accept_socks SEC(".maps");

/* Connections by how they were placed; per bucket below. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SELECT_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} accept_counters SEC(".maps");

static __always_inline int pass(__u32 counter)
{
	__u64 *v = bpf_map_lookup_elem(&accept_counters, &counter);

	if (v)
		*v += 1;
	return SK_PASS;
}

SEC("sk_reuseport")
int rsspp_select(struct sk_reuseport_md *ctx)
{
	const struct key_table *key;
	__u32 zero = 0, bucket, *entry, *worker, index;
	__u8 in[12];
	__u32 h;

	if (ctx->eth_protocol != bpf_htons(ETH_P_IP) ||
	    ctx->ip_protocol != IPPROTO_TCP)
		return pass(SELECT_NOT_IPV4);
	/* Source and destination addresses, from the IP header. */
	if (bpf_skb_load_bytes_relative(ctx, 12 /* saddr */, in,
					8, BPF_HDR_START_NET))
		return pass(SELECT_NOT_IPV4);
	/* The ports: the TCP header is where ctx->data points. */
	if (bpf_skb_load_bytes(ctx, 0, in + 8, 4))
		return pass(SELECT_NOT_IPV4);
	key = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!key)
		return pass(SELECT_FAILED);
	h = toeplitz_run(key, in, 0, 12);
	bucket = h & bucket_mask;
	entry = bpf_map_lookup_elem(&rsspp_reta, &bucket);
	if (!entry)
		return pass(SELECT_NO_WORKER);
	index = *entry & 0xffff;
	worker = bpf_map_lookup_elem(&accept_workers, &index);
	if (!worker || !*worker)
		return pass(SELECT_NO_WORKER);
	index = *worker - 1;
	if (bpf_sk_select_reuseport(ctx, &accept_socks, &index, 0))
		return pass(SELECT_FAILED);
	pass(SELECT_TABLE);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
