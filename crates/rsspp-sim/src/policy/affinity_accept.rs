//! `affinity-accept`: Affinity-Accept (Pesterev et al., EuroSys 2012, §3):
//! every connection is processed on the core whose receive queue got its
//! SYN, per-core accept queues, connection stealing from busy cores, and
//! flow-group migration towards the cores that steal.
//!
//! How it maps onto the engine:
//!
//! - **NIC**: flow groups are the RSS buckets; the indirection table starts
//!   equal (bucket i → core i mod N) and a flow-group migration rewrites one
//!   bucket, effective after the NIC's update delay.
//! - **Kernel receive path**: a core polls its receive queue first and takes
//!   up to four batches' worth, at no cost of its own, since the kernel's
//!   receive processing runs before the application (NAPI); the packet's
//!   fixed cost is paid where its connection is processed. A SYN (a bare
//!   one) opens a connection: the receiving core touches its state (the
//!   request socket) and queues it in its accept queue (128 connections by
//!   default; when full, the connection is refused: its SYN and every later
//!   packet are dropped and counted). Packets of a connection nobody has
//!   accepted yet wait with it. Packets of an accepted connection go to
//!   its owner's socket backlog; when the owner is another core, the
//!   receiving core pays a cross-core transfer to hand the packet over, and
//!   the owner pays another to read it. Packets that belong to no known
//!   connection (not TCP, or a connection already open when the trace
//!   starts) are processed where they land — on the core that still has
//!   earlier packets of their flow in its backlog, if any, so that nothing
//!   is reordered.
//! - **Application**: each core runs an event loop over its backlog in
//!   arrival order, for up to one batch of packets or the time a batch
//!   nominally takes per poll; a marker queued with each local connection
//!   makes it call `accept()`, which returns the oldest local connection.
//!   A busy core accepts only local connections; a non-busy one also takes
//!   one from a busy core (round-robin over the busy cores) after every
//!   five local ones (the paper's 5:1 proportional share), or when its local
//!   connection was stolen meanwhile. When its backlog is empty it looks
//!   for waiting connections at busy cores, then at any other core, before
//!   sleeping (the paper's polling rule); that is where most steals happen
//!   below saturation.
//!   The core that accepts a connection owns it for its life and processes
//!   its SYN and every packet of it; a stolen connection's state was last
//!   touched by the victim, so the cost model charges the thief a remote
//!   access, plus the transfer of the victim's accept-queue lock.
//! - **Busy status**: a core turns busy when its accept queue holds more
//!   than 75% of its capacity, and non-busy when an EWMA of the length
//!   (α = 1 / (2 × capacity), updated at each addition) falls under 10%.
//!   When a connection is queued at a core whose application will not get
//!   to it within this poll (busy, or more than a batch of work ahead), the
//!   non-busy cores are woken so that an idle one can steal it (the paper
//!   wakes the threads waiting on non-busy cores when none waits locally).
//! - **Flow-group migration**: every control interval (100 ms), each
//!   non-busy core takes one flow group from the core it stole the most
//!   connections from during the interval: the group that opened the most
//!   connections then.
//!
//! Connection state is per core ([`StateTable::Sharded`]). Every
//! connection has exactly one owner, and its packets reach the owner's
//! backlog in order (a migrated group's fence keeps the receive order), so
//! the policy reorders nothing.
//!
//! The accept queues, busy status, stealing rules and flow groups are
//! [`rsspp_core::affinity_accept`]'s; this module is the simulator's side:
//! connections, the receive path and the application loop on the engine's
//! cores.
//!
//! Limits of the model: the receive path of a core runs only between its
//! application's batches, so a core stuck on an expensive request fills
//! its accept queue in bursts; a refused connection costs all its packets
//! (no SYN retransmission), so past saturation it drops more packets than
//! a deep receive queue does, though with a far lower tail latency.

mod application;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use rsspp_core::affinity_accept::{
    AcceptQueue, FlowGroups, List, Lists, Received, Status, Stealer, Waiting,
};

use crate::cost::StateTable;
use crate::mechanisms::{AffinityAcceptCounters, PolicyMechanisms};
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, Queues, System, Topology};
use crate::SimError;

/// Batches' worth of packets the receive path takes per poll.
const RX_BATCHES: usize = 4;
/// Most packets that may wait with one connection nobody accepted yet.
const PARKED_MAX: u32 = 64;

/// Affinity-Accept's own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffinityOptions {
    /// Connections each core's accept queue holds (the paper: 64 to 256).
    pub accept_queue: usize,
    /// Whether non-busy cores steal connections from busy ones.
    pub stealing: bool,
    /// Whether non-busy cores take flow groups from their victims.
    pub flow_group_migration: bool,
}

impl Default for AffinityOptions {
    fn default() -> Self {
        Self {
            accept_queue: 128,
            stealing: true,
            flow_group_migration: true,
        }
    }
}

/// Where a flow stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    /// Not a connection the policy saw open: processed where it lands.
    Untracked,
    /// Opened, in the accept queue of `core`.
    Waiting,
    /// Accepted by `core`, its owner.
    Owned,
    /// Refused (full accept queue): its packets are dropped.
    Refused,
}

/// Per flow number.
#[derive(Debug, Clone, Copy)]
struct Flow {
    conn: Conn,
    /// Untracked: the core whose backlog holds its packets; Waiting: the
    /// core whose accept queue holds it; Owned: the owner.
    core: u8,
    /// Incarnation of the connection (accept-queue entries name it).
    generation: u32,
    /// Packets of the flow in a core's backlog.
    queued: u32,
    /// Packets waiting with a connection not accepted yet.
    parked: List,
    /// When the last of its packets processed so far finishes.
    done_at: Ns,
}

impl Default for Flow {
    fn default() -> Self {
        Self {
            conn: Conn::Untracked,
            core: 0,
            generation: 0,
            queued: 0,
            parked: List::default(),
            done_at: 0,
        }
    }
}

/// An item of a core's application backlog.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// A packet to process; `forwarded` when another core received it.
    Packet { packet: SimPacket, forwarded: bool },
    /// A local connection was queued: call `accept()`.
    Accept,
}

/// The Affinity-Accept policy.
#[derive(Debug)]
pub struct AffinityAccept {
    options: AffinityOptions,
    cores: usize,
    queue_size: usize,
    interval_ns: Ns,
    groups: FlowGroups,
    accept: Vec<AcceptQueue<SimPacket>>,
    stealers: Vec<Stealer>,
    backlog: Vec<VecDeque<Work>>,
    /// Per core: packets released from a fence, to receive before anything
    /// newer.
    released: Vec<VecDeque<SimPacket>>,
    flows: Vec<Flow>,
    lists: Lists<SimPacket>,
    /// Packets per poll of the application (the engine's batch).
    app_batch: usize,
    next_round: Ns,
    counters: AffinityAcceptCounters,
    #[cfg(test)]
    audit: std::sync::Arc<std::sync::Mutex<tests::Audit>>,
}

impl AffinityAccept {
    /// Affinity-Accept with the paper's settings over `config.cores` cores.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        Self::with_options(config, AffinityOptions::default())
    }

    /// Affinity-Accept with `options`.
    pub fn with_options(config: &PolicyConfig, options: AffinityOptions) -> Result<Self, SimError> {
        if config.cores == 0 || config.cores >= usize::from(u8::MAX) {
            return Err(SimError::InvalidOption(format!(
                "affinity-accept needs 1 to 254 cores, got {}",
                config.cores
            )));
        }
        if options.accept_queue == 0 || config.queue_size == 0 {
            return Err(SimError::InvalidOption(
                "affinity-accept needs accept and receive queues of at least one entry".into(),
            ));
        }
        if config.interval_ns == 0 {
            return Err(SimError::InvalidOption(
                "the control interval must be positive".into(),
            ));
        }
        let cores = config.cores;
        Ok(Self {
            options,
            cores,
            queue_size: config.queue_size,
            interval_ns: config.interval_ns,
            groups: FlowGroups::new(
                config.reta_size,
                cores,
                config.queue_size,
                config.table_update_ns,
            )?,
            accept: vec![AcceptQueue::new(options.accept_queue); cores],
            stealers: (0..cores).map(|c| Stealer::new(c, cores)).collect(),
            backlog: vec![VecDeque::new(); cores],
            released: vec![VecDeque::new(); cores],
            flows: Vec::new(),
            lists: Lists::default(),
            app_batch: 32,
            next_round: config.interval_ns,
            counters: AffinityAcceptCounters::default(),
            #[cfg(test)]
            audit: Default::default(),
        })
    }

    fn flow(&mut self, flow: u32) -> &mut Flow {
        let i = flow as usize;
        if i >= self.flows.len() {
            self.flows
                .resize((i + 1).next_power_of_two(), Flow::default());
        }
        &mut self.flows[i]
    }

    fn may_steal(&self, core: usize) -> bool {
        self.options.stealing && !self.accept[core].busy()
    }

    /// The receive path of `core` handles `p`.
    fn receive(&mut self, core: usize, p: SimPacket, cpu: &mut Cpu<'_>) {
        if p.seq == 0 {
            self.new_incarnation(p.flow, cpu);
        }
        let f = *self.flow(p.flow);
        if p.is_syn() && f.queued == 0 && matches!(f.conn, Conn::Untracked | Conn::Refused) {
            self.open(core, p, cpu);
            return;
        }
        match f.conn {
            Conn::Untracked => {
                // Where earlier packets of the flow wait, or here.
                let owner = if f.queued > 0 {
                    usize::from(f.core)
                } else {
                    core
                };
                self.flow(p.flow).core = owner as u8;
                self.queue_for(owner, core, p, cpu);
            }
            Conn::Waiting => {
                let f = &mut self.flows[p.flow as usize];
                if f.parked.len() >= PARKED_MAX {
                    self.counters.backlog_drops += 1;
                    cpu.drop_packet(&p);
                } else {
                    self.lists.push(&mut f.parked, p, core as u8);
                }
            }
            Conn::Owned => self.queue_for(usize::from(f.core), core, p, cpu),
            Conn::Refused => {
                self.counters.refused_packets += 1;
                cpu.drop_packet(&p);
            }
        }
    }

    /// The flow number starts a new flow: forget the previous one (its
    /// packets are long gone: numbers are reused after seconds of silence).
    fn new_incarnation(&mut self, flow: u32, cpu: &mut Cpu<'_>) {
        let f = self.flow(flow);
        let mut parked = std::mem::take(&mut f.parked);
        f.conn = Conn::Untracked;
        f.generation = f.generation.wrapping_add(1);
        while let Some((p, _)) = self.lists.pop(&mut parked) {
            self.counters.backlog_drops += 1;
            cpu.drop_packet(&p);
        }
    }

    /// `core` received the SYN `syn`: a new connection.
    fn open(&mut self, core: usize, syn: SimPacket, cpu: &mut Cpu<'_>) {
        // The kernel creates the connection's state here.
        cpu.touch_state(syn.flow, StateTable::Sharded);
        // A full backlog leaves no room for the accept marker: refused too.
        let full = self.accept[core].is_full() || self.backlog[core].len() >= self.queue_size;
        let f = self.flow(syn.flow);
        if full {
            f.conn = Conn::Refused;
            self.counters.accept_queue_drops += 1;
            cpu.drop_packet(&syn);
            return;
        }
        f.conn = Conn::Waiting;
        f.core = core as u8;
        f.generation = f.generation.wrapping_add(1);
        let generation = f.generation;
        #[cfg(test)]
        self.audit.lock().expect("audit").opened(syn.flow);
        let status = self.accept[core].push(Waiting {
            syn,
            rx_core: core as u8,
            generation,
        });
        self.backlog[core].push_back(Work::Accept);
        let group = self.groups.group(syn.hash);
        self.groups.opened(group);
        if status == Status::BecameBusy {
            self.counters.busy_transitions += 1;
        }
        // A connection nobody here will accept within this poll: wake the
        // threads waiting on non-busy cores, one of which may take it.
        let unattended = self.accept[core].busy() || self.backlog[core].len() > self.app_batch;
        if unattended && self.options.stealing {
            for c in 0..self.cores {
                if c != core && !self.accept[c].busy() {
                    cpu.wake(c);
                }
            }
        }
    }

    /// Queues `p`, received by `rx`, in the backlog of `owner`.
    fn queue_for(&mut self, owner: usize, rx: usize, p: SimPacket, cpu: &mut Cpu<'_>) {
        if self.backlog[owner].len() >= self.queue_size {
            self.counters.backlog_drops += 1;
            cpu.drop_packet(&p);
            return;
        }
        let forwarded = owner != rx;
        if forwarded {
            // The descriptor goes into another core's socket queue.
            cpu.charge(u64::from(cpu.cost().remote_cycles));
            self.counters.forwarded_packets += 1;
            cpu.wake(owner);
        }
        self.backlog[owner].push_back(Work::Packet {
            packet: p,
            forwarded,
        });
        self.flows[p.flow as usize].queued += 1;
    }

    /// The flow-group round at `now`.
    fn round(&mut self, now: Ns) {
        for core in 0..self.cores {
            let victim = self.stealers[core].take_top_victim();
            if self.accept[core].busy() || !self.options.flow_group_migration {
                continue;
            }
            if let Some(v) = victim {
                if self.groups.migrate(v, core, now) {
                    self.counters.flow_group_migrations += 1;
                }
            }
        }
        self.groups.new_round();
    }

    /// An [`std::sync::Arc`] to the record of which core processed each
    /// connection's packets.
    #[cfg(test)]
    fn audit(&self) -> std::sync::Arc<std::sync::Mutex<tests::Audit>> {
        std::sync::Arc::clone(&self.audit)
    }
}

impl Policy for AffinityAccept {
    fn name(&self) -> String {
        "affinity-accept".into()
    }

    fn topology(&self) -> Topology {
        Topology::hardware(self.cores, self.queue_size)
    }

    fn state_table(&self) -> StateTable {
        StateTable::Sharded
    }

    fn steer(&mut self, p: &SimPacket, now: Ns) -> Option<usize> {
        Some(self.groups.steer(p.hash, now))
    }

    fn poll(
        &mut self,
        core: usize,
        now: Ns,
        queues: &mut Queues,
        max: usize,
        batch: &mut Vec<SimPacket>,
    ) {
        self.app_batch = max.max(1);
        queues.take_polled(core, now, max * RX_BATCHES, batch);
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        let core = cpu.core();
        self.groups.took(core, batch.len());
        debug_assert_eq!(self.groups.queue_len(core), cpu.queue_len(core));
        // Packets released from a fence arrived before anything just taken.
        while let Some(p) = self.released[core].pop_front() {
            self.receive(core, p, cpu);
        }
        for &p in batch.iter() {
            match self.groups.receive(core, p.hash, p, &mut self.lists) {
                Received::Current => self.receive(core, p, cpu),
                Received::Held => self.counters.fence_held_packets += 1,
                Received::Old(group) => {
                    self.receive(core, p, cpu);
                    if let Some((to, mut held)) = self.groups.old_handled(group) {
                        if !held.is_empty() {
                            while let Some((q, _)) = self.lists.pop(&mut held) {
                                self.released[to].push_back(q);
                            }
                            cpu.wake(to);
                        }
                    }
                }
            }
        }
        self.run_application(core, cpu);
    }

    fn has_work(&self, core: usize) -> bool {
        !self.backlog[core].is_empty()
            || !self.released[core].is_empty()
            || (self.may_steal(core)
                && self
                    .accept
                    .iter()
                    .enumerate()
                    .any(|(v, q)| v != core && !q.is_empty()))
    }

    fn next_timer(&self) -> Option<Ns> {
        Some(self.next_round)
    }

    fn timer(&mut self, now: Ns, _sys: &mut System<'_>) {
        self.round(now);
        self.next_round = now + self.interval_ns;
    }

    fn migrations(&self) -> u64 {
        self.counters.steals + self.counters.flow_group_migrations
    }

    fn mechanisms(&self) -> PolicyMechanisms {
        PolicyMechanisms::AffinityAccept(self.counters)
    }
}
