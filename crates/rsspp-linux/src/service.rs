//! The RSS++ daemon as a service any front end can drive (`rsspp run` is
//! one): it assembles the data path, runs the daemon's rounds until told to
//! stop, publishes the metrics after each round, and puts the interface
//! back on the way out.
//!
//! Start-up, in an order that never leaves the interface half-configured:
//! check the settings, bind the metrics address, load and attach the XDP
//! program (and, in hardware mode, read the NIC's table to put it back
//! later), then write the first table. Any failure undoes what was done.
//! Rounds then run until the stop flag is raised or the duration is over,
//! or until the interface is deleted or goes down (looked at every 50 ms:
//! [`ServiceError::InterfaceLost`]); [`Service::shutdown`] detaches the
//! program and restores the NIC's table, unless [`ServiceConfig::keep`]
//! leaves the last table in place (software mode: the program's BPF link
//! pinned under `/sys/fs/bpf/rsspp/IF/`).
//!
//! The program is attached through a BPF link, which the kernel detaches
//! when the process dies: a daemon killed with SIGKILL leaves nothing
//! steering (hardware mode's RX-hash program excepted: it is attached
//! through netlink and stays; `rsspp detach` removes it). While it runs,
//! the service describes what it attached in `/run/rsspp/IF/state`, for
//! `rsspp status` ([`crate::lifecycle`]).
//!
//! The service registers no signal handler: signals belong to the process,
//! and a library user (a runtime with its own signal handling, a test) has
//! its own ways to ask for a stop. It only watches the flag it is given;
//! `rsspp run` raises it on SIGINT and SIGTERM.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rsspp_core::balance::BalanceError;
use rsspp_core::handoff::DEFAULT_HANDOFF_TIMEOUT;
use rsspp_core::orss::OverrideConfig;
use rsspp_core::toeplitz::KeyError;
use rsspp_core::{ControlConfig, RssKey};
use tracing::{info, warn};

use crate::cpu::{BusyClock, CpumapThreads, ProcStat};
use crate::daemon::{Daemon, DaemonConfig, DaemonError, DataPath, LoadModel, Round};
use crate::datapath::{HardwareError, HardwarePath, SoftwarePath};
use crate::ethtool::{Ethtool, EthtoolError, RssDevice};
use crate::lifecycle::{self, Loss, SavedTable, State, Watch};
use crate::metrics::{
    BucketMetrics, CpuMetrics, MetricsError, MetricsServer, MetricsSnapshot, SharedMetrics,
};
use crate::xdp::{AttachMode, Program, Xdp, XdpError, XdpOptions, DEFAULT_CPUMAP_QUEUE};

/// Buckets of the software table when none is asked for.
pub const DEFAULT_SOFTWARE_RETA_SIZE: usize = 128;

/// Longest pause between two looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Who spreads the packets over the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// The XDP program hashes, counts and steers every packet to a CPU
    /// through a CPUMAP (any NIC: veth, virtio, cloud NICs).
    Software {
        /// Buckets in the table: a power of two, 64 to 65536.
        reta_size: usize,
        /// Frames queued per CPU before the CPUMAP drops.
        cpumap_queue: u32,
    },
    /// The NIC spreads packets with its own table; XDP only counts, and the
    /// table is rewritten through ethtool.
    Hardware {
        /// The table size the caller expects; `None` takes the NIC's.
        reta_size: Option<usize>,
        /// The RSS context to balance (0: the NIC's main table); the
        /// others are left alone.
        context: u32,
    },
}

impl Steering {
    /// The metrics' name of the mode: `software` or `hardware`.
    pub fn name(&self) -> &'static str {
        match self {
            Steering::Software { .. } => "software",
            Steering::Hardware { .. } => "hardware",
        }
    }
}

/// How a moved bucket's frames switch CPU (software mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moves {
    /// The bucket stays on its old CPU until that CPU has drained it: no
    /// frame of a flow overtakes an earlier one (native XDP only).
    Ordered,
    /// At once: frames still queued on the old CPU may be overtaken by
    /// the flow's next ones on the new CPU.
    Immediate,
}

/// What a CPU's load is measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Everything each CPU did (/proc/stat), as RSS++ measures it.
    Cpu,
    /// Only the time of the kernel threads processing the packets steered
    /// to each CPU (software mode).
    Steered,
    /// The CPUs' busy time (steered threads in software mode, /proc/stat in
    /// hardware mode) shared in proportion to their packets.
    Packets,
}

impl LoadSource {
    fn model(self) -> LoadModel {
        match self {
            LoadSource::Cpu | LoadSource::Steered => LoadModel::Measured,
            LoadSource::Packets => LoadModel::ByPackets,
        }
    }
}

/// Everything the service needs, as plain values.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The interface to balance.
    pub iface: String,
    /// Software or hardware steering.
    pub steering: Steering,
    /// CPUs to spread over (software mode), or receive queues (hardware
    /// mode, queue q served by CPU q).
    pub targets: Vec<u32>,
    /// How the XDP program is attached.
    pub attach: AttachMode,
    /// Intervals, back-off, rebalancer and scaling settings.
    pub control: ControlConfig,
    /// False: count and report only, never move a bucket.
    pub balance: bool,
    /// What a CPU's load is measured from.
    pub load_source: LoadSource,
    /// Where to serve the metrics; `None` serves none.
    pub metrics: Option<SocketAddr>,
    /// Replace another XDP program attached to the interface.
    pub force: bool,
    /// On shutdown, leave the last table in place (software mode: the
    /// program stays attached and keeps steering with it, its BPF link
    /// pinned at `/sys/fs/bpf/rsspp/IF/link`).
    pub keep: bool,
    /// Stop after this long; `None` runs until the stop flag.
    pub duration: Option<Duration>,
    /// Buckets moved at random every round, whatever the load (and, with
    /// overrides, one override): a test of what migration does to the
    /// traffic (0: none).
    pub churn: usize,
    /// How moved buckets switch CPU (software mode).
    pub moves: Moves,
    /// Longest wait for a moved bucket to drain before it is switched
    /// anyway (software mode, ordered moves).
    pub handoff_timeout: Duration,
    /// Export the per-bucket series (two per bucket); `None`: up to
    /// [`BUCKET_METRICS_AUTO_MAX`] buckets.
    pub bucket_metrics: Option<bool>,
    /// Per-flow overrides (elephants inside buckets, while balancing; in
    /// hardware mode the NIC's ntuple rules); `None`: buckets only.
    pub elephants: Option<OverrideConfig>,
}

/// The largest table whose per-bucket series are exported unless asked
/// otherwise: 4,096 buckets are some 600 KB a scrape; 65,536 would be
/// about 10 MB, every scrape.
pub const BUCKET_METRICS_AUTO_MAX: usize = 4096;

impl ServiceConfig {
    /// Software steering of `iface` over `targets` with the default
    /// settings: a 128-bucket table, native XDP, balancing on, loads from
    /// /proc/stat, no metrics, running until stopped.
    pub fn new(iface: impl Into<String>, targets: Vec<u32>) -> Self {
        Self {
            iface: iface.into(),
            steering: Steering::Software {
                reta_size: DEFAULT_SOFTWARE_RETA_SIZE,
                cpumap_queue: DEFAULT_CPUMAP_QUEUE,
            },
            targets,
            attach: AttachMode::Native,
            control: ControlConfig::default(),
            balance: true,
            load_source: LoadSource::Cpu,
            metrics: None,
            force: false,
            keep: false,
            duration: None,
            churn: 0,
            moves: Moves::Ordered,
            handoff_timeout: DEFAULT_HANDOFF_TIMEOUT,
            bucket_metrics: None,
            elephants: Some(OverrideConfig::default()),
        }
    }

    /// The override controller's settings, where it runs: while
    /// balancing (in hardware mode, on a NIC with ntuple rules).
    fn elephants(&self) -> Option<OverrideConfig> {
        self.elephants.filter(|_| self.balance)
    }

    /// The daemon's settings over `targets` and a table of `reta_size`
    /// buckets.
    fn daemon(&self, targets: Vec<u32>, reta_size: usize) -> DaemonConfig {
        DaemonConfig {
            targets,
            reta_size,
            control: self.control,
            balance: self.balance,
            load: self.load_source.model(),
            churn: self.churn,
            // Different buckets each run; the moves are logged.
            churn_seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            elephants: self.elephants(),
        }
    }

    /// Checks the settings that need no device: the control loop's and
    /// the rebalancer's knobs, the targets, the load source.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.control.validate()?;
        if let Some(e) = &self.elephants {
            e.validate()?;
        }
        if self.targets.is_empty() {
            return Err(ConfigError::NoTargets);
        }
        if matches!(self.steering, Steering::Hardware { .. })
            && self.load_source == LoadSource::Steered
        {
            return Err(ConfigError::SteeredNeedsSoftware);
        }
        Ok(())
    }
}

/// Settings that do not fit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A control-loop or rebalancer knob out of range (names the knob).
    #[error(transparent)]
    Control(#[from] BalanceError),
    /// No CPU or queue to spread over.
    #[error("no CPU to balance over")]
    NoTargets,
    /// The steered load source in hardware mode.
    #[error("the steered load source measures CPUMAP threads, which only software mode has")]
    SteeredNeedsSoftware,
}

/// Why the service could not start, run or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The settings do not fit.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The metrics address could not be served.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// Loading, attaching or reading the XDP programs failed.
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The NIC's RSS configuration could not be read or written.
    #[error(transparent)]
    Nic(#[from] EthtoolError),
    /// The hardware data path could not start.
    #[error(transparent)]
    HardwarePath(#[from] HardwareError),
    /// Software mode: the daemon could not start or a round failed.
    #[error(transparent)]
    Software(#[from] DaemonError<XdpError>),
    /// Hardware mode: the daemon could not start or a round failed.
    #[error(transparent)]
    Hardware(#[from] DaemonError<HardwareError>),
    /// Hardware mode: the table size asked for is not the NIC's.
    #[error("{iface}'s indirection table has {size} entries; a table of {asked} does not match")]
    TableSize {
        /// The interface.
        iface: String,
        /// The NIC's table size.
        size: usize,
        /// The size asked for.
        asked: usize,
    },
    /// Hardware mode: the NIC's RSS key is unusable.
    #[error("{iface}'s RSS key: {source}")]
    Key {
        /// The interface.
        iface: String,
        /// Why the key was refused.
        #[source]
        source: KeyError,
    },
    /// The interface was deleted or went down while the daemon ran.
    #[error("{iface} {loss}")]
    InterfaceLost {
        /// The interface.
        iface: String,
        /// Deleted or down.
        loss: Loss,
    },
}

impl ServiceError {
    /// A table the data path refused: the previous one is still in use.
    pub fn is_refused_table(&self) -> bool {
        matches!(
            self,
            ServiceError::Software(DaemonError::Table(_))
                | ServiceError::Hardware(DaemonError::Table(_))
        )
    }
}

/// What a finished service did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Rounds run.
    pub rounds: u64,
    /// Buckets moved.
    pub migrations: u64,
    /// This process's CPU time over the service's life, percent of one CPU.
    pub cpu_percent: f64,
}

/// A busy clock the service can move between threads.
type Clock = Box<dyn BusyClock + Send>;

/// The daemon over either data path.
enum Running {
    Software(Daemon<SoftwarePath, Clock>),
    Hardware(Daemon<HardwarePath<Ethtool>, Clock>),
}

/// The daemon's state file, removed when the service goes (unless kept).
struct StateFile {
    state: Option<State>,
}

impl StateFile {
    /// Describes what `xdp` attached for `rsspp status`; a file that
    /// cannot be written is only logged.
    fn write(config: &ServiceConfig, xdp: &Xdp) -> StateFile {
        let state = State {
            iface: config.iface.clone(),
            ifindex: xdp.ifindex(),
            prog_id: xdp.program_id(),
            program: xdp.program_name().to_string(),
            steering: config.steering.name().to_string(),
            attach: xdp.mode().name().to_string(),
            reta_size: xdp.reta_size(),
            since: lifecycle::unix_now(),
            pid: std::process::id(),
            pinned: None,
        };
        match state.write() {
            Ok(()) => StateFile { state: Some(state) },
            Err(e) => {
                warn!(path = %lifecycle::state_path(&config.iface).display(), "cannot write the state file: {e}");
                StateFile { state: None }
            }
        }
    }

    /// Records the pin and leaves the file in place.
    fn kept(mut self, pinned: Option<std::path::PathBuf>) {
        if let Some(mut state) = self.state.take() {
            state.pinned = pinned;
            if let Err(e) = state.write() {
                warn!("cannot update the state file: {e}");
            }
        }
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            State::remove(&state.iface);
        }
    }
}

/// The daemon started on an interface, its metrics served.
pub struct Service {
    config: ServiceConfig,
    shared: SharedMetrics,
    server: Option<MetricsServer>,
    running: Running,
    started: Instant,
    end: Option<Duration>,
    watch: Option<Watch>,
    state: StateFile,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("iface", &self.config.iface)
            .field("mode", &self.config.steering.name())
            .field("metrics", &self.metrics_addr())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Checks `config`, serves the metrics, loads and attaches the data
    /// path and writes the first table. On error, everything done so far
    /// is undone.
    pub fn start(config: ServiceConfig) -> Result<Self, ServiceError> {
        config.validate()?;
        let shared = SharedMetrics::new(MetricsSnapshot::new(
            config.iface.clone(),
            config.steering.name(),
        ));
        // Bound first: a busy port must not cost an attach and a detach.
        let server = match config.metrics {
            Some(addr) => Some(MetricsServer::start(addr, shared.clone())?),
            None => None,
        };
        let started = Instant::now();
        let mut running = match config.steering {
            Steering::Software {
                reta_size,
                cpumap_queue,
            } => Running::Software(start_software(&config, reta_size, cpumap_queue, started)?),
            Steering::Hardware { reta_size, context } => {
                Running::Hardware(start_hardware(&config, reta_size, context, started)?)
            }
        };
        let xdp = match &mut running {
            Running::Software(d) => d.datapath_mut().xdp(),
            Running::Hardware(d) => d.datapath_mut().xdp(),
        };
        let state = StateFile::write(&config, xdp);
        let watch = Watch::new(xdp.ifindex())
            .map_err(|e| warn!("cannot watch {}: {e}", config.iface))
            .ok();
        let mut service = Self {
            end: None,
            config,
            shared,
            server,
            running,
            started,
            watch,
            state,
        };
        service.publish(None, Duration::ZERO);
        let targets = match &service.running {
            Running::Software(d) => d.targets(),
            Running::Hardware(d) => d.targets(),
        };
        info!(?targets, "balancing");
        service.end = service.config.duration.map(|d| service.now() + d);
        Ok(service)
    }

    /// The address the metrics are served on (the actual port when 0 was
    /// asked for).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(MetricsServer::local_addr)
    }

    /// The metrics, as published after each round.
    pub fn metrics(&self) -> &SharedMetrics {
        &self.shared
    }

    /// The settings it runs with.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Runs rounds until `stop` is raised (looked at every 50 ms) or the
    /// duration is over. A table the data path refused is logged and
    /// retried at the next round; an interface deleted or down (looked at
    /// every 50 ms too) ends the run with [`ServiceError::InterfaceLost`],
    /// and so does any other failure (the caller then shuts the service
    /// down, or drops it, which detaches the program).
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), ServiceError> {
        loop {
            let due = match &self.running {
                Running::Software(d) => d.next_round(),
                Running::Hardware(d) => d.next_round(),
            };
            while self.now() < due && !self.should_stop(stop) {
                self.check_interface()?;
                let left = due.saturating_sub(self.now()).min(STOP_POLL);
                std::thread::sleep(left);
            }
            if self.should_stop(stop) {
                return Ok(());
            }
            self.check_interface()?;
            let t0 = Instant::now();
            let now = self.now();
            let round = match &mut self.running {
                Running::Software(d) => d.round(now).map_err(ServiceError::from),
                Running::Hardware(d) => d.round(now).map_err(ServiceError::from),
            };
            match round {
                Ok(round) => self.publish(Some(&round), t0.elapsed()),
                // A refused table write keeps the previous table: log and
                // go on.
                Err(e) if e.is_refused_table() => warn!("{e}"),
                Err(e) => return Err(e),
            }
        }
    }

    /// Stops: detaches the program and puts the NIC's table back, or
    /// leaves the last table in place with [`ServiceConfig::keep`]; then
    /// stops serving the metrics.
    pub fn shutdown(self) -> Result<Summary, ServiceError> {
        let keep = self.config.keep;
        self.stop(keep)
    }

    /// [`Service::shutdown`], keeping the last table only if `keep`.
    fn stop(self, keep: bool) -> Result<Summary, ServiceError> {
        let Service {
            config,
            server,
            running,
            started,
            state,
            ..
        } = self;
        let (rounds, migrations) = match &running {
            Running::Software(d) => (d.rounds(), d.migrations()),
            Running::Hardware(d) => (d.rounds(), d.migrations()),
        };
        let summary = Summary {
            rounds,
            migrations,
            cpu_percent: own_cpu_percent(started.elapsed()),
        };
        info!(
            rounds,
            migrations,
            cpu_percent = format!("{:.2}", summary.cpu_percent),
            "stopping"
        );
        let result = match running {
            Running::Software(d) => {
                let mut xdp = d.into_datapath().into_xdp();
                if keep {
                    xdp.keep().map_err(ServiceError::from).map(|pinned| {
                        match &pinned {
                            Some(path) => info!(iface = %config.iface, pinned = %path.display(), "left the program attached with the last table (--keep); `rsspp detach --iface {}` removes it", config.iface),
                            None => info!(iface = %config.iface, "left the program attached with the last table (--keep)"),
                        }
                        state.kept(pinned);
                    })
                } else {
                    xdp.detach().map_err(ServiceError::from)
                }
            }
            Running::Hardware(d) => {
                let mut path = d.into_datapath();
                if keep {
                    path.keep();
                    path.xdp()
                        .detach()
                        .map(|()| info!(iface = %config.iface, "left the last table in the NIC (--keep)"))
                        .map_err(ServiceError::from)
                } else {
                    let restored = path.restore();
                    if restored.is_ok() {
                        SavedTable::remove(&config.iface);
                    }
                    path.xdp()
                        .detach()
                        .map_err(ServiceError::from)
                        .and_then(|()| restored.map_err(ServiceError::from))
                }
            }
        };
        if let Some(server) = server {
            server.stop();
        }
        result.map(|()| summary)
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// [`ServiceError::InterfaceLost`] once the interface is deleted or
    /// down.
    fn check_interface(&self) -> Result<(), ServiceError> {
        match self.watch.as_ref().and_then(Watch::check) {
            None => Ok(()),
            Some(loss) => Err(ServiceError::InterfaceLost {
                iface: self.config.iface.clone(),
                loss,
            }),
        }
    }

    fn should_stop(&self, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Relaxed) || self.end.is_some_and(|e| self.now() >= e)
    }

    /// Fills the metrics from the daemon's last round.
    fn publish(&mut self, round: Option<&Round>, took: Duration) {
        let xdp = match &mut self.running {
            Running::Software(d) => d.datapath_mut().xdp(),
            Running::Hardware(d) => d.datapath_mut().xdp(),
        };
        publish_other_counts(&self.shared, xdp);
        let per_bucket = self.config.bucket_metrics;
        match &self.running {
            Running::Software(d) => publish_round(&self.shared, d, round, took, per_bucket),
            Running::Hardware(d) => publish_round(&self.shared, d, round, took, per_bucket),
        }
    }
}

/// Whether the per-bucket series are exported: as asked, else up to
/// [`BUCKET_METRICS_AUTO_MAX`] buckets.
fn exports_buckets(asked: Option<bool>, buckets: usize) -> bool {
    asked.unwrap_or(buckets <= BUCKET_METRICS_AUTO_MAX)
}

/// Starts a service on `config`, runs it until `stop` is raised or the
/// duration is over, and shuts it down. A run that fails (the interface
/// lost, a round that failed) still puts back what can be put back (the
/// program detached, the NIC's table restored; never kept), and returns
/// its error.
pub fn serve(config: ServiceConfig, stop: &AtomicBool) -> Result<Summary, ServiceError> {
    let mut service = Service::start(config)?;
    match service.run(stop) {
        Ok(()) => service.shutdown(),
        Err(e) => {
            if let Err(cleanup) = service.stop(false) {
                warn!("{cleanup}");
            }
            Err(e)
        }
    }
}

/// Software mode: the steering program, attached, with the daemon's first
/// table written.
fn start_software(
    config: &ServiceConfig,
    reta_size: usize,
    cpumap_queue: u32,
    started: Instant,
) -> Result<Daemon<SoftwarePath, Clock>, ServiceError> {
    let targets = config.targets.clone();
    let ordered_moves = config.moves == Moves::Ordered && config.attach == AttachMode::Native;
    if config.moves == Moves::Ordered && !ordered_moves {
        warn!(
            iface = %config.iface,
            "moves are immediate in skb mode (the kernel passes no XDP metadata to the CPUMAP program): a moved bucket's queued packets may be overtaken"
        );
    }
    let options = XdpOptions {
        iface: config.iface.clone(),
        attach: config.attach,
        reta_size,
        key: RssKey::microsoft(),
        default_cpu: targets[0],
        force: config.force,
        override_slots: config.elephants().map_or(0, |e| e.max_overrides),
    };
    let mut xdp = Xdp::load(
        &options,
        Program::Steer {
            cpus: targets.clone(),
            cpumap_queue,
            ordered_moves,
        },
    )?;
    xdp.attach()?;
    let clock: Clock = match config.load_source {
        LoadSource::Cpu => Box::new(ProcStat::new()),
        LoadSource::Steered | LoadSource::Packets => {
            let id = xdp.cpumap_id()?.expect("the steering program has a CPUMAP");
            Box::new(CpumapThreads::new(id))
        }
    };
    let path = SoftwarePath::new(
        xdp,
        targets.clone(),
        ordered_moves.then_some(config.handoff_timeout),
    )
    .with_overrides(options.key.clone());
    let daemon = config.daemon(targets, reta_size);
    // On error the data path is dropped, which detaches the program.
    Ok(Daemon::start(daemon, path, clock, started.elapsed())?)
}

/// Hardware mode: the counting program, attached, the NIC's table read (to
/// put back) and the daemon's first table written to the NIC.
fn start_hardware(
    config: &ServiceConfig,
    asked: Option<usize>,
    context: u32,
    started: Instant,
) -> Result<Daemon<HardwarePath<Ethtool>, Clock>, ServiceError> {
    let iface = &config.iface;
    let mut nic = Ethtool::open(iface)?.context(context)?;
    info!(iface = %iface, context, "the NIC's table is read and written through {}", nic.interface());
    let rss = nic.rss()?;
    let size = rss.indirection.len();
    if let Some(asked) = asked {
        if asked != size {
            return Err(ServiceError::TableSize {
                iface: iface.clone(),
                size,
                asked,
            });
        }
    }
    // The table to put back: the NIC's, unless a daemon that never put
    // its original back saved it (SIGKILL, --keep). The ntuple rules such
    // a run left are deleted first, so that their locations are free.
    let (original, saved_by) =
        SavedTable::recover(&mut nic, iface, context, rss.indirection.clone());
    // Per-flow overrides are the NIC's ntuple rules.
    let elephants = config.elephants();
    let rules = match elephants {
        None => None,
        Some(_) => match nic.rule_table() {
            Ok(table) => {
                info!(iface = %iface, size = table.size, in_use = table.used.len(), "per-flow overrides (--elephants) are the NIC's ntuple rules, written from the top of its rule table");
                Some(table)
            }
            Err(e @ EthtoolError::NoRules { .. }) => {
                info!(iface = %iface, "{e}: per-flow overrides (--elephants) off, balancing buckets only");
                None
            }
            Err(e) => return Err(e.into()),
        },
    };
    let key = if rss.key.is_empty() {
        warn!(iface = %iface, "the NIC reports no RSS key: counting with Microsoft's");
        RssKey::microsoft()
    } else {
        RssKey::new(rss.key.clone()).map_err(|source| ServiceError::Key {
            iface: iface.clone(),
            source,
        })?
    };
    let targets = config.targets.clone();
    let options = XdpOptions {
        iface: iface.clone(),
        attach: config.attach,
        reta_size: size,
        key,
        default_cpu: targets[0],
        force: config.force,
        override_slots: match (&rules, elephants) {
            (Some(_), Some(e)) => e.max_overrides,
            _ => 0,
        },
    };
    // Queues checked before anything is attached.
    HardwarePath::check_queues(&mut nic, &targets)?;
    let mut xdp = load_counter(&options)?;
    xdp.attach()?;
    if let Some(pid) = saved_by {
        warn!(iface = %iface, pid, "the NIC's table was left by an rsspp run (pid {pid}) that did not put the original back: the original it saved will be put back on exit");
    }
    let saved = SavedTable {
        pid: std::process::id(),
        context,
        table: original.clone(),
        rules: Vec::new(),
    };
    if let Err(e) = saved.write(iface) {
        warn!(iface = %iface, "saving the NIC's original table under {}: {e} (a run after a crash would not find it)", SavedTable::path(iface).display());
    }
    let mut path = HardwarePath::with_original(xdp, nic, targets.clone(), original)?;
    if let Some(table) = &rules {
        path = path.with_rules(options.key.clone(), table);
        path.save_rules(iface, saved);
    }
    if saved_by.is_some() {
        path.restore_always();
    }
    let daemon = config.daemon(targets, size);
    let clock: Clock = Box::<ProcStat>::default();
    Ok(Daemon::start(daemon, path, clock, started.elapsed())?)
}

/// Loads the counting program, with the NIC's RX hash where the driver can
/// give it (native mode), else the Toeplitz hash in BPF.
fn load_counter(options: &XdpOptions) -> Result<Xdp, XdpError> {
    if options.attach == AttachMode::Native {
        match Xdp::load(options, Program::Count { rx_hash: true }) {
            Ok(xdp) => return Ok(xdp),
            Err(e) => {
                info!(iface = %options.iface, "no RX hash from the driver ({e}): hashing in BPF")
            }
        }
    }
    Xdp::load(options, Program::Count { rx_hash: false })
}

/// Publishes the frames the program kept out of the buckets or did not
/// steer; a read that fails leaves the last published values (the round
/// itself went well).
pub(crate) fn publish_other_counts(shared: &SharedMetrics, xdp: &Xdp) {
    match xdp.other_counts() {
        Ok(o) => shared.update(|s| {
            s.packets_by_kind = vec![
                ("not_ip", o.not_ip),
                ("malformed", o.malformed),
                ("redirect_failed", o.redirect_failed),
            ];
        }),
        Err(e) => warn!("{e}"),
    }
}

/// Fills the metrics from the daemon's last round; the per-bucket series
/// as `per_bucket` asks ([`ServiceConfig::bucket_metrics`]).
pub(crate) fn publish_round<D: DataPath, B: BusyClock>(
    shared: &SharedMetrics,
    daemon: &Daemon<D, B>,
    round: Option<&Round>,
    took: Duration,
    per_bucket: Option<bool>,
) {
    let buckets = exports_buckets(per_bucket, daemon.table().len());
    shared.update(|s| {
        s.cpus = daemon
            .targets()
            .iter()
            .zip(daemon.target_totals())
            .zip(daemon.target_drops())
            .enumerate()
            .map(
                |(i, ((&cpu, &packets_total), &cpumap_full_total))| CpuMetrics {
                    cpu,
                    load: round.map_or(0.0, |r| r.load[i]),
                    packets_total,
                    dropped: vec![("cpumap_full".into(), cpumap_full_total)],
                },
            )
            .collect();
        let settlement = daemon.settlement();
        s.handoffs_pending = settlement.held.len();
        s.handoffs = settlement.totals;
        s.buckets.clear();
        if buckets {
            s.buckets.extend(
                daemon
                    .table()
                    .iter()
                    .zip(daemon.bucket_totals())
                    .map(|(&cpu, &packets_total)| BucketMetrics { packets_total, cpu }),
            );
        }
        s.migrations_total = daemon.migrations();
        s.overrides = daemon.overrides_in_use();
        s.elephants_moved_total = daemon.elephants_moved();
        s.rounds_total = daemon.rounds();
        if let Some(r) = round {
            s.imbalance_ratio = r.imbalance;
            s.interval_seconds = r.next.saturating_sub(r.at).as_secs_f64();
            s.rebalance_seconds.observe_duration(took);
        }
    });
}

/// This process's CPU time (user + system) over `elapsed`, percent of one
/// CPU.
fn own_cpu_percent(elapsed: Duration) -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return f64::NAN;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    100.0 * (secs(usage.ru_utime) + secs(usage.ru_stime)) / elapsed.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use rsspp_core::Setting;

    use super::*;

    #[test]
    fn per_bucket_series_are_exported_up_to_4096_buckets_unless_asked() {
        assert!(exports_buckets(None, 128));
        assert!(exports_buckets(None, 4096));
        assert!(!exports_buckets(None, 8192));
        assert!(exports_buckets(Some(true), 65_536));
        assert!(!exports_buckets(Some(false), 128));
    }

    #[test]
    fn the_service_moves_between_threads() {
        fn send<T: Send>() {}
        send::<Service>();
    }

    #[test]
    fn settings_are_checked_before_anything_is_touched() {
        let mut c = ServiceConfig::new("rsspp-nosuch0", vec![0]);
        assert_eq!(c.validate(), Ok(()));
        c.control.balance.tolerance = 0.7;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::Control(BalanceError::BadConfig {
                setting: Setting::Tolerance,
                ..
            }))
        ));
        let mut c = ServiceConfig::new("rsspp-nosuch0", vec![]);
        assert_eq!(c.validate(), Err(ConfigError::NoTargets));
        c.targets = vec![0];
        c.steering = Steering::Hardware {
            reta_size: None,
            context: 0,
        };
        c.load_source = LoadSource::Steered;
        assert_eq!(c.validate(), Err(ConfigError::SteeredNeedsSoftware));
        // Refused by start too, before the (absent) interface is looked up.
        let e = Service::start(c).unwrap_err();
        assert!(matches!(e, ServiceError::Config(_)), "{e}");
    }
}
