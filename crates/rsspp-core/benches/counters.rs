//! Cost of counting packets per bucket on the packet-processing core, and of
//! collecting the counts on the balancing thread.
//!
//! - `record_hash/*`: one packet at a time, 4096 random hashes over a
//!   512-bucket table; `hot_bucket`: every packet in one bucket (each record
//!   then waits for the previous store, the worst case of load + store);
//! - `record_hashes`: the burst API, 32 hashes per call;
//! - `with_reader`: `record_hash` while another thread collects the same
//!   table in a loop (the reader's loads pull the writer's lines to shared);
//! - `collect/*`: one collect of one core's table.
//!
//! Throughput is in packets (buckets for `collect`): criterion's "time per
//! element" is the cost per record.
//!
//! `cargo bench -p rsspp-core --bench counters`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rsspp_core::counters::core_counters;

const SIZE: usize = 512;
const PACKETS: usize = 4096;
const BURST: usize = 32;

fn hashes(seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..PACKETS).map(|_| rng.random()).collect()
}

fn record(c: &mut Criterion) {
    let mut g = c.benchmark_group("counters");
    g.throughput(Throughput::Elements(PACKETS as u64));
    let hs = hashes(1);

    let (w, _r) = core_counters(SIZE).unwrap();
    g.bench_function("record_hash/random", |b| {
        b.iter(|| {
            for &h in black_box(&hs[..]) {
                w.record_hash(h);
            }
        })
    });
    g.bench_function("record_hash/hot_bucket", |b| {
        b.iter(|| {
            for _ in 0..PACKETS {
                w.record_hash(black_box(7));
            }
        })
    });
    g.bench_function("record_hashes/burst32", |b| {
        b.iter(|| {
            for burst in black_box(&hs[..]).chunks_exact(BURST) {
                w.record_hashes(burst);
            }
        })
    });
    drop((w, _r));

    // A concurrent reader on the other core, collecting as fast as it can.
    let (w, mut r) = core_counters(SIZE).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut out = vec![0u64; SIZE];
            let mut collects = 0u64;
            while !stop.load(Ordering::Relaxed) {
                black_box(r.collect_into(&mut out));
                collects += 1;
            }
            collects
        })
    };
    g.bench_function("record_hash/with_reader", |b| {
        b.iter(|| {
            for &h in black_box(&hs[..]) {
                w.record_hash(h);
            }
        })
    });
    stop.store(true, Ordering::Relaxed);
    black_box(reader.join().unwrap());
    g.finish();

    let mut g = c.benchmark_group("counters/collect");
    for size in [512usize, 65536] {
        let (w, mut r) = core_counters(size).unwrap();
        for &h in &hs {
            w.record_hash(h);
        }
        let mut out = vec![0u64; size];
        g.throughput(Throughput::Elements(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| black_box(r.collect_into(&mut out)))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = record
}
criterion_main!(benches);
