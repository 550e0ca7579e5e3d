//! `rsspp bench state`: per-bucket flow tables (§3.3) against one shared
//! table, under indirection-table rewrites.
//!
//! The NIC is replayed inside the workers, as a real NIC dispatches in
//! hardware: every worker thread draws the same seeded stream of packets of
//! `--flows` flows (uniformly at random, each carrying its flow's sequence
//! number), steers each packet through its replica of the indirection table,
//! and processes the packets that fall on its own core, in batches, with the
//! sequence-checking network function (`rsspp_core::state::check`: one
//! lookup and one update of the flow's state per packet). A worker may run at
//! most `--ring` packets ahead of the slowest one, as a NIC's receive rings
//! bound how far apart cores can drift. No third thread competes with the
//! two workers for this machine's two cores.
//!
//! Every `--change-interval-ms` the first worker picks a position in the
//! stream ahead of every worker; there all replicas apply the same plan
//! (`--moves-per-change` random buckets to other cores) through their copy of
//! the `MigrationCoordinator`, and each worker executes its own command. With
//! per-bucket tables the tables move between the threads by the handoff
//! protocol, over channels: a worker ahead of the old owner parks the
//! bucket's packets until the table arrives. With the shared table (one
//! lock-striped table for all workers) nothing moves, and a worker ahead of
//! the old owner processes the bucket's newer packets first.
//!
//! Reported: packets per second of each variant (packets processed over the
//! wall time), packets processed out of order within their flow, flow states
//! lost or duplicated (audited against what was sent), bucket moves.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rsspp_core::reta::RetaError;
use rsspp_core::state::check::{audit, Audit, SequenceCheck, SequenceState, SequencedPacket};
use rsspp_core::state::{
    BucketWorker, Completed, Handoff, MigrationCoordinator, MigrationError, Outbox,
    SharedFlowTable, SharedWorker, TableConfig, WhenFull, Worker,
};
use rsspp_core::{bucket_of, BucketMove, FlowKey, IndirectionTable, MigrationPlan, Toeplitz};
use serde::Serialize;

/// Arguments of `rsspp bench state`.
#[derive(Debug, Clone, Args)]
pub struct BenchStateArgs {
    /// Print JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Seconds of traffic for each of the two variants.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Concurrent flows (at least 1).
    #[arg(long, default_value_t = 10_000)]
    pub flows: usize,
    /// Worker threads (cores).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Time between two indirection-table rewrites, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub change_interval_ms: u64,
    /// Buckets moved by each rewrite.
    #[arg(long, default_value_t = 16)]
    pub moves_per_change: usize,
    /// Indirection-table size (a power of two, 64–65536).
    #[arg(long, default_value_t = 512)]
    pub buckets: usize,
    /// Lock stripes of the shared table.
    #[arg(long, default_value_t = 1024)]
    pub stripes: usize,
    /// Packets per receive batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Seed of the traffic and of the moves.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Packets a worker may run ahead of the slowest one (a receive ring).
    #[arg(long, default_value_t = 2048)]
    pub ring: u64,
    /// Rounds: the variants alternate, `--seconds / --rounds` each per
    /// round; packets per second are the medians over the rounds, the ratio
    /// the median of the rounds' ratios (this machine is shared and noisy).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchStateError {
    /// Zero workers, flows or seconds.
    #[error("--{0} must be positive")]
    NotPositive(&'static str),
    /// A bad table size.
    #[error(transparent)]
    Reta(#[from] RetaError),
    /// The coordinator refused the set-up.
    #[error(transparent)]
    Migration(#[from] MigrationError),
    /// A worker failed (a bug: the report says which).
    #[error("{variant} run failed: {failures}")]
    WorkerFailed {
        /// Which variant.
        variant: &'static str,
        /// The failures, joined.
        failures: String,
    },
    /// The report could not be serialised.
    #[error("cannot serialise the report: {0}")]
    Json(#[from] serde_json::Error),
    /// The report could not be written (a closed pipe included).
    #[error("cannot write the report: {0}")]
    Io(#[from] std::io::Error),
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
    flows: Vec<(FlowKey, u32)>,
    /// The flows' RSS hashes alone, compact: every worker steers every
    /// packet, but only reads the key of its own.
    hashes: Vec<u32>,
    order: Vec<u32>,
}

impl Traffic {
    fn new(count: usize, seed: u64) -> Self {
        let flows = make_flows(count, seed);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x0fde);
        Self {
            hashes: flows.iter().map(|f| f.1).collect(),
            order: (0..ORDER_LEN)
                .map(|_| rng.random_range(0..count as u32))
                .collect(),
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
}

impl<'a> Stream<'a> {
    fn new(traffic: &'a Traffic) -> Self {
        Self {
            traffic,
            next_seq: vec![0; traffic.flows.len()],
            at: 0,
        }
    }

    /// The next packet: its flow, sequence number and hash.
    #[inline]
    fn next(&mut self) -> (usize, u32, u32) {
        let f = self.traffic.order[self.at] as usize;
        self.at = (self.at + 1) & (ORDER_LEN - 1);
        let seq = self.next_seq[f];
        self.next_seq[f] += 1;
        (f, seq, self.traffic.hashes[f])
    }
}

fn make_flows(count: usize, seed: u64) -> Vec<(FlowKey, u32)> {
    let toeplitz = Toeplitz::default();
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let key = FlowKey::new(
                std::net::IpAddr::V4(rng.random::<u32>().into()),
                std::net::IpAddr::V4(rng.random::<u32>().into()),
                (i % 65_536) as u16,
                (i / 65_536) as u16,
                17,
            )
            .expect("two IPv4 addresses");
            (key, toeplitz.hash_flow(&key))
        })
        .collect()
}

/// Plan number `generation`: the same on every replica.
fn make_plan(c: &MigrationCoordinator, seed: u64, generation: u64, moves: usize) -> MigrationPlan {
    let mut rng = SmallRng::seed_from_u64(seed ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let table = c.table();
    let mut plan: Vec<BucketMove> = Vec::with_capacity(moves);
    while plan.len() < moves.min(table.len()) && c.cores() > 1 {
        let bucket = rng.random_range(0..table.len());
        if plan.iter().any(|m| m.bucket == bucket) {
            continue;
        }
        let from = table.core_of(bucket);
        let to = (from + rng.random_range(1..c.cores())) % c.cores();
        plan.push(BucketMove { bucket, from, to });
    }
    MigrationPlan { moves: plan }
}

/// A counter on its own cache line.
#[repr(align(128))]
struct Padded(AtomicU64);

/// What the workers share: how far each has gone, where the next rewrite
/// and the end are.
struct Shared {
    progress: Vec<Padded>,
    next_rewrite: AtomicU64,
    stop_at: AtomicU64,
}

impl Shared {
    fn min_progress(&self) -> u64 {
        self.progress
            .iter()
            .map(|p| p.0.load(Relaxed))
            .min()
            .unwrap_or(0)
    }

    fn max_progress(&self) -> u64 {
        self.progress
            .iter()
            .map(|p| p.0.load(Relaxed))
            .max()
            .unwrap_or(0)
    }
}

/// Settings every worker thread needs.
struct Replay<'a> {
    traffic: &'a Traffic,
    reta: IndirectionTable,
    seed: u64,
    batch: usize,
    ring: u64,
    moves: usize,
    interval_ns: u64,
    duration_ns: u64,
    start: Instant,
}

/// Waits a little without using the CPU, so that a worker waiting for the
/// other is not charged for the wait.
fn pause() {
    std::thread::park_timeout(std::time::Duration::from_micros(20));
}

/// CPU time of the calling thread, nanoseconds (Linux: the first field of
/// `/proc/thread-self/schedstat`), if available.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// What one worker thread returns.
struct Finished<W> {
    worker: W,
    /// CPU time the thread used, if it could be read.
    cpu_ns: Option<u64>,
    /// Packets sent per flow (only the first worker's count is used: every
    /// replica counts the same).
    sent: Vec<u32>,
    rewrites: u64,
    moves: u64,
    failure: Option<String>,
}

/// One worker thread: replays the stream, processes its own packets,
/// applies the rewrites, exchanges tables.
fn replay<W>(
    mut worker: W,
    cfg: &Replay<'_>,
    shared: &Shared,
    handoffs_in: mpsc::Receiver<Handoff<SequenceState>>,
    handoffs_out: Vec<mpsc::Sender<Handoff<SequenceState>>>,
) -> Finished<W>
where
    W: Worker<Handler = SequenceCheck>,
{
    let cpu_start = thread_cpu_ns();
    let me = worker.core();
    let cores = handoffs_out.len();
    let size = cfg.reta.len();
    let mut coordinator =
        MigrationCoordinator::new(cfg.reta.clone(), cores).expect("table checked by the caller");
    let mut stream = Stream::new(cfg.traffic);
    let mut queued = vec![0u64; cores];
    let mut out = Outbox::default();
    let mut batch: Vec<SequencedPacket> = Vec::with_capacity(cfg.batch);
    let mut in_flight: Vec<Completed> = Vec::new();
    let (mut rewrites, mut moves) = (0u64, 0u64);
    let mut failure = None;
    let mut last_rewrite_ns = 0u64;
    let mut rewrite_at = u64::MAX;
    let mut stop_at = u64::MAX;
    let now = || cfg.start.elapsed().as_nanos() as u64;

    let deliver = |out: &mut Outbox<SequenceState>, failure: &mut Option<String>| {
        for h in out.handoffs.drain(..) {
            if handoffs_out[h.to].send(h).is_err() {
                *failure = Some("a worker stopped before taking its table".into());
            }
        }
        out.completed.clear();
    };
    let take_handoffs =
        |worker: &mut W, out: &mut Outbox<SequenceState>, failure: &mut Option<String>| {
            while let Ok(h) = handoffs_in.try_recv() {
                if let Err(e) = worker.accept(h, now(), out) {
                    *failure = Some(e.to_string());
                }
            }
        };

    let mut i = 0u64;
    loop {
        if i % cfg.batch as u64 == 0 {
            // Batch boundary: process, exchange, publish, pace.
            if !batch.is_empty() {
                worker.receive_batch(&mut batch, now(), &mut out);
            }
            take_handoffs(&mut worker, &mut out, &mut failure);
            deliver(&mut out, &mut failure);
            shared.progress[me].0.store(i, Relaxed);
            if me == 0 {
                let t = now();
                // A position no worker has reached or will reach before it
                // reads the shared values again (at its next batch boundary).
                let horizon = shared
                    .max_progress()
                    .saturating_add(2 * (cfg.ring + cfg.batch as u64));
                if t >= cfg.duration_ns {
                    if shared.stop_at.load(Relaxed) == u64::MAX {
                        shared.stop_at.store(horizon, Relaxed);
                    }
                } else if t >= last_rewrite_ns + cfg.interval_ns && {
                    // Every worker is past the previous rewrite.
                    let previous = shared.next_rewrite.load(Relaxed);
                    previous == u64::MAX || shared.min_progress() > previous
                } {
                    shared.next_rewrite.store(horizon, Relaxed);
                    last_rewrite_ns = t;
                }
            }
            rewrite_at = match shared.next_rewrite.load(Relaxed) {
                r if r >= i => r,
                _ => rewrite_at,
            };
            stop_at = shared.stop_at.load(Relaxed);
            // The ring bound: wait for the slowest worker.
            while i > shared.min_progress() + cfg.ring && failure.is_none() {
                take_handoffs(&mut worker, &mut out, &mut failure);
                deliver(&mut out, &mut failure);
                pause();
            }
        }
        if i >= stop_at || failure.is_some() {
            break;
        }
        if i == rewrite_at {
            if !batch.is_empty() {
                worker.receive_batch(&mut batch, now(), &mut out);
                deliver(&mut out, &mut failure);
            }
            // The previous rewrite's tables have all been released (every
            // worker is past it): wait until ours have arrived.
            while !worker.is_settled() && failure.is_none() {
                take_handoffs(&mut worker, &mut out, &mut failure);
                deliver(&mut out, &mut failure);
                pause();
            }
            for done in in_flight.drain(..) {
                coordinator.complete(done).expect("replicas agree");
            }
            rewrites += 1;
            let plan = make_plan(&coordinator, cfg.seed, rewrites, cfg.moves);
            match coordinator.apply(&plan, &queued) {
                Ok(commands) => {
                    moves += plan.moves.len() as u64;
                    in_flight.extend(plan.moves.iter().map(|m| Completed {
                        bucket: m.bucket,
                        generation: coordinator.generation(),
                    }));
                    for c in commands.into_iter().filter(|c| c.core == me) {
                        if let Err(e) = worker.command(c, now(), &mut out) {
                            failure = Some(e.to_string());
                        }
                    }
                    deliver(&mut out, &mut failure);
                }
                Err(e) => failure = Some(e.to_string()),
            }
        }
        let (f, seq, hash) = stream.next();
        let core = coordinator.table().core_of(bucket_of(hash, size));
        queued[core] += 1;
        if core == me {
            batch.push(SequencedPacket {
                key: cfg.traffic.flows[f].0,
                hash,
                flow: f as u32,
                seq,
            });
        }
        i += 1;
    }
    if !batch.is_empty() {
        worker.receive_batch(&mut batch, now(), &mut out);
        deliver(&mut out, &mut failure);
    }
    shared.progress[me].0.store(u64::MAX, Relaxed);
    while !worker.is_settled() && failure.is_none() {
        take_handoffs(&mut worker, &mut out, &mut failure);
        deliver(&mut out, &mut failure);
        pause();
    }
    let cpu_ns = thread_cpu_ns()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    Finished {
        worker,
        cpu_ns,
        sent: stream.next_seq,
        rewrites,
        moves,
        failure,
    }
}

fn table_config(flows: usize) -> TableConfig {
    TableConfig {
        // Room for every flow in any one table (bucket or stripe): the
        // benchmark measures access, not eviction.
        capacity: flows,
        idle_timeout_ns: Some(30_000_000_000),
        when_full: WhenFull::EvictLeastRecentlyUsed,
    }
}

/// Runs one variant: one thread per worker, replaying the stream.
fn drive<W>(
    args: &BenchStateArgs,
    workers: Vec<W>,
    traffic: &Traffic,
    reta: &IndirectionTable,
    seconds: f64,
) -> Result<(Vec<Finished<W>>, f64), BenchStateError>
where
    W: Worker<Handler = SequenceCheck> + Send,
{
    let cores = workers.len();
    let shared = Shared {
        progress: (0..cores).map(|_| Padded(AtomicU64::new(0))).collect(),
        next_rewrite: AtomicU64::new(u64::MAX),
        stop_at: AtomicU64::new(u64::MAX),
    };
    let cfg = Replay {
        traffic,
        reta: reta.clone(),
        seed: args.seed,
        batch: args.batch.max(1),
        ring: args.ring.max(args.batch as u64),
        moves: args.moves_per_change,
        interval_ns: args.change_interval_ms.max(1) * 1_000_000,
        duration_ns: (seconds * 1e9) as u64,
        start: Instant::now(),
    };
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..cores).map(|_| mpsc::channel()).unzip();
    let finished: Vec<Finished<W>> = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .zip(receivers)
            .map(|(w, rx)| {
                let senders = senders.clone();
                let (cfg, shared) = (&cfg, &shared);
                scope.spawn(move || replay(w, cfg, shared, rx, senders))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let seconds = cfg.start.elapsed().as_secs_f64();
    if let Some(f) = finished.iter().find_map(|f| f.failure.clone()) {
        return Err(BenchStateError::WorkerFailed {
            variant: "replay",
            failures: f,
        });
    }
    Ok((finished, seconds))
}

fn result<W: Worker<Handler = SequenceCheck>>(
    finished: &[Finished<W>],
    audit: Audit,
    seconds: f64,
) -> VariantResult {
    let mut check = SequenceCheck::default();
    let mut packets = 0;
    let mut parked = 0;
    for f in finished {
        check.add(f.worker.handler());
        packets += f.worker.stats().processed;
        parked += f.worker.stats().parked;
    }
    let cpu: Option<u64> = finished.iter().map(|f| f.cpu_ns).sum();
    let pps_per_core = match cpu {
        Some(ns) if ns > 0 => packets as f64 / (ns as f64 / 1e9),
        _ => packets as f64 / seconds / finished.len() as f64,
    };
    VariantResult {
        pps: packets as f64 / seconds,
        pps_per_core,
        packets,
        seconds,
        reordered: check.reordered,
        lost_states: audit.lost(),
        duplicated_states: audit.duplicated + audit.unknown,
        rewrites: finished[0].rewrites,
        migrations: finished[0].moves,
        parked,
    }
}

fn sent<W>(finished: &[Finished<W>]) -> Vec<u64> {
    finished[0].sent.iter().map(|&n| u64::from(n)).collect()
}

/// Runs both variants and returns the report.
pub fn measure(args: &BenchStateArgs) -> Result<BenchStateReport, BenchStateError> {
    if args.workers == 0 {
        return Err(BenchStateError::NotPositive("workers"));
    }
    if args.flows == 0 {
        return Err(BenchStateError::NotPositive("flows"));
    }
    if args.seconds.is_nan() || args.seconds <= 0.0 {
        return Err(BenchStateError::NotPositive("seconds"));
    }
    let reta = IndirectionTable::equal(args.buckets, args.workers)?;
    let traffic = Traffic::new(args.flows, args.seed);
    let rounds = args.rounds.max(1);
    let seconds = args.seconds / rounds as f64;
    let mut per_bucket_runs = Vec::with_capacity(rounds);
    let mut shared_runs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Alternate which variant goes first, so that a slow drift of the
        // machine favours neither.
        if round % 2 == 0 {
            per_bucket_runs.push(run_per_bucket(args, &traffic, &reta, seconds)?);
            shared_runs.push(run_shared(args, &traffic, &reta, seconds)?);
        } else {
            shared_runs.push(run_shared(args, &traffic, &reta, seconds)?);
            per_bucket_runs.push(run_per_bucket(args, &traffic, &reta, seconds)?);
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
        workers: args.workers,
        flows: args.flows,
        change_interval_ms: args.change_interval_ms,
        moves_per_change: args.moves_per_change,
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

fn run_per_bucket(
    args: &BenchStateArgs,
    traffic: &Traffic,
    reta: &IndirectionTable,
    seconds: f64,
) -> Result<VariantResult, BenchStateError> {
    let config = table_config(args.flows);
    let workers: Vec<_> = (0..args.workers)
        .map(|c| BucketWorker::new(c, reta, config, SequenceCheck::default()))
        .collect();
    let (finished, wall) = drive(args, workers, traffic, reta, seconds)?;
    let mut states: Vec<SequenceState> = Vec::with_capacity(args.flows);
    for f in &finished {
        for (_, t) in f.worker.tables() {
            states.extend(t.iter().map(|(_, s)| *s));
        }
    }
    Ok(result(&finished, audit(&sent(&finished), &states), wall))
}

fn run_shared(
    args: &BenchStateArgs,
    traffic: &Traffic,
    reta: &IndirectionTable,
    seconds: f64,
) -> Result<VariantResult, BenchStateError> {
    let table = Arc::new(SharedFlowTable::new(table_config(args.flows), args.stripes));
    let workers: Vec<_> = (0..args.workers)
        .map(|c| SharedWorker::new(c, table.clone(), SequenceCheck::default()))
        .collect();
    let (finished, wall) = drive(args, workers, traffic, reta, seconds)?;
    let mut states: Vec<SequenceState> = Vec::with_capacity(args.flows);
    table.for_each(|_, s| states.push(*s));
    Ok(result(&finished, audit(&sent(&finished), &states), wall))
}

/// `rsspp bench state`: runs both variants and prints the summary or JSON.
pub fn run(args: &BenchStateArgs) -> Result<(), BenchStateError> {
    let report = measure(args)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "{} workers, {} flows, {} buckets moved every {} ms, {:.1} s per variant in {} rounds",
        report.workers,
        report.flows,
        report.moves_per_change,
        report.change_interval_ms,
        args.seconds,
        report.rounds
    )?;
    writeln!(
        out,
        "{:<14} {:>12} {:>14} {:>10} {:>12} {:>8} {:>8}",
        "", "packets/s", "per core-sec", "reordered", "lost states", "moves", "parked"
    )?;
    for (name, v) in [
        ("per-bucket", &report.per_bucket),
        ("shared table", &report.shared),
    ] {
        writeln!(
            out,
            "{:<14} {:>12.0} {:>14.0} {:>10} {:>12} {:>8} {:>8}",
            name,
            v.pps,
            v.pps_per_core,
            v.reordered,
            v.lost_states + v.duplicated_states,
            v.migrations,
            v.parked
        )?;
    }
    let rounds: Vec<String> = report
        .round_ratios
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect();
    writeln!(
        out,
        "per-bucket / shared: {:.2}x packets/s (median; rounds {}), {:.2}x per core-second",
        report.ratio,
        rounds.join(" "),
        report.ratio_per_core
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> BenchStateArgs {
        BenchStateArgs {
            json: true,
            seconds: 0.3,
            flows: 10_000,
            workers: 2,
            change_interval_ms: 20,
            moves_per_change: 16,
            buckets: 512,
            stripes: 1024,
            batch: 32,
            seed: 1,
            ring: 2048,
            rounds: 2,
        }
    }

    #[test]
    fn short_run_reports_both_variants_without_loss_or_reordering() {
        let r = measure(&args()).unwrap();
        assert!(r.per_bucket.packets > 0 && r.shared.packets > 0);
        assert_eq!(r.per_bucket_reordered, 0);
        assert_eq!(r.lost_states, 0);
        assert!(r.migrations > 0);
        let json = serde_json::to_value(&r).unwrap();
        for field in [
            "per_bucket_pps",
            "shared_pps",
            "per_bucket_reordered",
            "shared_reordered",
            "lost_states",
            "migrations",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        for (a, what) in [
            (
                BenchStateArgs {
                    workers: 0,
                    ..args()
                },
                "workers",
            ),
            (BenchStateArgs { flows: 0, ..args() }, "flows"),
            (
                BenchStateArgs {
                    seconds: 0.0,
                    ..args()
                },
                "seconds",
            ),
        ] {
            let e = measure(&a).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
        assert!(matches!(
            measure(&BenchStateArgs {
                buckets: 100,
                ..args()
            }),
            Err(BenchStateError::Reta(_))
        ));
    }
}
