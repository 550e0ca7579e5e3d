//! `sw-rr`: software queuing with one ring per processing core, packets
//! dealt round-robin by the dispatching core (RSS++ paper §2, Figure 4a).
//! The fairest method (§5.4, Figure 12), but flow-unaware: flow state lives
//! in a shared table and a flow's packets, processed on several cores at
//! once, may finish out of order.

use std::collections::BTreeMap;

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::policy::dispatch::Dispatcher;
use crate::system::{Cpu, Policy, PolicyConfig, Topology};
use crate::SimError;

/// Round-robin software dispatching.
#[derive(Debug, Clone)]
pub struct SwRr {
    dispatcher: Dispatcher,
    next: usize,
}

impl SwRr {
    /// A dispatcher dealing packets over `config.cores` processing cores.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        Ok(Self {
            dispatcher: Dispatcher::new(config.cores, config.queue_size, false)?,
            next: 0,
        })
    }
}

impl Policy for SwRr {
    fn name(&self) -> String {
        "sw-rr".into()
    }

    fn topology(&self) -> Topology {
        self.dispatcher.topology()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Shared
    }

    fn steer(&mut self, _p: &SimPacket, _now: Ns) -> Option<usize> {
        Some(self.dispatcher.nic_queue())
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        if cpu.core() == self.dispatcher.core() {
            let workers = self.dispatcher.workers();
            let next = &mut self.next;
            self.dispatcher.dispatch(batch, cpu, |_, _, _| {
                let core = *next;
                *next = (core + 1) % workers;
                (core, 0)
            });
        } else {
            self.dispatcher.work(batch, cpu, StateTable::Shared);
        }
    }

    fn mechanisms(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([("dispatched".to_string(), self.dispatcher.dispatched())])
    }
}
