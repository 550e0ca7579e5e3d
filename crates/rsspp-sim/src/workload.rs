//! The packets a simulation is driven by: a built-in preset or a pcap,
//! replayed at a constant speed or along a rate profile, with flows numbered
//! compactly and hashed once for every policy.
//!
//! Memory is bounded by the flows alive within the flow timeout: a flow idle
//! for longer gives its number back, and the next new flow may reuse it (as a
//! new flow, with `seq` starting at 0 again).

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufReader, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rsspp_core::{FlowKey, Toeplitz};
use rsspp_trace::{FrameKind, GenConfig, Generator, Preset, ReadCounts, TraceReader};
use rustc_hash::{FxHashMap, FxHasher};

use crate::error::SimError;
use crate::packet::{mix32, Ns, SimPacket};

/// Where the packets come from.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceSource {
    /// A built-in generator preset (`campus`, `campus4`, `udp-flows`,
    /// `elephants`, `short-connections`).
    Preset {
        /// The preset.
        preset: Preset,
        /// `udp-flows`: number of flows; `elephants`: number of elephants.
        flows: Option<usize>,
        /// Fixed frame size, bytes.
        frame_size: Option<u16>,
    },
    /// A pcap or pcapng file.
    Pcap(PathBuf),
    /// A capture read from a stream (standard input), kept in a temporary
    /// file so that every run (pilot, main run, sweep, loop) reads it from
    /// its start.
    Spooled {
        /// The temporary file, removed with the last clone.
        spool: Arc<Spool>,
        /// What to call it in reports (`standard input`).
        name: String,
    },
}

/// A stream's bytes in a temporary file, removed on drop.
#[derive(Debug, PartialEq, Eq)]
pub struct Spool {
    path: PathBuf,
}

impl Spool {
    /// Copies `input` to its end into a new temporary file (in the system's
    /// temporary directory, `TMPDIR`).
    pub fn from_reader(mut input: impl Read) -> Result<Self, SimError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "rsspp-trace-{}-{}.spool",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let open_error = |e| SimError::Open {
            path: path.clone(),
            source: e,
        };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(open_error)?;
        // From here the file is ours: removed on every way out.
        let spool = Self { path };
        std::io::copy(&mut input, &mut file).map_err(SimError::Spool)?;
        Ok(spool)
    }

    /// The temporary file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl TraceSource {
    /// A preset with its default options.
    pub fn preset(preset: Preset) -> Self {
        TraceSource::Preset {
            preset,
            flows: None,
            frame_size: None,
        }
    }

    /// A short description for reports (`preset campus4`, `trace.pcap`).
    pub fn describe(&self) -> String {
        match self {
            TraceSource::Preset { preset, flows, .. } => {
                let name = match preset {
                    Preset::Campus => "campus",
                    Preset::Campus4 => "campus4",
                    Preset::UdpFlows => "udp-flows",
                    Preset::Elephants => "elephants",
                    Preset::ShortConnections => "short-connections",
                };
                match flows {
                    Some(n) => format!("preset {name} ({n} flows)"),
                    None => format!("preset {name}"),
                }
            }
            TraceSource::Pcap(path) => path.display().to_string(),
            TraceSource::Spooled { name, .. } => name.clone(),
        }
    }

    /// The capture file to read, for a capture.
    pub fn capture_path(&self) -> Option<&Path> {
        match self {
            TraceSource::Preset { .. } => None,
            TraceSource::Pcap(path) => Some(path),
            TraceSource::Spooled { spool, .. } => Some(spool.path()),
        }
    }

    /// The source's packet rate at speed 1, if known before reading it.
    pub fn nominal_pps(&self) -> Option<f64> {
        match self {
            TraceSource::Preset { preset, .. } => Some(preset.nominal_pps()),
            TraceSource::Pcap(_) | TraceSource::Spooled { .. } => None,
        }
    }
}

/// A replay rate that changes over time: `(simulated second, multiplier)`
/// points, linear in between, constant after the last point.
#[derive(Debug, Clone, PartialEq)]
pub struct RateProfile {
    points: Vec<(f64, f64)>,
}

impl RateProfile {
    /// A profile through `points` (times increasing from 0, multipliers > 0).
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self, SimError> {
        let bad = |why: &str| Err(SimError::InvalidOption(format!("rate profile: {why}")));
        if points.is_empty() {
            return bad("no points");
        }
        if points[0].0 != 0.0 {
            return bad("the first point must be at time 0");
        }
        for w in points.windows(2) {
            if w[1].0.partial_cmp(&w[0].0) != Some(std::cmp::Ordering::Greater) {
                return bad("times must increase");
            }
        }
        if points
            .iter()
            .any(|&(t, r)| !(t.is_finite() && r.is_finite() && r > 0.0))
        {
            return bad("multipliers must be positive numbers");
        }
        Ok(Self { points })
    }

    /// Constant speed.
    pub fn constant(speed: f64) -> Result<Self, SimError> {
        Self::new(vec![(0.0, speed)])
    }

    /// The RSS++ paper's Figure 11 shape over `duration_s`: the rate climbs
    /// from `low` to `high` during the first quarter, holds for a quarter,
    /// and falls back to `low` over the second half.
    pub fn ramp(duration_s: f64, low: f64, high: f64) -> Result<Self, SimError> {
        let d = duration_s;
        Self::new(vec![(0.0, low), (d / 4.0, high), (d / 2.0, high), (d, low)])
    }

    /// The multiplier at simulated time `t_s`.
    pub fn rate_at(&self, t_s: f64) -> f64 {
        let p = &self.points;
        match p.iter().position(|&(t, _)| t > t_s) {
            None => p[p.len() - 1].1,
            Some(0) => p[0].1,
            Some(i) => {
                let (t0, r0) = p[i - 1];
                let (t1, r1) = p[i];
                r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)
            }
        }
    }

    /// Trace seconds (at speed 1) replayed by simulated time `t_s`.
    pub fn trace_time(&self, t_s: f64) -> f64 {
        let mut done = 0.0;
        for (i, &(t0, r0)) in self.points.iter().enumerate() {
            let (t1, r1) = match self.points.get(i + 1) {
                Some(&(t1, r1)) => (t1, r1),
                None => return done + r0 * (t_s - t0),
            };
            if t_s <= t1 {
                let dt = t_s - t0;
                let k = (r1 - r0) / (t1 - t0);
                return done + r0 * dt + k * dt * dt / 2.0;
            }
            done += (r0 + r1) / 2.0 * (t1 - t0);
        }
        done
    }

    /// The simulated time at which trace second `tau` is replayed.
    fn sim_time(&self, tau: f64, segment: &mut usize, done: &mut f64) -> f64 {
        loop {
            let (t0, r0) = self.points[*segment];
            let Some(&(t1, r1)) = self.points.get(*segment + 1) else {
                return t0 + (tau - *done) / r0;
            };
            let span = (r0 + r1) / 2.0 * (t1 - t0);
            if tau <= *done + span {
                let left = tau - *done;
                let k = (r1 - r0) / (t1 - t0);
                let dt = if k.abs() < 1e-12 {
                    left / r0
                } else {
                    (-r0 + (r0 * r0 + 2.0 * k * left).max(0.0).sqrt()) / k
                };
                return t0 + dt;
            }
            *done += span;
            *segment += 1;
        }
    }
}

/// What to replay and how.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// The packets.
    pub source: TraceSource,
    /// Simulated seconds to run (a pcap ends earlier if it is shorter).
    pub duration_s: f64,
    /// Replay rate over time (1 = the source's own timing).
    pub rate: RateProfile,
    /// Seed of the generator presets.
    pub seed: u64,
    /// A flow idle for this long gives its number back.
    pub flow_timeout_ns: Ns,
    /// A capture: replay it again, its timestamps shifted by its span and
    /// one mean gap between packets, as many times as the duration needs.
    pub repeat: bool,
    /// A capture: stop at a corrupt record before its end, keeping the
    /// packets before it, instead of failing.
    pub keep_partial: bool,
}

impl WorkloadConfig {
    /// `source` for `duration_s` at constant `speed`.
    pub fn new(source: TraceSource, duration_s: f64, speed: f64) -> Result<Self, SimError> {
        if !(duration_s.is_finite() && duration_s > 0.0 && duration_s <= 86_400.0) {
            return Err(SimError::InvalidOption(format!(
                "duration must be between 0 and 86400 seconds, got {duration_s}"
            )));
        }
        if !(speed.is_finite() && speed > 0.0) {
            return Err(SimError::InvalidOption(format!(
                "replay speed must be a positive number, got {speed}"
            )));
        }
        Ok(Self {
            source,
            duration_s,
            rate: RateProfile::constant(speed)?,
            seed: 1,
            flow_timeout_ns: 5_000_000_000,
            repeat: false,
            keep_partial: false,
        })
    }
}

/// Counters of what the workload read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadCounts {
    /// Packets handed to the simulation.
    pub packets: u64,
    /// Frames skipped: not IP, or malformed (a pcap only).
    pub skipped: u64,
    /// Distinct flow incarnations seen.
    pub flows: u64,
    /// Most flow numbers in use at once.
    pub peak_live_flows: usize,
    /// A capture that ended before the duration: the simulated time of its
    /// last packet.
    pub ran_out_at_ns: Option<Ns>,
    /// Passes through a capture (more than 1 when it was repeated).
    pub passes: u64,
    /// What the capture's reader left out (the last pass's).
    pub reader: ReadCounts,
}

/// The flow fields a packet is identified by (either family).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct CompactKey {
    src: u128,
    dst: u128,
    ports: u32,
    proto: u8,
}

/// A [`CompactKey`] whose addresses fit in 32 bits (every IPv4 flow):
/// 16 bytes instead of 48, so that the flow table, the reading thread's
/// main cost, takes half the host's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct NarrowKey {
    addrs: u64,
    ports: u32,
    proto: u8,
}

impl CompactKey {
    fn narrow(&self) -> Option<NarrowKey> {
        let src = u32::try_from(self.src).ok()?;
        let dst = u32::try_from(self.dst).ok()?;
        Some(NarrowKey {
            addrs: (u64::from(src) << 32) | u64::from(dst),
            ports: self.ports,
            proto: self.proto,
        })
    }
}

/// The flows numbered now, by their fields: a key decides the table it
/// goes in, so a flow is in one of them.
#[derive(Debug, Default)]
struct LiveFlows {
    narrow: FxHashMap<NarrowKey, FlowSlot>,
    wide: FxHashMap<CompactKey, FlowSlot>,
}

impl LiveFlows {
    fn len(&self) -> usize {
        self.narrow.len() + self.wide.len()
    }

    /// `key`'s slot, made by `new` if it has none.
    fn slot(&mut self, key: CompactKey, new: impl FnOnce() -> FlowSlot) -> &mut FlowSlot {
        match key.narrow() {
            Some(narrow) => self.narrow.entry(narrow).or_insert_with(new),
            None => self.wide.entry(key).or_insert_with(new),
        }
    }

    /// Keeps the slots `keep` says to keep.
    fn retain(&mut self, mut keep: impl FnMut(&FlowSlot) -> bool) {
        self.narrow.retain(|_, slot| keep(slot));
        self.wide.retain(|_, slot| keep(slot));
    }
}

#[derive(Debug, Clone, Copy)]
struct FlowSlot {
    id: u32,
    next_seq: u32,
    last_ns: Ns,
    salt: u32,
    class_key: u32,
}

fn fold(a: u128) -> u32 {
    (a as u32) ^ ((a >> 32) as u32) ^ ((a >> 64) as u32) ^ ((a >> 96) as u32)
}

fn addr_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

enum Input {
    Generator {
        generator: Box<Generator>,
        start_ns: u64,
    },
    Pcap {
        reader: Box<TraceReader<'static>>,
        path: PathBuf,
        /// Timestamp of the first usable packet of a pass.
        first_ns: Option<u64>,
        /// Trace time added to this pass's packets.
        shift_ns: u64,
        /// The latest trace time (relative to `first_ns`) of this pass.
        pass_end_ns: u64,
        /// Usable packets of this pass.
        pass_packets: u64,
        repeat: bool,
        keep_partial: bool,
    },
}

/// Opens a capture for reading.
fn open_capture(path: &Path, keep_partial: bool) -> Result<TraceReader<'static>, SimError> {
    let file = File::open(path).map_err(|e| SimError::Open {
        path: path.to_path_buf(),
        source: e,
    })?;
    let reader = TraceReader::new(BufReader::with_capacity(1 << 20, file)).map_err(|e| {
        SimError::TraceFile {
            path: path.to_path_buf(),
            source: e,
        }
    })?;
    Ok(reader.keep_partial(keep_partial))
}

/// Streams the simulation's packets window by window.
pub struct Workload {
    input: Input,
    numbering: Numbering,
    finished: bool,
    description: String,
}

/// Turns (trace time, flow fields) into simulated packets: the replay
/// clock, flow numbers and the RSS hash.
struct Numbering {
    rate: RateProfile,
    end_ns: Ns,
    toeplitz: Toeplitz,
    flows: LiveFlows,
    free_ids: Vec<u32>,
    next_id: u32,
    flow_timeout_ns: Ns,
    next_sweep_ns: Ns,
    last_ns: Ns,
    segment: usize,
    segment_done: f64,
    counts: WorkloadCounts,
}

/// Packets read per call from a pcap.
const PCAP_BATCH: usize = 65_536;

impl Workload {
    /// Opens the source.
    pub fn open(config: &WorkloadConfig) -> Result<Self, SimError> {
        let trace_s = config.rate.trace_time(config.duration_s);
        let input = match &config.source {
            TraceSource::Preset {
                preset,
                flows,
                frame_size,
            } => {
                let mut gen = GenConfig::new(*preset);
                gen.duration_s = trace_s.max(1e-6);
                gen.seed = config.seed;
                gen.flows = *flows;
                gen.frame_size = *frame_size;
                Input::Generator {
                    generator: Box::new(Generator::new(&gen).map_err(SimError::Trace)?),
                    start_ns: gen.start_ns,
                }
            }
            TraceSource::Pcap(_) | TraceSource::Spooled { .. } => {
                let path = config.source.capture_path().expect("a capture");
                Input::Pcap {
                    reader: Box::new(open_capture(path, config.keep_partial)?),
                    path: path.to_path_buf(),
                    first_ns: None,
                    shift_ns: 0,
                    pass_end_ns: 0,
                    pass_packets: 0,
                    repeat: config.repeat,
                    keep_partial: config.keep_partial,
                }
            }
        };
        Ok(Self {
            input,
            numbering: Numbering {
                rate: config.rate.clone(),
                end_ns: (config.duration_s * 1e9) as Ns,
                toeplitz: Toeplitz::default(),
                flows: LiveFlows::default(),
                free_ids: Vec::new(),
                next_id: 0,
                flow_timeout_ns: config.flow_timeout_ns.max(1),
                next_sweep_ns: 1_000_000_000,
                last_ns: 0,
                segment: 0,
                segment_done: 0.0,
                counts: WorkloadCounts {
                    passes: 1,
                    ..WorkloadCounts::default()
                },
            },
            finished: false,
            description: config.source.describe(),
        })
    }

    /// What was read so far.
    pub fn counts(&self) -> WorkloadCounts {
        self.numbering.counts
    }

    /// The source, described for reports.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Flow numbers in use now.
    pub fn live_flows(&self) -> usize {
        self.numbering.flows.len()
    }

    /// One flow number past the largest ever handed out: per-flow arrays
    /// indexed by flow number never need to be longer.
    pub fn flow_id_bound(&self) -> u32 {
        self.numbering.next_id
    }

    /// Appends the next window of packets (in time order) to `out`; returns
    /// false once the workload is over.
    pub fn next_batch(&mut self, out: &mut Vec<SimPacket>) -> Result<bool, SimError> {
        if self.finished {
            return Ok(false);
        }
        match &mut self.input {
            Input::Generator {
                generator,
                start_ns,
            } => {
                let Some(batch) = generator.next_batch() else {
                    self.finished = true;
                    return Ok(false);
                };
                let numbering = &mut self.numbering;
                for p in batch {
                    let key = CompactKey {
                        src: u128::from(p.src),
                        dst: u128::from(p.dst),
                        ports: (u32::from(p.sport) << 16) | u32::from(p.dport),
                        proto: p.protocol,
                    };
                    let hash = numbering.toeplitz.hash_ipv4(
                        p.src.to_be_bytes(),
                        p.dst.to_be_bytes(),
                        p.sport,
                        p.dport,
                    );
                    let trace_ns = p.timestamp_ns.saturating_sub(*start_ns);
                    if !numbering.push(out, key, hash, trace_ns, p.wire_len, p.tcp_flags) {
                        self.finished = true;
                        break;
                    }
                }
            }
            Input::Pcap {
                reader,
                path,
                first_ns,
                shift_ns,
                pass_end_ns,
                pass_packets,
                repeat,
                keep_partial,
            } => {
                let mut records = Vec::with_capacity(PCAP_BATCH);
                while records.len() < PCAP_BATCH {
                    match reader.next_record() {
                        Ok(Some(r)) => records.push(r),
                        Ok(None) => break,
                        Err(e) => {
                            return Err(SimError::TraceFile {
                                path: path.clone(),
                                source: e,
                            })
                        }
                    }
                }
                let numbering = &mut self.numbering;
                if records.is_empty() {
                    numbering.counts.reader = reader.counts();
                    if *repeat && *pass_packets > 0 {
                        // Next pass: shifted by the span and one mean gap,
                        // so that the seam looks like the rest.
                        if *pass_end_ns == 0 {
                            return Err(SimError::NoPeriod);
                        }
                        let gap = *pass_end_ns / pass_packets.saturating_sub(1).max(1);
                        *shift_ns += *pass_end_ns + gap.max(1);
                        **reader = open_capture(path, *keep_partial)?;
                        *first_ns = None;
                        *pass_end_ns = 0;
                        *pass_packets = 0;
                        numbering.counts.passes += 1;
                        return Ok(true);
                    }
                    numbering.counts.ran_out_at_ns = Some(numbering.last_ns);
                    self.finished = true;
                    return Ok(!out.is_empty());
                }
                for r in records {
                    let flow = match (r.kind, r.flow) {
                        (FrameKind::Ip, Some(flow)) => flow,
                        _ => {
                            numbering.counts.skipped += 1;
                            continue;
                        }
                    };
                    let first = *first_ns.get_or_insert(r.timestamp_ns);
                    let key = compact(&flow);
                    let hash = numbering.toeplitz.hash_flow(&flow);
                    let in_pass = r.timestamp_ns.saturating_sub(first).max(*pass_end_ns);
                    *pass_end_ns = in_pass;
                    *pass_packets += 1;
                    let wire = r.wire_len.min(u32::from(u16::MAX)) as u16;
                    let trace_ns = *shift_ns + in_pass;
                    if !numbering.push(out, key, hash, trace_ns, wire, r.tcp_flags) {
                        self.finished = true;
                        break;
                    }
                }
            }
        }
        Ok(!out.is_empty() || !self.finished)
    }
}

impl Numbering {
    /// Numbers the packet's flow and appends it; false once past the end.
    fn push(
        &mut self,
        out: &mut Vec<SimPacket>,
        key: CompactKey,
        hash: u32,
        trace_ns: u64,
        wire_len: u16,
        tcp_flags: u8,
    ) -> bool {
        let t = self.rate.sim_time(
            trace_ns as f64 / 1e9,
            &mut self.segment,
            &mut self.segment_done,
        );
        // Captures are not always in time order: never go back in time.
        let now = ((t * 1e9).max(0.0) as Ns).max(self.last_ns);
        if now >= self.end_ns {
            return false;
        }
        self.last_ns = now;
        if now >= self.next_sweep_ns {
            self.sweep(now);
        }
        let (free_ids, next_id, counts) = (&mut self.free_ids, &mut self.next_id, &mut self.counts);
        let slot = self.flows.slot(key, || {
            let id = free_ids.pop().unwrap_or_else(|| {
                *next_id += 1;
                *next_id - 1
            });
            let mut h = FxHasher::default();
            key.hash(&mut h);
            let salt = mix32(h.finish() as u32 ^ (h.finish() >> 32) as u32);
            let class_key = mix32(fold(key.src) ^ mix32(fold(key.dst)));
            counts.flows += 1;
            FlowSlot {
                id,
                next_seq: 0,
                last_ns: now,
                salt,
                class_key,
            }
        });
        let seq = slot.next_seq;
        slot.next_seq = slot.next_seq.wrapping_add(1);
        slot.last_ns = now;
        out.push(SimPacket {
            arrival_ns: now,
            ready_ns: now,
            flow: slot.id,
            seq,
            hash,
            class_key: slot.class_key,
            salt: slot.salt,
            wire_len,
            tcp_flags,
            proto: key.proto,
        });
        self.counts.packets += 1;
        self.counts.peak_live_flows = self.counts.peak_live_flows.max(self.flows.len());
        true
    }

    /// Gives back the numbers of flows idle for the timeout.
    fn sweep(&mut self, now: Ns) {
        let timeout = self.flow_timeout_ns;
        let free = &mut self.free_ids;
        self.flows.retain(|slot| {
            let keep = now.saturating_sub(slot.last_ns) < timeout;
            if !keep {
                free.push(slot.id);
            }
            keep
        });
        // Reuse low numbers first: per-flow arrays stay dense.
        free.sort_unstable_by(|a, b| b.cmp(a));
        self.next_sweep_ns = now + 1_000_000_000;
    }
}

/// What a capture holds, read once before a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaptureScan {
    /// Packets the simulation can use (IP, their flow identified).
    pub packets: u64,
    /// Trace time from the first usable packet to the last, each packet
    /// taken no earlier than the one before it (as they are replayed), ns.
    pub span_ns: u64,
    /// What the reader left out.
    pub reader: ReadCounts,
}

impl CaptureScan {
    /// Trace time one pass lasts: the span and one mean gap between
    /// packets (the shift of each repetition); 0 for a capture of one
    /// instant.
    pub fn period_ns(&self) -> u64 {
        if self.span_ns == 0 {
            return 0;
        }
        self.span_ns + (self.span_ns / self.packets.saturating_sub(1).max(1)).max(1)
    }
}

/// A gap is a wild timestamp when it is this share of the capture's span
/// at least…
const WILD_SHARE: f64 = 0.9;
/// …at least this long…
const WILD_MIN_NS: u64 = 1_000_000_000;
/// …and this many times the mean of the other gaps.
const WILD_RATIO: f64 = 1_000.0;

/// Reads the capture of `config` (`None` for a preset) through once: its
/// usable packets and span, and the problems that would make a simulation
/// of it meaningless, found before anything runs: a corrupt record (unless
/// `keep_partial`), one gap that takes most of the capture's time (a wild
/// timestamp), most packets out of order.
pub fn scan_capture(config: &WorkloadConfig) -> Result<Option<CaptureScan>, SimError> {
    let Some(path) = config.source.capture_path() else {
        return Ok(None);
    };
    let mut reader = open_capture(path, config.keep_partial)?;
    let (mut packets, mut frame, mut behind) = (0u64, 0u64, 0u64);
    let (mut first, mut last) = (None, 0u64);
    // The largest gap and the frame after it.
    let (mut gap, mut gap_frame) = (0u64, 0u64);
    loop {
        let record = match reader.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                return Err(SimError::TraceFile {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        };
        frame += 1;
        if record.kind != FrameKind::Ip || record.flow.is_none() {
            continue;
        }
        let first = *first.get_or_insert(record.timestamp_ns);
        let t = record.timestamp_ns.saturating_sub(first);
        packets += 1;
        if t < last || (record.timestamp_ns < first && packets > 1) {
            behind += 1;
            continue;
        }
        if packets > 1 && t - last > gap {
            gap = t - last;
            gap_frame = frame;
        }
        last = t;
    }
    let span_ns = last;
    if packets >= 3 && behind * 2 > packets {
        return Err(SimError::OutOfOrder {
            path: path.to_path_buf(),
            behind,
            packets,
        });
    }
    if packets >= 3 && gap >= WILD_MIN_NS && gap as f64 >= WILD_SHARE * span_ns as f64 {
        let others = packets - 2;
        let other_mean = (span_ns - gap) as f64 / others.max(1) as f64;
        if gap as f64 > WILD_RATIO * other_mean.max(1_000.0) {
            return Err(SimError::WildTimestamp {
                path: path.to_path_buf(),
                frame: gap_frame,
                gap_ns: gap,
                span_ns,
                others,
                other_mean_gap_ns: other_mean as u64,
            });
        }
    }
    Ok(Some(CaptureScan {
        packets,
        span_ns,
        reader: reader.counts(),
    }))
}

fn compact(flow: &FlowKey) -> CompactKey {
    let ports = flow
        .ports
        .map(|(s, d)| (u32::from(s) << 16) | u32::from(d))
        .unwrap_or(0);
    CompactKey {
        src: addr_bits(flow.src),
        dst: addr_bits(flow.dst),
        ports,
        proto: flow.protocol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_round_trips_between_trace_and_sim_time() {
        let p = RateProfile::ramp(8.0, 0.5, 2.0).unwrap();
        assert!((p.rate_at(0.0) - 0.5).abs() < 1e-12);
        assert!((p.rate_at(3.0) - 2.0).abs() < 1e-12);
        assert!((p.rate_at(6.0) - 1.25).abs() < 1e-12);
        let (mut seg, mut done) = (0, 0.0);
        for i in 0..=80 {
            let t = i as f64 * 0.1;
            let tau = p.trace_time(t);
            let back = p.sim_time(tau, &mut seg, &mut done);
            assert!((back - t).abs() < 1e-9, "t {t} tau {tau} back {back}");
        }
    }

    #[test]
    fn constant_speed_compresses_time() {
        let p = RateProfile::constant(4.0).unwrap();
        assert!((p.trace_time(2.0) - 8.0).abs() < 1e-12);
    }

    #[test]
    fn bad_profiles_are_refused() {
        assert!(RateProfile::new(vec![]).is_err());
        assert!(RateProfile::new(vec![(1.0, 1.0)]).is_err());
        assert!(RateProfile::new(vec![(0.0, 1.0), (0.0, 2.0)]).is_err());
        assert!(RateProfile::new(vec![(0.0, 0.0)]).is_err());
        assert!(WorkloadConfig::new(TraceSource::preset(Preset::Campus), 0.0, 1.0).is_err());
        assert!(WorkloadConfig::new(TraceSource::preset(Preset::Campus), 1.0, -1.0).is_err());
    }

    #[test]
    fn flows_are_numbered_and_sequenced() {
        let source = TraceSource::Preset {
            preset: Preset::UdpFlows,
            flows: Some(16),
            frame_size: None,
        };
        let config = WorkloadConfig::new(source, 0.01, 0.1).unwrap();
        let mut w = Workload::open(&config).unwrap();
        let mut all = Vec::new();
        let mut batch = Vec::new();
        while w.next_batch(&mut batch).unwrap() {
            all.append(&mut batch);
        }
        assert!(!all.is_empty());
        assert!(all.windows(2).all(|p| p[0].arrival_ns <= p[1].arrival_ns));
        assert!(all.iter().all(|p| p.arrival_ns < 10_000_000));
        let mut next = [0u32; 16];
        for p in &all {
            assert!(p.flow < 16);
            assert_eq!(p.seq, next[p.flow as usize]);
            next[p.flow as usize] += 1;
        }
        assert_eq!(w.counts().flows, 16);
        assert_eq!(w.counts().packets, all.len() as u64);
    }

    #[test]
    fn same_seed_same_packets() {
        let run = || {
            let config =
                WorkloadConfig::new(TraceSource::preset(Preset::Campus), 0.05, 1.0).unwrap();
            let mut w = Workload::open(&config).unwrap();
            let mut all = Vec::new();
            while w.next_batch(&mut all).unwrap() {}
            all
        };
        assert_eq!(run(), run());
    }

    /// A 100-packet capture: 4 UDP flows at 1000 packets/s for 0.1 s.
    fn small_capture(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "rsspp-sim-workload-{}-{name}.pcap",
            std::process::id()
        ));
        let mut gen = GenConfig::new(Preset::UdpFlows);
        gen.flows = Some(4);
        gen.duration_s = 0.1;
        gen = gen.with_pps(1000.0);
        let file = File::create(&path).unwrap();
        rsspp_trace::generate::write_pcap(&gen, file, 64, rsspp_trace::TimePrecision::Nano)
            .unwrap();
        path
    }

    #[test]
    fn a_repeated_capture_is_shifted_by_its_period() {
        let path = small_capture("loop");
        let mut config = WorkloadConfig::new(TraceSource::Pcap(path.clone()), 0.35, 1.0).unwrap();
        let scan = scan_capture(&config).unwrap().unwrap();
        assert_eq!(scan.packets, 100);
        assert_eq!(scan.span_ns, 99_000_000);
        assert_eq!(scan.period_ns(), 100_000_000);
        // Once: the capture runs out after its last packet.
        let mut w = Workload::open(&config).unwrap();
        let mut all = Vec::new();
        while w.next_batch(&mut all).unwrap() {}
        assert_eq!(all.len(), 100);
        assert_eq!(w.counts().ran_out_at_ns, Some(99_000_000));
        // Repeated: 3.5 passes, each 100 ms after the one before.
        config.repeat = true;
        let mut w = Workload::open(&config).unwrap();
        let mut all = Vec::new();
        while w.next_batch(&mut all).unwrap() {}
        assert_eq!(all.len(), 350);
        assert_eq!(w.counts().passes, 4);
        assert_eq!(w.counts().ran_out_at_ns, None);
        assert!(all.windows(2).all(|p| p[0].arrival_ns < p[1].arrival_ns));
        for k in 0..3 {
            assert_eq!(all[100 * k].arrival_ns, 100_000_000 * k as u64);
        }
        // A flow continues across passes: its sequence numbers go on.
        assert_eq!(all[100].flow, all[0].flow);
        assert_eq!(all[100].seq, all[0].seq + 25);
        std::fs::remove_file(path).unwrap();
    }
}
