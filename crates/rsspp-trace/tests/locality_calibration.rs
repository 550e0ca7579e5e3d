//! The campus preset's trains reproduce the locality Reframer measured on the
//! same campus's traffic (seed 002): per-flow batches after 16, 64 and 128 µs
//! of buffering (§5.1, Figure 12: ~1.9, ~2.9, ~3.3 packets), the spatial
//! locality factor at a receive queue taking about 1 Mpps (§5.1: ~1.2 with 30
//! trace windows on 8 queues; campus4 on 2 queues is 0.94 Mpps a queue), and
//! the share of a TCP flow's consecutive packets with another packet between
//! them in the raw trace (§3.1, Figure 7a: ~60% received, ~75% sent). The
//! trains before this calibration (8 packets 2 µs apart) batched 3.6, 5.8 and
//! 6.6 packets.

mod common;

use common::{generated, records};
use rsspp_trace::{analyse, Preset, QueueLocality, StatsConfig, TraceReader, TraceReport};

fn stats(bytes: &[u8], buffer_us: Vec<u64>) -> TraceReport {
    analyse(
        &mut TraceReader::from_bytes(bytes).unwrap(),
        StatsConfig { buffer_us, top: 1 },
    )
    .unwrap()
}

fn queue_slf(bytes: &[u8], queues: usize) -> f64 {
    let mut q = QueueLocality::new(queues);
    for r in records(bytes) {
        q.observe(&r);
    }
    q.spatial_locality_factor().unwrap()
}

#[test]
fn campus_trains_batch_as_reframer_measured() {
    let bytes = generated(Preset::Campus4, 0.5, 1, 64);
    let report = stats(&bytes, vec![16, 64, 128]);
    for (batching, published) in report.locality.batching.iter().zip([1.9, 2.9, 3.3]) {
        let ours = batching.mean_batch;
        assert!(
            (ours - published).abs() / published <= 0.10,
            "{} µs: ours {ours:.2} packets a batch, published ~{published}",
            batching.buffer_us
        );
    }
}

#[test]
fn a_busy_queue_sees_reframers_baseline_locality() {
    let bytes = generated(Preset::Campus4, 0.5, 2, 64);
    let busy = queue_slf(&bytes, 2);
    assert!(
        (1.1..=1.3).contains(&busy),
        "SLF at 0.94 Mpps a queue: {busy:.3}, published ~1.2"
    );
    // Fewer packets of other flows between a flow's packets as the queues
    // multiply (Reframer: ~1.2 with 8 queues, ~2.5 with 500).
    let (eight, many) = (queue_slf(&bytes, 8), queue_slf(&bytes, 128));
    assert!(
        busy < eight && eight < many,
        "{busy:.2}, {eight:.2}, {many:.2}"
    );
}

#[test]
fn the_raw_campus_trace_interleaves_as_reframers() {
    let report = stats(&generated(Preset::Campus, 1.0, 3, 64), vec![]);
    let interleaved = report.locality.interleaved_fraction;
    assert!(
        (0.60..=0.75).contains(&interleaved),
        "TCP packets interleaved with others: {interleaved:.3}, published 0.60-0.75"
    );
}
