//! `rsspp run`: the RSS++ daemon on a Linux interface.
//!
//! Start-up, in an order that never leaves the interface half-configured:
//! check the options, bind the metrics address, load and attach the XDP
//! program (and, in hardware mode, read the NIC's table to put it back
//! later), then write the first table. Any failure undoes what was done.
//! Rounds then run until SIGINT/SIGTERM or `--duration`; on the way out the
//! program is detached and the NIC's table restored, unless `--keep` leaves
//! the last table in place.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use rsspp_core::{ControlConfig, RssKey};
use rsspp_linux::cpu::{BusyClock, CpuList, CpumapThreads, ProcStat};
use rsspp_linux::daemon::{Daemon, DaemonConfig, DataPath, LoadModel, Round};
use rsspp_linux::datapath::{HardwarePath, SoftwarePath};
use rsspp_linux::ethtool::{Ethtool, RssDevice};
use rsspp_linux::metrics::{
    BucketMetrics, CpuMetrics, MetricsServer, MetricsSnapshot, SharedMetrics,
};
use rsspp_linux::xdp::{AttachMode, Program, Xdp, XdpOptions, DEFAULT_CPUMAP_QUEUE};
use tracing::{info, warn};

use crate::error::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// The XDP program hashes, counts and steers every packet to a CPU
    /// through a CPUMAP (any NIC: veth, virtio, cloud NICs).
    Software,
    /// The NIC spreads packets with its own table; XDP only counts, and the
    /// table is rewritten through ethtool.
    Hardware,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum XdpModeArg {
    /// In the driver (fastest; veth, virtio-net and most NICs).
    Native,
    /// Generic XDP on the kernel's socket buffers (any interface).
    Skb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LoadArg {
    /// Everything each CPU did (/proc/stat), as RSS++ measures it.
    Cpu,
    /// Only the time of the kernel threads processing the packets steered
    /// to each CPU (software mode).
    Steered,
    /// The CPUs' busy time (steered threads in software mode, /proc/stat
    /// in hardware mode) shared in proportion to their packets: balances
    /// packet rates, whatever else runs on the CPUs.
    Packets,
}

/// Arguments of `rsspp run`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
rsspp run --iface eth0 --cpus 0-7\n  \
rsspp run --iface eth0 --mode hardware --cpus 0-3 --autoscale\n  \
rsspp run --iface veth0 --xdp-mode skb --no-balance --duration 30\n\n\
Metrics are served at http://127.0.0.1:9464/metrics; watch them live with `rsspp top`.")]
pub struct RunArgs {
    /// The interface to balance.
    #[arg(long, value_name = "IF")]
    iface: String,
    /// Software steering (XDP + CPUMAP) or the NIC's own table.
    #[arg(long, value_enum, default_value = "software")]
    mode: Mode,
    /// CPUs to spread over (software mode), or receive queues (hardware
    /// mode, queue q served by CPU q), kernel list syntax: 0-3,6.
    /// Default: every online CPU.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Buckets in the table (software mode: a power of two, 64 to 65536,
    /// default 128; hardware mode: the NIC's size, read from it).
    #[arg(long, value_name = "N")]
    reta_size: Option<usize>,
    /// Interval between rebalancing rounds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    interval_ms: u64,
    /// Longest interval the rounds back off to while the load and the
    /// imbalance are low (equal to --interval-ms: no back-off).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    max_interval_ms: u64,
    /// Average load above which a CPU is added (with --autoscale).
    #[arg(
        long,
        default_value_t = 0.8,
        value_name = "X",
        allow_negative_numbers = true
    )]
    target_load: f64,
    /// Add and remove CPUs as the load requires.
    #[arg(long)]
    autoscale: bool,
    /// A CPU within this relative distance of the level counts as balanced
    /// (measured rates are noisy: chasing the noise only moves buckets back
    /// and forth).
    #[arg(
        long,
        default_value_t = 0.03,
        value_name = "X",
        allow_negative_numbers = true
    )]
    tolerance: f64,
    /// Count and report only: never move a bucket.
    #[arg(long)]
    no_balance: bool,
    /// How to attach the XDP program.
    #[arg(long, value_enum, default_value = "native")]
    xdp_mode: XdpModeArg,
    /// What a CPU's load is measured from.
    #[arg(long, value_enum, default_value = "cpu")]
    load_source: LoadArg,
    /// Where to serve the metrics (Prometheus text format, /metrics).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
    metrics_addr: String,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics_addr")]
    no_metrics: bool,
    /// Replace another XDP program attached to the interface.
    #[arg(long)]
    force: bool,
    /// On exit, leave the last table in place (software mode: the program
    /// stays attached and keeps steering with it).
    #[arg(long)]
    keep: bool,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Software mode: frames queued per CPU before the CPUMAP drops.
    #[arg(long, default_value_t = DEFAULT_CPUMAP_QUEUE, value_name = "N")]
    cpumap_queue: u32,
}

/// The options, checked.
struct Plan {
    targets: CpuList,
    interval: Duration,
    max_interval: Duration,
    duration: Option<Duration>,
    metrics: Option<SocketAddr>,
}

fn check(args: &RunArgs) -> Result<Plan, CliError> {
    let online = CpuList::online().map_err(|e| CliError::Invalid(e.to_string()))?;
    let targets = match &args.cpus {
        Some(text) => {
            let list: CpuList = text
                .parse()
                .map_err(|e: rsspp_linux::cpu::CpuError| CliError::Invalid(e.to_string()))?;
            if list.is_empty() {
                return Err(CliError::Invalid("--cpus names no CPU".into()));
            }
            if args.mode == Mode::Software {
                list.check_online(&online)
                    .map_err(|e| CliError::Invalid(e.to_string()))?;
            }
            list
        }
        None => online,
    };
    if !(1..=10_000).contains(&args.interval_ms) {
        return Err(CliError::Invalid(format!(
            "--interval-ms must be between 1 and 10000, got {}",
            args.interval_ms
        )));
    }
    if args.max_interval_ms < args.interval_ms || args.max_interval_ms > 60_000 {
        return Err(CliError::Invalid(format!(
            "--max-interval-ms must be between --interval-ms ({}) and 60000, got {}",
            args.interval_ms, args.max_interval_ms
        )));
    }
    if !(args.tolerance.is_finite() && (0.0..0.5).contains(&args.tolerance)) {
        return Err(CliError::Invalid(format!(
            "--tolerance must be in [0, 0.5), got {}",
            args.tolerance
        )));
    }
    if !(args.target_load.is_finite() && args.target_load > 0.0 && args.target_load <= 1.0) {
        return Err(CliError::Invalid(format!(
            "--target-load must be in (0, 1], got {}",
            args.target_load
        )));
    }
    let duration = match args.duration {
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(CliError::Invalid(format!(
                "--duration must be a positive number of seconds, got {s}"
            )))
        }
        None => None,
    };
    if args.mode == Mode::Hardware && args.load_source == LoadArg::Steered {
        return Err(CliError::Invalid(
            "--load-source steered measures CPUMAP threads, which only software mode has".into(),
        ));
    }
    let metrics = if args.no_metrics {
        None
    } else {
        Some(args.metrics_addr.parse().map_err(|_| {
            CliError::Invalid(format!(
                "--metrics-addr {:?} is not an address:port (e.g. 127.0.0.1:9464)",
                args.metrics_addr
            ))
        })?)
    };
    Ok(Plan {
        targets,
        interval: Duration::from_millis(args.interval_ms),
        max_interval: Duration::from_millis(args.max_interval_ms),
        duration,
        metrics,
    })
}

/// Runs `rsspp run`.
pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let plan = check(args)?;
    let shared = SharedMetrics::new(MetricsSnapshot::new(
        args.iface.clone(),
        match args.mode {
            Mode::Software => "software",
            Mode::Hardware => "hardware",
        },
    ));
    // Bound first: a busy port must not cost an attach and a detach.
    let server = match plan.metrics {
        Some(addr) => Some(
            MetricsServer::start(addr, shared.clone())
                .map_err(|e| CliError::Invalid(e.to_string()))?,
        ),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::Invalid(format!("cannot handle signal {signal}: {e}")))?;
    }
    let mut control = ControlConfig {
        interval: plan.interval,
        max_interval: plan.max_interval,
        ..ControlConfig::default()
    };
    control.balance.autoscale = args.autoscale;
    control.balance.target_load = args.target_load;
    control.balance.tolerance = args.tolerance;
    let attach = match args.xdp_mode {
        XdpModeArg::Native => AttachMode::Native,
        XdpModeArg::Skb => AttachMode::Skb,
    };
    let targets = plan.targets.cpus().to_vec();
    let started = Instant::now();
    let result = match args.mode {
        Mode::Software => {
            let reta_size = args.reta_size.unwrap_or(128);
            let options = XdpOptions {
                iface: args.iface.clone(),
                attach,
                reta_size,
                key: RssKey::microsoft(),
                default_cpu: targets[0],
                force: args.force,
            };
            let mut xdp = Xdp::load(
                &options,
                Program::Steer {
                    cpus: targets.clone(),
                    cpumap_queue: args.cpumap_queue,
                },
            )?;
            xdp.attach()?;
            let clock: Box<dyn BusyClock> = match args.load_source {
                LoadArg::Cpu => Box::new(ProcStat::new()),
                LoadArg::Steered | LoadArg::Packets => {
                    let id = xdp.cpumap_id()?.expect("the steering program has a CPUMAP");
                    Box::new(CpumapThreads::new(id))
                }
            };
            let path = SoftwarePath::new(xdp, targets.clone());
            let config = DaemonConfig {
                targets,
                reta_size,
                control,
                balance: !args.no_balance,
                load: load_model(args.load_source),
            };
            let outcome = serve(config, path, clock, &shared, &stop, plan.duration, started);
            match outcome {
                Ok(path) => {
                    let mut xdp = path.into_xdp();
                    if args.keep {
                        xdp.leave_attached();
                        info!(iface = %args.iface, "left the program attached with the last table (--keep)");
                    } else {
                        xdp.detach()?;
                    }
                    Ok(())
                }
                Err(e) => Err(e), // dropping the data path detached the program
            }
        }
        Mode::Hardware => {
            let mut nic = Ethtool::open(&args.iface)?;
            let rss = nic.rss()?;
            let size = rss.indirection.len();
            if let Some(asked) = args.reta_size {
                if asked != size {
                    return Err(CliError::Invalid(format!(
                        "{}'s indirection table has {size} entries; --reta-size {asked} does not match (leave it out)",
                        args.iface
                    )));
                }
            }
            let key = if rss.key.is_empty() {
                warn!(iface = %args.iface, "the NIC reports no RSS key: counting with Microsoft's");
                RssKey::microsoft()
            } else {
                RssKey::new(rss.key.clone())
                    .map_err(|e| CliError::Invalid(format!("{}'s RSS key: {e}", args.iface)))?
            };
            let options = XdpOptions {
                iface: args.iface.clone(),
                attach,
                reta_size: size,
                key,
                default_cpu: targets[0],
                force: args.force,
            };
            // Queues checked before anything is attached.
            let queues = nic.rx_queues()?;
            if let Some(&queue) = targets.iter().find(|&&q| q >= queues) {
                return Err(CliError::Invalid(format!(
                    "{} has {queues} receive queues (0 to {}); queue {queue} does not exist",
                    args.iface,
                    queues.saturating_sub(1)
                )));
            }
            let mut xdp = load_counter(&options, attach)?;
            xdp.attach()?;
            let path = HardwarePath::new(xdp, nic, targets.clone())
                .map_err(|e| CliError::Invalid(e.to_string()))?;
            let config = DaemonConfig {
                targets,
                reta_size: size,
                control,
                balance: !args.no_balance,
                load: load_model(args.load_source),
            };
            let clock: Box<dyn BusyClock> = Box::new(ProcStat::new());
            match serve(config, path, clock, &shared, &stop, plan.duration, started) {
                Ok(path) => {
                    if args.keep {
                        let (mut xdp, _nic) = path.keep();
                        xdp.detach()?;
                        info!(iface = %args.iface, "left the last table in the NIC (--keep)");
                        Ok(())
                    } else {
                        let (mut xdp, _nic, restored) = path.restore();
                        xdp.detach()?;
                        restored.map_err(CliError::from)
                    }
                }
                Err(e) => Err(e),
            }
        }
    };
    if let Some(server) = server {
        server.stop();
    }
    result
}

fn load_model(source: LoadArg) -> LoadModel {
    match source {
        LoadArg::Cpu | LoadArg::Steered => LoadModel::Measured,
        LoadArg::Packets => LoadModel::ByPackets,
    }
}

/// Loads the counting program, with the NIC's RX hash where the driver can
/// give it (native mode), else the Toeplitz hash in BPF.
fn load_counter(options: &XdpOptions, attach: AttachMode) -> Result<Xdp, CliError> {
    if attach == AttachMode::Native {
        match Xdp::load(options, Program::Count { rx_hash: true }) {
            Ok(xdp) => return Ok(xdp),
            Err(e) => {
                info!(iface = %options.iface, "no RX hash from the driver ({e}): hashing in BPF")
            }
        }
    }
    Ok(Xdp::load(options, Program::Count { rx_hash: false })?)
}

/// Runs rounds until stopped; returns the data path for the caller to
/// detach or keep. On error the data path is dropped, which detaches it.
fn serve<D: DataPath>(
    config: DaemonConfig,
    datapath: D,
    clock: Box<dyn BusyClock>,
    shared: &SharedMetrics,
    stop: &AtomicBool,
    duration: Option<Duration>,
    started: Instant,
) -> Result<D, CliError> {
    let now = || started.elapsed();
    let mut daemon = Daemon::start(config, datapath, clock, now())
        .map_err(|e| CliError::Invalid(e.to_string()))?;
    publish(shared, &daemon, None, Duration::ZERO);
    info!(targets = ?daemon.targets(), "balancing");
    let end = duration.map(|d| now() + d);
    loop {
        let due = daemon.next_round();
        // Sleep in short slices so a signal is answered within 50 ms.
        while now() < due && !stop.load(Ordering::Relaxed) && end.is_none_or(|e| now() < e) {
            let left = due.saturating_sub(now()).min(Duration::from_millis(50));
            std::thread::sleep(left);
        }
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| now() >= e) {
            break;
        }
        let t0 = Instant::now();
        match daemon.round(now()) {
            Ok(round) => publish(shared, &daemon, Some(&round), t0.elapsed()),
            // A refused table write keeps the previous table: log and go on.
            Err(e @ rsspp_linux::daemon::DaemonError::Table(_)) => warn!("{e}"),
            Err(e) => return Err(CliError::Invalid(e.to_string())),
        }
    }
    info!(
        rounds = daemon.rounds(),
        migrations = daemon.migrations(),
        cpu_percent = format!("{:.2}", own_cpu_percent(started.elapsed())),
        "stopping"
    );
    Ok(daemon.into_datapath())
}

/// Fills the metrics from the daemon's last round.
fn publish<D: DataPath, B: BusyClock>(
    shared: &SharedMetrics,
    daemon: &Daemon<D, B>,
    round: Option<&Round>,
    took: Duration,
) {
    shared.update(|s| {
        s.cpus = daemon
            .targets()
            .iter()
            .zip(daemon.target_totals())
            .enumerate()
            .map(|(i, (&cpu, &packets_total))| CpuMetrics {
                cpu,
                load: round.map_or(0.0, |r| r.load[i]),
                packets_total,
            })
            .collect();
        s.buckets = daemon
            .table()
            .iter()
            .zip(daemon.bucket_totals())
            .map(|(&cpu, &packets_total)| BucketMetrics { packets_total, cpu })
            .collect();
        s.migrations_total = daemon.migrations();
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
