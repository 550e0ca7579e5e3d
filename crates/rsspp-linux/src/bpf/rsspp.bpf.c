// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * rsspp XDP programs: count packets per RSS bucket and, in software mode,
 * steer each bucket to the CPU its indirection-table entry names.
 *
 *   xdp_rsspp_steer  software RSS: Toeplitz hash -> bucket -> table -> CPUMAP
 *   xdp_rsspp_count  hardware RSS: the NIC spread the packets; count only,
 *                    bucket from the same Toeplitz hash with the NIC's key
 *   xdp_rsspp_rxh    as xdp_rsspp_count, with the NIC's own RX hash read
 *                    through the bpf_xdp_metadata_rx_hash kfunc. A kfunc
 *                    call forces the whole program to be device-bound, so it
 *                    lives apart from xdp_rsspp_count, which stays loadable
 *                    anywhere and testable with BPF_PROG_TEST_RUN.
 *
 * The loader (src/xdp/load.rs) sets the read-only globals below through
 * the skeleton before loading, sizes the maps and fills them. The Rust
 * side reads the counter indices and the key table's layout from the
 * skeleton's types (this object's BTF): they are defined here only.
 */
#include "parse.h"
#include "toeplitz.h"

/* Settings, in .rodata: set before load and frozen, so the verifier and
 * the JIT see constants rather than a map lookup per packet. */
const volatile __u32 bucket_mask = 0; /* table size - 1, a power of two - 1 */
const volatile __u32 default_cpu = 0; /* where frames without a hash go */
const volatile __u32 use_rx_hash = 0; /* xdp_rsspp_rxh: the NIC's hash */

/* Per-CPU counters of the packets kept out of the buckets; the key type
 * of rsspp_counters, which puts the enum in the BTF the skeleton exposes. */
enum rsspp_counter {
	COUNTER_NOT_IP = 0,	     /* ARP, LLDP, ... */
	COUNTER_MALFORMED = 1,	     /* truncated or invalid headers */
	COUNTER_REDIRECT_FAILED = 2, /* CPU not in the CPUMAP: passed */
	COUNTER_RX_HASH = 3,	     /* hashed by the NIC */
	COUNTER_RX_HASH_MISSING = 4, /* NIC gave no hash: Toeplitz instead */
	COUNTER_MAX = 5,
};

/* One value: the 36 x 256 table of the key (see toeplitz.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key_table);
} rsspp_key SEC(".maps");

/* The indirection table: bucket -> CPU. Sized by the loader to the table
 * (at most MAX_RETA_SIZE in src/xdp/options.rs), as are rsspp_buckets,
 * and rsspp_cpumap and rsspp_cpus to the possible CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_reta SEC(".maps");

/* CPU -> its kthread's queue. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} rsspp_cpumap SEC(".maps");

/* Packets per bucket, per CPU so that no increment is atomic. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_buckets SEC(".maps");

/* Packets steered to (steer) or counted on (count) each CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, enum rsspp_counter);
	__type(value, __u64);
} rsspp_counters SEC(".maps");

/* The kernel's enum; only its size matters here. */
enum xdp_rss_hash_type { XDP_RSS_TYPE_NONE = 0 };

/* Weak: kernels before 6.3 lack the kfunc, and a strong extern would make
 * libbpf refuse the whole object there, even with this program unloaded. */
extern int bpf_xdp_metadata_rx_hash(const struct xdp_md *ctx, __u32 *hash,
				    enum xdp_rss_hash_type *rss_type) __ksym __weak;

static __always_inline void count(void *map, __u32 key)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);

	if (v)
		*v += 1;
}

static __always_inline void count_unhashed(int res)
{
	count(&rsspp_counters,
	      res == PARSE_NOT_IP ? COUNTER_NOT_IP : COUNTER_MALFORMED);
}

SEC("xdp")
int xdp_rsspp_steer(struct xdp_md *ctx)
{
	const struct key_table *t;
	struct flow_input f;
	__u32 zero = 0, cpu, bucket, *entry;
	long action;
	int res;

	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t) /* cannot happen: index 0 of an array */
		return XDP_PASS;

	res = parse_flow(ctx, &f);
	if (res == PARSE_IP) {
		bucket = toeplitz_flow(t, &f) & bucket_mask;
		count(&rsspp_buckets, bucket);
		entry = bpf_map_lookup_elem(&rsspp_reta, &bucket);
		cpu = entry ? *entry : default_cpu;
	} else {
		count_unhashed(res);
		cpu = default_cpu;
	}

	/* With XDP_PASS in the flags the helper returns XDP_PASS instead of
	 * XDP_ABORTED when the CPU has no CPUMAP entry: the packet stays on
	 * this CPU rather than being dropped. */
	action = bpf_redirect_map(&rsspp_cpumap, cpu, XDP_PASS);
	if (action != XDP_REDIRECT) {
		count(&rsspp_counters, COUNTER_REDIRECT_FAILED);
		cpu = bpf_get_smp_processor_id();
	}
	count(&rsspp_cpus, cpu);
	return action;
}

/* The counting path both hardware-mode programs share. */
static __always_inline int count_packet(struct xdp_md *ctx,
					const struct key_table *t,
					int have_nic_hash, __u32 nic_hash)
{
	struct flow_input f;
	__u32 hash;
	int res;

	/* Parsed even with the NIC's hash, so that non-IP and malformed frames
	 * are classified alike in every mode. */
	res = parse_flow(ctx, &f);
	if (res == PARSE_IP) {
		hash = have_nic_hash ? nic_hash : toeplitz_flow(t, &f);
		count(&rsspp_buckets, hash & bucket_mask);
	} else {
		count_unhashed(res);
	}
	/* The NIC chose the queue, hence the CPU running this program. */
	count(&rsspp_cpus, bpf_get_smp_processor_id());
	return XDP_PASS;
}

SEC("xdp")
int xdp_rsspp_count(struct xdp_md *ctx)
{
	const struct key_table *t;
	__u32 zero = 0;

	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t)
		return XDP_PASS;
	return count_packet(ctx, t, 0, 0);
}

SEC("xdp")
int xdp_rsspp_rxh(struct xdp_md *ctx)
{
	const struct key_table *t;
	enum xdp_rss_hash_type type;
	__u32 zero = 0, nic_hash = 0;
	int have = 0;

	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t)
		return XDP_PASS;
	if (use_rx_hash && bpf_ksym_exists(bpf_xdp_metadata_rx_hash)) {
		/* Fails (-ENODATA, -EOPNOTSUPP) when the driver or this
		 * packet has no hash: fall back to the Toeplitz hash. */
		have = bpf_xdp_metadata_rx_hash(ctx, &nic_hash, &type) == 0;
		count(&rsspp_counters,
		      have ? COUNTER_RX_HASH : COUNTER_RX_HASH_MISSING);
	}
	return count_packet(ctx, t, have, nic_hash);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
