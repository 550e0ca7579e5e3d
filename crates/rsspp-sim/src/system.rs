//! The interface between the engine and the policies: what a policy is
//! ([`Policy`], built from a [`PolicyConfig`], with its [`Topology`]) and
//! what it sees of the simulated machine ([`Queues`], a core running a batch
//! as [`Cpu`], the system at a timer as [`System`]).
//!
//! Dependencies go one way: the engine ([`crate::engine`]) drives a
//! `dyn Policy` through this module, the policies ([`crate::policy`])
//! implement it, and the registry ([`crate::policy::build`]) names them;
//! neither the engine nor this module knows any policy.

use std::collections::VecDeque;

use crate::cost::{CostModel, NsMemo, StateModel, StateTable};
use crate::mechanisms::PolicyMechanisms;
use crate::metrics::{FinishOrder, LatencyHistogram};
use crate::packet::{Ns, SimPacket};

/// The cores and queues a policy needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Processing cores, numbered `0..workers`.
    pub workers: usize,
    /// All cores: processing cores, then dispatching cores.
    pub cores: usize,
    /// Capacity of each queue (receive queues, software queues), packets.
    pub queue_capacity: Vec<usize>,
    /// For each core, the queues it polls, in order of preference.
    pub polls: Vec<Vec<usize>>,
}

impl Topology {
    /// One NIC receive queue per processing core, polled by that core.
    pub fn hardware(workers: usize, queue_size: usize) -> Self {
        Self {
            workers,
            cores: workers,
            queue_capacity: vec![queue_size; workers],
            polls: (0..workers).map(|c| vec![c]).collect(),
        }
    }
}

/// The settings every policy is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Processing cores.
    pub cores: usize,
    /// Descriptors per NIC receive queue (and slots per software queue).
    pub queue_size: usize,
    /// Indirection table size.
    pub reta_size: usize,
    /// Where flow-affine policies keep flow state.
    pub state_table: StateTable,
    /// Control interval of the dynamic policies, nanoseconds.
    pub interval_ns: Ns,
    /// Delay before a table rewrite takes effect in the NIC, nanoseconds.
    pub table_update_ns: Ns,
    /// Whether policies that can add and remove cores do.
    pub autoscale: bool,
    /// Target average load for scaling.
    pub target_load: f64,
    /// Seed of the policies' own random choices.
    pub seed: u64,
    /// Settings of `ovs-alb` (Open vSwitch's PMD auto load balancer).
    pub ovs_alb: OvsAlbOptions,
}

/// Settings of `ovs-alb`: the balancer's own (sample and rebalance
/// intervals, load and improvement thresholds) and the receive queues per
/// core it moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OvsAlbOptions {
    /// The auto load balancer's settings (OVS's defaults: 10 s samples, a
    /// check at most every minute, 95 % load, 25 % improvement).
    pub alb: rsspp_core::ovs_alb::OvsAlbConfig,
    /// Receive queues per PMD (core); the NIC's static RSS table spreads
    /// the buckets equally over all of them.
    pub rxqs_per_pmd: usize,
}

impl Default for OvsAlbOptions {
    fn default() -> Self {
        Self {
            alb: rsspp_core::ovs_alb::OvsAlbConfig::default(),
            rxqs_per_pmd: 4,
        }
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            cores: 8,
            queue_size: 4096,
            reta_size: 512,
            state_table: StateTable::Sharded,
            interval_ns: 100_000_000,
            table_update_ns: 20_000,
            autoscale: false,
            target_load: 0.8,
            seed: 1,
            ovs_alb: OvsAlbOptions::default(),
        }
    }
}

/// A load-balancing method.
pub trait Policy: Send {
    /// The name it is reported under.
    fn name(&self) -> String;

    /// Its cores and queues (asked once, before the run).
    fn topology(&self) -> Topology;

    /// Where flow state lives while this policy runs.
    fn state_table(&self) -> StateTable;

    /// The queue a packet arriving at the NIC joins; `None` drops it.
    fn steer(&mut self, packet: &SimPacket, now: Ns) -> Option<usize>;

    /// Core `core` polls at `now`: take at most `max` packets into `batch`.
    /// By default it takes from the queues it polls, in order.
    fn poll(
        &mut self,
        core: usize,
        now: Ns,
        queues: &mut Queues,
        max: usize,
        batch: &mut Vec<SimPacket>,
    ) {
        queues.take_polled(core, now, max, batch);
    }

    /// Processes a polled batch on `cpu` (which may also hold other work
    /// the policy kept for this core). Every packet handed to
    /// [`Cpu::process`] is finished; the policy may keep some for later.
    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>);

    /// Whether core `core` has work of the policy's own waiting (packets it
    /// parked and released): a core with none and an empty queue sleeps.
    fn has_work(&self, _core: usize) -> bool {
        false
    }

    /// When the policy's next timer is due, if it has one.
    fn next_timer(&self) -> Option<Ns> {
        None
    }

    /// Runs the timer due at `now`.
    fn timer(&mut self, _now: Ns, _sys: &mut System<'_>) {}

    /// Whether a poll only takes the ready packets of the core's own queues
    /// (the default [`poll`](Self::poll)) and the policy never keeps work of
    /// its own ([`has_work`](Self::has_work) always false). A core whose
    /// queues are empty when its batch ends then finds nothing at the poll
    /// that follows unless a packet is queued for it or it is woken first,
    /// and the engine only runs that poll if one is (the results are the
    /// same; an idle poll costs the host as much as a batch of one packet).
    fn polls_own_queues_only(&self) -> bool {
        false
    }

    /// Whether processing core `core` is in use now (scaling policies leave
    /// some idle).
    fn is_active(&self, _core: usize) -> bool {
        true
    }

    /// State migrations so far (buckets, flows, flow groups, classes…).
    fn migrations(&self) -> u64 {
        0
    }

    /// Counters of the policy's own mechanisms (none by default).
    fn mechanisms(&self) -> PolicyMechanisms {
        PolicyMechanisms::None {}
    }
}

/// One queue: a NIC receive queue or a software queue between cores.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    items: VecDeque<SimPacket>,
    capacity: usize,
    enqueued: u64,
    dequeued: u64,
    pub(crate) drops: u64,
}

/// Every queue of the system, and which cores poll which.
#[derive(Debug, Clone)]
pub struct Queues {
    pub(crate) queues: Vec<Queue>,
    /// Per core: the queues it polls.
    pub(crate) polls: Vec<Vec<usize>>,
    /// Per queue: the cores that poll it.
    pollers: Vec<Vec<usize>>,
}

impl Queues {
    pub(crate) fn new(topology: &Topology) -> Self {
        let mut pollers = vec![Vec::new(); topology.queue_capacity.len()];
        for (core, qs) in topology.polls.iter().enumerate() {
            for &q in qs {
                pollers[q].push(core);
            }
        }
        Self {
            queues: topology
                .queue_capacity
                .iter()
                .map(|&capacity| Queue {
                    items: VecDeque::with_capacity(capacity.min(1 << 16)),
                    capacity,
                    enqueued: 0,
                    dequeued: 0,
                    drops: 0,
                })
                .collect(),
            polls: topology.polls.clone(),
            pollers,
        }
    }

    /// Number of queues.
    pub fn count(&self) -> usize {
        self.queues.len()
    }

    /// Packets waiting in queue `q` (ready or not).
    pub fn len(&self, q: usize) -> usize {
        self.queues[q].items.len()
    }

    /// Whether queue `q` is empty.
    pub fn is_empty(&self, q: usize) -> bool {
        self.queues[q].items.is_empty()
    }

    /// Packets ever put in queue `q` (a NIC's per-queue receive counter).
    pub fn enqueued(&self, q: usize) -> u64 {
        self.queues[q].enqueued
    }

    /// Packets ever taken from queue `q`.
    pub fn dequeued(&self, q: usize) -> u64 {
        self.queues[q].dequeued
    }

    /// Appends `p`; false (and counted as a drop) when the queue is full.
    pub(crate) fn push(&mut self, q: usize, p: SimPacket) -> bool {
        let queue = &mut self.queues[q];
        if queue.items.len() >= queue.capacity {
            queue.drops += 1;
            return false;
        }
        queue.items.push_back(p);
        queue.enqueued += 1;
        true
    }

    /// Moves up to `max` packets ready at `now` from the head of queue `q`
    /// into `batch`; returns how many.
    pub fn take(&mut self, q: usize, now: Ns, max: usize, batch: &mut Vec<SimPacket>) -> usize {
        let queue = &mut self.queues[q];
        let n = queue
            .items
            .iter()
            .take(max)
            .take_while(|p| p.ready_ns <= now)
            .count();
        let (front, back) = queue.items.as_slices();
        let from_front = n.min(front.len());
        batch.extend_from_slice(&front[..from_front]);
        batch.extend_from_slice(&back[..n - from_front]);
        queue.items.drain(..n);
        queue.dequeued += n as u64;
        if queue.items.is_empty() {
            // Back to the start of the buffer: a queue that keeps emptying
            // (most of them, below saturation) then cycles through a few
            // cache lines of the host instead of its whole ring.
            queue.items.clear();
        }
        n
    }

    /// When the first head packet of the queues `core` polls that is not
    /// ready at `now` becomes ready (a software queue filled by a
    /// dispatching core whose batch runs ahead of the other cores' clocks).
    pub(crate) fn next_ready(&self, core: usize, now: Ns) -> Option<Ns> {
        self.polls[core]
            .iter()
            .filter_map(|&q| self.queues[q].items.front().map(|p| p.ready_ns))
            .filter(|&t| t > now)
            .min()
    }

    /// Whether every queue `core` polls is empty.
    pub(crate) fn polled_empty(&self, core: usize) -> bool {
        self.polls[core]
            .iter()
            .all(|&q| self.queues[q].items.is_empty())
    }

    /// Takes up to `max` packets from the queues `core` polls, in order.
    pub fn take_polled(&mut self, core: usize, now: Ns, max: usize, batch: &mut Vec<SimPacket>) {
        let start = batch.len();
        for i in 0..self.polls[core].len() {
            let q = self.polls[core][i];
            let got = batch.len() - start;
            if got >= max {
                break;
            }
            self.take(q, now, max - got, batch);
        }
    }
}

/// One core's time and what it finished, as the engine tracks them.
#[derive(Debug, Clone, Default)]
pub(crate) struct CoreState {
    /// Busy time of the batches already finished.
    pub(crate) busy_done: Ns,
    /// The batch in progress: `[start, end)`.
    pub(crate) batch_start: Ns,
    pub(crate) batch_end: Ns,
    /// A batch is in progress or a poll is scheduled.
    pub(crate) scheduled: bool,
    /// Packets finished in the current sample and second.
    pub(crate) done_sample: u64,
    pub(crate) done_second: u64,
    /// Busy time at the last sample.
    pub(crate) busy_at_sample: Ns,
    /// Active in every sample of the current second so far.
    pub(crate) active_all_second: bool,
}

impl CoreState {
    pub(crate) fn busy_at(&self, t: Ns) -> Ns {
        if self.scheduled && t > self.batch_start {
            self.busy_done + (t.min(self.batch_end) - self.batch_start)
        } else {
            self.busy_done
        }
    }
}

/// The cores' polls due: at most one per core (a core is `scheduled` from
/// the moment its poll is due until the engine runs it), taken earliest
/// first, polls due at the same instant in the order they were scheduled.
/// With a handful of cores a slot per core and a scan beat a heap.
///
/// A poll may also be *held*: the poll that follows a batch when the core's
/// queues are empty then and the policy has nothing else for it
/// ([`Policy::polls_own_queues_only`]). It keeps its place in the order but
/// is not taken until a packet is queued for the core or the core is woken
/// ([`Self::release`]); one whose time passed first was an idle poll, and
/// the core has slept since ([`Self::lapsed`]).
#[derive(Debug, Clone)]
pub(crate) struct PollEvents {
    /// Per core: when its poll is due (high 64 bits) and the order it was
    /// scheduled in (low 64 bits), compared as one number; [`Self::NONE`]
    /// when none is due.
    due: Vec<u128>,
    /// Per core: its held poll's key, [`Self::NONE`] when none is held.
    held: Vec<u128>,
    /// Polls held.
    holding: usize,
    /// The engine's place in the order of keys: every poll with a smaller
    /// key has run (or, held, has lapsed).
    position: u128,
    /// The core whose poll comes first (`usize::MAX`: none due).
    first: usize,
    scheduled: u64,
}

impl PollEvents {
    const NONE: u128 = u128::MAX;

    pub(crate) fn new(cores: usize) -> Self {
        Self {
            due: vec![Self::NONE; cores],
            held: vec![Self::NONE; cores],
            holding: 0,
            position: 0,
            first: usize::MAX,
            scheduled: 0,
        }
    }

    fn key(&mut self, at: Ns) -> u128 {
        self.scheduled += 1;
        (u128::from(at) << 64) | u128::from(self.scheduled)
    }

    /// Core `core`, which has no poll due, polls at `at`.
    pub(crate) fn push(&mut self, core: usize, at: Ns) {
        let key = self.key(at);
        self.push_key(core, key);
    }

    fn push_key(&mut self, core: usize, key: u128) {
        assert_eq!(self.due[core], Self::NONE, "one poll per core");
        self.due[core] = key;
        if self.first == usize::MAX || key < self.due[self.first] {
            self.first = core;
        }
    }

    /// Core `core`, which has no poll due, polls at `at` if a packet is
    /// queued for it or it is woken before then (held).
    pub(crate) fn hold(&mut self, core: usize, at: Ns) {
        debug_assert_eq!(self.due[core], Self::NONE, "one poll per core");
        self.held[core] = self.key(at);
        self.holding += 1;
    }

    /// When the first poll is due.
    pub(crate) fn peek(&self) -> Option<Ns> {
        self.due.get(self.first).map(|&key| (key >> 64) as Ns)
    }

    /// Takes the first poll: (due, core).
    pub(crate) fn pop(&mut self) -> Option<(Ns, usize)> {
        let core = self.first;
        let key = *self.due.get(core)?;
        self.position = key;
        self.due[core] = Self::NONE;
        self.first = first_of(&self.due);
        Some(((key >> 64) as Ns, core))
    }

    /// The engine has run everything due up to `key` (a timer or an
    /// arrival at its instant).
    pub(crate) fn advance(&mut self, key: u128) {
        self.position = self.position.max(key);
    }

    /// Whether `core` has a held poll.
    pub(crate) fn is_held(&self, core: usize) -> bool {
        self.held[core] != Self::NONE
    }

    /// Whether any core has a held poll.
    pub(crate) fn holds_any(&self) -> bool {
        self.holding > 0
    }

    /// The time of `core`'s held poll if it lapsed (its turn passed: the
    /// core polled then, found nothing and slept); `None` when it holds
    /// none or its turn is still to come.
    pub(crate) fn lapsed(&self, core: usize) -> Option<Ns> {
        let key = self.held[core];
        (key != Self::NONE && key < self.position).then_some((key >> 64) as Ns)
    }

    /// Drops `core`'s held poll (lapsed).
    pub(crate) fn forget(&mut self, core: usize) {
        self.held[core] = Self::NONE;
        self.holding -= 1;
    }

    /// Makes `core`'s held poll due, in its place.
    pub(crate) fn release(&mut self, core: usize) {
        let key = std::mem::replace(&mut self.held[core], Self::NONE);
        self.holding -= 1;
        self.push_key(core, key);
    }

    /// Makes every held poll due (the input is over: they run, in their
    /// places, as the idle polls they are).
    pub(crate) fn release_all(&mut self) {
        for core in 0..self.held.len() {
            if self.is_held(core) {
                self.release(core);
            }
        }
    }
}

/// The index of the smallest key (the first of equals), `usize::MAX` when
/// every key is `u128::MAX` (none).
pub(crate) fn first_of(keys: &[u128]) -> usize {
    let mut first = usize::MAX;
    let mut min = u128::MAX;
    for (i, &k) in keys.iter().enumerate() {
        let less = k < min;
        min = if less { k } else { min };
        first = if less { i } else { first };
    }
    first
}

/// Everything the engine holds besides the policy: what [`Cpu`] and
/// [`System`] act on.
pub(crate) struct Shared {
    pub(crate) cost: CostModel,
    /// `cost.ns`, remembered.
    pub(crate) ns: NsMemo,
    pub(crate) topology: Topology,
    pub(crate) queues: Queues,
    pub(crate) cores: Vec<CoreState>,
    pub(crate) state: StateModel,
    /// Core polls due.
    pub(crate) events: PollEvents,
    pub(crate) latency: LatencyHistogram,
    pub(crate) reorder: FinishOrder,
    pub(crate) processed: u64,
    pub(crate) policy_drops: u64,
    /// Per core: the flow of the last packet it processed (spatial
    /// locality at the cores).
    pub(crate) last_flow: Vec<u32>,
    /// Runs of consecutive packets of one flow, over all cores.
    pub(crate) runs: u64,
}

impl Shared {
    pub(crate) fn schedule(&mut self, core: usize, at: Ns) {
        if self.release_held(core) {
            return;
        }
        let c = &mut self.cores[core];
        if c.scheduled {
            return;
        }
        c.scheduled = true;
        c.batch_start = at;
        c.batch_end = at;
        self.events.push(core, at);
    }

    /// Makes `core`'s held poll due if its turn is still to come (true).
    /// One that lapsed is dropped, the core left as that idle poll left
    /// it: its batch counted, asleep (false, as for a core holding none).
    fn release_held(&mut self, core: usize) -> bool {
        if !self.events.is_held(core) {
            return false;
        }
        let Some(at) = self.events.lapsed(core) else {
            self.events.release(core);
            return true;
        };
        self.events.forget(core);
        let c = &mut self.cores[core];
        c.busy_done += c.batch_end - c.batch_start;
        c.scheduled = false;
        c.batch_start = at;
        c.batch_end = at;
        false
    }

    /// Wakes one sleeping poller of queue `q` for a packet ready at `at`
    /// (and makes every held poll of its pollers due: their queue is no
    /// longer empty).
    pub(crate) fn wake_pollers(&mut self, q: usize, at: Ns) {
        if !self.events.holds_any() {
            // The common case, without a look at each poller's held poll:
            // 2% of a default comparison's time.
            for i in 0..self.queues.pollers[q].len() {
                let core = self.queues.pollers[q][i];
                if !self.cores[core].scheduled {
                    self.schedule(core, at);
                    return;
                }
            }
            return;
        }
        let mut woken = false;
        for i in 0..self.queues.pollers[q].len() {
            let core = self.queues.pollers[q][i];
            if !self.release_held(core) && !woken && !self.cores[core].scheduled {
                self.schedule(core, at);
                woken = true;
            }
        }
    }

    pub(crate) fn finish(&mut self, core: usize, p: &SimPacket, at: Ns) {
        self.latency.record(at.saturating_sub(p.arrival_ns));
        self.reorder.finish(core, at, p.flow, p.seq);
        self.processed += 1;
        if self.last_flow[core] != p.flow {
            self.last_flow[core] = p.flow;
            self.runs += 1;
        }
        let c = &mut self.cores[core];
        c.done_sample += 1;
        c.done_second += 1;
    }
}

/// A core running one batch: the policy processes packets through it.
pub struct Cpu<'a> {
    pub(crate) core: usize,
    pub(crate) now: Ns,
    pub(crate) table: StateTable,
    pub(crate) sh: &'a mut Shared,
}

impl Cpu<'_> {
    /// The core.
    pub fn core(&self) -> usize {
        self.core
    }

    /// The core's time: the batch start plus what it processed so far.
    pub fn now(&self) -> Ns {
        self.now
    }

    /// The cost model.
    pub fn cost(&self) -> &CostModel {
        &self.sh.cost
    }

    /// Processes `p` to completion with the policy's state table.
    pub fn process(&mut self, p: &SimPacket) {
        let table = self.table;
        self.process_with(p, table, 0);
    }

    /// Processes `p` to completion with state in `table`, plus
    /// `extra_cycles` of the policy's own work.
    pub fn process_with(&mut self, p: &SimPacket, table: StateTable, extra_cycles: u64) {
        let sh = &mut *self.sh;
        let cost = &sh.cost;
        let base = u64::from(cost.packet_cycles) + cost.work_cycles(p) + extra_cycles;
        let base_ns = sh.ns.ns(cost, base);
        let (state_cycles, wait) = sh.state.access(cost, table, self.core, p.flow, self.now, 0);
        self.now += wait + sh.ns.ns(cost, state_cycles) + base_ns;
        let at = self.now;
        sh.finish(self.core, p, at);
    }

    /// Waits (busy) until `t`: another core has not finished with what this
    /// one needs next.
    pub fn wait_until(&mut self, t: Ns) {
        self.now = self.now.max(t);
    }

    /// Spends `cycles` on the policy's own work (dispatching, bookkeeping).
    pub fn charge(&mut self, cycles: u64) {
        self.now += self.sh.ns.ns(&self.sh.cost, cycles);
    }

    /// Touches `flow`'s state as the policy's own work (a dispatcher's flow
    /// table): the cost model's price for it.
    pub fn touch_state(&mut self, flow: u32, table: StateTable) {
        let sh = &mut *self.sh;
        let (cycles, wait) = sh
            .state
            .access(&sh.cost, table, self.core, flow, self.now, 0);
        self.now += wait + sh.ns.ns(&sh.cost, cycles);
    }

    /// Puts `p` in queue `q`, ready now (a software queue); false when the
    /// queue is full and the packet is dropped.
    pub fn enqueue(&mut self, q: usize, mut p: SimPacket) -> bool {
        p.ready_ns = self.now;
        let ok = self.sh.queues.push(q, p);
        if ok {
            self.sh.wake_pollers(q, self.now);
        }
        ok
    }

    /// Length of queue `q` now.
    pub fn queue_len(&self, q: usize) -> usize {
        self.sh.queues.len(q)
    }

    /// Packets ever put in queue `q` (its tail position).
    pub fn queue_enqueued(&self, q: usize) -> u64 {
        self.sh.queues.enqueued(q)
    }

    /// Drops `p` on the policy's behalf (a full buffer).
    pub fn drop_packet(&mut self, _p: &SimPacket) {
        self.sh.policy_drops += 1;
    }

    /// Makes sure `core` polls no later than now (the policy has work for
    /// it).
    pub fn wake(&mut self, core: usize) {
        let at = self.now;
        self.sh.schedule(core, at);
    }
}

/// The system as a policy timer sees it.
pub struct System<'a> {
    pub(crate) now: Ns,
    pub(crate) sh: &'a mut Shared,
}

impl System<'_> {
    /// Now.
    pub fn now(&self) -> Ns {
        self.now
    }

    /// Busy nanoseconds of `core` since the start, up to now.
    pub fn busy_ns(&self, core: usize) -> Ns {
        self.sh.cores[core].busy_at(self.now)
    }

    /// When `core` finishes the batch it is processing (now if it is idle):
    /// a batch is costed when it starts, so its packets are taken and
    /// accounted for, but the core is not done with them before then.
    pub fn busy_until(&self, core: usize) -> Ns {
        let c = &self.sh.cores[core];
        if c.scheduled {
            c.batch_end.max(self.now)
        } else {
            self.now
        }
    }

    /// The queues (lengths and counters).
    pub fn queues(&self) -> &Queues {
        &self.sh.queues
    }

    /// The cost model.
    pub fn cost(&self) -> &CostModel {
        &self.sh.cost
    }

    /// Makes sure `core` polls now.
    pub fn wake(&mut self, core: usize) {
        let at = self.now;
        self.sh.schedule(core, at);
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The per-core slots give the polls in the order of a heap of
        /// (time, order scheduled): earliest first, ties first scheduled.
        #[test]
        fn polls_come_as_from_a_heap(steps in vec((0usize..6, 0u64..5, any::<bool>()), 1..300)) {
            let mut polls = PollEvents::new(6);
            let mut heap = BinaryHeap::new();
            let mut due = [false; 6];
            let mut seq = 0u64;
            for (core, at, pop) in steps {
                if pop {
                    let want = heap.pop().map(|Reverse((at, _, core))| (at, core));
                    prop_assert_eq!(polls.pop(), want);
                    if let Some((_, core)) = want {
                        due[core] = false;
                    }
                } else if !due[core] {
                    due[core] = true;
                    seq += 1;
                    polls.push(core, at);
                    heap.push(Reverse((at, seq, core)));
                }
                prop_assert_eq!(polls.peek(), heap.peek().map(|Reverse((at, _, _))| *at));
            }
        }
    }
}
