//! The RSS++ engine, with no I/O: everything here is a pure function of its
//! inputs, and time is passed in, so the simulator, the Linux daemon and the
//! tests all run the same policy code.
//!
//! - [`toeplitz`]: the NIC's RSS hash and the bucket a flow lands in.
//! - [`reta`]: the indirection table (bucket → core).
//! - [`counters`]: per-core, per-bucket packet counters, lossless, with no
//!   atomic read-modify-write on the packet path.
//! - [`balance`]: the RSS++ rebalancer (§3.1 of the paper) and CPU scaling (§3.2).
//! - [`control`]: the control-loop policy (interval, back-off; proposes plans
//!   the caller applies and commits).
//! - [`measure`]: load imbalance and busy time → load, defined once.
//! - [`rand`]: the seeded generator every random choice draws from.
//! - [`handoff`]: order-preserving bucket moves: which buckets are in
//!   handoff, held from moving again, and when a handoff that never drains
//!   is completed anyway.
//! - [`state`]: per-bucket flow tables and the lock-free, order-preserving
//!   migration of a bucket's state between cores (§3.3).
//! - [`bench_state`]: per-bucket tables against a shared one under table
//!   rewrites, on threads (`rsspp bench state`).
//!
//! The other load balancers' own logic, written once for every data path
//! (the simulator's policies call it; packets are the caller's type):
//!
//! - [`orss`]: oRSS's per-flow load estimate and flow balancer.
//! - [`reframer`]: Reframer's per-flow batching stage (flush list, `T_buff`,
//!   maximum burst, SYN bypass).
//! - [`ovs_alb`]: Open vSwitch's PMD auto load balancer (samples, dry run).
//! - [`rfs`]: Linux RFS's flow steering (the rps_dev_flow table's switch rule).
//! - [`affinity_accept`]: Affinity-Accept's accept queues, busy status,
//!   connection stealing and flow groups.

#![warn(missing_docs)]

pub mod affinity_accept;
pub mod balance;
pub mod bench_state;
pub mod control;
pub mod counters;
pub mod flow;
pub mod handoff;
pub mod measure;
pub mod orss;
pub mod ovs_alb;
pub mod rand;
pub mod reframer;
pub mod reta;
pub mod rfs;
pub mod state;
pub mod toeplitz;

pub use balance::{
    rebalance, rebalance_pinned, BalanceConfig, BalanceError, BalanceOutcome, LoadReport,
    ScalingAction, Setting,
};
pub use control::{ControlConfig, ControlLoop};
pub use flow::FlowKey;
pub use reta::{BucketMove, CoreId, IndirectionTable, MigrationPlan};
pub use toeplitz::{bucket_of, RssKey, Toeplitz};
