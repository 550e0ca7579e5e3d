//! `rfs`: Linux Receive Flow Steering (RPS/RFS), the core crate's
//! [`RfsTable`] deciding, with the scheduler moving the consumers.
//!
//! The model:
//! - the NIC spreads the flows over one receive queue per core with a
//!   static RSS table; the core polling a receive queue runs RPS on each
//!   packet: it looks the flow up in the tables ([`STEER_CYCLES`]) and puts
//!   the packet in the *backlog* of the CPU RFS picks (a per-core software
//!   queue of `netdev_max_backlog` = [`BACKLOG`] packets; a packet for
//!   another CPU also costs the cost model's remote-access cycles: its cache
//!   lines and the remote queue). Each core takes its backlog, then its
//!   receive queue (the backlog at most half a batch while the receive queue
//!   has packets: NAPI's per-instance quota), and runs the packets of its backlog to completion
//!   (protocol and consumer: flow state per core);
//! - each flow's consumer is one of [`THREADS_PER_CORE`] × cores
//!   application threads (the flow's hash picks it), spread round-robin
//!   over the cores at the start; the CPU where the consumer runs is the
//!   flow's *desired* CPU (the sock flow table, updated as it reads);
//! - every control interval the scheduler balances the threads by the
//!   time their packets took ([`balance_threads`], CFS-like, 117 %
//!   imbalance); a moved thread's flows follow it only once the old CPU's
//!   backlog has passed their last packet (RFS's in-order switch rule): the
//!   head counts the packets the old CPU has finished by the steering
//!   core's time, as `input_queue_head` moves after the stack is done.
//!
//! Not modelled: interrupt coalescing and the IPI's latency (a packet is
//! ready in the backlog when steered), the application's own work apart
//! from the packet's processing, threads blocking.

use rsspp_core::rfs::{balance_threads, RfsTable};
use rsspp_core::{bucket_of, IndirectionTable};

use crate::cost::StateTable;
use crate::packet::{mix32, Ns, SimPacket};
use crate::policy::dispatch::{DISPATCH_CYCLES, FLOW_HASH_CYCLES};
use crate::system::{Cpu, Policy, PolicyConfig, Queues, System, Topology};
use crate::SimError;

/// Cycles of RPS on the receiving core per packet: the flow hash lookups in
/// the two tables and the backlog enqueue.
pub const STEER_CYCLES: u64 = FLOW_HASH_CYCLES + DISPATCH_CYCLES;

/// Backlog of each CPU, packets (`net.core.netdev_max_backlog`'s default).
pub const BACKLOG: usize = 1000;

/// Consumer threads per core.
pub const THREADS_PER_CORE: usize = 4;

/// `rps_flow_cnt` of each receive queue.
pub const FLOW_CNT: usize = 4096;

/// The scheduler moves a thread when the busiest CPU carries more than this
/// percentage of the idlest one's load (CFS's `imbalance_pct` within a
/// socket).
pub const IMBALANCE_PCT: u64 = 117;

/// Receive Flow Steering.
#[derive(Debug, Clone)]
pub struct Rfs {
    table: IndirectionTable,
    flows: RfsTable,
    topology: Topology,
    cores: usize,
    /// Per thread: its CPU.
    thread_cpu: Vec<usize>,
    /// Per thread: nanoseconds its packets took this interval.
    thread_ns: Vec<u64>,
    /// Per core: packets of the batch being polled that came from its
    /// backlog (they come first).
    from_backlog: Vec<usize>,
    /// Per core: backlog packets finished before its current batch.
    finished: Vec<u64>,
    /// Per core: when each backlog packet of its current batch finishes.
    finishing: Vec<Vec<Ns>>,
    interval_ns: Ns,
    next_timer: Ns,
    thread_moves: u64,
    held: u64,
}

impl Rfs {
    /// RFS over `config.cores` cores.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        let cores = config.cores;
        if cores == 0 || cores > u32::MAX as usize {
            return Err(SimError::InvalidOption(
                "rfs needs at least one core".into(),
            ));
        }
        if config.interval_ns == 0 {
            return Err(SimError::InvalidOption(
                "the control interval must be positive".into(),
            ));
        }
        let threads = THREADS_PER_CORE * cores;
        let mut queue_capacity = vec![config.queue_size; cores];
        queue_capacity.extend(std::iter::repeat_n(BACKLOG, cores));
        Ok(Self {
            table: IndirectionTable::equal(config.reta_size, cores)?,
            flows: RfsTable::new(cores, FLOW_CNT),
            topology: Topology {
                workers: cores,
                cores,
                queue_capacity,
                polls: (0..cores).map(|c| vec![cores + c, c]).collect(),
            },
            cores,
            thread_cpu: (0..threads).map(|t| t % cores).collect(),
            thread_ns: vec![0; threads],
            from_backlog: vec![0; cores],
            finished: vec![0; cores],
            finishing: vec![Vec::new(); cores],
            interval_ns: config.interval_ns,
            next_timer: config.interval_ns,
            thread_moves: 0,
            held: 0,
        })
    }

    fn thread(&self, p: &SimPacket) -> usize {
        mix32(p.hash ^ 0x5bd1_e995) as usize % self.thread_cpu.len()
    }

    /// Consumer threads moved by the scheduler, flows switched to their
    /// consumer's new CPU, and packets held on the old CPU meanwhile.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.thread_moves, self.flows.switches(), self.held)
    }
}

impl Policy for Rfs {
    fn name(&self) -> String {
        "rfs".into()
    }

    fn topology(&self) -> Topology {
        self.topology.clone()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Sharded
    }

    fn steer(&mut self, p: &SimPacket, _now: Ns) -> Option<usize> {
        Some(self.table.core_of(bucket_of(p.hash, self.table.len())))
    }

    fn poll(
        &mut self,
        core: usize,
        now: Ns,
        queues: &mut Queues,
        max: usize,
        batch: &mut Vec<SimPacket>,
    ) {
        // net_rx_action gives the backlog's and the device's NAPI
        // instances a quota each: the backlog takes at most half a batch
        // while the receive queue has packets waiting.
        let start = batch.len();
        let quota = max - queues.len(core).min(max / 2);
        queues.take(self.cores + core, now, quota, batch);
        let backlog = batch.len() - start;
        self.from_backlog[core] = backlog;
        queues.take(core, now, max - backlog, batch);
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        let core = cpu.core();
        let backlog = self.from_backlog[core].min(batch.len());
        self.from_backlog[core] = 0;
        // The previous batch is over.
        self.finished[core] += self.finishing[core].len() as u64;
        self.finishing[core].clear();
        for p in &batch[..backlog] {
            let start = cpu.now();
            cpu.process(p);
            let t = self.thread(p);
            self.thread_ns[t] += cpu.now() - start;
            self.finishing[core].push(cpu.now());
        }
        let remote = u64::from(cpu.cost().remote_cycles);
        let cores = self.cores;
        for p in &batch[backlog..] {
            let desired = self.thread_cpu[self.thread(p)];
            // The backlog head counts the packets the stack is done with
            // (`input_queue_head` moves after `__netif_receive_skb`), not
            // those taken into a batch.
            let now = cpu.now();
            let (finished, finishing) = (&self.finished, &self.finishing);
            let steer = self.flows.steer(core, p.hash, desired, |c| {
                finished[c] + finishing[c].iter().filter(|&&t| t <= now).count() as u64
            });
            if steer.held {
                self.held += 1;
            }
            cpu.charge(STEER_CYCLES + if steer.cpu == core { 0 } else { remote });
            if cpu.enqueue(cores + steer.cpu, *p) {
                let tail = cpu.queue_enqueued(cores + steer.cpu);
                self.flows.enqueued(core, p.hash, tail);
            }
        }
    }

    fn next_timer(&self) -> Option<Ns> {
        Some(self.next_timer)
    }

    fn timer(&mut self, now: Ns, _sys: &mut System<'_>) {
        let moved = balance_threads(
            &self.thread_ns,
            &mut self.thread_cpu,
            self.cores,
            IMBALANCE_PCT,
        );
        self.thread_moves += moved.len() as u64;
        self.thread_ns.iter_mut().for_each(|n| *n = 0);
        self.next_timer = now + self.interval_ns;
    }

    fn migrations(&self) -> u64 {
        self.flows.switches()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_polls_its_backlog_then_its_receive_queue() {
        let config = PolicyConfig {
            cores: 3,
            ..PolicyConfig::default()
        };
        let p = Rfs::new(&config).unwrap();
        let t = p.topology();
        assert_eq!(t.polls, vec![vec![3, 0], vec![4, 1], vec![5, 2]]);
        assert_eq!(t.queue_capacity[4], BACKLOG);
        assert_eq!(p.thread_cpu.len(), 3 * THREADS_PER_CORE);
        let bad = PolicyConfig {
            interval_ns: 0,
            ..config
        };
        assert!(Rfs::new(&bad).is_err());
    }
}
