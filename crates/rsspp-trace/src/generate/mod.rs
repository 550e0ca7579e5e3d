//! Synthetic traces: calibrated campus-like traffic and the papers'
//! synthetic tests, deterministic for a seed.
//!
//! - `campus`: the KTH campus trace behind the RSS++ evaluation, calibrated
//!   to its published statistics (`shared/data/campus-trace-stats.json`,
//!   mirrored in [`campus_reference`]).
//! - `campus4`: four campus windows replayed in parallel with rewritten,
//!   non-colliding addresses (the paper's Campus #4).
//! - `udp-flows`: N equal constant-rate UDP flows.
//! - `elephants`: a few heavy TCP flows among many mice.
//! - `short-connections`: many short TCP connections (SYN, a few requests,
//!   FIN) arriving as a Poisson process, the Affinity-Accept workload.

mod connections;
pub mod dist;
mod model;
mod reference;

use std::io::Write;

use connections::Connections;
use dist::{EmpiricalCdf, Interpolation};
use model::{Engine, FrameModel, HeavyTiming, Model, Trains};
pub use reference::{campus_reference, CampusReference};

use crate::error::TraceError;
use crate::write::{PcapWriter, TimePrecision};

/// A generated packet (IPv4, TCP or UDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenPacket {
    /// Nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// IPv4 source address.
    pub src: u32,
    /// IPv4 destination address.
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// 6 (TCP) or 17 (UDP).
    pub protocol: u8,
    /// TCP flags (0 for UDP).
    pub tcp_flags: u8,
    /// Frame length on the wire, Ethernet header included, FCS excluded.
    pub wire_len: u16,
    /// TCP sequence number.
    pub seq: u32,
}

/// The traffic presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Campus trace look-alike (~507 kpps, 4.2 Gbps, ~19k active flows/s).
    Campus,
    /// Four campus windows superposed (~1.87 Mpps).
    Campus4,
    /// N equal constant-rate UDP flows.
    UdpFlows,
    /// A few elephant flows among many mice.
    Elephants,
    /// Many short TCP connections to one server (100k new connections per
    /// second by default, 7 packets each on average).
    ShortConnections,
}

impl Preset {
    /// Parses a preset name as written on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "campus" => Some(Preset::Campus),
            "campus4" => Some(Preset::Campus4),
            "udp-flows" => Some(Preset::UdpFlows),
            "elephants" => Some(Preset::Elephants),
            "short-connections" => Some(Preset::ShortConnections),
            _ => None,
        }
    }

    /// The packet rate of the preset at speed 1 (with its default options).
    pub fn nominal_pps(self) -> f64 {
        match self {
            Preset::Campus => campus_reference().pps,
            Preset::Campus4 => campus_reference().campus4_pps,
            Preset::UdpFlows | Preset::Elephants => 1_000_000.0,
            Preset::ShortConnections => connections::DEFAULT_RATE * connections::MEAN_PACKETS,
        }
    }
}

/// Generator options.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Which traffic.
    pub preset: Preset,
    /// Length of the trace, seconds.
    pub duration_s: f64,
    /// Rate multiplier: the preset's traffic replayed `speed` times faster
    /// (timestamps compressed, as `tcpreplay --multiplier` does).
    pub speed: f64,
    /// Seed: the same seed gives the same packets.
    pub seed: u64,
    /// `udp-flows`: number of flows; `elephants`: number of elephants.
    pub flows: Option<usize>,
    /// `udp-flows` and `elephants`: fixed frame size (bytes, 60–1514);
    /// `udp-flows` defaults to 64, `elephants` to the campus frame mix.
    pub frame_size: Option<u16>,
    /// `short-connections`: new connections per second at speed 1
    /// (default 100 000).
    pub connection_rate: Option<f64>,
    /// Timestamp of the first nanosecond of the trace.
    pub start_ns: u64,
}

impl GenConfig {
    /// Defaults for a preset: 10 s at speed 1, seed 1.
    pub fn new(preset: Preset) -> Self {
        Self {
            preset,
            duration_s: 10.0,
            speed: 1.0,
            seed: 1,
            flows: None,
            frame_size: None,
            connection_rate: None,
            start_ns: 1_700_000_000 * 1_000_000_000,
        }
    }

    /// The packet rate at speed 1 with these options.
    pub fn nominal_pps(&self) -> f64 {
        match (self.preset, self.connection_rate) {
            (Preset::ShortConnections, Some(rate)) => rate * connections::MEAN_PACKETS,
            (preset, _) => preset.nominal_pps(),
        }
    }

    /// Sets the speed so the packet rate is `pps`.
    pub fn with_pps(mut self, pps: f64) -> Self {
        self.speed = pps / self.nominal_pps();
        self
    }
}

fn campus_frames() -> (FrameModel, f64) {
    let r = campus_reference();
    // Between the published points, two shape points of our own: QUIC and
    // tunnelled traffic makes frames of 1200-1306 bytes common, and most
    // frames of the top class are full 1514-byte frames. They bring the
    // mean frame to the published 1011 bytes without moving any published
    // point.
    let mut points = r.frame_size_cdf.clone();
    points.insert(4, (1200, 0.35));
    points.insert(7, (1513, 0.56));
    let cdf = EmpiricalCdf::new(60, &points, Interpolation::Linear);
    // Frames up to 102 bytes (a quarter of all) are ACKs and control packets.
    let small = r.frame_size_cdf[2].1;
    (
        FrameModel::Empirical {
            cdf,
            small_quantile: small,
        },
        small,
    )
}

fn campus_model(pps: f64, arrivals: f64, address_space: u8) -> Model {
    let r = campus_reference();
    let whole = EmpiricalCdf::new(1, &r.flow_size_cdf_whole_flows, Interpolation::Logarithmic);
    let (frames, small) = campus_frames();
    Model {
        arrivals,
        // Flows up to the 99.9th percentile arrive and leave; the top 0.1%
        // (the heavy flows) run through the whole trace.
        body_sizes: whole.truncated(HEAVY_BOUNDARY),
        tcp_share: 0.85,
        single_tcp_share: 0.5,
        duration_median_s: DURATION_MEDIAN_S,
        duration_sigma: DURATION_SIGMA,
        duration_max_s: 30.0,
        pps,
        heavy_count: HEAVY_FLOWS,
        heavy_top_pps: Some(r.largest_flow_packets as f64 / r.duration_s),
        heavy_protocol_udp_every: Some(7),
        heavy_timing: HeavyTiming::Trains { wobble: 0.12 },
        trains: CAMPUS_TRAINS,
        frames,
        small_frame_share: small,
        address_space,
    }
}

/// Flow size (packets) above which the published flows are heavy hitters.
const HEAVY_BOUNDARY: u64 = 4854;
/// Heavy flows running at once (0.1% of the campus flows are above the
/// boundary; about 600 of them overlap any moment).
const HEAVY_FLOWS: usize = 600;
/// Trains of the campus flows, calibrated to Reframer's measures of the
/// same campus's traffic (seed 002, `tests/locality_calibration.rs`):
/// per-flow batches of 1.9, 2.9 and 3.3 packets after 16, 64 and 128 µs of
/// buffering (its §5.1, Figure 12), a spatial locality factor of about 1.2
/// at each of 8 receive queues taking 30 trace windows (1 Mpps a queue;
/// §5.1), and 60–75% of a TCP flow's consecutive packets interleaved with
/// other packets in the raw trace (§3.1, Figure 7a). 2.75 packets a train on
/// average; gaps log-uniform from 0.15 µs (full frames back to back at
/// 80 Gb/s) to 60 µs (a 200 Mb/s bottleneck or pacer). Before this
/// calibration trains were 8 packets 2 µs apart: campus4 reached each of 8
/// cores with 2.1 packets of a flow back to back, 6.5 per 128 µs batch.
const CAMPUS_TRAINS: Trains = Trains {
    packets: 2.75,
    gap_ns: (150.0, 60_000.0),
};
/// Body flows last median × sqrt(size) seconds, log-normally spread.
const DURATION_MEDIAN_S: f64 = 1.8;
const DURATION_SIGMA: f64 = 1.2;

/// The traffic sources of `config`'s preset, each with its own seed.
fn sources(config: &GenConfig) -> Result<Vec<Source>, TraceError> {
    let seed_of = |i: usize| {
        config
            .seed
            .wrapping_mul(0x2545_f491_4f6c_dd1d)
            .wrapping_add(i as u64 + 1)
    };
    let rate = connection_rate(config)?;
    let flows = |models: Vec<Model>| {
        models
            .into_iter()
            .enumerate()
            .map(|(i, m)| Source::Flows(Box::new(Engine::new(m, seed_of(i)))))
            .collect()
    };
    let r = campus_reference();
    let frame_model = |default: Option<u16>| -> Result<Option<FrameModel>, TraceError> {
        match config.frame_size.or(default) {
            Some(size) if (60..=1514).contains(&size) => Ok(Some(FrameModel::Fixed(size))),
            Some(size) => Err(TraceError::InvalidOption(format!(
                "frame size must be between 60 and 1514 bytes, got {size}"
            ))),
            None => Ok(None),
        }
    };
    if config.flows.is_some() && !matches!(config.preset, Preset::UdpFlows | Preset::Elephants) {
        return Err(TraceError::InvalidOption(
            "--flows applies to the udp-flows and elephants presets".into(),
        ));
    }
    Ok(match config.preset {
        Preset::Campus => flows(vec![campus_model(r.pps, r.new_flows_end, 0)]),
        Preset::Campus4 => flows(
            (0..4)
                .map(|w| {
                    // Each window gets the campus arrival rate: the published
                    // campus4 new-flow rate at the end (26k/s, 6.5k per window)
                    // would leave 15% fewer active flows than its 77k/s.
                    campus_model(r.campus4_pps / 4.0, r.new_flows_end, w)
                })
                .collect(),
        ),
        Preset::UdpFlows => {
            let n = config.flows.unwrap_or(1024);
            check_flows(config, n)?;
            let mut m = campus_model(Preset::UdpFlows.nominal_pps(), 0.0, 0);
            m.heavy_count = n;
            m.heavy_top_pps = None;
            m.heavy_protocol_udp_every = Some(1);
            m.heavy_timing = HeavyTiming::Constant;
            m.frames = frame_model(Some(64))?.expect("a default size");
            flows(vec![m])
        }
        Preset::Elephants => {
            let n = config.flows.unwrap_or(4);
            check_flows(config, n)?;
            let mut m = campus_model(Preset::Elephants.nominal_pps(), 2_000.0, 0);
            m.heavy_count = n;
            m.heavy_top_pps = None;
            m.heavy_protocol_udp_every = None;
            if let Some(frames) = frame_model(None)? {
                m.frames = frames;
            }
            flows(vec![m])
        }
        Preset::ShortConnections => {
            vec![Source::Connections(Connections::new(rate, seed_of(0)))]
        }
    })
}

/// Most flows (`udp-flows`) or elephants (`elephants`) a generator keeps:
/// each costs about 150 bytes for the whole trace.
pub const MAX_FLOWS: usize = 10_000_000;

/// The longest trace generated, seconds (a day).
pub const MAX_DURATION_S: f64 = 86_400.0;

/// `n` flows must each be able to send a packet: at most the packets the
/// trace will hold (the flows are built up front, so a count far beyond
/// them would only cost memory), and at most [`MAX_FLOWS`].
fn check_flows(config: &GenConfig, n: usize) -> Result<(), TraceError> {
    if n == 0 {
        return Err(TraceError::InvalidOption(
            "--flows must be at least 1".into(),
        ));
    }
    if n > MAX_FLOWS {
        return Err(TraceError::InvalidOption(format!(
            "--flows must be at most {MAX_FLOWS}, got {n}"
        )));
    }
    let pps = config.nominal_pps() * config.speed;
    let packets = (pps * config.duration_s).ceil().max(1.0);
    if n as f64 > packets {
        return Err(TraceError::InvalidOption(format!(
            "--flows {n} is more than the {packets:.0} packets the trace holds \
             ({pps:.0} pps for {} s): each flow must send at least one; ask for \
             fewer flows, a longer duration or a higher rate",
            config.duration_s
        )));
    }
    Ok(())
}

/// The checked connection rate of `short-connections`; an error for any
/// option that preset does not take, or a rate for another preset.
fn connection_rate(config: &GenConfig) -> Result<f64, TraceError> {
    if config.preset != Preset::ShortConnections {
        return match config.connection_rate {
            Some(_) => Err(TraceError::InvalidOption(
                "--conn-rate applies to the short-connections preset".into(),
            )),
            None => Ok(0.0),
        };
    }
    if config.frame_size.is_some() {
        return Err(TraceError::InvalidOption(
            "--frame-size applies to the udp-flows and elephants presets".into(),
        ));
    }
    let rate = config.connection_rate.unwrap_or(connections::DEFAULT_RATE);
    if !(rate.is_finite() && rate > 0.0 && rate <= connections::MAX_RATE) {
        return Err(TraceError::InvalidOption(format!(
            "the connection rate must be positive and at most {} per second, got {rate}",
            connections::MAX_RATE
        )));
    }
    Ok(rate)
}

/// One traffic source of a generator.
enum Source {
    /// A population of flows (every preset but `short-connections`).
    Flows(Box<Engine>),
    /// Short TCP connections.
    Connections(Connections),
}

impl Source {
    fn window(&mut self, until_ns: f64, out: &mut Vec<GenPacket>) {
        match self {
            Source::Flows(e) => e.window(until_ns, out),
            Source::Connections(c) => c.window(until_ns, out),
        }
    }

    fn live_flows(&self) -> usize {
        match self {
            Source::Flows(e) => e.live_flows(),
            Source::Connections(c) => c.live_flows(),
        }
    }
}

/// Length of one generation step, in trace time.
const WINDOW_NS: f64 = 100_000_000.0;

/// Produces a trace window by window, in timestamp order, with memory
/// proportional to the live flows.
pub struct Generator {
    sources: Vec<Source>,
    speed: f64,
    start_ns: u64,
    /// Trace-time end of the trace.
    end_ns: f64,
    /// Trace time generated so far.
    done_ns: f64,
    batch: Vec<GenPacket>,
    /// The sort's second buffer.
    scratch: Vec<GenPacket>,
}

impl Generator {
    /// A generator for `config`.
    pub fn new(config: &GenConfig) -> Result<Self, TraceError> {
        if !(config.speed.is_finite() && config.speed > 0.0) {
            return Err(TraceError::InvalidOption(format!(
                "speed must be a positive number, got {}",
                config.speed
            )));
        }
        if !(config.duration_s.is_finite()
            && config.duration_s > 0.0
            && config.duration_s <= MAX_DURATION_S)
        {
            return Err(TraceError::InvalidOption(format!(
                "duration must be more than 0 and at most {MAX_DURATION_S} seconds, got {}",
                config.duration_s
            )));
        }
        Ok(Self {
            sources: sources(config)?,
            speed: config.speed,
            start_ns: config.start_ns,
            end_ns: (config.duration_s * config.speed * 1e9).round(),
            done_ns: 0.0,
            batch: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The next slice of packets in timestamp order; `None` at the end.
    pub fn next_batch(&mut self) -> Option<&[GenPacket]> {
        if self.done_ns >= self.end_ns {
            return None;
        }
        let until = (self.done_ns + WINDOW_NS).min(self.end_ns);
        self.batch.clear();
        for source in &mut self.sources {
            source.window(until, &mut self.batch);
        }
        self.done_ns = until;
        let (speed, start) = (self.speed, self.start_ns);
        for p in &mut self.batch {
            p.timestamp_ns = start + (p.timestamp_ns as f64 / speed) as u64;
        }
        sort_by_time(&mut self.batch, &mut self.scratch);
        Some(&self.batch)
    }

    /// Flows alive right now across all sources.
    pub fn live_flows(&self) -> usize {
        self.sources.iter().map(Source::live_flows).sum()
    }
}

/// Slices of a window's time span [`sort_by_time`] sorts one by one.
const TIME_SLICES: usize = 256;

/// Sorts `batch` by time, then by flow (source address and port,
/// destination address and port), then in the order given (a flow's packets
/// in the order it sent them). The packets are first dealt into slices of
/// the span by time, in order, then each slice is sorted, by time and
/// position packed in one number: a slice fits in the CPU's cache, the
/// whole window (several MB) does not. `scratch` is the second buffer.
fn sort_by_time(batch: &mut [GenPacket], scratch: &mut Vec<GenPacket>) {
    let Some(min) = batch.iter().map(|p| p.timestamp_ns).min() else {
        return;
    };
    let max = batch.iter().map(|p| p.timestamp_ns).max().unwrap_or(min);
    let time_bits = u64::BITS - (max - min).leading_zeros();
    let shift = time_bits.saturating_sub(TIME_SLICES.trailing_zeros());
    let slice = |p: &GenPacket| ((p.timestamp_ns - min) >> shift) as usize;
    let mut starts = [0usize; TIME_SLICES + 1];
    for p in batch.iter() {
        starts[slice(p) + 1] += 1;
    }
    for i in 1..=TIME_SLICES {
        starts[i] += starts[i - 1];
    }
    // Every slot is written below.
    scratch.resize(batch.len(), batch[0]);
    let mut next = starts;
    for p in batch.iter() {
        let s = slice(p);
        scratch[next[s]] = *p;
        next[s] += 1;
    }
    // Each slice by time and position, packed in one number, as the slice
    // is small: the time since the slice's start above its position.
    let mut keys = Vec::new();
    for w in starts.windows(2) {
        let (from, to) = (w[0], w[1]);
        let part = &scratch[from..to];
        let Some(first) = part.iter().map(|p| p.timestamp_ns).min() else {
            continue;
        };
        let last = part.iter().map(|p| p.timestamp_ns).max().unwrap_or(first);
        let index_bits = usize::BITS - part.len().leading_zeros();
        if u64::BITS - (last - first).leading_zeros() + index_bits > u64::BITS {
            // Too wide to pack (no window of this generator's).
            batch[from..to].copy_from_slice(part);
            batch[from..to].sort_by_key(|p| p.timestamp_ns);
            continue;
        }
        keys.clear();
        keys.extend(
            part.iter()
                .enumerate()
                .map(|(i, p)| ((p.timestamp_ns - first) << index_bits) | i as u64),
        );
        keys.sort_unstable();
        let mask = (1u64 << index_bits) - 1;
        for (slot, k) in batch[from..to].iter_mut().zip(&keys) {
            *slot = part[(k & mask) as usize];
        }
    }
    // Equal times, by flow.
    let mut i = 0;
    while i < batch.len() {
        let t = batch[i].timestamp_ns;
        let run = 1 + batch[i + 1..]
            .iter()
            .take_while(|p| p.timestamp_ns == t)
            .count();
        if run > 1 {
            batch[i..i + run].sort_by_key(|p| (p.src, p.sport, p.dst, p.dport));
        }
        i += run;
    }
}

/// Length of the headers [`build_frame`] writes for a packet.
pub fn header_len(p: &GenPacket) -> usize {
    if p.protocol == 6 {
        54
    } else {
        42
    }
}

fn checksum_add(mut sum: u32, bytes: &[u8]) -> u32 {
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    sum
}

fn checksum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes the Ethernet, IPv4 and TCP/UDP headers of `p` into `buf` and
/// returns their length. The payload is all zeros, so the checksums (which
/// a zero payload does not change) are correct for the whole frame.
pub fn build_frame(p: &GenPacket, buf: &mut [u8; 64]) -> usize {
    buf[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    buf[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    buf[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = p.wire_len - 14;
    let ip = &mut buf[14..34];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..6].copy_from_slice(&(p.seq as u16).to_be_bytes());
    ip[6..8].copy_from_slice(&[0x40, 0x00]);
    ip[8] = 64;
    ip[9] = p.protocol;
    ip[10..12].copy_from_slice(&[0, 0]);
    ip[12..16].copy_from_slice(&p.src.to_be_bytes());
    ip[16..20].copy_from_slice(&p.dst.to_be_bytes());
    let ip_sum = checksum_fold(checksum_add(0, ip));
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let l4_len = ip_len - 20;
    // Pseudo-header: addresses, protocol, L4 length.
    let mut pseudo = checksum_add(0, &buf[26..34]);
    pseudo += u32::from(p.protocol) + u32::from(l4_len);
    let l4 = &mut buf[34..];
    l4[0..2].copy_from_slice(&p.sport.to_be_bytes());
    l4[2..4].copy_from_slice(&p.dport.to_be_bytes());
    if p.protocol == 6 {
        l4[4..8].copy_from_slice(&p.seq.to_be_bytes());
        let ack = if p.tcp_flags & 0x10 != 0 {
            p.seq.rotate_left(16) ^ 0x5bd1_e995
        } else {
            0
        };
        l4[8..12].copy_from_slice(&ack.to_be_bytes());
        l4[12] = 5 << 4;
        l4[13] = p.tcp_flags;
        l4[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
        l4[16..20].copy_from_slice(&[0, 0, 0, 0]);
        let sum = checksum_fold(checksum_add(pseudo, &l4[..20]));
        l4[16..18].copy_from_slice(&sum.to_be_bytes());
        54
    } else {
        l4[4..6].copy_from_slice(&l4_len.to_be_bytes());
        l4[6..8].copy_from_slice(&[0, 0]);
        let mut sum = checksum_fold(checksum_add(pseudo, &l4[..8]));
        if sum == 0 {
            sum = 0xffff;
        }
        l4[6..8].copy_from_slice(&sum.to_be_bytes());
        42
    }
}

/// Highest packet rate [`PcapJob`] writes: just above the line rate of
/// 100 Gigabit Ethernet with minimum-size frames (148.8 Mpps). A faster
/// request is a typo, and would write gigabytes a second.
pub const MAX_FILE_PPS: f64 = 150e6;

/// A pcap to generate, every option checked: made before the output is
/// opened, so that a bad option never touches an existing file.
pub struct PcapJob {
    generator: Generator,
    snaplen: u32,
    precision: TimePrecision,
}

impl PcapJob {
    /// Checks the options (the generator's, the snaplen, the packet rate
    /// against [`MAX_FILE_PPS`]) and prepares the generator.
    pub fn new(
        config: &GenConfig,
        snaplen: u32,
        precision: TimePrecision,
    ) -> Result<Self, TraceError> {
        crate::write::check_snaplen(snaplen)?;
        let pps = config.nominal_pps() * config.speed;
        if pps > MAX_FILE_PPS {
            return Err(TraceError::InvalidOption(format!(
                "a packet rate of {pps:.0} pps is beyond the {MAX_FILE_PPS:.0} pps a trace \
                 file may have (100 Gb/s of 64-byte frames)"
            )));
        }
        Ok(Self {
            generator: Generator::new(config)?,
            snaplen,
            precision,
        })
    }

    /// Generates the whole trace into `out`; returns the packet count.
    pub fn write<W: Write>(mut self, out: W) -> Result<u64, TraceError> {
        let mut writer = PcapWriter::new(out, self.snaplen, self.precision)?;
        let mut frame = [0u8; 64];
        while let Some(batch) = self.generator.next_batch() {
            for p in batch {
                let n = build_frame(p, &mut frame);
                writer.write_frame(p.timestamp_ns, &frame[..n], u32::from(p.wire_len))?;
            }
        }
        let packets = writer.packets();
        writer.finish()?;
        Ok(packets)
    }
}

/// Generates the whole trace into a pcap stream; returns the packet count
/// ([`PcapJob`] in one call).
pub fn write_pcap<W: Write>(
    config: &GenConfig,
    out: W,
    snaplen: u32,
    precision: TimePrecision,
) -> Result<u64, TraceError> {
    PcapJob::new(config, snaplen, precision)?.write(out)
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    fn packet(timestamp_ns: u64, flow: u8, seq: u32) -> GenPacket {
        GenPacket {
            timestamp_ns,
            src: u32::from(flow % 3),
            dst: u32::from(flow / 3),
            sport: u16::from(flow % 2),
            dport: 80,
            protocol: 17,
            tcp_flags: 0,
            wire_len: 60,
            seq,
        }
    }

    proptest! {
        /// The radix sort gives what a stable sort by (time, flow) gives:
        /// time spans of one to 64 bits, ties in time across flows and
        /// within one.
        #[test]
        fn sort_by_time_is_a_stable_sort_by_time_then_flow(
            base in any::<u64>(),
            span_bits in 0u32..=64,
            packets in vec((any::<u64>(), 0u8..6), 0..400),
        ) {
            let span = u64::MAX.checked_shr(64 - span_bits).unwrap_or(0);
            let mut batch: Vec<GenPacket> = packets
                .iter()
                .enumerate()
                .map(|(i, &(t, flow))| {
                    // A few distinct times, so that ties are common.
                    let t = if t % 4 == 0 { t % 8 } else { t };
                    packet(base.saturating_add(t & span), flow, i as u32)
                })
                .collect();
            let mut want = batch.clone();
            want.sort_by_key(|p| (p.timestamp_ns, p.src, p.sport, p.dst, p.dport));
            sort_by_time(&mut batch, &mut Vec::new());
            prop_assert_eq!(batch, want);
        }
    }
}
