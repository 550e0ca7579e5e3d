//! `rsspp`: load- and state-aware receive-side scaling (RSS++).

mod atomic;
mod bench_xdp;
mod cmd;
mod config;
mod error;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::error::CliError;

/// Load- and state-aware receive-side scaling (RSS++): hashing, rebalancing
/// and scaling the cores that serve a NIC's indirection table.
#[derive(Debug, Parser)]
#[command(name = "rsspp", version, propagate_version = true)]
struct Cli {
    /// More log output (-v: debug, -vv: trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the RSS++ rebalancer on a built-in skewed workload: per-core load
    /// under the static table, then after each rebalancing round.
    Demo(cmd::demo::DemoArgs),
    /// Compute the Toeplitz RSS hash of a flow (and its bucket), as a NIC does.
    Hash(cmd::hash::HashArgs),
    /// Run one rebalancing round on a JSON description of the table, the
    /// per-bucket packet counts and the per-core loads; print the new table.
    Balance(cmd::balance::BalanceArgs),
    /// Benchmarks behind the README's figures.
    Bench(cmd::bench::BenchArgs),
    /// Packet traces: generate synthetic pcaps, analyse captures.
    Trace(cmd::trace::TraceArgs),
    /// Compare load-balancing methods (RSS, RSS++, Sprayer, software
    /// dispatching, Metron, Affinity-Accept, oRSS) in the simulator.
    Compare(cmd::compare::CompareArgs),
    /// Reproduce the papers' figures in the simulator (RSS++ Figures 10-12,
    /// 15, 16; Reframer's, Affinity-Accept's, oRSS's): SVG, CSV and caption
    /// each, and an index.
    Figures(cmd::figures::FiguresArgs),
    /// The RSS++ daemon: count per bucket with XDP, rebalance ten times a
    /// second, steer through a CPUMAP (software) or the NIC's table
    /// (hardware); metrics at /metrics.
    Run(cmd::run::RunArgs),
    /// Run network functions on worker threads pinned to CPUs, the traffic
    /// spread per RSS bucket by an eBPF fanout program, the per-flow state
    /// moving with its bucket as RSS++ rebalances (AF_PACKET).
    Nf(cmd::nf::NfArgs),
    /// Reframer as a bump in the wire: hold each flow's frames for a few
    /// microseconds and send them on flow by flow (higher spatial locality
    /// for the servers behind).
    Reframe(cmd::reframe::ReframeArgs),
    /// A small HTTP/1.1 server with Affinity-Accept on stock Linux: one
    /// listener and pinned worker per CPU, an sk_reuseport program putting
    /// each connection on its bucket's CPU, busy cores' connections stolen.
    Serve(cmd::serve::ServeArgs),
    /// Live view of a running daemon (`rsspp run`): per-CPU load as a
    /// heatmap over time, packet rates, imbalance ((max - min) / min of the
    /// per-CPU packet rates, %), and the current table.
    Top(cmd::top::TopArgs),
    /// A NIC's RSS indirection table through ethtool: show it, write one.
    Nic(cmd::nic::NicArgs),
    /// What rsspp has attached where: interface, program, mode, table
    /// size, since when, kept (pinned) or held by a running daemon.
    Status(cmd::status::StatusArgs),
    /// Remove rsspp's XDP program from an interface (a kept one, or one a
    /// killed daemon left), with its pins; refuses another program.
    Detach(cmd::status::DetachArgs),
    /// Write the man pages (rsspp.1 and one per subcommand) into a directory.
    Manpages(cmd::docs::ManpagesArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or
    /// PowerShell.
    Completions(cmd::docs::CompletionsArgs),
}

/// Logs go to stderr: warnings by default, and for the daemon also what
/// it does (every bucket it moves), which is its log.
fn init_logging(verbose: u8, daemon: bool) {
    let default = match (verbose, daemon) {
        (0, false) => "warn",
        (0, true) => "info",
        (1, _) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a person at a terminal: a file, a pipe or journald
    // gets plain text. A log line that cannot be written (the reader of a
    // pipe gone) is dropped: the daemon goes on, and still detaches.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .init();
}

/// Standard error, ignoring write errors. tracing-subscriber's own writer
/// reports a failed write with `eprintln!`, which panics when standard
/// error is a pipe nobody reads any more (EPIPE; Rust ignores SIGPIPE, so
/// the write fails instead of killing the process): a daemon started as
/// `rsspp run ... 2>&1 | head -1` would abort with its program attached.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Ignores SIGPIPE, as Rust's runtime already does before `main`; said
/// here because the daemon relies on it: a write to a closed pipe then
/// fails with EPIPE (and is dropped) instead of killing the process.
fn ignore_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no
    // preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

fn main() -> ExitCode {
    ignore_sigpipe();
    // `rsspp run --config FILE`: the file's options before the typed ones.
    let argv = match config::expand(std::env::args_os().collect()) {
        Ok(argv) => argv,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "rsspp: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cli = Cli::parse_from(argv);
    init_logging(
        cli.verbose,
        matches!(
            cli.command,
            Command::Run(_) | Command::Nf(_) | Command::Reframe(_) | Command::Serve(_)
        ),
    );
    let result: Result<(), CliError> = match &cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Hash(args) => cmd::hash::run(args),
        Command::Balance(args) => cmd::balance::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Trace(args) => cmd::trace::run(args),
        Command::Compare(args) => cmd::compare::run_compare(args),
        Command::Figures(args) => cmd::figures::run(args),
        Command::Top(args) => cmd::top::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Nf(args) => cmd::nf::run(args),
        Command::Reframe(args) => cmd::reframe::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Nic(args) => cmd::nic::run(args),
        Command::Status(args) => cmd::status::status(args),
        Command::Detach(args) => cmd::status::detach(args),
        Command::Manpages(args) => cmd::docs::manpages(args, Cli::command()),
        Command::Completions(args) => cmd::docs::completions(args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when standard error is a closed pipe.
            let _ = writeln!(std::io::stderr(), "rsspp: error: {e}");
            ExitCode::FAILURE
        }
    }
}
