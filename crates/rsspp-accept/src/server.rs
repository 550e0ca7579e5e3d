//! The server: one listener and one pinned worker thread per CPU, the
//! sk_reuseport program placing connections (affinity on), and a monitor
//! thread that samples the accept queues into each core's busy status and,
//! with a table of the library's own, runs the controller's rounds.
//!
//! A worker (epoll, level-triggered) accepts from its own listener and,
//! with affinity on, steals as `rsspp_core::affinity_accept::Stealer`
//! says: after [`LOCAL_PER_REMOTE`] local connections, one from the next
//! busy core in round-robin order if one has a connection waiting; when it
//! has nothing to do (epoll timed out), from a busy core first, then from
//! any core with a connection waiting (the paper's polling rule). A steal
//! is accept() on the victim's listener. The kernel keeps the queues; the
//! monitor reads each one's length every millisecond (`TCP_INFO`) into a
//! `BusyMeter` (busy above 75% of the backlog, non-busy once the EWMA of
//! the length is under 10%). "A connection waits" means the queue was not
//! empty at the last two samples, one millisecond apart: a connection its
//! own worker is about to accept is not stolen.
//!
//! Flow-group migration (own table): at each round boundary every worker
//! reports the core it stole from most (`Stealer::take_top_victim`); a
//! round with reports asks `rsspp_core::ControlLoop` — the rebalancer the
//! daemon and the runtime run — for a plan over the workers' busy time and
//! the connections per bucket, and writes the plan into the table: buckets
//! move off the core stolen from. With the daemon's table, the daemon's
//! own controller moves buckets (it sees the same CPUs' load); the library
//! only reads the table.

use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rsspp_core::affinity_accept::{BusyMeter, QueueView, Stealer, LOCAL_PER_REMOTE};
use rsspp_core::{bucket_of, ControlConfig, ControlLoop, IndirectionTable};

use crate::error::AcceptError;
use crate::http::{Http, Next};
use crate::program::{Selector, TableSource};
use crate::stats::{Histogram, Summary, WorkerSummary};
use crate::sys::{self, Epoll};

/// How often the monitor samples the accept queues.
const SAMPLE: Duration = Duration::from_millis(1);
/// epoll timeout of a worker that may steal: how often an idle one polls.
const IDLE_POLL_MS: i32 = 1;
/// epoll timeout otherwise (how soon a stop is noticed).
const WAIT_MS: i32 = 50;
/// Connections accepted per loop before the worker serves again.
const ACCEPT_BATCH: usize = 16;
/// Largest read per call.
const READ_CHUNK: usize = 16 * 1024;
const LISTENER: u64 = u64::MAX;

/// The server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address every listener binds (IPv4: the program hashes the
    /// IPv4 4-tuple).
    pub listen: SocketAddrV4,
    /// One worker per CPU, in this order.
    pub cpus: Vec<usize>,
    /// `Some`: the sk_reuseport program places connections by the table,
    /// and workers steal. `None`: plain SO_REUSEPORT, no stealing.
    pub affinity: Option<TableSource>,
    /// Each listener's accept queue.
    pub backlog: u32,
    /// The request handler.
    pub http: Http,
    /// Migrate flow groups on steals (own table only).
    pub migrate: bool,
}

struct QueueState {
    len: AtomicUsize,
    busy: AtomicBool,
    waiting: AtomicBool,
}

struct View {
    busy: bool,
    waiting: bool,
}

impl QueueView for View {
    fn busy(&self) -> bool {
        self.busy
    }
    fn waiting(&self) -> bool {
        self.waiting
    }
}

struct Shared {
    stop: AtomicBool,
    listeners: Vec<OwnedFd>,
    cpus: Vec<usize>,
    queues: Vec<QueueState>,
    stealing: bool,
    round: AtomicU64,
    busy_ns: Vec<AtomicU64>,
    stolen_from: Vec<AtomicU64>,
    /// Connections per bucket since the last round (own table).
    bucket_conns: Vec<AtomicU64>,
    /// Hashes accepted connections into buckets (own table).
    hasher: Option<rsspp_core::Toeplitz>,
}

impl Shared {
    fn views(&self) -> Vec<View> {
        self.queues
            .iter()
            .map(|q| View {
                busy: q.busy.load(Ordering::Relaxed),
                waiting: q.waiting.load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<Result<WorkerResult, AcceptError>>>,
    monitor: Option<JoinHandle<MonitorResult>>,
    selector: Option<Arc<Selector>>,
    started: Instant,
    backlog: u32,
    table: String,
}

struct WorkerResult {
    summary: WorkerSummary,
    latency: Histogram,
}

#[derive(Default)]
struct MonitorResult {
    rounds: u64,
    moved: u64,
}

impl Server {
    /// Binds the listeners, loads and attaches the program (affinity on)
    /// and starts the workers and the monitor.
    pub fn start(config: Config) -> Result<Server, AcceptError> {
        if config.cpus.is_empty() {
            return Err(AcceptError::Config("no CPUs given".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = config.cpus.iter().find(|c| !seen.insert(**c)) {
            return Err(AcceptError::Config(format!("CPU {dup} is listed twice")));
        }
        if config.backlog == 0 {
            return Err(AcceptError::Config("the backlog must be at least 1".into()));
        }
        let listeners = config
            .cpus
            .iter()
            .map(|_| sys::reuseport_listener(config.listen, config.backlog))
            .collect::<Result<Vec<_>, _>>()?;
        let fds: Vec<RawFd> = listeners.iter().map(|l| l.as_raw_fd()).collect();
        let selector = match &config.affinity {
            Some(source) => {
                let s = Selector::load(source, &config.cpus, &fds)?;
                sys::attach_reuseport_prog(fds[0], s.prog_fd())?;
                Some(Arc::new(s))
            }
            None => None,
        };
        let table = match (&config.affinity, &selector) {
            (None, _) => "none",
            (Some(_), Some(s)) if s.owns_table() => "own",
            _ => "daemon",
        }
        .to_string();
        let n = config.cpus.len();
        let buckets = selector.as_ref().map_or(0, |s| s.buckets());
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            listeners,
            cpus: config.cpus.clone(),
            queues: (0..n)
                .map(|_| QueueState {
                    len: AtomicUsize::new(0),
                    busy: AtomicBool::new(false),
                    waiting: AtomicBool::new(false),
                })
                .collect(),
            stealing: selector.is_some(),
            round: AtomicU64::new(0),
            busy_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
            stolen_from: (0..n).map(|_| AtomicU64::new(0)).collect(),
            bucket_conns: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            hasher: selector.as_ref().and_then(|s| s.hasher().cloned()),
        });
        let (report_tx, report_rx) = crossbeam_channel::unbounded();
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let shared = Arc::clone(&shared);
            let http = config.http;
            let tx = report_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("accept-{}", config.cpus[i]))
                .spawn(move || Worker::new(i, shared, http, tx)?.run())
                .map_err(|source| AcceptError::Os {
                    what: "starting a worker".into(),
                    source,
                })?;
            workers.push(handle);
        }
        drop(report_tx);
        let monitor = {
            let shared = Arc::clone(&shared);
            let selector = selector.clone();
            let migrate = config.migrate;
            let backlog = config.backlog as usize;
            std::thread::Builder::new()
                .name("accept-monitor".into())
                .spawn(move || monitor(&shared, selector.as_deref(), migrate, backlog, &report_rx))
                .map_err(|source| AcceptError::Os {
                    what: "starting the monitor".into(),
                    source,
                })?
        };
        Ok(Server {
            shared,
            workers,
            monitor: Some(monitor),
            selector,
            started: Instant::now(),
            backlog: config.backlog,
            table,
        })
    }

    /// Stops the workers (open connections and waiting ones are closed:
    /// their clients see the connection reset or closed) and summarises
    /// the run.
    pub fn stop(mut self) -> Result<Summary, AcceptError> {
        let seconds = self.started.elapsed().as_secs_f64();
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut results = Vec::new();
        let mut first_error = None;
        for w in self.workers.drain(..) {
            match w.join() {
                Ok(Ok(r)) => results.push(r),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        let control = self
            .monitor
            .take()
            .map(|m| m.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .unwrap_or_default();
        if let Some(e) = first_error {
            return Err(e);
        }
        let select = self.selector.as_ref().map(|s| s.counts()).transpose()?;
        let mut latency = Histogram::default();
        let mut workers = Vec::new();
        for (i, mut r) in results.into_iter().enumerate() {
            latency.merge(&r.latency);
            r.summary.stolen_from = self.shared.stolen_from[i].load(Ordering::Relaxed);
            r.summary.busy = self.shared.busy_ns[i].load(Ordering::Relaxed) as f64 / 1e9 / seconds;
            workers.push(r.summary);
        }
        let connections = workers.iter().map(|w| w.accepted).sum::<u64>();
        let known = workers
            .iter()
            .map(|w| w.accepted - w.incoming_unknown)
            .sum::<u64>();
        let local = workers.iter().map(|w| w.local).sum::<u64>();
        let requests = workers.iter().map(|w| w.requests).sum::<u64>();
        Ok(Summary {
            affinity: self.selector.is_some(),
            table: self.table.clone(),
            table_size: self.selector.as_ref().map_or(0, |s| s.buckets()),
            backlog: self.backlog,
            seconds,
            connections,
            stolen: workers.iter().map(|w| w.stolen).sum(),
            local_share: if known == 0 {
                0.0
            } else {
                local as f64 / known as f64
            },
            requests,
            requests_per_s: requests as f64 / seconds,
            latency: latency.summary(),
            workers,
            select,
            control_rounds: control.rounds,
            buckets_moved: control.moved,
        })
    }

    /// The program's current table (affinity on).
    pub fn table(&self) -> Option<Result<Vec<usize>, AcceptError>> {
        self.selector.as_ref().map(|s| s.table())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
    }
}

/// Samples the queues every millisecond; with an own table and
/// `migrate`, runs the controller's rounds on the workers' steal reports.
fn monitor(
    shared: &Shared,
    selector: Option<&Selector>,
    migrate: bool,
    backlog: usize,
    reports: &Receiver<(usize, usize)>,
) -> MonitorResult {
    let n = shared.queues.len();
    let mut meters: Vec<BusyMeter> = (0..n).map(|_| BusyMeter::new(backlog)).collect();
    let mut result = MonitorResult::default();
    let start = Instant::now();
    let mut control = ControlLoop::new(ControlConfig::default());
    let cores = shared.cpus.iter().max().map_or(1, |m| m + 1);
    let mut table = selector
        .filter(|s| s.owns_table())
        .and_then(|s| s.table().ok())
        .and_then(|t| IndirectionTable::from_entries(t, cores).ok());
    let mut last_busy = vec![0u64; n];
    let mut last_round = Instant::now();
    // Rounds the controller does not run (no steal reports) still end a
    // round of reports: the next one is one interval later.
    let mut next_round = control.interval();
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(SAMPLE);
        for (i, l) in shared.listeners.iter().enumerate() {
            let Ok((len, _)) = sys::accept_queue(l.as_raw_fd()) else {
                continue;
            };
            meters[i].observe(len);
            let q = &shared.queues[i];
            let before = q.len.swap(len, Ordering::Relaxed);
            q.waiting.store(before > 0 && len > 0, Ordering::Relaxed);
            q.busy.store(meters[i].busy(), Ordering::Relaxed);
        }
        let now = start.elapsed();
        if !shared.stealing || now < next_round || !control.is_due(now) {
            continue;
        }
        next_round = now + control.interval();
        shared.round.fetch_add(1, Ordering::Relaxed);
        let interval = last_round.elapsed();
        last_round = Instant::now();
        let busy: Vec<u64> = shared
            .busy_ns
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let mut loads = vec![0.0; cores];
        for i in 0..n {
            loads[shared.cpus[i]] = rsspp_core::measure::load_from_busy(
                busy[i] - last_busy[i],
                interval.as_nanos() as u64,
            );
        }
        last_busy = busy;
        let conns: Vec<u64> = shared
            .bucket_conns
            .iter()
            .map(|c| c.swap(0, Ordering::Relaxed))
            .collect();
        let victims: Vec<(usize, usize)> = reports.try_iter().collect();
        let (Some(sel), Some(t), true, false) =
            (selector, table.as_mut(), migrate, victims.is_empty())
        else {
            continue;
        };
        tracing::debug!(?victims, ?loads, "steal reports: asking the controller");
        let tick = match control.tick(now, t, &conns, &loads) {
            Ok(tick) => tick,
            Err(e) => {
                tracing::warn!("controller: {e}");
                continue;
            }
        };
        result.rounds += 1;
        let moves: Vec<(usize, usize)> = tick
            .outcome
            .plan
            .moves
            .iter()
            .map(|m| (m.bucket, m.to))
            .collect();
        if moves.is_empty() {
            let _ = control.commit();
            continue;
        }
        match sel.write_entries(&moves) {
            Ok(()) => {
                *t = tick.outcome.table.clone();
                result.moved += moves.len() as u64;
                let _ = control.commit();
                tracing::info!(
                    moved = moves.len(),
                    ?victims,
                    "flow groups moved off the cores stolen from"
                );
            }
            Err(e) => {
                tracing::warn!("writing the table: {e}");
                let _ = control.abandon(now);
            }
        }
    }
    result
}

struct Conn {
    fd: OwnedFd,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    close_after: bool,
    want_out: bool,
    /// When the bytes that completed the last unanswered request were read.
    read_at: Instant,
    pending: usize,
}

struct Worker {
    index: usize,
    cpu: usize,
    shared: Arc<Shared>,
    http: Http,
    epoll: Epoll,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    stealer: Stealer,
    reports: Sender<(usize, usize)>,
    round: u64,
    summary: WorkerSummary,
    latency: Histogram,
    buf: Vec<u8>,
}

impl Worker {
    fn new(
        index: usize,
        shared: Arc<Shared>,
        http: Http,
        reports: Sender<(usize, usize)>,
    ) -> Result<Self, AcceptError> {
        let cpu = shared.cpus[index];
        sys::pin_to(cpu)?;
        let epoll = Epoll::new()?;
        epoll
            .add(shared.listeners[index].as_raw_fd(), sys::IN, LISTENER)
            .map_err(|source| AcceptError::Os {
                what: "watching a listener".into(),
                source,
            })?;
        let n = shared.cpus.len();
        Ok(Worker {
            index,
            cpu,
            http,
            epoll,
            conns: Vec::new(),
            free: Vec::new(),
            stealer: Stealer::new(index, n),
            reports,
            round: 0,
            summary: WorkerSummary {
                cpu,
                accepted: 0,
                stolen: 0,
                local: 0,
                incoming_unknown: 0,
                stolen_from: 0,
                requests: 0,
                bad_requests: 0,
                busy: 0.0,
            },
            latency: Histogram::default(),
            buf: vec![0; READ_CHUNK],
            shared,
        })
    }

    fn run(mut self) -> Result<WorkerResult, AcceptError> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let timeout = if self.shared.stealing {
            IDLE_POLL_MS
        } else {
            WAIT_MS
        };
        while !self.shared.stop.load(Ordering::Relaxed) {
            let round = self.shared.round.load(Ordering::Relaxed);
            if round != self.round {
                self.round = round;
                if let Some(victim) = self.stealer.take_top_victim() {
                    let _ = self.reports.send((self.index, victim));
                }
            }
            let n = self
                .epoll
                .wait(&mut events, timeout)
                .map_err(|source| AcceptError::Os {
                    what: "epoll_wait".into(),
                    source,
                })?;
            let woke = Instant::now();
            let mut listener_ready = false;
            for ev in &events[..n] {
                let (token, flags) = (ev.u64, ev.events);
                if token == LISTENER {
                    listener_ready = true;
                } else {
                    self.conn_event(token as usize, flags);
                }
            }
            self.accept_some(listener_ready)?;
            if n == 0 && self.shared.stealing {
                let views = self.shared.views();
                if let Some(v) = self.stealer.next_victim_when_idle(self.index, &views) {
                    self.steal(v)?;
                }
            }
            self.shared.busy_ns[self.index]
                .fetch_add(woke.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        Ok(WorkerResult {
            summary: self.summary,
            latency: self.latency,
        })
    }

    /// Accepts up to a batch: local connections, and one remote one per
    /// [`LOCAL_PER_REMOTE`] local ones when a busy core has one waiting.
    fn accept_some(&mut self, mut local_ready: bool) -> Result<(), AcceptError> {
        for _ in 0..ACCEPT_BATCH {
            if self.shared.stealing && self.stealer.local_run >= LOCAL_PER_REMOTE {
                let views = self.shared.views();
                if let Some(v) = self.stealer.next_victim(self.index, &views) {
                    if self.steal(v)? {
                        continue;
                    }
                }
            }
            if !local_ready {
                break;
            }
            let own = self.shared.listeners[self.index].as_raw_fd();
            match sys::accept(own).map_err(|source| AcceptError::Os {
                what: "accept".into(),
                source,
            })? {
                Some(c) => {
                    self.stealer.accepted_local();
                    self.register(c, false);
                }
                None => local_ready = false,
            }
        }
        Ok(())
    }

    /// Takes one connection from `victim`'s listener; false if none was
    /// there any more.
    fn steal(&mut self, victim: usize) -> Result<bool, AcceptError> {
        let fd = self.shared.listeners[victim].as_raw_fd();
        match sys::accept(fd).map_err(|source| AcceptError::Os {
            what: "accept (steal)".into(),
            source,
        })? {
            Some(c) => {
                self.stealer.stole(victim);
                self.shared.stolen_from[victim].fetch_add(1, Ordering::Relaxed);
                self.register(c, true);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn register(&mut self, c: sys::Accepted, stolen: bool) {
        let s = &mut self.summary;
        s.accepted += 1;
        s.stolen += u64::from(stolen);
        match sys::incoming_cpu(c.fd.as_raw_fd()) {
            Some(cpu) if cpu == self.cpu => s.local += 1,
            Some(_) => {}
            None => s.incoming_unknown += 1,
        }
        if let (Some(h), false) = (&self.shared.hasher, self.shared.bucket_conns.is_empty()) {
            if let Ok(local) = sys::local_addr(c.fd.as_raw_fd()) {
                let hash = h.hash_ipv4(
                    c.peer.ip().octets(),
                    local.ip().octets(),
                    c.peer.port(),
                    local.port(),
                );
                let b = bucket_of(hash, self.shared.bucket_conns.len());
                self.shared.bucket_conns[b].fetch_add(1, Ordering::Relaxed);
            }
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if self
            .epoll
            .add(c.fd.as_raw_fd(), sys::IN | sys::HUP, slot as u64)
            .is_err()
        {
            self.free.push(slot);
            return;
        }
        self.conns[slot] = Some(Conn {
            fd: c.fd,
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            close_after: false,
            want_out: false,
            read_at: Instant::now(),
            pending: 0,
        });
    }

    fn close(&mut self, slot: usize) {
        // Closing the fd removes it from the epoll set.
        self.conns[slot] = None;
        self.free.push(slot);
    }

    fn conn_event(&mut self, slot: usize, flags: u32) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let fd = conn.fd.as_raw_fd();
        let mut eof = false;
        if flags & (sys::IN | sys::HUP) != 0 {
            loop {
                // SAFETY: reading into our buffer of its length.
                let r = unsafe { libc::read(fd, self.buf.as_mut_ptr().cast(), self.buf.len()) };
                if r > 0 {
                    conn.input.extend_from_slice(&self.buf[..r as usize]);
                    conn.read_at = Instant::now();
                    if (r as usize) < self.buf.len() {
                        break;
                    }
                } else if r == 0 {
                    eof = true;
                    break;
                } else {
                    let e = std::io::Error::last_os_error();
                    match e.raw_os_error() {
                        Some(libc::EAGAIN) => break,
                        Some(libc::EINTR) => continue,
                        _ => {
                            eof = true;
                            break;
                        }
                    }
                }
            }
        }
        if !conn.close_after && !conn.input.is_empty() {
            let served = self.http.serve(self.cpu, &mut conn.input, &mut conn.output);
            self.summary.requests += served.answered as u64;
            self.summary.bad_requests += served.bad as u64;
            conn.pending += served.answered;
            if served.next == Next::Close {
                conn.close_after = true;
            }
        }
        // Flush what is pending.
        while conn.written < conn.output.len() {
            // SAFETY: writing from our buffer within its length.
            let w = unsafe {
                libc::send(
                    fd,
                    conn.output[conn.written..].as_ptr().cast(),
                    conn.output.len() - conn.written,
                    libc::MSG_NOSIGNAL,
                )
            };
            if w > 0 {
                conn.written += w as usize;
            } else {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => break,
                    _ => {
                        eof = true;
                        conn.output.clear();
                        conn.written = 0;
                        break;
                    }
                }
            }
        }
        if conn.written == conn.output.len() {
            conn.output.clear();
            conn.written = 0;
            let done = Instant::now().duration_since(conn.read_at);
            for _ in 0..conn.pending {
                self.latency.record(done);
            }
            conn.pending = 0;
            if conn.want_out {
                conn.want_out = false;
                let _ = self.epoll.modify(fd, sys::IN | sys::HUP, slot as u64);
            }
            if conn.close_after {
                eof = true;
            }
        } else if !conn.want_out {
            conn.want_out = true;
            let _ = self
                .epoll
                .modify(fd, sys::IN | sys::OUT | sys::HUP, slot as u64);
        }
        if eof && conn.output.is_empty() {
            self.close(slot);
        }
    }
}
