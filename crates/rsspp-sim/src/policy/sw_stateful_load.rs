//! `sw-stateful-load`: stateful software queuing (RSS++ paper §2, Figure 4b)
//! with load-aware placement. The dispatching core keeps a flow table; a
//! flow's first packet goes to the processing core that looks least loaded
//! at that moment, and the flow stays there. What a dispatcher can see is
//! the occupancy of the rings it fills; ties (idle cores have empty rings)
//! go to the core with the lowest load measured over the last control
//! interval, then round-robin. Balancing *new* flows by the *current* load
//! does not balance the load the flows bring later (§5.4).

use std::collections::BTreeMap;

use rsspp_core::measure::load_from_busy;

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::policy::dispatch::{Dispatcher, FlowTable};
use crate::system::{Cpu, Policy, PolicyConfig, System, Topology};
use crate::SimError;

/// New flows to the least loaded core, remembered in a flow table.
#[derive(Debug, Clone)]
pub struct SwStatefulLoad {
    dispatcher: Dispatcher,
    flows: FlowTable,
    /// Per processing core: its load over the last interval.
    load: Vec<f64>,
    /// Per processing core: busy time at the last measurement.
    busy_at: Vec<Ns>,
    measured_at: Ns,
    interval_ns: Ns,
    next_timer: Ns,
    /// Where the search for the least loaded core starts: after the core
    /// chosen last, so equally loaded cores take turns.
    start: usize,
}

impl SwStatefulLoad {
    /// A dispatcher placing flows over `config.cores` processing cores,
    /// measuring their load every `config.interval_ns`.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        if config.interval_ns == 0 {
            return Err(SimError::InvalidOption(
                "the control interval must be positive".into(),
            ));
        }
        let workers = config.cores;
        Ok(Self {
            dispatcher: Dispatcher::new(workers, config.queue_size, false)?,
            flows: FlowTable::new(),
            load: vec![0.0; workers],
            busy_at: vec![0; workers],
            measured_at: 0,
            interval_ns: config.interval_ns,
            next_timer: config.interval_ns,
            start: 0,
        })
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

impl Policy for SwStatefulLoad {
    fn name(&self) -> String {
        "sw-stateful-load".into()
    }

    fn topology(&self) -> Topology {
        self.dispatcher.topology()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Sharded
    }

    fn steer(&mut self, _p: &SimPacket, _now: Ns) -> Option<usize> {
        Some(self.dispatcher.nic_queue())
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        if cpu.core() == self.dispatcher.core() {
            let (flows, load, start) = (&mut self.flows, &self.load, &mut self.start);
            self.dispatcher.dispatch(batch, cpu, |p, cpu, pending| {
                let (known, cycles) = flows.lookup(p, cpu.cost());
                if let Some(core) = known {
                    return (core, cycles);
                }
                // Ring i is processing core i's.
                let core = least_loaded(cpu, pending, load, *start);
                *start = core + 1;
                flows.place(p.flow, core);
                (core, cycles)
            });
        } else {
            self.dispatcher.work(batch, cpu, StateTable::Sharded);
        }
    }

    fn next_timer(&self) -> Option<Ns> {
        Some(self.next_timer)
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

    fn mechanisms(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([
            ("dispatched".to_string(), self.dispatcher.dispatched()),
            ("flows_placed".to_string(), self.flows.placed()),
        ])
    }
}
