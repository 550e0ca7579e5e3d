//! `rsspp compare`: the load-balancing methods side by side on one
//! workload, in the simulator.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use rsspp_sim::cost::{StateAccess, StateTable};
use rsspp_sim::engine::EngineConfig;
use rsspp_sim::policy::{PolicyConfig, POLICY_NAMES};
use rsspp_sim::run::{run, speed_for_load, RunConfig};
use rsspp_sim::workload::{RateProfile, TraceSource, WorkloadConfig};
use rsspp_sim::{Comparison, SimError};
use rsspp_trace::Preset;

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
rsspp compare --trace capture.pcap --cores 4 --json > result.json")]
pub struct CompareArgs {
    /// Replay this pcap/pcapng instead of a preset.
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    trace: Option<PathBuf>,
    /// Built-in workload.
    #[arg(long, value_enum, default_value = "campus4")]
    preset: PresetName,
    /// udp-flows: number of flows; elephants: number of elephants.
    #[arg(long, value_name = "N")]
    flows: Option<usize>,
    /// Processing cores simulated.
    #[arg(long, default_value_t = 8, value_name = "N")]
    cores: usize,
    /// Policies to compare, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    policies: Option<Vec<String>>,
    /// Replay speed chosen so that the average core load is X.
    #[arg(
        long,
        default_value_t = 0.8,
        value_name = "X",
        conflicts_with = "speed"
    )]
    load: f64,
    /// Replay speed (1 = the trace's own timing) instead of --load.
    #[arg(long, value_name = "X")]
    speed: Option<f64>,
    /// Simulated seconds.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    duration: f64,
    /// Seed of the workload and of the policies' random choices.
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// W: pseudo-random numbers computed per packet (8 cycles each).
    #[arg(long, default_value_t = 600, value_name = "W")]
    work: u32,
    /// Per-flow service-time skew (log-normal σ; 0: every flow alike).
    #[arg(long, default_value_t = 0.0, value_name = "SIGMA")]
    work_skew: f64,
    /// Per-flow state the network function keeps.
    #[arg(long, value_enum, default_value = "write")]
    state: StateArg,
    /// Where flow-affine policies keep flow state.
    #[arg(long, value_enum, default_value = "per-bucket")]
    state_table: TableArg,
    /// Core clock, GHz.
    #[arg(long, default_value_t = 2.3, value_name = "GHZ")]
    clock_ghz: f64,
    /// Descriptors per receive queue.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    queue_size: usize,
    /// Indirection table size.
    #[arg(long, default_value_t = 512, value_name = "N")]
    reta_size: usize,
    /// Let the policies that can scale add and remove cores.
    #[arg(long)]
    autoscale: bool,
    /// Print the comparison as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn sim_error(e: SimError) -> CliError {
    CliError::Invalid(e.to_string())
}

/// Runs `rsspp compare`.
pub fn run_compare(args: &CompareArgs) -> Result<(), CliError> {
    let policies: Vec<String> = match &args.policies {
        Some(list) => list.iter().map(|s| s.trim().to_string()).collect(),
        None => POLICY_NAMES.iter().map(|s| s.to_string()).collect(),
    };
    if policies.is_empty() || policies.iter().any(String::is_empty) {
        return Err(CliError::Invalid(
            "--policies needs at least one name".into(),
        ));
    }
    if !(1..=64).contains(&args.cores) {
        return Err(CliError::Invalid(format!(
            "--cores must be between 1 and 64, got {}",
            args.cores
        )));
    }
    let source = match &args.trace {
        Some(path) => TraceSource::Pcap(path.clone()),
        None => TraceSource::Preset {
            preset: args.preset.into(),
            flows: args.flows,
            frame_size: None,
        },
    };
    let mut workload =
        WorkloadConfig::new(source, args.duration, args.speed.unwrap_or(1.0)).map_err(sim_error)?;
    workload.seed = args.seed;
    let mut engine = EngineConfig::default();
    engine.cost.clock_ghz = args.clock_ghz;
    engine.cost.work = args.work;
    engine.cost.work_skew = args.work_skew;
    engine.cost.state = match args.state {
        StateArg::None => StateAccess::None,
        StateArg::Write => StateAccess::Write,
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
        seed: args.seed,
        ..PolicyConfig::default()
    };
    if args.queue_size == 0 {
        return Err(CliError::Invalid("--queue-size must be at least 1".into()));
    }
    let mut config = RunConfig {
        workload,
        engine,
        policy,
        policies: policies.clone(),
    };
    let started = Instant::now();
    let show_progress = std::io::stderr().is_terminal();
    let speed = match args.speed {
        Some(s) => s,
        None => {
            let s = speed_for_load(&config, args.load).map_err(sim_error)?;
            config.workload.rate = RateProfile::constant(s).map_err(sim_error)?;
            s
        }
    };
    let duration = args.duration;
    let out = run(&config, |t| {
        if show_progress {
            eprint!(
                "\rsimulating {} policies: {:5.1} / {:.1} s",
                policies.len(),
                t.min(duration),
                duration
            );
        }
    })
    .map_err(sim_error)?;
    if show_progress {
        eprintln!();
    }
    let comparison = Comparison {
        workload: config.workload.source.describe(),
        cores: args.cores,
        duration_s: args.duration,
        target_load: args.load,
        clock_ghz: args.clock_ghz,
        seed: args.seed,
        policies: out.results,
        sweep: Vec::new(),
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &comparison)
            .map_err(|e| CliError::output(e.into()))?;
        writeln!(stdout).map_err(CliError::output)?;
    } else {
        print_table(&mut stdout, &comparison, speed, out.workload.packets)
            .map_err(CliError::output)?;
        writeln!(
            stdout,
            "({:.1} s of wall time)",
            started.elapsed().as_secs_f64()
        )
        .map_err(CliError::output)?;
    }
    Ok(())
}

fn print_table(
    out: &mut impl Write,
    c: &Comparison,
    speed: f64,
    packets: u64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{} on {} cores, {:.1} s at speed {:.2} ({} packets)",
        c.workload, c.cores, c.duration_s, speed, packets
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
            "{:<18} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>10} {:>10} {:>10} {:>6.2} {:>6.2} {:>8.0}",
            p.name,
            s.imbalance_median,
            s.latency_p50_us,
            s.latency_p95_us,
            s.latency_p99_us,
            s.drops,
            s.reordered,
            s.migrations,
            s.avg_cores,
            s.avg_load,
            s.cycles_per_packet
        )?;
    }
    Ok(())
}
