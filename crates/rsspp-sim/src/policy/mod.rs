//! The load-balancing methods a simulation compares. Each is a [`Policy`]:
//! where the NIC (or a dispatching core) puts a packet, how a core processes
//! what it takes, and what it changes at its timers. The engine does the
//! rest — queues, time, costs and measurements — identically for all.

use std::collections::BTreeMap;

use crate::cost::StateTable;
use crate::engine::{Cpu, Queues, System};
use crate::packet::{Ns, SimPacket};

pub mod affinity_accept;
pub mod dispatch;
pub mod metron;
pub mod orss;
pub mod rss;
pub mod rsspp;
pub mod sprayer;
pub mod sw_rr;
pub mod sw_shared;
pub mod sw_stateful_load;
pub mod sw_stateful_rr;

/// The cores and queues a policy needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Processing cores, numbered `0..workers`.
    pub workers: usize,
    /// All cores: processing cores, then dispatching cores.
    pub cores: usize,
    /// Capacity of each queue (receive queues, software queues), packets.
    pub queue_capacity: Vec<usize>,
    /// For each core, the queues it polls, in order of preference.
    pub polls: Vec<Vec<usize>>,
}

impl Topology {
    /// One NIC receive queue per processing core, polled by that core.
    pub fn hardware(workers: usize, queue_size: usize) -> Self {
        Self {
            workers,
            cores: workers,
            queue_capacity: vec![queue_size; workers],
            polls: (0..workers).map(|c| vec![c]).collect(),
        }
    }
}

/// The settings every policy is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Processing cores.
    pub cores: usize,
    /// Descriptors per NIC receive queue (and slots per software queue).
    pub queue_size: usize,
    /// Indirection table size.
    pub reta_size: usize,
    /// Where flow-affine policies keep flow state.
    pub state_table: StateTable,
    /// Control interval of the dynamic policies, nanoseconds.
    pub interval_ns: Ns,
    /// Delay before a table rewrite takes effect in the NIC, nanoseconds.
    pub table_update_ns: Ns,
    /// Whether policies that can add and remove cores do.
    pub autoscale: bool,
    /// Target average load for scaling.
    pub target_load: f64,
    /// Seed of the policies' own random choices.
    pub seed: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            cores: 8,
            queue_size: 4096,
            reta_size: 512,
            state_table: StateTable::Sharded,
            interval_ns: 100_000_000,
            table_update_ns: 20_000,
            autoscale: false,
            target_load: 0.8,
            seed: 1,
        }
    }
}

/// A load-balancing method.
pub trait Policy: Send {
    /// The name it is reported under.
    fn name(&self) -> String;

    /// Its cores and queues (asked once, before the run).
    fn topology(&self) -> Topology;

    /// Where flow state lives while this policy runs.
    fn state_table(&self) -> StateTable;

    /// The queue a packet arriving at the NIC joins; `None` drops it.
    fn steer(&mut self, packet: &SimPacket, now: Ns) -> Option<usize>;

    /// Core `core` polls at `now`: take at most `max` packets into `batch`.
    /// By default it takes from the queues it polls, in order.
    fn poll(
        &mut self,
        core: usize,
        now: Ns,
        queues: &mut Queues,
        max: usize,
        batch: &mut Vec<SimPacket>,
    ) {
        queues.take_polled(core, now, max, batch);
    }

    /// Processes a polled batch on `cpu` (which may also hold other work
    /// the policy kept for this core). Every packet handed to
    /// [`Cpu::process`] is finished; the policy may keep some for later.
    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>);

    /// Whether core `core` has work of the policy's own waiting (packets it
    /// parked and released): a core with none and an empty queue sleeps.
    fn has_work(&self, _core: usize) -> bool {
        false
    }

    /// When the policy's next timer is due, if it has one.
    fn next_timer(&self) -> Option<Ns> {
        None
    }

    /// Runs the timer due at `now`.
    fn timer(&mut self, _now: Ns, _sys: &mut System<'_>) {}

    /// Whether processing core `core` is in use now (scaling policies leave
    /// some idle).
    fn is_active(&self, _core: usize) -> bool {
        true
    }

    /// State migrations so far (buckets, flows, flow groups, classes…).
    fn migrations(&self) -> u64 {
        0
    }

    /// Counters of the policy's own mechanisms, by name.
    fn mechanisms(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }
}

/// The policies `rsspp compare` runs by default, in the order of the report.
/// `--autoscale` makes the ones that can scale do so.
pub const POLICY_NAMES: &[&str] = &[
    "rss",
    "rsspp",
    "sprayer",
    "sw-shared",
    "sw-rr",
    "sw-stateful-rr",
    "sw-stateful-load",
    "metron",
    "affinity-accept",
    "orss",
];

/// Names for the scaling variants, so that a run can compare them with the
/// fixed-core policies (the RSS++ paper's Figure 11).
pub const AUTOSCALING_NAMES: &[&str] = &["rsspp-autoscale", "metron-autoscale"];

/// Builds the policy called `name`.
pub fn build(name: &str, config: &PolicyConfig) -> Result<Box<dyn Policy>, crate::SimError> {
    let autoscaling = PolicyConfig {
        autoscale: true,
        ..config.clone()
    };
    let policy: Box<dyn Policy> = match name {
        "rss" => Box::new(rss::Rss::new(config)?),
        "rsspp" => Box::new(rsspp::RssPlusPlus::new(config)?),
        "rsspp-autoscale" => Box::new(rsspp::RssPlusPlus::new(&autoscaling)?),
        "sprayer" => Box::new(sprayer::Sprayer::new(config)),
        "sw-shared" => Box::new(sw_shared::SwShared::new(config)?),
        "sw-rr" => Box::new(sw_rr::SwRr::new(config)?),
        "sw-stateful-rr" => Box::new(sw_stateful_rr::SwStatefulRr::new(config)?),
        "sw-stateful-load" => Box::new(sw_stateful_load::SwStatefulLoad::new(config)?),
        "metron" => Box::new(metron::Metron::new(config)?),
        "metron-autoscale" => Box::new(metron::Metron::new(&autoscaling)?),
        "orss" => Box::new(orss::Orss::new(config)?),
        "affinity-accept" => Box::new(affinity_accept::AffinityAccept::new(config)?),
        _ => {
            return Err(crate::SimError::UnknownPolicy {
                name: name.to_string(),
                known: [POLICY_NAMES, AUTOSCALING_NAMES].concat().join(", "),
            })
        }
    };
    Ok(policy)
}
