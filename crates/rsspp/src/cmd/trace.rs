//! `rsspp trace`: generate synthetic packet traces and analyse captures.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use clap::{Args, Subcommand, ValueEnum};
use rsspp_trace::generate::PcapJob;
use rsspp_trace::read::CorruptRecord;
use rsspp_trace::stats::Cdf;
use rsspp_trace::{
    analyse, GenConfig, Preset, StatsConfig, TimePrecision, TraceError, TraceReader, TraceReport,
};

use crate::atomic::AtomicFile;
use crate::error::CliError;

/// Arguments of `rsspp trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Generate a synthetic pcap: the calibrated campus trace look-alike,
    /// four campus windows superposed, N constant-rate UDP flows,
    /// elephants among mice, or many short TCP connections. The same seed
    /// gives the same bytes.
    Gen(GenArgs),
    /// Analyse a pcap/pcapng capture: volumes, flow and frame sizes, active
    /// and new flows per second, heavy hitters, Reframer's locality measures.
    Stats(StatsArgs),
    /// Send a capture's frames out of an interface (AF_PACKET, as root): at
    /// the capture's own pace or --pps, once or --loop, up to --count.
    Replay(ReplayArgs),
}

/// Arguments of `rsspp trace replay`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
rsspp trace gen --preset udp-flows --flows 64 --duration 1 --pps 10000 -o udp.pcap\n  \
rsspp trace replay -i veth0 udp.pcap\n  \
rsspp trace replay -i veth0 --pps 20000 --loop --count 1000000 udp.pcap\n\n\
Frames go as captured (a capture cut to its headers, as trace gen's 64-byte snaplen, sends\n\
the headers); cooked (tcpdump -i any) and raw-IP captures get a made-up Ethernet header.\n\
Frames longer than the interface's MTU are skipped and counted. Ctrl-C stops and reports.")]
pub struct ReplayArgs {
    /// The interface the frames leave through.
    #[arg(short, long, value_name = "IF")]
    iface: String,
    /// pcap or pcapng file ('-' for standard input, without --loop).
    file: String,
    /// Frames a second (default: the capture's own timing).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pps: Option<f64>,
    /// At the end of the capture, start again (until --count, or Ctrl-C).
    #[arg(long = "loop")]
    repeat: bool,
    /// Stop after N frames sent.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PresetName {
    /// Campus trace look-alike: ~507 kpps, 4.2 Gbps, ~19k active flows/s.
    Campus,
    /// Four campus windows with non-colliding addresses: ~1.87 Mpps.
    Campus4,
    /// N equal constant-rate UDP flows (default 1024 flows, 1 Mpps, 64 B).
    UdpFlows,
    /// A few elephant TCP flows among many mice (default 4, 1 Mpps).
    Elephants,
    /// Many short TCP connections to one server: SYN, 1-3 requests, FIN
    /// (default 100k connections/s, ~700 kpps).
    ShortConnections,
}

/// Arguments of `rsspp trace gen`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  rsspp trace gen --preset campus --duration 10 -o campus.pcap\n  \
rsspp trace gen --preset udp-flows --flows 64 --pps 2000000 --duration 1 -o udp.pcap\n  \
rsspp trace gen --preset short-connections --conn-rate 50000 --duration 1 -o conns.pcap\n  \
rsspp trace gen --preset campus -o - | rsspp trace stats -"
)]
pub struct GenArgs {
    /// Traffic preset.
    #[arg(long, value_enum)]
    preset: PresetName,
    /// Trace length, seconds (more than 0, at most 86400).
    #[arg(
        long,
        default_value_t = 10.0,
        value_name = "S",
        allow_negative_numbers = true
    )]
    duration: f64,
    /// Replay the preset X times faster (timestamps compressed).
    #[arg(
        long,
        value_name = "X",
        conflicts_with = "pps",
        allow_negative_numbers = true
    )]
    speed: Option<f64>,
    /// Target packet rate (sets the speed).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pps: Option<f64>,
    /// Random seed: the same seed gives the same file.
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// Bytes stored per frame (headers only by default; the original length
    /// is kept in each record).
    #[arg(long, default_value_t = 64, value_name = "B")]
    snaplen: u32,
    /// udp-flows: number of flows; elephants: number of elephants.
    #[arg(long, value_name = "N")]
    flows: Option<usize>,
    /// udp-flows and elephants: fixed frame size in bytes (60-1514).
    #[arg(long, value_name = "B")]
    frame_size: Option<u16>,
    /// short-connections: new connections per second (before --speed).
    #[arg(long, value_name = "N")]
    conn_rate: Option<f64>,
    /// Microsecond timestamps (default: nanoseconds).
    #[arg(long)]
    usec: bool,
    /// Output pcap file ('-' for standard output).
    #[arg(short, long, value_name = "FILE")]
    output: String,
}

/// Arguments of `rsspp trace stats`.
#[derive(Debug, Args)]
#[command(
    after_help = "JSON fields (--json) include packets, bytes, flows, flow_size_cdf \
([[packets, fraction], ...]), frame_size_cdf, active_flows_per_s, new_flows_per_s, \
heavy_hitters, spatial_locality_factor and locality."
)]
#[command(group(clap::ArgGroup::new("capture").required(true).args(["file", "read"])))]
pub struct StatsArgs {
    /// pcap or pcapng file ('-' for standard input).
    file: Option<String>,
    /// The capture, as tcpdump -r reads it (instead of FILE).
    #[arg(short = 'r', value_name = "FILE")]
    read: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Buffering times (µs, comma-separated, at most 4) for the per-flow
    /// batch analysis.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,32,128",
        value_name = "US"
    )]
    buffer_us: Vec<u64>,
    /// Heavy hitters to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// At a corrupt record before the end of the capture, keep the packets
    /// read before it (the rest is skipped and counted) instead of failing.
    #[arg(long)]
    keep_partial: bool,
}

/// Runs `rsspp trace`.
pub fn run(args: &TraceArgs) -> Result<(), CliError> {
    match &args.command {
        TraceCommand::Gen(a) => generate(a),
        TraceCommand::Stats(a) => stats(a),
        TraceCommand::Replay(a) => replay(a),
    }
}

fn trace_error(path: &str, source: TraceError) -> CliError {
    match source {
        TraceError::Write(e) if path == "-" => CliError::output(e),
        TraceError::Corrupt(record) => CliError::CorruptTrace {
            path: path.to_string(),
            record,
        },
        source => CliError::Trace {
            path: path.to_string(),
            source,
        },
    }
}

fn generate(args: &GenArgs) -> Result<(), CliError> {
    let preset = match args.preset {
        PresetName::Campus => Preset::Campus,
        PresetName::Campus4 => Preset::Campus4,
        PresetName::UdpFlows => Preset::UdpFlows,
        PresetName::Elephants => Preset::Elephants,
        PresetName::ShortConnections => Preset::ShortConnections,
    };
    let max = rsspp_trace::generate::MAX_DURATION_S;
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= max) {
        return Err(CliError::OutOfRange {
            flag: "--duration",
            expected: format!("more than 0 and at most {max} seconds").into(),
            value: args.duration.to_string(),
        });
    }
    let mut config = GenConfig::new(preset);
    config.duration_s = args.duration;
    config.seed = args.seed;
    config.flows = args.flows;
    config.frame_size = args.frame_size;
    config.connection_rate = args.conn_rate;
    if let Some(speed) = args.speed {
        config.speed = speed;
    }
    if let Some(pps) = args.pps {
        if !(pps.is_finite() && pps > 0.0) {
            return Err(CliError::Invalid(format!(
                "--pps must be positive, got {pps}"
            )));
        }
        config = config.with_pps(pps);
    }
    let precision = if args.usec {
        TimePrecision::Micro
    } else {
        TimePrecision::Nano
    };
    let path = args.output.as_str();
    // Every option is checked before the output is touched; a file is
    // written next to its destination and renamed over it at the end, so
    // an error half-way leaves the old file as it was.
    let job = PcapJob::new(&config, args.snaplen, precision).map_err(|e| trace_error(path, e))?;
    let packets = if path == "-" {
        let stdout = std::io::stdout();
        job.write(BufWriter::with_capacity(1 << 20, stdout.lock()))
            .map_err(|e| trace_error(path, e))?
    } else {
        let mut file = AtomicFile::create(Path::new(path))?;
        let packets = job
            .write(BufWriter::with_capacity(1 << 20, &mut file))
            .map_err(|e| trace_error(path, e))?;
        file.commit()?;
        packets
    };
    tracing::info!(packets, path, "trace written");
    Ok(())
}

/// `rsspp trace replay`.
fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    use rsspp_linux::replay::{self, Pace, ReplayConfig, ReplayError, MAX_PPS};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    let pace = match args.pps {
        None => Pace::Capture,
        Some(pps) if pps > 0.0 && pps <= MAX_PPS => Pace::Pps(pps),
        Some(pps) => {
            return Err(CliError::OutOfRange {
                flag: "--pps",
                expected: format!("more than 0 and at most {MAX_PPS}").into(),
                value: pps.to_string(),
            })
        }
    };
    if args.count == Some(0) {
        return Err(CliError::OutOfRange {
            flag: "--count",
            expected: "at least 1".into(),
            value: "0".into(),
        });
    }
    let path = args.file.as_str();
    let stdin = path == "-";
    if stdin && args.repeat {
        return Err(CliError::Invalid(
            "--loop reads the capture again: it needs a file, not standard input".into(),
        ));
    }
    let config = ReplayConfig {
        iface: args.iface.clone(),
        pace,
        repeat: args.repeat,
        count: args.count,
    };
    let stop = Arc::new(AtomicBool::new(false));
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| CliError::Invalid(format!("cannot handle signal {signal}: {e}")))?;
    }
    let open = || -> Result<TraceReader<'static>, ReplayError> {
        if stdin {
            return Ok(TraceReader::new(std::io::stdin())?);
        }
        let file = File::open(path).map_err(ReplayError::Open)?;
        Ok(TraceReader::new(BufReader::new(file))?)
    };
    let report = replay::replay(&config, open, &stop).map_err(|e| match e {
        ReplayError::Trace(e) => trace_error(path, e),
        ReplayError::Open(source) => CliError::Io {
            path: path.to_string(),
            source,
        },
        ReplayError::NothingToSend { .. } => CliError::Invalid(format!("{path}: {e}")),
        e => CliError::Replay(e),
    })?;
    let seconds = report.elapsed_us as f64 / 1e6;
    let mut text = format!(
        "sent {} frames ({} bytes) out of {} in {seconds:.3} s ({:.0} frames/s), {} pass{}",
        report.sent,
        report.bytes,
        args.iface,
        if seconds > 0.0 {
            report.sent as f64 / seconds
        } else {
            0.0
        },
        report.passes,
        if report.passes == 1 { "" } else { "es" }
    );
    if report.not_ethernet > 0 {
        text += &format!(
            "; {} frames skipped (not Ethernet, or too short)",
            report.not_ethernet
        );
    }
    if report.too_long > 0 {
        text += &format!(
            "; {} frames skipped (longer than {}'s MTU)",
            report.too_long, args.iface
        );
    }
    if report.interrupted {
        text += "; stopped";
    }
    writeln!(std::io::stdout().lock(), "{text}").map_err(CliError::output)
}

fn stats(args: &StatsArgs) -> Result<(), CliError> {
    if args.buffer_us.len() > rsspp_trace::stats::MAX_BUFFERS {
        return Err(CliError::Invalid(format!(
            "--buffer-us takes at most {} values",
            rsspp_trace::stats::MAX_BUFFERS
        )));
    }
    let config = StatsConfig {
        buffer_us: args.buffer_us.clone(),
        top: args.top,
    };
    let path = args
        .file
        .as_deref()
        .or(args.read.as_deref())
        .ok_or_else(|| CliError::Invalid("trace stats needs a capture: FILE or -r FILE".into()))?;
    let keep = args.keep_partial;
    let report = if path == "-" {
        let mut reader = TraceReader::new(std::io::stdin())
            .map_err(|e| trace_error(path, e))?
            .keep_partial(keep);
        analyse(&mut reader, config)
    } else {
        let file = File::open(path).map_err(|source| CliError::Io {
            path: path.to_string(),
            source,
        })?;
        let mut reader = TraceReader::new(BufReader::new(file))
            .map_err(|e| trace_error(path, e))?
            .keep_partial(keep);
        analyse(&mut reader, config)
    }
    .map_err(|e| trace_error(path, e))?;
    warn_partial(
        path,
        report.corrupt_record,
        report.truncated_tail,
        report.skipped_bytes,
    );
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).map_err(|e| CliError::output(e.into()))?;
        writeln!(out).map_err(CliError::output)?;
    } else {
        print_report(&mut out, &report).map_err(CliError::output)?;
    }
    Ok(())
}

/// Says what a capture read with `--keep-partial` (or cut short) left out.
pub fn warn_partial(path: &str, corrupt: Option<CorruptRecord>, truncated: bool, skipped: u64) {
    if let Some(c) = corrupt {
        eprintln!(
            "rsspp: warning: {path}: {c}; kept the {} packets before it, skipped the remaining {skipped} bytes",
            c.after_packets
        );
    } else if truncated {
        eprintln!(
            "rsspp: warning: {path}: the last record is cut short ({skipped} bytes left out)"
        );
    }
}

fn print_cdf(out: &mut impl Write, title: &str, unit: &str, cdf: &Cdf) -> std::io::Result<()> {
    writeln!(out, "\n{title}")?;
    writeln!(out, "  {unit:>12}  cumulative")?;
    for (x, f) in cdf {
        writeln!(out, "  {x:>12}  {:>9.1}%", f * 100.0)?;
    }
    Ok(())
}

fn print_report(out: &mut impl Write, r: &TraceReport) -> std::io::Result<()> {
    writeln!(out, "packets          {}", r.packets)?;
    writeln!(out, "bytes            {}", r.bytes)?;
    writeln!(out, "duration         {:.3} s", r.duration_s)?;
    writeln!(
        out,
        "rate             {:.0} pps, {:.3} Gbps, {:.1} B/frame",
        r.pps, r.gbps, r.avg_packet_bytes
    )?;
    writeln!(
        out,
        "flows            {} (directional TCP/UDP 5-tuples)",
        r.flows
    )?;
    writeln!(
        out,
        "frames           {} IP, {} non-IP, {} malformed, {} fragments, {} VLAN-tagged",
        r.ip_packets, r.non_ip_packets, r.malformed_packets, r.fragments, r.vlan_tagged
    )?;
    if r.skipped_records + r.inconsistent_lengths + r.out_of_order_timestamps + r.skipped_bytes > 0
        || r.truncated_tail
    {
        writeln!(
            out,
            "reader           {} skipped records, {} length fix-ups, {} out-of-order timestamps, truncated tail: {}, {} bytes skipped",
            r.skipped_records,
            r.inconsistent_lengths,
            r.out_of_order_timestamps,
            r.truncated_tail,
            r.skipped_bytes
        )?;
    }
    if let Some(c) = &r.corrupt_record {
        writeln!(out, "partial          read up to the {c}")?;
    }
    let a = &r.active_flows_per_s;
    let n = &r.new_flows_per_s;
    writeln!(
        out,
        "active flows/s   mean {:.0}, min {}, max {}",
        a.mean, a.min, a.max
    )?;
    writeln!(
        out,
        "new flows/s      mean {:.0}, start {}, end {}",
        n.mean, n.start, n.end
    )?;
    writeln!(
        out,
        "spatial locality factor {:.3} packets back to back",
        r.spatial_locality_factor
    )?;
    print_cdf(out, "flow sizes (whole flows)", "packets", &r.flow_size_cdf)?;
    print_cdf(
        out,
        "flow sizes (per 1-second window)",
        "packets",
        &r.flow_size_cdf_per_1s_window,
    )?;
    print_cdf(
        out,
        "packet share by flow size",
        "packets",
        &r.packet_share_by_flow_size,
    )?;
    print_cdf(out, "frame sizes", "bytes", &r.frame_size_cdf)?;
    writeln!(out, "\nheavy hitters")?;
    for h in &r.heavy_hitters {
        writeln!(
            out,
            "  {:>10} pkts {:>6.2}%  {}",
            h.packets,
            h.packet_share * 100.0,
            h.flow
        )?;
    }
    let l = &r.locality;
    writeln!(
        out,
        "\nlocality (TCP, {} gaps): {:.1}% of consecutive packets of a flow are interleaved with other packets",
        l.tcp_gaps,
        l.interleaved_fraction * 100.0
    )?;
    print_cdf(
        out,
        "spatial distance (packets between consecutive packets of a flow)",
        "<= packets",
        &l.spatial_distance_cdf,
    )?;
    print_cdf(
        out,
        "temporal distance",
        "< us",
        &l.temporal_distance_cdf_us,
    )?;
    writeln!(out, "\nper-flow batches (at most 32 packets)")?;
    writeln!(
        out,
        "  {:>9}  {:>10}  {:>6}  {:>13}  {:>7}",
        "buffer us", "batches", "mean", "pkt-weighted", "size 1"
    )?;
    for b in &l.batching {
        let single = b.batch_size_cdf.first().map_or(0.0, |p| p.1);
        writeln!(
            out,
            "  {:>9}  {:>10}  {:>6.2}  {:>13.2}  {:>6.1}%",
            b.buffer_us,
            b.batches,
            b.mean_batch,
            b.packet_weighted_mean_batch,
            single * 100.0
        )?;
    }
    Ok(())
}
