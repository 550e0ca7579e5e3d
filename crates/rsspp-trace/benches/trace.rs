//! Throughput of the trace path: parsing an in-memory pcap, generating the
//! campus preset, and the full statistics pass.
//!
//! `cargo bench -p rsspp-trace --bench trace`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rsspp_trace::generate::write_pcap;
use rsspp_trace::{analyse, GenConfig, Generator, Preset, StatsConfig, TimePrecision, TraceReader};

fn campus_pcap(seconds: f64) -> (Vec<u8>, u64) {
    let mut config = GenConfig::new(Preset::Campus);
    config.duration_s = seconds;
    let mut bytes = Vec::new();
    let packets = write_pcap(&config, &mut bytes, 64, TimePrecision::Nano).expect("generate");
    (bytes, packets)
}

fn bench(c: &mut Criterion) {
    let (pcap, packets) = campus_pcap(2.0);
    let mut group = c.benchmark_group("trace");
    group.sample_size(10);
    group.throughput(Throughput::Elements(packets));
    group.bench_function("parse_in_memory_pcap", |b| {
        b.iter(|| {
            let mut reader = TraceReader::from_bytes(&pcap).expect("pcap");
            let mut n = 0u64;
            while let Some(r) = reader.next_record().expect("record") {
                n += u64::from(r.wire_len > 0);
            }
            n
        })
    });
    group.bench_function("generate_campus_packets", |b| {
        b.iter(|| {
            let mut config = GenConfig::new(Preset::Campus);
            config.duration_s = 2.0;
            let mut g = Generator::new(&config).expect("generator");
            let mut n = 0u64;
            while let Some(batch) = g.next_batch() {
                n += batch.len() as u64;
            }
            n
        })
    });
    group.bench_function("generate_campus_pcap", |b| {
        let mut out = Vec::with_capacity(pcap.len());
        b.iter(|| {
            out.clear();
            let mut config = GenConfig::new(Preset::Campus);
            config.duration_s = 2.0;
            write_pcap(&config, &mut out, 64, TimePrecision::Nano).expect("generate")
        })
    });
    group.bench_function("stats_in_memory_pcap", |b| {
        b.iter(|| {
            let mut reader = TraceReader::from_bytes(&pcap).expect("pcap");
            analyse(&mut reader, StatsConfig::default())
                .expect("stats")
                .flows
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
