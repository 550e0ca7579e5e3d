//! Temporary wiring on the `state` branch (the lead owns main.rs).

mod bench_state;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "rsspp")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
}

#[derive(Debug, clap::Subcommand)]
enum Bench {
    /// Per-bucket flow tables against one shared table, under rewrites.
    State(bench_state::BenchStateArgs),
}

fn main() -> std::process::ExitCode {
    let Command::Bench {
        what: Bench::State(args),
    } = Cli::parse().command;
    match bench_state::run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsspp: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
