//! `rsspp figures DIR`: every figure of the papers the simulator
//! reproduces, each from the `rsspp compare` runs it needs, with an index.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use rsspp_sim::paper::{experiments_for, run_experiment, FigureId, PaperProgress, Scale};
use rsspp_sim::report::{self, PaperFigure};

use crate::atomic;
use crate::error::CliError;

/// Arguments of `rsspp figures`.
#[derive(Debug, Args)]
#[command(after_help = "Figures (--only takes these names):\n  \
rsspp-fig10          RSS++ Figure 10: drops and tail latency at 79, 89, 93% load, RSS vs RSS++\n  \
rsspp-fig11          RSS++ Figure 11: cores in use along a ramp, RSS vs auto-scaling RSS++ and Metron\n  \
rsspp-fig12          RSS++ Figure 12: load imbalance of every method\n  \
rsspp-fig15          RSS++ Figure 15: reordering and cycles per packet against the number of flows\n  \
rsspp-fig16          RSS++ Figure 16: cycles per packet against cores, per-bucket vs shared table\n  \
reframer-locality    Reframer Figure 12: spatial locality factor against the buffering time\n  \
reframer-throughput  Reframer Figure 12: cycles per packet and latency against the buffering time\n  \
affinity-accept      Affinity-Accept: latency on short connections with skewed service, vs RSS\n  \
orss                 oRSS: drops and latency tail with elephants, vs RSS and RSS++\n\n\
Each figure is DIR/NAME.svg (standalone), DIR/NAME.csv (the numbers drawn) and DIR/NAME.txt\n\
(the paper's figure and numbers, this run's, and the rsspp compare commands that reproduce\n\
it); DIR/index.md lists them all, the paper's result beside this run's.\n\n\
Examples:\n  rsspp figures figures/\n  rsspp figures --only rsspp-fig15,rsspp-fig16 out/\n  \
rsspp figures --quick /tmp/figures")]
pub struct FiguresArgs {
    /// Directory to write the figures and index.md into (created if
    /// missing; files of the same names are replaced).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Only these figures, comma-separated (names below).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    only: Option<Vec<String>>,
    /// Short runs of the same experiments (a second or less each): the
    /// shapes, not the papers' numbers.
    #[arg(long)]
    quick: bool,
}

/// The figures `--only` names (all without it), in the papers' order.
fn selected(only: Option<&[String]>) -> Result<Vec<FigureId>, CliError> {
    let Some(list) = only else {
        return Ok(FigureId::ALL.to_vec());
    };
    let mut ids = Vec::new();
    for name in list {
        let name = name.trim();
        let id = FigureId::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = FigureId::ALL.iter().map(|f| f.name()).collect();
            CliError::Invalid(format!(
                "--only {name}: no such figure (figures: {})",
                known.join(", ")
            ))
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        return Err(CliError::Invalid("--only needs at least one figure".into()));
    }
    ids.sort();
    Ok(ids)
}

fn create_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::Invalid(format!("{}: cannot create it: {e}", dir.display())))
}

/// Runs `rsspp figures`.
pub fn run(args: &FiguresArgs) -> Result<(), CliError> {
    let ids = selected(args.only.as_deref())?;
    let scale = if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    // A directory that cannot be made fails before minutes of simulation.
    create_dir(&args.dir)?;
    atomic::check_destination(&args.dir.join("index.md"))?;
    let started = Instant::now();
    let progress = |p: PaperProgress| match p {
        PaperProgress::Started { command, .. } => eprintln!("running: {command}"),
        PaperProgress::Done { experiment, wall_s } => {
            eprintln!("done: {experiment:?} ({wall_s:.1} s)")
        }
    };
    let mut experiments = Vec::new();
    let mut figures: Vec<PaperFigure> = Vec::new();
    for experiment in experiments_for(&ids) {
        let e = run_experiment(experiment, scale, &progress)?;
        for &id in ids.iter().filter(|f| f.experiment() == experiment) {
            let f = report::paper_figure(id, &e);
            for (ext, text) in [
                ("svg", &f.figure.svg),
                ("csv", &f.figure.csv),
                ("txt", &f.figure.caption),
            ] {
                atomic::write(
                    &args.dir.join(format!("{}.{ext}", f.figure.stem)),
                    text.as_bytes(),
                )?;
            }
            figures.push(f);
        }
        experiments.push(e);
    }
    let index = args.dir.join("index.md");
    atomic::write(
        &index,
        report::index(&figures, &experiments, scale).as_bytes(),
    )?;
    let mut out = std::io::stdout().lock();
    for f in &figures {
        writeln!(out, "{:<20} {}", f.figure.stem, f.this_run).map_err(CliError::output)?;
    }
    writeln!(
        out,
        "figures: {} ({} figures, {} files); index: {}",
        args.dir.display(),
        figures.len(),
        figures.len() * 3 + 1,
        index.display()
    )
    .map_err(CliError::output)?;
    writeln!(
        out,
        "({:.1} s of wall time)",
        started.elapsed().as_secs_f64()
    )
    .map_err(CliError::output)?;
    Ok(())
}
