//! The runtime: sets up the fanout group and the workers, then runs the
//! controller on the calling thread — a round every interval, RSS++'s
//! `ControlLoop` on the per-bucket counts and the workers' loads, `--churn`
//! moves, each move done by the counted-mark handoff — and at the end
//! drains every worker and gathers the summary and the flows.
//!
//! ```text
//!  in ─► fanout program: bucket = toeplitz & (size-1); word = fetch_add(words[bucket], 1)
//!          │                return owner(word)  (0: the parking socket, w+1: worker w)
//!          ▼
//!   worker w's TPACKET_V3 ring ─► parse, bucket, Shard::take ─► chain(state) ─► TX socket / sink
//!          ▲ Expect / Release(mark) / Force / Finish       │ Moving(state) to the new owner
//!          │                                               ▼
//!   controller: counts (the words), loads (busy vs idle) ─► ControlLoop::tick, churn
//!               ─► per move: Expect to the new owner, wait for its answer,
//!                  mark = CAS(words[bucket], new owner), Release(mark) to the old one
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rsspp_core::handoff::{Completion, Handoffs, DEFAULT_HANDOFF_TIMEOUT};
use rsspp_core::measure::{imbalance_ratio, load_from_busy};
use rsspp_core::rand::SplitMix64;
use rsspp_core::reframer::ReframerConfig;
use rsspp_core::state::marks::Shard;
use rsspp_core::state::{FlowTable, SharedFlowTable, TableConfig, WhenFull};
use rsspp_core::{
    ControlConfig, ControlLoop, IndirectionTable, MigrationPlan, RssKey, ScalingAction, Toeplitz,
};
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::afpacket::{self, FanoutGroup, RingConfig, TxSocket};
use crate::afxdp::XdpSetup;
use crate::error::RuntimeError;
use crate::metrics::{Exporter, RoundFigures};
use crate::nf::{FlowRecord, NetworkFunction};
use crate::reframe::{ReframeStage, ReframerReport};
use crate::steer::Steering;
use crate::worker::{Clock, Core, Finished, Rx, ToController, ToWorker, Worker, WorkerReport};

/// Where the flow states live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableMode {
    /// One flow table per bucket, moved with the bucket (RSS++).
    PerBucket,
    /// One lock-striped table shared by all workers (the paper's
    /// baseline).
    Shared,
}

/// How frames reach the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// AF_PACKET TPACKET_V3 rings in a fanout group steered by an eBPF
    /// program (any interface).
    AfPacket,
    /// AF_XDP sockets, one per worker on each receive queue, steered by an
    /// XDP program with the same per-bucket words.
    AfXdp,
}

/// How a bucket moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moves {
    /// The new owner waits until the old one has processed every packet of
    /// the bucket sent to it (no reordering).
    Ordered,
    /// The state moves at once; packets still queued at the old owner are
    /// processed there without state, and may overtake — to show what the
    /// handoff prevents.
    Immediate,
}

/// The runtime's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Interface to receive from.
    pub input: String,
    /// Interface to transmit to; `None`: a sink.
    pub output: Option<String>,
    /// One worker per CPU, in this order.
    pub cpus: Vec<u32>,
    /// How frames reach the workers.
    pub backend: Backend,
    /// Where the flow states live.
    pub table: TableMode,
    /// How buckets move.
    pub moves: Moves,
    /// RSS++ rebalancing every round.
    pub balance: bool,
    /// Buckets moved at random every round.
    pub churn: usize,
    /// Seed of the churn.
    pub churn_seed: u64,
    /// Buckets in the indirection table (a power of two).
    pub buckets: usize,
    /// The control loop's settings (its interval is the round).
    pub control: ControlConfig,
    /// Limits of each flow table.
    pub flow_table: TableConfig,
    /// Receive ring geometry.
    pub ring: RingConfig,
    /// How long a handoff may wait for its bucket to drain.
    pub handoff_timeout: Duration,
    /// Stop after this long (`None`: until the stop flag).
    pub duration: Option<Duration>,
    /// The Toeplitz key the steering hashes with (symmetric when the chain
    /// tracks connections: both directions in one bucket).
    pub key: RssKey,
    /// Serve the daemon's metrics here (`None`: none), updated every round.
    pub metrics: Option<SocketAddr>,
    /// A Reframer stage in each worker, before the functions (`None`: none).
    pub reframer: Option<ReframerConfig>,
}

impl Config {
    /// Defaults around the interfaces and CPUs: per-bucket tables, ordered
    /// moves, balancing on, no churn, 128 buckets, 100 ms rounds.
    pub fn new(input: impl Into<String>, cpus: Vec<u32>) -> Self {
        Self {
            input: input.into(),
            output: None,
            cpus,
            backend: Backend::AfPacket,
            table: TableMode::PerBucket,
            moves: Moves::Ordered,
            balance: true,
            churn: 0,
            churn_seed: 1,
            buckets: 128,
            control: ControlConfig::default(),
            flow_table: TableConfig {
                capacity: 65_536,
                idle_timeout_ns: None,
                when_full: WhenFull::EvictLeastRecentlyUsed,
            },
            ring: RingConfig::default(),
            handoff_timeout: DEFAULT_HANDOFF_TIMEOUT,
            duration: None,
            key: RssKey::microsoft(),
            metrics: None,
            reframer: None,
        }
    }
}

/// Handoffs by how they ended.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HandoffSummary {
    /// The old owner had processed every packet of the bucket sent to it.
    pub drained: u64,
    /// The state left before (immediate moves, or forced after the
    /// timeout).
    pub early: u64,
}

/// Workers woken and put to sleep by CPU scaling.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ScalingSummary {
    /// Workers given buckets again (`ScalingAction::Add`).
    pub woken: u64,
    /// Workers emptied of their buckets (`ScalingAction::Remove`).
    pub parked: u64,
}

/// What `rsspp nf --json` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Frames taken from the rings.
    pub received: u64,
    /// Frames transmitted.
    pub forwarded: u64,
    /// Frames not transmitted, by reason: `ring_full` (dropped by the
    /// kernel before the ring, never received), `not_ip`, `malformed`,
    /// `sink` (no `--out`), `tx_error`, `stranded` (parked for a state that
    /// never came), and the functions' own reasons.
    pub dropped: BTreeMap<String, u64>,
    /// Buckets moved.
    pub migrations: u64,
    /// Controller rounds.
    pub rounds: u64,
    /// CPU scaling (`--autoscale`): workers woken and workers put to
    /// sleep (left without a bucket).
    pub scaling: ScalingSummary,
    /// Handoffs by how they ended.
    pub handoffs: HandoffSummary,
    /// The Reframer stages, all workers together (`--reframer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reframer: Option<ReframerSummary>,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
}

/// The Reframer stages of all workers, summed.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ReframerSummary {
    /// `T_buff`, microseconds.
    pub buffer_us: f64,
    /// The largest batch: a flow's frames sent on at once.
    pub max_burst: u32,
    /// Frames that went in.
    pub packets_in: u64,
    /// Frames that came out (all that went in: the stages empty at the end).
    pub packets_out: u64,
    /// Frames held in a flow's batch (all but the bypassed ones).
    pub buffered: u64,
    /// SYN, FIN and RST frames sent on without delay.
    pub bypassed: u64,
    /// Batches sent on, all reasons.
    pub flushes: u64,
    /// Batches that left at their deadline.
    pub flush_timeout: u64,
    /// Batches that left at the maximum burst.
    pub flush_burst: u64,
    /// Batches sent on because a bypassing frame of their flow came.
    pub flush_bypass: u64,
    /// Batches sent on early: their bucket was leaving the worker, or the
    /// run was ending.
    pub flush_early: u64,
    /// Mean frames per batch.
    pub mean_batch: f64,
    /// Spatial locality factor of the frames the workers received (mean
    /// run of one flow's frames back to back in a worker's stream).
    pub slf_in: f64,
    /// The same, of the frames the stages sent on to the functions.
    pub slf_out: f64,
}

impl ReframerSummary {
    fn add(&mut self, r: &ReframerReport, runs: &mut (u64, u64)) {
        let c = &r.counts;
        self.packets_in += c.packets_in;
        self.packets_out += c.packets_out;
        self.buffered += c.buffered;
        self.bypassed += c.bypassed;
        self.flushes += c.batches();
        self.flush_timeout += c.flush_timeout;
        self.flush_burst += c.flush_burst;
        self.flush_bypass += c.flush_bypass;
        self.flush_early += c.flush_early;
        runs.0 += r.key_runs_in;
        runs.1 += r.key_runs_out;
    }
}

/// The runtime's result.
#[derive(Debug)]
pub struct Outcome {
    /// Totals.
    pub summary: Summary,
    /// One record per flow, from the functions that keep one (`monitor`).
    pub flows: Vec<FlowRecord>,
}

/// Runs the runtime with a network function per worker (`make(worker)`)
/// until `stop` is raised or the duration has passed.
pub fn run<N: NetworkFunction>(
    config: &Config,
    make: impl Fn(usize) -> N,
    stop: &AtomicBool,
) -> Result<Outcome, RuntimeError> {
    let n = config.cpus.len();
    if n == 0 {
        return Err(RuntimeError::Config("no CPU to run a worker on".into()));
    }
    if n >= usize::from(u16::MAX) {
        return Err(RuntimeError::Config(format!("{n} workers: too many")));
    }
    config
        .control
        .validate()
        .map_err(|e| RuntimeError::Config(e.to_string()))?;
    if let Some(r) = &config.reframer {
        r.validate()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
    }
    let in_index = afpacket::ifindex(&config.input)?;
    let out_index = config
        .output
        .as_deref()
        .map(afpacket::ifindex)
        .transpose()?;
    // Bound before anything is loaded: a busy port must not cost an attach.
    let exporter = config
        .metrics
        .map(|addr| Exporter::start(addr, &config.input, config.backend))
        .transpose()?;
    if let Some(e) = &exporter {
        info!("metrics at http://{}/metrics", e.addr());
    }
    let key = config.key.clone();
    let plural = if n == 1 { "" } else { "s" };
    let (steering, rings, attached) = match config.backend {
        Backend::AfPacket => {
            let steering = Steering::load(config.buckets, &key)?;
            let FanoutGroup { parking, rings, id } =
                FanoutGroup::new(in_index, n, config.ring, steering.prog_fd())?;
            info!(
                "fanout group {id} on {} with {n} worker{plural}",
                config.input
            );
            let rings: Vec<Rx> = rings.into_iter().map(Rx::Packet).collect();
            (steering, rings, Attached::Parking { _socket: parking })
        }
        Backend::AfXdp => {
            let setup = XdpSetup::new(&config.input, in_index, n, config.buckets, &key)?;
            info!(
                "AF_XDP on {} ({} mode): {} queue{} × {n} worker{plural}",
                config.input,
                setup.mode,
                setup.queues,
                if setup.queues == 1 { "" } else { "s" }
            );
            let rings: Vec<Rx> = setup.rx.into_iter().map(Rx::Xdp).collect();
            (
                setup.steering,
                rings,
                Attached::Xdp {
                    _program: setup.attached,
                },
            )
        }
    };
    let mut tx = Vec::with_capacity(n);
    for _ in 0..n {
        tx.push(out_index.map(TxSocket::new).transpose()?);
    }

    // Every bucket starts on the parking member; giving each its first
    // owner is a switch like any other, whose mark is where the owner's
    // count starts.
    let mut table = IndirectionTable::equal(config.buckets, n)?;
    let marks: Vec<u64> = (0..config.buckets)
        .map(|b| steering.switch(b, member(table.core_of(b))))
        .collect();
    let shared = (config.table == TableMode::Shared)
        .then(|| Arc::new(SharedFlowTable::new(config.flow_table, 64)));

    let (to_controller, from_workers) = crossbeam_channel::unbounded();
    let channels: Vec<Channel<N::State>> = (0..n).map(|_| crossbeam_channel::unbounded()).collect();
    let peers: Vec<Sender<ToWorker<N::State>>> = channels.iter().map(|(s, _)| s.clone()).collect();
    let clocks: Vec<Arc<Clock>> = (0..n).map(|_| Arc::new(Clock::default())).collect();
    let mut handles = Vec::with_capacity(n);
    for ((w, ring), (tx, (_, rx))) in rings
        .into_iter()
        .enumerate()
        .zip(tx.into_iter().zip(channels))
    {
        let flow_table = config.flow_table;
        let per_bucket = shared.is_none();
        let owner = table.clone();
        let shard = Shard::new(w, config.buckets, |b| {
            (owner.core_of(b) == w).then(|| {
                let state = per_bucket.then(|| FlowTable::new(flow_table));
                (state, marks[b])
            })
        });
        let reframe = config
            .reframer
            .map(ReframeStage::new)
            .transpose()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let worker = Worker {
            index: w,
            cpu: config.cpus[w],
            ring,
            rx,
            core: Core {
                index: w,
                nf: make(w),
                shard,
                shared: shared.clone(),
                tx,
                toeplitz: Toeplitz::new(key.clone()),
                buckets: config.buckets,
                peers: peers.clone(),
                controller: to_controller.clone(),
                clock: Arc::clone(&clocks[w]),
                report: WorkerReport {
                    worker: w,
                    cpu: config.cpus[w],
                    ..WorkerReport::default()
                },
                finished: Vec::new(),
                reframe,
                due: Vec::new(),
                now: 0,
                realtime_to_monotonic: 0,
            },
        };
        let handle = std::thread::Builder::new()
            .name(format!("rsspp-nf-{w}"))
            .spawn(move || worker.run())
            .map_err(|source| {
                RuntimeError::Os(crate::error::Os {
                    what: "starting a worker thread",
                    source,
                })
            })?;
        handles.push(handle);
    }
    drop(to_controller);

    let mut controller = Controller {
        config,
        steering: &steering,
        peers,
        inbox: from_workers,
        handoffs: Handoffs::new(config.buckets, config.handoff_timeout),
        forced: vec![false; config.buckets],
        summary: HandoffSummary::default(),
        scaling: ScalingSummary::default(),
        started: Instant::now(),
        exporter,
    };
    let result = controller.rounds(&mut table, &clocks, stop);
    // Whatever happened, the workers drain and exit.
    let settled = controller.settle();
    let marks: Vec<u64> = (0..config.buckets)
        .map(|b| steering.switch(b, PARKING))
        .collect();
    for p in &controller.peers {
        let _ = p.send(ToWorker::Finish {
            marks: marks.clone(),
        });
    }
    let mut finished: Vec<Finished<N>> = Vec::with_capacity(n);
    for (w, h) in handles.into_iter().enumerate() {
        finished.push(h.join().map_err(|_| RuntimeError::WorkerPanicked(w))?);
    }
    // The parking socket (or the XDP program) goes last: frames arriving
    // until now are dropped there (passed to the stack).
    drop(attached);
    let (migrations, rounds) = result?;
    settled?;

    let mut summary = Summary {
        migrations,
        rounds,
        scaling: controller.scaling,
        handoffs: controller.summary,
        ..Summary::default()
    };
    let mut reframer = config.reframer.map(|c| ReframerSummary {
        buffer_us: c.buffer_ns as f64 / 1000.0,
        max_burst: c.max_burst,
        ..ReframerSummary::default()
    });
    let mut runs = (0, 0);
    let mut flows = Vec::new();
    for f in &finished {
        for (_, state) in &f.states {
            if let Some(table) = state {
                flows.extend(table.iter().filter_map(|(k, s)| f.nf.record(k, s)));
            }
        }
    }
    if let (Some(shared), Some(f)) = (&shared, finished.first()) {
        shared.for_each(|k, s| flows.extend(f.nf.record(k, s)));
    }
    for f in finished {
        summary.received += f.report.received;
        summary.forwarded += f.report.forwarded;
        for (reason, count) in &f.report.dropped {
            *summary.dropped.entry(reason.clone()).or_default() += count;
        }
        if let (Some(total), Some(r)) = (reframer.as_mut(), &f.report.reframer) {
            total.add(r, &mut runs);
        }
        summary.workers.push(f.report);
    }
    if let Some(total) = reframer.as_mut() {
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        total.mean_batch = ratio(total.buffered, total.flushes);
        total.slf_in = ratio(total.packets_in, runs.0);
        total.slf_out = ratio(total.packets_out, runs.1);
    }
    summary.reframer = reframer;
    Ok(Outcome { summary, flows })
}

/// What keeps the steering in place while the workers run.
enum Attached {
    /// The fanout group's parking socket.
    Parking { _socket: std::os::fd::OwnedFd },
    /// The XDP program's link and socket map.
    Xdp { _program: crate::afxdp::Attached },
}

/// Both ends of a worker's inbox.
type Channel<S> = (Sender<ToWorker<S>>, Receiver<ToWorker<S>>);

/// The fanout member of the parking socket.
const PARKING: u16 = 0;

/// The fanout member of worker `w`.
fn member(w: usize) -> u16 {
    w as u16 + 1
}

struct Controller<'a, S> {
    config: &'a Config,
    steering: &'a Steering,
    peers: Vec<Sender<ToWorker<S>>>,
    inbox: Receiver<ToController>,
    handoffs: Handoffs,
    /// Buckets whose handoff was told to stop waiting.
    forced: Vec<bool>,
    summary: HandoffSummary,
    scaling: ScalingSummary,
    started: Instant,
    exporter: Option<Exporter>,
}

/// How long the controller waits for a worker to answer an `Expect` before
/// it says so (and waits on: on an overloaded machine a worker may not run
/// for seconds).
const ANSWER_SLOW: Duration = Duration::from_secs(2);
/// How long it waits in all before it takes the worker for hung and stops.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl<S> Controller<'_, S> {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn send(&self, worker: usize, msg: ToWorker<S>) -> Result<(), RuntimeError> {
        self.peers[worker]
            .send(msg)
            .map_err(|_| RuntimeError::WorkerGone(worker))
    }

    /// Handles one worker message; returns the worker that said
    /// `Expecting`, if it was that.
    fn handle(&mut self, msg: ToController) -> Result<Option<usize>, RuntimeError> {
        match msg {
            ToController::Expecting { worker } => return Ok(Some(worker)),
            ToController::Accepted {
                bucket,
                left_behind,
            } => {
                let how = if left_behind == 0 {
                    self.summary.drained += 1;
                    Completion::Drained
                } else {
                    self.summary.early += 1;
                    if self.config.moves == Moves::Ordered {
                        warn!("bucket {bucket} moved with {left_behind} packet(s) not drained");
                    }
                    Completion::Forced
                };
                self.handoffs.complete(bucket, how);
                self.forced[bucket] = false;
            }
            ToController::Refused { worker, error } => {
                // A protocol bug: say so loudly, and stop.
                return Err(RuntimeError::Config(format!(
                    "worker {worker} refused a move: {error}"
                )));
            }
        }
        Ok(None)
    }

    /// Handoffs that waited past the timeout are told to stop waiting.
    fn force_expired(&mut self) -> Result<(), RuntimeError> {
        let now = self.now();
        for b in self.handoffs.expired(now) {
            if !self.forced[b] {
                if let Some(h) = self.handoffs.get(b) {
                    debug!("bucket {b}: handoff from worker {} timed out", h.from);
                    self.send(h.from as usize, ToWorker::Force { bucket: b })?;
                    self.forced[b] = true;
                }
            }
        }
        Ok(())
    }

    /// Waits for messages until `deadline`.
    fn wait_until(&mut self, deadline: Instant) -> Result<(), RuntimeError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(msg) => {
                    if let Some(w) = self.handle(msg)? {
                        return Err(RuntimeError::Config(format!(
                            "worker {w} answered an Expect nobody sent"
                        )));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(()),
                Err(RecvTimeoutError::Disconnected) => return Err(RuntimeError::WorkerGone(0)),
            }
        }
    }

    /// Moves the plan's buckets, in order-preserving handoffs.
    fn execute(
        &mut self,
        plan: &MigrationPlan,
        table: &mut IndirectionTable,
    ) -> Result<(), RuntimeError> {
        if plan.is_empty() {
            return Ok(());
        }
        for m in &plan.moves {
            self.send(m.to, ToWorker::Expect { bucket: m.bucket })?;
        }
        let mut answers = 0;
        let asked = Instant::now();
        let mut said = asked;
        while answers < plan.moves.len() {
            let left = (said + ANSWER_SLOW).saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(msg) => {
                    if self.handle(msg)?.is_some() {
                        answers += 1;
                    }
                }
                Err(_) => {
                    let m = &plan.moves[answers.min(plan.moves.len() - 1)];
                    if asked.elapsed() >= ANSWER_TIMEOUT {
                        return Err(RuntimeError::WorkerHung(m.to));
                    }
                    said = Instant::now();
                    tracing::warn!(
                        "worker {} has not answered a move for {:.0} s (is this machine \
                         overloaded?); waiting up to {} s",
                        m.to,
                        asked.elapsed().as_secs_f64(),
                        ANSWER_TIMEOUT.as_secs()
                    );
                }
            }
        }
        let now = self.now();
        let immediate = self.config.moves == Moves::Immediate;
        for m in &plan.moves {
            let mark = self.steering.switch(m.bucket, member(m.to));
            self.handoffs
                .begin(m.bucket, m.from as u32, m.to as u32, now);
            self.forced[m.bucket] = false;
            self.send(
                m.from,
                ToWorker::Release {
                    bucket: m.bucket,
                    to: m.to,
                    mark,
                    immediate,
                },
            )?;
        }
        table.apply(plan, self.peers.len())?;
        Ok(())
    }

    /// The rounds, until stopped; returns the buckets moved and the rounds.
    fn rounds(
        &mut self,
        table: &mut IndirectionTable,
        clocks: &[Arc<Clock>],
        stop: &AtomicBool,
    ) -> Result<(u64, u64), RuntimeError> {
        let n = self.peers.len();
        let interval = self.config.control.interval;
        let mut control = ControlLoop::new(self.config.control);
        let mut rng = SplitMix64::new(self.config.churn_seed);
        let mut counts: Vec<u64> = (0..self.config.buckets)
            .map(|b| self.steering.count(b))
            .collect();
        let read_clocks = || -> Vec<(u64, u64)> {
            clocks
                .iter()
                .map(|c| {
                    (
                        c.busy_ns.load(Ordering::Relaxed),
                        c.idle_ns.load(Ordering::Relaxed),
                    )
                })
                .collect()
        };
        let mut times = read_clocks();
        let (mut migrations, mut rounds) = (0u64, 0u64);
        let mut next = Instant::now() + interval;
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if self
                .config
                .duration
                .is_some_and(|d| self.started.elapsed() >= d)
            {
                break;
            }
            self.wait_until(next.min(Instant::now() + Duration::from_millis(50)))?;
            self.force_expired()?;
            if Instant::now() < next {
                continue;
            }
            next += interval;
            rounds += 1;
            let now = self.now();
            let round_start = Instant::now();

            let fresh: Vec<u64> = (0..self.config.buckets)
                .map(|b| self.steering.count(b))
                .collect();
            let bucket_packets: Vec<u64> = fresh.iter().zip(&counts).map(|(a, b)| a - b).collect();
            counts = fresh;
            let fresh = read_clocks();
            let loads: Vec<f64> = fresh
                .iter()
                .zip(&times)
                .map(|(&(b1, i1), &(b0, i0))| {
                    let busy = b1.saturating_sub(b0);
                    load_from_busy(busy, busy + i1.saturating_sub(i0))
                })
                .collect();
            times = fresh;
            // Each worker's packets this round, by the table before the
            // round's moves; the imbalance is over the workers in use.
            let mut pps = vec![0.0; n];
            for (b, &p) in bucket_packets.iter().enumerate() {
                pps[table.core_of(b)] += p as f64;
            }
            let in_use: Vec<f64> = table.cores_in_use().iter().map(|&c| pps[c]).collect();
            let imbalance = imbalance_ratio(&in_use);

            let held = self.handoffs.held();
            let mut moved: Vec<usize> = Vec::new();
            if self.config.balance && control.is_due(now) {
                control.hold(&held);
                let tick = control.tick(now, table, &bucket_packets, &loads)?;
                let plan = tick.outcome.plan;
                if !plan.is_empty() {
                    match self.execute(&plan, table) {
                        Ok(()) => {
                            control.commit()?;
                            let scaled = match tick.outcome.scaling {
                                ScalingAction::Add(w) => {
                                    self.scaling.woken += 1;
                                    format!(", worker {w} (CPU {}) woken", self.config.cpus[w])
                                }
                                ScalingAction::Remove(w) => {
                                    self.scaling.parked += 1;
                                    format!(
                                        ", worker {w} (CPU {}) emptied: it sleeps",
                                        self.config.cpus[w]
                                    )
                                }
                                ScalingAction::None | ScalingAction::NoSpareCore => String::new(),
                            };
                            info!(
                                "round {rounds}: moved {} bucket(s){scaled}; load imbalance {:.1}%",
                                plan.moves.len(),
                                tick.imbalance * 100.0
                            );
                            moved.extend(plan.moves.iter().map(|m| m.bucket));
                        }
                        Err(e) => {
                            control.abandon(now)?;
                            return Err(e);
                        }
                    }
                }
            }
            if self.config.churn > 0 {
                let mut held = held;
                held.extend(&moved);
                let plan = table.random_plan(self.config.churn, n, &held, &mut rng);
                self.execute(&plan, table)?;
                moved.extend(plan.moves.iter().map(|m| m.bucket));
            }
            migrations += moved.len() as u64;
            if let Some(exporter) = &self.exporter {
                let live: Vec<_> = clocks.iter().map(|c| c.counts()).collect();
                exporter.publish(&RoundFigures {
                    cpus: &self.config.cpus,
                    loads: &loads,
                    counts: &live,
                    bucket_totals: &counts,
                    table,
                    imbalance,
                    migrations,
                    rounds,
                    interval: control.interval(),
                    took: round_start.elapsed(),
                    handoffs_pending: self.handoffs.len(),
                    handoffs: self.handoffs.totals(),
                });
            }
            debug!(
                round = rounds,
                ?loads,
                moved = moved.len(),
                in_handoff = self.handoffs.len(),
                "round"
            );
        }
        Ok((migrations, rounds))
    }

    /// Waits for the handoffs in progress to complete (forcing those past
    /// the timeout).
    fn settle(&mut self) -> Result<(), RuntimeError> {
        let deadline = Instant::now() + self.config.handoff_timeout * 2 + Duration::from_secs(1);
        while !self.handoffs.is_empty() && Instant::now() < deadline {
            self.wait_until(Instant::now() + Duration::from_millis(20))?;
            self.force_expired()?;
        }
        if !self.handoffs.is_empty() {
            warn!("{} handoff(s) never completed", self.handoffs.len());
        }
        Ok(())
    }
}
