// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * rsspp XDP programs: count packets per RSS bucket and, in software mode,
 * steer each bucket to the CPU its indirection-table entry names.
 *
 *   xdp_rsspp_steer  software RSS: Toeplitz hash -> bucket -> (a flow's
 *                    override, or) table -> CPUMAP
 *   xdp_rsspp_dequeue  runs on each steering CPU as its CPUMAP thread
 *                    dequeues a frame: notes how far a bucket in handoff
 *                    has drained (see "Order-preserving moves" below)
 *   rsspp_cpumap_drops  the xdp:xdp_cpumap_enqueue tracepoint: frames our
 *                    CPUMAP dropped because a CPU's queue was full
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

#define READ_ONCE(x) (*(const volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

/* Settings, in .rodata: set before load and frozen, so the verifier and
 * the JIT see constants rather than a map lookup per packet. */
const volatile __u32 bucket_mask = 0; /* table size - 1, a power of two - 1 */
const volatile __u32 default_cpu = 0; /* where frames without a hash go */
const volatile __u32 use_rx_hash = 0; /* xdp_rsspp_rxh: the NIC's hash */
/* A bucket in handoff switches CPU only this long after the old CPU
 * dequeued its last frame: the time that CPU's thread takes to pass the
 * rest of its batch (at most 8 frames) up the stack. */
const volatile __u32 handoff_guard_ns = 0;
/* Override slots (rows of rsspp_override_packets). */
const volatile __u32 override_slots = 1;

/* Per-CPU counters of the packets kept out of the buckets; the key type
 * of rsspp_counters, which puts the enum in the BTF the skeleton exposes. */
enum rsspp_counter {
	COUNTER_NOT_IP = 0,	     /* ARP, LLDP, ... */
	COUNTER_MALFORMED = 1,	     /* truncated or invalid headers */
	COUNTER_REDIRECT_FAILED = 2, /* CPU not in the CPUMAP: passed */
	COUNTER_RX_HASH = 3,	     /* hashed by the NIC */
	COUNTER_RX_HASH_MISSING = 4, /* NIC gave no hash: Toeplitz instead */
	COUNTER_HANDOFF_SWITCHED = 5, /* buckets switched CPU once drained */
	COUNTER_HANDOFF_HELD = 6,     /* frames kept on the old CPU meanwhile */
	COUNTER_HANDOFF_NO_META = 7,  /* no room for the stamp: not tracked */
	COUNTER_OVERRIDDEN = 8,	      /* frames steered by a flow's override */
	COUNTER_MAX = 9,
};

/*
 * Order-preserving moves. An entry of rsspp_reta holds the CPU in its low
 * 16 bits; a move writes the new CPU + 1 into the high 16 bits, and the
 * bucket stays on its old CPU until that CPU has drained it: every frame
 * sent there meanwhile carries a stamp in its XDP metadata (the bucket and
 * a sequence number), which xdp_rsspp_dequeue notes as the old CPU's
 * thread dequeues it. Once the last stamped frame has been dequeued (and
 * handoff_guard_ns has passed), no frame of the bucket waits in the old
 * CPU's queue: the next frame switches the entry to the new CPU. A frame
 * of a flow can then never overtake an earlier one because its bucket
 * moved. The daemon completes a handoff that never drains (the old CPU
 * dropped the last stamped frame and the bucket went quiet) after a
 * timeout.
 */
#define RETA_CPU_MASK 0xffff
#define RETA_NEXT_SHIFT 16

struct handoff {
	__u64 enq_seq; /* stamps handed out (the last one sent to the old CPU) */
	__u64 deq_seq; /* the last stamp the old CPU dequeued */
	__u64 deq_ns;  /* when */
};

#define STAMP_MAGIC 0x72737370 /* "rssp" */

/* In the XDP metadata area, just before the frame. */
struct stamp {
	__u32 magic;
	__u32 bucket;
	__u64 seq;
};

/*
 * Per-flow overrides ("elephants inside buckets"). A bucket's flags (one
 * word a bucket, written by the daemon) say whether any of its flows has an
 * override (BUCKET_OVERRIDES: look the flow up in rsspp_overrides before
 * the table) and whether its flows are counted one by one (BUCKET_HOT: the
 * daemon looks for elephants there). A flow of a bucket with no flag costs
 * one array read. An override's entry has the table's format (CPU, and the
 * next CPU + 1 while it moves) and moves the same way, its handoff state
 * at rsspp_handoff[table size + slot].
 */
#define BUCKET_HOT 1
#define BUCKET_OVERRIDES 2

/* The hash input of a flow, as it is in the packet (addresses, then ports
 * when it has them), zero-padded; `kind` tells the layouts apart. */
#define FLOW_KEY_WORDS 9
#define FLOW_IPV6 1
#define FLOW_PORTS 2
struct flow_key {
	__u32 w[FLOW_KEY_WORDS];
	__u32 kind;
};

struct flow_override {
	__u32 entry; /* as rsspp_reta's */
	__u32 slot;  /* its handoff state and packet counters */
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

/* Per bucket: BUCKET_HOT, BUCKET_OVERRIDES; sized as rsspp_reta. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_bucket_flags SEC(".maps");

/* Flows steered on their own; sized by the loader (--max-overrides, with
 * room: an LRU map may evict before it is full). Written by the daemon
 * only: the program looks up and switches entries in place. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct flow_key);
	__type(value, struct flow_override);
} rsspp_overrides SEC(".maps");

/* Packets of each override slot, one row of the slots per CPU (as
 * rsspp_buckets); memory-mapped by the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_override_packets SEC(".maps");

/* Packets per flow of the hot buckets, since the daemon last read them
 * (it reads and deletes them each round). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct flow_key);
	__type(value, __u64);
} rsspp_flow_packets SEC(".maps");

/* Per bucket, then per override slot: how far a handoff has drained;
 * sized to the table plus the override slots. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct handoff);
} rsspp_handoff SEC(".maps");

/* CPU -> its kthread's queue, and xdp_rsspp_dequeue. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} rsspp_cpumap SEC(".maps");

/* Packets per bucket, one row of the table's size per CPU: CPU c counts
 * bucket b at c * table size + b, so that no increment is atomic (each CPU
 * writes its own row) and the daemon reads the whole map through a memory
 * mapping rather than one copy per entry (a 65,536-bucket table costs
 * microseconds instead of milliseconds a round). Sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
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

/* Frames our CPUMAP dropped, by the CPU they were for (queue full). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rsspp_cpumap_drops SEC(".maps");

/* The kernel's id of rsspp_cpumap, written by the loader: the tracepoint
 * fires for every CPUMAP on the machine. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rsspp_cpumap_id SEC(".maps");

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

/* This CPU's count of `bucket`. */
static __always_inline void count_bucket(__u32 bucket)
{
	count(&rsspp_buckets,
	      bpf_get_smp_processor_id() * (bucket_mask + 1) + bucket);
}

static __always_inline void count_unhashed(int res)
{
	count(&rsspp_counters,
	      res == PARSE_NOT_IP ? COUNTER_NOT_IP : COUNTER_MALFORMED);
}

/* A frame of handoff state `bucket` (a bucket, or table size + an override
 * slot), whose entry `e` names a new CPU: the CPU it goes to (see
 * "Order-preserving moves" above). */
static __always_inline __u32 handoff(struct xdp_md *ctx, __u32 *entry,
				     __u32 e, __u32 bucket)
{
	__u32 old = e & RETA_CPU_MASK, next = (e >> RETA_NEXT_SHIFT) - 1;
	struct handoff *h;
	struct stamp *st;
	__u64 seq;

	h = bpf_map_lookup_elem(&rsspp_handoff, &bucket);
	if (!h)
		return old;
	seq = READ_ONCE(h->enq_seq);
	if (seq && READ_ONCE(h->deq_seq) == seq &&
	    bpf_ktime_get_ns() - READ_ONCE(h->deq_ns) >= handoff_guard_ns) {
		/* Drained: switch. If the entry changed meanwhile (the daemon
		 * completed or redirected the move), follow what it says now:
		 * its CPU, the next frame taking the handoff from there. */
		__u32 was = __sync_val_compare_and_swap(entry, e, next);

		if (was != e)
			return was & RETA_CPU_MASK;
		count(&rsspp_counters, COUNTER_HANDOFF_SWITCHED);
		return next;
	}
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct stamp)) < 0) {
		count(&rsspp_counters, COUNTER_HANDOFF_NO_META);
		return old;
	}
	st = (void *)(long)ctx->data_meta;
	if ((void *)(st + 1) > (void *)(long)ctx->data)
		return old;
	st->magic = STAMP_MAGIC;
	st->bucket = bucket;
	st->seq = __sync_fetch_and_add(&h->enq_seq, 1) + 1;
	count(&rsspp_counters, COUNTER_HANDOFF_HELD);
	return old;
}

/* The flow's hash input as a map key. */
static __always_inline void flow_key_of(const struct flow_input *f,
					struct flow_key *k)
{
	const __u32 *a = (const __u32 *)f->addrs;
	const __u32 *p = (const __u32 *)f->ports;

	__builtin_memset(k, 0, sizeof(*k));
	if (f->ipv6) {
#pragma unroll
		for (int i = 0; i < 8; i++)
			k->w[i] = a[i];
		if (p) {
			k->w[8] = p[0];
			k->kind = FLOW_IPV6 | FLOW_PORTS;
		} else {
			k->kind = FLOW_IPV6;
		}
	} else {
		k->w[0] = a[0];
		k->w[1] = a[1];
		if (p) {
			k->w[2] = p[0];
			k->kind = FLOW_PORTS;
		}
	}
}

/* One more packet of a flow of a hot bucket. */
static __always_inline void count_flow(const struct flow_key *k)
{
	__u64 one = 1, *v;

	v = bpf_map_lookup_elem(&rsspp_flow_packets, k);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		bpf_map_update_elem(&rsspp_flow_packets, k, &one, BPF_NOEXIST);
}

/* The override of a flow of a flagged bucket, if it has one (its packet
 * counted in its slot's row of this CPU); else NULL, and the flow counted
 * if its bucket is hot. */
static __always_inline struct flow_override *
flow_override(const struct flow_input *f, __u32 flags)
{
	struct flow_override *o;
	struct flow_key k;
	__u32 slot;

	flow_key_of(f, &k);
	if (flags & BUCKET_OVERRIDES) {
		o = bpf_map_lookup_elem(&rsspp_overrides, &k);
		if (o) {
			slot = o->slot;
			if (slot < override_slots)
				count(&rsspp_override_packets,
				      bpf_get_smp_processor_id() *
						      override_slots +
					      slot);
			count(&rsspp_counters, COUNTER_OVERRIDDEN);
			return o;
		}
	}
	if (flags & BUCKET_HOT)
		count_flow(&k);
	return NULL;
}

/* The CPU of a flow of a flagged bucket if it has an override, else -1. */
static __always_inline long flow_cpu(struct xdp_md *ctx,
				     const struct flow_input *f, __u32 flags)
{
	struct flow_override *o = flow_override(f, flags);
	__u32 e;

	if (!o)
		return -1;
	e = READ_ONCE(o->entry);
	if (e >> RETA_NEXT_SHIFT)
		return handoff(ctx, &o->entry, e, bucket_mask + 1 + o->slot);
	return e;
}

SEC("xdp")
int xdp_rsspp_steer(struct xdp_md *ctx)
{
	const struct key_table *t;
	struct flow_input f;
	__u32 zero = 0, cpu, bucket, e, *entry, *flags;
	long over;
	long action;
	int res;

	t = bpf_map_lookup_elem(&rsspp_key, &zero);
	if (!t) /* cannot happen: index 0 of an array */
		return XDP_PASS;

	res = parse_flow(ctx, &f);
	if (res == PARSE_IP) {
		bucket = toeplitz_flow(t, &f) & bucket_mask;
		count_bucket(bucket);
		flags = bpf_map_lookup_elem(&rsspp_bucket_flags, &bucket);
		over = flags && *flags ? flow_cpu(ctx, &f, *flags) : -1;
		if (over >= 0) {
			cpu = over;
		} else if ((entry = bpf_map_lookup_elem(&rsspp_reta, &bucket))) {
			e = READ_ONCE(*entry);
			cpu = e >> RETA_NEXT_SHIFT ? handoff(ctx, entry, e, bucket)
						   : e;
		} else {
			cpu = default_cpu;
		}
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

/* On the steering CPU, as its CPUMAP thread dequeues a frame: a stamped
 * frame's bucket has drained up to its sequence number. */
SEC("xdp/cpumap")
int xdp_rsspp_dequeue(struct xdp_md *ctx)
{
	struct stamp *st = (void *)(long)ctx->data_meta;
	struct handoff *h;
	__u32 bucket;

	if ((void *)(st + 1) > (void *)(long)ctx->data ||
	    st->magic != STAMP_MAGIC)
		return XDP_PASS;
	/* A bucket or an override slot: the lookup checks the bounds. */
	bucket = st->bucket;
	h = bpf_map_lookup_elem(&rsspp_handoff, &bucket);
	if (h) {
		WRITE_ONCE(h->deq_ns, bpf_ktime_get_ns());
		/* An atomic exchange orders the time before the sequence
		 * number, which the steering program reads first. */
		__sync_lock_test_and_set(&h->deq_seq, st->seq);
	}
	return XDP_PASS;
}

/* Frames our CPUMAP dropped at a full queue, by target CPU. */
SEC("raw_tp/xdp_cpumap_enqueue")
int rsspp_cpumap_drops_tp(__u64 *ctx)
{
	/* (int map_id, unsigned int processed, unsigned int drops,
	 *  int to_cpu) */
	__u32 zero = 0, map_id = ctx[0], drops = ctx[2], to_cpu = ctx[3];
	__u32 *ours;
	__u64 *v;

	ours = bpf_map_lookup_elem(&rsspp_cpumap_id, &zero);
	if (!ours || *ours != map_id || !drops)
		return 0;
	v = bpf_map_lookup_elem(&rsspp_cpumap_drops, &to_cpu);
	if (v)
		*v += drops;
	return 0;
}

/* The counting path both hardware-mode programs share. */
static __always_inline int count_packet(struct xdp_md *ctx,
					const struct key_table *t,
					int have_nic_hash, __u32 nic_hash)
{
	struct flow_input f;
	__u32 bucket, *flags;
	int res;

	/* Parsed even with the NIC's hash, so that non-IP and malformed frames
	 * are classified alike in every mode. */
	res = parse_flow(ctx, &f);
	if (res == PARSE_IP) {
		bucket = (have_nic_hash ? nic_hash : toeplitz_flow(t, &f)) &
			 bucket_mask;
		count_bucket(bucket);
		/* Flows of hot buckets counted, overridden ones (the NIC's
		 * ntuple rules steer them) counted in their slots. */
		flags = bpf_map_lookup_elem(&rsspp_bucket_flags, &bucket);
		if (flags && *flags)
			flow_override(&f, *flags);
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
