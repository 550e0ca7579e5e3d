//! A discrete-event model of a multi-queue NIC and N run-to-completion cores,
//! driven by packet traces, running the same policy code as the real data
//! paths (`rsspp-core`).

#![warn(missing_docs)]

pub mod result;

pub use result::{Comparison, PolicyResult, PolicySummary, SweepPoint, Timeline};
