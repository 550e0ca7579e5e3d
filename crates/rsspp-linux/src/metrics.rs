//! The metrics of a balancer — the daemon (`rsspp run`) and the userspace
//! runtime (`rsspp nf`) alike: a snapshot filled after every round, its
//! rendering in the Prometheus text exposition format (0.0.4), and the HTTP
//! server that serves it at `/metrics`. Both export the same series under
//! the same names, so `rsspp top` reads either.
//!
//! The balancer owns a [`SharedMetrics`] and updates it once per round; the
//! server thread clones the snapshot under the lock and renders it outside,
//! so a scrape never holds the balancer up for longer than a copy.
//!
//! ```
//! use rsspp_linux::metrics::{render, CpuMetrics, MetricsSnapshot};
//!
//! let mut s = MetricsSnapshot::new("eth0", "software");
//! s.cpus.push(CpuMetrics {
//!     cpu: 0,
//!     load: 0.5,
//!     packets_total: 1000,
//!     dropped: vec![("cpumap_full".into(), 0)],
//! });
//! assert!(render(&s).contains("rsspp_cpu_load{iface=\"eth0\",cpu=\"0\"} 0.5\n"));
//! ```

mod histogram;
mod server;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

pub use histogram::{Histogram, REBALANCE_BOUNDS};
pub use server::{MetricsError, MetricsServer, ServerLimits};

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Metric names, shared with `rsspp top`, which reads them back.
pub mod names {
    /// Gauge, always 1: the interface and mode as labels (`software` or
    /// `hardware` for the daemon, `afpacket` for `rsspp nf`).
    pub const INFO: &str = "rsspp_info";
    /// Gauge per CPU: busy fraction over the last interval.
    pub const CPU_LOAD: &str = "rsspp_cpu_load";
    /// Counter per CPU: packets steered to or counted on it (`rsspp nf`:
    /// taken by its worker).
    pub const CPU_PACKETS_TOTAL: &str = "rsspp_cpu_packets_total";
    /// Counter per bucket: packets hashed into it.
    pub const BUCKET_PACKETS_TOTAL: &str = "rsspp_bucket_packets_total";
    /// Gauge per bucket: the CPU the indirection table maps it to.
    pub const BUCKET_CPU: &str = "rsspp_bucket_cpu";
    /// Gauge: (max − min) / min of per-CPU packet rates over the last interval.
    pub const IMBALANCE_RATIO: &str = "rsspp_imbalance_ratio";
    /// Counter: buckets moved from one CPU to another.
    pub const MIGRATIONS_TOTAL: &str = "rsspp_migrations_total";
    /// Counter: rebalancing rounds run.
    pub const ROUNDS_TOTAL: &str = "rsspp_rounds_total";
    /// Gauge: the control loop's current interval (it backs off when balanced).
    pub const INTERVAL_SECONDS: &str = "rsspp_interval_seconds";
    /// Histogram: time to compute and apply one rebalancing round.
    pub const REBALANCE_SECONDS: &str = "rsspp_rebalance_seconds";
    /// Counter per CPU and reason: frames dropped on their way to the CPU
    /// (`rsspp nf`: by its worker or before its ring).
    pub const DROPPED_PACKETS_TOTAL: &str = "rsspp_dropped_packets_total";
    /// Counter per kind: frames kept out of the buckets or not steered.
    pub const PACKETS_TOTAL: &str = "rsspp_packets_total";
    /// Gauge: buckets moved but still draining from their old CPU.
    pub const HANDOFFS_PENDING: &str = "rsspp_handoffs_pending";
    /// Counter per outcome: completed bucket handoffs.
    pub const HANDOFFS_TOTAL: &str = "rsspp_handoffs_total";
    /// Gauge: per-flow overrides in use (flows steered on their own).
    pub const OVERRIDES: &str = "rsspp_overrides";
    /// Counter: flows given an override or moved to another CPU.
    pub const ELEPHANTS_MOVED_TOTAL: &str = "rsspp_elephants_moved_total";
    /// Counter (`rsspp nf --reframer`, `rsspp reframe`): frames the
    /// Reframer stages held in a flow's batch (all but the bypassed).
    pub const REFRAMER_BUFFERED_TOTAL: &str = "rsspp_reframer_buffered_packets_total";
    /// Gauge: frames the Reframer stages hold now.
    pub const REFRAMER_HELD: &str = "rsspp_reframer_held_packets";
    /// Counter per reason: batches the Reframer stages sent on.
    pub const REFRAMER_FLUSHES_TOTAL: &str = "rsspp_reframer_flushes_total";
    /// Gauge per stream (`in`, `out`): the spatial locality factor since
    /// the start.
    pub const REFRAMER_SLF: &str = "rsspp_reframer_slf";
}

/// One CPU's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuMetrics {
    /// The CPU number (as in `/proc/stat`).
    pub cpu: u32,
    /// Busy fraction over the last interval, 0 to 1.
    pub load: f64,
    /// Packets steered to (software mode) or counted on (hardware mode) this
    /// CPU since the daemon started; for `rsspp nf`, taken from the ring of
    /// the CPU's worker.
    pub packets_total: u64,
    /// Frames dropped since the start, by reason, each rendered even when
    /// zero: the daemon's `cpumap_full` (this CPU's CPUMAP queue was full);
    /// `rsspp nf`'s `ring_full`, `not_ip`, `sink` and the others of its
    /// summary.
    pub dropped: Vec<(String, u64)>,
}

/// One bucket of the indirection table.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketMetrics {
    /// Packets hashed into this bucket since the daemon started.
    pub packets_total: u64,
    /// The CPU the table maps this bucket to now.
    pub cpu: u32,
}

/// The Reframer stages of a runtime (`rsspp nf --reframer`, `rsspp
/// reframe`), all workers together, since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReframerMetrics {
    /// Frames held in a flow's batch (all but the bypassed ones).
    pub buffered_total: u64,
    /// Frames held now.
    pub held: u64,
    /// Batches that left at their deadline.
    pub flush_timeout: u64,
    /// Batches that left at the maximum burst.
    pub flush_burst: u64,
    /// Batches sent on because a bypassing frame of their flow came.
    pub flush_bypass: u64,
    /// Batches sent on early: their bucket was leaving, or the run ending.
    pub flush_early: u64,
    /// Spatial locality factor of the frames the workers received (mean
    /// run of one flow's frames back to back).
    pub slf_in: f64,
    /// The same, of the frames the stages sent on.
    pub slf_out: f64,
}

/// Everything the daemon exports, as of its last round.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// The interface balanced.
    pub iface: String,
    /// `software` or `hardware`.
    pub mode: String,
    /// The CPUs balanced over, in the order of `--cpus`.
    pub cpus: Vec<CpuMetrics>,
    /// The indirection table, indexed by bucket.
    pub buckets: Vec<BucketMetrics>,
    /// (max − min) / min of the per-CPU packet rates over the last interval
    /// (see [`rsspp_core::measure::imbalance_ratio`]).
    pub imbalance_ratio: f64,
    /// Buckets moved since the daemon started.
    pub migrations_total: u64,
    /// Rounds run since the daemon started.
    pub rounds_total: u64,
    /// The control loop's current interval, in seconds.
    pub interval_seconds: f64,
    /// Duration of each round (read counters, rebalance, apply the table).
    pub rebalance_seconds: Histogram,
    /// Frames kept out of the buckets or not steered, by kind: the
    /// daemon's `not_ip` (neither IPv4 nor IPv6: steered to the default CPU
    /// or passed), `malformed` (cut-short or invalid headers) and
    /// `redirect_failed` (passed up on the receiving CPU); `rsspp nf`'s
    /// `not_ip` and `malformed`.
    pub packets_by_kind: Vec<(&'static str, u64)>,
    /// Buckets moved but still draining from their old CPU.
    pub handoffs_pending: usize,
    /// Handoffs completed since the start, by how they ended.
    pub handoffs: rsspp_core::handoff::HandoffTotals,
    /// Per-flow overrides in use; `None`: no overrides (`--elephants off`,
    /// hardware mode), the series are not exported.
    pub overrides: Option<usize>,
    /// Flows given an override or moved since the start.
    pub elephants_moved_total: u64,
    /// The Reframer stages; `None`: none (the daemon, `rsspp nf` without
    /// `--reframer`), the series are not exported.
    pub reframer: Option<ReframerMetrics>,
}

impl MetricsSnapshot {
    /// An empty snapshot for an interface and mode: no CPUs, no buckets, no
    /// rounds yet.
    pub fn new(iface: impl Into<String>, mode: impl Into<String>) -> Self {
        Self {
            iface: iface.into(),
            mode: mode.into(),
            cpus: Vec::new(),
            buckets: Vec::new(),
            imbalance_ratio: 0.0,
            migrations_total: 0,
            rounds_total: 0,
            interval_seconds: 0.0,
            rebalance_seconds: Histogram::rebalance(),
            packets_by_kind: Vec::new(),
            handoffs_pending: 0,
            handoffs: Default::default(),
            overrides: None,
            elephants_moved_total: 0,
            reframer: None,
        }
    }
}

/// The snapshot the daemon writes and the server reads.
///
/// Cloning the handle shares the snapshot. A poisoned lock (a panic while
/// updating) is not fatal: the snapshot is plain numbers, the worst case is a
/// half-updated round, and the exporter must keep answering.
#[derive(Debug, Clone)]
pub struct SharedMetrics(Arc<Mutex<MetricsSnapshot>>);

impl SharedMetrics {
    /// Shares a first snapshot.
    pub fn new(snapshot: MetricsSnapshot) -> Self {
        Self(Arc::new(Mutex::new(snapshot)))
    }

    /// Changes the snapshot in place (e.g. after a round), returning what
    /// `f` returns.
    pub fn update<R>(&self, f: impl FnOnce(&mut MetricsSnapshot) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the snapshot.
    pub fn publish(&self, snapshot: MetricsSnapshot) {
        self.update(|s| *s = snapshot);
    }

    /// A copy of the current snapshot.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.update(|s| s.clone())
    }
}

/// A sample value as the exposition format spells it (`+Inf`, `-Inf`,
/// `NaN`; Rust would write `inf`).
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    // Writing into a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The snapshot in the Prometheus text exposition format, version 0.0.4.
/// Every series carries the interface as its `iface` label, so that the
/// daemons of several interfaces can share one Prometheus job.
pub fn render(s: &MetricsSnapshot) -> String {
    use names::*;
    // About 70 bytes a series; buckets dominate.
    let mut out = String::with_capacity(2048 + 72 * (2 * s.buckets.len() + 3 * s.cpus.len()));
    let iface = format!("iface=\"{}\"", label_value(&s.iface));

    header(
        &mut out,
        INFO,
        "gauge",
        "The interface balanced and the mode: software or hardware (rsspp run), afpacket or afxdp (rsspp nf) (always 1).",
    );
    let _ = writeln!(out, "{INFO}{{{iface},mode=\"{}\"}} 1", label_value(&s.mode));

    header(
        &mut out,
        CPU_LOAD,
        "gauge",
        "Busy fraction of the CPU over the last interval (0 to 1).",
    );
    for c in &s.cpus {
        let _ = writeln!(
            out,
            "{CPU_LOAD}{{{iface},cpu=\"{}\"}} {}",
            c.cpu,
            value(c.load)
        );
    }

    header(
        &mut out,
        CPU_PACKETS_TOTAL,
        "counter",
        "Packets steered to or counted on the CPU.",
    );
    for c in &s.cpus {
        let _ = writeln!(
            out,
            "{CPU_PACKETS_TOTAL}{{{iface},cpu=\"{}\"}} {}",
            c.cpu, c.packets_total
        );
    }

    header(
        &mut out,
        DROPPED_PACKETS_TOTAL,
        "counter",
        "Frames dropped on their way to the CPU or on it, by reason (cpumap_full: its CPUMAP queue was full; rsspp nf: ring_full before the worker's ring, the others by the worker).",
    );
    for c in &s.cpus {
        for (reason, n) in &c.dropped {
            let _ = writeln!(
                out,
                "{DROPPED_PACKETS_TOTAL}{{{iface},cpu=\"{}\",reason=\"{}\"}} {n}",
                c.cpu,
                label_value(reason)
            );
        }
    }

    header(
        &mut out,
        PACKETS_TOTAL,
        "counter",
        "Frames kept out of the buckets (not_ip, malformed) or not steered (redirect_failed: passed up on the receiving CPU).",
    );
    for (kind, n) in &s.packets_by_kind {
        let _ = writeln!(
            out,
            "{PACKETS_TOTAL}{{{iface},kind=\"{}\"}} {n}",
            label_value(kind)
        );
    }

    header(
        &mut out,
        BUCKET_PACKETS_TOTAL,
        "counter",
        "Packets hashed into the bucket of the indirection table.",
    );
    for (i, b) in s.buckets.iter().enumerate() {
        let _ = writeln!(
            out,
            "{BUCKET_PACKETS_TOTAL}{{{iface},bucket=\"{i}\"}} {}",
            b.packets_total
        );
    }

    header(
        &mut out,
        BUCKET_CPU,
        "gauge",
        "The CPU the indirection table maps the bucket to.",
    );
    for (i, b) in s.buckets.iter().enumerate() {
        let _ = writeln!(out, "{BUCKET_CPU}{{{iface},bucket=\"{i}\"}} {}", b.cpu);
    }

    header(
        &mut out,
        IMBALANCE_RATIO,
        "gauge",
        &format!(
            "{} over the last interval, as a ratio (x100: the % of rsspp top and rsspp compare).",
            rsspp_core::measure::IMBALANCE_DEFINITION
        ),
    );
    let _ = writeln!(
        out,
        "{IMBALANCE_RATIO}{{{iface}}} {}",
        value(s.imbalance_ratio)
    );

    header(
        &mut out,
        MIGRATIONS_TOTAL,
        "counter",
        "Buckets moved from one CPU to another.",
    );
    let _ = writeln!(out, "{MIGRATIONS_TOTAL}{{{iface}}} {}", s.migrations_total);

    header(
        &mut out,
        HANDOFFS_PENDING,
        "gauge",
        "Buckets moved but still on their old CPU until it has drained them.",
    );
    let _ = writeln!(out, "{HANDOFFS_PENDING}{{{iface}}} {}", s.handoffs_pending);

    header(
        &mut out,
        HANDOFFS_TOTAL,
        "counter",
        "Bucket handoffs completed: drained (order kept), idle (nothing left to drain after the timeout) or forced (completed after the timeout with frames unaccounted for; order may not have been kept).",
    );
    for (outcome, n) in [
        ("drained", s.handoffs.drained),
        ("idle", s.handoffs.idle),
        ("forced", s.handoffs.forced),
    ] {
        let _ = writeln!(out, "{HANDOFFS_TOTAL}{{{iface},outcome=\"{outcome}\"}} {n}");
    }

    if let Some(overrides) = s.overrides {
        header(
            &mut out,
            OVERRIDES,
            "gauge",
            "Per-flow overrides in use: elephant flows steered on their own, not by their bucket.",
        );
        let _ = writeln!(out, "{OVERRIDES}{{{iface}}} {overrides}");
        header(
            &mut out,
            ELEPHANTS_MOVED_TOTAL,
            "counter",
            "Elephant flows given an override or moved to another CPU.",
        );
        let _ = writeln!(
            out,
            "{ELEPHANTS_MOVED_TOTAL}{{{iface}}} {}",
            s.elephants_moved_total
        );
    }

    if let Some(r) = &s.reframer {
        header(
            &mut out,
            REFRAMER_BUFFERED_TOTAL,
            "counter",
            "Frames the Reframer stages held in a flow's batch (all but the bypassed SYN, FIN and RST).",
        );
        let _ = writeln!(
            out,
            "{REFRAMER_BUFFERED_TOTAL}{{{iface}}} {}",
            r.buffered_total
        );
        header(
            &mut out,
            REFRAMER_HELD,
            "gauge",
            "Frames the Reframer stages hold now.",
        );
        let _ = writeln!(out, "{REFRAMER_HELD}{{{iface}}} {}", r.held);
        header(
            &mut out,
            REFRAMER_FLUSHES_TOTAL,
            "counter",
            "Batches the Reframer stages sent on, by reason: timeout (T_buff reached), burst (the maximum burst held), bypass (a SYN, FIN or RST of the flow came), early (its bucket was leaving the worker, or the run ending).",
        );
        for (reason, n) in [
            ("timeout", r.flush_timeout),
            ("burst", r.flush_burst),
            ("bypass", r.flush_bypass),
            ("early", r.flush_early),
        ] {
            let _ = writeln!(
                out,
                "{REFRAMER_FLUSHES_TOTAL}{{{iface},reason=\"{reason}\"}} {n}"
            );
        }
        header(
            &mut out,
            REFRAMER_SLF,
            "gauge",
            "Spatial locality factor since the start (mean run of one flow's frames back to back): in, as the workers received them; out, as the Reframer stages sent them on.",
        );
        for (stream, v) in [("in", r.slf_in), ("out", r.slf_out)] {
            let _ = writeln!(
                out,
                "{REFRAMER_SLF}{{{iface},stream=\"{stream}\"}} {}",
                value(v)
            );
        }
    }

    header(&mut out, ROUNDS_TOTAL, "counter", "Rebalancing rounds run.");
    let _ = writeln!(out, "{ROUNDS_TOTAL}{{{iface}}} {}", s.rounds_total);

    header(
        &mut out,
        INTERVAL_SECONDS,
        "gauge",
        "Current interval between rounds (longer while balanced).",
    );
    let _ = writeln!(
        out,
        "{INTERVAL_SECONDS}{{{iface}}} {}",
        value(s.interval_seconds)
    );

    header(
        &mut out,
        REBALANCE_SECONDS,
        "histogram",
        "Time to read the counters, rebalance and apply the table, per round.",
    );
    let h = &s.rebalance_seconds;
    let cumulative = h.cumulative();
    for (bound, n) in h.bounds().iter().zip(&cumulative) {
        let _ = writeln!(
            out,
            "{REBALANCE_SECONDS}_bucket{{{iface},le=\"{}\"}} {n}",
            value(*bound)
        );
    }
    let _ = writeln!(
        out,
        "{REBALANCE_SECONDS}_bucket{{{iface},le=\"+Inf\"}} {}",
        h.count()
    );
    let _ = writeln!(out, "{REBALANCE_SECONDS}_sum{{{iface}}} {}", value(h.sum()));
    let _ = writeln!(out, "{REBALANCE_SECONDS}_count{{{iface}}} {}", h.count());
    out
}

#[cfg(test)]
mod tests;
