//! The state benchmark behind `rsspp bench state`: per-bucket flow tables
//! (§3.3) against one shared table, under indirection-table rewrites, on
//! threads.
//!
//! Both variants run in the threaded harness's replay mode
//! ([`threaded::replay`]): every worker thread draws the same seeded stream
//! of packets of [`BenchStateConfig::flows`] flows (uniformly at random,
//! each carrying its flow's sequence number), steers each packet through its
//! replica of the indirection table, and processes the packets that fall on
//! its own core with the sequence-checking network function
//! ([`check`](crate::state::check): one lookup and one update of the flow's
//! state per packet). No third thread competes with the workers for the
//! cores.
//!
//! Every [`BenchStateConfig::change_interval_ms`] all replicas apply the
//! same plan ([`BenchStateConfig::moves_per_change`] random buckets to other
//! cores). With per-bucket tables the tables move between the threads by
//! the handoff protocol; with the shared table (one lock-striped table for
//! all workers) nothing moves, and a worker ahead of the old owner processes
//! the bucket's newer packets first.
//!
//! Reported: packets per second of each variant (packets processed over the
//! wall time, and over the workers' CPU time), packets processed out of
//! order within their flow, flow states lost or duplicated (audited against
//! what was sent), bucket moves. The caller supplies the clocks.

use std::sync::Arc;

use serde::Serialize;

use crate::balance::synthetic::SplitMix64;
use crate::reta::{BucketMove, IndirectionTable, MigrationPlan, RetaError};
use crate::state::check::{audit, Audit, SequenceCheck, SequenceState, SequencedPacket};
use crate::state::threaded::{self, PacketStream, ReplayClocks, ReplayConfig, ReplayRun};
use crate::state::{
    BucketWorker, MigrationCoordinator, SharedFlowTable, SharedWorker, TableConfig, WhenFull,
    Worker,
};
use crate::{FlowKey, Toeplitz};

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchStateConfig {
    /// Seconds of traffic for each of the two variants, all rounds together.
    pub seconds: f64,
    /// Concurrent flows (at least 1).
    pub flows: usize,
    /// Worker threads (cores; at least 1).
    pub workers: usize,
    /// Time between two indirection-table rewrites, milliseconds.
    pub change_interval_ms: u64,
    /// Buckets moved by each rewrite.
    pub moves_per_change: usize,
    /// Indirection-table size (a power of two from 64 to 65536).
    pub buckets: usize,
    /// Lock stripes of the shared table.
    pub stripes: usize,
    /// Packets per receive batch.
    pub batch: usize,
    /// Seed of the traffic and of the moves.
    pub seed: u64,
    /// Packets a worker may run ahead of the slowest one (a receive ring).
    pub ring: u64,
    /// Rounds: the variants alternate, `seconds / rounds` each per round;
    /// packets per second are the medians over the rounds, the ratio the
    /// median of the rounds' ratios (machines are shared and noisy).
    pub rounds: usize,
}

impl Default for BenchStateConfig {
    /// 2 workers, 10 000 flows, 16 of 512 buckets moved every 100 ms, 3 s
    /// per variant in 5 rounds.
    fn default() -> Self {
        Self {
            seconds: 3.0,
            flows: 10_000,
            workers: 2,
            change_interval_ms: 100,
            moves_per_change: 16,
            buckets: 512,
            stripes: 1024,
            batch: 32,
            seed: 1,
            ring: 2048,
            rounds: 5,
        }
    }
}

/// A setting of [`BenchStateConfig`] that must be positive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positive {
    /// [`BenchStateConfig::workers`].
    Workers,
    /// [`BenchStateConfig::flows`].
    Flows,
    /// [`BenchStateConfig::seconds`].
    Seconds,
    /// [`BenchStateConfig::stripes`].
    Stripes,
    /// [`BenchStateConfig::batch`].
    Batch,
    /// [`BenchStateConfig::ring`].
    Ring,
    /// [`BenchStateConfig::rounds`].
    Rounds,
}

impl std::fmt::Display for Positive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Positive::Workers => "workers",
            Positive::Flows => "flows",
            Positive::Seconds => "seconds",
            Positive::Stripes => "stripes",
            Positive::Batch => "batch",
            Positive::Ring => "ring",
            Positive::Rounds => "rounds",
        })
    }
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchStateError {
    /// Zero workers, flows, seconds, stripes, batch, ring or rounds.
    #[error("{0} must be positive")]
    NotPositive(Positive),
    /// A bad table size.
    #[error(transparent)]
    Reta(#[from] RetaError),
    /// A worker failed (a bug: the message says which).
    #[error("{variant} run failed: {failures}")]
    WorkerFailed {
        /// Which variant.
        variant: &'static str,
        /// The failures, joined.
        failures: String,
    },
}

/// Measurements of one variant.
#[derive(Debug, Clone, Serialize)]
pub struct VariantResult {
    /// Packets processed per second of wall time (median over rounds).
    pub pps: f64,
    /// Packets processed per second of the workers' CPU time: what one core
    /// processes when it is not waiting or preempted (median over rounds;
    /// equal to `pps / workers` when the CPU time cannot be read).
    pub pps_per_core: f64,
    /// Packets processed.
    pub packets: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Packets processed out of order within their flow.
    pub reordered: u64,
    /// Flows whose state is missing or miscounted.
    pub lost_states: u64,
    /// Flows with more than one state.
    pub duplicated_states: u64,
    /// Table rewrites applied.
    pub rewrites: u64,
    /// Bucket moves completed.
    pub migrations: u64,
    /// Packets that waited for their bucket's table (per-bucket only).
    pub parked: u64,
}

/// The report, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct BenchStateReport {
    /// Worker threads.
    pub workers: usize,
    /// Flows.
    pub flows: usize,
    /// Milliseconds between rewrites.
    pub change_interval_ms: u64,
    /// Buckets moved per rewrite.
    pub moves_per_change: usize,
    /// Rounds of each variant.
    pub rounds: usize,
    /// Per-bucket packets per second (median over rounds).
    pub per_bucket_pps: f64,
    /// Shared-table packets per second (median over rounds).
    pub shared_pps: f64,
    /// Median over the rounds of per-bucket / shared packets per second.
    pub ratio: f64,
    /// That ratio in each round.
    pub round_ratios: Vec<f64>,
    /// Per-bucket packets per second of worker CPU time (median).
    pub per_bucket_pps_per_core: f64,
    /// Shared-table packets per second of worker CPU time (median).
    pub shared_pps_per_core: f64,
    /// Median over the rounds of the per-core ratio: the efficiency gain,
    /// less sensitive than `ratio` to the machine's other load.
    pub ratio_per_core: f64,
    /// Per-bucket packets processed out of order.
    pub per_bucket_reordered: u64,
    /// Shared-table packets processed out of order.
    pub shared_reordered: u64,
    /// Flow states lost or duplicated, both variants together.
    pub lost_states: u64,
    /// Bucket moves completed in the per-bucket run.
    pub migrations: u64,
    /// Details of the per-bucket run.
    pub per_bucket: VariantResult,
    /// Details of the shared-table run.
    pub shared: VariantResult,
}

/// Length of the pre-drawn sequence of flow numbers the stream loops over
/// (16 MiB, read sequentially).
const ORDER_LEN: usize = 1 << 22;

/// The flows, and the pre-drawn order in which their packets arrive.
struct Traffic {
    flows: Vec<FlowKey>,
    /// The flows' RSS hashes alone, compact: every worker steers every
    /// packet, but only reads the key of its own.
    hashes: Vec<u32>,
    order: Vec<u32>,
}

impl Traffic {
    fn new(count: usize, seed: u64) -> Self {
        let toeplitz = Toeplitz::default();
        let mut rng = SplitMix64::new(seed);
        let flows: Vec<FlowKey> = (0..count)
            .map(|i| {
                let mut address = || std::net::IpAddr::V4((rng.next_u64() as u32).into());
                let (src, dst) = (address(), address());
                FlowKey::new(src, dst, (i % 65_536) as u16, (i / 65_536) as u16, 17)
                    .expect("two IPv4 addresses")
            })
            .collect();
        let mut rng = SplitMix64::new(seed ^ 0x0fde);
        Self {
            hashes: flows.iter().map(|k| toeplitz.hash_flow(k)).collect(),
            order: (0..ORDER_LEN).map(|_| rng.below(count) as u32).collect(),
            flows,
        }
    }
}

/// One worker's replay of the packet stream: packet `i` is of flow
/// `order[i mod ORDER_LEN]`; sequence numbers are counted per flow.
struct Stream<'a> {
    traffic: &'a Traffic,
    next_seq: Vec<u32>,
    at: usize,
    /// The current packet's flow.
    flow: usize,
}

impl<'a> Stream<'a> {
    fn new(traffic: &'a Traffic) -> Self {
        Self {
            traffic,
            next_seq: vec![0; traffic.flows.len()],
            at: 0,
            flow: 0,
        }
    }
}

impl PacketStream for Stream<'_> {
    type Packet = SequencedPacket;

    #[inline]
    fn advance(&mut self) -> u32 {
        let f = self.traffic.order[self.at] as usize;
        self.at = (self.at + 1) & (ORDER_LEN - 1);
        self.next_seq[f] += 1;
        self.flow = f;
        self.traffic.hashes[f]
    }

    #[inline]
    fn packet(&self) -> SequencedPacket {
        let f = self.flow;
        SequencedPacket {
            key: self.traffic.flows[f],
            hash: self.traffic.hashes[f],
            flow: f as u32,
            seq: self.next_seq[f] - 1,
        }
    }
}

/// Plan number `generation`: the same on every replica.
fn make_plan(c: &MigrationCoordinator, seed: u64, generation: u64, moves: usize) -> MigrationPlan {
    let mut rng = SplitMix64::new(seed ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let table = c.table();
    let mut plan: Vec<BucketMove> = Vec::with_capacity(moves);
    while plan.len() < moves.min(table.len()) && c.cores() > 1 {
        let bucket = rng.below(table.len());
        if plan.iter().any(|m| m.bucket == bucket) {
            continue;
        }
        let from = table.core_of(bucket);
        let to = (from + 1 + rng.below(c.cores() - 1)) % c.cores();
        plan.push(BucketMove { bucket, from, to });
    }
    MigrationPlan { moves: plan }
}

fn table_config(flows: usize) -> TableConfig {
    TableConfig {
        // Room for every flow in any one table (bucket or stripe): the
        // benchmark measures access, not eviction.
        capacity: flows,
        // Idle flows are checked for, as in a real table, but never
        // expire: the harness's clock is the wall clock, and a run with
        // more workers than CPUs takes far longer than its traffic's
        // seconds (1000 workers on 2 CPUs: 95 s for 3 s). Flows idle for
        // 30 s of that would expire, come back as new states, and be
        // counted as lost though the migration protocol lost nothing.
        idle_timeout_ns: Some(u64::MAX),
        when_full: WhenFull::EvictLeastRecentlyUsed,
    }
}

/// Runs one variant in the harness's replay mode.
fn drive<'t, W>(
    config: &BenchStateConfig,
    workers: Vec<W>,
    traffic: &'t Traffic,
    reta: &IndirectionTable,
    seconds: f64,
    clocks: ReplayClocks<'_>,
) -> Result<ReplayRun<W, Stream<'t>>, BenchStateError>
where
    W: Worker<Handler = SequenceCheck> + Send,
{
    let streams = workers.iter().map(|_| Stream::new(traffic)).collect();
    let replay = ReplayConfig {
        batch: config.batch,
        ring: config.ring,
        rewrite_every_ns: config.change_interval_ms.max(1) * 1_000_000,
        duration_ns: (seconds * 1e9) as u64,
    };
    let (seed, moves) = (config.seed, config.moves_per_change);
    let run = threaded::replay(
        workers,
        streams,
        reta,
        replay,
        |c: &MigrationCoordinator, generation| make_plan(c, seed, generation, moves),
        clocks,
    );
    if !run.failures.is_empty() {
        let failures: Vec<String> = run.failures.iter().map(|f| f.to_string()).collect();
        return Err(BenchStateError::WorkerFailed {
            variant: "replay",
            failures: failures.join("; "),
        });
    }
    Ok(run)
}

fn result<W: Worker<Handler = SequenceCheck>>(
    run: &ReplayRun<W, Stream<'_>>,
    audit: Audit,
) -> VariantResult {
    let mut check = SequenceCheck::default();
    let mut packets = 0;
    let mut parked = 0;
    for w in &run.workers {
        check.add(w.handler());
        packets += w.stats().processed;
        parked += w.stats().parked;
    }
    let seconds = run.elapsed_ns as f64 / 1e9;
    let pps_per_core = match run.cpu_ns {
        Some(ns) if ns > 0 => packets as f64 / (ns as f64 / 1e9),
        _ => packets as f64 / seconds / run.workers.len() as f64,
    };
    VariantResult {
        pps: packets as f64 / seconds,
        pps_per_core,
        packets,
        seconds,
        reordered: check.reordered,
        lost_states: audit.lost(),
        duplicated_states: audit.duplicated + audit.unknown,
        rewrites: run.rewrites,
        migrations: run.moves,
        parked,
    }
}

/// Packets sent per flow: every replica drew the same packets, and stopped
/// at the same position.
fn sent<W: Worker>(run: &ReplayRun<W, Stream<'_>>) -> Vec<u64> {
    run.streams[0]
        .next_seq
        .iter()
        .map(|&n| u64::from(n))
        .collect()
}

fn run_per_bucket(
    config: &BenchStateConfig,
    traffic: &Traffic,
    reta: &IndirectionTable,
    seconds: f64,
    clocks: ReplayClocks<'_>,
) -> Result<VariantResult, BenchStateError> {
    let tables = table_config(config.flows);
    let workers: Vec<_> = (0..config.workers)
        .map(|c| BucketWorker::new(c, reta, tables, SequenceCheck::default()))
        .collect();
    let run = drive(config, workers, traffic, reta, seconds, clocks)?;
    let mut states: Vec<SequenceState> = Vec::with_capacity(config.flows);
    for w in &run.workers {
        for (_, t) in w.tables() {
            states.extend(t.iter().map(|(_, s)| *s));
        }
    }
    Ok(result(&run, audit(&sent(&run), &states)))
}

fn run_shared(
    config: &BenchStateConfig,
    traffic: &Traffic,
    reta: &IndirectionTable,
    seconds: f64,
    clocks: ReplayClocks<'_>,
) -> Result<VariantResult, BenchStateError> {
    let table = Arc::new(SharedFlowTable::new(
        table_config(config.flows),
        config.stripes,
    ));
    let workers: Vec<_> = (0..config.workers)
        .map(|c| SharedWorker::new(c, table.clone(), SequenceCheck::default()))
        .collect();
    let run = drive(config, workers, traffic, reta, seconds, clocks)?;
    let mut states: Vec<SequenceState> = Vec::with_capacity(config.flows);
    table.for_each(|_, s| states.push(*s));
    Ok(result(&run, audit(&sent(&run), &states)))
}

/// Runs both variants, alternating, and returns the report.
pub fn measure(
    config: &BenchStateConfig,
    clocks: ReplayClocks<'_>,
) -> Result<BenchStateReport, BenchStateError> {
    if config.workers == 0 {
        return Err(BenchStateError::NotPositive(Positive::Workers));
    }
    if config.flows == 0 {
        return Err(BenchStateError::NotPositive(Positive::Flows));
    }
    if config.seconds.is_nan() || config.seconds <= 0.0 {
        return Err(BenchStateError::NotPositive(Positive::Seconds));
    }
    // Zero of these ran anyway, quietly made 1 (or a ring of one batch):
    // a run that is not the one asked for.
    for (value, what) in [
        (config.stripes as u64, Positive::Stripes),
        (config.batch as u64, Positive::Batch),
        (config.ring, Positive::Ring),
        (config.rounds as u64, Positive::Rounds),
    ] {
        if value == 0 {
            return Err(BenchStateError::NotPositive(what));
        }
    }
    let reta = IndirectionTable::equal(config.buckets, config.workers)?;
    let traffic = Traffic::new(config.flows, config.seed);
    let rounds = config.rounds.max(1);
    let seconds = config.seconds / rounds as f64;
    let mut per_bucket_runs = Vec::with_capacity(rounds);
    let mut shared_runs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Alternate which variant goes first, so that a slow drift of the
        // machine favours neither.
        if round % 2 == 0 {
            per_bucket_runs.push(run_per_bucket(config, &traffic, &reta, seconds, clocks)?);
            shared_runs.push(run_shared(config, &traffic, &reta, seconds, clocks)?);
        } else {
            shared_runs.push(run_shared(config, &traffic, &reta, seconds, clocks)?);
            per_bucket_runs.push(run_per_bucket(config, &traffic, &reta, seconds, clocks)?);
        }
    }
    let round_ratios: Vec<f64> = per_bucket_runs
        .iter()
        .zip(&shared_runs)
        .map(|(p, s)| p.pps / s.pps)
        .collect();
    let core_ratios: Vec<f64> = per_bucket_runs
        .iter()
        .zip(&shared_runs)
        .map(|(p, s)| p.pps_per_core / s.pps_per_core)
        .collect();
    let per_bucket = combine(&per_bucket_runs);
    let shared = combine(&shared_runs);
    Ok(BenchStateReport {
        workers: config.workers,
        flows: config.flows,
        change_interval_ms: config.change_interval_ms,
        moves_per_change: config.moves_per_change,
        rounds,
        per_bucket_pps: per_bucket.pps,
        shared_pps: shared.pps,
        ratio: median(round_ratios.clone()),
        round_ratios,
        per_bucket_pps_per_core: per_bucket.pps_per_core,
        shared_pps_per_core: shared.pps_per_core,
        ratio_per_core: median(core_ratios),
        per_bucket_reordered: per_bucket.reordered,
        shared_reordered: shared.reordered,
        lost_states: per_bucket.lost_states
            + per_bucket.duplicated_states
            + shared.lost_states
            + shared.duplicated_states,
        migrations: per_bucket.migrations,
        per_bucket,
        shared,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Rounds of one variant: counts summed, packets per second the median.
fn combine(runs: &[VariantResult]) -> VariantResult {
    let sum = |f: fn(&VariantResult) -> u64| runs.iter().map(f).sum();
    VariantResult {
        pps: median(runs.iter().map(|r| r.pps).collect()),
        pps_per_core: median(runs.iter().map(|r| r.pps_per_core).collect()),
        packets: sum(|r| r.packets),
        seconds: runs.iter().map(|r| r.seconds).sum(),
        reordered: sum(|r| r.reordered),
        lost_states: sum(|r| r.lost_states),
        duplicated_states: sum(|r| r.duplicated_states),
        rewrites: sum(|r| r.rewrites),
        migrations: sum(|r| r.migrations),
        parked: sum(|r| r.parked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn config() -> BenchStateConfig {
        BenchStateConfig {
            seconds: 0.3,
            change_interval_ms: 20,
            rounds: 2,
            ..BenchStateConfig::default()
        }
    }

    fn run(config: &BenchStateConfig) -> Result<BenchStateReport, BenchStateError> {
        let start = Instant::now();
        let now = move || start.elapsed().as_nanos() as u64;
        let clocks = ReplayClocks {
            now: &now,
            thread_cpu: &|| None,
        };
        measure(config, clocks)
    }

    #[test]
    fn short_run_reports_both_variants_without_loss_or_reordering() {
        let r = run(&config()).unwrap();
        assert!(r.per_bucket.packets > 0 && r.shared.packets > 0);
        assert_eq!(r.per_bucket_reordered, 0);
        assert_eq!(r.lost_states, 0);
        assert!(r.migrations > 0);
        assert_eq!(r.round_ratios.len(), 2);
        // Without a CPU clock, the per-core rate is the wall rate shared out.
        let p = &r.per_bucket;
        assert!((p.pps_per_core - p.pps / 2.0).abs() < 1e-6 * p.pps);
    }

    #[test]
    fn a_run_far_longer_than_its_traffic_loses_no_state() {
        // Every reading of the clock advances it 10 s: the few thousand
        // packets of a short run are minutes apart, as when many more
        // workers than CPUs take turns.
        let clock = std::sync::atomic::AtomicU64::new(0);
        let now = || clock.fetch_add(10_000_000_000, std::sync::atomic::Ordering::Relaxed);
        let clocks = ReplayClocks {
            now: &now,
            thread_cpu: &|| None,
        };
        let config = BenchStateConfig {
            flows: 100,
            rounds: 1,
            change_interval_ms: 1,
            ..config()
        };
        let r = measure(&config, clocks).unwrap();
        assert!(r.per_bucket.packets > 0 && r.shared.packets > 0);
        assert_eq!(r.per_bucket.lost_states, 0, "{:?}", r.per_bucket);
        assert_eq!(r.shared.lost_states, 0, "{:?}", r.shared);
        assert_eq!(r.lost_states, 0);
    }

    #[test]
    fn the_streams_agree_and_plans_move_buckets_away() {
        let traffic = Traffic::new(100, 7);
        let (mut a, mut b) = (Stream::new(&traffic), Stream::new(&traffic));
        for _ in 0..1000 {
            assert_eq!(a.advance(), b.advance());
            assert_eq!(a.packet(), b.packet());
        }
        assert_eq!(a.next_seq.iter().map(|&n| u64::from(n)).sum::<u64>(), 1000);
        let c = MigrationCoordinator::new(IndirectionTable::equal(64, 4).unwrap(), 4).unwrap();
        let plan = make_plan(&c, 1, 3, 16);
        assert_eq!(plan, make_plan(&c, 1, 3, 16));
        assert_eq!(plan.moves.len(), 16);
        assert!(plan.moves.iter().all(|m| m.from != m.to && m.to < 4));
    }

    #[test]
    fn bad_settings_are_refused() {
        for (c, what) in [
            (
                BenchStateConfig {
                    workers: 0,
                    ..config()
                },
                Positive::Workers,
            ),
            (
                BenchStateConfig {
                    flows: 0,
                    ..config()
                },
                Positive::Flows,
            ),
            (
                BenchStateConfig {
                    seconds: f64::NAN,
                    ..config()
                },
                Positive::Seconds,
            ),
            (
                BenchStateConfig {
                    stripes: 0,
                    ..config()
                },
                Positive::Stripes,
            ),
            (
                BenchStateConfig {
                    batch: 0,
                    ..config()
                },
                Positive::Batch,
            ),
            (
                BenchStateConfig {
                    ring: 0,
                    ..config()
                },
                Positive::Ring,
            ),
            (
                BenchStateConfig {
                    rounds: 0,
                    ..config()
                },
                Positive::Rounds,
            ),
        ] {
            assert!(matches!(run(&c), Err(BenchStateError::NotPositive(p)) if p == what));
        }
        assert!(matches!(
            run(&BenchStateConfig {
                buckets: 100,
                ..config()
            }),
            Err(BenchStateError::Reta(_))
        ));
    }
}
