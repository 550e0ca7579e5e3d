//! RSS++ for userspace packet processing: a sharded run-to-completion
//! runtime on stock Linux.
//!
//! Worker threads, one per CPU, each receive their share of an interface's
//! traffic through an AF_PACKET TPACKET_V3 ring; the share is decided per
//! RSS bucket by an eBPF fanout program (`PACKET_FANOUT_EBPF`) that hashes
//! each frame with Toeplitz and reads the bucket's owner from a table the
//! controller writes. Each worker runs its frames to completion through a
//! chain of [network functions](nf), with per-flow state kept in the flow
//! table of the frame's bucket; the controller runs RSS++'s `ControlLoop`
//! every round and moves buckets with their tables, in order-preserving
//! handoffs ([`rsspp_core::state::marks`]).
//!
//! - [`afpacket`] and [`steer`]: the thin layer that reaches the kernel;
//!   [`afxdp`]: the `afxdp` backend's (AF_XDP sockets, an XDP program
//!   that steers by bucket with the same words).
//! - [`nf`]: the network-function trait and the built-in functions.
//! - [`runtime`]: the controller, the workers' setup, the summary.
//! - [`reframe`]: Reframer's per-flow batching between a worker's ring and
//!   its functions (`rsspp nf --reframer`, `rsspp reframe`).
//! - [`metrics`]: the daemon's exporter, filled every round.
//! - [`bench`]: `rsspp bench nf`, the cost per packet on a veth pair.

pub mod afpacket;
pub mod afxdp;
pub mod bench;
pub mod error;
pub mod metrics;
pub mod nf;
pub mod nic;
pub mod reframe;
pub mod runtime;
pub mod steer;
mod worker;

pub use error::RuntimeError;
pub use nf::{Chain, ChainConfig, FlowRecord, Flows, NetworkFunction, Packet, Verdict};
pub use reframe::ReframerReport;
pub use runtime::{
    run, Backend, Config, ElephantSummary, LoadSource, Moves, Outcome, ReframerSummary,
    ScalingSummary, SteeringMode, Summary, TableMode,
};
pub use worker::WorkerReport;
