//! A discrete-event model of a multi-queue NIC and N run-to-completion cores,
//! driven by packet traces, running the same policy code as the real data
//! paths (`rsspp-core`).
//!
//! - [`workload`]: packets from a preset or a pcap, replayed at a speed or
//!   along a rate profile, flows numbered and hashed once.
//! - [`cost`]: what a packet costs a core, state caches and shared tables.
//! - [`system`]: the interface between the engine and the policies (the
//!   `Policy` trait, the cores and queues a policy acts on).
//! - [`engine`]: queues, cores, time, measurements.
//! - [`policy`]: the load-balancing methods compared, and their registry.
//! - [`reframer`]: the Reframer stage in front of the NIC (per-flow
//!   batching), combinable with any policy.
//! - [`metrics`]: latency histogram, reordering.
//! - [`mechanisms`]: the typed counters of the policies' mechanisms.
//! - [`result`]: what a run produces.
//! - [`paper`]: the papers' experiments, each the runs its figures need.
//! - [`report`]: the comparison as a self-contained HTML page, and the
//!   papers' figures.

#![warn(missing_docs)]

pub mod calibration;
pub mod compare;
pub mod cost;
pub mod engine;
mod error;
pub mod mechanisms;
pub mod metrics;
pub mod packet;
pub mod paper;
pub mod policy;
pub mod reframer;
pub mod report;
pub mod result;
pub mod run;
pub mod system;
pub mod workload;

pub use error::SimError;
pub use result::{Caveat, Comparison, PolicyResult, PolicySummary, SweepPoint, Timeline};
