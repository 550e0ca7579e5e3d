//! The load-balancing methods a simulation compares. Each is a [`Policy`]:
//! where the NIC (or a dispatching core) puts a packet, how a core processes
//! what it takes, and what it changes at its timers. The engine does the
//! rest — queues, time, costs and measurements — identically for all.
//!
//! The policies implement [`crate::system`]'s interface and know nothing
//! of each other; the [`registry`] builds them by name. The four software
//! dispatchers are one policy ([`software`]) with four placements over
//! [`dispatch`]'s dispatcher.

pub mod affinity_accept;
pub mod dispatch;
pub mod metron;
pub mod orss;
pub mod ovs_alb;
pub mod registry;
pub mod rfs;
pub mod rss;
pub mod rsspp;
pub mod software;
pub mod sprayer;

pub use crate::system::{OvsAlbOptions, Policy, PolicyConfig, Topology};
pub use registry::{build, AUTOSCALING_NAMES, POLICY_NAMES, PRODUCTION_NAMES};
