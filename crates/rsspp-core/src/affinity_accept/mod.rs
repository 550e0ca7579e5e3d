//! Affinity-Accept (Pesterev et al., EuroSys 2012, §3), the parts that do
//! not depend on what carries the packets: per-core accept queues and the
//! busy status derived from them (high and low watermarks over an EWMA of
//! the length), the stealing rules (round-robin over busy cores, 5 local
//! connections per remote one, the polling rule of an idle core), flow
//! groups and their migration with a fence that keeps each group's packets
//! in order, and the slab of short packet lists the policy keeps aside.
//!
//! A data path (the simulator's `affinity-accept` policy) owns the
//! connections and the application loop and calls these; `P` is its packet
//! type, time is passed in, in nanoseconds.
//!
//! - [`accept`]: [`AcceptQueue`], [`BusyMeter`] (the status alone, for
//!   queues kept elsewhere, such as the kernel's), [`Stealer`].
//! - [`flow_groups`]: [`FlowGroups`] (the NIC side).
//! - [`lists`]: [`Lists`], [`List`].

pub mod accept;
pub mod flow_groups;
pub mod lists;

pub use accept::{AcceptQueue, BusyMeter, QueueView, Status, Stealer, Waiting, LOCAL_PER_REMOTE};
pub use flow_groups::{FlowGroups, Received};
pub use lists::{List, Lists};

/// Nanoseconds, on the caller's clock.
pub type Ns = u64;
