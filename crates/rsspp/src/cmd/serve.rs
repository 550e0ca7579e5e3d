//! `rsspp serve`: a small HTTP/1.1 server on `rsspp_accept` (one listener
//! and one pinned worker per CPU; Affinity-Accept's placement, stealing and
//! flow-group migration with `--affinity on`). Parses the options, starts
//! the server, waits, prints the summary.

use std::io::Write;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use rsspp_accept::{Config, Http, Server, Summary, TableSource};
use rsspp_core::RssKey;
use rsspp_linux::cpu::CpuList;

use crate::error::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// Arguments of `rsspp serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Each CPU of --cpus gets a listener (one SO_REUSEPORT group) and a pinned worker.\n\
--affinity on: an sk_reuseport program puts each connection on the listener of the CPU its\n\
bucket maps to (Toeplitz of the 4-tuple; the table is the library's own, or with --iface the\n\
table of the `rsspp run` daemon steering that interface in software mode); idle or\n\
lightly loaded workers steal from busy ones (5 local : 1 remote). --affinity off: plain\n\
SO_REUSEPORT hashing, no stealing (the baseline).\n\n\
Examples:\n  \
rsspp serve --listen 0.0.0.0:8080 --cpus 0,1 --duration 30 --json\n  \
rsspp serve --listen 10.0.0.2:80 --cpus 0-3 --iface eth0 --work-us 50\n  \
rsspp serve --listen 0.0.0.0:8080 --cpus 0,1 --affinity off"
)]
pub struct ServeArgs {
    /// The IPv4 address and port every worker's listener binds.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: String,
    /// The workers' CPUs, kernel list syntax: 0-3,6.
    #[arg(long, value_name = "LIST")]
    cpus: String,
    /// Affinity-Accept (on) or plain SO_REUSEPORT (off).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    affinity: OnOff,
    /// CPU time spent per request, in microseconds (spun).
    #[arg(long, default_value_t = 0, value_name = "N")]
    work_us: u64,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// Use the table (and key) of the `rsspp run` daemon steering this
    /// interface in software mode instead of a table of our own.
    #[arg(short, long, value_name = "IF")]
    iface: Option<String>,
    /// Buckets of our own table (power of two; not with --iface).
    #[arg(
        long,
        default_value_t = 128,
        value_name = "N",
        conflicts_with = "iface"
    )]
    table_size: usize,
    /// Accept queue of each listener (busy above 75% of it).
    #[arg(long, default_value_t = 128, value_name = "N")]
    backlog: u32,
    /// Slow one core down: add US microseconds of work to each request its
    /// worker serves (to watch stealing).
    #[arg(long, value_name = "CPU:US")]
    slow: Option<String>,
    /// Never move buckets of our own table (stealing still happens).
    #[arg(long)]
    no_migrate: bool,
}

fn check(args: &ServeArgs) -> Result<(Config, Option<Duration>), CliError> {
    let listen: SocketAddrV4 = args.listen.parse().map_err(|_| CliError::OutOfRange {
        flag: "--listen",
        expected: "an IPv4 ADDR:PORT such as 0.0.0.0:8080".into(),
        value: args.listen.clone(),
    })?;
    let list: CpuList = args.cpus.parse()?;
    if list.is_empty() {
        return Err(CliError::Invalid("--cpus names no CPU".into()));
    }
    list.check_online(&CpuList::online()?)?;
    let duration = match args.duration {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(CliError::OutOfRange {
                flag: "--duration",
                expected: "a positive number of seconds".into(),
                value: s.to_string(),
            })
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let max = rsspp_accept::program::MAX_BUCKETS;
    if !args.table_size.is_power_of_two() || args.table_size < 2 || args.table_size > max {
        return Err(CliError::OutOfRange {
            flag: "--table-size",
            expected: format!("a power of two from 2 to {max}").into(),
            value: args.table_size.to_string(),
        });
    }
    if args.backlog == 0 {
        return Err(CliError::OutOfRange {
            flag: "--backlog",
            expected: "at least 1".into(),
            value: "0".into(),
        });
    }
    let slow = match &args.slow {
        None => None,
        Some(text) => {
            let bad = || CliError::OutOfRange {
                flag: "--slow",
                expected: "CPU:US, a CPU of --cpus and microseconds".into(),
                value: text.clone(),
            };
            let (cpu, us) = text.split_once(':').ok_or_else(bad)?;
            let cpu: usize = cpu.parse().map_err(|_| bad())?;
            let us: u64 = us.parse().map_err(|_| bad())?;
            if !list.cpus().iter().any(|&c| c as usize == cpu) {
                return Err(bad());
            }
            Some((cpu, Duration::from_micros(us)))
        }
    };
    let affinity = match (args.affinity, &args.iface) {
        (OnOff::Off, Some(_)) => {
            return Err(CliError::Invalid(
                "--iface selects the daemon's table for --affinity on; it means nothing with --affinity off".into(),
            ))
        }
        (OnOff::Off, None) => None,
        (OnOff::On, Some(iface)) => Some(TableSource::Daemon {
            iface: iface.clone(),
        }),
        (OnOff::On, None) => Some(TableSource::Own {
            size: args.table_size,
            key: RssKey::microsoft(),
        }),
    };
    Ok((
        Config {
            listen,
            cpus: list.cpus().iter().map(|&c| c as usize).collect(),
            affinity,
            backlog: args.backlog,
            http: Http {
                work: Duration::from_micros(args.work_us),
                slow,
            },
            migrate: !args.no_migrate,
        },
        duration,
    ))
}

fn print_human(out: &mut impl Write, s: &Summary) -> std::io::Result<()> {
    writeln!(
        out,
        "affinity {} (table: {}), {:.1} s: {} connections ({} stolen), local_share {:.3}, {} requests ({:.0}/s), latency p50 {:.0} µs p99 {:.0} µs p99.9 {:.0} µs",
        if s.affinity { "on" } else { "off" },
        s.table,
        s.seconds,
        s.connections,
        s.stolen,
        s.local_share,
        s.requests,
        s.requests_per_s,
        s.latency.p50_us,
        s.latency.p99_us,
        s.latency.p999_us
    )?;
    for w in &s.workers {
        writeln!(
            out,
            "  cpu {}: accepted {} (stolen {}, stolen from it {}), local {}, requests {}, busy {:.0}%",
            w.cpu,
            w.accepted,
            w.stolen,
            w.stolen_from,
            w.local,
            w.requests,
            w.busy * 100.0
        )?;
    }
    if s.buckets_moved > 0 {
        writeln!(
            out,
            "  flow groups: {} buckets moved in {} controller rounds",
            s.buckets_moved, s.control_rounds
        )?;
    }
    Ok(())
}

/// Runs `rsspp serve`.
pub fn run(args: &ServeArgs) -> Result<(), CliError> {
    let (config, duration) = check(args)?;
    let stop = Arc::new(AtomicBool::new(false));
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::Invalid(format!("cannot handle signal {signal}: {e}")))?;
    }
    let server = Server::start(config)?;
    tracing::info!("serving on {}", args.listen);
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| start.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = server.stop()?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(
            stdout,
            "{}",
            serde_json::to_string(&summary).expect("the summary serialises")
        )
    } else {
        print_human(&mut stdout, &summary)
    }
    .map_err(CliError::output)
}
