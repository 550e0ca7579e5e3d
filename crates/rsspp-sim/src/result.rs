//! What a simulation run produces: the summary row of the comparison table,
//! time series for the report, and the latency distribution.

use serde::{Deserialize, Serialize};

use crate::mechanisms::Mechanisms;

/// The comparison table's row for one policy.
///
/// Two rows are equal when every field is, a statistic without samples
/// (NaN) equal to another without samples: the same run gives equal rows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PolicySummary {
    /// Median over 1-second samples of (max − min) / min packets per queue,
    /// in percent (the RSS++ paper's Figure 12 metric). Only cores that were
    /// active during the whole sample count. Infinite (`null` in JSON) when
    /// in most samples some core processed nothing while others worked;
    /// NaN (`null` in JSON, with no `imbalance_samples`) when the run had
    /// no full second to sample. The latencies, load and cycles are NaN
    /// too when no packet was processed.
    pub imbalance_median: f64,
    /// Latency (queueing + service), microseconds, 50th percentile.
    pub latency_p50_us: f64,
    /// 95th percentile.
    pub latency_p95_us: f64,
    /// 99th percentile.
    pub latency_p99_us: f64,
    /// Packets dropped (full receive or software queue, full migration buffer).
    pub drops: u64,
    /// Packets that finished before an earlier packet of their flow.
    pub reordered: u64,
    /// State migrations: buckets (rsspp), flows (orss), flow groups and stolen
    /// connections (affinity-accept), class splits (metron).
    pub migrations: u64,
    /// Average number of processing cores in use (a dispatching core counts).
    pub avg_cores: f64,
    /// Packets offered to the system.
    pub packets: u64,
    /// Packets processed to completion.
    pub processed: u64,
    /// Average load of the cores in use (busy / (busy + idle)).
    pub avg_load: f64,
    /// Average cycles spent per processed packet.
    pub cycles_per_packet: f64,
    /// Counters of the mechanisms: the policy's own (steals, buffered
    /// packets, …), the state accesses, Reframer flushes.
    pub mechanisms: Mechanisms,
}

impl PartialEq for PolicySummary {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
        same(self.imbalance_median, other.imbalance_median)
            && same(self.latency_p50_us, other.latency_p50_us)
            && same(self.latency_p95_us, other.latency_p95_us)
            && same(self.latency_p99_us, other.latency_p99_us)
            && self.drops == other.drops
            && self.reordered == other.reordered
            && self.migrations == other.migrations
            && same(self.avg_cores, other.avg_cores)
            && self.packets == other.packets
            && self.processed == other.processed
            && same(self.avg_load, other.avg_load)
            && same(self.cycles_per_packet, other.cycles_per_packet)
            && self.mechanisms == other.mechanisms
    }
}

/// Per-interval series (one sample per control interval, 100 ms by default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Length of one sample, milliseconds.
    pub interval_ms: u32,
    /// Busy fraction per core, `[sample][core]`; 0 for a core not in use.
    pub load: Vec<Vec<f32>>,
    /// Receive-queue length per core at the end of each sample, `[sample][core]`.
    pub queue: Vec<Vec<u32>>,
    /// Processing cores in use per sample.
    pub active_cores: Vec<u16>,
    /// Whether each core was in use, `[sample][core]` (dispatching cores
    /// always are): tells an idle core in use from one a scaling policy
    /// switched off, which both have load 0. Empty in results written
    /// before it existed, meaning every core was in use.
    #[serde(default)]
    pub active: Vec<Vec<bool>>,
    /// Packets dropped per sample.
    pub drops: Vec<u64>,
    /// Packets offered per second during each sample.
    pub offered_pps: Vec<f64>,
}

/// Everything one policy's run produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// The policy's name (`rss`, `rsspp`, …; `+reframer` appended when the
    /// Reframer stage ran in front of it).
    pub name: String,
    /// The table row.
    pub summary: PolicySummary,
    /// Time series.
    pub timeline: Timeline,
    /// The 1-second imbalance samples the median is taken over, percent.
    pub imbalance_samples: Vec<f64>,
    /// Latency CDF: `(microseconds, fraction of packets at or below)`, a few
    /// hundred points, increasing in both.
    pub latency_cdf: Vec<(f64, f64)>,
}

/// One point of a load sweep.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Policy name.
    pub policy: String,
    /// Requested average core load (the replay speed is set from it).
    pub offered_load: f64,
    /// Measured average load of the cores in use.
    pub avg_load: f64,
    /// Packets offered.
    pub packets: u64,
    /// Packets dropped.
    pub drops: u64,
    /// 95th-percentile latency, microseconds.
    pub latency_p95_us: f64,
}

/// A whole comparison: the workload, the settings, and one result per policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Where the packets came from (`preset campus4`, a pcap path, …).
    pub workload: String,
    /// Processing cores simulated.
    pub cores: usize,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Requested average core load.
    pub target_load: f64,
    /// Core clock, GHz.
    pub clock_ghz: f64,
    /// Seed of the run.
    pub seed: u64,
    /// One result per policy, in the order asked for.
    pub policies: Vec<PolicyResult>,
    /// Load sweep (empty unless asked for).
    pub sweep: Vec<SweepPoint>,
    /// What the reader should know about the workload (a capture that ran
    /// out, was repeated, or was read in part).
    #[serde(default)]
    pub caveats: Vec<Caveat>,
}

/// Something about the workload that qualifies the results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Caveat {
    /// The capture ended before the duration: the results cover less.
    TraceRanOut {
        /// Simulated time of its last packet, seconds.
        at_s: f64,
        /// Seconds asked for.
        duration_s: f64,
    },
    /// The capture was replayed more than once.
    Repeated {
        /// Passes through it (the last one possibly partial).
        passes: u64,
    },
    /// The capture was read up to a corrupt record.
    Partial {
        /// Byte offset of the corrupt record.
        offset: u64,
        /// Packets read before it.
        packets: u64,
        /// Bytes left out.
        skipped_bytes: u64,
    },
    /// The capture's last record is cut short and was left out.
    CutShort {
        /// Bytes left out.
        skipped_bytes: u64,
    },
}

impl std::fmt::Display for Caveat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caveat::TraceRanOut { at_s, duration_s } => write!(
                f,
                "the trace ran out at {at_s:.3} s of the {duration_s} s asked: the results cover {at_s:.3} s"
            ),
            Caveat::Repeated { passes } => {
                write!(f, "the trace was replayed {passes} times, its timestamps shifted")
            }
            Caveat::Partial {
                offset,
                packets,
                skipped_bytes,
            } => write!(
                f,
                "the capture is corrupt at byte {offset}: only the {packets} packets before it were replayed ({skipped_bytes} bytes skipped)"
            ),
            Caveat::CutShort { skipped_bytes } => write!(
                f,
                "the capture's last record is cut short ({skipped_bytes} bytes left out)"
            ),
        }
    }
}
