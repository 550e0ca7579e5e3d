//! `rsspp compare`: the load-balancing methods side by side on one
//! workload, in the simulator.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use rsspp_core::ovs_alb::OvsAlbConfig;
use rsspp_core::{BalanceConfig, ControlConfig, Setting};
use rsspp_sim::calibration::CostFile;
use rsspp_sim::compare::{compare, CompareConfig, Progress};
use rsspp_sim::cost::{StateAccess, StateTable};
use rsspp_sim::engine::EngineConfig;
use rsspp_sim::policy::{OvsAlbOptions, PolicyConfig, POLICY_NAMES};
use rsspp_sim::reframer::{ReframerConfig, BUFFER_US_RANGE};
use rsspp_sim::run::RunConfig;
use rsspp_sim::workload::{Spool, TraceSource, WorkloadConfig};
use rsspp_sim::{report, Caveat, Comparison, PolicySummary, SimError, SweepPoint};
use rsspp_trace::{Preset, TraceError};
use serde::Serialize;

use crate::atomic;
use crate::error::CliError;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PresetName {
    /// Four campus windows superposed: ~1.87 Mpps, ~77k active flows/s.
    Campus4,
    /// Campus trace look-alike: ~507 kpps, ~19k active flows/s.
    Campus,
    /// N equal constant-rate UDP flows (--flows, default 1024).
    UdpFlows,
    /// A few elephant TCP flows among many mice (--flows, default 4).
    Elephants,
    /// Many short TCP connections (SYN, 1-3 requests, FIN), the
    /// Affinity-Accept workload; add --work-skew for skewed service times.
    ShortConnections,
}

impl From<PresetName> for Preset {
    fn from(p: PresetName) -> Self {
        match p {
            PresetName::Campus4 => Preset::Campus4,
            PresetName::Campus => Preset::Campus,
            PresetName::UdpFlows => Preset::UdpFlows,
            PresetName::Elephants => Preset::Elephants,
            PresetName::ShortConnections => Preset::ShortConnections,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StateArg {
    /// No per-flow state: only the W work (the paper's fairness test).
    None,
    /// Each packet reads and writes its flow's entry (NAT-like).
    Write,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TableArg {
    /// One flow table per core / RSS bucket (sharded).
    PerBucket,
    /// One lock-striped table shared by all cores.
    Shared,
}

/// Arguments of `rsspp compare`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  rsspp compare\n  \
rsspp compare --policies rss,rsspp --load 0.9 --duration 5\n  \
rsspp compare --policies rss --reframer 64 --cache-flows 16\n  \
rsspp compare --trace capture.pcap --cores 4 --json > result.json\n  \
rsspp compare --policies rss,sprayer --sweep --out sweep.html\n\n\
The HTML report (per-core load heatmaps, imbalance, latency CDF, drops, cores in use) is\n\
self-contained: it opens offline in any browser. It is written to rsspp-compare.html unless\n\
--out names another file; with --json only when --out names one; never with --no-report.")]
pub struct CompareArgs {
    /// Replay this pcap/pcapng instead of a preset ('-' for standard input).
    #[arg(short = 'r', long, value_name = "FILE", conflicts_with = "preset")]
    trace: Option<PathBuf>,
    /// --trace: replay the capture again, its timestamps shifted, as many
    /// times as --duration needs (a short capture at a high load).
    #[arg(long = "loop", requires = "trace")]
    repeat: bool,
    /// --trace: at a corrupt record before the end of the capture, replay
    /// the packets before it (the rest is skipped and said) instead of
    /// failing.
    #[arg(long, requires = "trace")]
    keep_partial: bool,
    /// Built-in workload.
    #[arg(long, value_enum, default_value = "campus4")]
    preset: PresetName,
    /// udp-flows: number of flows; elephants: number of elephants.
    #[arg(long, value_name = "N")]
    flows: Option<usize>,
    /// Processing cores simulated.
    #[arg(long, default_value_t = 8, value_name = "N")]
    cores: usize,
    /// Policies to compare, comma-separated, each named once.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    policies: Option<Vec<String>>,
    /// Replay speed chosen so that the average core load is X (more than
    /// 0, at most 1.5).
    #[arg(
        long,
        default_value_t = 0.8,
        value_name = "X",
        conflicts_with = "speed",
        allow_negative_numbers = true
    )]
    load: f64,
    /// Replay speed (1 = the trace's own timing) instead of --load.
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    speed: Option<f64>,
    /// Simulated seconds (more than 0, at most 86400).
    #[arg(
        long,
        default_value_t = 10.0,
        value_name = "S",
        allow_negative_numbers = true
    )]
    duration: f64,
    /// Seed of the workload and of the policies' random choices.
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// W: pseudo-random numbers computed per packet (8 cycles each).
    #[arg(
        long,
        default_value_t = 600,
        value_name = "W",
        conflicts_with = "cost_model"
    )]
    work: u32,
    /// Per-flow service-time skew (log-normal σ; 0: every flow alike).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "SIGMA",
        allow_negative_numbers = true
    )]
    work_skew: f64,
    /// Per-flow state the network function keeps.
    #[arg(long, value_enum, default_value = "write")]
    state: StateArg,
    /// Where flow-affine policies keep flow state.
    #[arg(long, value_enum, default_value = "per-bucket")]
    state_table: TableArg,
    /// A cost model measured on real code (`rsspp bench nf --cost-out
    /// FILE`): the function's CPU time per packet replaces the fixed cost
    /// per packet and W.
    #[arg(long, value_name = "FILE")]
    cost_model: Option<PathBuf>,
    /// The function of --cost-model to use (needed when it has several).
    #[arg(long, value_name = "NAME", requires = "cost_model")]
    cost_function: Option<String>,
    /// Core clock, GHz.
    #[arg(
        long,
        default_value_t = 2.3,
        value_name = "GHZ",
        allow_negative_numbers = true
    )]
    clock_ghz: f64,
    /// Descriptors per receive queue.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    queue_size: usize,
    /// Indirection table size (a power of two from 64 to 65536).
    #[arg(long, default_value_t = 512, value_name = "N")]
    reta_size: usize,
    /// Replay along the RSS++ paper's Figure 11 shape: the rate climbs from
    /// 15% to the full speed (--load/--speed) over the first quarter, holds
    /// for a quarter, and falls back over the second half.
    #[arg(long, conflicts_with = "sweep")]
    ramp: bool,
    /// Let the policies that can scale add and remove cores.
    #[arg(long)]
    autoscale: bool,
    /// Target average load of the scaling policies.
    #[arg(
        long,
        default_value_t = 0.8,
        value_name = "X",
        allow_negative_numbers = true
    )]
    target_load: f64,
    /// Control interval of the dynamic policies (RSS++ rounds), milliseconds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    interval_ms: u64,
    /// Delay before a rewritten indirection table takes effect in the NIC,
    /// microseconds (about 20 on Intel NICs).
    #[arg(
        long,
        default_value_t = 20.0,
        value_name = "US",
        allow_negative_numbers = true
    )]
    table_update_us: f64,
    /// ovs-alb: seconds between two rebalance checks (OVS's
    /// pmd-auto-lb-rebal-interval; at most one rebalance each).
    #[arg(
        long,
        default_value_t = 60.0,
        value_name = "S",
        allow_negative_numbers = true
    )]
    ovs_interval_s: f64,
    /// ovs-alb: seconds between two samples of the queues' cycles (OVS: 10;
    /// the last 6 samples count).
    #[arg(
        long,
        default_value_t = 10.0,
        value_name = "S",
        allow_negative_numbers = true
    )]
    ovs_sample_s: f64,
    /// ovs-alb: busy share at which a core is overloaded (OVS's
    /// pmd-auto-lb-load-threshold, 95 %).
    #[arg(
        long,
        default_value_t = 0.95,
        value_name = "X",
        allow_negative_numbers = true
    )]
    ovs_load_threshold: f64,
    /// ovs-alb: least relative drop of the load variance that a rebalance
    /// must bring (OVS's pmd-auto-lb-improvement-threshold, 25 %).
    #[arg(
        long,
        default_value_t = 0.25,
        value_name = "X",
        allow_negative_numbers = true
    )]
    ovs_improvement: f64,
    /// ovs-alb: receive queues per core (the static RSS table spreads the
    /// buckets over them; the balancer moves whole queues).
    #[arg(long, default_value_t = 4, value_name = "N")]
    ovs_rxqs_per_core: usize,
    /// Put a Reframer in front of the NIC, buffering each flow's packets up
    /// to BUFFER_US µs (1–10000) to rebuild per-flow bursts.
    #[arg(long, value_name = "BUFFER_US")]
    reframer: Option<u64>,
    /// Flow states each core keeps cached (a power of two; small values
    /// model an L1-sized working set, where packet locality matters most).
    #[arg(long, default_value_t = 512, value_name = "N")]
    cache_flows: u32,
    /// Print the comparison as JSON instead of a table; no HTML report
    /// then, unless --out names one.
    #[arg(long)]
    json: bool,
    /// Also run every policy at requested loads of 50 % to 100 % (a quarter
    /// of --duration each, at least 1 s) for the drops- and latency-against-
    /// load curves.
    #[arg(long)]
    sweep: bool,
    /// Where to write the HTML report (replaced atomically; checked
    /// before the simulation). Default: rsspp-compare.html, none with
    /// --json.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write each figure of the papers this run reproduces (RSS++ Figures
    /// 10 and 12; 11 when a policy scaled) into DIR: an SVG, the CSV behind
    /// it and a caption naming the paper's figure and its numbers.
    #[arg(long, value_name = "DIR")]
    figures: Option<PathBuf>,
    /// Do not write the HTML report.
    #[arg(long, conflicts_with = "out")]
    no_report: bool,
}

/// The longest simulation `--duration` asks for, seconds (a day, as for a
/// generated trace; the simulator's own limit).
const MAX_DURATION_S: f64 = rsspp_trace::generate::MAX_DURATION_S;

/// The highest `--load` (the simulator's limit: beyond it the pilot's
/// estimate of the needed speed means little).
const MAX_LOAD: f64 = 1.5;

/// Checks `--interval-ms` and `--target-load` with core's own ranges.
fn check_control(args: &CompareArgs) -> Result<(), CliError> {
    let defaults = ControlConfig::default();
    let interval = Duration::from_millis(args.interval_ms);
    let control = ControlConfig {
        interval,
        max_interval: defaults.max_interval.max(interval),
        balance: BalanceConfig {
            target_load: args.target_load,
            ..defaults.balance
        },
        ..defaults
    };
    control.validate().map_err(|e| {
        CliError::setting(e, |setting| match setting {
            Setting::Interval => Some(("--interval-ms", args.interval_ms.to_string())),
            Setting::TargetLoad => Some(("--target-load", args.target_load.to_string())),
            // Every other knob keeps core's default, which is valid.
            _ => None,
        })
    })
}

/// `ovs-alb`'s settings from the `--ovs-*` flags, checked.
fn ovs_alb_options(args: &CompareArgs) -> Result<OvsAlbOptions, CliError> {
    let seconds = |flag: &'static str, s: f64| {
        if s.is_finite() && s > 0.0 && s <= 1e6 {
            Ok((s * 1e9) as u64)
        } else {
            Err(CliError::OutOfRange {
                flag,
                expected: "between 0 (excluded) and 1000000 seconds".into(),
                value: s.to_string(),
            })
        }
    };
    let alb = OvsAlbConfig {
        sample_ns: seconds("--ovs-sample-s", args.ovs_sample_s)?,
        interval_ns: seconds("--ovs-interval-s", args.ovs_interval_s)?,
        load_threshold: args.ovs_load_threshold,
        improvement: args.ovs_improvement,
    };
    if !(args.ovs_load_threshold.is_finite() && args.ovs_load_threshold > 0.0) {
        return Err(CliError::OutOfRange {
            flag: "--ovs-load-threshold",
            expected: "above 0".into(),
            value: args.ovs_load_threshold.to_string(),
        });
    }
    if !(args.ovs_improvement.is_finite() && (0.0..=1.0).contains(&args.ovs_improvement)) {
        return Err(CliError::OutOfRange {
            flag: "--ovs-improvement",
            expected: "between 0 and 1".into(),
            value: args.ovs_improvement.to_string(),
        });
    }
    if args.ovs_rxqs_per_core == 0 {
        return Err(CliError::OutOfRange {
            flag: "--ovs-rxqs-per-core",
            expected: "at least 1".into(),
            value: args.ovs_rxqs_per_core.to_string(),
        });
    }
    Ok(OvsAlbOptions {
        alb,
        rxqs_per_pmd: args.ovs_rxqs_per_core,
    })
}

/// Creates the `--figures` folder (and its parents) if missing.
fn create_figures_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        CliError::Invalid(format!(
            "--figures {}: cannot create it: {e}",
            dir.display()
        ))
    })
}

/// Writes `comparison`'s figures into `dir` (created if missing): per
/// figure `<stem>.svg`, `<stem>.csv`, `<stem>.txt`. Returns the files
/// written.
fn write_figures(dir: &Path, comparison: &Comparison) -> Result<usize, CliError> {
    create_figures_dir(dir)?;
    let mut written = 0;
    for f in report::figures(comparison) {
        for (ext, text) in [("svg", &f.svg), ("csv", &f.csv), ("txt", &f.caption)] {
            atomic::write(&dir.join(format!("{}.{ext}", f.stem)), text.as_bytes())?;
            written += 1;
        }
    }
    Ok(written)
}

/// Runs `rsspp compare`.
pub fn run_compare(args: &CompareArgs) -> Result<(), CliError> {
    let policies = match &args.policies {
        Some(list) => policy_list(list)?,
        None => POLICY_NAMES.iter().map(|s| s.to_string()).collect(),
    };
    if !(1..=64).contains(&args.cores) {
        return Err(CliError::OutOfRange {
            flag: "--cores",
            expected: "between 1 and 64".into(),
            value: args.cores.to_string(),
        });
    }
    CliError::check_table_size("--reta-size", args.reta_size)?;
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= MAX_DURATION_S) {
        return Err(CliError::OutOfRange {
            flag: "--duration",
            expected: format!("more than 0 and at most {MAX_DURATION_S} seconds").into(),
            value: args.duration.to_string(),
        });
    }
    if args.speed.is_none() && !(args.load > 0.0 && args.load <= MAX_LOAD) {
        return Err(CliError::OutOfRange {
            flag: "--load",
            expected: format!("more than 0 and at most {MAX_LOAD}").into(),
            value: args.load.to_string(),
        });
    }
    let source = match &args.trace {
        // Standard input is kept in a temporary file: the pilot, the main
        // run and the sweep each read the capture from its start.
        Some(path) if path.as_os_str() == "-" => TraceSource::Spooled {
            spool: Arc::new(Spool::from_reader(std::io::stdin().lock())?),
            name: "standard input".into(),
        },
        Some(path) => TraceSource::Pcap(path.clone()),
        None => TraceSource::Preset {
            preset: args.preset.into(),
            flows: args.flows,
            frame_size: None,
        },
    };
    let mut workload = WorkloadConfig::new(source, args.duration, args.speed.unwrap_or(1.0))?;
    workload.seed = args.seed;
    workload.repeat = args.repeat;
    workload.keep_partial = args.keep_partial;
    let mut engine = EngineConfig::default();
    engine.cost.clock_ghz = args.clock_ghz;
    engine.cost.work = args.work;
    engine.cost.work_skew = args.work_skew;
    if !(args.cache_flows.is_power_of_two() && args.cache_flows <= 1 << 20) {
        return Err(CliError::OutOfRange {
            flag: "--cache-flows",
            expected: "a power of two between 1 and 1048576".into(),
            value: args.cache_flows.to_string(),
        });
    }
    engine.cost.cache_flows = args.cache_flows;
    let reframer = match args.reframer {
        None => None,
        Some(us) if BUFFER_US_RANGE.contains(&us) => {
            Some(ReframerConfig::new(us).map_err(SimError::from)?)
        }
        Some(us) => {
            return Err(CliError::OutOfRange {
                flag: "--reframer",
                expected: format!(
                    "between {} and {} µs",
                    BUFFER_US_RANGE.start(),
                    BUFFER_US_RANGE.end()
                )
                .into(),
                value: us.to_string(),
            })
        }
    };
    engine.cost.state = match args.state {
        StateArg::None => StateAccess::None,
        StateArg::Write => StateAccess::Write,
    };
    let calibrated = match &args.cost_model {
        Some(path) => Some(calibrate(
            path,
            args.cost_function.as_deref(),
            &mut engine.cost,
        )?),
        None => None,
    };
    let policy = PolicyConfig {
        cores: args.cores,
        queue_size: args.queue_size,
        reta_size: args.reta_size,
        state_table: match args.state_table {
            TableArg::PerBucket => StateTable::Sharded,
            TableArg::Shared => StateTable::Shared,
        },
        autoscale: args.autoscale,
        target_load: args.target_load,
        interval_ns: args.interval_ms * 1_000_000,
        table_update_ns: (args.table_update_us * 1000.0) as u64,
        seed: args.seed,
        ovs_alb: ovs_alb_options(args)?,
    };
    check_control(args)?;
    if !(args.table_update_us.is_finite() && (0.0..=1e6).contains(&args.table_update_us)) {
        return Err(CliError::OutOfRange {
            flag: "--table-update-us",
            expected: "between 0 and 1000000".into(),
            value: args.table_update_us.to_string(),
        });
    }
    if args.queue_size == 0 {
        return Err(CliError::OutOfRange {
            flag: "--queue-size",
            expected: "at least 1".into(),
            value: args.queue_size.to_string(),
        });
    }
    // A report that cannot be written should fail now, not after the run.
    let report_path = report_path(args);
    if let Some(path) = &report_path {
        if path.as_os_str() == "-" {
            return Err(CliError::Invalid(
                "--out -: the report is written to a file; --no-report skips it".into(),
            ));
        }
        atomic::check_destination(path)?;
    }
    // So is a figures folder that cannot be made.
    if let Some(dir) = &args.figures {
        create_figures_dir(dir)?;
    }
    let config = CompareConfig {
        run: RunConfig {
            workload,
            engine,
            policy,
            policies,
            reframer,
        },
        speed: args.speed,
        load: args.load,
        ramp: args.ramp,
        sweep: args.sweep,
    };
    let started = Instant::now();
    let show_progress = std::io::stderr().is_terminal();
    let count = config.run.policies.len();
    let out = compare(&config, |p| {
        if show_progress {
            show(p, count)
        }
    })
    .map_err(|e| compare_error(e, args.trace.as_deref()))?;
    let comparison = out.comparison;
    for caveat in &comparison.caveats {
        eprintln!("rsspp: warning: {caveat}");
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let output = JsonOutput {
            comparison: &comparison,
            summary: comparison
                .policies
                .iter()
                .map(|p| (p.name.as_str(), &p.summary))
                .collect(),
        };
        serde_json::to_writer_pretty(&mut stdout, &output)
            .map_err(|e| CliError::output(e.into()))?;
        writeln!(stdout).map_err(CliError::output)?;
    } else {
        if let Some((name, ns)) = &calibrated {
            writeln!(
                stdout,
                "cost model: {name}, {ns:.1} ns a packet measured → {} cycles a packet at {} GHz",
                config.run.engine.cost.packet_cycles, config.run.engine.cost.clock_ghz
            )
            .map_err(CliError::output)?;
        }
        print_table(&mut stdout, &comparison, out.speed, out.packets).map_err(CliError::output)?;
        print_sweep(&mut stdout, &comparison.sweep).map_err(CliError::output)?;
    }
    if let Some(dir) = &args.figures {
        let written = write_figures(dir, &comparison)?;
        if args.json {
            eprintln!("figures: {} ({written} files)", dir.display());
        } else {
            writeln!(stdout, "figures: {} ({written} files)", dir.display())
                .map_err(CliError::output)?;
        }
    }
    if let Some(path) = &report_path {
        write_report(path, &comparison)?;
        // Standard output stays pure JSON with --json.
        if args.json {
            eprintln!("report: {}", path.display());
        } else {
            writeln!(stdout, "report: {}", path.display()).map_err(CliError::output)?;
        }
    }
    if !args.json {
        writeln!(
            stdout,
            "({:.1} s of wall time)",
            started.elapsed().as_secs_f64()
        )
        .map_err(CliError::output)?;
    }
    Ok(())
}

/// The names of `--policies`, in order: none empty, none twice (a policy
/// run twice gives the same row twice, from the same seed).
fn policy_list(list: &[String]) -> Result<Vec<String>, CliError> {
    let names: Vec<String> = list.iter().map(|s| s.trim().to_string()).collect();
    if names.iter().all(String::is_empty) {
        return Err(CliError::Invalid(
            "--policies needs at least one name".into(),
        ));
    }
    if names.iter().any(String::is_empty) {
        return Err(CliError::Invalid(format!(
            "--policies {}: an empty name (two commas in a row, or one at an end)",
            list.join(",")
        )));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(CliError::Invalid(format!(
                "--policies names {name} twice: name each policy once"
            )));
        }
    }
    Ok(names)
}

/// Where the HTML report goes, if anywhere: `--out`, or by default
/// `rsspp-compare.html` for the table and none with `--json` (whose reader
/// is a program); `--no-report`: none.
fn report_path(args: &CompareArgs) -> Option<PathBuf> {
    match (&args.out, args.no_report, args.json) {
        (_, true, _) => None,
        (Some(path), false, _) => Some(path.clone()),
        (None, false, true) => None,
        (None, false, false) => Some(PathBuf::from(DEFAULT_REPORT)),
    }
}

/// The report's file when `--out` names none.
const DEFAULT_REPORT: &str = "rsspp-compare.html";

/// Reads `--cost-model` and sets `cost` from it; returns the function's
/// name and its measured nanoseconds a packet.
fn calibrate(
    path: &Path,
    function: Option<&str>,
    cost: &mut rsspp_sim::cost::CostModel,
) -> Result<(String, f64), CliError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        path: shown.clone(),
        source,
    })?;
    let refused = |source| CliError::CostModel {
        path: shown.clone(),
        source,
    };
    let file = CostFile::from_json(&text).map_err(refused)?;
    let (name, f) = file.function(function).map_err(refused)?;
    file.apply(Some(name), cost).map_err(refused)?;
    Ok((name.to_string(), f.ns_per_packet))
}

/// The simulator's refusals that a flag of this command answers.
fn compare_error(e: SimError, trace: Option<&Path>) -> CliError {
    match e {
        SimError::TraceFile {
            path,
            source: TraceError::Corrupt(record),
        } => CliError::CorruptTrace {
            path: match trace {
                Some(p) if p.as_os_str() == "-" => "standard input".into(),
                _ => path.display().to_string(),
            },
            record,
        },
        SimError::LoadUnreachable { covers_s, .. } => CliError::Invalid(format!(
            "{e}; --loop replays the capture as often as needed, or ask for --duration {covers_s:.4} or use a longer capture"
        )),
        e => CliError::Sim(e),
    }
}

/// A statistic, `n/a` when it had no sample.
fn stat(x: f64, width: usize, decimals: usize) -> String {
    if x.is_nan() {
        format!("{:>width$}", "n/a")
    } else {
        format!("{x:>width$.decimals$}")
    }
}

/// One step of the progress line on standard error.
fn show(progress: Progress, policies: usize) {
    match progress {
        Progress::Main {
            simulated_s,
            duration_s,
        } => eprint!("\rsimulating {policies} policies: {simulated_s:5.1} / {duration_s:.1} s"),
        Progress::Sweep {
            point,
            points,
            load,
            simulated_s,
            duration_s,
        } => eprint!(
            "\rsweep {point}/{points} (load {:3.0}%): {simulated_s:5.1} / {duration_s:.1} s",
            load * 100.0
        ),
        Progress::MainDone | Progress::SweepDone => eprintln!(),
    }
}

/// `--json`: the whole comparison, plus its table keyed by policy name
/// (`.summary.rsspp.latency_p95_us`).
#[derive(Serialize)]
struct JsonOutput<'a> {
    #[serde(flatten)]
    comparison: &'a Comparison,
    summary: BTreeMap<&'a str, &'a PolicySummary>,
}

fn write_report(path: &Path, comparison: &Comparison) -> Result<(), CliError> {
    atomic::write(path, report::html(comparison).as_bytes())
}

/// The sweep as two small tables: drops and p95 latency by requested load.
fn print_sweep(out: &mut impl Write, sweep: &[SweepPoint]) -> std::io::Result<()> {
    if sweep.is_empty() {
        return Ok(());
    }
    let mut loads: Vec<f64> = sweep.iter().map(|s| s.offered_load).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    let mut names: Vec<&str> = Vec::new();
    for s in sweep {
        if !names.contains(&s.policy.as_str()) {
            names.push(&s.policy);
        }
    }
    type Cell = fn(&SweepPoint) -> String;
    let tables: [(&str, Cell); 2] = [
        ("packets dropped (%)", |s| {
            format!("{:.3}", s.drops as f64 * 100.0 / s.packets.max(1) as f64)
        }),
        ("p95 latency (µs)", |s| stat(s.latency_p95_us, 0, 1)),
    ];
    for (what, cell) in tables {
        writeln!(out, "\nsweep: {what} by requested load")?;
        write!(out, "{:<18}", "policy")?;
        for l in &loads {
            write!(out, " {:>9}", format!("{:.0}%", l * 100.0))?;
        }
        writeln!(out)?;
        for name in &names {
            write!(out, "{name:<18}")?;
            for l in &loads {
                let value = sweep
                    .iter()
                    .find(|s| s.policy == *name && s.offered_load == *l)
                    .map_or_else(|| "-".to_string(), cell);
                write!(out, " {value:>9}")?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

fn print_table(
    out: &mut impl Write,
    c: &Comparison,
    speed: f64,
    packets: u64,
) -> std::io::Result<()> {
    let ran_out = c.caveats.iter().find_map(|caveat| match caveat {
        Caveat::TraceRanOut { at_s, .. } => Some(*at_s),
        _ => None,
    });
    let time = match ran_out {
        Some(at) => format!("{at:.3} s (the trace ran out; {:.1} s asked)", c.duration_s),
        None => format!("{:.1} s", c.duration_s),
    };
    writeln!(
        out,
        "{} on {} cores, {time} at speed {:.2} ({} packets)",
        c.workload, c.cores, speed, packets
    )?;
    writeln!(
        out,
        "{:<18} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>6} {:>6} {:>8}",
        "policy",
        "imbalance%",
        "p50 µs",
        "p95 µs",
        "p99 µs",
        "drops",
        "reordered",
        "migrations",
        "cores",
        "load",
        "cyc/pkt"
    )?;
    for p in &c.policies {
        let s = &p.summary;
        writeln!(
            out,
            "{:<18} {} {} {} {} {:>10} {:>10} {:>10} {:>6.2} {} {}",
            p.name,
            stat(s.imbalance_median, 10, 1),
            stat(s.latency_p50_us, 9, 1),
            stat(s.latency_p95_us, 9, 1),
            stat(s.latency_p99_us, 9, 1),
            s.drops,
            s.reordered,
            s.migrations,
            s.avg_cores,
            stat(s.avg_load, 6, 2),
            stat(s.cycles_per_packet, 8, 0)
        )?;
    }
    writeln!(
        out,
        "{}, % (median of 1-s samples)",
        rsspp_core::measure::IMBALANCE_DEFINITION
    )?;
    Ok(())
}
