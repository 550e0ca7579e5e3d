//! `rsspp run`: the RSS++ daemon on a Linux interface.
//!
//! The daemon itself is [`rsspp_linux::service`]: data-path assembly,
//! start-up order, rounds, metrics and the orderly exit. This front end
//! turns the options into a [`ServiceConfig`] (naming the option a bad value
//! came from), raises the service's stop flag on SIGINT/SIGTERM, and runs
//! it.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use rsspp_core::balance::BalanceError;
use rsspp_core::orss::OverrideConfig;
use rsspp_core::{ControlConfig, Setting};
use rsspp_linux::cpu::CpuList;
use rsspp_linux::service::{
    self, ConfigError, LoadSource, Moves, ServiceConfig, ServiceError, Steering,
    DEFAULT_SOFTWARE_RETA_SIZE,
};
use rsspp_linux::xdp::{AttachMode, DEFAULT_CPUMAP_QUEUE};

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
enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MovesArg {
    /// A moved bucket stays on its old CPU until that CPU has drained it:
    /// no packet of a flow overtakes an earlier one (native XDP).
    Ordered,
    /// At once: packets still queued on the old CPU may be overtaken.
    Immediate,
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
#[command(
    after_help = "Examples:\n  \
rsspp run -i eth0 --cpus 0-7\n  \
rsspp run --iface eth0 --mode hardware --cpus 0-3 --autoscale\n  \
rsspp run --iface veth0 --xdp-mode skb --no-balance --duration 30\n  \
rsspp run --config /etc/rsspp/rsspp.toml --cpus 0-3\n\n\
A configuration file (--config) sets options as TOML keys named as the flags, without the\n\
dashes: iface = \"eth0\", cpus = \"0-7\", interval_ms = 100, autoscale = true, ... Flags typed\n\
on the command line override it; a key that is not an option is refused.\n\n\
Metrics are served at http://127.0.0.1:9464/metrics; watch them live with `rsspp top`.",
    args_override_self = true
)]
pub struct RunArgs {
    /// Read options from this TOML file (keys named as the flags); the
    /// flags given here override it.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// The interface to balance.
    #[arg(short, long, value_name = "IF")]
    iface: String,
    /// Software steering (XDP + CPUMAP) or the NIC's own table.
    #[arg(long, value_enum, default_value = "software")]
    mode: Mode,
    /// CPUs to spread over (software mode), or receive queues (hardware
    /// mode; the CPU serving each is read from its interrupt, see `rsspp
    /// nic show`), kernel list syntax: 0-3,6. Default: every online CPU.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Buckets in the table (software mode: a power of two from 64 to
    /// 65536, default 128; hardware mode: the NIC's size, read from it).
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
    /// Make a rebalancing plan only if it is predicted to lower the
    /// imbalance by at least this fraction (0.25: by a quarter; 0: any
    /// plan, as in the paper). Keeps the daemon from chasing noise.
    #[arg(
        long,
        default_value_t = 0.25,
        value_name = "X",
        allow_negative_numbers = true
    )]
    min_improvement: f64,
    /// A moved bucket stays on its new CPU at least this long.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    min_dwell_ms: u64,
    /// Also move N random buckets every round, whatever the load (and, with
    /// --elephants, one per-flow override): a test of what migration does
    /// to the traffic (counted as migrations).
    #[arg(long, default_value_t = 0, value_name = "N")]
    churn: usize,
    /// Count and report only: never move a bucket.
    #[arg(long)]
    no_balance: bool,
    /// Hardware mode: balance this additional RSS context of the NIC (made
    /// by `ethtool -X IF context new`) and leave its main table alone.
    #[arg(long, value_name = "N")]
    context: Option<u32>,
    /// Export the per-bucket metrics (two series a bucket). Default: on up
    /// to 4096 buckets.
    #[arg(long, value_enum, value_name = "on|off")]
    bucket_metrics: Option<OnOff>,
    /// Software mode: how a moved bucket's packets switch CPU.
    #[arg(long, value_enum, default_value = "ordered")]
    moves: MovesArg,
    /// How to attach the XDP program.
    #[arg(long, value_enum, default_value = "native")]
    xdp_mode: XdpModeArg,
    /// What a CPU's load is measured from.
    #[arg(long, value_enum, default_value = "packets")]
    load_source: LoadArg,
    /// Where to serve the metrics (Prometheus text format, /metrics).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
    metrics_addr: String,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics_addr")]
    no_metrics: bool,
    /// Replace another XDP program attached to the interface through
    /// netlink (put back on exit; one attached through a BPF link cannot
    /// be replaced).
    #[arg(long)]
    force: bool,
    /// On exit, leave the last table in place (software mode: the program
    /// stays attached and keeps steering with it, its BPF link pinned at
    /// /sys/fs/bpf/rsspp/IF/link; `rsspp detach --iface IF` removes it).
    #[arg(long)]
    keep: bool,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Software mode: frames queued per CPU before the CPUMAP drops.
    #[arg(long, default_value_t = DEFAULT_CPUMAP_QUEUE, value_name = "N")]
    cpumap_queue: u32,
    /// Per-flow overrides of the table (elephants inside buckets): flows
    /// are counted one by one in the heaviest buckets, and elephants
    /// sharing a bucket are steered to CPUs of their own with oRSS's
    /// balancer rules; in order in software mode, by the NIC's ntuple
    /// rules in hardware mode (where it has them).
    #[arg(long, value_enum, default_value = "on", value_name = "on|off")]
    elephants: OnOff,
    /// Most flows steered on their own at once.
    #[arg(long, default_value_t = OverrideConfig::default().max_overrides, value_name = "N")]
    max_overrides: usize,
}

/// The options as the service's settings; a bad value is named by its
/// option.
fn check(args: &RunArgs) -> Result<ServiceConfig, CliError> {
    let online = CpuList::online()?;
    let targets = match &args.cpus {
        Some(text) => {
            let list: CpuList = text.parse()?;
            if list.is_empty() {
                return Err(CliError::Invalid("--cpus names no CPU".into()));
            }
            if args.mode == Mode::Software {
                list.check_online(&online)?;
            }
            list
        }
        None => online,
    };
    if args.context.is_some() && args.mode != Mode::Hardware {
        return Err(CliError::Invalid(
            "--context balances one of the NIC's RSS contexts: it needs --mode hardware".into(),
        ));
    }
    if args.context == Some(0) {
        return Err(CliError::Invalid(
            "--context 0 is the NIC's main table: leave --context out to balance it".into(),
        ));
    }
    if let (Mode::Software, Some(size)) = (args.mode, args.reta_size) {
        CliError::check_table_size("--reta-size", size)?;
    }
    let mut control = ControlConfig {
        interval: Duration::from_millis(args.interval_ms),
        max_interval: Duration::from_millis(args.max_interval_ms),
        ..ControlConfig::default()
    };
    control.balance.autoscale = args.autoscale;
    control.balance.target_load = args.target_load;
    control.balance.tolerance = args.tolerance;
    control.min_improvement = args.min_improvement;
    control.min_dwell = Duration::from_millis(args.min_dwell_ms);
    control.validate().map_err(|e| bad_option(args, e))?;
    let duration = match args.duration {
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(CliError::Invalid(format!(
                "--duration must be a positive number of seconds, got {s}"
            )))
        }
        None => None,
    };
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
    let config = ServiceConfig {
        iface: args.iface.clone(),
        steering: match args.mode {
            Mode::Software => Steering::Software {
                reta_size: args.reta_size.unwrap_or(DEFAULT_SOFTWARE_RETA_SIZE),
                cpumap_queue: args.cpumap_queue,
            },
            Mode::Hardware => Steering::Hardware {
                reta_size: args.reta_size,
                context: args.context.unwrap_or(0),
            },
        },
        targets: targets.cpus().to_vec(),
        attach: match args.xdp_mode {
            XdpModeArg::Native => AttachMode::Native,
            XdpModeArg::Skb => AttachMode::Skb,
        },
        control,
        balance: !args.no_balance,
        load_source: match args.load_source {
            LoadArg::Cpu => LoadSource::Cpu,
            LoadArg::Steered => LoadSource::Steered,
            LoadArg::Packets => LoadSource::Packets,
        },
        metrics,
        force: args.force,
        keep: args.keep,
        duration,
        churn: args.churn,
        moves: match args.moves {
            MovesArg::Ordered => Moves::Ordered,
            MovesArg::Immediate => Moves::Immediate,
        },
        bucket_metrics: args.bucket_metrics.map(|b| b == OnOff::On),
        elephants: (args.elephants == OnOff::On).then_some(OverrideConfig {
            max_overrides: args.max_overrides,
            ..OverrideConfig::default()
        }),
        ..ServiceConfig::new(args.iface.clone(), Vec::new())
    };
    config.validate().map_err(|e| match e {
        ConfigError::Control(e) => bad_option(args, e),
        ConfigError::SteeredNeedsSoftware => CliError::Invalid(
            "--load-source steered measures CPUMAP threads, which only software mode has".into(),
        ),
        other => CliError::ServiceConfig(other),
    })?;
    Ok(config)
}

/// A setting core refused, named by the option it came from, with the
/// value given.
fn bad_option(args: &RunArgs, e: BalanceError) -> CliError {
    CliError::setting(e, |setting| {
        Some(match setting {
            Setting::Interval => ("--interval-ms", args.interval_ms.to_string()),
            Setting::MaxInterval => ("--max-interval-ms", args.max_interval_ms.to_string()),
            Setting::Tolerance => ("--tolerance", args.tolerance.to_string()),
            Setting::TargetLoad => ("--target-load", args.target_load.to_string()),
            Setting::MinImprovement => ("--min-improvement", args.min_improvement.to_string()),
            Setting::MinDwell => ("--min-dwell-ms", args.min_dwell_ms.to_string()),
            Setting::MaxOverrides => ("--max-overrides", args.max_overrides.to_string()),
            // Not options of `rsspp run`: left at core's defaults.
            _ => return None,
        })
    })
}

/// Runs `rsspp run`.
pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let config = check(args)?;
    // The file's options were put on the command line before parsing
    // (`crate::config`): here it is only said where they came from.
    if let Some(path) = &args.config {
        tracing::info!(config = %path.display(), "options read from the configuration file");
    }
    // The process's signals are the front end's business: the service
    // only watches the flag.
    let stop = Arc::new(AtomicBool::new(false));
    // SIGHUP (the terminal or SSH session went away) and SIGQUIT end the
    // daemon as SIGTERM does: it detaches and restores on the way out.
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::Invalid(format!("cannot handle signal {signal}: {e}")))?;
    }
    match service::serve(config, &stop) {
        Ok(_) => Ok(()),
        Err(ServiceError::TableSize { iface, size, asked }) => Err(CliError::Invalid(format!(
            "{iface}'s indirection table has {size} entries; --reta-size {asked} does not match (leave it out)"
        ))),
        Err(e) => Err(e.into()),
    }
}
