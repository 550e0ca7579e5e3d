//! The software-queuing policies (RSS++ paper §2, Figures 4a and 4b): the
//! NIC puts every packet in its single receive queue, one extra dispatching
//! core polls it and hands each packet to the processing cores through
//! software rings ([`Dispatcher`]). One policy, [`SoftwareDispatch`]; the
//! four methods the paper compares differ only in their [`Placement`]:
//!
//! - `sw-shared` ([`Placement::SharedRing`], Figure 4a): one ring shared by
//!   every processing core; whichever idle core polls first takes a batch
//!   (work stealing). Any core may see any flow, so flow state lives in a
//!   shared table, and packets of one flow processed on two cores at once
//!   may finish out of order. Nothing orders the cores racing for the ring,
//!   so the first ones get more of the work as cores are added (§5.4,
//!   Figure 12b).
//! - `sw-rr` ([`Placement::RoundRobin`], Figure 4a): one ring per core,
//!   packets dealt round-robin. The fairest method (§5.4, Figure 12), but
//!   flow-unaware: flow state lives in a shared table and a flow's packets,
//!   processed on several cores at once, may finish out of order.
//! - `sw-stateful-rr` ([`Placement::StatefulRoundRobin`], Figure 4b): the
//!   dispatcher keeps a flow table ([`FlowTable`]); a flow's first packet
//!   goes to the next core round-robin, and the flow stays there. Flows
//!   never move, so state is per core and nothing is reordered, but the
//!   balance is only that of flow counts, not of their load (§5.4).
//! - `sw-stateful-load` ([`Placement::StatefulLeastLoaded`], Figure 4b): the
//!   same flow table; a flow's first packet goes to the processing core that
//!   looks least loaded at that moment. What a dispatcher can see is the
//!   occupancy of the rings it fills; ties (idle cores have empty rings) go
//!   to the core with the lowest load measured over the last control
//!   interval, then round-robin. Balancing *new* flows by the *current* load
//!   does not balance the load the flows bring later (§5.4).

use rsspp_core::measure::load_from_busy;

use crate::cost::StateTable;
use crate::mechanisms::{DispatchCounters, PolicyMechanisms, StatefulDispatchCounters};
use crate::packet::{Ns, SimPacket};
use crate::policy::dispatch::{Dispatcher, FlowTable};
use crate::system::{Cpu, Policy, PolicyConfig, System, Topology};
use crate::SimError;

/// How the dispatching core picks a packet's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// `sw-shared`: one ring for every processing core.
    SharedRing,
    /// `sw-rr`: per-core rings, packets dealt round-robin.
    RoundRobin,
    /// `sw-stateful-rr`: per-core rings, new flows dealt round-robin and
    /// kept where they were put.
    StatefulRoundRobin,
    /// `sw-stateful-load`: per-core rings, new flows to the least loaded
    /// core and kept where they were put.
    StatefulLeastLoaded,
}

impl Placement {
    /// Every placement, in the order of the report.
    pub const ALL: [Placement; 4] = [
        Placement::SharedRing,
        Placement::RoundRobin,
        Placement::StatefulRoundRobin,
        Placement::StatefulLeastLoaded,
    ];

    /// The name the policy is reported under.
    pub fn name(self) -> &'static str {
        match self {
            Placement::SharedRing => "sw-shared",
            Placement::RoundRobin => "sw-rr",
            Placement::StatefulRoundRobin => "sw-stateful-rr",
            Placement::StatefulLeastLoaded => "sw-stateful-load",
        }
    }

    /// The placement reported as `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether the dispatcher keeps a flow table: a flow stays on one core,
    /// whose state is its own.
    pub fn is_stateful(self) -> bool {
        matches!(
            self,
            Placement::StatefulRoundRobin | Placement::StatefulLeastLoaded
        )
    }

    /// Where flow state lives: per core when flows stay on their core, in
    /// one shared table otherwise.
    pub fn state_table(self) -> StateTable {
        if self.is_stateful() {
            StateTable::Sharded
        } else {
            StateTable::Shared
        }
    }
}

/// Software dispatching with a placement.
#[derive(Debug, Clone)]
pub struct SoftwareDispatch {
    placement: Placement,
    dispatcher: Dispatcher,
    /// The dispatcher's flow table (stateful placements).
    flows: FlowTable,
    /// Round-robin placements: the next core. Least-loaded: where the search
    /// starts (after the core chosen last, so equally loaded cores take
    /// turns).
    next: usize,
    /// Least-loaded: per processing core, its load over the last interval.
    load: Vec<f64>,
    /// Least-loaded: per processing core, busy time at the last measurement.
    busy_at: Vec<Ns>,
    measured_at: Ns,
    interval_ns: Ns,
    next_timer: Ns,
}

impl SoftwareDispatch {
    /// A dispatcher and `config.cores` processing cores with rings of
    /// `config.queue_size` slots, placing packets by `placement` (the
    /// least-loaded one measures the cores every `config.interval_ns`).
    pub fn new(config: &PolicyConfig, placement: Placement) -> Result<Self, SimError> {
        let measures = placement == Placement::StatefulLeastLoaded;
        if measures && config.interval_ns == 0 {
            return Err(SimError::InvalidOption(
                "the control interval must be positive".into(),
            ));
        }
        let workers = config.cores;
        let shared = placement == Placement::SharedRing;
        let measured = if measures { workers } else { 0 };
        Ok(Self {
            placement,
            dispatcher: Dispatcher::new(workers, config.queue_size, shared)?,
            flows: FlowTable::new(),
            next: 0,
            load: vec![0.0; measured],
            busy_at: vec![0; measured],
            measured_at: 0,
            interval_ns: config.interval_ns,
            next_timer: config.interval_ns,
        })
    }

    /// The placement.
    pub fn placement(&self) -> Placement {
        self.placement
    }
}

/// The least loaded of `load.len()` cores: the shortest ring (counting the
/// `pending` packets of the batch in progress), then the lowest measured
/// load, then the first from `start` on.
fn least_loaded(cpu: &Cpu<'_>, pending: &[usize], load: &[f64], start: usize) -> usize {
    let n = load.len();
    let occupancy = |core: usize| cpu.queue_len(core) + pending[core];
    let mut best = start % n;
    let mut best_key = (occupancy(best), load[best]);
    for i in 1..n {
        let core = (start + i) % n;
        let key = (occupancy(core), load[core]);
        if key.0 < best_key.0 || (key.0 == best_key.0 && key.1 < best_key.1) {
            best = core;
            best_key = key;
        }
    }
    best
}

impl Policy for SoftwareDispatch {
    fn name(&self) -> String {
        self.placement.name().into()
    }

    fn topology(&self) -> Topology {
        self.dispatcher.topology()
    }

    fn state_table(&self) -> StateTable {
        self.placement.state_table()
    }

    fn polls_own_queues_only(&self) -> bool {
        true
    }

    fn steer(&mut self, _p: &SimPacket, _now: Ns) -> Option<usize> {
        Some(self.dispatcher.nic_queue())
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        if cpu.core() != self.dispatcher.core() {
            self.dispatcher
                .work(batch, cpu, self.placement.state_table());
            return;
        }
        let workers = self.dispatcher.workers();
        let (flows, next, load) = (&mut self.flows, &mut self.next, &self.load);
        match self.placement {
            Placement::SharedRing => {
                let ring = self.dispatcher.ring_of(0);
                self.dispatcher.dispatch(batch, cpu, |_, _, _| (ring, 0));
            }
            Placement::RoundRobin => self.dispatcher.dispatch(batch, cpu, |_, _, _| {
                let core = *next;
                *next = (core + 1) % workers;
                (core, 0)
            }),
            Placement::StatefulRoundRobin => self.dispatcher.dispatch(batch, cpu, |p, cpu, _| {
                let (known, cycles) = flows.lookup(p, cpu.cost());
                if let Some(core) = known {
                    return (core, cycles);
                }
                let core = *next;
                *next = (core + 1) % workers;
                flows.place(p.flow, core);
                (core, cycles)
            }),
            Placement::StatefulLeastLoaded => {
                self.dispatcher.dispatch(batch, cpu, |p, cpu, pending| {
                    let (known, cycles) = flows.lookup(p, cpu.cost());
                    if let Some(core) = known {
                        return (core, cycles);
                    }
                    // Ring i is processing core i's.
                    let core = least_loaded(cpu, pending, load, *next);
                    *next = core + 1;
                    flows.place(p.flow, core);
                    (core, cycles)
                })
            }
        }
    }

    fn next_timer(&self) -> Option<Ns> {
        (self.placement == Placement::StatefulLeastLoaded).then_some(self.next_timer)
    }

    fn timer(&mut self, now: Ns, sys: &mut System<'_>) {
        let span = now.saturating_sub(self.measured_at).max(1);
        for (core, (load, busy_at)) in self.load.iter_mut().zip(&mut self.busy_at).enumerate() {
            let busy = sys.busy_ns(core);
            *load = load_from_busy(busy.saturating_sub(*busy_at), span);
            *busy_at = busy;
        }
        self.measured_at = now;
        self.next_timer = now + self.interval_ns;
    }

    fn mechanisms(&self) -> PolicyMechanisms {
        let dispatched = self.dispatcher.dispatched();
        if self.placement.is_stateful() {
            PolicyMechanisms::StatefulDispatch(StatefulDispatchCounters {
                dispatched,
                flows_placed: self.flows.placed(),
            })
        } else {
            PolicyMechanisms::Dispatch(DispatchCounters { dispatched })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_state_follows_the_flow_table() {
        for p in Placement::ALL {
            assert_eq!(Placement::from_name(p.name()), Some(p));
            let policy = SoftwareDispatch::new(&PolicyConfig::default(), p).unwrap();
            assert_eq!(policy.name(), p.name());
            let sharded = policy.state_table() == StateTable::Sharded;
            assert_eq!(sharded, p.is_stateful(), "{p:?}");
            assert_eq!(
                policy.next_timer().is_some(),
                p == Placement::StatefulLeastLoaded
            );
        }
        assert_eq!(Placement::from_name("sw"), None);
    }

    #[test]
    fn only_the_shared_ring_is_shared() {
        for p in Placement::ALL {
            let config = PolicyConfig {
                cores: 3,
                ..PolicyConfig::default()
            };
            let t = SoftwareDispatch::new(&config, p).unwrap().topology();
            let rings = t.queue_capacity.len() - 1;
            assert_eq!(rings == 1, p == Placement::SharedRing, "{p:?}");
        }
    }

    #[test]
    fn only_the_least_loaded_placement_needs_an_interval() {
        let config = PolicyConfig {
            interval_ns: 0,
            ..PolicyConfig::default()
        };
        for p in Placement::ALL {
            let built = SoftwareDispatch::new(&config, p);
            assert_eq!(built.is_err(), p == Placement::StatefulLeastLoaded, "{p:?}");
        }
    }
}
