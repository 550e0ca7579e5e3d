//! `sprayer`: the NIC hashes a field that changes per packet (Sprayer uses
//! the checksum), so packets are spread nearly round-robin regardless of
//! their flow. Any core may see any flow, so flow state is in a shared
//! table, and packets of one flow processed on two cores at once contend for
//! it and may finish out of order.

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, Topology};

/// Per-packet spraying.
#[derive(Debug, Clone)]
pub struct Sprayer {
    topology: Topology,
}

impl Sprayer {
    /// Spraying over `config.cores` cores.
    pub fn new(config: &PolicyConfig) -> Self {
        Self {
            topology: Topology::hardware(config.cores, config.queue_size),
        }
    }
}

impl Policy for Sprayer {
    fn name(&self) -> String {
        "sprayer".into()
    }

    fn topology(&self) -> Topology {
        self.topology.clone()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Shared
    }

    fn polls_own_queues_only(&self) -> bool {
        true
    }

    fn steer(&mut self, p: &SimPacket, _now: Ns) -> Option<usize> {
        Some(p.spray_value() as usize % self.topology.workers)
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        for p in batch.iter() {
            cpu.process(p);
        }
    }
}
