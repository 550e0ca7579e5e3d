//! State-aware processing (§3.3, Figure 8, §5.6 of the paper): per-flow
//! state kept in one table per RSS bucket, so that when the rebalancer moves
//! a bucket from core A to core B all its flows move at once, with no lock
//! on the fast path and no packet processed out of order.
//!
//! - [`table`]: one flow table (flow key → state) with a capacity policy and
//!   idle expiry; time is passed in.
//! - [`migration`]: the handoff protocol — the coordinator that turns plans
//!   into per-core commands, the release conditions, the [`Handoff`] value
//!   that carries a table from one core to another.
//! - [`worker`]: a run-to-completion worker per core ([`BucketWorker`]),
//!   driven by batches, commands and handoffs, without I/O.
//! - [`marks`]: moves by counted marks, for a steering point that numbers
//!   each bucket's packets (the userspace runtime's fanout program).
//! - [`shared`]: the baseline — one lock-striped table for all cores behind
//!   the same [`Worker`] interface.
//! - [`threaded`]: runs workers on threads with a dispatcher playing the NIC.
//! - [`check`]: a sequence-checking network function and an audit of the
//!   states, for tests and benchmarks.
//!
//! ```
//! use rsspp_core::state::{check::*, *};
//! use rsspp_core::{BucketMove, IndirectionTable, MigrationPlan, Toeplitz};
//!
//! let reta = IndirectionTable::equal(64, 2).unwrap();
//! let mut coordinator = MigrationCoordinator::new(reta.clone(), 2).unwrap();
//! let mut a = BucketWorker::new(0, &reta, TableConfig::default(), SequenceCheck::default());
//! let mut b = BucketWorker::new(1, &reta, TableConfig::default(), SequenceCheck::default());
//!
//! // A flow whose bucket is on core 0.
//! let key = rsspp_core::FlowKey::new(
//!     "10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 1000, 80, 6).unwrap();
//! let hash = Toeplitz::default().hash_flow(&key);
//! let bucket = rsspp_core::bucket_of(hash, 64);
//! let (from, to) = (reta.core_of(bucket), 1 - reta.core_of(bucket));
//! let (mut old, mut new) = if from == 0 { (a, b) } else { (b, a) };
//! let packet = |seq| SequencedPacket { key, hash, flow: 0, seq };
//! let mut out = Outbox::default();
//!
//! // Packet 0 is queued to the old core; then the bucket moves.
//! let plan = MigrationPlan { moves: vec![BucketMove { bucket, from, to }] };
//! let mut queued = [0, 0];
//! queued[from] = 1;
//! let commands = coordinator.apply(&plan, &queued).unwrap();
//! // Packet 1 reaches the new core before the old one has processed packet 0:
//! // it waits.
//! new.receive([packet(1)], 10, &mut out);
//! assert_eq!(new.pending(), 1);
//! for c in commands {
//!     if c.core == from { old.command(c, 10, &mut out).unwrap() } else { new.command(c, 10, &mut out).unwrap() }
//! }
//! assert!(out.handoffs.is_empty()); // packet 0 not processed yet
//! old.receive([packet(0)], 20, &mut out); // first release condition met
//! let handoff = out.handoffs.pop().unwrap();
//! new.accept(handoff, 30, &mut out).unwrap();
//! coordinator.complete(out.completed.pop().unwrap()).unwrap();
//! assert_eq!(new.handler().reordered, 0);
//! assert_eq!(new.tables().map(|(_, t)| t.len()).sum::<usize>(), 1);
//! ```

pub mod check;
mod index;
pub mod marks;
pub mod migration;
pub mod shared;
pub mod table;
pub mod threaded;
pub mod worker;

pub use migration::{
    Arrival, Completed, CoreCommand, Handoff, HandoffRejected, MigrationCoordinator,
    MigrationError, Release,
};
pub use shared::{SharedFlowTable, SharedWorker};
pub use table::{Access, FlowTable, TableConfig, TableStats, WhenFull};
pub use worker::{BucketWorker, FlowHandler, FlowPacket, Outbox, Worker, WorkerStats};
