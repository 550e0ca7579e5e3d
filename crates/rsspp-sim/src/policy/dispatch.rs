//! Software queuing (RSS++ paper §2, Figures 4a and 4b): the NIC puts every
//! packet in its single receive queue, one extra *dispatching core* polls it
//! and hands each packet to the processing cores through software rings.
//! The `sw-*` policies differ only in how the dispatcher picks a ring (their
//! placements, [`super::software`]); this module holds what they share: the
//! topology, the dispatcher's costs, the hand-off costs on the processing
//! cores, and the dispatcher's flow table.
//!
//! Costs, on top of the engine's per-batch poll cost:
//! - the dispatcher spends [`DISPATCH_CYCLES`] per packet (reading the
//!   descriptor, writing the ring slot), plus a flow-table lookup for the
//!   stateful variants;
//! - a processing core pays a cache-line transfer per batch for the ring's
//!   indices (last written by the dispatcher; for the shared ring also
//!   whenever another processing core dequeued last) and one per packet for
//!   the buffer the dispatcher touched: the inter-core traffic that makes
//!   software dispatching scale worse than hardware dispatching (§5.4).

use crate::cost::{CostModel, StateTable};
use crate::packet::SimPacket;
use crate::system::{Cpu, Topology};
use crate::SimError;

/// Dispatcher cycles per packet: reading the receive descriptor and writing
/// the packet's pointer in a software ring (a burst enqueue, amortised).
pub const DISPATCH_CYCLES: u64 = 30;

/// Dispatcher cycles per flow-table lookup besides the entry's memory
/// access: hashing the 5-tuple and comparing the key.
pub const FLOW_HASH_CYCLES: u64 = 25;

/// Most processing cores: the state model numbers cores in a byte, and the
/// dispatcher takes one more.
const MAX_WORKERS: usize = 253;

/// The dispatching core and the software rings it fills.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    workers: usize,
    queue_size: usize,
    /// One ring polled by every processing core, or one ring per core.
    shared: bool,
    /// Scratch: the ring chosen for each packet of the batch in progress.
    dests: Vec<usize>,
    /// Scratch: per ring, the packets of the batch in progress chosen for
    /// it so far (not in the ring yet: the burst is enqueued at the end).
    pending: Vec<usize>,
    /// The processing core that dequeued from the shared ring last.
    last_consumer: usize,
    dispatched: u64,
}

impl Dispatcher {
    /// A dispatcher feeding `workers` processing cores, through one shared
    /// ring (`shared`) or one ring per core, each of `queue_size` slots.
    pub fn new(workers: usize, queue_size: usize, shared: bool) -> Result<Self, SimError> {
        if !(1..=MAX_WORKERS).contains(&workers) {
            return Err(SimError::InvalidOption(format!(
                "software dispatching needs 1 to {MAX_WORKERS} processing cores, got {workers}"
            )));
        }
        if queue_size == 0 {
            return Err(SimError::InvalidOption(
                "software queues need at least one slot".into(),
            ));
        }
        Ok(Self {
            workers,
            queue_size,
            shared,
            dests: Vec::with_capacity(64),
            pending: vec![0; if shared { 1 } else { workers }],
            last_consumer: usize::MAX,
            dispatched: 0,
        })
    }

    /// Processing cores.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The dispatching core's number (after the processing cores).
    pub fn core(&self) -> usize {
        self.workers
    }

    /// The NIC's receive queue (after the software rings).
    pub fn nic_queue(&self) -> usize {
        if self.shared {
            1
        } else {
            self.workers
        }
    }

    /// The software ring processing core `core` polls: the shared ring, or
    /// ring `core` (per-core rings are numbered as their cores).
    pub fn ring_of(&self, core: usize) -> usize {
        if self.shared {
            0
        } else {
            core
        }
    }

    /// Packets handed to a ring so far (dropped ones included).
    pub fn dispatched(&self) -> u64 {
        self.dispatched
    }

    /// Processing cores polling their rings, the dispatcher polling the NIC.
    pub fn topology(&self) -> Topology {
        let rings = if self.shared { 1 } else { self.workers };
        let nic = self.nic_queue();
        let mut polls: Vec<Vec<usize>> = (0..self.workers).map(|c| vec![self.ring_of(c)]).collect();
        polls.push(vec![nic]);
        Topology {
            workers: self.workers,
            cores: self.workers + 1,
            queue_capacity: vec![self.queue_size; rings + 1],
            polls,
        }
    }

    /// Runs the dispatcher on its batch: `pick` chooses each packet's ring
    /// and says what the choice cost (cycles), seeing how many packets of
    /// the batch went to each ring so far. The batch is enqueued as one
    /// burst at the end, as a DPDK dispatcher does: the packets become
    /// visible to the processing cores together. A full ring drops the
    /// packet.
    pub fn dispatch(
        &mut self,
        batch: &[SimPacket],
        cpu: &mut Cpu<'_>,
        mut pick: impl FnMut(&SimPacket, &Cpu<'_>, &[usize]) -> (usize, u64),
    ) {
        self.dests.clear();
        let mut cycles = 0;
        for p in batch {
            let (ring, cost) = pick(p, cpu, &self.pending);
            cycles += DISPATCH_CYCLES + cost;
            self.pending[ring] += 1;
            self.dests.push(ring);
        }
        cpu.charge(cycles);
        for (p, &ring) in batch.iter().zip(&self.dests) {
            // A full ring counts the drop itself.
            cpu.enqueue(ring, *p);
            self.pending[ring] = 0;
        }
        self.dispatched += batch.len() as u64;
    }

    /// Runs a processing core on what it took from its ring, with flow
    /// state in `table`.
    pub fn work(&mut self, batch: &[SimPacket], cpu: &mut Cpu<'_>, table: StateTable) {
        if batch.is_empty() {
            return;
        }
        let transfer = u64::from(cpu.cost().remote_cycles);
        // The ring's producer index moved on the dispatcher.
        let mut ring_cycles = transfer;
        if self.shared {
            // The consumer index of a shared ring moves between consumers.
            if self.last_consumer != cpu.core() {
                ring_cycles += transfer;
            }
            self.last_consumer = cpu.core();
        }
        cpu.charge(ring_cycles);
        for p in batch {
            cpu.process_with(p, table, transfer);
        }
    }
}

/// The dispatcher's flow table for the stateful variants: the processing
/// core of each live flow, indexed by flow number. Its cost is the
/// dispatcher's own: hashing the 5-tuple, then the entry's memory access,
/// cheap when the entry is in the dispatcher's cache (a direct-mapped cache
/// the size of a core's flow cache in the cost model) and a memory access
/// otherwise.
#[derive(Debug, Clone, Default)]
pub struct FlowTable {
    /// Per flow number: its core, or [`FlowTable::NONE`].
    core_of: Vec<u16>,
    /// The dispatcher's cache of entries: the flow cached in each slot.
    cached: Vec<u32>,
    placed: u64,
}

impl FlowTable {
    const NONE: u16 = u16::MAX;

    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks `p`'s flow up: its core, and the cycles the lookup cost. A
    /// flow's first packet (`seq` 0: flow numbers are reused) finds no
    /// entry, whatever a previous flow of that number left.
    pub fn lookup(&mut self, p: &SimPacket, cost: &CostModel) -> (Option<usize>, u64) {
        if self.cached.is_empty() {
            self.cached = vec![u32::MAX; cost.cache_flows as usize];
        }
        let slot = p.flow as usize & (self.cached.len() - 1);
        let access = if self.cached[slot] == p.flow {
            cost.hit_cycles
        } else {
            cost.miss_cycles
        };
        self.cached[slot] = p.flow;
        let cycles = FLOW_HASH_CYCLES + u64::from(access);
        if p.seq == 0 {
            return (None, cycles);
        }
        match self.core_of.get(p.flow as usize) {
            Some(&c) if c != Self::NONE => (Some(usize::from(c)), cycles),
            _ => (None, cycles),
        }
    }

    /// Remembers that `flow` is processed on `core`.
    pub fn place(&mut self, flow: u32, core: usize) {
        let i = flow as usize;
        if i >= self.core_of.len() {
            self.core_of.resize((i + 1).next_power_of_two(), Self::NONE);
        }
        // `Dispatcher::new` bounds the cores well under u16::MAX.
        self.core_of[i] = core as u16;
        self.placed += 1;
    }

    /// Flows placed so far (new flows, and flows whose number started over).
    pub fn placed(&self) -> u64 {
        self.placed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatcher_is_the_last_core_and_polls_the_nic() {
        let d = Dispatcher::new(4, 128, false).unwrap();
        let t = d.topology();
        assert_eq!((t.workers, t.cores), (4, 5));
        assert_eq!(t.queue_capacity, vec![128; 5]);
        assert_eq!(t.polls[4], vec![4]);
        assert_eq!(t.polls[2], vec![2]);
        assert_eq!(d.nic_queue(), 4);
    }

    #[test]
    fn shared_ring_is_polled_by_every_processing_core() {
        let d = Dispatcher::new(3, 64, true).unwrap();
        let t = d.topology();
        assert_eq!(t.queue_capacity.len(), 2);
        assert!(t.polls[..3].iter().all(|p| p == &vec![0]));
        assert_eq!(t.polls[3], vec![1]);
    }

    #[test]
    fn flow_table_forgets_a_flow_that_starts_over() {
        let cost = CostModel::default();
        let mut t = FlowTable::new();
        let first = SimPacket {
            flow: 5,
            ..SimPacket::default()
        };
        let (core, miss) = t.lookup(&first, &cost);
        assert_eq!(core, None);
        assert_eq!(miss, FLOW_HASH_CYCLES + u64::from(cost.miss_cycles));
        t.place(5, 3);
        let next = SimPacket { seq: 1, ..first };
        let (core, hit) = t.lookup(&next, &cost);
        assert_eq!(core, Some(3));
        assert_eq!(hit, FLOW_HASH_CYCLES + u64::from(cost.hit_cycles));
        // Flow number 5 reused by a new flow: no entry.
        assert_eq!(t.lookup(&first, &cost).0, None);
        assert_eq!(t.placed(), 1);
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(Dispatcher::new(0, 64, false).is_err());
        assert!(Dispatcher::new(254, 64, false).is_err());
        assert!(Dispatcher::new(4, 0, true).is_err());
    }
}
