//! `rsspp reframe`: Reframer as a bump in the wire (seed 002 §4, deployed in
//! front of the servers). The userspace runtime with one worker, no
//! function but forwarding, and the Reframer stage: frames from `--in` leave
//! through `--out` regrouped per flow.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rsspp_core::reframer::{ReframerConfig, ReframerError, BUFFER_US_RANGE, MAX_BURST_RANGE};
use rsspp_linux::cpu::CpuList;
use rsspp_runtime::reframe::Forward;
use rsspp_runtime::{Config, ReframerSummary};
use serde::Serialize;

use crate::error::CliError;

/// `rsspp reframe` options.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
rsspp reframe --in eth0 --out eth1 --buffer-us 200\n  \
rsspp reframe --in veth1 --out veth2 --buffer-us 500 --duration 10 --json\n  \
rsspp reframe --in eth0 --out eth1 --buffer-us 200 --metrics-addr 127.0.0.1:9465")]
pub struct ReframeArgs {
    /// Interface to receive from.
    #[arg(long = "in", value_name = "IFACE")]
    input: String,
    /// Interface to send the regrouped frames to.
    #[arg(long = "out", value_name = "IFACE")]
    output: String,
    /// Longest a flow's first frame waits for more of its flow (T_buff),
    /// microseconds.
    #[arg(long, value_name = "US")]
    buffer_us: u64,
    /// A flow's frames leave at once when this many are held.
    #[arg(long, default_value_t = 32, value_name = "N")]
    max_burst: u32,
    /// CPU to run the worker on.
    #[arg(long, default_value_t = 0, value_name = "CPU")]
    cpu: u32,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Print the summary as JSON on exit.
    #[arg(long)]
    json: bool,
    /// Serve `rsspp nf`'s metrics here (Prometheus text format, /metrics),
    /// the Reframer's series among them (default: none).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
}

/// What `rsspp reframe --json` prints.
#[derive(Debug, Serialize)]
struct ReframeSummary<'a> {
    received: u64,
    forwarded: u64,
    dropped: &'a std::collections::BTreeMap<String, u64>,
    reframer: &'a ReframerSummary,
}

/// The stage's settings from `flag`'s microseconds, refused out of range.
pub(crate) fn reframer_config(flag: &'static str, us: u64) -> Result<ReframerConfig, CliError> {
    ReframerConfig::new(us).map_err(|e| out_of_range(flag, e))
}

fn out_of_range(flag: &'static str, e: ReframerError) -> CliError {
    match e {
        ReframerError::BufferTime { got_us, .. } => CliError::OutOfRange {
            flag,
            expected: format!(
                "{} to {} µs",
                BUFFER_US_RANGE.start(),
                BUFFER_US_RANGE.end()
            )
            .into(),
            value: got_us.to_string(),
        },
        ReframerError::MaxBurst { got, .. } => CliError::OutOfRange {
            flag: "--max-burst",
            expected: format!(
                "{} to {} frames",
                MAX_BURST_RANGE.start(),
                MAX_BURST_RANGE.end()
            )
            .into(),
            value: got.to_string(),
        },
    }
}

/// One line on what the stages did.
pub(crate) fn describe(r: &ReframerSummary) -> String {
    format!(
        "Reframer {} µs: {} frames, {} buffered, {} bypassed, {} flushes ({} at the deadline, {} full, {} by a bypass, {} early), {:.2} frames a batch, SLF {:.3} in, {:.3} out",
        r.buffer_us,
        r.packets_in,
        r.buffered,
        r.bypassed,
        r.flushes,
        r.flush_timeout,
        r.flush_burst,
        r.flush_bypass,
        r.flush_early,
        r.mean_batch,
        r.slf_in,
        r.slf_out
    )
}

/// Runs `rsspp reframe`.
pub fn run(args: &ReframeArgs) -> Result<(), CliError> {
    let mut reframer = reframer_config("--buffer-us", args.buffer_us)?;
    reframer.max_burst = args.max_burst;
    reframer
        .validate()
        .map_err(|e| out_of_range("--buffer-us", e))?;
    let online = CpuList::online()?;
    let cpu: CpuList = args.cpu.to_string().parse()?;
    cpu.check_online(&online)?;
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
    let mut config = Config::new(args.input.clone(), vec![args.cpu]);
    config.output = Some(args.output.clone());
    config.balance = false;
    config.duration = duration;
    config.reframer = Some(reframer);
    config.metrics = args
        .metrics_addr
        .as_deref()
        .map(|a| {
            a.parse().map_err(|_| {
                CliError::Invalid(format!(
                    "--metrics-addr {a:?} is not an address:port (e.g. 127.0.0.1:9464)"
                ))
            })
        })
        .transpose()?;
    let stop = Arc::new(AtomicBool::new(false));
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::Invalid(format!("cannot handle signal {signal}: {e}")))?;
    }
    let outcome = rsspp_runtime::run(&config, |_| Forward, &stop)?;
    let s = &outcome.summary;
    let r = s
        .reframer
        .as_ref()
        .expect("the runtime sums the stages it was given");
    let mut stdout = std::io::stdout().lock();
    let written = if args.json {
        let summary = ReframeSummary {
            received: s.received,
            forwarded: s.forwarded,
            dropped: &s.dropped,
            reframer: r,
        };
        writeln!(
            stdout,
            "{}",
            serde_json::to_string(&summary).expect("the summary serialises")
        )
    } else {
        let dropped: u64 = s.dropped.values().sum();
        writeln!(
            stdout,
            "received {}, forwarded {}, dropped {} {:?}; {}",
            s.received,
            s.forwarded,
            dropped,
            s.dropped,
            describe(r)
        )
    };
    written.map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Io {
                path: "stdout".into(),
                source: e,
            }
        }
    })
}
