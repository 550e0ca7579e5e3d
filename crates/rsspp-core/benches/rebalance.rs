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

/// The measurements of one round.
struct Input {
    table: IndirectionTable,
    packets: Vec<u64>,
    load: Vec<f64>,
}

impl Input {
    /// The static `equal` table under Zipf(1.0) bucket loads at average 0.7.
    fn skewed(cores: usize, buckets: usize, seed: u64) -> Self {
        let demand = synthetic::zipf(seed, buckets, cores, 1.0, 0.7);
        let table = IndirectionTable::equal(buckets, cores).unwrap();
        let m = synthetic::measure(&table, &demand, cores);
        Self {
            packets: m.bucket_packets,
            load: m.core_load,
            table,
        }
    }

    fn report(&self) -> LoadReport<'_> {
        LoadReport {
            table: &self.table,
            bucket_packets: &self.packets,
            core_load: &self.load,
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rebalance");
    let config = BalanceConfig::default();
    for (cores, buckets) in [(16, 512), (128, 4096)] {
        let skewed = Input::skewed(cores, buckets, 3);
        // The converged state: what a control loop pays every 100 ms once balanced.
        let out = rebalance(&skewed.report(), &config).unwrap();
        let balanced = Input {
            table: out.table,
            packets: skewed.packets.clone(),
            load: out.load_after.iter().map(|l| l.min(1.0)).collect(),
        };
        for (name, input) in [("skewed", &skewed), ("balanced", &balanced)] {
            g.bench_with_input(
                BenchmarkId::new(name, format!("{cores}x{buckets}")),
                input,
                |b, i| b.iter(|| black_box(rebalance(black_box(&i.report()), &config).unwrap())),
            );
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
