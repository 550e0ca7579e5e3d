//! `rss`: the NIC's static indirection table, spread equally over the cores
//! (bucket i → core i mod N), never changed.

use rsspp_core::{bucket_of, IndirectionTable};

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, Topology};
use crate::SimError;

/// Static RSS.
#[derive(Debug, Clone)]
pub struct Rss {
    table: IndirectionTable,
    topology: Topology,
    state_table: StateTable,
}

impl Rss {
    /// Static RSS over `config.cores` cores.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        let table = IndirectionTable::equal(config.reta_size, config.cores)?;
        Ok(Self {
            table,
            topology: Topology::hardware(config.cores, config.queue_size),
            state_table: config.state_table,
        })
    }
}

impl Policy for Rss {
    fn name(&self) -> String {
        "rss".into()
    }

    fn topology(&self) -> Topology {
        self.topology.clone()
    }

    fn state_table(&self) -> StateTable {
        self.state_table
    }

    fn polls_own_queues_only(&self) -> bool {
        true
    }

    fn steer(&mut self, p: &SimPacket, _now: Ns) -> Option<usize> {
        Some(self.table.core_of(bucket_of(p.hash, self.table.len())))
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        for p in batch.iter() {
            cpu.process(p);
        }
    }
}
