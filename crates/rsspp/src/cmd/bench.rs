//! `rsspp bench`: measurements that back the README's figures.

use std::io::Write;
use std::time::Instant;

use clap::{Args, Subcommand};
use rsspp_core::balance::synthetic::{self, makespan_lower_bound, Skew};
use rsspp_core::bench_state::{
    self as state, BenchStateConfig, BenchStateError, BenchStateReport, Positive,
};
use rsspp_core::state::threaded::ReplayClocks;
use rsspp_core::{rebalance, BalanceConfig, BalanceOutcome, LoadReport};
use serde::Serialize;

use crate::error::CliError;

/// Arguments of `rsspp bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Rebalancer quality and speed on skewed workloads (Zipf bucket loads,
    /// elephant buckets; 4–128 cores, 128–4096 buckets, average load
    /// 0.5–0.9), each fed back its own plans for up to three rounds.
    Balance(BenchBalanceArgs),
    /// Per-bucket flow tables against one shared table, under table rewrites
    /// (state migration, §3.3 and §5.6): packets per second, reordering, lost states.
    State(BenchStateArgs),
    /// The XDP programs' cost per packet (BPF_PROG_TEST_RUN): count-only
    /// and steering, IPv4 TCP and IPv6 UDP frames. Needs root.
    Xdp(crate::bench_xdp::BenchXdpArgs),
    /// The daemon's CPU time per round by table size (the steering program
    /// loaded but not attached, traffic made with BPF_PROG_TEST_RUN).
    /// Needs root.
    Daemon(BenchDaemonArgs),
    /// `rsspp nf`'s CPU time per packet on a veth pair in a namespace of
    /// its own, against a plain AF_PACKET reader and tcpdump; per chain: per-bucket
    /// against shared flow table, RSS++ (rebalancing and --churn) against a
    /// static table. Writes the simulator's cost model (--cost-out). Needs
    /// root.
    Nf(BenchNfArgs),
}

/// Arguments of `rsspp bench nf`.
#[derive(Debug, Clone, Args)]
pub struct BenchNfArgs {
    /// The workers' CPUs (the plain reader runs on the first).
    #[arg(long, default_value = "0,1", value_name = "LIST")]
    cpus: String,
    /// The sender's CPU.
    #[arg(long, default_value_t = 0, value_name = "CPU")]
    sender_cpu: u32,
    /// Frames sent per run (64-byte UDP frames, as fast as the kernel
    /// takes them).
    #[arg(long, default_value_t = 300_000, value_name = "N")]
    frames: u64,
    /// Distinct flows in the traffic.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    flows: usize,
    /// Rounds: every variant runs once a round, in turn; figures are
    /// medians, ratios the median of the rounds' ratios.
    #[arg(long, default_value_t = 3, value_name = "N")]
    rounds: usize,
    /// Random buckets moved every round in the RSS++ variant.
    #[arg(long, default_value_t = 16, value_name = "N")]
    churn: usize,
    /// Chains to measure, separated by `;` (default: each known function
    /// alone).
    #[arg(long, value_name = "CHAIN;...")]
    chains: Option<String>,
    /// Write each chain's CPU time per packet (static per-bucket run) as
    /// the cost model `rsspp compare --cost-model FILE` reads.
    #[arg(long, value_name = "FILE")]
    cost_out: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `rsspp bench daemon`.
#[derive(Debug, Clone, Args)]
pub struct BenchDaemonArgs {
    /// Table sizes to measure (each a power of two from 64 to 65536).
    #[arg(long, value_delimiter = ',', default_values_t = [128, 4096, 65536])]
    reta_sizes: Vec<usize>,
    /// Rounds per size.
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// Packets a second of (made-up) traffic.
    #[arg(long, default_value_t = 1_000_000)]
    pps: u64,
    /// Export the per-bucket series (default: as `rsspp run`, on up to
    /// 4096 buckets).
    #[arg(long, value_name = "on|off")]
    bucket_metrics: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `rsspp bench state`.
#[derive(Debug, Clone, Args)]
pub struct BenchStateArgs {
    /// Print JSON instead of a summary.
    #[arg(long)]
    json: bool,
    /// Seconds of traffic for each of the two variants.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Concurrent flows (at least 1).
    #[arg(long, default_value_t = 10_000)]
    flows: usize,
    /// Worker threads (cores).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Time between two indirection-table rewrites, in milliseconds.
    #[arg(long, default_value_t = 100)]
    change_interval_ms: u64,
    /// Buckets moved by each rewrite.
    #[arg(long, default_value_t = 16)]
    moves_per_change: usize,
    /// Indirection-table size (a power of two from 64 to 65536).
    #[arg(long, default_value_t = 512)]
    buckets: usize,
    /// Lock stripes of the shared table.
    #[arg(long, default_value_t = 1024)]
    stripes: usize,
    /// Packets per receive batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Seed of the traffic and of the moves.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Packets a worker may run ahead of the slowest one (a receive ring).
    #[arg(long, default_value_t = 2048)]
    ring: u64,
    /// Rounds: the variants alternate, `--seconds / --rounds` each per
    /// round; packets per second are the medians over the rounds, the ratio
    /// the median of the rounds' ratios (steadier than one long run when
    /// other work shares the CPUs).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

/// Arguments of `rsspp bench balance`.
#[derive(Debug, Args)]
pub struct BenchBalanceArgs {
    /// Workloads (seeds) per shape, load and kind.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Rounds of feedback at most.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Results for one table shape.
#[derive(Debug, Serialize)]
struct ShapeResult {
    cores: usize,
    buckets: usize,
    cases: usize,
    /// Worst (most loaded core / lower bound of the optimum) under the static table.
    static_makespan_ratio: f64,
    /// Worst (most loaded core / lower bound of the optimum) after rebalancing.
    makespan_ratio: f64,
    /// Worst imbalance ((max − min) / min) of the cores without an isolated
    /// elephant, static table.
    static_imbalance: f64,
    /// Same after rebalancing.
    imbalance: f64,
    /// Mean buckets moved in all rounds, as a fraction of the table.
    moved_fraction: f64,
    /// Most rounds with moves before a round moved nothing.
    max_rounds: usize,
    /// Median time of the first (most skewed) round, µs.
    first_round_us_median: f64,
    /// Median time of a round on the converged state, µs; none when no
    /// round converged within --rounds (JSON null).
    converged_round_us_median: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One rebalancing round, timed: best of three, as the machine is shared
/// and a single sample is noisy.
fn timed_round(report: &LoadReport<'_>, config: &BalanceConfig) -> (BalanceOutcome, f64) {
    let mut best = f64::MAX;
    let mut outcome = None;
    for _ in 0..3 {
        let started = Instant::now();
        let out = rebalance(report, config).expect("synthetic input is valid");
        best = best.min(started.elapsed().as_secs_f64() * 1e6);
        outcome = Some(out);
    }
    (outcome.expect("ran"), best)
}

fn run_shape(cores: usize, buckets: usize, args: &BenchBalanceArgs) -> ShapeResult {
    let config = BalanceConfig::default();
    let mut r = ShapeResult {
        cores,
        buckets,
        cases: 0,
        static_makespan_ratio: 0.0,
        makespan_ratio: 0.0,
        static_imbalance: 0.0,
        imbalance: 0.0,
        moved_fraction: 0.0,
        max_rounds: 0,
        first_round_us_median: 0.0,
        converged_round_us_median: None,
    };
    let (mut first, mut converged) = (Vec::new(), Vec::new());
    for seed in 0..args.seeds {
        for average in synthetic::QUALITY_LOADS {
            for (k, kind) in Skew::ALL.into_iter().enumerate() {
                let s = seed * 1000 + (average * 10.0) as u64 * 10 + k as u64;
                let demand = kind.demand(s, buckets, cores, average);
                let bound = makespan_lower_bound(&demand, cores);
                let mut round = 0;
                let c = synthetic::converge(&demand, cores, args.rounds, |report| {
                    let (out, us) = timed_round(report, &config);
                    if round == 0 {
                        first.push(us);
                    }
                    if out.plan.is_empty() {
                        converged.push(us);
                    }
                    round += 1;
                    out
                });
                let shared = c.shared_cores();
                let max = |l: &[f64]| l.iter().copied().fold(0.0, f64::max);
                r.cases += 1;
                r.static_makespan_ratio = r.static_makespan_ratio.max(max(&c.load_before) / bound);
                r.makespan_ratio = r.makespan_ratio.max(max(&c.load_after) / bound);
                r.static_imbalance = r
                    .static_imbalance
                    .max(synthetic::imbalance(&c.load_before, &shared));
                r.imbalance = r
                    .imbalance
                    .max(synthetic::imbalance(&c.load_after, &shared));
                r.moved_fraction += c.moves as f64 / buckets as f64;
                r.max_rounds = r.max_rounds.max(c.rounds);
            }
        }
    }
    r.moved_fraction /= r.cases as f64;
    r.first_round_us_median = median(first);
    r.converged_round_us_median = (!converged.is_empty()).then(|| median(converged));
    r
}

/// Runs `rsspp bench`.
pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    match &args.what {
        BenchCommand::Balance(a) => run_balance(a),
        BenchCommand::State(a) => run_state(a),
        BenchCommand::Xdp(a) => crate::bench_xdp::run(a),
        BenchCommand::Daemon(a) => run_daemon(a),
        BenchCommand::Nf(a) => run_nf(a),
    }
}

/// `rsspp bench nf`.
fn run_nf(args: &BenchNfArgs) -> Result<(), CliError> {
    use rsspp_runtime::bench::{measure, BenchNfConfig};
    use rsspp_sim::calibration::{CostFile, FunctionCost};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(CliError::Invalid(
            "rsspp bench nf needs root: it makes a network namespace, raw sockets and a BPF program"
                .into(),
        ));
    }
    let list: rsspp_linux::cpu::CpuList = args.cpus.parse()?;
    if list.is_empty() {
        return Err(CliError::Invalid("--cpus names no CPU".into()));
    }
    let online = rsspp_linux::cpu::CpuList::online()?;
    list.check_online(&online)?;
    if !online.cpus().contains(&args.sender_cpu) {
        return Err(CliError::Invalid(format!(
            "--sender-cpu {} is not online",
            args.sender_cpu
        )));
    }
    for (flag, v) in [
        ("--frames", args.frames),
        ("--flows", args.flows as u64),
        ("--rounds", args.rounds as u64),
    ] {
        if v == 0 {
            return Err(CliError::OutOfRange {
                flag,
                expected: "at least 1".into(),
                value: "0".into(),
            });
        }
    }
    if let Some(path) = &args.cost_out {
        crate::atomic::check_destination(path)?;
    }
    let chains: Vec<String> = match &args.chains {
        Some(list) => list.split(';').map(|c| c.trim().to_string()).collect(),
        None => rsspp_runtime::nf::KNOWN
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let report = measure(&BenchNfConfig {
        cpus: list.cpus().to_vec(),
        sender_cpu: args.sender_cpu,
        frames: args.frames,
        flows: args.flows,
        rounds: args.rounds,
        churn: args.churn,
        chains,
    })?;
    if let Some(path) = &args.cost_out {
        let file = CostFile::new(
            format!(
                "rsspp bench nf: workers on CPUs {}, {} flows, static per-bucket table",
                args.cpus, args.flows
            ),
            report
                .chains
                .iter()
                .map(|c| {
                    let ns = c.variants[0].ns_per_packet;
                    (c.chain.clone(), FunctionCost { ns_per_packet: ns })
                })
                .collect(),
        );
        crate::atomic::write(path, file.to_json().as_bytes())?;
    }
    let text = if args.json {
        serde_json::to_string_pretty(&report).expect("serialises") + "\n"
    } else {
        // The chain column: as wide as the longest chain.
        let w = report
            .chains
            .iter()
            .map(|c| c.chain.len())
            .max()
            .unwrap_or(0)
            .max(9);
        let mut t = format!(
            "rsspp nf on veth, workers on CPUs {} and the sender on CPU {}: {} frames of {} UDP flows a run, {} rounds (medians)\n\
             {:<w$} variant  ns/packet  packets/s per core  kernel ns/packet  received/s  received\n",
            args.cpus, report.sender_cpu, report.frames, report.flows, report.rounds, "chain"
        );
        let mut row = |chain: &str, v: &rsspp_runtime::bench::VariantReport| {
            t += &format!(
                "{:<w$} {:<8} {:>9.1} {:>19.0} {:>17.1} {:>11.0} {:>8.1}%\n",
                chain,
                v.variant,
                v.ns_per_packet,
                v.pps_per_core,
                v.sender_ns_per_packet,
                v.received_pps,
                v.received_share * 100.0
            );
        };
        row("-", &report.kernel);
        if let Some(tcpdump) = &report.tcpdump {
            row("-", tcpdump);
        }
        for c in &report.chains {
            for v in &c.variants {
                row(&c.chain, v);
            }
        }
        for c in &report.chains {
            t += &format!(
                "{}: per-bucket tables {:.2}x the shared table's packets/s per core (the paper: 1.2x); \
                 RSS++ (rebalancing, --churn {}) costs {:.2}x the static table; {:.2}x the plain kernel reader's CPU a packet\n",
                c.chain, c.per_bucket_speedup, report.churn, c.rsspp_cost_ratio, c.vs_kernel_ratio
            );
            if let Some(r) = c.vs_tcpdump_ratio {
                t += &format!("{}: {r:.2}x tcpdump's CPU a packet\n", c.chain);
            }
        }
        t += "ns/packet: CPU time of the receiving threads (workers, or the plain reader) over the\n\
              frames they took. kernel: one plain TPACKET_V3 socket read by one thread, counting frames.\n\
              tcpdump: Debian's tcpdump on the same veth, headers to /dev/null (its own frame count).\n\
              static: per-bucket tables, --no-balance; shared: --table shared; rsspp: rebalancing and\n\
              --churn. kernel ns/packet: the sender thread's CPU per frame sent (transmit, the veth's\n\
              receive, AF_PACKET delivery, the fanout program).\n";
        if report.tcpdump.is_none() {
            t += "tcpdump is not installed: its baseline was left out (apt-get install tcpdump).\n";
        }
        if let Some(path) = &args.cost_out {
            t += &format!("cost model written to {}\n", path.display());
        }
        t
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(CliError::output)
}

/// One table size, as printed.
#[derive(Debug, Serialize)]
struct DaemonRow {
    reta_size: usize,
    rounds: usize,
    moves: u64,
    round_us: f64,
    worst_round_us: f64,
    mean_round_us: f64,
    rebalance_us: f64,
    cpu_percent_at_10hz: f64,
    scrape_bytes: usize,
    scrape_us: f64,
}

/// `rsspp bench daemon`.
fn run_daemon(args: &BenchDaemonArgs) -> Result<(), CliError> {
    for &size in &args.reta_sizes {
        CliError::check_table_size("--reta-sizes", size)?;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(CliError::Invalid(
            "rsspp bench daemon needs root: it loads the XDP programs".into(),
        ));
    }
    if args.rounds == 0 || args.pps == 0 {
        return Err(CliError::Invalid(
            "--rounds and --pps must be at least 1".into(),
        ));
    }
    let bucket_metrics = match args.bucket_metrics.as_deref() {
        None => None,
        Some("on") => Some(true),
        Some("off") => Some(false),
        Some(other) => {
            return Err(CliError::Invalid(format!(
                "--bucket-metrics is on or off, not {other:?}"
            )))
        }
    };
    let mut rows = Vec::new();
    for &size in &args.reta_sizes {
        let c = rsspp_linux::bench_daemon::measure(size, args.rounds, args.pps, bucket_metrics)?;
        rows.push(DaemonRow {
            reta_size: c.reta_size,
            rounds: c.rounds,
            moves: c.moves,
            round_us: c.per_round.as_secs_f64() * 1e6,
            worst_round_us: c.worst_round.as_secs_f64() * 1e6,
            mean_round_us: c.mean_round.as_secs_f64() * 1e6,
            rebalance_us: c.per_solve.as_secs_f64() * 1e6,
            cpu_percent_at_10hz: c.percent_at_10hz,
            scrape_bytes: c.scrape_bytes,
            scrape_us: c.per_scrape.as_secs_f64() * 1e6,
        });
    }
    let text = if args.json {
        serde_json::to_string_pretty(&rows).expect("serialises") + "\n"
    } else {
        let mut t = format!(
            "The daemon's rounds ({} rounds a size, {} packets/s of skewed traffic; CPU time of the round's thread)\n\
             buckets  moves  round µs  rebalance µs  CPU % at 10 Hz  worst µs   mean µs  scrape bytes  scrape µs\n",
            args.rounds, args.pps
        );
        for r in &rows {
            t += &format!(
                "{:>7} {:>6} {:>9.1} {:>13.1} {:>15.3} {:>9.0} {:>9.1} {:>13} {:>10.1}\n",
                r.reta_size,
                r.moves,
                r.round_us,
                r.rebalance_us,
                r.cpu_percent_at_10hz,
                r.worst_round_us,
                r.mean_round_us,
                r.scrape_bytes,
                r.scrape_us
            );
        }
        t += "A round: read the counters, the CPUMAP threads' busy time, rebalance, write the\n\
              moved buckets, fill the metrics. Round, rebalance and CPU %: the median round (the\n\
              steady state); worst: the costliest (the first, which moves the most); mean: over\n\
              the run. A scrape renders /metrics (per scrape, not per round).\n";
        t
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(CliError::output)
}

/// CPU time of the calling thread, nanoseconds (Linux: the first field of
/// `/proc/thread-self/schedstat`), if available.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// `rsspp bench state`: runs both variants and prints the summary or JSON.
fn run_state(args: &BenchStateArgs) -> Result<(), CliError> {
    CliError::check_table_size("--buckets", args.buckets)?;
    let config = BenchStateConfig {
        seconds: args.seconds,
        flows: args.flows,
        workers: args.workers,
        change_interval_ms: args.change_interval_ms,
        moves_per_change: args.moves_per_change,
        buckets: args.buckets,
        stripes: args.stripes,
        batch: args.batch,
        seed: args.seed,
        ring: args.ring,
        rounds: args.rounds,
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.workers > cpus {
        // The workers wait for the slowest (the ring bound): with more of
        // them than CPUs they take turns, and the run lasts far longer
        // than --seconds.
        tracing::warn!(
            workers = args.workers,
            cpus,
            "more workers than CPUs: the threads take turns, the run lasts much longer than \
             --seconds and the rates say little"
        );
    }
    let start = Instant::now();
    let now = move || start.elapsed().as_nanos() as u64;
    let clocks = ReplayClocks {
        now: &now,
        thread_cpu: &thread_cpu_ns,
    };
    let report = state::measure(&config, clocks).map_err(|e| match e {
        BenchStateError::NotPositive(setting) => {
            let (flag, value) = match setting {
                Positive::Workers => ("--workers", args.workers.to_string()),
                Positive::Flows => ("--flows", args.flows.to_string()),
                Positive::Seconds => ("--seconds", args.seconds.to_string()),
                Positive::Stripes => ("--stripes", args.stripes.to_string()),
                Positive::Batch => ("--batch", args.batch.to_string()),
                Positive::Ring => ("--ring", args.ring.to_string()),
                Positive::Rounds => ("--rounds", args.rounds.to_string()),
            };
            CliError::OutOfRange {
                flag,
                expected: "positive".into(),
                value,
            }
        }
        other => CliError::BenchState(other),
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).map_err(|e| CliError::output(e.into()))?;
        return writeln!(out).map_err(CliError::output);
    }
    print_state(&mut out, &report, args.seconds).map_err(CliError::output)
}

fn print_state(
    out: &mut impl Write,
    report: &BenchStateReport,
    seconds: f64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{} workers, {} flows, {} buckets moved every {} ms, {:.1} s per variant in {} rounds",
        report.workers,
        report.flows,
        report.moves_per_change,
        report.change_interval_ms,
        seconds,
        report.rounds
    )?;
    writeln!(
        out,
        "{:<14} {:>12} {:>14} {:>10} {:>12} {:>8} {:>8}",
        "", "packets/s", "per core-sec", "reordered", "lost states", "moves", "parked"
    )?;
    for (name, v) in [
        ("per-bucket", &report.per_bucket),
        ("shared table", &report.shared),
    ] {
        writeln!(
            out,
            "{:<14} {:>12.0} {:>14.0} {:>10} {:>12} {:>8} {:>8}",
            name,
            v.pps,
            v.pps_per_core,
            v.reordered,
            v.lost_states + v.duplicated_states,
            v.migrations,
            v.parked
        )?;
    }
    let rounds: Vec<String> = report
        .round_ratios
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect();
    writeln!(
        out,
        "per-bucket / shared: {:.2}x packets/s (median; rounds {}), {:.2}x per core-second",
        report.ratio,
        rounds.join(" "),
        report.ratio_per_core
    )
}

fn run_balance(args: &BenchBalanceArgs) -> Result<(), CliError> {
    if args.seeds == 0 || args.rounds == 0 {
        return Err(CliError::Invalid(
            "--seeds and --rounds must be at least 1".into(),
        ));
    }
    let results: Vec<ShapeResult> = synthetic::QUALITY_SHAPES
        .iter()
        .map(|&(c, b)| {
            tracing::info!(cores = c, buckets = b, "benchmarking");
            run_shape(c, b, args)
        })
        .collect();
    let text = if args.json {
        serde_json::to_string_pretty(&results).expect("serialises") + "\n"
    } else {
        let mut t = String::from(
            "cores × buckets  cases  makespan/optimum        imbalance (non-eleph.)  moved    rounds  first round  converged\n\
             \x20                       static → balanced       static → balanced       (table)  (max)   (median µs)  (median µs)\n",
        );
        for r in &results {
            t += &format!(
                "{:>5} × {:<5}    {:>5}  {:>6.3} → {:<6.4}         {:>6.1}% → {:<5.2}%        {:>5.1}%   {:>5}   {:>10.1}   {:>9}\n",
                r.cores,
                r.buckets,
                r.cases,
                r.static_makespan_ratio,
                r.makespan_ratio,
                r.static_imbalance * 100.0,
                r.imbalance * 100.0,
                r.moved_fraction * 100.0,
                r.max_rounds,
                r.first_round_us_median,
                r.converged_round_us_median
                    .map_or_else(|| "n/a".to_string(), |us| format!("{us:.1}"))
            );
        }
        t += "makespan/optimum: most loaded core over max(heaviest bucket, mean load), the worst case of each shape;\n\
              imbalance: (max - min) / min of the cores not holding an isolated elephant, worst case;\n\
              converged: a round that moved nothing (n/a: none within --rounds).\n";
        t
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(CliError::output)
}
