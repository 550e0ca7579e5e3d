//! What the workers measure: a latency histogram (log-linear: 8 buckets
//! per power of two, so a percentile is within 12.5%) and the run's
//! summary.

use std::time::Duration;

use serde::Serialize;

use crate::program::SelectCounts;

const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
const SLOTS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Counts of durations, in nanoseconds, by log-linear bucket.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; SLOTS],
            total: 0,
            max_ns: 0,
        }
    }
}

fn slot(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let m = 63 - v.leading_zeros();
    (((m - SUB_BITS + 1) as usize) << SUB_BITS) + ((v >> (m - SUB_BITS)) as usize & (SUB - 1))
}

/// The largest value of slot `i`.
fn upper(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let m = (i >> SUB_BITS) as u32 + SUB_BITS - 1;
    let sub = (i & (SUB - 1)) as u64;
    let low = (SUB as u64 + sub) << (m - SUB_BITS);
    low.saturating_add((1u64 << (m - SUB_BITS)) - 1)
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[slot(ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Durations counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile (0 < q ≤ 1), as its bucket's upper bound; zero
    /// when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(upper(i).min(self.max_ns));
            }
        }
        Duration::from_nanos(self.max_ns)
    }

    /// The summary: percentiles and the non-empty buckets, in µs.
    pub fn summary(&self) -> LatencySummary {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        LatencySummary {
            count: self.total,
            p50_us: us(self.quantile(0.50)),
            p90_us: us(self.quantile(0.90)),
            p99_us: us(self.quantile(0.99)),
            p999_us: us(self.quantile(0.999)),
            max_us: self.max_ns as f64 / 1e3,
            buckets: self
                .counts
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| HistogramBucket {
                    le_us: upper(i) as f64 / 1e3,
                    count: c,
                })
                .collect(),
        }
    }
}

/// One bucket of the histogram: durations up to `le_us`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HistogramBucket {
    /// Upper bound, µs.
    pub le_us: f64,
    /// Requests in the bucket.
    pub count: u64,
}

/// Percentiles of a latency histogram, µs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Requests measured.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// The non-empty buckets.
    pub buckets: Vec<HistogramBucket>,
}

/// One worker's counts over the run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerSummary {
    /// The worker's CPU.
    pub cpu: usize,
    /// Connections it accepted (its own listener's and stolen ones).
    pub accepted: u64,
    /// Of those, taken from another core's listener.
    pub stolen: u64,
    /// Connections it accepted whose packets the kernel last processed on
    /// its own CPU (`SO_INCOMING_CPU` at accept).
    pub local: u64,
    /// Connections for which the kernel had no incoming CPU.
    pub incoming_unknown: u64,
    /// Connections of other cores' listeners stolen from it.
    pub stolen_from: u64,
    /// Requests answered.
    pub requests: u64,
    /// Malformed requests (answered 400, connection closed).
    pub bad_requests: u64,
    /// Share of the run it spent outside epoll_wait.
    pub busy: f64,
}

/// The run's summary (`rsspp serve --json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Whether the sk_reuseport program placed connections.
    pub affinity: bool,
    /// Where the table came from: "own", "daemon", or "none" (affinity off).
    pub table: String,
    /// Buckets in the table (0 with affinity off).
    pub table_size: usize,
    /// Accept queue length of each listener.
    pub backlog: u32,
    /// Seconds the server ran.
    pub seconds: f64,
    /// Per worker, in `--cpus` order.
    pub workers: Vec<WorkerSummary>,
    /// Connections accepted.
    pub connections: u64,
    /// Connections stolen from another core's queue.
    pub stolen: u64,
    /// Share of the connections (with a known incoming CPU) whose packets
    /// were processed on the CPU of the worker that served them.
    pub local_share: f64,
    /// Requests answered.
    pub requests: u64,
    /// Requests answered per second.
    pub requests_per_s: f64,
    /// Server-side latency of a request: from the read that completed it
    /// to its response being written (work included).
    pub latency: LatencySummary,
    /// How the program placed connections (affinity on).
    pub select: Option<SelectCounts>,
    /// Controller rounds that ran on steal reports (own table).
    pub control_rounds: u64,
    /// Buckets the controller moved (own table).
    pub buckets_moved: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_contiguous_and_bound_their_values() {
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            100,
            1_000,
            123_456,
            1 << 40,
            u64::MAX,
        ] {
            let s = slot(v);
            assert!(upper(s) >= v, "{v} above slot {s}'s bound {}", upper(s));
            if s > 0 {
                assert!(upper(s - 1) < v, "{v} belongs below slot {s}");
            }
        }
    }

    #[test]
    fn quantiles_within_an_eighth() {
        let mut h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let p99 = h.quantile(0.99).as_secs_f64() * 1e6;
        assert!((990.0..=990.0 * 1.125).contains(&p99), "p99 {p99}");
        let p50 = h.quantile(0.5).as_secs_f64() * 1e6;
        assert!((500.0..=500.0 * 1.125).contains(&p50), "p50 {p50}");
        assert_eq!(h.count(), 1000);
    }
}
