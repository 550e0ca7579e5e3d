//! `rsspp nf`'s metrics: the daemon's exporter (rsspp-linux's snapshot,
//! series names and HTTP server), filled by the controller after each
//! round, so that Prometheus and `rsspp top` read a runtime exactly as they
//! read a daemon.
//!
//! What each series means here: a CPU is a worker's CPU; its load is the
//! worker's busy time over busy + idle; its packets are the frames its
//! worker took from its ring; its drops are the worker's, by reason, and
//! the kernel's before its ring (`ring_full`); a bucket's packets are those
//! the fanout program steered; the table maps each bucket to its worker's
//! CPU; a migration is a bucket moved (rebalancing or `--churn`); the
//! imbalance is over the packets of the workers that own buckets.

use std::net::SocketAddr;
use std::time::Duration;

use rsspp_core::handoff::HandoffTotals;
use rsspp_core::IndirectionTable;
use rsspp_linux::metrics::{
    BucketMetrics, CpuMetrics, MetricsServer, MetricsSnapshot, ReframerMetrics, SharedMetrics,
};
use rsspp_linux::service::BUCKET_METRICS_AUTO_MAX;

use crate::error::RuntimeError;
use crate::runtime::Backend;
use crate::worker::LiveCounts;

/// The mode label of `rsspp_info`: the backend.
pub fn mode(backend: Backend) -> &'static str {
    match backend {
        Backend::AfPacket => "afpacket",
        Backend::AfXdp => "afxdp",
    }
}

/// What a round measured, for the snapshot.
#[derive(Debug)]
pub(crate) struct RoundFigures<'a> {
    /// Each worker's CPU.
    pub cpus: &'a [u32],
    /// Each worker's load over the round.
    pub loads: &'a [f64],
    /// Each worker's counts as last published.
    pub counts: &'a [LiveCounts],
    /// Packets steered into each bucket since the start.
    pub bucket_totals: &'a [u64],
    /// The table after the round (bucket → worker).
    pub table: &'a IndirectionTable,
    /// Imbalance of the round's per-worker packets.
    pub imbalance: f64,
    /// Buckets moved since the start.
    pub migrations: u64,
    /// Rounds run since the start.
    pub rounds: u64,
    /// The control loop's current interval.
    pub interval: Duration,
    /// What the round took (counters read, plan made and executed).
    pub took: Duration,
    /// Buckets moved whose old worker has not let them go yet.
    pub handoffs_pending: usize,
    /// Handoffs completed, by how.
    pub handoffs: HandoffTotals,
    /// Per-flow overrides in use and elephants moved since the start
    /// (`None`: no overrides).
    pub overrides: Option<(usize, u64)>,
}

/// Drop reasons that are kinds of frames outside the buckets, exported as
/// `rsspp_packets_total{kind}` too.
const KINDS: [&str; 2] = ["not_ip", "malformed"];

/// Fills `s` from a round.
pub(crate) fn fill(s: &mut MetricsSnapshot, f: &RoundFigures<'_>) {
    s.cpus = f
        .cpus
        .iter()
        .zip(f.loads)
        .zip(f.counts)
        .map(|((&cpu, &load), c)| {
            let mut dropped = c.dropped.clone();
            dropped.entry("ring_full".into()).or_insert(0);
            CpuMetrics {
                cpu,
                load,
                packets_total: c.received,
                dropped: dropped.into_iter().collect(),
            }
        })
        .collect();
    s.packets_by_kind = KINDS
        .iter()
        .map(|&kind| {
            let n = f
                .counts
                .iter()
                .map(|c| c.dropped.get(kind).copied().unwrap_or(0))
                .sum();
            (kind, n)
        })
        .collect();
    s.buckets.clear();
    if f.bucket_totals.len() <= BUCKET_METRICS_AUTO_MAX {
        s.buckets.extend(
            f.bucket_totals
                .iter()
                .enumerate()
                .map(|(b, &packets_total)| BucketMetrics {
                    packets_total,
                    cpu: f.cpus[f.table.core_of(b)],
                }),
        );
    }
    s.imbalance_ratio = f.imbalance;
    s.migrations_total = f.migrations;
    s.rounds_total = f.rounds;
    s.interval_seconds = f.interval.as_secs_f64();
    s.rebalance_seconds.observe_duration(f.took);
    s.handoffs_pending = f.handoffs_pending;
    s.handoffs = f.handoffs;
    s.reframer = reframer(f.counts);
    s.overrides = f.overrides.map(|(n, _)| n);
    s.elephants_moved_total = f.overrides.map_or(0, |(_, m)| m);
}

/// The workers' Reframer stages summed (`None`: no stage); SLF over all
/// workers' frames, as the summary's.
fn reframer(counts: &[LiveCounts]) -> Option<ReframerMetrics> {
    let mut total: Option<ReframerMetrics> = None;
    let (mut packets, mut runs) = ((0u64, 0u64), (0u64, 0u64));
    for (r, held) in counts.iter().filter_map(|c| c.reframer.as_ref()) {
        let t = total.get_or_insert_with(ReframerMetrics::default);
        let c = &r.counts;
        t.buffered_total += c.buffered;
        t.held += held;
        t.flush_timeout += c.flush_timeout;
        t.flush_burst += c.flush_burst;
        t.flush_bypass += c.flush_bypass;
        t.flush_early += c.flush_early;
        packets.0 += c.packets_in;
        packets.1 += c.packets_out;
        runs.0 += r.key_runs_in;
        runs.1 += r.key_runs_out;
    }
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    total.map(|mut t| {
        t.slf_in = ratio(packets.0, runs.0);
        t.slf_out = ratio(packets.1, runs.1);
        t
    })
}

/// The served snapshot.
#[derive(Debug)]
pub(crate) struct Exporter {
    shared: SharedMetrics,
    server: MetricsServer,
}

impl Exporter {
    /// Serves an empty snapshot of `iface` at `addr` (before anything is
    /// attached: a busy port costs nothing).
    pub(crate) fn start(
        addr: SocketAddr,
        iface: &str,
        backend: Backend,
    ) -> Result<Self, RuntimeError> {
        let shared = SharedMetrics::new(MetricsSnapshot::new(iface, mode(backend)));
        let server = MetricsServer::start(addr, shared.clone())?;
        Ok(Self { shared, server })
    }

    /// The address served (the actual port when 0 was asked for).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Publishes a round.
    pub(crate) fn publish(&self, f: &RoundFigures<'_>) {
        self.shared.update(|s| fill(s, f));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reframe::ReframerReport;
    use rsspp_core::reframer::ReframerCounts;
    use rsspp_linux::metrics::{names, render};

    #[test]
    fn a_round_fills_the_daemons_series() {
        let table = IndirectionTable::equal(64, 2).unwrap();
        let mut a = LiveCounts {
            received: 100,
            ..LiveCounts::default()
        };
        a.dropped.insert("sink".into(), 90);
        a.dropped.insert("not_ip".into(), 10);
        let stage = |packets: u64, runs_in: u64, runs_out: u64, timeout: u64| ReframerReport {
            counts: ReframerCounts {
                packets_in: packets,
                packets_out: packets,
                buffered: packets,
                flush_timeout: timeout,
                flush_early: 1,
                ..ReframerCounts::default()
            },
            key_runs_in: runs_in,
            key_runs_out: runs_out,
        };
        a.reframer = Some((stage(90, 60, 10, 9), 4));
        let b = LiveCounts {
            received: 7,
            reframer: Some((stage(10, 10, 2, 1), 0)),
            ..LiveCounts::default()
        };
        let mut s = MetricsSnapshot::new("veth1", mode(Backend::AfPacket));
        fill(
            &mut s,
            &RoundFigures {
                cpus: &[3, 5],
                loads: &[0.5, 0.25],
                counts: &[a, b],
                bucket_totals: &(1..=64).collect::<Vec<u64>>(),
                table: &table,
                imbalance: 0.5,
                migrations: 6,
                rounds: 9,
                interval: Duration::from_millis(100),
                took: Duration::from_micros(30),
                handoffs_pending: 1,
                handoffs: HandoffTotals {
                    drained: 5,
                    idle: 0,
                    forced: 0,
                },
                overrides: Some((2, 7)),
            },
        );
        let text = render(&s);
        for line in [
            "rsspp_info{iface=\"veth1\",mode=\"afpacket\"} 1",
            "rsspp_cpu_load{iface=\"veth1\",cpu=\"3\"} 0.5",
            "rsspp_cpu_packets_total{iface=\"veth1\",cpu=\"5\"} 7",
            "rsspp_dropped_packets_total{iface=\"veth1\",cpu=\"3\",reason=\"sink\"} 90",
            "rsspp_dropped_packets_total{iface=\"veth1\",cpu=\"5\",reason=\"ring_full\"} 0",
            "rsspp_packets_total{iface=\"veth1\",kind=\"not_ip\"} 10",
            "rsspp_bucket_packets_total{iface=\"veth1\",bucket=\"3\"} 4",
            "rsspp_imbalance_ratio{iface=\"veth1\"} 0.5",
            "rsspp_migrations_total{iface=\"veth1\"} 6",
            "rsspp_rounds_total{iface=\"veth1\"} 9",
            "rsspp_handoffs_pending{iface=\"veth1\"} 1",
            "rsspp_handoffs_total{iface=\"veth1\",outcome=\"drained\"} 5",
            "rsspp_rebalance_seconds_count{iface=\"veth1\"} 1",
            "rsspp_overrides{iface=\"veth1\"} 2",
            "rsspp_elephants_moved_total{iface=\"veth1\"} 7",
            // Both workers' stages summed; SLF over all their frames.
            "rsspp_reframer_buffered_packets_total{iface=\"veth1\"} 100",
            "rsspp_reframer_held_packets{iface=\"veth1\"} 4",
            "rsspp_reframer_flushes_total{iface=\"veth1\",reason=\"timeout\"} 10",
            "rsspp_reframer_flushes_total{iface=\"veth1\",reason=\"early\"} 2",
            "rsspp_reframer_slf{iface=\"veth1\",stream=\"in\"} 1.4285714285714286",
            "rsspp_reframer_slf{iface=\"veth1\",stream=\"out\"} 8.333333333333334",
        ] {
            assert!(
                text.contains(&format!("{line}\n")),
                "no {line:?} in\n{text}"
            );
        }
        // The table names CPUs, not worker indices.
        let cpus: Vec<_> = text
            .lines()
            .filter(|l| l.starts_with(names::BUCKET_CPU))
            .map(|l| l.rsplit_once(' ').unwrap().1)
            .collect();
        assert_eq!(cpus.len(), 64);
        assert!(cpus.iter().all(|c| *c == "3" || *c == "5"), "{cpus:?}");
    }

    #[test]
    fn no_stage_no_reframer_series() {
        let table = IndirectionTable::equal(64, 1).unwrap();
        let mut s = MetricsSnapshot::new("veth1", mode(Backend::AfPacket));
        fill(
            &mut s,
            &RoundFigures {
                cpus: &[0],
                loads: &[0.5],
                counts: &[LiveCounts::default()],
                bucket_totals: &[1; 64],
                table: &table,
                imbalance: 0.0,
                migrations: 0,
                rounds: 1,
                interval: Duration::from_millis(100),
                took: Duration::from_micros(30),
                handoffs_pending: 0,
                handoffs: HandoffTotals::default(),
                overrides: None,
            },
        );
        assert_eq!(s.reframer, None);
        let text = render(&s);
        assert!(!text.contains("rsspp_reframer") && !text.contains("rsspp_overrides"));
    }
}
