//! `rsspp nf`: network functions on the userspace runtime. Parses the
//! options, calls `rsspp_runtime::run`, writes the flows and prints the
//! summary.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use rsspp_core::orss::OverrideConfig;
use rsspp_core::RssKey;
use rsspp_linux::cpu::CpuList;
use rsspp_runtime::nf::{dpi, firewall::Rules, nat};
use rsspp_runtime::{
    Backend, Chain, ChainConfig, Config, LoadSource, Moves, SteeringMode, TableMode,
};

use crate::error::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LoadArg {
    /// Each worker's busy time over busy + idle.
    Busy,
    /// The workers' busy time shared in proportion to the frames each
    /// took: balances frame rates (as `rsspp run --load-source packets`).
    Packets,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// AF_PACKET TPACKET_V3 rings in a fanout group steered by an eBPF
    /// program: any interface, veth included.
    Afpacket,
    /// AF_XDP sockets (zero-copy where the driver has it, copy mode
    /// otherwise), one per worker on each receive queue, steered per bucket
    /// by an XDP program.
    Afxdp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// The XDP program steers each bucket into its worker's socket on
    /// every queue (any interface, veth included).
    Software,
    /// The NIC's RSS spreads the frames, worker w on queue w, and the
    /// controller rewrites the NIC's indirection table (its size and key
    /// replace --buckets and --rss-key); put back on exit.
    Hardware,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TableArg {
    /// One flow table per RSS bucket, moved with the bucket.
    PerBucket,
    /// One lock-striped flow table for all workers (the paper's baseline).
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MovesArg {
    /// The new worker takes a moved bucket over once the old one has
    /// processed every packet of it sent there: no reordering.
    Ordered,
    /// At once: packets still queued at the old worker are processed there
    /// without flow state and may overtake later ones.
    Immediate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NatPortsArg {
    /// Ports whose replies hash into the connection's own bucket, where its
    /// mapping is.
    Bucket,
    /// Any free port, wherever its replies hash (shows what the choice is
    /// for: with per-bucket tables most replies then miss their mapping).
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DpiActionArg {
    /// Count the matches per flow (in --flows-out with monitor).
    Count,
    /// Drop a matching packet and the rest of its flow.
    Drop,
}

/// `rsspp nf` options.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
rsspp nf --in veth1 --cpus 0-3 --duration 10 --json\n  \
rsspp nf --in eth0 --out eth1 --cpus 2,3 --chain monitor --flows-out flows.jsonl\n  \
rsspp nf --in eth0 --out eth1 --cpus 2,3 --chain firewall,nat,monitor --rules fw.rules --nat-pool 192.0.2.0/30\n\n\
Metrics are served at http://127.0.0.1:9464/metrics, as by `rsspp run`; watch them live with `rsspp top`.")]
pub struct NfArgs {
    /// Interface to receive from.
    #[arg(short = 'i', long = "in", value_name = "IFACE")]
    input: String,
    /// Interface to transmit to, frames unchanged but for what a function
    /// rewrites; without it, frames are dropped after processing.
    #[arg(long = "out", value_name = "IFACE")]
    output: Option<String>,
    /// CPUs to run one worker each on (e.g. 0-3,8).
    #[arg(long, value_name = "LIST")]
    cpus: String,
    /// Network functions, in order (known: firewall, nat, monitor, dpi).
    #[arg(long, default_value = "monitor", value_name = "NF,...")]
    chain: String,
    /// The firewall's allow rules, one a line (e.g. `allow tcp dport 80`).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// The NAT's address pool (IPv4 prefix, /16 to /32).
    #[arg(long, value_name = "PREFIX")]
    nat_pool: Option<String>,
    /// How the NAT chooses translated ports.
    #[arg(long, value_enum, default_value_t = NatPortsArg::Bucket)]
    nat_ports: NatPortsArg,
    /// DPI's patterns, one a line.
    #[arg(long, value_name = "FILE")]
    patterns: Option<PathBuf>,
    /// What a DPI match does.
    #[arg(long, value_enum, default_value_t = DpiActionArg::Count)]
    dpi_action: DpiActionArg,
    /// Toeplitz key of the steering: microsoft, symmetric or hex bytes
    /// (default: symmetric when the chain has firewall or nat, so that both
    /// directions of a connection reach the same bucket; microsoft
    /// otherwise).
    #[arg(long, value_name = "KEY")]
    rss_key: Option<String>,
    /// I/O backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Afpacket)]
    backend: BackendArg,
    /// Who steers the frames with --backend afxdp.
    #[arg(long, value_enum, default_value_t = ModeArg::Software)]
    mode: ModeArg,
    /// Where the per-flow state lives.
    #[arg(long, value_enum, default_value_t = TableArg::PerBucket)]
    table: TableArg,
    /// Move this many random buckets every round, whatever the load (and,
    /// with --elephants, one per-flow override to another worker).
    #[arg(long, default_value_t = 0, value_name = "N")]
    churn: usize,
    /// Seed of --churn's choices.
    #[arg(long, default_value_t = 1)]
    churn_seed: u64,
    /// How moved buckets change worker.
    #[arg(long, value_enum, default_value_t = MovesArg::Ordered)]
    moves: MovesArg,
    /// Reframer before the chain: each worker holds a flow's frames for up
    /// to US µs (at most 32 at once; SYN, FIN and RST not delayed) and sends
    /// them on flow by flow, so the chain sees a flow's frames back to back.
    #[arg(long, value_name = "US")]
    reframer: Option<u64>,
    /// Do not rebalance (the table changes only by --churn).
    #[arg(long)]
    no_balance: bool,
    /// What the rebalancer balances.
    #[arg(long, value_enum, default_value_t = LoadArg::Busy)]
    load_source: LoadArg,
    /// Per-flow overrides inside the buckets (elephants), as `rsspp run`'s:
    /// flows are counted one by one in the heaviest buckets, and elephants
    /// sharing a bucket get workers of their own, their state and order
    /// kept, with oRSS's balancer rules (default: on with rebalancing,
    /// off with --no-balance).
    #[arg(long, value_enum, value_name = "on|off")]
    elephants: Option<OnOff>,
    /// Most flows steered on their own at once.
    #[arg(long, default_value_t = OverrideConfig::default().max_overrides, value_name = "N")]
    max_overrides: usize,
    /// Buckets in the indirection table (a power of two).
    #[arg(long, default_value_t = 128, value_name = "N")]
    buckets: usize,
    /// Milliseconds between rounds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    interval_ms: u64,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Write one JSON line per flow on exit (the monitor's counts).
    #[arg(long, value_name = "FILE")]
    flows_out: Option<PathBuf>,
    /// Print the summary as JSON on exit.
    #[arg(long)]
    json: bool,

    // Metrics, as `rsspp run`'s (the same exporter: `rsspp top` reads it).
    /// Where to serve the metrics (Prometheus text format, /metrics).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
    metrics_addr: String,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics_addr")]
    no_metrics: bool,

    // CPU scaling, as `rsspp run`'s.
    /// Put workers to sleep (no bucket, blocked until woken) while the
    /// others can take their load, down to one; wake them under load.
    #[arg(long, conflicts_with = "no_balance")]
    autoscale: bool,
    /// Average load of the working workers above which a sleeping one is
    /// woken (with --autoscale).
    #[arg(
        long,
        default_value_t = 0.8,
        value_name = "X",
        allow_negative_numbers = true
    )]
    target_load: f64,
}

/// Reads a file an option names.
fn read(path: &std::path::Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// The chain and the key the steering uses.
fn chain(args: &NfArgs) -> Result<(Chain, RssKey), CliError> {
    let names: Vec<&str> = args.chain.split(',').map(str::trim).collect();
    // An unknown function first, before what the known ones lack.
    if let Some(name) = names.iter().find(|n| !rsspp_runtime::nf::KNOWN.contains(n)) {
        return Err(rsspp_runtime::RuntimeError::UnknownNf {
            name: name.to_string(),
            known: rsspp_runtime::nf::KNOWN.join(", "),
        }
        .into());
    }
    let tracks = names.iter().any(|&n| n == "firewall" || n == "nat");
    let unused = |flag: &str, nf: &str| {
        CliError::Invalid(format!("{flag} is for {nf}, which --chain does not name"))
    };
    if args.rules.is_some() && !names.contains(&"firewall") {
        return Err(unused("--rules", "firewall"));
    }
    if args.nat_pool.is_some() && !names.contains(&"nat") {
        return Err(unused("--nat-pool", "nat"));
    }
    if args.patterns.is_some() && !names.contains(&"dpi") {
        return Err(unused("--patterns", "dpi"));
    }
    let key = match &args.rss_key {
        Some(k) => k.parse::<RssKey>()?,
        None if tracks => RssKey::symmetric(),
        None => RssKey::microsoft(),
    };
    let mut config = ChainConfig {
        key: key.clone(),
        buckets: args.buckets,
        nat_ports: match args.nat_ports {
            NatPortsArg::Bucket => nat::PortChoice::SameBucket,
            NatPortsArg::Any => nat::PortChoice::Any,
        },
        dpi_action: match args.dpi_action {
            DpiActionArg::Count => dpi::Action::Count,
            DpiActionArg::Drop => dpi::Action::Drop,
        },
        ..ChainConfig::default()
    };
    if let Some(path) = &args.rules {
        let text = String::from_utf8_lossy(&read(path)?).into_owned();
        config.rules = Some(
            Rules::parse(&text, &path.display().to_string())
                .map_err(rsspp_runtime::RuntimeError::from)?,
        );
    }
    if let Some(pool) = &args.nat_pool {
        config.nat_pool = Some(
            nat::Pool::parse(pool)
                .map_err(|why| CliError::Invalid(format!("--nat-pool {pool}: {why}")))?,
        );
    }
    if let Some(path) = &args.patterns {
        let origin = path.display().to_string();
        let patterns = dpi::parse_patterns(&read(path)?, &origin)
            .map_err(rsspp_runtime::RuntimeError::from)?;
        config.patterns = Some((patterns, origin));
    }
    Ok((Chain::with_config(&args.chain, &config)?, key))
}

fn check(args: &NfArgs) -> Result<Config, CliError> {
    let list: CpuList = args.cpus.parse()?;
    if list.is_empty() {
        return Err(CliError::Invalid("--cpus names no CPU".into()));
    }
    list.check_online(&CpuList::online()?)?;
    if !args.buckets.is_power_of_two() || args.buckets > rsspp_runtime::steer::MAX_BUCKETS {
        return Err(CliError::OutOfRange {
            flag: "--buckets",
            expected: format!("a power of two up to {}", rsspp_runtime::steer::MAX_BUCKETS).into(),
            value: args.buckets.to_string(),
        });
    }
    if args.interval_ms == 0 {
        return Err(CliError::OutOfRange {
            flag: "--interval-ms",
            expected: "at least 1".into(),
            value: "0".into(),
        });
    }
    let duration = match args.duration {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(CliError::OutOfRange {
                flag: "--duration",
                expected: "a positive number of seconds".into(),
                value: s.to_string(),
            })
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    if let Some(path) = &args.flows_out {
        crate::atomic::check_destination(path)?;
    }
    let mut config = Config::new(args.input.clone(), list.cpus().to_vec());
    config.backend = match args.backend {
        BackendArg::Afpacket => Backend::AfPacket,
        BackendArg::Afxdp => Backend::AfXdp,
    };
    config.steering = match (args.mode, args.backend) {
        (ModeArg::Software, _) => SteeringMode::Software,
        (ModeArg::Hardware, BackendArg::Afxdp) => {
            if args.rss_key.is_some() {
                return Err(CliError::Invalid(
                    "--rss-key: hardware mode hashes with the NIC's key (set it with ethtool -X IFACE hkey)"
                        .into(),
                ));
            }
            SteeringMode::Hardware
        }
        (ModeArg::Hardware, BackendArg::Afpacket) => {
            return Err(CliError::Invalid(
                "--mode hardware needs --backend afxdp (AF_XDP sockets on the NIC's queues)".into(),
            ))
        }
    };
    config.output = args.output.clone();
    config.table = match args.table {
        TableArg::PerBucket => TableMode::PerBucket,
        TableArg::Shared => TableMode::Shared,
    };
    config.moves = match args.moves {
        MovesArg::Ordered => Moves::Ordered,
        MovesArg::Immediate => Moves::Immediate,
    };
    config.balance = !args.no_balance;
    config.load = match args.load_source {
        LoadArg::Busy => LoadSource::Busy,
        LoadArg::Packets => LoadSource::Packets,
    };
    config.churn = args.churn;
    config.churn_seed = args.churn_seed;
    config.buckets = args.buckets;
    config.control.interval = Duration::from_millis(args.interval_ms);
    config.control.max_interval = config.control.max_interval.max(config.control.interval);
    config.duration = duration;
    config.reframer = args
        .reframer
        .map(|us| super::reframe::reframer_config("--reframer", us))
        .transpose()?;
    config.metrics = metrics_addr(args)?;
    config.elephants = elephants(args)?;
    config.control.balance.autoscale = args.autoscale;
    config.control.balance.target_load = args.target_load;
    // A runtime may sleep down to one worker (the daemon keeps two CPUs).
    config.control.balance.min_cores = 1;
    config.control.validate().map_err(|e| {
        CliError::setting(e, |setting| match setting {
            rsspp_core::Setting::TargetLoad => {
                Some(("--target-load", args.target_load.to_string()))
            }
            rsspp_core::Setting::Interval => Some(("--interval-ms", args.interval_ms.to_string())),
            _ => None,
        })
    })?;
    Ok(config)
}

/// The overrides' settings: `--elephants`, or its default (on where
/// overrides can be: with rebalancing).
fn elephants(args: &NfArgs) -> Result<Option<OverrideConfig>, CliError> {
    let hardware = args.mode == ModeArg::Hardware;
    let on = match args.elephants {
        Some(OnOff::On) if hardware => {
            return Err(CliError::Invalid(
                "--elephants on: `rsspp nf --mode hardware` moves buckets only (a move keeps \
                 order by fencing the NIC's queues, which an ntuple rule does not); \
                 `rsspp run --mode hardware` gives elephants ntuple rules"
                    .into(),
            ))
        }
        Some(OnOff::On) if args.no_balance => {
            return Err(CliError::Invalid(
                "--elephants on balances flows: it cannot go with --no-balance".into(),
            ))
        }
        Some(OnOff::On) => true,
        Some(OnOff::Off) => false,
        None => !args.no_balance && !hardware,
    };
    let config = OverrideConfig {
        max_overrides: args.max_overrides,
        ..OverrideConfig::default()
    };
    config.validate().map_err(|e| {
        CliError::setting(e, |setting| match setting {
            rsspp_core::Setting::MaxOverrides => {
                Some(("--max-overrides", args.max_overrides.to_string()))
            }
            _ => None,
        })
    })?;
    Ok(on.then_some(config))
}

/// `--metrics-addr` unless `--no-metrics`.
fn metrics_addr(args: &NfArgs) -> Result<Option<std::net::SocketAddr>, CliError> {
    if args.no_metrics {
        return Ok(None);
    }
    args.metrics_addr.parse().map(Some).map_err(|_| {
        CliError::Invalid(format!(
            "--metrics-addr {:?} is not an address:port (e.g. 127.0.0.1:9464)",
            args.metrics_addr
        ))
    })
}

/// Runs `rsspp nf`.
pub fn run(args: &NfArgs) -> Result<(), CliError> {
    // The chain first: an unknown function is refused before anything is
    // created.
    let (chain, key) = chain(args)?;
    let mut config = check(args)?;
    config.key = key;
    let stop = Arc::new(AtomicBool::new(false));
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::Invalid(format!("cannot handle signal {signal}: {e}")))?;
    }
    let outcome = rsspp_runtime::run(&config, |_| chain.clone(), &stop)?;
    if let Some(path) = &args.flows_out {
        let mut text = String::new();
        for flow in &outcome.flows {
            text.push_str(&serde_json::to_string(flow).expect("a flow record serialises"));
            text.push('\n');
        }
        crate::atomic::write(path, text.as_bytes())?;
    }
    let s = &outcome.summary;
    let mut stdout = std::io::stdout().lock();
    let written = if args.json {
        writeln!(
            stdout,
            "{}",
            serde_json::to_string(s).expect("the summary serialises")
        )
    } else {
        let dropped: u64 = s.dropped.values().sum();
        writeln!(
            stdout,
            "received {}, forwarded {}, dropped {} {:?}, {} bucket moves in {} rounds ({} drained, {} early){}{}{}",
            s.received,
            s.forwarded,
            dropped,
            s.dropped,
            s.migrations,
            s.rounds,
            s.handoffs.drained,
            s.handoffs.early,
            if args.autoscale {
                format!(
                    "; workers put to sleep {} times, woken {} times",
                    s.scaling.parked, s.scaling.woken
                )
            } else {
                String::new()
            },
            s.reframer
                .as_ref()
                .map(|r| format!("; {}", super::reframe::describe(r)))
                .unwrap_or_default(),
            s.elephants
                .as_ref()
                .map(|e| format!(
                    "; elephants: {} moved, {} overrides freed, {} in use (at most {})",
                    e.moved, e.freed, e.overrides, e.max_overrides
                ))
                .unwrap_or_default()
        )
    };
    written.map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Io {
                path: "stdout".into(),
                source: e,
            }
        }
    })
}
