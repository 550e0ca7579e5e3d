//! `sw-stateful-rr`: stateful software queuing (RSS++ paper §2, Figure 4b).
//! The dispatching core keeps a flow table: a flow's first packet goes to
//! the next processing core round-robin, and the flow stays there. Flows
//! never move, so state is per core and nothing is reordered, but the
//! balance is only that of flow counts, not of their load (§5.4).

use std::collections::BTreeMap;

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::policy::dispatch::{Dispatcher, FlowTable};
use crate::system::{Cpu, Policy, PolicyConfig, Topology};
use crate::SimError;

/// New flows dealt round-robin, remembered in the dispatcher's flow table.
#[derive(Debug, Clone)]
pub struct SwStatefulRr {
    dispatcher: Dispatcher,
    flows: FlowTable,
    next: usize,
}

impl SwStatefulRr {
    /// A dispatcher placing flows over `config.cores` processing cores.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        Ok(Self {
            dispatcher: Dispatcher::new(config.cores, config.queue_size, false)?,
            flows: FlowTable::new(),
            next: 0,
        })
    }
}

impl Policy for SwStatefulRr {
    fn name(&self) -> String {
        "sw-stateful-rr".into()
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
            let workers = self.dispatcher.workers();
            let (flows, next) = (&mut self.flows, &mut self.next);
            self.dispatcher.dispatch(batch, cpu, |p, cpu, _| {
                let (known, cycles) = flows.lookup(p, cpu.cost());
                if let Some(core) = known {
                    return (core, cycles);
                }
                let core = *next;
                *next = (core + 1) % workers;
                flows.place(p.flow, core);
                (core, cycles)
            });
        } else {
            self.dispatcher.work(batch, cpu, StateTable::Sharded);
        }
    }

    fn mechanisms(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([
            ("dispatched".to_string(), self.dispatcher.dispatched()),
            ("flows_placed".to_string(), self.flows.placed()),
        ])
    }
}
