//! `rsspp balance`: one rebalancing round on measurements given as JSON.

use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use rsspp_core::{rebalance, BalanceConfig, BalanceOutcome, IndirectionTable, LoadReport};
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// Arguments of `rsspp balance`.
#[derive(Debug, Args)]
#[command(
    after_help = "Input (JSON): {\"reta\": [core of each bucket], \"bucket_packets\": \
[packets of each bucket], \"core_load\": [load in [0,1] of core 0..N-1]}\n\
Output (JSON): {\"reta\": [new table], \"moves\": [{\"bucket\", \"from\", \"to\"}], \"solve_us\", \
\"scaling\", \"active_cores\", \"load_before\", \"load_after\", \"isolated_buckets\", \"level\", \"steps\"}\n\n\
Cores named in core_load but owning no bucket are idle; --autoscale may add one of them.\n\n\
Example:\n  echo '{\"reta\":[0,0,0,1,...],\"bucket_packets\":[...],\"core_load\":[0.9,0.2]}' | rsspp balance --input -"
)]
pub struct BalanceArgs {
    /// The measurements: a JSON file, or '-' for standard input.
    #[arg(long, short, value_name = "FILE.json|-")]
    input: PathBuf,
    /// Average load above which --autoscale adds a core.
    #[arg(long, default_value_t = 0.8, value_name = "LOAD")]
    target_load: f64,
    /// Add a core when the average load exceeds the target; remove one when
    /// the others have a whole core of headroom (RSS++ §3.2).
    #[arg(long)]
    autoscale: bool,
    /// A core within this relative distance of the target level is balanced.
    #[arg(long, default_value_t = BalanceConfig::default().tolerance, value_name = "FRACTION")]
    tolerance: f64,
    /// α: cost of one bucket move in units of relative squared imbalance.
    #[arg(long, default_value_t = BalanceConfig::default().migration_cost, value_name = "ALPHA")]
    migration_cost: f64,
    /// Pretty-print the output.
    #[arg(long)]
    pretty: bool,
}

/// The input document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    reta: Vec<usize>,
    bucket_packets: Vec<u64>,
    core_load: Vec<f64>,
}

/// The output document.
#[derive(Debug, Serialize)]
struct Output<'a> {
    reta: &'a [usize],
    moves: &'a [rsspp_core::BucketMove],
    solve_us: f64,
    scaling: rsspp_core::ScalingAction,
    active_cores: &'a [usize],
    load_before: &'a [f64],
    load_after: &'a [f64],
    isolated_buckets: &'a [usize],
    level: f64,
    steps: usize,
}

fn read_input(path: &PathBuf) -> Result<(String, String), CliError> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| CliError::Io {
                path: "stdin".into(),
                source,
            })?;
        Ok(("stdin".into(), text))
    } else {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
            path: origin.clone(),
            source,
        })?;
        Ok((origin, text))
    }
}

/// Runs `rsspp balance`.
pub fn run(args: &BalanceArgs) -> Result<(), CliError> {
    let (origin, text) = read_input(&args.input)?;
    let input: Input =
        serde_json::from_str(&text).map_err(|source| CliError::Json { origin, source })?;
    if input.core_load.is_empty() {
        return Err(rsspp_core::BalanceError::NoCores.into());
    }
    let table = IndirectionTable::from_entries(input.reta, input.core_load.len())?;
    let config = BalanceConfig {
        target_load: args.target_load,
        autoscale: args.autoscale,
        tolerance: args.tolerance,
        migration_cost: args.migration_cost,
        ..BalanceConfig::default()
    };
    let report = LoadReport {
        table: &table,
        bucket_packets: &input.bucket_packets,
        core_load: &input.core_load,
    };
    let started = Instant::now();
    let outcome: BalanceOutcome = rebalance(&report, &config)?;
    let solve_us = started.elapsed().as_secs_f64() * 1e6;
    tracing::debug!(
        moves = outcome.plan.moves.len(),
        solve_us,
        "rebalanced: {}",
        outcome.plan
    );
    let output = Output {
        reta: outcome.table.entries(),
        moves: &outcome.plan.moves,
        solve_us,
        scaling: outcome.scaling,
        active_cores: &outcome.active_cores,
        load_before: &outcome.load_before,
        load_after: &outcome.load_after,
        isolated_buckets: &outcome.isolated_buckets,
        level: outcome.level,
        steps: outcome.steps,
    };
    let json = if args.pretty {
        serde_json::to_string_pretty(&output)
    } else {
        serde_json::to_string(&output)
    }
    .expect("the output serialises");
    use std::io::Write;
    writeln!(std::io::stdout(), "{json}").map_err(CliError::output)
}
