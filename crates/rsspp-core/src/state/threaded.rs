//! Runs workers on threads, fed by a dispatcher that plays the NIC: the
//! driver of the stress tests and of `rsspp bench state`.
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
//! The harness reads no clock: the caller passes one (a counter in tests, a
//! monotonic clock in the benchmark), sampled once per batch.

use std::thread;

use crossbeam_channel::{bounded, never, select, unbounded, Receiver, Sender};
use serde::Serialize;

use crate::reta::{CoreId, MigrationPlan};
use crate::state::migration::{
    Completed, CoreCommand, Handoff, MigrationCoordinator, MigrationError,
};
use crate::state::worker::{FlowPacket, Outbox, PacketOf, StateOf, Worker};
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
    mut coordinator: MigrationCoordinator,
    config: HarnessConfig,
    mut source: Src,
    mut planner: Plan,
    mut clock: Clock,
) -> ThreadedRun<W>
where
    W: Worker + Send,
    PacketOf<W>: Send,
    StateOf<W>: Send,
    Src: FnMut() -> Option<PacketOf<W>>,
    Plan: FnMut(&MigrationCoordinator, u64) -> Option<MigrationPlan>,
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
            .map(|(((worker, rx), control), handoffs_in)| {
                let links = WorkerLinks {
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
            if let Some(plan) = planner(&coordinator, summary.dispatched) {
                match coordinator.apply(&plan, &queued) {
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
