//! `rsspp manpages DIR` and `rsspp completions SHELL`: written from the
//! parser's own clap definitions, so they say what the binary accepts.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use clap_complete::Shell;

use crate::error::CliError;

/// Arguments of `rsspp manpages`.
#[derive(Debug, Args)]
pub struct ManpagesArgs {
    /// The directory to write rsspp.1, rsspp-run.1, rsspp-nic-show.1, … into
    /// (made if missing).
    dir: PathBuf,
}

/// Arguments of `rsspp completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: Shell,
}

/// Writes one page for `rsspp` and one for each subcommand, nested ones
/// included (`rsspp-nic-show.1`).
pub fn manpages(args: &ManpagesArgs, cli: clap::Command) -> Result<(), CliError> {
    let io = |path: &Path, source| CliError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&args.dir).map_err(|e| io(&args.dir, e))?;
    let mut cli = cli;
    cli.build();
    let mut written = 0;
    write_pages(&cli, "rsspp", &args.dir, &mut written).map_err(|(p, e)| io(&p, e))?;
    let mut out = std::io::stdout();
    writeln!(out, "wrote {written} man pages into {}", args.dir.display()).map_err(CliError::output)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut usize,
) -> Result<(), (PathBuf, std::io::Error)> {
    let page = cmd
        .clone()
        .name(name.to_string())
        .bin_name(name.replace('-', " "));
    let mut text = Vec::new();
    let path = dir.join(format!("{name}.1"));
    clap_mangen::Man::new(page)
        .render(&mut text)
        .map_err(|e| (path.clone(), e))?;
    std::fs::write(&path, text).map_err(|e| (path.clone(), e))?;
    *written += 1;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

/// Prints the completion script of `shell` to standard output.
pub fn completions(args: &CompletionsArgs, cli: clap::Command) -> Result<(), CliError> {
    let mut cli = cli;
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "rsspp", &mut script);
    let mut out = std::io::stdout();
    out.write_all(&script).map_err(CliError::output)
}
