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
