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
//! - [`state`]: per-bucket flow tables and the lock-free, order-preserving
//!   migration of a bucket's state between cores (§3.3).
//! - [`bench_state`]: per-bucket tables against a shared one under table
//!   rewrites, on threads (`rsspp bench state`).

#![warn(missing_docs)]

pub mod balance;
pub mod bench_state;
pub mod control;
pub mod counters;
pub mod flow;
pub mod measure;
pub mod reta;
pub mod state;
pub mod toeplitz;

pub use balance::{
    rebalance, BalanceConfig, BalanceError, BalanceOutcome, LoadReport, ScalingAction, Setting,
};
pub use control::{ControlConfig, ControlLoop};
pub use flow::FlowKey;
pub use reta::{BucketMove, CoreId, IndirectionTable, MigrationPlan};
pub use toeplitz::{bucket_of, RssKey, Toeplitz};
