//! Lookup plus update of an existing flow at 100k flows: one flow table, a
//! per-bucket worker (512 tables), and the shared lock-striped table
//! (uncontended, single thread).
//!
//! The flows are drawn uniformly at random, and their keys are read from a
//! pre-drawn stream in order, as a receive path reads packets from its ring:
//! what is measured is the table access, not a random fetch of the key.
//!
//! `cargo bench -p rsspp-core --bench flow_table`

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rsspp_core::state::check::{SequenceCheck, SequencedPacket};
use rsspp_core::state::{
    BucketWorker, FlowTable, Outbox, SharedFlowTable, SharedWorker, TableConfig, WhenFull, Worker,
};
use rsspp_core::{FlowKey, IndirectionTable, Toeplitz};

const FLOWS: usize = 100_000;
/// Packets in the pre-drawn stream (replayed in a loop).
const ORDER: usize = 1 << 20;

fn flows() -> Vec<(FlowKey, u32)> {
    let toeplitz = Toeplitz::default();
    let mut rng = StdRng::seed_from_u64(1);
    (0..FLOWS)
        .map(|i| {
            let (src, dst) = if i % 8 == 7 {
                (
                    IpAddr::V6(Ipv6Addr::from(rng.random::<u128>())),
                    IpAddr::V6(Ipv6Addr::from(rng.random::<u128>())),
                )
            } else {
                (
                    IpAddr::V4(Ipv4Addr::from(rng.random::<u32>())),
                    IpAddr::V4(Ipv4Addr::from(rng.random::<u32>())),
                )
            };
            let key = FlowKey::new(src, dst, rng.random(), rng.random(), 17).unwrap();
            (key, toeplitz.hash_flow(&key))
        })
        .collect()
}

fn config() -> TableConfig {
    TableConfig {
        capacity: FLOWS,
        idle_timeout_ns: Some(u64::MAX),
        when_full: WhenFull::EvictLeastRecentlyUsed,
    }
}

/// Packets per batch in the batched variants (a receive burst).
const BATCH: usize = 32;

fn bench(c: &mut Criterion) {
    let flows = flows();
    let mut rng = StdRng::seed_from_u64(2);
    let stream: Vec<SequencedPacket> = (0..ORDER)
        .map(|_| {
            let f = rng.random_range(0..FLOWS);
            SequencedPacket {
                key: flows[f].0,
                hash: flows[f].1,
                flow: f as u32,
                seq: 0,
            }
        })
        .collect();
    let mut at = 0usize;
    let mut now = FLOWS as u64;

    let mut table: FlowTable<u64> = FlowTable::new(config());
    for (i, (k, h)) in flows.iter().enumerate() {
        table.insert(*k, *h, i as u64, 0);
    }
    let reta = IndirectionTable::equal(512, 1).unwrap();
    let packets: Vec<SequencedPacket> = flows
        .iter()
        .enumerate()
        .map(|(i, &(key, hash))| SequencedPacket {
            key,
            hash,
            flow: i as u32,
            seq: 0,
        })
        .collect();
    let mut out = Outbox::default();
    let mut per_bucket = BucketWorker::new(0, &reta, config(), SequenceCheck::default());
    per_bucket.receive(packets.iter().copied(), 0, &mut out);
    let shared_table = Arc::new(SharedFlowTable::new(config(), 1024));
    let mut shared = SharedWorker::new(0, shared_table, SequenceCheck::default());
    shared.receive(packets.iter().copied(), 0, &mut out);

    // One packet at a time: the latency of a lookup and update.
    let mut group = c.benchmark_group("lookup_update_100k_flows");
    group.throughput(Throughput::Elements(1));
    group.bench_function("one_table", |b| {
        b.iter(|| {
            let p = &stream[at];
            at = (at + 1) & (ORDER - 1);
            now += 1;
            if let Some(s) = table.get_or_insert_with(&p.key, p.hash, now, || 0).state() {
                *s += 1;
            }
        })
    });
    group.bench_function("per_bucket_worker", |b| {
        b.iter(|| {
            let p = stream[at];
            at = (at + 1) & (ORDER - 1);
            now += 1;
            per_bucket.receive([black_box(p)], now, &mut out);
        })
    });
    group.bench_function("shared_table_uncontended", |b| {
        b.iter(|| {
            let p = stream[at];
            at = (at + 1) & (ORDER - 1);
            now += 1;
            shared.receive([black_box(p)], now, &mut out);
        })
    });
    group.finish();

    // Batches of 32, as a receive path takes them: the entries of a batch
    // are prefetched first, so their cache misses overlap. Time per packet.
    at = 0;
    let mut group = c.benchmark_group("lookup_update_100k_flows_batch32");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("one_table", |b| {
        b.iter(|| {
            let batch = &stream[at..at + BATCH];
            at = (at + BATCH) & (ORDER - 1);
            now += 1;
            for p in batch {
                table.prefetch_index(p.hash);
            }
            for p in batch {
                table.prefetch(p.hash);
            }
            for p in batch {
                if let Some(s) = table.get_or_insert_with(&p.key, p.hash, now, || 0).state() {
                    *s += 1;
                }
            }
        })
    });
    group.bench_function("per_bucket_worker", |b| {
        b.iter(|| {
            let batch = &stream[at..at + BATCH];
            at = (at + BATCH) & (ORDER - 1);
            now += 1;
            per_bucket.receive(black_box(batch).iter().copied(), now, &mut out);
        })
    });
    group.bench_function("shared_table_uncontended", |b| {
        b.iter(|| {
            let batch = &stream[at..at + BATCH];
            at = (at + BATCH) & (ORDER - 1);
            now += 1;
            shared.receive(black_box(batch).iter().copied(), now, &mut out);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
