//! oRSS, offloaded RSS (`../shared/seeds/003_e1c4ef86a3a08391.txt`, §4): the
//! parts a SmartNIC runs whatever carries the packets. A data path polls,
//! per core, which flow the core is processing and feeds the polls to
//! [`FlowLoads`]; at the end of each round the estimates go to the
//! [`Balancer`], whose [`Plan`] names the flows to move. Moving them (the
//! two-phase migration) is the data path's job: the simulator's `orss`
//! policy does it over its queues.
//!
//! - [`load`]: the per-flow load estimate (§4.4.2).
//! - [`balancer`]: the balancing step, with core reduction and no
//!   ping-pong (§4.5).
//! - [`overrides`]: the same rules on real packets, inside RSS++'s buckets:
//!   which buckets to count per flow, which elephants to steer on their own
//!   (per-flow overrides of the table), which overrides to free.

pub mod balancer;
pub mod load;
pub mod overrides;

pub use balancer::{asi, Balancer, BalancerParams, FlowLoad, Move, Plan};
pub use load::FlowLoads;
pub use overrides::{
    FlowCount, FlowMove, Free, OverrideConfig, OverrideCount, OverridePlan, Overrides, RoundInput,
    Split,
};
