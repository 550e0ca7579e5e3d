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

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rsspp_core::handoff::{Completion, Handoffs, DEFAULT_HANDOFF_TIMEOUT};
use rsspp_core::measure::{imbalance_ratio, load_from_busy, loads_by_packets};
use rsspp_core::orss::{FlowCount, FlowMove, OverrideConfig, OverrideCount, Overrides, RoundInput};
use rsspp_core::rand::SplitMix64;
use rsspp_core::reframer::ReframerConfig;
use rsspp_core::state::marks::Shard;
use rsspp_core::state::{FlowTable, SharedFlowTable, TableConfig, WhenFull};
use rsspp_core::{
    bucket_of, ControlConfig, ControlLoop, FlowKey, IndirectionTable, MigrationPlan, RssKey,
    ScalingAction, Toeplitz,
};
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::afpacket::{self, FanoutGroup, RingConfig, TxSocket};
use crate::afxdp::{XdpSetup, XskTx};
use crate::error::RuntimeError;
use crate::metrics::{Exporter, RoundFigures};
use crate::nf::{FlowRecord, NetworkFunction};
use crate::nic::{BucketedBy, FenceSummary, Nic};
use crate::reframe::{ReframeStage, ReframerReport};
use crate::steer::{HashInput, Steering};
use crate::worker::{
    hash_input, Clock, Core, Finished, FlowOverrides, Rx, ToController, ToWorker, Tx, Worker,
    WorkerReport,
};

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

/// Who spreads the frames over the workers (the afxdp backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteeringMode {
    /// An XDP program, per bucket, into the owner's socket on the frame's
    /// queue (any interface).
    Software,
    /// The NIC's RSS, worker w holding queue w; the controller rewrites the
    /// NIC's indirection table (`crate::nic`).
    Hardware,
}

/// What the rebalancer balances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Each worker's busy time over busy + idle.
    Busy,
    /// The workers' busy time added up, then shared in proportion to the
    /// frames each took: balancing it balances frame rates.
    Packets,
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
    /// Who steers them (hardware: the afxdp backend only; the NIC's table
    /// size and key then replace `buckets` and `key`).
    pub steering: SteeringMode,
    /// Where the flow states live.
    pub table: TableMode,
    /// How buckets move.
    pub moves: Moves,
    /// RSS++ rebalancing every round.
    pub balance: bool,
    /// What the rebalancer balances.
    pub load: LoadSource,
    /// Buckets moved at random every round (and, with overrides, one
    /// override).
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
    /// Per-flow overrides inside the buckets (elephants), with oRSS's
    /// rules (`None`: buckets only). The `afpacket` backend only.
    pub elephants: Option<OverrideConfig>,
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
            steering: SteeringMode::Software,
            table: TableMode::PerBucket,
            moves: Moves::Ordered,
            balance: true,
            load: LoadSource::Busy,
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
            elephants: None,
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
    /// Per-flow overrides (`--elephants on`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elephants: Option<ElephantSummary>,
    /// Hardware mode: how the moves' fences ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fences: Option<FenceSummary>,
    /// Hardware mode: by which hash the frames were bucketed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucketed_by: Option<BucketedBy>,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
}

/// Per-flow overrides over the run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ElephantSummary {
    /// Most flows overridden at once (`--max-overrides`).
    pub max_overrides: usize,
    /// Overrides in use at the end.
    pub overrides: usize,
    /// Flows given an override or moved to another worker.
    pub moved: u64,
    /// Overrides freed (their flow back in its bucket).
    pub freed: u64,
    /// Override handoffs whose old owner had processed every frame sent
    /// to it.
    pub drained: u64,
    /// Override handoffs completed after the timeout.
    pub early: u64,
    /// Overrides moved by `--churn` (counted in `moved` too).
    pub churned: u64,
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

/// The workers' transmit sockets on `out` (index `index`): with the afxdp
/// backend an AF_XDP socket each, worker w on queue w, where `out` has a
/// queue per worker and takes them; AF_PACKET sockets otherwise (said in
/// the log).
fn transmit_sockets(
    backend: Backend,
    out: &str,
    index: u32,
    n: usize,
) -> Result<Vec<Tx>, RuntimeError> {
    if backend == Backend::AfXdp {
        let xsks: Result<Vec<XskTx>, RuntimeError> =
            (0..n).map(|w| XskTx::new(index, w as u32)).collect();
        match xsks {
            Ok(xsks) => {
                info!(
                    "AF_XDP transmission on {out} ({} mode): a queue per worker",
                    xsks[0].mode
                );
                return Ok(xsks.into_iter().map(Tx::Xdp).collect());
            }
            Err(e) => info!(
                "AF_PACKET transmission on {out}: no AF_XDP socket on a queue per worker ({e})"
            ),
        }
    }
    (0..n)
        .map(|_| TxSocket::new(index).map(Tx::Packet))
        .collect()
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
    if let Some(e) = &config.elephants {
        e.validate()
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
    }
    let in_index = afpacket::ifindex(&config.input)?;
    // Hardware mode: the NIC's table size and key replace the settings'.
    let mut nic = None;
    let from_nic;
    let config = match config.steering {
        SteeringMode::Software => config,
        SteeringMode::Hardware => {
            if config.backend != Backend::AfXdp {
                return Err(RuntimeError::Config(
                    "hardware mode is the afxdp backend's".into(),
                ));
            }
            if config.elephants.is_some() {
                return Err(RuntimeError::Config(
                    "hardware mode moves buckets only: a move keeps order by fencing \
                     the NIC's queues, which an ntuple rule does not"
                        .into(),
                ));
            }
            let (device, rss) = Nic::open(&config.input, n)?;
            info!(
                "hardware mode on {}: its table of {} entries, its key",
                config.input, rss.size
            );
            nic = Some(device);
            let mut c = config.clone();
            c.buckets = rss.size;
            c.key = rss.key;
            from_nic = c;
            &from_nic
        }
    };
    // Twice the overrides: a slot being freed is not free yet, while the
    // policy may give its override to another flow at once.
    let slots = config.elephants.map_or(0, |e| 2 * e.max_overrides);
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
            let steering = Steering::load(config.buckets, &key, n, slots)?;
            // With overrides, a second member per worker: the frames the
            // overrides steer (members n + 1 ..= 2n).
            let members = if slots > 0 { 2 * n } else { n };
            let FanoutGroup {
                parking,
                mut rings,
                id,
            } = FanoutGroup::new(in_index, members, config.ring, steering.prog_fd())?;
            info!(
                "fanout group {id} on {} with {n} worker{plural}",
                config.input
            );
            let second = rings.split_off(n);
            let rings: Vec<(Rx, Option<Rx>)> = if second.is_empty() {
                rings.into_iter().map(|r| (Rx::Packet(r), None)).collect()
            } else {
                rings
                    .into_iter()
                    .zip(second)
                    .map(|(r, o)| (Rx::Packet(r), Some(Rx::Packet(o))))
                    .collect()
            };
            (steering, rings, Attached::Parking { _socket: parking })
        }
        Backend::AfXdp => {
            let setup = match nic.as_mut() {
                None => {
                    let setup =
                        XdpSetup::new(&config.input, in_index, n, config.buckets, slots, &key)?;
                    info!(
                        "AF_XDP on {} ({} mode): {} queue{} × {n} worker{plural}",
                        config.input,
                        setup.mode,
                        setup.queues,
                        if setup.queues == 1 { "" } else { "s" }
                    );
                    setup
                }
                Some(nic) => {
                    let (setup, counts) =
                        XdpSetup::nic(&config.input, in_index, n, config.buckets, &key)?;
                    nic.counting(counts);
                    // The NIC spreads the buckets as the workers start, once
                    // the sockets are bound and the program attached (the
                    // driver may rebuild its table for either: virtio-net
                    // does): until the words name them, the program passes
                    // every frame to the stack.
                    nic.write(&IndirectionTable::equal(config.buckets, n)?)?;
                    info!(
                        "AF_XDP on {} ({} mode), steered by the NIC: queues 0..{n} of {}, one a worker",
                        config.input, setup.mode, setup.queues
                    );
                    setup
                }
            };
            let rings: Vec<(Rx, Option<Rx>)> = setup
                .rx
                .into_iter()
                .map(|(r, o)| (Rx::Xdp(r), o.map(Rx::Xdp)))
                .collect();
            (
                setup.steering,
                rings,
                Attached::Xdp {
                    _program: setup.attached,
                },
            )
        }
    };
    let tx = match (out_index, config.output.as_deref()) {
        (Some(index), Some(out)) => transmit_sockets(config.backend, out, index, n)?
            .into_iter()
            .map(Some)
            .collect(),
        _ => (0..n).map(|_| None).collect::<Vec<_>>(),
    };

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
    let hot: Arc<[AtomicBool]> = (0..config.buckets)
        .map(|_| AtomicBool::new(false))
        .collect();
    let mut handles = Vec::with_capacity(n);
    for ((w, (ring, override_ring)), (tx, (_, rx))) in rings
        .into_iter()
        .enumerate()
        .zip(tx.into_iter().zip(channels))
    {
        let flow_table = config.flow_table;
        let per_bucket = shared.is_none();
        let owner = table.clone();
        // Override slots follow the buckets, all elsewhere at first.
        let shard = Shard::new(w, config.buckets + slots, |b| {
            (b < config.buckets && owner.core_of(b) == w).then(|| {
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
            override_ring,
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
                overrides: (slots > 0).then(|| FlowOverrides::new(Arc::clone(&hot))),
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
        elephants: config
            .elephants
            .map(|c| Elephants::new(c, slots, hot, config.handoff_timeout)),
        nic,
        clocks,
    };
    let result = controller.rounds(&mut table, stop);
    // Whatever happened, the workers drain and exit.
    let settled = controller.settle();
    let marks: Vec<u64> = (0..config.buckets + slots)
        .map(|b| controller.mark(b, steering.switch(b, PARKING)))
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
        elephants: controller.elephants.as_ref().map(Elephants::summary),
        fences: controller.nic.as_ref().map(Nic::fences),
        bucketed_by: controller.nic.as_ref().map(Nic::bucketed_by),
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
    elephants: Option<Elephants>,
    /// Hardware mode's NIC.
    nic: Option<Nic>,
    /// The workers' clocks: their busy and idle times, live counts and
    /// counted flows.
    clocks: Vec<Arc<Clock>>,
}

/// The controller's side of the per-flow overrides: oRSS's policy
/// (`rsspp_core::orss::Overrides`, the daemon's), the slots of the fanout
/// program's override table, and their handoffs.
struct Elephants {
    policy: Overrides<HashInput>,
    /// The buckets whose flows the workers count.
    hot: Arc<[AtomicBool]>,
    /// Per slot: the flow it steers, if any.
    slots: Vec<Option<SlotUse>>,
    /// Slots steering nothing.
    free: Vec<usize>,
    /// A flow (the policy's key) → its slot.
    by_flow: HashMap<HashInput, usize>,
    /// Slots in handoff (added, moved or being freed).
    handoffs: Handoffs,
    /// Slot handoffs told to stop waiting.
    forced: Vec<bool>,
    /// Each slot's word's count at the last round.
    counts: Vec<u64>,
    /// The keys of the flows counted, for their reverse direction.
    keys: HashMap<HashInput, FlowKey>,
    /// Frees decided while their bucket was moving: done once it settled.
    deferred: Vec<HashInput>,
    summary: ElephantSummary,
}

/// What an override slot steers.
#[derive(Debug, Clone)]
struct SlotUse {
    /// The flow, as the policy names it.
    key: HashInput,
    /// Its bucket.
    bucket: usize,
    /// The hash inputs the program looks up: the flow's, and its reply's
    /// when that hashes into the same bucket (a connection's state is in
    /// one entry).
    inputs: Vec<HashInput>,
    /// The worker it steers to (or will, once its handoff is done).
    owner: usize,
    /// Being added: its flow is leaving its bucket.
    adding: bool,
    /// Being freed: its flow is going back into its bucket.
    freeing: bool,
}

impl Elephants {
    fn new(
        config: OverrideConfig,
        slots: usize,
        hot: Arc<[AtomicBool]>,
        timeout: Duration,
    ) -> Self {
        Self {
            policy: Overrides::new(config),
            hot,
            slots: vec![None; slots],
            free: (0..slots).rev().collect(),
            by_flow: HashMap::new(),
            handoffs: Handoffs::new(slots, timeout),
            forced: vec![false; slots],
            counts: vec![0; slots],
            keys: HashMap::new(),
            deferred: Vec::new(),
            summary: ElephantSummary {
                max_overrides: config.max_overrides,
                ..ElephantSummary::default()
            },
        }
    }

    fn summary(&self) -> ElephantSummary {
        ElephantSummary {
            overrides: self.policy.in_use(),
            moved: self.policy.moved_total(),
            ..self.summary
        }
    }

    /// Buckets an add or a free is under way in: their owner must stay.
    fn held_buckets(&self) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(s, u)| {
                let u = u.as_ref()?;
                // An add leaves the bucket's worker; a free goes back to it.
                (self.handoffs.get(s).is_some() && (u.adding || u.freeing)).then_some(u.bucket)
            })
            .collect()
    }

    /// The hash inputs of flow `key` in `bucket`: its own, and its reply's
    /// when the reply hashes into the same bucket.
    fn inputs(
        &self,
        key: &HashInput,
        bucket: usize,
        toeplitz: &Toeplitz,
        buckets: usize,
    ) -> Vec<HashInput> {
        let mut inputs = vec![*key];
        if let Some(k) = self.keys.get(key) {
            if let Some((a, b)) = k.ports {
                let reply = FlowKey {
                    src: k.dst,
                    dst: k.src,
                    ports: Some((b, a)),
                    protocol: k.protocol,
                };
                let input = hash_input(&reply);
                if input != *key && bucket_of(toeplitz.hash_flow(&reply), buckets) == bucket {
                    inputs.push(input);
                }
            }
        }
        inputs
    }
}

/// What the overrides' round is given, in the policy's terms.
#[derive(Debug, Default)]
struct OverrideCounts {
    bucket_packets: Vec<u64>,
    core_packets: Vec<u64>,
    counted: Vec<FlowCount<HashInput>>,
    overridden: Vec<OverrideCount<HashInput>>,
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
            } if bucket >= self.config.buckets => {
                self.slot_accepted(bucket - self.config.buckets, left_behind);
            }
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
        let buckets = self.config.buckets;
        let mut forced = Vec::new();
        if let Some(e) = self.elephants.as_mut() {
            for s in e.handoffs.expired(now) {
                if !e.forced[s] {
                    if let Some(h) = e.handoffs.get(s) {
                        debug!(
                            "override slot {s}: handoff from worker {} timed out",
                            h.from
                        );
                        forced.push((h.from as usize, buckets + s));
                        e.forced[s] = true;
                    }
                }
            }
        }
        for (w, index) in forced {
            self.send(w, ToWorker::Force { bucket: index })?;
        }
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

    /// The overrides' counts of a round (`None` without overrides): the
    /// slots' packets since the last round, the flows the workers counted
    /// in the hot buckets, and per bucket and worker the packets with the
    /// overridden flows' (as the policy counts them).
    fn override_counts(
        &mut self,
        bucket_packets: &[u64],
        table: &IndirectionTable,
    ) -> Option<OverrideCounts> {
        let e = self.elephants.as_mut()?;
        let n = self.peers.len();
        let mut counts = OverrideCounts {
            bucket_packets: bucket_packets.to_vec(),
            core_packets: vec![0; n],
            ..OverrideCounts::default()
        };
        for (b, &p) in bucket_packets.iter().enumerate() {
            counts.core_packets[table.core_of(b)] += p;
        }
        for (slot, last) in e.counts.iter_mut().enumerate() {
            let now = self.steering.count(self.steering.slot_word(slot));
            let packets = now - *last;
            *last = now;
            let Some(u) = &e.slots[slot] else { continue };
            counts.bucket_packets[u.bucket] += packets;
            // Where its frames went: the old owner's until the handoff.
            let at = e.handoffs.get(slot).map_or(u.owner, |h| h.from as usize);
            counts.core_packets[at] += packets;
            if !u.freeing {
                counts.overridden.push(OverrideCount {
                    key: u.key,
                    packets,
                    settled: e.handoffs.get(slot).is_none(),
                });
            }
        }
        let mut flows: HashMap<HashInput, (usize, u64)> = HashMap::new();
        for c in &self.clocks {
            for (input, f) in c.take_flows() {
                // A flow with a slot (being freed) is not counted again
                // before its slot is free.
                if e.by_flow.contains_key(&input) {
                    continue;
                }
                e.keys.insert(input, f.key);
                flows.entry(input).or_insert((f.bucket, 0)).1 += f.packets;
            }
        }
        // Keys of flows counted no longer are forgotten with them.
        e.keys
            .retain(|k, _| flows.contains_key(k) || e.by_flow.contains_key(k));
        counts.counted = flows
            .into_iter()
            .map(|(key, (bucket, packets))| FlowCount {
                key,
                bucket,
                packets,
            })
            .collect();
        // A fixed order: the policy's ties do not depend on a hash map's.
        counts.counted.sort_by_key(|a| a.key);
        Some(counts)
    }

    /// An override slot's handoff done: the new owner took it over, or
    /// (a free) the flow's bucket took its entries back.
    fn slot_accepted(&mut self, slot: usize, left_behind: u64) {
        let Some(e) = self.elephants.as_mut() else {
            return;
        };
        let how = if left_behind == 0 {
            e.summary.drained += 1;
            Completion::Drained
        } else {
            e.summary.early += 1;
            warn!("override slot {slot} moved with {left_behind} packet(s) not drained");
            Completion::Forced
        };
        e.handoffs.complete(slot, how);
        e.forced[slot] = false;
        let Some(u) = e.slots[slot].as_mut() else {
            return;
        };
        u.adding = false;
        if !u.freeing {
            return;
        }
        let u = e.slots[slot].take().expect("checked above");
        e.by_flow.remove(&u.key);
        e.free.push(slot);
        e.summary.freed += 1;
        let bucket = u.bucket;
        if !e.slots.iter().flatten().any(|o| o.bucket == bucket) {
            if let Err(err) = self.steering.set_flagged(bucket, false) {
                warn!("bucket {bucket}: {err}");
            }
        }
    }

    /// Sends the `Expect`s of a batch of moves and waits for every answer.
    fn expect_all(&mut self, msgs: Vec<(usize, ToWorker<S>)>) -> Result<(), RuntimeError> {
        let (wanted, first) = (msgs.len(), msgs.first().map_or(0, |m| m.0));
        for (w, msg) in msgs {
            self.send(w, msg)?;
        }
        let mut answers = 0;
        let asked = Instant::now();
        let mut said = asked;
        while answers < wanted {
            let left = (said + ANSWER_SLOW).saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(msg) => {
                    if self.handle(msg)?.is_some() {
                        answers += 1;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(RuntimeError::WorkerGone(first)),
                Err(RecvTimeoutError::Timeout) => {
                    if asked.elapsed() >= ANSWER_TIMEOUT {
                        return Err(RuntimeError::WorkerHung(first));
                    }
                    said = Instant::now();
                    tracing::warn!(
                        "{} of {wanted} moves not answered for {:.0} s (is this machine \
                         overloaded?); waiting up to {} s",
                        wanted - answers,
                        asked.elapsed().as_secs_f64(),
                        ANSWER_TIMEOUT.as_secs()
                    );
                }
            }
        }
        Ok(())
    }

    /// The per-flow overrides' round, after the buckets' (`moved`: the
    /// buckets the round moved): counts in, oRSS's policy, and its plan
    /// carried out — hot buckets flagged to the workers, overrides added,
    /// moved and freed, each in order.
    fn override_round(
        &mut self,
        table: &IndirectionTable,
        moved: &[usize],
        input: &OverrideCounts,
        churn: Option<&mut SplitMix64>,
    ) -> Result<(), RuntimeError> {
        let buckets = self.config.buckets;
        let Some(e) = self.elephants.as_mut() else {
            return Ok(());
        };
        let mut held = self.handoffs.held();
        held.extend(moved);
        held.extend(e.held_buckets());
        held.sort_unstable();
        held.dedup();
        let mut plan = e.policy.round(&RoundInput {
            table: table.entries(),
            held: &held,
            bucket_packets: &input.bucket_packets,
            core_packets: &input.core_packets,
            counted: &input.counted,
            overridden: &input.overridden,
        });
        // --churn: one settled override moved too, whatever the load.
        if let Some(rng) = churn {
            let (slots, by_flow, handoffs, deferred) =
                (&e.slots, &e.by_flow, &e.handoffs, &e.deferred);
            let churned = e
                .policy
                .churn(rng, table.entries(), &held, &mut plan, |key| {
                    !deferred.contains(key)
                        && by_flow.get(key).is_some_and(|&s| {
                            handoffs.get(s).is_none()
                                && slots[s].as_ref().is_some_and(|u| !u.adding && !u.freeing)
                        })
                });
            if let Some(m) = churned {
                info!(
                    "churn: elephant of bucket {} moved, worker {} -> {}",
                    m.bucket, m.from, m.to
                );
                e.summary.churned += 1;
            }
        }
        for (b, h) in e.hot.iter().enumerate() {
            h.store(plan.hot.binary_search(&b).is_ok(), Ordering::Relaxed);
        }
        // Frees first (their slots are not free before they are done),
        // those deferred before.
        let mut frees: Vec<HashInput> = std::mem::take(&mut e.deferred);
        frees.extend(plan.free.iter().map(|&(k, _)| k));
        let mut returning = Vec::new();
        for key in frees {
            let Some(&slot) = e.by_flow.get(&key) else {
                continue;
            };
            let Some(u) = e.slots[slot].as_ref() else {
                continue;
            };
            if held.binary_search(&u.bucket).is_ok() || e.handoffs.get(slot).is_some() {
                e.deferred.push(key);
                continue;
            }
            returning.push((slot, table.core_of(u.bucket)));
        }
        let toeplitz = Toeplitz::new(self.config.key.clone());
        let mut adds: Vec<(usize, FlowMove<HashInput>)> = Vec::new();
        for m in &plan.add {
            let Some(slot) = e.free.pop() else {
                warn!("no override slot free: flow of bucket {} stays", m.bucket);
                continue;
            };
            let inputs = e.inputs(&m.key, m.bucket, &toeplitz, buckets);
            e.by_flow.insert(m.key, slot);
            e.slots[slot] = Some(SlotUse {
                key: m.key,
                bucket: m.bucket,
                inputs,
                owner: m.to,
                adding: true,
                freeing: false,
            });
            adds.push((slot, *m));
        }
        let mut moves = Vec::new();
        for m in &plan.moves {
            let Some(&slot) = e.by_flow.get(&m.key) else {
                continue;
            };
            let Some(u) = e.slots[slot].as_mut() else {
                continue;
            };
            moves.push((slot, u.owner, m.to));
            u.owner = m.to;
        }
        if returning.is_empty() && adds.is_empty() && moves.is_empty() {
            return Ok(());
        }
        // Who expects what: a slot's new owner parks its frames, a freed
        // flow's bucket parks the flow's.
        let mut expects = Vec::new();
        for &(slot, to) in &returning {
            let u = e.slots[slot].as_ref().expect("in use");
            expects.push((
                to,
                ToWorker::ExpectReturn {
                    slot,
                    bucket: u.bucket,
                    inputs: u.inputs.clone(),
                },
            ));
        }
        for &(slot, _) in &adds {
            let u = e.slots[slot].as_ref().expect("in use");
            expects.push((
                u.owner,
                ToWorker::ExpectFlow {
                    slot,
                    bucket: u.bucket,
                    inputs: u.inputs.clone(),
                },
            ));
        }
        for &(slot, _, to) in &moves {
            let u = e.slots[slot].as_ref().expect("in use");
            expects.push((
                to,
                ToWorker::ExpectFlow {
                    slot,
                    bucket: u.bucket,
                    inputs: u.inputs.clone(),
                },
            ));
        }
        self.expect_all(expects)?;
        let e = self.elephants.as_mut().expect("checked above");
        let steering = self.steering;
        let now = self.started.elapsed();
        let mut releases: Vec<(usize, ToWorker<S>)> = Vec::new();
        // The table written: adds steer their flows by their slot (to the
        // new owner), frees by their bucket again.
        let mut slot_marks = Vec::with_capacity(adds.len());
        for (slot, m) in &adds {
            slot_marks.push(steering.switch(steering.slot_word(*slot), member(m.to)));
            steering.set_flagged(m.bucket, true)?;
            for i in &e.slots[*slot].as_ref().expect("in use").inputs {
                steering.insert_override(i, *slot)?;
            }
        }
        for &(slot, _) in &returning {
            for i in &e.slots[slot].as_ref().expect("in use").inputs {
                steering.delete_override(i)?;
            }
        }
        // A run of the program that looked a flow up before the writes
        // must have counted it before the marks are read.
        if !adds.is_empty() || !returning.is_empty() {
            steering.wait_for_programs()?;
        }
        // Then the marks: an added flow's last frame steered by its bucket
        // is below the bucket's mark (its owner unchanged); a freed flow's
        // last frame steered by its slot is below the slot's.
        for ((slot, m), slot_mark) in adds.iter().zip(slot_marks) {
            let bucket_mark = steering.switch(m.bucket, member(m.from));
            e.handoffs.begin(*slot, m.from as u32, m.to as u32, now);
            e.forced[*slot] = false;
            releases.push((
                m.from,
                ToWorker::AddRelease {
                    slot: *slot,
                    bucket: m.bucket,
                    inputs: e.slots[*slot].as_ref().expect("in use").inputs.clone(),
                    to: m.to,
                    bucket_mark,
                    slot_mark,
                },
            ));
            info!(
                "elephant of bucket {} given an override: worker {} -> {}",
                m.bucket, m.from, m.to
            );
        }
        for (slot, to) in returning {
            let u = e.slots[slot].as_mut().expect("in use");
            let mark = steering.switch(steering.slot_word(slot), PARKING);
            e.handoffs.begin(slot, u.owner as u32, to as u32, now);
            e.forced[slot] = false;
            u.freeing = true;
            releases.push((
                u.owner,
                ToWorker::Release {
                    bucket: buckets + slot,
                    to,
                    mark,
                    immediate: false,
                },
            ));
            debug!("override of bucket {} freed: back to worker {to}", u.bucket);
        }
        for (slot, from, to) in moves {
            let mark = steering.switch(steering.slot_word(slot), member(to));
            e.handoffs.begin(slot, from as u32, to as u32, now);
            e.forced[slot] = false;
            releases.push((
                from,
                ToWorker::Release {
                    bucket: buckets + slot,
                    to,
                    mark,
                    immediate: false,
                },
            ));
            info!("elephant moved: worker {from} -> {to}");
        }
        for (w, msg) in releases {
            self.send(w, msg)?;
        }
        Ok(())
    }

    /// The mark to give `bucket`'s worker for its word's count `raw`
    /// (hardware mode adds the frames the word did not number).
    fn mark(&self, bucket: usize, raw: u64) -> u64 {
        match &self.nic {
            Some(nic) if bucket < self.config.buckets => nic.mark(bucket, raw),
            _ => raw,
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
        self.expect_all(
            plan.moves
                .iter()
                .map(|m| (m.to, ToWorker::Expect { bucket: m.bucket }))
                .collect(),
        )?;
        table.apply(plan, self.peers.len())?;
        if let Some(nic) = self.nic.as_mut() {
            // The NIC first, then its old queues' fences: every frame they
            // held from before is counted when the words switch.
            nic.write(table)?;
            let sources: Vec<usize> = plan.moves.iter().map(|m| m.from).collect();
            let clocks = &self.clocks;
            nic.fence(&sources, |q| {
                clocks[q].busy_ns.load(Ordering::Relaxed)
                    + clocks[q].idle_ns.load(Ordering::Relaxed)
            });
        }
        let raw: Vec<u64> = plan
            .moves
            .iter()
            .map(|m| self.steering.switch(m.bucket, member(m.to)))
            .collect();
        if self.nic.is_some() {
            // The program's runs that read a word before its switch are
            // over: the early counts are whole.
            self.steering.wait_for_programs()?;
        }
        let now = self.now();
        let immediate = self.config.moves == Moves::Immediate;
        for (m, raw) in plan.moves.iter().zip(raw) {
            let mark = self.mark(m.bucket, raw);
            if let Some(nic) = self.nic.as_mut() {
                nic.handed_over(m.bucket);
            }
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
        Ok(())
    }

    /// The rounds, until stopped; returns the buckets moved and the rounds.
    fn rounds(
        &mut self,
        table: &mut IndirectionTable,
        stop: &AtomicBool,
    ) -> Result<(u64, u64), RuntimeError> {
        let clocks = self.clocks.clone();
        let n = self.peers.len();
        let interval = self.config.control.interval;
        let mut control = ControlLoop::new(self.config.control);
        let mut rng = SplitMix64::new(self.config.churn_seed);
        let mut counts: Vec<u64> = (0..self.config.buckets)
            .map(|b| self.steering.count(b))
            .collect();
        // Each bucket's packets since the start, its overridden flows'
        // included (as the daemon counts them): the exported totals.
        let mut bucket_totals = vec![0u64; self.config.buckets];
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
            if let Some(nic) = self.nic.as_mut() {
                nic.say_how_bucketed();
            }
            let now = self.now();
            let round_start = Instant::now();

            let fresh: Vec<u64> = (0..self.config.buckets)
                .map(|b| self.steering.count(b))
                .collect();
            let bucket_packets: Vec<u64> = fresh.iter().zip(&counts).map(|(a, b)| a - b).collect();
            counts = fresh;
            let fresh = read_clocks();
            let mut loads: Vec<f64> = fresh
                .iter()
                .zip(&times)
                .map(|(&(b1, i1), &(b0, i0))| {
                    let busy = b1.saturating_sub(b0);
                    load_from_busy(busy, busy + i1.saturating_sub(i0))
                })
                .collect();
            times = fresh;
            // Overridden flows: counted by their slots' words, not their
            // buckets'.
            let over = self.override_counts(&bucket_packets, table);
            let with_overridden = over.as_ref().map_or(&bucket_packets, |o| &o.bucket_packets);
            for (t, p) in bucket_totals.iter_mut().zip(with_overridden) {
                *t += p;
            }
            // Each worker's packets this round, by the table before the
            // round's moves (and the overrides' owners); the imbalance is
            // over the workers in use.
            let pps: Vec<f64> = match &over {
                Some(o) => o.core_packets.iter().map(|&p| p as f64).collect(),
                None => {
                    let mut pps = vec![0.0; n];
                    for (b, &p) in bucket_packets.iter().enumerate() {
                        pps[table.core_of(b)] += p as f64;
                    }
                    pps
                }
            };
            let in_use: Vec<f64> = table.cores_in_use().iter().map(|&c| pps[c]).collect();
            let imbalance = imbalance_ratio(&in_use);
            if self.config.load == LoadSource::Packets {
                loads = loads_by_packets(&loads, &pps);
            }

            let mut held = self.handoffs.held();
            if let Some(e) = &self.elephants {
                held.extend(e.held_buckets());
                held.sort_unstable();
                held.dedup();
            }
            let mut moved: Vec<usize> = Vec::new();
            if self.config.balance && control.is_due(now) {
                control.hold(&held);
                // Overridden flows are no bucket's: their packets are load
                // fixed to their workers (as the daemon does).
                let split = match (&self.elephants, &over) {
                    (Some(e), Some(o)) => {
                        let split = e.policy.split(&o.bucket_packets, &o.overridden, n);
                        control.fix_packets(&split.fixed_packets);
                        Some(split.bucket_packets)
                    }
                    _ => None,
                };
                let counts = split.as_ref().unwrap_or(&bucket_packets);
                let tick = control.tick(now, table, counts, &loads)?;
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
            if let Some(o) = &over {
                if self.config.balance {
                    let churn = (self.config.churn > 0).then_some(&mut rng);
                    self.override_round(table, &moved, o, churn)?;
                }
            }
            if let Some(exporter) = &self.exporter {
                let live: Vec<_> = clocks.iter().map(|c| c.counts()).collect();
                exporter.publish(&RoundFigures {
                    cpus: &self.config.cpus,
                    loads: &loads,
                    counts: &live,
                    bucket_totals: &bucket_totals,
                    table,
                    imbalance,
                    migrations,
                    rounds,
                    interval: control.interval(),
                    took: round_start.elapsed(),
                    handoffs_pending: self.handoffs.len(),
                    handoffs: self.handoffs.totals(),
                    overrides: self
                        .elephants
                        .as_ref()
                        .map(|e| (e.policy.in_use(), e.policy.moved_total())),
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
        let slots_pending = |c: &Self| c.elephants.as_ref().map_or(0, |e| e.handoffs.len());
        while (!self.handoffs.is_empty() || slots_pending(self) > 0) && Instant::now() < deadline {
            self.wait_until(Instant::now() + Duration::from_millis(20))?;
            self.force_expired()?;
        }
        if !self.handoffs.is_empty() {
            warn!("{} handoff(s) never completed", self.handoffs.len());
        }
        if slots_pending(self) > 0 {
            warn!(
                "{} override handoff(s) never completed",
                slots_pending(self)
            );
        }
        Ok(())
    }
}
