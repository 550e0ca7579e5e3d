//! `rsspp top`: a live view of a running daemon, from its `/metrics` — the
//! per-CPU load as a heatmap over time (the RSS++ paper's Figure 1, live),
//! the current rates, and the indirection table.
//!
//! The terminal is driven with crossterm (raw mode for single keys, the
//! alternate screen so the shell's scrollback is untouched, resize events),
//! and restored on every way out: a key, a signal, a lost daemon, a panic.

mod frame;
mod history;
mod scrape;

use std::io::{self, IsTerminal, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use crossterm::cursor::{Hide, MoveTo, Show};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{execute, queue};

use crate::error::CliError;
use frame::{draw, View};
use history::History;
use scrape::{fetch, DaemonSample};

/// Arguments of `rsspp top`.
#[derive(Debug, Args)]
#[command(after_help = "Keys: q, Esc or Ctrl-C quit.\n\n\
Examples:\n  rsspp top                       # the daemon on the default address\n  \
rsspp top --metrics-addr 10.0.0.5:9464 --interval-ms 250\n  \
rsspp top --once                # one plain frame (rates over one of the daemon's rounds), for scripts")]
pub struct TopArgs {
    /// Where the daemon serves its metrics (`rsspp run --metrics-addr`).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "HOST:PORT")]
    metrics_addr: String,
    /// Time between samples, in milliseconds.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    interval_ms: u64,
    /// Print one frame without escapes and exit. It samples until the
    /// daemon has run another round (at most twice its interval), so
    /// packet rates are shown.
    #[arg(long)]
    once: bool,
    /// With --once: print JSON instead of the frame: {"addr", "iface",
    /// "mode", "imbalance", "migrations", "rounds", "interval_seconds",
    /// "seconds" (between the two samples the rates come from, or null),
    /// "cpus": [{"cpu", "load", "packets_per_second", "drops_per_second",
    /// "buckets"}], "table": [CPU of each bucket]}; rates are null when
    /// unknown.
    #[arg(long, requires = "once")]
    json: bool,
}

/// What `rsspp top` can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The address does not parse or resolve.
    #[error("--metrics-addr {value:?}: {why}")]
    Address {
        /// What was given.
        value: String,
        /// Why it is not usable.
        why: String,
    },
    /// Nothing listens there.
    #[error(
        "no rsspp daemon answers at {addr} (connection refused): start one with \
         `rsspp run --iface IF --metrics-addr {addr}`, or point --metrics-addr at it"
    )]
    Refused {
        /// The address tried.
        addr: SocketAddr,
    },
    /// Connecting or reading failed otherwise (timeout, reset, unreachable).
    #[error("cannot read the metrics at {addr}: {source}")]
    Io {
        /// The address tried.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// An HTTP answer other than 200.
    #[error("{addr} answered {status:?} to GET /metrics")]
    Status {
        /// The address.
        addr: SocketAddr,
        /// The status line.
        status: String,
    },
    /// Not an HTTP response we can read.
    #[error("{addr} sent {what}")]
    Response {
        /// The address.
        addr: SocketAddr,
        /// What was wrong with it.
        what: String,
    },
    /// A line of the metrics that does not parse.
    #[error("line {line} of /metrics: {what}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// Metrics that parse but miss part of the table.
    #[error("/metrics: {what}")]
    Incomplete {
        /// What is missing.
        what: String,
    },
    /// Metrics without the daemon's names: another exporter.
    #[error("the metrics there have no {missing}: is this an rsspp daemon's --metrics-addr?")]
    NotRsspp {
        /// A metric every daemon exports.
        missing: &'static str,
    },
    /// The live view was asked for without a terminal.
    #[error("the live view needs a terminal on standard output; use --once to print one frame")]
    NotATerminal,
    /// The terminal could not be set up or written.
    #[error("cannot drive the terminal: {0}")]
    Terminal(io::Error),
}

impl TopError {
    /// The failure without advice, for the status line and for a daemon
    /// that was there a moment ago.
    fn brief(&self) -> String {
        match self {
            TopError::Refused { .. } => "connection refused".into(),
            TopError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        }
    }
}

/// Samples kept: more than the widest terminal shows.
const HISTORY: usize = 1024;

fn resolve(value: &str) -> Result<SocketAddr, TopError> {
    let bad = |why: String| TopError::Address {
        value: value.to_string(),
        why,
    };
    let mut addrs = value
        .to_socket_addrs()
        .map_err(|e| bad(format!("expected HOST:PORT ({e})")))?;
    addrs
        .next()
        .ok_or_else(|| bad("the name resolves to no address".into()))
}

/// Connect and read timeout of one scrape: the sampling interval, within
/// bounds, so a hung daemon cannot freeze the view for long.
fn scrape_timeout(every: Duration) -> Duration {
    every.clamp(Duration::from_millis(200), Duration::from_secs(2))
}

fn sample(addr: SocketAddr, every: Duration) -> Result<DaemonSample, TopError> {
    DaemonSample::parse(&fetch(addr, scrape_timeout(every))?)
}

/// Runs `rsspp top`.
pub fn run(args: &TopArgs) -> Result<(), CliError> {
    let addr = resolve(&args.metrics_addr)?;
    let every = Duration::from_millis(args.interval_ms);
    if args.once {
        return once(addr, &args.metrics_addr, every, args.json);
    }
    if !io::stdout().is_terminal() {
        return Err(TopError::NotATerminal.into());
    }
    // The first scrape happens before the screen is taken, so a wrong
    // address is reported on the ordinary terminal.
    let mut history = History::new(HISTORY);
    history.push(Instant::now(), sample(addr, every)?);
    live(addr, &args.metrics_addr, every, history).map_err(CliError::from)
}

/// One frame: a rate is the packets of one of the daemon's rounds over the
/// time between the first samples that saw it and the next one, so after
/// the first sample it samples every `every` until the daemon has run two
/// more rounds, or three of its intervals have passed (at least `every`,
/// at most 5 s: a daemon that runs no round shows no rates, not zeros).
fn once(addr: SocketAddr, shown: &str, every: Duration, json: bool) -> Result<(), CliError> {
    let mut history = History::new(2);
    let first = sample(addr, every)?;
    let wait = first
        .interval_seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(every, |s| Duration::from_secs_f64(3.0 * s.min(5.0)))
        .clamp(every, Duration::from_secs(5));
    let (start, mut rounds, mut new_rounds) = (Instant::now(), first.rounds, 0);
    history.push(start, first);
    while new_rounds < 2 && start.elapsed() < wait {
        std::thread::sleep(every);
        let next = sample(addr, every)?;
        if next.rounds != rounds {
            rounds = next.rounds;
            new_rounds += 1;
        }
        history.push(Instant::now(), next);
    }
    if json {
        let mut text = as_json(&history, shown).to_string();
        text.push('\n');
        let mut out = io::stdout().lock();
        return out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(CliError::output);
    }
    let frame = draw(
        &history,
        &View {
            addr: shown,
            every,
            // Wide enough for 32 buckets a row with CPU numbers up to 99.
            width: 102,
            height: None,
            colour: false,
            status: None,
        },
    );
    let mut out = io::stdout().lock();
    out.write_all(frame.plain().as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::output)
}

/// `--once --json`: the newest sample, with the rates of the last round.
fn as_json(history: &History, addr: &str) -> serde_json::Value {
    let latest = history.latest().expect("sampled at least once");
    let delta = history.delta();
    let cpus: Vec<serde_json::Value> = latest
        .cpus
        .iter()
        .map(|c| {
            serde_json::json!({
                "cpu": c.cpu,
                "load": c.load,
                "packets_per_second": delta.and_then(|d| d.rate(c.cpu)),
                "drops_per_second": delta.and_then(|d| d.drop_rate(c.cpu)),
                "buckets": latest.table.iter().filter(|&&t| t == c.cpu).count(),
            })
        })
        .collect();
    serde_json::json!({
        "addr": addr,
        "iface": latest.iface,
        "mode": latest.mode,
        "imbalance": latest.imbalance.is_finite().then_some(latest.imbalance),
        "migrations": latest.migrations,
        "rounds": latest.rounds,
        "interval_seconds": latest.interval_seconds,
        "seconds": delta.map(|d| d.seconds),
        "cpus": cpus,
        "table": latest.table,
    })
}

/// Owns the terminal while the live view runs and gives it back as it was,
/// whatever ends the view (drop runs on errors and on unwinding).
struct Screen;

impl Screen {
    fn enter() -> io::Result<Screen> {
        terminal::enable_raw_mode()?;
        // From here on, drop restores whatever part was set up.
        let screen = Screen;
        execute!(io::stdout(), EnterAlternateScreen, Hide)?;
        Ok(screen)
    }
}

/// Leaves the alternate screen and raw mode; harmless if already done.
fn restore_terminal() {
    let _ = execute!(io::stdout(), Show, LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Why the live loop stopped waiting.
enum Wake {
    Quit,
    Redraw,
    Sample,
}

/// What the terminal's input says.
enum Input {
    /// Bytes (or nothing) to read.
    Open,
    /// The terminal is gone (its window closed, its multiplexer killed).
    HungUp,
}

/// Waits up to `timeout` for input on the terminal. crossterm's own wait
/// would spin forever on a terminal that hung up (its reads return end of
/// file), ignoring its timeout and our signals: this one notices.
fn wait_input(timeout: Duration) -> Input {
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut fd, 1, ms) };
    if n > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Input::HungUp
    } else {
        Input::Open
    }
}

/// Waits until `until`, returning early for a quit key, a signal, a resize
/// or a terminal that went away.
fn wait(until: Instant, signalled: &AtomicBool) -> io::Result<Wake> {
    loop {
        if signalled.load(Ordering::Relaxed) {
            return Ok(Wake::Quit);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Wake::Sample);
        }
        // Short waits so a SIGTERM is noticed within 100 ms.
        if let Input::HungUp = wait_input(left.min(Duration::from_millis(100))) {
            return Ok(Wake::Quit);
        }
        // Keys, and resizes (which come by signal, not on the input).
        while event::poll(Duration::ZERO)? {
            match event::read()? {
                Event::Key(KeyEvent {
                    code,
                    modifiers,
                    kind: KeyEventKind::Press,
                    ..
                }) => {
                    let ctrl_c =
                        code == KeyCode::Char('c') && modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(code, KeyCode::Char('q' | 'Q') | KeyCode::Esc) {
                        return Ok(Wake::Quit);
                    }
                }
                Event::Resize(..) => return Ok(Wake::Redraw),
                _ => {}
            }
        }
    }
}

fn paint(out: &mut impl Write, lines: &[String], height: u16) -> io::Result<()> {
    for row in 0..height {
        queue!(out, MoveTo(0, row))?;
        if let Some(line) = lines.get(usize::from(row)) {
            out.write_all(line.as_bytes())?;
        }
        queue!(out, Clear(ClearType::UntilNewLine))?;
    }
    out.flush()
}

fn live(
    addr: SocketAddr,
    shown: &str,
    every: Duration,
    mut history: History,
) -> Result<(), TopError> {
    // In raw mode Ctrl-C is a key; these catch `kill` and a closed terminal,
    // which would otherwise leave the terminal raw.
    let signalled = Arc::new(AtomicBool::new(false));
    let mut hooks = Vec::new();
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        hooks.push(
            signal_hook::flag::register(sig, Arc::clone(&signalled)).map_err(TopError::Terminal)?,
        );
    }
    let default_hook = Arc::new(std::panic::take_hook());
    {
        let default_hook = Arc::clone(&default_hook);
        std::panic::set_hook(Box::new(move |info| {
            // Restore first, or the panic message lands on the alternate
            // screen and vanishes with it.
            restore_terminal();
            default_hook(info);
        }));
    }
    let result = view_loop(addr, shown, every, &mut history, &signalled);
    // Put the previous hook back (no more terminal to restore).
    drop(std::panic::take_hook());
    std::panic::set_hook(Box::new(move |info| default_hook(info)));
    for id in hooks {
        signal_hook::low_level::unregister(id);
    }
    result
}

fn view_loop(
    addr: SocketAddr,
    shown: &str,
    every: Duration,
    history: &mut History,
    signalled: &AtomicBool,
) -> Result<(), TopError> {
    let _screen = Screen::enter().map_err(TopError::Terminal)?;
    let mut out = io::stdout();
    // Since when the daemon has not answered (a restart, a crash): the
    // view keeps its last frame and waits for it, saying so.
    let mut silent_since: Option<Instant> = None;
    let mut status = (String::from("q, Esc or Ctrl-C: quit"), false);
    let mut next = Instant::now() + every;
    loop {
        let (width, height) = terminal::size().map_err(TopError::Terminal)?;
        let frame = draw(
            history,
            &View {
                addr: shown,
                every,
                width: usize::from(width),
                height: Some(usize::from(height)),
                colour: std::env::var_os("NO_COLOR").is_none(),
                status: Some(status.clone()),
            },
        );
        paint(&mut out, &frame.ansi_lines(), height).map_err(TopError::Terminal)?;
        match wait(next, signalled).map_err(TopError::Terminal)? {
            Wake::Quit => return Ok(()),
            Wake::Redraw => continue,
            Wake::Sample => {}
        }
        next += every;
        // After a stall (a suspended terminal, a slow scrape) resume from
        // now instead of catching up with a burst of samples.
        if next < Instant::now() {
            next = Instant::now() + every;
        }
        match sample(addr, every) {
            Ok(s) => {
                history.push(Instant::now(), s);
                silent_since = None;
                status = (String::from("q, Esc or Ctrl-C: quit"), false);
            }
            Err(e) => {
                let since = *silent_since.get_or_insert_with(Instant::now);
                status = (
                    format!(
                        "no answer from {shown} for {:.0} s ({}): waiting for it; q to quit",
                        since.elapsed().as_secs_f64(),
                        e.brief()
                    ),
                    true,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_resolve_or_say_why_not() {
        assert_eq!(
            resolve("127.0.0.1:9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(resolve("[::1]:1").unwrap(), "[::1]:1".parse().unwrap());
        let err = resolve("127.0.0.1").unwrap_err().to_string();
        assert!(
            err.contains("\"127.0.0.1\"") && err.contains("HOST:PORT"),
            "{err}"
        );
    }

    #[test]
    fn a_refused_connection_names_the_address_and_the_daemon_flag() {
        // Bind then drop to get a port nobody listens on.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let err = sample(addr, Duration::from_millis(500)).unwrap_err();
        assert!(matches!(err, TopError::Refused { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&addr.to_string()), "{msg}");
        assert!(
            msg.contains("rsspp run") && msg.contains("--metrics-addr"),
            "{msg}"
        );
    }

    #[test]
    fn the_scrape_timeout_follows_the_interval_within_bounds() {
        assert_eq!(
            scrape_timeout(Duration::from_millis(50)),
            Duration::from_millis(200)
        );
        assert_eq!(
            scrape_timeout(Duration::from_millis(500)),
            Duration::from_millis(500)
        );
        assert_eq!(
            scrape_timeout(Duration::from_secs(60)),
            Duration::from_secs(2)
        );
    }
}
