//! `rsspp bench`: measurements that back the README's figures.

use std::time::Instant;

use clap::{Args, Subcommand};
use rsspp_core::balance::synthetic::{self, makespan_lower_bound};
use rsspp_core::{rebalance, BalanceConfig, IndirectionTable, LoadReport};
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
    State(crate::bench_state::BenchStateArgs),
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
    /// Worst (max − min) / mean over the cores without an isolated elephant, static table.
    static_spread: f64,
    /// Same after rebalancing.
    spread: f64,
    /// Mean buckets moved in all rounds, as a fraction of the table.
    moved_fraction: f64,
    /// Most rounds with moves before a round moved nothing.
    max_rounds: usize,
    /// Median time of the first (most skewed) round, µs.
    first_round_us_median: f64,
    /// Median time of a round on the converged state, µs.
    converged_round_us_median: f64,
}

const SHAPES: [(usize, usize); 8] = [
    (4, 128),
    (8, 128),
    (8, 512),
    (16, 512),
    (16, 4096),
    (32, 1024),
    (64, 2048),
    (128, 4096),
];

fn spread(loads: &[f64]) -> f64 {
    let max = loads.iter().copied().fold(0.0, f64::max);
    let min = loads.iter().copied().fold(f64::MAX, f64::min);
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    if mean > 0.0 {
        (max - min) / mean
    } else {
        0.0
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn timed_round(
    table: &IndirectionTable,
    demand: &[f64],
    cores: usize,
    config: &BalanceConfig,
) -> (rsspp_core::BalanceOutcome, f64) {
    let m = synthetic::measure(table, demand, cores);
    let report = LoadReport {
        table,
        bucket_packets: &m.bucket_packets,
        core_load: &m.core_load,
    };
    // Best of three: the machine is shared and a single sample is noisy.
    let mut best = f64::MAX;
    let mut outcome = None;
    for _ in 0..3 {
        let started = Instant::now();
        let out = rebalance(&report, config).expect("synthetic input is valid");
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
        static_spread: 0.0,
        spread: 0.0,
        moved_fraction: 0.0,
        max_rounds: 0,
        first_round_us_median: 0.0,
        converged_round_us_median: 0.0,
    };
    let (mut first, mut converged) = (Vec::new(), Vec::new());
    for seed in 0..args.seeds {
        for average in [0.5, 0.7, 0.9] {
            for kind in 0..3 {
                let s = seed * 1000 + (average * 10.0) as u64 * 10 + kind;
                let demand = match kind {
                    0 => synthetic::zipf(s, buckets, cores, 0.8, average),
                    1 => synthetic::zipf(s, buckets, cores, 1.1, average),
                    _ => synthetic::elephants(s, buckets, cores, 1 + cores / 8, 0.3, average),
                };
                let bound = makespan_lower_bound(&demand, cores);
                let mut table = IndirectionTable::equal(buckets, cores).expect("valid shape");
                let before = synthetic::measure(&table, &demand, cores).true_load;
                let (mut moves, mut rounds, mut isolated) = (0, 0, Vec::new());
                for round in 0..args.rounds {
                    let (out, us) = timed_round(&table, &demand, cores, &config);
                    if round == 0 {
                        first.push(us);
                    }
                    if out.plan.is_empty() {
                        converged.push(us);
                        break;
                    }
                    rounds += 1;
                    moves += out.plan.moves.len();
                    isolated = out.isolated_buckets.clone();
                    table = out.table;
                }
                let after = synthetic::measure(&table, &demand, cores).true_load;
                let elephant_cores: Vec<usize> =
                    isolated.iter().map(|&b| table.core_of(b)).collect();
                let others = |l: &[f64]| -> Vec<f64> {
                    (0..cores)
                        .filter(|c| !elephant_cores.contains(c))
                        .map(|c| l[c])
                        .collect()
                };
                let max = |l: &[f64]| l.iter().copied().fold(0.0, f64::max);
                r.cases += 1;
                r.static_makespan_ratio = r.static_makespan_ratio.max(max(&before) / bound);
                r.makespan_ratio = r.makespan_ratio.max(max(&after) / bound);
                r.static_spread = r.static_spread.max(spread(&others(&before)));
                r.spread = r.spread.max(spread(&others(&after)));
                r.moved_fraction += moves as f64 / buckets as f64;
                r.max_rounds = r.max_rounds.max(rounds);
            }
        }
    }
    r.moved_fraction /= r.cases as f64;
    r.first_round_us_median = median(first);
    r.converged_round_us_median = if converged.is_empty() {
        f64::NAN
    } else {
        median(converged)
    };
    r
}

/// Runs `rsspp bench`.
pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    match &args.what {
        BenchCommand::Balance(a) => run_balance(a),
        BenchCommand::State(a) => crate::bench_state::run(a).map_err(CliError::from),
    }
}

fn run_balance(args: &BenchBalanceArgs) -> Result<(), CliError> {
    if args.seeds == 0 || args.rounds == 0 {
        return Err(CliError::Invalid(
            "--seeds and --rounds must be at least 1".into(),
        ));
    }
    let results: Vec<ShapeResult> = SHAPES
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
            "cores × buckets  cases  makespan/optimum        spread (non-elephant)   moved    rounds  first round  converged\n\
             \x20                       static → balanced       static → balanced       (table)  (max)   (median µs)  (median µs)\n",
        );
        for r in &results {
            t += &format!(
                "{:>5} × {:<5}    {:>5}  {:>6.3} → {:<6.4}         {:>6.1}% → {:<5.2}%        {:>5.1}%   {:>5}   {:>10.1}   {:>9.1}\n",
                r.cores,
                r.buckets,
                r.cases,
                r.static_makespan_ratio,
                r.makespan_ratio,
                r.static_spread * 100.0,
                r.spread * 100.0,
                r.moved_fraction * 100.0,
                r.max_rounds,
                r.first_round_us_median,
                r.converged_round_us_median
            );
        }
        t += "makespan/optimum: most loaded core over max(heaviest bucket, mean load), the worst case of each shape;\n\
              spread: (max - min) / mean of the cores not holding an isolated elephant, worst case.\n";
        t
    };
    use std::io::Write as _;
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(CliError::output)
}
