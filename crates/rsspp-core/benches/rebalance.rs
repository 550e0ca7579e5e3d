//! Rebalancing cost from a skewed state: the static `equal` table under
//! Zipf-distributed bucket loads (exponent 1.0, average core load 0.7),
//! one full round (validation, estimation, elephant isolation, descent, plan).
//!
//! `cargo bench -p rsspp-core --bench rebalance`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rsspp_core::balance::synthetic;
use rsspp_core::{rebalance, BalanceConfig, IndirectionTable, LoadReport};

struct Input {
    table: IndirectionTable,
    packets: Vec<u64>,
    load: Vec<f64>,
}

fn skewed(cores: usize, buckets: usize, seed: u64) -> Input {
    let demand = synthetic::zipf(seed, buckets, cores, 1.0, 0.7);
    let table = IndirectionTable::equal(buckets, cores).unwrap();
    let m = synthetic::measure(&table, &demand, cores);
    Input {
        packets: m.bucket_packets,
        load: m.core_load,
        table,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rebalance");
    for (cores, buckets) in [(16, 512), (128, 4096)] {
        let input = skewed(cores, buckets, 3);
        let config = BalanceConfig::default();
        g.bench_with_input(
            BenchmarkId::new("skewed", format!("{cores}x{buckets}")),
            &input,
            |b, i| {
                b.iter(|| {
                    let report = LoadReport {
                        table: &i.table,
                        bucket_packets: &i.packets,
                        core_load: &i.load,
                    };
                    black_box(rebalance(black_box(&report), &config).unwrap())
                })
            },
        );
        // The converged state: what a control loop pays every 100 ms once balanced.
        let out = {
            let report = LoadReport {
                table: &input.table,
                bucket_packets: &input.packets,
                core_load: &input.load,
            };
            rebalance(&report, &config).unwrap()
        };
        let balanced_load: Vec<f64> = out.load_after.iter().map(|l| l.min(1.0)).collect();
        let balanced = Input {
            table: out.table,
            packets: input.packets.clone(),
            load: balanced_load,
        };
        g.bench_with_input(
            BenchmarkId::new("balanced", format!("{cores}x{buckets}")),
            &balanced,
            |b, i| {
                b.iter(|| {
                    let report = LoadReport {
                        table: &i.table,
                        bucket_packets: &i.packets,
                        core_load: &i.load,
                    };
                    black_box(rebalance(black_box(&report), &config).unwrap())
                })
            },
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
