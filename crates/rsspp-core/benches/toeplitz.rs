//! Toeplitz hash cost: the table-driven fast path against the bitwise
//! reference, per hash, over 1024 distinct flows.
//!
//! `cargo bench -p rsspp-core --bench toeplitz`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rsspp_core::toeplitz::hash_reference;
use rsspp_core::{RssKey, Toeplitz};

fn flows(n: usize) -> Vec<([u8; 4], [u8; 4], u16, u16)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    (0..n)
        .map(|_| (rng.random(), rng.random(), rng.random(), rng.random()))
        .collect()
}

fn bench(c: &mut Criterion) {
    let toeplitz = Toeplitz::default();
    let key = RssKey::microsoft();
    let v4 = flows(1024);
    let v4_bytes: Vec<[u8; 12]> = v4
        .iter()
        .map(|(s, d, sp, dp)| {
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(s);
            b[4..8].copy_from_slice(d);
            b[8..10].copy_from_slice(&sp.to_be_bytes());
            b[10..].copy_from_slice(&dp.to_be_bytes());
            b
        })
        .collect();
    let v6_bytes: Vec<[u8; 36]> = {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        (0..1024)
            .map(|_| std::array::from_fn(|_| rng.random()))
            .collect()
    };

    let mut g = c.benchmark_group("toeplitz");
    g.throughput(Throughput::Elements(1024));
    g.bench_function("ipv4_4tuple/table", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for &(s, d, sp, dp) in black_box(&v4) {
                acc ^= toeplitz.hash_ipv4(s, d, sp, dp);
            }
            acc
        })
    });
    g.bench_function("ipv4_4tuple/table_bytes", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for input in black_box(&v4_bytes) {
                acc ^= toeplitz.hash(input);
            }
            acc
        })
    });
    g.bench_function("ipv4_4tuple/bitwise_reference", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for input in black_box(&v4_bytes) {
                acc ^= hash_reference(&key, input);
            }
            acc
        })
    });
    g.bench_function("ipv6_4tuple/table", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for input in black_box(&v6_bytes) {
                acc ^= toeplitz.hash(input);
            }
            acc
        })
    });
    g.bench_function("ipv6_4tuple/bitwise_reference", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for input in black_box(&v6_bytes) {
                acc ^= hash_reference(&key, input);
            }
            acc
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
