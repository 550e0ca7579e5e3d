//! Runs workers on threads, exchanging tables by the handoff protocol: the
//! driver of the stress tests and of `rsspp bench state`, in two modes.
//!
//! - [`run`]: a dispatcher thread plays the NIC and feeds the workers; the
//!   caller's planner decides the table rewrites.
//! - [`run_balanced`]: the same, balanced by RSS++: the workers count their
//!   packets per bucket ([`crate::counters`]), and the dispatcher runs the
//!   [`ControlLoop`] on those counts and applies its plans.
//! - [`replay`]: every worker replays the NIC itself, as a NIC dispatches in
//!   hardware, so no third thread competes with the workers for the cores.
//!
//! # Dispatcher mode ([`run`])
//!
//! The calling thread is the dispatcher. It pulls packets from a source,
//! steers each to a core through the coordinator's indirection table, and
//! queues them in batches on that core's bounded receive channel (the RX
//! ring: the dispatcher blocks when it is full). Between batches it asks a
//! planner for a [`MigrationPlan`]; an accepted plan rewrites the table and
//! sends each concerned core its [`CoreCommand`] on a separate control
//! channel, which a worker may read before or after the packets queued ahead
//! of the rewrite: the protocol must, and does, cope with both. Workers send
//! tables to each other on per-core handoff channels and report completed
//! moves back to the dispatcher.
//!
//! # Replay mode ([`replay`])
//!
//! Every worker thread draws the same stream of packets from its own
//! [`PacketStream`] replica, steers each packet through its replica of the
//! indirection table (its own copy of the [`MigrationCoordinator`]) and
//! processes, in batches, the packets that fall on its own core. A worker
//! may run at most [`ReplayConfig::ring`] packets ahead of the slowest one,
//! as a NIC's receive rings bound how far apart cores can drift.
//!
//! Every [`ReplayConfig::rewrite_every_ns`] the first worker picks a
//! position in the stream ahead of every worker; there every replica applies
//! the same plan (the planner is a function of the table and the rewrite's
//! number, so the replicas agree) and each worker executes its own command.
//! Tables move between the threads over channels; a worker ahead of a
//! bucket's old owner parks the bucket's packets until the table arrives.
//!
//! The harness reads no clock: the caller passes one (a counter in tests, a
//! monotonic clock in the benchmark), sampled once per batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, never, select, unbounded, Receiver, Sender};
use serde::Serialize;

use crate::control::{ControlConfig, ControlError, ControlLoop};
use crate::counters::{CounterSet, CounterWriter, CountersError, IntervalCounts};
use crate::reta::{CoreId, IndirectionTable, MigrationPlan};
use crate::state::migration::{
    Completed, CoreCommand, Handoff, MigrationCoordinator, MigrationError,
};
use crate::state::worker::{FlowHandler, FlowPacket, Outbox, PacketOf, StateOf, Worker};
use crate::toeplitz::bucket_of;

/// Sizes of the harness's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HarnessConfig {
    /// Packets per batch (a NIC's receive burst).
    pub batch: usize,
    /// Batches a core's receive channel holds before the dispatcher waits.
    pub queue_batches: usize,
    /// Each worker sweeps idle flows when this many nanoseconds of the
    /// caller's clock have passed since its last sweep (`None`: never).
    pub expire_every_ns: Option<u64>,
}

impl Default for HarnessConfig {
    /// Bursts of 32 packets, 64 bursts (2 048 packets) per receive queue, a
    /// sweep every 100 ms.
    fn default() -> Self {
        Self {
            batch: 32,
            queue_batches: 64,
            expire_every_ns: Some(100_000_000),
        }
    }
}

/// Something that went wrong in a worker thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum WorkerFailure {
    /// A worker refused the coordinator's command.
    #[error("core {core} refused a command: {error}")]
    Command {
        /// The core.
        core: CoreId,
        /// Why.
        #[serde(serialize_with = "display")]
        error: MigrationError,
    },
    /// A worker refused a handoff (its table is kept in
    /// [`ThreadedRun::stranded`]).
    #[error("core {core} refused a handoff: {error}")]
    Handoff {
        /// The core.
        core: CoreId,
        /// Why.
        #[serde(serialize_with = "display")]
        error: MigrationError,
    },
    /// A worker released a table to a core that does not exist (kept in
    /// [`ThreadedRun::stranded`]).
    #[error("core {core} sent bucket {bucket} to core {to}, which does not exist")]
    NoSuchCore {
        /// The sender.
        core: CoreId,
        /// The bucket.
        bucket: usize,
        /// The destination.
        to: CoreId,
    },
    /// A worker thread panicked.
    #[error("the worker of core {0} panicked")]
    Panicked(CoreId),
    /// A worker stopped with a table still leaving or arriving.
    #[error("core {0} stopped in the middle of a migration")]
    Unsettled(CoreId),
    /// A worker's replica of the coordinator refused a rewrite (replay mode).
    #[error("core {core} could not apply a table rewrite: {error}")]
    Rewrite {
        /// The core.
        core: CoreId,
        /// Why.
        #[serde(serialize_with = "display")]
        error: MigrationError,
    },
    /// A worker released a table to a core that had already stopped (kept
    /// in the run's `stranded`).
    #[error("core {core} sent bucket {bucket} to core {to}, which had stopped")]
    Stopped {
        /// The sender.
        core: CoreId,
        /// The bucket.
        bucket: usize,
        /// The destination.
        to: CoreId,
    },
}

fn display<S: serde::Serializer>(e: &MigrationError, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(e)
}

/// Counters of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// Packets dispatched to the workers.
    pub dispatched: u64,
    /// Plans applied.
    pub plans_applied: u64,
    /// Plans refused by the coordinator, with the reason.
    #[serde(skip)]
    pub plans_refused: Vec<MigrationError>,
    /// Bucket moves completed.
    pub moves_completed: u64,
    /// Failures reported by the workers (empty in a correct run).
    pub failures: Vec<WorkerFailure>,
}

/// What a run returns: the workers (with their tables and handlers), the
/// tables refused by their destination (none in a correct run), the counters.
#[derive(Debug)]
pub struct ThreadedRun<W: Worker> {
    /// The workers, by core.
    pub workers: Vec<W>,
    /// Tables that could not be delivered, kept so that no state is lost.
    pub stranded: Vec<Handoff<StateOf<W>>>,
    /// The counters.
    pub summary: RunSummary,
    /// The coordinator, with the final table.
    pub coordinator: MigrationCoordinator,
}

struct Batch<P> {
    now: u64,
    packets: Vec<P>,
}

enum Event {
    Completed(Completed),
    Failed(WorkerFailure),
}

/// Reports a panicking worker, so that the dispatcher stops waiting for it.
struct PanicReport {
    core: CoreId,
    events: Sender<Event>,
}

impl Drop for PanicReport {
    fn drop(&mut self) {
        if thread::panicking() {
            let _ = self
                .events
                .send(Event::Failed(WorkerFailure::Panicked(self.core)));
        }
    }
}

struct WorkerLinks<P, S> {
    /// Where the worker counts its packets per bucket, if they are counted.
    counter: Option<CounterWriter>,
    rx: Receiver<Batch<P>>,
    control: Receiver<CoreCommand>,
    handoffs_in: Receiver<Handoff<S>>,
    handoffs_out: Vec<Sender<Handoff<S>>>,
    events: Sender<Event>,
}

/// Applies a worker's event; true if it is a failure.
fn handle(event: Event, coordinator: &mut MigrationCoordinator, summary: &mut RunSummary) -> bool {
    match event {
        Event::Completed(done) => {
            if coordinator.complete(done).is_ok() {
                summary.moves_completed += 1;
            }
            false
        }
        Event::Failed(failure) => {
            summary.failures.push(failure);
            true
        }
    }
}

fn worker_loop<W: Worker>(
    mut worker: W,
    links: WorkerLinks<PacketOf<W>, StateOf<W>>,
    config: HarnessConfig,
) -> (W, Vec<Handoff<StateOf<W>>>) {
    let core = worker.core();
    let _report = PanicReport {
        core,
        events: links.events.clone(),
    };
    let WorkerLinks {
        counter,
        mut rx,
        mut control,
        handoffs_in,
        handoffs_out,
        events,
    } = links;
    let (mut rx_open, mut control_open) = (true, true);
    let mut out = Outbox::default();
    let mut stranded = Vec::new();
    let mut now = 0;
    let mut next_sweep = config.expire_every_ns;
    // The dispatcher closes both channels only once every move has completed.
    while rx_open || control_open {
        select! {
            recv(control) -> msg => match msg {
                Ok(command) => {
                    if let Err(error) = worker.command(command, now, &mut out) {
                        let _ = events.send(Event::Failed(WorkerFailure::Command { core, error }));
                    }
                }
                Err(_) => {
                    control = never();
                    control_open = false;
                }
            },
            recv(handoffs_in) -> msg => {
                if let Ok(handoff) = msg {
                    if let Err(rejected) = worker.accept(handoff, now, &mut out) {
                        let error = rejected.error;
                        stranded.push(*rejected.handoff);
                        let _ = events.send(Event::Failed(WorkerFailure::Handoff { core, error }));
                    }
                }
            },
            recv(rx) -> msg => match msg {
                Ok(batch) => {
                    now = now.max(batch.now);
                    if let Some(counter) = &counter {
                        for packet in &batch.packets {
                            counter.record_hash(packet.rss_hash());
                        }
                    }
                    worker.receive(batch.packets, now, &mut out);
                    if let (Some(at), Some(every)) = (next_sweep, config.expire_every_ns) {
                        if now >= at {
                            worker.expire(now);
                            next_sweep = Some(now.saturating_add(every));
                        }
                    }
                }
                Err(_) => {
                    rx = never();
                    rx_open = false;
                }
            },
        }
        for handoff in out.handoffs.drain(..) {
            match handoffs_out.get(handoff.to) {
                Some(tx) => {
                    if let Err(failed) = tx.send(handoff) {
                        stranded.push(failed.0);
                    }
                }
                None => {
                    let failure = WorkerFailure::NoSuchCore {
                        core,
                        bucket: handoff.bucket,
                        to: handoff.to,
                    };
                    stranded.push(handoff);
                    let _ = events.send(Event::Failed(failure));
                }
            }
        }
        for done in out.completed.drain(..) {
            let _ = events.send(Event::Completed(done));
        }
    }
    (worker, stranded)
}

/// How the dispatcher decides the plans.
trait Steering {
    /// The plan to apply now, if any, given the coordinator and the packets
    /// dispatched so far; `clock` reads the caller's clock.
    fn plan(
        &mut self,
        coordinator: &MigrationCoordinator,
        dispatched: u64,
        clock: &mut dyn FnMut() -> u64,
    ) -> Option<MigrationPlan>;

    /// Whether the coordinator accepted the plan just returned.
    fn applied(&mut self, accepted: bool);
}

/// [`run`]'s steering: the caller's planner.
struct Planner<P>(P);

impl<P: FnMut(&MigrationCoordinator, u64) -> Option<MigrationPlan>> Steering for Planner<P> {
    fn plan(
        &mut self,
        coordinator: &MigrationCoordinator,
        dispatched: u64,
        _clock: &mut dyn FnMut() -> u64,
    ) -> Option<MigrationPlan> {
        (self.0)(coordinator, dispatched)
    }

    fn applied(&mut self, _accepted: bool) {}
}

/// Runs `workers` (one per core, `workers[c].core() == c`) until `source`
/// is exhausted and every move has completed.
///
/// - `source` yields the packets in arrival order.
/// - `planner` is asked, every `config.batch` packets, for a plan given the
///   coordinator and the number of packets dispatched so far.
/// - `clock` gives the time (nanoseconds) stamped on each batch.
///
/// # Panics
/// If a worker's `core()` differs from its position, or a worker panics.
pub fn run<W, Src, Plan, Clock>(
    workers: Vec<W>,
    coordinator: MigrationCoordinator,
    config: HarnessConfig,
    source: Src,
    planner: Plan,
    clock: Clock,
) -> ThreadedRun<W>
where
    W: Worker + Send,
    PacketOf<W>: Send,
    StateOf<W>: Send,
    Src: FnMut() -> Option<PacketOf<W>>,
    Plan: FnMut(&MigrationCoordinator, u64) -> Option<MigrationPlan>,
    Clock: FnMut() -> u64,
{
    let writers = (0..workers.len()).map(|_| None).collect();
    dispatch(
        workers,
        coordinator,
        config,
        source,
        &mut Planner(planner),
        writers,
        clock,
    )
}

/// How [`run_balanced`] turns packet counts into core loads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BalancedConfig {
    /// The control loop: interval, back-off, the rebalancer's knobs.
    pub control: ControlConfig,
    /// The average load the packets put on the cores in use: each core's
    /// load is its share of the interval's packets times this times the
    /// number of cores in use, at most 1 (every packet costs the same, as
    /// the daemon's load-by-packets model assumes).
    pub offered_load: f64,
}

/// What [`run_balanced`] returns.
#[derive(Debug)]
pub struct BalancedRun<W: Worker> {
    /// The run: workers, counters, the coordinator with the final table.
    pub run: ThreadedRun<W>,
    /// The control loop, with its rounds and migrations.
    pub control: ControlLoop,
    /// Packets the workers counted, over every interval and a last collect
    /// once they had stopped (equal to `run.summary.dispatched`: the
    /// counters lose nothing).
    pub counted: u64,
    /// Per-bucket packets of the last interval the controller collected,
    /// and per core.
    pub last_interval: IntervalCounts,
    /// Plans the coordinator refused (the control loop abandoned them).
    pub abandoned: u64,
    /// An error of the control loop, which stopped rebalancing (none in a
    /// correct run).
    pub control_error: Option<ControlError>,
}

/// [`run_balanced`]'s steering: the RSS++ controller. When the control loop
/// is due it collects the interval's per-bucket counts from every core,
/// turns them into loads and asks the loop for a plan, which it commits or
/// abandons as the coordinator takes it or not.
struct Controller {
    control: ControlLoop,
    counters: CounterSet,
    interval: IntervalCounts,
    offered_load: f64,
    counted: u64,
    loads: Vec<f64>,
    abandoned: u64,
    now: Duration,
    error: Option<ControlError>,
}

impl Steering for Controller {
    fn plan(
        &mut self,
        coordinator: &MigrationCoordinator,
        _dispatched: u64,
        clock: &mut dyn FnMut() -> u64,
    ) -> Option<MigrationPlan> {
        self.now = Duration::from_nanos(clock());
        if self.error.is_some() || !self.control.is_due(self.now) {
            return None;
        }
        let total = self.counters.collect_into(&mut self.interval);
        self.counted = self.counted.saturating_add(total);
        let table = coordinator.table();
        let in_use = table.cores_in_use().len() as f64;
        self.loads.clear();
        self.loads
            .extend(self.interval.core_packets.iter().map(|&p| match total {
                0 => 0.0,
                _ => (self.offered_load * in_use * p as f64 / total as f64).min(1.0),
            }));
        match self
            .control
            .tick(self.now, table, &self.interval.bucket_packets, &self.loads)
        {
            Ok(tick) if tick.outcome.plan.is_empty() => None,
            Ok(tick) => Some(tick.outcome.plan),
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }

    fn applied(&mut self, accepted: bool) {
        let done = if accepted {
            self.control.commit().map(drop)
        } else {
            self.abandoned += 1;
            self.control.abandon(self.now)
        };
        if let Err(e) = done {
            self.error.get_or_insert(e);
        }
    }
}

/// Runs `workers` like [`run`], balanced by RSS++: each worker counts the
/// packets it receives per bucket (with [`crate::counters`]), and the
/// dispatcher thread, between batches, runs the control loop whenever it is
/// due on the interval's counts, and applies its plans.
///
/// `clock` (nanoseconds) is read at every batch boundary; core loads come
/// from the packet counts as [`BalancedConfig::offered_load`] says.
///
/// # Errors
/// [`CountersError`] if the table's size is not one counters can have
/// (the indirection table's sizes all are).
///
/// # Panics
/// As [`run`].
pub fn run_balanced<W, Src, Clock>(
    workers: Vec<W>,
    coordinator: MigrationCoordinator,
    config: HarnessConfig,
    balanced: BalancedConfig,
    source: Src,
    clock: Clock,
) -> Result<BalancedRun<W>, CountersError>
where
    W: Worker + Send,
    PacketOf<W>: Send,
    StateOf<W>: Send,
    Src: FnMut() -> Option<PacketOf<W>>,
    Clock: FnMut() -> u64,
{
    let (counters, writers) = CounterSet::new(workers.len(), coordinator.table().len())?;
    let mut controller = Controller {
        control: ControlLoop::new(balanced.control),
        counters,
        interval: IntervalCounts::default(),
        offered_load: balanced.offered_load,
        counted: 0,
        loads: Vec::with_capacity(workers.len()),
        abandoned: 0,
        now: Duration::ZERO,
        error: None,
    };
    let writers = writers.into_iter().map(Some).collect();
    let run = dispatch(
        workers,
        coordinator,
        config,
        source,
        &mut controller,
        writers,
        clock,
    );
    // The workers have stopped (joined): a last collect sees every packet.
    let rest = controller.counters.collect().total();
    Ok(BalancedRun {
        run,
        control: controller.control,
        counted: controller.counted.saturating_add(rest),
        last_interval: controller.interval,
        abandoned: controller.abandoned,
        control_error: controller.error,
    })
}

/// The dispatcher: see [`run`]. `writers[c]`, if any, is where core `c`
/// counts its packets per bucket.
fn dispatch<W, Src, Clock>(
    workers: Vec<W>,
    mut coordinator: MigrationCoordinator,
    config: HarnessConfig,
    mut source: Src,
    steering: &mut dyn Steering,
    writers: Vec<Option<CounterWriter>>,
    mut clock: Clock,
) -> ThreadedRun<W>
where
    W: Worker + Send,
    PacketOf<W>: Send,
    StateOf<W>: Send,
    Src: FnMut() -> Option<PacketOf<W>>,
    Clock: FnMut() -> u64,
{
    let cores = workers.len();
    assert_eq!(cores, coordinator.cores(), "one worker per core");
    for (c, w) in workers.iter().enumerate() {
        assert_eq!(w.core(), c, "workers must be given in core order");
    }
    let batch = config.batch.max(1);
    let size = coordinator.table().len();

    let (rx_tx, rx_rx): (Vec<_>, Vec<_>) = (0..cores)
        .map(|_| bounded::<Batch<PacketOf<W>>>(config.queue_batches.max(1)))
        .unzip();
    let (control_tx, control_rx): (Vec<_>, Vec<_>) =
        (0..cores).map(|_| unbounded::<CoreCommand>()).unzip();
    let (handoff_tx, handoff_rx): (Vec<_>, Vec<_>) = (0..cores)
        .map(|_| unbounded::<Handoff<StateOf<W>>>())
        .unzip();
    let (events_tx, events_rx) = unbounded::<Event>();

    let mut summary = RunSummary::default();
    let (workers, stranded) = thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .zip(rx_rx)
            .zip(control_rx)
            .zip(handoff_rx)
            .zip(writers)
            .map(|((((worker, rx), control), handoffs_in), counter)| {
                let links = WorkerLinks {
                    counter,
                    rx,
                    control,
                    handoffs_in,
                    handoffs_out: handoff_tx.clone(),
                    events: events_tx.clone(),
                };
                scope.spawn(move || worker_loop(worker, links, config))
            })
            .collect();
        drop(handoff_tx);
        drop(events_tx);

        let mut buffers: Vec<Vec<PacketOf<W>>> =
            (0..cores).map(|_| Vec::with_capacity(batch)).collect();
        let mut queued = vec![0u64; cores];
        let mut failed = false;
        let send = |core: usize, packets: Vec<PacketOf<W>>, now: u64| -> bool {
            rx_tx[core].send(Batch { now, packets }).is_ok()
        };
        'dispatch: loop {
            while let Ok(event) = events_rx.try_recv() {
                failed |= handle(event, &mut coordinator, &mut summary);
            }
            if failed {
                break;
            }
            if let Some(plan) = steering.plan(&coordinator, summary.dispatched, &mut clock) {
                let applied = coordinator.apply(&plan, &queued);
                steering.applied(applied.is_ok());
                match applied {
                    Ok(commands) => {
                        summary.plans_applied += 1;
                        // Push out what was queued under the old table, so the
                        // old owners can reach their release marks promptly.
                        let now = clock();
                        for (core, buf) in buffers.iter_mut().enumerate() {
                            if !buf.is_empty() {
                                let full = std::mem::replace(buf, Vec::with_capacity(batch));
                                if !send(core, full, now) {
                                    failed = true;
                                }
                            }
                        }
                        for command in commands {
                            if control_tx[command.core].send(command).is_err() {
                                failed = true;
                            }
                        }
                    }
                    Err(error) => summary.plans_refused.push(error),
                }
            }
            for _ in 0..batch {
                let Some(packet) = source() else {
                    break 'dispatch;
                };
                let core = coordinator
                    .table()
                    .core_of(bucket_of(packet.rss_hash(), size));
                let buf = &mut buffers[core];
                buf.push(packet);
                queued[core] += 1;
                summary.dispatched += 1;
                if buf.len() == batch {
                    let full = std::mem::replace(buf, Vec::with_capacity(batch));
                    if !send(core, full, clock()) {
                        failed = true;
                        break 'dispatch;
                    }
                }
            }
        }
        let now = clock();
        for (core, buf) in buffers.into_iter().enumerate() {
            if !buf.is_empty() && !failed && !send(core, buf, now) {
                failed = true;
            }
        }
        while !failed && coordinator.migrating() > 0 {
            match events_rx.recv() {
                Ok(event) => failed |= handle(event, &mut coordinator, &mut summary),
                Err(_) => break,
            }
        }
        drop(rx_tx);
        drop(control_tx);
        let mut workers = Vec::with_capacity(cores);
        let mut stranded = Vec::new();
        for h in handles {
            match h.join() {
                Ok((w, s)) => {
                    workers.push(w);
                    stranded.extend(s);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        while let Ok(event) = events_rx.try_recv() {
            handle(event, &mut coordinator, &mut summary);
        }
        (workers, stranded)
    });
    for w in &workers {
        if !w.is_settled() {
            summary.failures.push(WorkerFailure::Unsettled(w.core()));
        }
    }
    ThreadedRun {
        workers,
        stranded,
        summary,
        coordinator,
    }
}

/// One worker's replica of the packet stream in [`replay`] mode: every
/// replica yields the same packets in the same order.
pub trait PacketStream {
    /// The packets.
    type Packet;

    /// Moves to the next packet and returns its RSS hash (every worker
    /// steers every packet).
    fn advance(&mut self) -> u32;

    /// The packet [`advance`](Self::advance) moved to (built only by the
    /// core that receives it).
    fn packet(&self) -> Self::Packet;
}

/// Settings of [`replay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayConfig {
    /// Packets per receive batch.
    pub batch: usize,
    /// Packets a worker may run ahead of the slowest one (a receive ring;
    /// at least `batch`).
    pub ring: u64,
    /// Time between two table rewrites, nanoseconds of the caller's clock.
    pub rewrite_every_ns: u64,
    /// How long the workers replay, nanoseconds of the caller's clock.
    pub duration_ns: u64,
}

/// The clocks [`replay`] reads, supplied by the caller.
#[derive(Clone, Copy)]
pub struct ReplayClocks<'a> {
    /// A monotonic clock shared by the threads, nanoseconds.
    pub now: &'a (dyn Fn() -> u64 + Sync),
    /// CPU time of the calling thread, nanoseconds, if it can be read.
    pub thread_cpu: &'a (dyn Fn() -> Option<u64> + Sync),
}

impl std::fmt::Debug for ReplayClocks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayClocks").finish_non_exhaustive()
    }
}

/// What [`replay`] returns.
#[derive(Debug)]
pub struct ReplayRun<W: Worker, S> {
    /// The workers, by core.
    pub workers: Vec<W>,
    /// The stream replicas, by core, where each stopped (every replica went
    /// at least as far as the packets processed).
    pub streams: Vec<S>,
    /// Tables that could not be delivered, kept so that no state is lost.
    pub stranded: Vec<Handoff<StateOf<W>>>,
    /// Failures of the workers (empty in a correct run).
    pub failures: Vec<WorkerFailure>,
    /// Wall time of the replay, nanoseconds of the caller's clock.
    pub elapsed_ns: u64,
    /// CPU time of the worker threads together, if every one could be read.
    pub cpu_ns: Option<u64>,
    /// Table rewrites applied.
    pub rewrites: u64,
    /// Bucket moves the rewrites asked for.
    pub moves: u64,
}

/// A counter on its own cache line.
#[repr(align(128))]
struct Padded(AtomicU64);

/// What the replaying workers share: how far each has gone, where the next
/// rewrite and the end are.
struct Progress {
    at: Vec<Padded>,
    next_rewrite: AtomicU64,
    stop_at: AtomicU64,
    /// Set by a worker that failed: the others stop waiting for it.
    failed: AtomicBool,
}

impl Progress {
    fn min(&self) -> u64 {
        self.at.iter().map(|p| p.0.load(Relaxed)).min().unwrap_or(0)
    }

    fn max(&self) -> u64 {
        self.at.iter().map(|p| p.0.load(Relaxed)).max().unwrap_or(0)
    }
}

/// Waits a little without using the CPU, so that a worker waiting for
/// another is not charged for the wait.
fn pause() {
    thread::park_timeout(std::time::Duration::from_micros(20));
}

/// One replaying worker's links and the settings every one reads.
struct ReplayShared<'a, Plan> {
    table: &'a IndirectionTable,
    config: ReplayConfig,
    planner: &'a Plan,
    clocks: ReplayClocks<'a>,
    start: u64,
    progress: Progress,
}

/// What one replaying thread returns.
struct Replayed<W: Worker, S> {
    worker: W,
    stream: S,
    stranded: Vec<Handoff<StateOf<W>>>,
    failure: Option<WorkerFailure>,
    cpu_ns: Option<u64>,
    rewrites: u64,
    moves: u64,
}

/// A replaying worker's table traffic: handoffs in and out, failures.
struct Exchange<'a, S> {
    core: CoreId,
    handoffs_in: Receiver<Handoff<S>>,
    handoffs_out: &'a [Sender<Handoff<S>>],
    stranded: Vec<Handoff<S>>,
    failure: Option<WorkerFailure>,
}

impl<S> Exchange<'_, S> {
    fn fail(&mut self, failure: WorkerFailure) {
        self.failure.get_or_insert(failure);
    }

    /// Sends the released tables to their new owners.
    fn deliver(&mut self, out: &mut Outbox<S>) {
        for handoff in out.handoffs.drain(..) {
            let (bucket, to) = (handoff.bucket, handoff.to);
            let failure = match self.handoffs_out.get(to) {
                Some(tx) => match tx.send(handoff) {
                    Ok(()) => continue,
                    Err(failed) => {
                        self.stranded.push(failed.0);
                        WorkerFailure::Stopped {
                            core: self.core,
                            bucket,
                            to,
                        }
                    }
                },
                None => {
                    self.stranded.push(handoff);
                    WorkerFailure::NoSuchCore {
                        core: self.core,
                        bucket,
                        to,
                    }
                }
            };
            self.fail(failure);
        }
        // Every replica completes the moves itself, at the next rewrite.
        out.completed.clear();
    }

    /// Takes the tables that have arrived.
    fn take<W: Worker<Handler = H>, H: FlowHandler<State = S>>(
        &mut self,
        worker: &mut W,
        now: u64,
        out: &mut Outbox<S>,
    ) {
        while let Ok(handoff) = self.handoffs_in.try_recv() {
            if let Err(rejected) = worker.accept(handoff, now, out) {
                let error = rejected.error;
                self.stranded.push(*rejected.handoff);
                self.fail(WorkerFailure::Handoff {
                    core: self.core,
                    error,
                });
            }
        }
    }
}

fn replay_loop<W, S, Plan>(
    mut worker: W,
    mut stream: S,
    shared: &ReplayShared<'_, Plan>,
    mut exchange: Exchange<'_, StateOf<W>>,
) -> Replayed<W, S>
where
    W: Worker,
    S: PacketStream<Packet = PacketOf<W>>,
    Plan: Fn(&MigrationCoordinator, u64) -> MigrationPlan,
{
    let cpu_start = (shared.clocks.thread_cpu)();
    let config = shared.config;
    let me = worker.core();
    let cores = exchange.handoffs_out.len();
    let size = shared.table.len();
    let progress = &shared.progress;
    let now = || (shared.clocks.now)().saturating_sub(shared.start);
    let mut coordinator = match MigrationCoordinator::new(shared.table.clone(), cores) {
        Ok(c) => c,
        Err(error) => {
            exchange.fail(WorkerFailure::Rewrite { core: me, error });
            progress.failed.store(true, Relaxed);
            progress.at[me].0.store(u64::MAX, Relaxed);
            return Replayed {
                worker,
                stream,
                stranded: exchange.stranded,
                failure: exchange.failure,
                cpu_ns: None,
                rewrites: 0,
                moves: 0,
            };
        }
    };
    let mut queued = vec![0u64; cores];
    let mut out = Outbox::default();
    let mut batch: Vec<PacketOf<W>> = Vec::with_capacity(config.batch);
    let mut in_flight: Vec<Completed> = Vec::new();
    let (mut rewrites, mut moves) = (0u64, 0u64);
    let mut last_rewrite_ns = 0u64;
    let mut rewrite_at = u64::MAX;
    let mut stop_at = u64::MAX;

    // Whether to stop waiting: this worker or another one failed.
    let failed = |exchange: &Exchange<'_, StateOf<W>>| {
        exchange.failure.is_some() || progress.failed.load(Relaxed)
    };
    let mut i = 0u64;
    loop {
        if i % config.batch as u64 == 0 {
            // Batch boundary: process, exchange, publish, pace.
            if !batch.is_empty() {
                worker.receive_batch(&mut batch, now(), &mut out);
            }
            exchange.take(&mut worker, now(), &mut out);
            exchange.deliver(&mut out);
            progress.at[me].0.store(i, Relaxed);
            if me == 0 {
                let t = now();
                // A position no worker has reached or will reach before it
                // reads the shared values again (at its next batch boundary).
                let horizon = progress
                    .max()
                    .saturating_add(2 * (config.ring + config.batch as u64));
                if t >= config.duration_ns {
                    if progress.stop_at.load(Relaxed) == u64::MAX {
                        progress.stop_at.store(horizon, Relaxed);
                    }
                } else if t >= last_rewrite_ns + config.rewrite_every_ns && {
                    // Every worker is past the previous rewrite.
                    let previous = progress.next_rewrite.load(Relaxed);
                    previous == u64::MAX || progress.min() > previous
                } {
                    progress.next_rewrite.store(horizon, Relaxed);
                    last_rewrite_ns = t;
                }
            }
            rewrite_at = match progress.next_rewrite.load(Relaxed) {
                r if r >= i => r,
                _ => rewrite_at,
            };
            stop_at = progress.stop_at.load(Relaxed);
            // The ring bound: wait for the slowest worker.
            while i > progress.min() + config.ring && !failed(&exchange) {
                exchange.take(&mut worker, now(), &mut out);
                exchange.deliver(&mut out);
                pause();
            }
        }
        if i >= stop_at || (i % config.batch as u64 == 0 && failed(&exchange)) {
            break;
        }
        if i == rewrite_at {
            if !batch.is_empty() {
                worker.receive_batch(&mut batch, now(), &mut out);
                exchange.deliver(&mut out);
            }
            // The previous rewrite's tables have all been released (every
            // worker is past it): wait until ours have arrived.
            while !worker.is_settled() && !failed(&exchange) {
                exchange.take(&mut worker, now(), &mut out);
                exchange.deliver(&mut out);
                pause();
            }
            for done in in_flight.drain(..) {
                // Every replica applied the same plans: this cannot fail.
                let _ = coordinator.complete(done);
            }
            rewrites += 1;
            let plan = (shared.planner)(&coordinator, rewrites);
            match coordinator.apply(&plan, &queued) {
                Ok(commands) => {
                    moves += plan.moves.len() as u64;
                    in_flight.extend(plan.moves.iter().map(|m| Completed {
                        bucket: m.bucket,
                        generation: coordinator.generation(),
                    }));
                    for c in commands.into_iter().filter(|c| c.core == me) {
                        if let Err(error) = worker.command(c, now(), &mut out) {
                            exchange.fail(WorkerFailure::Command { core: me, error });
                        }
                    }
                    exchange.deliver(&mut out);
                }
                Err(error) => exchange.fail(WorkerFailure::Rewrite { core: me, error }),
            }
        }
        let hash = stream.advance();
        let core = coordinator.table().core_of(bucket_of(hash, size));
        queued[core] += 1;
        if core == me {
            batch.push(stream.packet());
        }
        i += 1;
    }
    if !batch.is_empty() {
        worker.receive_batch(&mut batch, now(), &mut out);
        exchange.deliver(&mut out);
    }
    if exchange.failure.is_some() {
        progress.failed.store(true, Relaxed);
    }
    progress.at[me].0.store(u64::MAX, Relaxed);
    while !worker.is_settled() && !failed(&exchange) {
        exchange.take(&mut worker, now(), &mut out);
        exchange.deliver(&mut out);
        pause();
    }
    let cpu_ns = (shared.clocks.thread_cpu)()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    Replayed {
        worker,
        stream,
        stranded: exchange.stranded,
        failure: exchange.failure,
        cpu_ns,
        rewrites,
        moves,
    }
}

/// Runs `workers` (one per core, `workers[c].core() == c`), each replaying
/// its own replica `streams[c]` of the packet stream, for
/// `config.duration_ns`; see the module documentation.
///
/// - `table` is the indirection table every replica starts from.
/// - `planner` gives rewrite number `n` (1, 2, …) from the coordinator
///   holding the current table; it must be a function of both alone, as
///   every worker calls it on its own replica.
///
/// # Panics
/// If the numbers of workers and streams differ, a worker's `core()`
/// differs from its position, or a worker panics.
pub fn replay<W, S, Plan>(
    workers: Vec<W>,
    streams: Vec<S>,
    table: &IndirectionTable,
    config: ReplayConfig,
    planner: Plan,
    clocks: ReplayClocks<'_>,
) -> ReplayRun<W, S>
where
    W: Worker + Send,
    S: PacketStream<Packet = PacketOf<W>> + Send,
    StateOf<W>: Send,
    Plan: Fn(&MigrationCoordinator, u64) -> MigrationPlan + Sync,
{
    let cores = workers.len();
    assert_eq!(cores, streams.len(), "one stream per worker");
    for (c, w) in workers.iter().enumerate() {
        assert_eq!(w.core(), c, "workers must be given in core order");
    }
    let batch = config.batch.max(1);
    let config = ReplayConfig {
        batch,
        ring: config.ring.max(batch as u64),
        rewrite_every_ns: config.rewrite_every_ns.max(1),
        ..config
    };
    let shared = ReplayShared {
        table,
        config,
        planner: &planner,
        clocks,
        start: (clocks.now)(),
        progress: Progress {
            at: (0..cores).map(|_| Padded(AtomicU64::new(0))).collect(),
            next_rewrite: AtomicU64::new(u64::MAX),
            stop_at: AtomicU64::new(u64::MAX),
            failed: AtomicBool::new(false),
        },
    };
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..cores)
        .map(|_| unbounded::<Handoff<StateOf<W>>>())
        .unzip();
    let finished: Vec<Replayed<W, S>> = thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .zip(streams)
            .zip(receivers)
            .map(|((worker, stream), handoffs_in)| {
                let (shared, senders) = (&shared, &senders);
                scope.spawn(move || {
                    let exchange = Exchange {
                        core: worker.core(),
                        handoffs_in,
                        handoffs_out: senders,
                        stranded: Vec::new(),
                        failure: None,
                    };
                    replay_loop(worker, stream, shared, exchange)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let elapsed_ns = (clocks.now)().saturating_sub(shared.start);
    let mut run = ReplayRun {
        workers: Vec::with_capacity(cores),
        streams: Vec::with_capacity(cores),
        stranded: Vec::new(),
        failures: Vec::new(),
        elapsed_ns,
        cpu_ns: finished.iter().map(|f| f.cpu_ns).sum(),
        rewrites: finished.first().map_or(0, |f| f.rewrites),
        moves: finished.first().map_or(0, |f| f.moves),
    };
    for f in finished {
        run.failures.extend(f.failure);
        run.stranded.extend(f.stranded);
        if !f.worker.is_settled() && run.failures.is_empty() {
            run.failures.push(WorkerFailure::Unsettled(f.worker.core()));
        }
        run.workers.push(f.worker);
        run.streams.push(f.stream);
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reta::BucketMove;
    use crate::state::check::{audit, SequenceCheck, SequenceState, SequencedPacket};
    use crate::state::table::{TableConfig, WhenFull};
    use crate::state::BucketWorker;
    use crate::{FlowKey, Toeplitz};

    const FLOWS: usize = 500;

    /// Flow `i mod FLOWS` for packet `i`, with per-flow sequence numbers.
    struct RoundRobin {
        flows: Vec<(FlowKey, u32)>,
        next_seq: Vec<u32>,
        at: usize,
    }

    impl RoundRobin {
        fn new() -> Self {
            let toeplitz = Toeplitz::default();
            let flows = (0..FLOWS)
                .map(|i| {
                    let key = FlowKey::new(
                        "10.0.0.1".parse().unwrap(),
                        "10.0.0.2".parse().unwrap(),
                        i as u16,
                        80,
                        17,
                    )
                    .unwrap();
                    (key, toeplitz.hash_flow(&key))
                })
                .collect();
            Self {
                flows,
                next_seq: vec![0; FLOWS],
                at: FLOWS - 1,
            }
        }
    }

    impl PacketStream for RoundRobin {
        type Packet = SequencedPacket;

        fn advance(&mut self) -> u32 {
            self.at = (self.at + 1) % FLOWS;
            self.next_seq[self.at] += 1;
            self.flows[self.at].1
        }

        fn packet(&self) -> SequencedPacket {
            let (key, hash) = self.flows[self.at];
            SequencedPacket {
                key,
                hash,
                flow: self.at as u32,
                seq: self.next_seq[self.at] - 1,
            }
        }
    }

    /// Rewrite `n` moves buckets `n mod 64`, `+ 64`, … (16 of them) to the
    /// next core: the same on every replica.
    fn rotate(c: &MigrationCoordinator, n: u64) -> MigrationPlan {
        let moves = (0..16)
            .map(|k| {
                let bucket = (n as usize % 64 + 64 * k) % c.table().len();
                let from = c.table().core_of(bucket);
                BucketMove {
                    bucket,
                    from,
                    to: (from + 1) % c.cores(),
                }
            })
            .collect();
        MigrationPlan { moves }
    }

    fn replay_with<Plan>(
        cores: usize,
        planner: Plan,
    ) -> ReplayRun<BucketWorker<SequenceCheck>, RoundRobin>
    where
        Plan: Fn(&MigrationCoordinator, u64) -> MigrationPlan + Sync,
    {
        let table = IndirectionTable::equal(1024, cores).unwrap();
        let tables = TableConfig {
            capacity: FLOWS,
            idle_timeout_ns: None,
            when_full: WhenFull::Refuse,
        };
        let workers = (0..cores)
            .map(|c| BucketWorker::new(c, &table, tables, SequenceCheck::default()))
            .collect();
        let streams = (0..cores).map(|_| RoundRobin::new()).collect();
        // Every reading advances the clock 1 µs: the run lasts 20 000
        // readings, a rewrite every 500.
        let clock = AtomicU64::new(0);
        let now = || clock.fetch_add(1_000, Relaxed);
        let config = ReplayConfig {
            batch: 16,
            ring: 256,
            rewrite_every_ns: 500_000,
            duration_ns: 20_000_000,
        };
        let clocks = ReplayClocks {
            now: &now,
            thread_cpu: &|| None,
        };
        replay(workers, streams, &table, config, planner, clocks)
    }

    #[test]
    fn replay_moves_tables_between_threads_without_loss_or_reordering() {
        let run = replay_with(3, rotate);
        assert!(run.failures.is_empty(), "{:?}", run.failures);
        assert!(run.stranded.is_empty());
        assert!(run.rewrites > 0);
        assert_eq!(run.moves, 16 * run.rewrites);
        assert_eq!(run.cpu_ns, None);
        let sent: Vec<u64> = run.streams[0].next_seq.iter().map(|&n| n.into()).collect();
        // Every replica stopped at the same position.
        for s in &run.streams {
            assert_eq!(s.next_seq, run.streams[0].next_seq);
        }
        let mut check = SequenceCheck::default();
        let mut states: Vec<SequenceState> = Vec::new();
        let mut processed = 0;
        for w in &run.workers {
            check.add(w.handler());
            processed += w.stats().processed;
            for (_, t) in w.tables() {
                states.extend(t.iter().map(|(_, s)| *s));
            }
        }
        assert_eq!(processed, sent.iter().sum::<u64>());
        assert_eq!(check.reordered, 0);
        assert_eq!(check.gaps, 0);
        assert!(audit(&sent, &states).is_clean());
    }

    #[test]
    fn a_plan_the_replicas_refuse_stops_every_worker() {
        // Bucket 0 is on core 0: a move "from core 1" is refused.
        let bad = |_: &MigrationCoordinator, _: u64| MigrationPlan {
            moves: vec![BucketMove {
                bucket: 0,
                from: 1,
                to: 0,
            }],
        };
        // The run returns: the first replica to fail stops the other one
        // (which may fail the same way first).
        let run = replay_with(2, bad);
        assert!(!run.failures.is_empty());
        assert!(run
            .failures
            .iter()
            .all(|f| matches!(f, WorkerFailure::Rewrite { .. })));
        assert_eq!(run.moves, 0);
    }
}
