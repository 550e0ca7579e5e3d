//! Simulation speed: simulated packets per second of host time, one policy
//! on one thread, over one second of Campus #4 at speed 1.3 (2.44 M packets)
//! held in memory, 8 simulated cores at about 70% load.
//!
//! `cargo bench -p rsspp-sim --bench engine`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rsspp_sim::engine::{Engine, EngineConfig};
use rsspp_sim::packet::SimPacket;
use rsspp_sim::policy::{self, PolicyConfig};
use rsspp_sim::workload::{TraceSource, Workload, WorkloadConfig};
use rsspp_trace::Preset;

fn campus4() -> Vec<SimPacket> {
    let config = WorkloadConfig::new(TraceSource::preset(Preset::Campus4), 1.0, 1.3).unwrap();
    let mut workload = Workload::open(&config).unwrap();
    let mut packets = Vec::new();
    while workload.next_batch(&mut packets).unwrap() {}
    packets
}

fn bench(c: &mut Criterion) {
    let packets = campus4();
    let mut group = c.benchmark_group("simulate");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(packets.len() as u64));
    let config = PolicyConfig::default();
    for &name in policy::POLICY_NAMES {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut engine = Engine::new(
                    policy::build(name, &config).unwrap(),
                    EngineConfig::default(),
                );
                engine.feed(&packets);
                engine.finish()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
