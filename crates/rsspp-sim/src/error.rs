//! Why a simulation could not run.

use std::path::PathBuf;

/// Errors of the simulator. Nothing is written when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An option out of range or inconsistent with another.
    #[error("{0}")]
    InvalidOption(String),
    /// A policy name that does not exist.
    #[error("unknown policy '{name}'; the policies are: {known}")]
    UnknownPolicy {
        /// The name given.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
    /// A table size or core count the indirection table refuses.
    #[error(transparent)]
    Table(#[from] rsspp_core::reta::RetaError),
    /// The migration coordinator refused its table.
    #[error(transparent)]
    Migration(#[from] rsspp_core::state::migration::MigrationError),
    /// A Reframer setting out of range.
    #[error(transparent)]
    Reframer(#[from] rsspp_core::reframer::ReframerError),
    /// The generator refused its options.
    #[error(transparent)]
    Trace(rsspp_trace::TraceError),
    /// A trace file could not be opened.
    #[error("cannot open {}: {source}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A trace file could not be read.
    #[error("{}: {source}", .path.display())]
    TraceFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rsspp_trace::TraceError,
    },
    /// A stream could not be copied to its temporary file.
    #[error("cannot keep the input in a temporary file: {0}")]
    Spool(std::io::Error),
    /// A capture whose packets all carry one timestamp, to be repeated or
    /// replayed at a load.
    #[error("the capture's packets all carry the same timestamp: it has no packet rate (to scale to a load) and no length (to repeat); give a replay speed instead")]
    NoPeriod,
    /// One gap between two packets takes most of a capture's time.
    #[error(
        "{}: packets {} and {} (frame numbers) are {:.3} s apart, {:.0}% of the capture's {:.3} s, while the other {} packets are {:.1} µs apart on average: a wrong timestamp? The simulation would spend that time idle; remove the packet or cut the capture at the gap (editcap)",
        .path.display(), .frame - 1, .frame, *.gap_ns as f64 / 1e9,
        *.gap_ns as f64 * 100.0 / *.span_ns as f64, *.span_ns as f64 / 1e9, .others,
        *.other_mean_gap_ns as f64 / 1e3
    )]
    WildTimestamp {
        /// The capture.
        path: PathBuf,
        /// Frame number (1-based, as tcpdump and Wireshark count) of the
        /// packet after the gap.
        frame: u64,
        /// The gap, ns.
        gap_ns: u64,
        /// The whole capture's span, ns.
        span_ns: u64,
        /// Packets on either side of the gap but the two.
        others: u64,
        /// Their mean gap, ns.
        other_mean_gap_ns: u64,
    },
    /// Most packets are earlier than a packet before them.
    #[error("{}: {behind} of the {packets} packets are earlier than a packet before them (a wrong timestamp early in the capture?): they would all be replayed at that packet's time", .path.display())]
    OutOfOrder {
        /// The capture.
        path: PathBuf,
        /// Packets earlier than one before them.
        behind: u64,
        /// Usable packets.
        packets: u64,
    },
    /// A load the capture cannot give over the duration.
    #[error(
        "load {load} needs replay speed {speed:.3}, at which the capture's {trace_s:.3} s last {covers_s:.4} s of the {duration_s} s asked"
    )]
    LoadUnreachable {
        /// The load asked for.
        load: f64,
        /// The replay speed it needs.
        speed: f64,
        /// The capture's length at speed 1, seconds (span and one mean gap).
        trace_s: f64,
        /// Simulated seconds it lasts at that speed.
        covers_s: f64,
        /// Simulated seconds asked for.
        duration_s: f64,
    },
    /// The trace holds no packet the simulation can use.
    #[error("the workload has no TCP/UDP/IP packet to simulate")]
    EmptyWorkload,
    /// A policy failed in a way that should never happen (a bug, reported
    /// rather than hidden).
    #[error("policy {policy}: {message}")]
    Policy {
        /// The policy.
        policy: String,
        /// What went wrong.
        message: String,
    },
}
