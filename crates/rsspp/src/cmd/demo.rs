//! `rsspp demo`: the rebalancer on a built-in skewed workload.
//!
//! Bucket demands follow a Zipf law (a few buckets carry most of the
//! traffic, as on real links) and two elephant flows land on the same core.
//! Each round "measures" like the data path does: packets counted per bucket
//! on arrival, core loads capped at 1.0 (a saturated core cannot report its
//! true demand), then runs the same control loop as the daemon.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use rsspp_core::balance::synthetic::{measure, SplitMix64};
use rsspp_core::measure::imbalance_ratio;
use rsspp_core::{BalanceConfig, ControlConfig, ControlLoop, IndirectionTable, ScalingAction};

use crate::error::CliError;

/// `writeln!` into the report string (writing to a `String` cannot fail).
macro_rules! outln {
    ($o:expr) => { $o.push('\n') };
    ($o:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        writeln!($o, $($arg)*).expect("writing to a String")
    }};
}

/// Arguments of `rsspp demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Cores serving the table.
    #[arg(long, default_value_t = 8)]
    cores: usize,
    /// Indirection table size (a power of two from 64 to 65536).
    #[arg(long, default_value_t = 128)]
    buckets: usize,
    /// Average demand per core, in cores (0.7 = 70%).
    #[arg(long, default_value_t = 0.7)]
    load: f64,
    /// Rebalancing rounds to run.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Wall-clock time between two rounds, each printed as it ends.
    /// Default: the control loop's own interval (100 ms) at a terminal, 0
    /// otherwise.
    #[arg(long, value_name = "MS")]
    pace_ms: Option<u64>,
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Let the loop add or remove cores (RSS++ §3.2); the workload then
    /// starts on half the cores.
    #[arg(long)]
    autoscale: bool,
}

/// Per-bucket demand: Zipf(0.9) in random order, plus two elephants placed
/// on buckets that the static table gives to the same core.
fn workload(args: &DemoArgs, first_cores: usize) -> Vec<f64> {
    let mut demand: Vec<f64> = (1..=args.buckets)
        .map(|r| 1.0 / (r as f64).powf(0.9))
        .collect();
    SplitMix64::new(args.seed).shuffle(&mut demand);
    // 25% of the demand in two elephants on buckets 0 and `first_cores`
    // (the same core under `equal`), 75% in the Zipf buckets.
    let total = args.load * args.cores as f64;
    demand[0] = 0.0;
    demand[first_cores] = 0.0;
    let light: f64 = demand.iter().sum();
    for d in &mut demand {
        *d *= 0.75 * total / light;
    }
    demand[0] = 0.15 * total;
    demand[first_cores] = 0.10 * total;
    demand
}

fn bar(load: f64) -> String {
    const WIDTH: f64 = 40.0;
    let cells = (load.min(1.0) * WIDTH).round() as usize;
    let over = ((load - 1.0).max(0.0) * WIDTH).round() as usize;
    format!(
        "{}{}{}",
        "█".repeat(cells),
        "░".repeat(WIDTH as usize - cells),
        "▓".repeat(over.min(40))
    )
}

/// The most loaded core's load, and the imbalance of the given cores.
fn summary(true_load: &[f64], active: &[usize]) -> (f64, f64) {
    let loads: Vec<f64> = active.iter().map(|&c| true_load[c]).collect();
    let max = loads.iter().cloned().fold(0.0, f64::max);
    (max, imbalance_ratio(&loads))
}

/// Writes what `o` holds to standard output at once (each round appears as
/// it ends) and empties it.
fn show(o: &mut String) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(o.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::output)?;
    o.clear();
    Ok(())
}

fn print_loads(o: &mut String, true_load: &[f64], active: &[usize]) {
    for (c, &l) in true_load.iter().enumerate() {
        let note = if !active.contains(&c) {
            "idle".to_string()
        } else if l > 1.0 {
            format!("saturated: reports 1.00, demand {l:.2}")
        } else {
            String::new()
        };
        outln!(o, "  core {c:>3}  {}  {l:>5.2}  {note}", bar(l));
    }
}

/// Runs `rsspp demo`.
pub fn run(args: &DemoArgs) -> Result<(), CliError> {
    if args.cores < 2 {
        return Err(CliError::Invalid(format!(
            "--cores {} : the demo needs at least 2 cores",
            args.cores
        )));
    }
    if !(args.load > 0.0 && args.load <= 1.0) {
        return Err(CliError::Invalid(format!(
            "--load {} is not in (0, 1]",
            args.load
        )));
    }
    let first_cores = if args.autoscale {
        (args.cores / 2).max(2)
    } else {
        args.cores
    };
    CliError::check_table_size("--buckets", args.buckets)?;
    let table = IndirectionTable::equal(args.buckets, first_cores)?;
    if args.buckets <= first_cores {
        return Err(CliError::Invalid(format!(
            "--buckets {} must be more than the {first_cores} cores",
            args.buckets
        )));
    }
    let demand = workload(args, first_cores);
    let config = ControlConfig {
        balance: BalanceConfig {
            autoscale: args.autoscale,
            ..BalanceConfig::default()
        },
        ..ControlConfig::default()
    };
    let mut table = table;
    let interval = config.interval;
    let mut ctl = ControlLoop::new(config);
    let mut o = String::new();

    outln!(
        o,
        "rsspp demo: {} cores, {}-bucket indirection table, average demand {:.2} per core (seed {})",
        args.cores, args.buckets, args.load, args.seed
    );
    outln!(o, "workload: Zipf(0.9) bucket loads plus two elephant flows on the same core; bars: demand (▓ = beyond the core's capacity)");
    outln!(o);
    let true_load = measure(&table, &demand, args.cores).true_load;
    let active = table.cores_in_use();
    outln!(
        o,
        "static table (like `ethtool -X IF equal {first_cores}`):"
    );
    print_loads(&mut o, &true_load, &active);
    show(&mut o)?;
    let (max_before, spread_before) = summary(&true_load, &active);
    let pace = match args.pace_ms {
        Some(ms) => Duration::from_millis(ms),
        None if std::io::stdout().is_terminal() => interval,
        None => Duration::ZERO,
    };

    let mut moved = 0;
    let mut isolated: Vec<usize> = Vec::new();
    let mut solve_total = Duration::ZERO;
    let mut now = Duration::ZERO;
    for round in 1..=args.rounds {
        std::thread::sleep(pace);
        let m = measure(&table, &demand, args.cores);
        let started = Instant::now();
        let tick = ctl.tick(now, &table, &m.bucket_packets, &m.core_load)?;
        let took = started.elapsed();
        if !tick.outcome.plan.is_empty() {
            table = tick.outcome.table.clone();
            ctl.commit()?;
        }
        let handed = tick.outcome.plan.to_string();
        solve_total += took;
        now += tick.next_interval;
        let out = &tick.outcome;
        moved += out.plan.moves.len();
        if !out.plan.is_empty() {
            isolated = out.isolated_buckets.clone();
        }
        outln!(o);
        if out.plan.is_empty() {
            outln!(
                o,
                "round {round}: balanced, nothing moves ({} µs)",
                took.as_micros()
            );
            show(&mut o)?;
            continue;
        }
        let scaling = match out.scaling {
            ScalingAction::Add(c) => format!(", core {c} added"),
            ScalingAction::Remove(c) => format!(", core {c} removed"),
            ScalingAction::NoSpareCore => ", no spare core to add".to_string(),
            ScalingAction::None => String::new(),
        };
        outln!(
            o,
            "round {round}: {} buckets moved in {} µs{}{scaling}",
            out.plan.moves.len(),
            took.as_micros(),
            match out.isolated_buckets.len() {
                0 => String::new(),
                n => format!(", {n} elephant bucket(s) isolated on their own core"),
            }
        );
        tracing::info!("plan applied: {handed}");
        let true_load = measure(&table, &demand, args.cores).true_load;
        print_loads(&mut o, &true_load, &out.active_cores);
        show(&mut o)?;
    }
    let true_load = measure(&table, &demand, args.cores).true_load;
    let active = table.cores_in_use();
    let (max_after, spread_after) = summary(&true_load, &active);
    let elephant_cores: Vec<usize> = isolated.iter().map(|&b| table.core_of(b)).collect();
    let others: Vec<usize> = active
        .iter()
        .copied()
        .filter(|c| !elephant_cores.contains(c))
        .collect();
    let (_, spread_others) = summary(&true_load, &others);
    outln!(o);
    outln!(
        o,
        "most loaded core: {max_before:.2} -> {max_after:.2}; imbalance (max - min) / min over active cores: {:.0}% -> {:.0}%",
        spread_before * 100.0,
        spread_after * 100.0
    );
    if !elephant_cores.is_empty() {
        outln!(
        o,
            "cores {elephant_cores:?} each serve one elephant bucket alone; the other {} cores: imbalance {:.1}%",
            others.len(),
            spread_others * 100.0
        );
    }
    outln!(
        o,
        "{moved} bucket moves in {} rounds, {} µs of solving in all; cores in use: {}",
        args.rounds,
        solve_total.as_micros(),
        active.len()
    );
    if !elephant_cores.is_empty() {
        outln!(o, "(a core holding an elephant flow cannot drop below that flow's demand: RSS++ moves buckets, not packets)");
    }
    show(&mut o)
}
