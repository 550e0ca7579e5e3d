//! `sw-shared`: software queuing with one ring shared by every processing
//! core (RSS++ paper §2, Figure 4a). The dispatching core puts each packet in
//! the ring; whichever idle processing core polls first takes a batch (work
//! stealing). Any core may see any flow, so flow state lives in a shared
//! table, and packets of one flow processed on two cores at once may finish
//! out of order. Nothing orders the cores racing for the ring, so the
//! first ones get more of the work as cores are added (§5.4, Figure 12b).

use std::collections::BTreeMap;

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::policy::dispatch::Dispatcher;
use crate::system::{Cpu, Policy, PolicyConfig, Topology};
use crate::SimError;

/// One shared software queue.
#[derive(Debug, Clone)]
pub struct SwShared {
    dispatcher: Dispatcher,
}

impl SwShared {
    /// A dispatcher and `config.cores` processing cores sharing one ring of
    /// `config.queue_size` slots.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        Ok(Self {
            dispatcher: Dispatcher::new(config.cores, config.queue_size, true)?,
        })
    }
}

impl Policy for SwShared {
    fn name(&self) -> String {
        "sw-shared".into()
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
            let ring = self.dispatcher.ring_of(0);
            self.dispatcher.dispatch(batch, cpu, |_, _, _| (ring, 0));
        } else {
            self.dispatcher.work(batch, cpu, StateTable::Shared);
        }
    }

    fn mechanisms(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([("dispatched".to_string(), self.dispatcher.dispatched())])
    }
}
