//! Multi-threaded stress test of the per-bucket state migration: worker
//! threads fed by a dispatcher thread that rewrites the indirection table
//! every few thousand packets, over ≥ 10k flows whose packets carry
//! per-flow sequence numbers.
//!
//! Asserts: no packet processed out of order within a flow, every flow has
//! exactly one state whose counter equals the packets sent for it, every
//! move completes (no deadlock: the run returns), refused plans change
//! nothing.
//!
//! `RSSPP_SOAK_SECS=600 cargo test --release -p rsspp-core --test state_stress`
//! repeats the runs with fresh seeds for that long.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rsspp_core::state::check::{audit, SequenceCheck, SequenceState, SequencedPacket};
use rsspp_core::state::threaded::{self, HarnessConfig};
use rsspp_core::state::{
    BucketWorker, MigrationCoordinator, SharedFlowTable, SharedWorker, TableConfig, WhenFull,
    Worker,
};
use rsspp_core::{BucketMove, FlowKey, IndirectionTable, MigrationPlan, Toeplitz};

const TABLE: usize = 512;

struct Scenario {
    seed: u64,
    cores: usize,
    flows: usize,
    packets: u64,
    /// Packets between two table rewrites.
    change_every: u64,
}

fn make_flows(n: usize, rng: &mut SmallRng) -> Vec<(FlowKey, u32)> {
    let toeplitz = Toeplitz::default();
    (0..n)
        .map(|i| {
            let (src, dst) = if i % 8 == 0 {
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
            // Unique ports per flow index keep the keys distinct.
            let key = FlowKey::new(src, dst, (i % 65_536) as u16, (i / 65_536) as u16, 17).unwrap();
            (key, toeplitz.hash_flow(&key))
        })
        .collect()
}

/// A packet source: half the packets from 64 hot flows (so that a flow
/// often has several packets queued when its bucket moves), half uniform.
struct Traffic {
    flows: Vec<(FlowKey, u32)>,
    next_seq: Vec<u32>,
    rng: SmallRng,
    left: u64,
}

impl Traffic {
    fn next(&mut self) -> Option<SequencedPacket> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let n = self.flows.len();
        let f = if self.rng.random::<bool>() {
            self.rng.random_range(0..64.min(n))
        } else {
            self.rng.random_range(0..n)
        };
        let seq = self.next_seq[f];
        self.next_seq[f] += 1;
        let (key, hash) = self.flows[f];
        Some(SequencedPacket {
            key,
            hash,
            flow: f as u32,
            seq,
        })
    }
}

/// Every `change_every` packets: move 1–8 random buckets that are not
/// migrating to random other cores; one plan in ten is broken on purpose.
struct Planner {
    rng: SmallRng,
    cores: usize,
    change_every: u64,
    next_change: u64,
    moves_planned: u64,
    bad_plans: u64,
}

impl Planner {
    fn plan(&mut self, c: &MigrationCoordinator, dispatched: u64) -> Option<MigrationPlan> {
        if dispatched < self.next_change {
            return None;
        }
        self.next_change = dispatched + self.change_every;
        let table = c.table();
        let mut moves: Vec<BucketMove> = Vec::new();
        for _ in 0..self.rng.random_range(1..=8) {
            let bucket = self.rng.random_range(0..TABLE);
            if c.is_migrating(bucket) || moves.iter().any(|m| m.bucket == bucket) {
                continue;
            }
            let from = table.core_of(bucket);
            let to = (from + self.rng.random_range(1..self.cores)) % self.cores;
            moves.push(BucketMove { bucket, from, to });
        }
        if moves.is_empty() {
            return None;
        }
        if self.rng.random_range(0..10) == 0 {
            self.bad_plans += 1;
            let m = moves[0];
            match self.rng.random_range(0..4) {
                0 => moves.push(BucketMove {
                    bucket: TABLE + 3,
                    ..m
                }),
                1 => moves.push(BucketMove {
                    to: self.cores,
                    ..m
                }),
                2 => moves.push(m), // the same bucket twice
                _ => moves[0].from = (m.from + 1) % self.cores, // wrong source
            }
        } else {
            self.moves_planned += moves.len() as u64;
        }
        Some(MigrationPlan { moves })
    }
}

fn harness_config() -> HarnessConfig {
    HarnessConfig {
        batch: 32,
        queue_batches: 32,
        expire_every_ns: None,
    }
}

fn table_config() -> TableConfig {
    TableConfig {
        capacity: 1 << 16,
        idle_timeout_ns: None,
        when_full: WhenFull::Refuse,
    }
}

fn per_bucket_run(s: &Scenario) {
    let mut rng = SmallRng::seed_from_u64(s.seed);
    let flows = make_flows(s.flows, &mut rng);
    let reta = IndirectionTable::equal(TABLE, s.cores).unwrap();
    let coordinator = MigrationCoordinator::new(reta.clone(), s.cores).unwrap();
    let workers: Vec<_> = (0..s.cores)
        .map(|c| BucketWorker::new(c, &reta, table_config(), SequenceCheck::default()))
        .collect();
    let mut traffic = Traffic {
        next_seq: vec![0; flows.len()],
        flows,
        rng: SmallRng::seed_from_u64(s.seed ^ 1),
        left: s.packets,
    };
    let mut planner = Planner {
        rng: SmallRng::seed_from_u64(s.seed ^ 2),
        cores: s.cores,
        change_every: s.change_every,
        next_change: s.change_every,
        moves_planned: 0,
        bad_plans: 0,
    };
    let mut tick = 0;
    let run = threaded::run(
        workers,
        coordinator,
        harness_config(),
        || traffic.next(),
        |c, d| planner.plan(c, d),
        || {
            tick += 1;
            tick
        },
    );

    let label = format!("seed {} cores {}", s.seed, s.cores);
    let summary = &run.summary;
    assert!(
        summary.failures.is_empty(),
        "{label}: {:?}",
        summary.failures
    );
    assert!(run.stranded.is_empty(), "{label}: tables stranded");
    assert_eq!(summary.dispatched, s.packets, "{label}");
    assert_eq!(
        summary.plans_refused.len() as u64,
        planner.bad_plans,
        "{label}"
    );
    assert_eq!(summary.moves_completed, planner.moves_planned, "{label}");
    assert!(summary.moves_completed > 0, "{label}: nothing moved");
    assert_eq!(run.coordinator.migrating(), 0, "{label}");

    let mut check = SequenceCheck::default();
    let mut processed = 0;
    let mut parked = 0;
    let mut states: Vec<SequenceState> = Vec::new();
    let mut holders = vec![0; TABLE];
    for w in run.workers {
        let core = w.core();
        assert!(w.is_settled(), "{label}: core {core} unsettled");
        processed += w.stats().processed;
        parked += w.stats().parked;
        let (handler, tables) = w.into_parts();
        check.add(&handler);
        for (bucket, table) in tables {
            // A table is held by the core the final indirection table names.
            assert_eq!(run.coordinator.table().core_of(bucket), core, "{label}");
            holders[bucket] += 1;
            states.extend(table.into_flows().map(|(_, st)| st));
        }
    }
    assert!(
        holders.iter().all(|&h| h == 1),
        "{label}: a bucket's table is missing or doubled"
    );
    assert_eq!(processed, s.packets, "{label}: packets processed");
    assert_eq!(check.reordered, 0, "{label}: reordered packets");
    assert_eq!(check.gaps, 0, "{label}: sequence gaps");
    assert_eq!(check.stateless, 0, "{label}");
    assert_eq!(check.wrong_state, 0, "{label}");
    let sent: Vec<u64> = traffic.next_seq.iter().map(|&n| u64::from(n)).collect();
    let a = audit(&sent, &states);
    assert!(a.is_clean(), "{label}: {a:?}");
    eprintln!(
        "{label}: {} packets, {} flows, {} plans ({} refused), {} moves, {parked} packets parked",
        s.packets,
        a.flows,
        summary.plans_applied,
        summary.plans_refused.len(),
        summary.moves_completed
    );
}

fn soak_secs() -> Option<u64> {
    std::env::var("RSSPP_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
}

#[test]
fn two_workers_millions_of_packets_in_order_and_nothing_lost() {
    let base = Scenario {
        seed: 1,
        cores: 2,
        flows: 12_000,
        packets: 2_000_000,
        change_every: 3_000,
    };
    per_bucket_run(&base);
    if let Some(secs) = soak_secs() {
        let end = Instant::now() + Duration::from_secs(secs);
        let mut seed = 100;
        while Instant::now() < end {
            for cores in [2, 3, 4] {
                per_bucket_run(&Scenario {
                    seed,
                    cores,
                    packets: 5_000_000,
                    change_every: 1_000 + seed % 4_000,
                    ..base
                });
                seed += 1;
            }
        }
    }
}

#[test]
fn three_workers_frequent_rewrites() {
    per_bucket_run(&Scenario {
        seed: 2,
        cores: 3,
        flows: 10_000,
        packets: 600_000,
        change_every: 500,
    });
}

#[test]
fn shared_baseline_loses_no_state() {
    let mut rng = SmallRng::seed_from_u64(3);
    let flows = make_flows(10_000, &mut rng);
    let reta = IndirectionTable::equal(TABLE, 2).unwrap();
    let coordinator = MigrationCoordinator::new(reta, 2).unwrap();
    let shared = Arc::new(SharedFlowTable::new(table_config(), 1024));
    let workers: Vec<_> = (0..2)
        .map(|c| SharedWorker::new(c, shared.clone(), SequenceCheck::default()))
        .collect();
    let mut traffic = Traffic {
        next_seq: vec![0; flows.len()],
        flows,
        rng: SmallRng::seed_from_u64(4),
        left: 400_000,
    };
    let mut planner = Planner {
        rng: SmallRng::seed_from_u64(5),
        cores: 2,
        change_every: 2_000,
        next_change: 2_000,
        moves_planned: 0,
        bad_plans: 0,
    };
    let run = threaded::run(
        workers,
        coordinator,
        harness_config(),
        || traffic.next(),
        |c, d| planner.plan(c, d),
        || 0,
    );
    assert!(
        run.summary.failures.is_empty(),
        "{:?}",
        run.summary.failures
    );
    assert_eq!(run.summary.moves_completed, planner.moves_planned);
    let mut check = SequenceCheck::default();
    for w in &run.workers {
        check.add(w.handler());
    }
    // Locks keep every update; order is not guaranteed (not asserted).
    let mut states = Vec::new();
    shared.for_each(|_, s| states.push(*s));
    let sent: Vec<u64> = traffic.next_seq.iter().map(|&n| u64::from(n)).collect();
    let a = audit(&sent, &states);
    assert!(a.is_clean(), "{a:?}");
    assert_eq!(check.stateless + check.wrong_state, 0);
    eprintln!("shared: {} packets reordered", check.reordered);
}
