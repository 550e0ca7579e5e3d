//! RSS++ end to end on threads: worker threads count their packets per
//! bucket (`rsspp_core::counters`), the dispatcher runs the control loop on
//! those counts and migrates the buckets' flow tables by the handoff
//! protocol, over a load skewed towards one core.
//!
//! Asserts: the counters lose nothing (every dispatched packet is counted
//! once), the controller evens out the load, and the moves it makes lose
//! no state and reorder no packet.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rsspp_core::state::check::{audit, SequenceCheck, SequenceState, SequencedPacket};
use rsspp_core::state::threaded::{self, BalancedConfig, HarnessConfig};
use rsspp_core::state::{BucketWorker, MigrationCoordinator, TableConfig, WhenFull, Worker};
use rsspp_core::{bucket_of, ControlConfig, FlowKey, IndirectionTable, Toeplitz};

const TABLE: usize = 512;
const CORES: usize = 4;
const FLOWS: usize = 4000;
const PACKETS: u64 = 1_200_000;
/// Packets of a flow first steered to core 0 weigh this many of the others.
const HOT: usize = 4;

/// Each flow's share of the packets, by the core `table` steers it to.
fn shares(table: &IndirectionTable, hashes: &[u32], weight: &[usize]) -> Vec<f64> {
    let mut per_core = [0.0; CORES];
    for (h, w) in hashes.iter().zip(weight) {
        per_core[table.core_of(bucket_of(*h, TABLE))] += *w as f64;
    }
    let total: f64 = per_core.iter().sum();
    per_core.iter().map(|p| p / total).collect()
}

#[test]
fn the_controller_evens_out_a_skewed_load_without_losing_a_packet_count_or_a_state() {
    let toeplitz = Toeplitz::default();
    let mut rng = SmallRng::seed_from_u64(12);
    let keys: Vec<FlowKey> = (0..FLOWS)
        .map(|i| {
            let src = IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()));
            let dst = IpAddr::V4(Ipv4Addr::from(rng.random::<u32>()));
            FlowKey::new(src, dst, i as u16, 80, 17).unwrap()
        })
        .collect();
    let hashes: Vec<u32> = keys.iter().map(|k| toeplitz.hash_flow(k)).collect();
    let reta = IndirectionTable::equal(TABLE, CORES).unwrap();
    let weight: Vec<usize> = hashes
        .iter()
        .map(|&h| match reta.core_of(bucket_of(h, TABLE)) {
            0 => HOT,
            _ => 1,
        })
        .collect();
    let before = shares(&reta, &hashes, &weight);
    assert!(before[0] > 0.5, "core 0 is the hot one: {before:?}");
    // Each flow appears in the draw as many times as it weighs.
    let draw: Vec<u32> = weight
        .iter()
        .enumerate()
        .flat_map(|(f, &w)| std::iter::repeat_n(f as u32, w))
        .collect();

    let mut next_seq = vec![0u32; FLOWS];
    let mut left = PACKETS;
    let source = || {
        if left == 0 {
            return None;
        }
        left -= 1;
        let f = draw[rng.random_range(0..draw.len())] as usize;
        let seq = next_seq[f];
        next_seq[f] += 1;
        Some(SequencedPacket {
            key: keys[f],
            hash: hashes[f],
            flow: f as u32,
            seq,
        })
    };
    let table_config = TableConfig {
        capacity: 1 << 16,
        idle_timeout_ns: None,
        when_full: WhenFull::Refuse,
    };
    let workers: Vec<_> = (0..CORES)
        .map(|c| BucketWorker::new(c, &reta, table_config, SequenceCheck::default()))
        .collect();
    let coordinator = MigrationCoordinator::new(reta.clone(), CORES).unwrap();
    let harness = HarnessConfig {
        batch: 32,
        queue_batches: 32,
        expire_every_ns: None,
    };
    let balanced = BalancedConfig {
        control: ControlConfig {
            interval: Duration::from_millis(5),
            max_interval: Duration::from_millis(40),
            ..ControlConfig::default()
        },
        offered_load: 0.8,
    };
    // A simulated clock: 1 µs per reading (about two readings per batch), so
    // a 5 ms control interval is some 80 000 packets, 150 per bucket.
    let mut ticks = 0u64;
    let clock = || {
        ticks += 1_000;
        ticks
    };
    let balanced =
        threaded::run_balanced(workers, coordinator, harness, balanced, source, clock).unwrap();

    let run = &balanced.run;
    assert!(
        run.summary.failures.is_empty(),
        "{:?}",
        run.summary.failures
    );
    assert!(run.stranded.is_empty());
    assert_eq!(balanced.control_error, None);
    assert_eq!(run.summary.dispatched, PACKETS);
    assert_eq!(
        balanced.counted, PACKETS,
        "the counters lost or doubled packets"
    );
    assert!(
        balanced.control.rounds() > 10,
        "{}",
        balanced.control.rounds()
    );
    assert!(balanced.control.migrations() > 0, "nothing moved");
    assert_eq!(balanced.abandoned, run.summary.plans_refused.len() as u64);
    assert_eq!(run.summary.moves_completed, balanced.control.migrations());
    assert_eq!(
        balanced.last_interval.bucket_packets.iter().sum::<u64>(),
        balanced.last_interval.core_packets.iter().sum::<u64>()
    );

    let after = shares(run.coordinator.table(), &hashes, &weight);
    let max = after.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "{} rounds, {} plans ({} abandoned), {} buckets moved; core shares {before:.3?} -> {after:.3?}",
        balanced.control.rounds(),
        run.summary.plans_applied,
        balanced.abandoned,
        balanced.control.migrations()
    );
    assert!(
        max < 1.15 / CORES as f64,
        "still skewed: {before:?} -> {after:?}"
    );

    let mut check = SequenceCheck::default();
    let mut states: Vec<SequenceState> = Vec::new();
    for w in &run.workers {
        check.add(w.handler());
        for (_, t) in w.tables() {
            states.extend(t.iter().map(|(_, s)| *s));
        }
    }
    assert_eq!(check.reordered, 0);
    assert_eq!(check.gaps, 0);
    let sent: Vec<u64> = next_seq.iter().map(|&n| u64::from(n)).collect();
    let a = audit(&sent, &states);
    assert!(a.is_clean(), "{a:?}");
}
