//! Trace analysis: volumes, flow-size and frame-size distributions, active
//! and new flows per second, heavy hitters, and Reframer's locality
//! measures (§3 of the Reframer paper): the spatial and temporal distance
//! between consecutive packets of a TCP flow, the spatial locality factor,
//! and the per-flow batches a given buffering time would build.

use std::collections::BTreeMap;

use rsspp_core::FlowKey;
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::read::ReadCounts;
use crate::record::{FrameKind, PacketRecord};

const NS_PER_S: u64 = 1_000_000_000;
/// Largest per-flow batch, as a DPDK burst (Reframer assumes 32).
pub const MAX_BATCH: usize = 32;
/// Buffering times analysed at most.
pub const MAX_BUFFERS: usize = 4;

/// Analysis options.
#[derive(Debug, Clone)]
pub struct StatsConfig {
    /// Buffering times (µs) for the per-flow batch analysis (at most 4).
    pub buffer_us: Vec<u64>,
    /// Heavy hitters listed.
    pub top: usize,
}

impl Default for StatsConfig {
    fn default() -> Self {
        Self {
            buffer_us: vec![8, 32, 128],
            top: 10,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Batch {
    start_ns: u64,
    len: u8,
}

#[derive(Debug, Clone)]
struct FlowState {
    packets: u64,
    bytes: u64,
    last_ns: u64,
    last_index: u64,
    window: u32,
    window_packets: u32,
    batches: [Batch; MAX_BUFFERS],
}

/// Accumulates statistics one record at a time.
pub struct TraceStats {
    config: StatsConfig,
    buffer_ns: Vec<u64>,
    packets: u64,
    bytes: u64,
    kinds: [u64; 3],
    fragments: u64,
    vlan_tagged: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    frame_sizes: Vec<u64>,
    flows: FxHashMap<FlowKey, FlowState>,
    /// Histogram of per-window flow sizes (packets → flow-windows).
    window_sizes: BTreeMap<u32, u64>,
    /// Per-second counts, sparse: a capture with a wild timestamp must not
    /// allocate a second for every second in between.
    active: BTreeMap<u32, u64>,
    new: BTreeMap<u32, u64>,
    spatial: [u64; 66],
    temporal: [u64; 66],
    tcp_gaps: u64,
    runs: u64,
    run_packets: u64,
    previous: Option<FlowKey>,
    batch_hist: Vec<[u64; MAX_BATCH + 1]>,
    out_of_order: u64,
}

/// A cumulative distribution: `[value, fraction of items <= value]`.
pub type Cdf = Vec<(u64, f64)>;

/// Per-second counts.
#[derive(Debug, Clone, Serialize)]
pub struct PerSecond {
    /// Mean over the full seconds.
    pub mean: f64,
    /// Smallest full second.
    pub min: u64,
    /// Largest full second.
    pub max: u64,
    /// First full second after the first (the first second counts every
    /// flow already in progress when the capture started as new).
    pub start: u64,
    /// Last full second.
    pub end: u64,
    /// Every second, the last one possibly partial (left empty for captures
    /// longer than [`MAX_SERIES_SECONDS`]).
    pub series: Vec<u64>,
}

/// A heavy hitter.
#[derive(Debug, Clone, Serialize)]
pub struct HeavyHitter {
    /// The flow.
    pub flow: String,
    /// Its packets.
    pub packets: u64,
    /// Its bytes (on the wire).
    pub bytes: u64,
    /// Its share of all packets.
    pub packet_share: f64,
}

/// Per-flow batching with a buffering time.
#[derive(Debug, Clone, Serialize)]
pub struct Batching {
    /// Buffering time, µs.
    pub buffer_us: u64,
    /// Batches built.
    pub batches: u64,
    /// Mean packets per batch.
    pub mean_batch: f64,
    /// Mean size of the batch a packet is in.
    pub packet_weighted_mean_batch: f64,
    /// Fraction of batches of at most n packets.
    pub batch_size_cdf: Cdf,
}

/// Reframer's locality measures.
#[derive(Debug, Clone, Serialize)]
pub struct Locality {
    /// Pairs of consecutive packets of one TCP flow.
    pub tcp_gaps: u64,
    /// Fraction of those pairs with at least one other packet between them.
    pub interleaved_fraction: f64,
    /// Fraction of pairs with at most n packets between them.
    pub spatial_distance_cdf: Cdf,
    /// Fraction of pairs less than x µs apart.
    pub temporal_distance_cdf_us: Cdf,
    /// Average number of packets of one flow arriving back to back (all IP
    /// packets).
    pub spatial_locality_factor: f64,
    /// Per-flow batches for each buffering time (up to 32 packets).
    pub batching: Vec<Batching>,
}

/// The analysis result.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    /// All frames.
    pub packets: u64,
    /// Wire bytes of all frames.
    pub bytes: u64,
    /// IP packets whose flow was identified.
    pub ip_packets: u64,
    /// Frames without IP.
    pub non_ip_packets: u64,
    /// IP frames cut short or inconsistent before the transport ports.
    pub malformed_packets: u64,
    /// IP fragments (keyed on addresses only).
    pub fragments: u64,
    /// Frames with at least one VLAN tag.
    pub vlan_tagged: u64,
    /// The last record is cut short (a capture stopped mid-write); it was
    /// left out.
    pub truncated_tail: bool,
    /// Where the capture stopped being readable, when it was read with
    /// [`TraceReader::keep_partial`](crate::TraceReader::keep_partial)
    /// (`null`: it was read to its end).
    pub corrupt_record: Option<crate::read::CorruptRecord>,
    /// Bytes left out: from the corrupt record to the end, or the part of
    /// a last record that is cut short.
    pub skipped_bytes: u64,
    /// Records the reader could not place.
    pub skipped_records: u64,
    /// Records whose captured length exceeded the original length.
    pub inconsistent_lengths: u64,
    /// Packets whose timestamp is earlier than the previous packet's.
    pub out_of_order_timestamps: u64,
    /// From the first to the last timestamp, seconds.
    pub duration_s: f64,
    /// Packets per second over the duration.
    pub pps: f64,
    /// Gigabits per second of frame bytes (Ethernet header included).
    pub gbps: f64,
    /// Mean frame size.
    pub avg_packet_bytes: f64,
    /// Distinct directional TCP/UDP 5-tuples.
    pub flows: u64,
    /// Fraction of flows of at most n packets.
    pub flow_size_cdf: Cdf,
    /// The same, counting each flow once per 1-second window it is seen in
    /// with its packets of that window.
    pub flow_size_cdf_per_1s_window: Cdf,
    /// Share of packets carried by flows of at most n packets.
    pub packet_share_by_flow_size: Cdf,
    /// Fraction of frames of at most n bytes.
    pub frame_size_cdf: Cdf,
    /// TCP/UDP flows seen in each second.
    pub active_flows_per_s: PerSecond,
    /// TCP/UDP flows first seen in each second.
    pub new_flows_per_s: PerSecond,
    /// Largest flows by packets.
    pub heavy_hitters: Vec<HeavyHitter>,
    /// Average back-to-back run of one flow (see [`Locality`]).
    pub spatial_locality_factor: f64,
    /// Reframer's locality measures.
    pub locality: Locality,
}

/// Flow sizes reported in the CDFs (the published campus points, then
/// decades).
pub const FLOW_SIZE_POINTS: &[u64] = &[
    1, 2, 3, 4, 5, 8, 9, 10, 12, 15, 20, 23, 30, 31, 36, 50, 61, 98, 184, 239, 397, 1127, 1510,
    4854, 10_000, 100_000, 1_000_000,
];
/// Frame sizes reported in the CDF.
pub const FRAME_SIZE_POINTS: &[u64] = &[60, 64, 66, 102, 128, 256, 512, 1024, 1306, 1474, 1514];

fn log2_bucket(x: u64) -> usize {
    (64 - x.leading_zeros()) as usize
}

fn cdf_of_sorted(sorted: &[u64], points: &[u64]) -> Cdf {
    let n = sorted.len() as f64;
    if sorted.is_empty() {
        return Vec::new();
    }
    let max = *sorted.last().expect("not empty");
    let mut out: Cdf = points
        .iter()
        .filter(|&&p| p < max)
        .map(|&p| (p, sorted.partition_point(|&s| s <= p) as f64 / n))
        .collect();
    out.push((max, 1.0));
    out
}

/// Longest per-second series reported in full (about 11 days).
pub const MAX_SERIES_SECONDS: u32 = 1_000_000;

fn cdf_of_histogram(hist: &BTreeMap<u32, u64>, points: &[u64]) -> Cdf {
    let total: u64 = hist.values().sum();
    let Some((&max, _)) = hist.last_key_value() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut acc = 0;
    let mut entries = hist.iter().peekable();
    for &p in points.iter().filter(|&&p| p < u64::from(max)) {
        while let Some((&size, &count)) = entries.peek() {
            if u64::from(size) > p {
                break;
            }
            acc += count;
            entries.next();
        }
        out.push((p, acc as f64 / total as f64));
    }
    out.push((u64::from(max), 1.0));
    out
}

fn per_second(counts: &BTreeMap<u32, u64>, windows: u32, last_partial: bool) -> PerSecond {
    let full = if last_partial && windows > 1 {
        windows - 1
    } else {
        windows
    };
    let get = |w: u32| counts.get(&w).copied().unwrap_or(0);
    let in_full = counts.range(..full);
    let (mut sum, mut seen, mut min, mut max) = (0u64, 0u32, u64::MAX, 0u64);
    for (_, &c) in in_full {
        sum += c;
        seen += 1;
        min = min.min(c);
        max = max.max(c);
    }
    if seen < full {
        min = 0; // some second had none
    }
    let steady_start = if full > 1 { 1 } else { 0 };
    PerSecond {
        mean: if full == 0 {
            0.0
        } else {
            sum as f64 / f64::from(full)
        },
        min: if full == 0 { 0 } else { min },
        max,
        start: get(steady_start),
        end: if full == 0 { 0 } else { get(full - 1) },
        series: if windows <= MAX_SERIES_SECONDS {
            (0..windows).map(get).collect()
        } else {
            Vec::new()
        },
    }
}

impl TraceStats {
    /// An empty accumulator.
    pub fn new(mut config: StatsConfig) -> Self {
        config.buffer_us.truncate(MAX_BUFFERS);
        let buffers = config.buffer_us.len();
        Self {
            buffer_ns: config.buffer_us.iter().map(|us| us * 1_000).collect(),
            config,
            packets: 0,
            bytes: 0,
            kinds: [0; 3],
            fragments: 0,
            vlan_tagged: 0,
            first_ns: None,
            last_ns: 0,
            frame_sizes: vec![0; 65_536],
            flows: FxHashMap::default(),
            window_sizes: BTreeMap::new(),
            active: BTreeMap::new(),
            new: BTreeMap::new(),
            spatial: [0; 66],
            temporal: [0; 66],
            tcp_gaps: 0,
            runs: 0,
            run_packets: 0,
            previous: None,
            batch_hist: vec![[0; MAX_BATCH + 1]; buffers],
            out_of_order: 0,
        }
    }

    /// Adds one packet.
    pub fn observe(&mut self, r: &PacketRecord) {
        let index = self.packets;
        self.packets += 1;
        self.bytes += u64::from(r.wire_len);
        self.frame_sizes[r.wire_len.min(65_535) as usize] += 1;
        if r.vlan.is_some() {
            self.vlan_tagged += 1;
        }
        let first = *self.first_ns.get_or_insert(r.timestamp_ns);
        if r.timestamp_ns < self.last_ns {
            self.out_of_order += 1;
        }
        let ts = r.timestamp_ns.max(self.last_ns);
        self.last_ns = ts;
        let kind = match r.kind {
            FrameKind::Ip => 0,
            FrameKind::NonIp => 1,
            FrameKind::Malformed => 2,
        };
        self.kinds[kind] += 1;
        let Some(key) = r.flow.filter(|_| r.kind == FrameKind::Ip) else {
            self.previous = None;
            return;
        };
        if r.fragment {
            self.fragments += 1;
        }
        // Spatial locality factor: runs of consecutive packets of one flow.
        if self.previous != Some(key) {
            self.runs += 1;
            self.previous = Some(key);
        }
        self.run_packets += 1;

        let window = ((ts - first) / NS_PER_S) as u32;
        let transport = key.ports.is_some();
        let tcp = transport && key.protocol == 6;
        let buffers = self.buffer_ns.len();
        match self.flows.get_mut(&key) {
            Some(f) => {
                if tcp {
                    self.tcp_gaps += 1;
                    self.spatial[log2_bucket(index - f.last_index - 1)] += 1;
                    self.temporal[log2_bucket((ts - f.last_ns) / 1_000)] += 1;
                }
                if f.window != window {
                    if transport {
                        *self.window_sizes.entry(f.window_packets).or_default() += 1;
                        bump(&mut self.active, window);
                    }
                    f.window = window;
                    f.window_packets = 0;
                }
                f.window_packets += 1;
                f.packets += 1;
                f.bytes += u64::from(r.wire_len);
                f.last_ns = ts;
                f.last_index = index;
                for (b, (hist, &buffer)) in f
                    .batches
                    .iter_mut()
                    .zip(self.batch_hist.iter_mut().zip(&self.buffer_ns))
                {
                    if ts - b.start_ns < buffer && usize::from(b.len) < MAX_BATCH {
                        b.len += 1;
                    } else {
                        hist[usize::from(b.len)] += 1;
                        *b = Batch {
                            start_ns: ts,
                            len: 1,
                        };
                    }
                }
            }
            None => {
                if transport {
                    bump(&mut self.active, window);
                    bump(&mut self.new, window);
                }
                let mut batches = [Batch::default(); MAX_BUFFERS];
                for b in batches.iter_mut().take(buffers) {
                    *b = Batch {
                        start_ns: ts,
                        len: 1,
                    };
                }
                self.flows.insert(
                    key,
                    FlowState {
                        packets: 1,
                        bytes: u64::from(r.wire_len),
                        last_ns: ts,
                        last_index: index,
                        window,
                        window_packets: 1,
                        batches,
                    },
                );
            }
        }
    }

    /// Adds the reader's counters and computes the report.
    pub fn finish(mut self, counts: ReadCounts) -> TraceReport {
        let duration_ns = self.first_ns.map_or(0, |f| self.last_ns - f);
        let duration_s = duration_ns as f64 / 1e9;
        let mut sizes: Vec<u64> = Vec::new();
        let mut top: Vec<(u64, u64, FlowKey)> = Vec::new();
        for (key, f) in &self.flows {
            for (b, hist) in f.batches.iter().zip(self.batch_hist.iter_mut()) {
                hist[usize::from(b.len)] += 1;
            }
            if key.ports.is_none() {
                continue;
            }
            sizes.push(f.packets);
            *self.window_sizes.entry(f.window_packets).or_default() += 1;
            top.push((f.packets, f.bytes, *key));
        }
        sizes.sort_unstable();
        top.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
        top.truncate(self.config.top);

        let flow_packets: u64 = sizes.iter().sum();
        let mut share = Vec::new();
        if flow_packets > 0 {
            let mut acc = 0u64;
            let mut i = 0;
            let max = sizes.last().copied().unwrap_or(0);
            for &p in FLOW_SIZE_POINTS.iter().filter(|&&p| p < max) {
                while i < sizes.len() && sizes[i] <= p {
                    acc += sizes[i];
                    i += 1;
                }
                share.push((p, acc as f64 / flow_packets as f64));
            }
            share.push((max, 1.0));
        }

        let mut frame_cdf = Vec::new();
        let max_frame = self.frame_sizes.iter().rposition(|&c| c > 0).unwrap_or(0) as u64;
        if self.packets > 0 {
            let mut acc = 0u64;
            let mut next = 0usize;
            for &p in FRAME_SIZE_POINTS.iter().filter(|&&p| p < max_frame) {
                while next as u64 <= p {
                    acc += self.frame_sizes[next];
                    next += 1;
                }
                frame_cdf.push((p, acc as f64 / self.packets as f64));
            }
            frame_cdf.push((max_frame, 1.0));
        }

        let bucket_cdf = |hist: &[u64; 66], upper: &dyn Fn(usize) -> u64| -> Cdf {
            let total: u64 = hist.iter().sum();
            if total == 0 {
                return Vec::new();
            }
            let last = hist.iter().rposition(|&c| c > 0).unwrap_or(0);
            let mut acc = 0;
            (0..=last)
                .map(|b| {
                    acc += hist[b];
                    (upper(b), acc as f64 / total as f64)
                })
                .collect()
        };
        // Bucket b holds distances d with 2^(b-1) <= d < 2^b (b = 0: d = 0).
        let spatial_cdf = bucket_cdf(&self.spatial, &|b| if b == 0 { 0 } else { (1u64 << b) - 1 });
        let temporal_cdf = bucket_cdf(&self.temporal, &|b| 1u64 << b);
        let interleaved = if self.tcp_gaps > 0 {
            1.0 - self.spatial[0] as f64 / self.tcp_gaps as f64
        } else {
            0.0
        };
        let slf = if self.runs > 0 {
            self.run_packets as f64 / self.runs as f64
        } else {
            0.0
        };
        let batching = self
            .config
            .buffer_us
            .iter()
            .zip(&self.batch_hist)
            .map(|(&buffer_us, hist)| {
                let batches: u64 = hist.iter().sum();
                let packets: u64 = hist.iter().enumerate().map(|(k, &c)| k as u64 * c).sum();
                let squares: u64 = hist
                    .iter()
                    .enumerate()
                    .map(|(k, &c)| (k * k) as u64 * c)
                    .sum();
                let mut acc = 0;
                let cdf = [1usize, 2, 4, 8, 16, 32]
                    .iter()
                    .map(|&k| {
                        acc += hist[(k / 2 + 1).min(k)..=k].iter().sum::<u64>();
                        (k as u64, acc as f64 / batches.max(1) as f64)
                    })
                    .collect();
                Batching {
                    buffer_us,
                    batches,
                    mean_batch: packets as f64 / batches.max(1) as f64,
                    packet_weighted_mean_batch: squares as f64 / packets.max(1) as f64,
                    batch_size_cdf: cdf,
                }
            })
            .collect();
        let last_partial = duration_ns % NS_PER_S != 0;
        let windows = if self.packets > 0 {
            (duration_ns / NS_PER_S) as u32 + 1
        } else {
            0
        };
        TraceReport {
            packets: self.packets,
            bytes: self.bytes,
            ip_packets: self.kinds[0],
            non_ip_packets: self.kinds[1],
            malformed_packets: self.kinds[2],
            fragments: self.fragments,
            vlan_tagged: self.vlan_tagged,
            truncated_tail: counts.truncated_tail,
            corrupt_record: counts.corrupt,
            skipped_bytes: counts.skipped_bytes,
            skipped_records: counts.skipped_records,
            inconsistent_lengths: counts.inconsistent_lengths,
            out_of_order_timestamps: self.out_of_order,
            duration_s,
            pps: if duration_s > 0.0 {
                self.packets as f64 / duration_s
            } else {
                0.0
            },
            gbps: if duration_s > 0.0 {
                self.bytes as f64 * 8.0 / duration_s / 1e9
            } else {
                0.0
            },
            avg_packet_bytes: self.bytes as f64 / self.packets.max(1) as f64,
            flows: sizes.len() as u64,
            flow_size_cdf: cdf_of_sorted(&sizes, FLOW_SIZE_POINTS),
            flow_size_cdf_per_1s_window: cdf_of_histogram(&self.window_sizes, FLOW_SIZE_POINTS),
            packet_share_by_flow_size: share,
            frame_size_cdf: frame_cdf,
            active_flows_per_s: per_second(&self.active, windows, last_partial),
            new_flows_per_s: per_second(&self.new, windows, last_partial),
            heavy_hitters: top
                .into_iter()
                .map(|(packets, bytes, key)| HeavyHitter {
                    flow: key.to_string(),
                    packets,
                    bytes,
                    packet_share: packets as f64 / self.packets.max(1) as f64,
                })
                .collect(),
            spatial_locality_factor: slf,
            locality: Locality {
                tcp_gaps: self.tcp_gaps,
                interleaved_fraction: interleaved,
                spatial_distance_cdf: spatial_cdf,
                temporal_distance_cdf_us: temporal_cdf,
                spatial_locality_factor: slf,
                batching,
            },
        }
    }
}

fn bump(series: &mut BTreeMap<u32, u64>, window: u32) {
    *series.entry(window).or_default() += 1;
}

/// Reads a whole capture and analyses it.
pub fn analyse(
    reader: &mut crate::read::TraceReader<'_>,
    config: StatsConfig,
) -> Result<TraceReport, crate::error::TraceError> {
    let mut stats = TraceStats::new(config);
    while let Some(record) = reader.next_record()? {
        stats.observe(&record);
    }
    Ok(stats.finish(reader.counts()))
}

/// Table size of [`QueueLocality`]'s indirection table (the simulator's
/// default).
pub const QUEUE_TABLE_SIZE: usize = 512;

/// The spatial locality factor each receive queue sees behind static RSS:
/// packets hashed with Toeplitz (the Microsoft key), bucket = hash mod a
/// 512-entry table, bucket i → queue i mod N, as the simulator's `rss`
/// policy spreads them. Reframer measures its baseline's SLF at the cores
/// (seed 002 §5.1: ~1.2 with 8 queues, ~2.5 with 500), where a flow's
/// packets are mixed with one queue's share of the traffic only.
pub struct QueueLocality {
    hasher: rsspp_core::toeplitz::Toeplitz,
    previous: Vec<Option<FlowKey>>,
    packets: u64,
    runs: u64,
}

impl QueueLocality {
    /// An accumulator for `queues` receive queues (at least one).
    pub fn new(queues: usize) -> Self {
        Self {
            hasher: rsspp_core::toeplitz::Toeplitz::default(),
            previous: vec![None; queues.max(1)],
            packets: 0,
            runs: 0,
        }
    }

    /// Adds one packet; frames without a flow are left out (they reach no
    /// queue by their hash).
    pub fn observe(&mut self, r: &PacketRecord) {
        let Some(key) = r.flow.filter(|_| r.kind == FrameKind::Ip) else {
            return;
        };
        let bucket = rsspp_core::toeplitz::bucket_of(self.hasher.hash_flow(&key), QUEUE_TABLE_SIZE);
        let queue = bucket % self.previous.len();
        self.packets += 1;
        if self.previous[queue] != Some(key) {
            self.runs += 1;
            self.previous[queue] = Some(key);
        }
    }

    /// Packets of one flow back to back at a queue, on average (`None`
    /// before the first packet).
    pub fn spatial_locality_factor(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.packets as f64 / self.runs as f64)
    }
}
