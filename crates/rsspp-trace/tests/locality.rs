//! The analysis on hand-built packet sequences whose answers are known:
//! Reframer's spatial and temporal distances, the spatial locality factor,
//! per-flow batching, per-second counts and the CDFs.

use std::net::IpAddr;

use rsspp_core::FlowKey;
use rsspp_trace::{FrameKind, PacketRecord, ReadCounts, StatsConfig, TraceStats};

fn packet(flow: u8, ts_us: u64, len: u32) -> PacketRecord {
    let mut r = PacketRecord::non_ip(ts_us * 1_000, len, len);
    r.kind = FrameKind::Ip;
    r.flow = Some(
        FlowKey::new(
            IpAddr::from([10, 0, 0, flow]),
            IpAddr::from([10, 0, 1, 1]),
            1000 + u16::from(flow),
            80,
            6,
        )
        .unwrap(),
    );
    r
}

fn run(packets: &[PacketRecord], buffers: Vec<u64>) -> rsspp_trace::TraceReport {
    let mut s = TraceStats::new(StatsConfig {
        buffer_us: buffers,
        top: 3,
    });
    for p in packets {
        s.observe(p);
    }
    s.finish(ReadCounts::default())
}

#[test]
fn interleaved_flows_have_locality_factor_one_and_grouped_flows_more() {
    // ABCABC…: every flow's consecutive packets have 2 others in between.
    let abc: Vec<_> = (0..30)
        .map(|i| packet((i % 3) as u8, i * 10, 100))
        .collect();
    let r = run(&abc, vec![25]);
    assert_eq!(r.spatial_locality_factor, 1.0);
    assert_eq!(r.locality.tcp_gaps, 27);
    assert_eq!(r.locality.interleaved_fraction, 1.0);
    // Distance 2 falls in the "<= 3" bucket, none at 0 or 1.
    assert_eq!(r.locality.spatial_distance_cdf[0], (0, 0.0));
    assert_eq!(r.locality.spatial_distance_cdf[1], (1, 0.0));
    assert_eq!(r.locality.spatial_distance_cdf[2], (3, 1.0));
    // Gaps of 30 µs: all under 32 µs, none under 16.
    let t = &r.locality.temporal_distance_cdf_us;
    assert_eq!(t.iter().find(|p| p.0 == 16).unwrap().1, 0.0);
    assert_eq!(t.iter().find(|p| p.0 == 32).unwrap().1, 1.0);
    // A 25 µs buffer never catches the next packet (30 µs later): batches of 1.
    assert_eq!(r.locality.batching[0].mean_batch, 1.0);

    // AABBCC…: runs of two.
    let aabb: Vec<_> = (0..30)
        .map(|i| packet(((i / 2) % 3) as u8, i * 10, 100))
        .collect();
    let r = run(&aabb, vec![15, 1000]);
    assert_eq!(r.spatial_locality_factor, 2.0);
    // Within a pair: distance 0 and 10 µs; between pairs: 4 packets, 50 µs.
    assert!((r.locality.interleaved_fraction - 12.0 / 27.0).abs() < 1e-9);
    // 15 µs catches each pair; 1000 µs gathers a flow's 10 packets.
    assert_eq!(r.locality.batching[0].mean_batch, 2.0);
    assert_eq!(r.locality.batching[1].mean_batch, 10.0);
    assert_eq!(r.locality.batching[1].packet_weighted_mean_batch, 10.0);
}

#[test]
fn batches_stop_at_32_packets() {
    let one_flow: Vec<_> = (0..100).map(|i| packet(1, i, 100)).collect();
    let r = run(&one_flow, vec![1_000_000]);
    let b = &r.locality.batching[0];
    assert_eq!(b.batches, 4); // 32 + 32 + 32 + 4
    assert_eq!(b.mean_batch, 25.0);
    assert_eq!(b.batch_size_cdf.last().unwrap(), &(32, 1.0));
    assert_eq!(b.batch_size_cdf[2], (4, 0.25));
}

#[test]
fn per_second_counts_and_cdfs() {
    // Flow 1: one packet in each of seconds 0, 1, 2; flow 2: 5 packets in
    // second 1; flow 3: a single packet in second 2; then a last packet at
    // 3.5 s (second 3, partial).
    let mut p = vec![
        packet(1, 0, 60),
        packet(1, 1_000_000, 60),
        packet(1, 2_000_000, 60),
        packet(3, 2_500_000, 1514),
        packet(1, 3_500_000, 60),
    ];
    for i in 0..5 {
        p.push(packet(2, 1_100_000 + i, 1000));
    }
    p.sort_by_key(|r| r.timestamp_ns);
    let r = run(&p, vec![8]);
    assert_eq!(r.packets, 10);
    assert_eq!(r.flows, 3);
    assert_eq!(r.bytes, 4 * 60 + 1514 + 5 * 1000);
    assert_eq!(r.active_flows_per_s.series, vec![1, 2, 2, 1]);
    assert_eq!(r.new_flows_per_s.series, vec![1, 1, 1, 0]);
    // Full seconds 0..2: mean (1 + 2 + 2) / 3 active.
    assert!((r.active_flows_per_s.mean - 5.0 / 3.0).abs() < 1e-9);
    // Whole flows: sizes 1, 4, 5.
    assert_eq!(r.flow_size_cdf[0], (1, 1.0 / 3.0));
    assert_eq!(r.flow_size_cdf.last().unwrap(), &(5, 1.0));
    // Per window: flow 1 ×4 (1 each), flow 2 (5), flow 3 (1): 5 of 6 are 1.
    assert_eq!(r.flow_size_cdf_per_1s_window[0], (1, 5.0 / 6.0));
    // Packets share: size-1 flows carry 1 of 10 packets.
    assert_eq!(r.packet_share_by_flow_size[0], (1, 0.1));
    // Frames: 4 of 10 are <= 60 bytes.
    assert_eq!(r.frame_size_cdf[0], (60, 0.4));
    assert_eq!(r.heavy_hitters[0].packets, 5);
}

#[test]
fn non_ip_frames_count_as_packets_but_not_flows() {
    let mut p = vec![packet(1, 0, 100), packet(1, 1, 100)];
    p.insert(1, PacketRecord::non_ip(500, 60, 60));
    let r = run(&p, vec![8]);
    assert_eq!(r.packets, 3);
    assert_eq!(r.non_ip_packets, 1);
    assert_eq!(r.flows, 1);
    // The ARP frame breaks the run: two runs of one.
    assert_eq!(r.spatial_locality_factor, 1.0);
}

#[test]
fn queue_locality_counts_runs_at_each_queue() {
    use rsspp_core::toeplitz::{bucket_of, Toeplitz};
    use rsspp_trace::QueueLocality;
    // Two flows alternating, ABAB…: one queue sees runs of one; with enough
    // queues for their buckets to land apart, each queue sees one run.
    let t = Toeplitz::default();
    let bucket = |f: u8| bucket_of(t.hash_flow(&packet(f, 0, 60).flow.unwrap()), 512);
    let other = (2..=255).find(|&f| bucket(f) != bucket(1)).unwrap();
    let abab: Vec<_> = (0..20)
        .map(|i| packet(if i % 2 == 0 { 1 } else { other }, i, 100))
        .collect();
    let slf = |queues: usize| {
        let mut q = QueueLocality::new(queues);
        for p in &abab {
            q.observe(p);
        }
        q.spatial_locality_factor().unwrap()
    };
    assert_eq!(slf(1), 1.0);
    assert_eq!(slf(512), 10.0);
    assert!(QueueLocality::new(4).spatial_locality_factor().is_none());
}
