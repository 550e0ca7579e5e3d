//! The discrete-event engine: packets arrive at the NIC in time order, the
//! policy steers each into a queue (a full queue drops it), and every core
//! runs to completion on batches of up to 32 packets taken from the queues
//! it polls. Time advances from event to event: an arrival, a core finishing
//! a batch, a policy timer, a measurement sample.
//!
//! A core's batch is costed when it starts (the cost model and the state
//! caches at that instant), and its packets finish one after the other; a
//! core whose queues are empty sleeps until a packet for it arrives, and
//! that time counts as empty polling. Load is measured as RSS++ measures it:
//! busy time over busy plus polling time, per interval.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rsspp_core::measure::imbalance_ratio;

use crate::cost::{CostModel, StateModel, StateTable};
use crate::metrics::{FinishOrder, LatencyHistogram};
use crate::packet::{Ns, SimPacket};
use crate::policy::{Policy, Topology};
use crate::result::{PolicyResult, PolicySummary, Timeline};

/// Settings of the engine itself.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Most packets a core takes per poll.
    pub batch: usize,
    /// Length of a timeline sample (the 1-second imbalance samples are made
    /// of ten of them by default).
    pub sample_ns: Ns,
    /// Samples per imbalance sample.
    pub samples_per_second: usize,
    /// The cost model.
    pub cost: CostModel,
    /// Points of the latency CDF in the result.
    pub cdf_points: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            batch: 32,
            sample_ns: 100_000_000,
            samples_per_second: 10,
            cost: CostModel::default(),
            cdf_points: 200,
        }
    }
}

/// One queue: a NIC receive queue or a software queue between cores.
#[derive(Debug, Clone)]
struct Queue {
    items: VecDeque<SimPacket>,
    capacity: usize,
    enqueued: u64,
    dequeued: u64,
    drops: u64,
}

/// Every queue of the system, and which cores poll which.
#[derive(Debug, Clone)]
pub struct Queues {
    queues: Vec<Queue>,
    /// Per core: the queues it polls.
    polls: Vec<Vec<usize>>,
    /// Per queue: the cores that poll it.
    pollers: Vec<Vec<usize>>,
}

impl Queues {
    fn new(topology: &Topology) -> Self {
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
    fn push(&mut self, q: usize, p: SimPacket) -> bool {
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
        let mut n = 0;
        while n < max {
            match queue.items.front() {
                Some(p) if p.ready_ns <= now => {
                    batch.push(*p);
                    queue.items.pop_front();
                    n += 1;
                }
                _ => break,
            }
        }
        queue.dequeued += n as u64;
        n
    }

    /// When the first head packet of the queues `core` polls that is not
    /// ready at `now` becomes ready (a software queue filled by a
    /// dispatching core whose batch runs ahead of the other cores' clocks).
    fn next_ready(&self, core: usize, now: Ns) -> Option<Ns> {
        self.polls[core]
            .iter()
            .filter_map(|&q| self.queues[q].items.front().map(|p| p.ready_ns))
            .filter(|&t| t > now)
            .min()
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

#[derive(Debug, Clone, Default)]
struct CoreState {
    /// Busy time of the batches already finished.
    busy_done: Ns,
    /// The batch in progress: `[start, end)`.
    batch_start: Ns,
    batch_end: Ns,
    /// A batch is in progress or a poll is scheduled.
    scheduled: bool,
    /// Packets finished in the current sample and second.
    done_sample: u64,
    done_second: u64,
    /// Busy time at the last sample.
    busy_at_sample: Ns,
    /// Active in every sample of the current second so far.
    active_all_second: bool,
}

impl CoreState {
    fn busy_at(&self, t: Ns) -> Ns {
        if self.scheduled && t > self.batch_start {
            self.busy_done + (t.min(self.batch_end) - self.batch_start)
        } else {
            self.busy_done
        }
    }
}

/// Everything the engine holds besides the policy.
struct Shared {
    config: EngineConfig,
    topology: Topology,
    queues: Queues,
    cores: Vec<CoreState>,
    state: StateModel,
    /// Core polls: (time, sequence, core).
    events: BinaryHeap<Reverse<(Ns, u64, usize)>>,
    event_seq: u64,
    latency: LatencyHistogram,
    reorder: FinishOrder,
    processed: u64,
    policy_drops: u64,
    /// Per core: the flow of the last packet it processed (spatial
    /// locality at the cores).
    last_flow: Vec<u32>,
    /// Runs of consecutive packets of one flow, over all cores.
    runs: u64,
}

impl Shared {
    fn schedule(&mut self, core: usize, at: Ns) {
        let c = &mut self.cores[core];
        if c.scheduled {
            return;
        }
        c.scheduled = true;
        c.batch_start = at;
        c.batch_end = at;
        self.event_seq += 1;
        self.events.push(Reverse((at, self.event_seq, core)));
    }

    /// Wakes one sleeping poller of queue `q` for a packet ready at `at`.
    fn wake_pollers(&mut self, q: usize, at: Ns) {
        for i in 0..self.queues.pollers[q].len() {
            let core = self.queues.pollers[q][i];
            if !self.cores[core].scheduled {
                self.schedule(core, at);
                return;
            }
        }
    }

    fn finish(&mut self, core: usize, p: &SimPacket, at: Ns) {
        self.latency.record(at.saturating_sub(p.arrival_ns));
        self.reorder.finish(at, p.flow, p.seq);
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
    core: usize,
    now: Ns,
    table: StateTable,
    sh: &'a mut Shared,
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
        &self.sh.config.cost
    }

    /// Processes `p` to completion with the policy's state table.
    pub fn process(&mut self, p: &SimPacket) {
        let table = self.table;
        self.process_with(p, table, 0);
    }

    /// Processes `p` to completion with state in `table`, plus
    /// `extra_cycles` of the policy's own work.
    pub fn process_with(&mut self, p: &SimPacket, table: StateTable, extra_cycles: u64) {
        let cost = &self.sh.config.cost;
        let base = u64::from(cost.packet_cycles) + cost.work_cycles(p) + extra_cycles;
        let base_ns = cost.ns(base);
        let (state_cycles, wait) = self
            .sh
            .state
            .access(cost, table, self.core, p.flow, self.now, 0);
        self.now += wait + cost.ns(state_cycles) + base_ns;
        let at = self.now;
        self.sh.finish(self.core, p, at);
    }

    /// Waits (busy) until `t`: another core has not finished with what this
    /// one needs next.
    pub fn wait_until(&mut self, t: Ns) {
        self.now = self.now.max(t);
    }

    /// Spends `cycles` on the policy's own work (dispatching, bookkeeping).
    pub fn charge(&mut self, cycles: u64) {
        self.now += self.sh.config.cost.ns(cycles);
    }

    /// Touches `flow`'s state as the policy's own work (a dispatcher's flow
    /// table): the cost model's price for it.
    pub fn touch_state(&mut self, flow: u32, table: StateTable) {
        let cost = &self.sh.config.cost;
        let (cycles, wait) = self
            .sh
            .state
            .access(cost, table, self.core, flow, self.now, 0);
        self.now += wait + cost.ns(cycles);
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
    now: Ns,
    sh: &'a mut Shared,
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
        &self.sh.config.cost
    }

    /// Makes sure `core` polls now.
    pub fn wake(&mut self, core: usize) {
        let at = self.now;
        self.sh.schedule(core, at);
    }
}

/// Runs one policy over a stream of packets.
pub struct Engine {
    policy: Box<dyn Policy>,
    sh: Shared,
    timeline: Timeline,
    imbalance: Vec<f64>,
    next_sample: Ns,
    samples_in_second: usize,
    offered_sample: u64,
    drops_at_sample: u64,
    offered: u64,
    batch: Vec<SimPacket>,
    last_arrival: Ns,
    load_sum: f64,
    load_n: u64,
}

impl Engine {
    /// An engine for `policy`.
    pub fn new(policy: Box<dyn Policy>, config: EngineConfig) -> Self {
        let topology = policy.topology();
        assert_eq!(
            topology.polls.len(),
            topology.cores,
            "one poll list per core"
        );
        let state = StateModel::new(&config.cost, topology.cores);
        let cores = vec![
            CoreState {
                active_all_second: true,
                ..CoreState::default()
            };
            topology.cores
        ];
        let timeline = Timeline {
            interval_ms: (config.sample_ns / 1_000_000) as u32,
            ..Timeline::default()
        };
        let next_sample = config.sample_ns;
        let last_flow = vec![u32::MAX; topology.cores];
        Self {
            policy,
            sh: Shared {
                queues: Queues::new(&topology),
                topology,
                cores,
                state,
                events: BinaryHeap::new(),
                event_seq: 0,
                latency: LatencyHistogram::default(),
                reorder: FinishOrder::default(),
                processed: 0,
                policy_drops: 0,
                last_flow,
                runs: 0,
                config,
            },
            timeline,
            imbalance: Vec::new(),
            next_sample,
            samples_in_second: 0,
            offered_sample: 0,
            drops_at_sample: 0,
            offered: 0,
            batch: Vec::with_capacity(64),
            last_arrival: 0,
            load_sum: 0.0,
            load_n: 0,
        }
    }

    /// Feeds the next packets (in time order, after those fed before).
    pub fn feed(&mut self, packets: &[SimPacket]) {
        for p in packets {
            self.run_until(p.ready_ns, false);
            self.arrive(p);
        }
    }

    /// Processes what is left after the last packet, then returns the result.
    pub fn finish(mut self) -> PolicyResult {
        self.run_until(Ns::MAX, true);
        self.sh.reorder.flush(Ns::MAX);
        // The last, partial sample.
        let now = self.sh.cores.iter().map(|c| c.batch_end).max().unwrap_or(0);
        if now > self.next_sample - self.sh.config.sample_ns {
            self.sample(now.max(self.last_arrival));
        }
        self.result()
    }

    fn total_drops(&self) -> u64 {
        self.sh.queues.queues.iter().map(|q| q.drops).sum::<u64>() + self.sh.policy_drops
    }

    fn arrive(&mut self, p: &SimPacket) {
        let now = p.ready_ns;
        self.last_arrival = now;
        self.offered += 1;
        self.offered_sample += 1;
        if p.seq == 0 {
            self.sh.reorder.flush(now);
            self.sh.reorder.new_flow(p.flow);
            self.sh.state.forget(p.flow);
        }
        match self.policy.steer(p, now) {
            Some(q) => {
                if self.sh.queues.push(q, *p) {
                    self.sh.wake_pollers(q, now);
                }
            }
            None => self.sh.policy_drops += 1,
        }
    }

    /// Runs every event due at or before `until` (all of them when
    /// `draining`: the input is over).
    fn run_until(&mut self, until: Ns, draining: bool) {
        loop {
            let core_at = self.sh.events.peek().map(|Reverse((t, _, _))| *t);
            if draining && core_at.is_none() {
                return;
            }
            let timer_at = self.policy.next_timer();
            let mut next = self.next_sample;
            let mut kind = 0u8; // 0 sample, 1 timer, 2 core
            if let Some(t) = timer_at {
                if t < next {
                    next = t;
                    kind = 1;
                }
            }
            if let Some(t) = core_at {
                if t < next {
                    next = t;
                    kind = 2;
                }
            }
            if next > until {
                return;
            }
            match kind {
                0 => {
                    let t = self.next_sample;
                    self.sample(t);
                }
                1 => {
                    let mut sys = System {
                        now: next,
                        sh: &mut self.sh,
                    };
                    self.policy.timer(next, &mut sys);
                }
                _ => {
                    let Reverse((t, _, core)) = self.sh.events.pop().expect("peeked");
                    // Finishes reported by batches that started earlier are
                    // counted for reordering once the clock passes them.
                    self.sh.reorder.flush(t);
                    self.run_core(core, t);
                }
            }
        }
    }

    fn run_core(&mut self, core: usize, now: Ns) {
        {
            let c = &mut self.sh.cores[core];
            c.busy_done += c.batch_end - c.batch_start;
            c.scheduled = false;
            c.batch_start = now;
            c.batch_end = now;
        }
        self.batch.clear();
        let max = self.sh.config.batch;
        self.policy
            .poll(core, now, &mut self.sh.queues, max, &mut self.batch);
        if self.batch.is_empty() && !self.policy.has_work(core) {
            // A dispatching core costs its batch when it starts and fills
            // software queues with packets ready later: their wake-up found
            // this core busy, so it polls again when the first is ready
            // rather than leave them stranded. Otherwise it sleeps until a
            // packet or the policy wakes it. (A ready packet the policy chose
            // not to take waits for the policy's own wake-up.)
            if let Some(t) = self.sh.queues.next_ready(core, now) {
                self.sh.schedule(core, t);
            }
            return;
        }
        let table = self.policy.state_table();
        let batch_cycles = u64::from(self.sh.config.cost.batch_cycles);
        let start = now + self.sh.config.cost.ns(batch_cycles);
        // Busy from now on: a wake-up for this core while it processes is
        // already answered by the poll at the end of the batch.
        self.sh.cores[core].scheduled = true;
        let mut batch = std::mem::take(&mut self.batch);
        let mut cpu = Cpu {
            core,
            now: start,
            table,
            sh: &mut self.sh,
        };
        self.policy.process(&mut batch, &mut cpu);
        let end = cpu.now.max(now + 1);
        self.batch = batch;
        self.sh.cores[core].batch_end = end;
        self.sh.event_seq += 1;
        self.sh.events.push(Reverse((end, self.sh.event_seq, core)));
    }

    fn sample(&mut self, t: Ns) {
        let interval = self.sh.config.sample_ns as f64;
        let cores = self.sh.topology.cores;
        let workers = self.sh.topology.workers;
        let mut load = Vec::with_capacity(cores);
        let mut queue = Vec::with_capacity(cores);
        let mut in_use = Vec::with_capacity(cores);
        let mut active = 0u16;
        for core in 0..cores {
            let busy = self.sh.cores[core].busy_at(t);
            let c = &mut self.sh.cores[core];
            let in_sample = busy - c.busy_at_sample;
            c.busy_at_sample = busy;
            let is_active = core >= workers || self.policy.is_active(core);
            in_use.push(is_active);
            if is_active {
                active += 1;
            } else {
                c.active_all_second = false;
            }
            let l = in_sample as f64 / interval;
            if is_active {
                self.load_sum += l;
                self.load_n += 1;
            }
            load.push(if is_active { l as f32 } else { 0.0 });
            let q = self.sh.queues.polls[core].first().copied();
            queue.push(q.map_or(0, |q| self.sh.queues.len(q) as u32));
            c.done_sample = 0;
        }
        let drops = self.total_drops();
        self.timeline.load.push(load);
        self.timeline.queue.push(queue);
        self.timeline.active_cores.push(active);
        self.timeline.active.push(in_use);
        self.timeline.drops.push(drops - self.drops_at_sample);
        self.timeline
            .offered_pps
            .push(self.offered_sample as f64 / (interval / 1e9));
        self.drops_at_sample = drops;
        self.offered_sample = 0;
        self.next_sample = t + self.sh.config.sample_ns;
        self.samples_in_second += 1;
        if self.samples_in_second == self.sh.config.samples_per_second {
            self.second_sample();
        }
    }

    /// One imbalance sample ([`imbalance_ratio`], percent) of the packets per processing core
    /// over the second, cores active all second long.
    fn second_sample(&mut self) {
        let workers = self.sh.topology.workers;
        let counts: Vec<u64> = self.sh.cores[..workers]
            .iter()
            .filter(|c| c.active_all_second)
            .map(|c| c.done_second)
            .collect();
        if counts.len() >= 2 && counts.iter().any(|&c| c > 0) {
            // Infinite when a core processed nothing while others worked
            // (fewer flows than cores, say).
            let counts: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
            self.imbalance.push(imbalance_ratio(&counts) * 100.0);
        }
        for c in &mut self.sh.cores {
            c.done_second = 0;
            c.active_all_second = true;
        }
        self.samples_in_second = 0;
    }

    fn result(&mut self) -> PolicyResult {
        let cost = self.sh.config.cost;
        let samples = self.timeline.load.len().max(1) as f64;
        let avg_cores = self
            .timeline
            .active_cores
            .iter()
            .map(|&a| f64::from(a))
            .sum::<f64>()
            / samples;
        let busy: Ns = self.sh.cores.iter().map(|c| c.busy_done).sum();
        let processed = self.sh.processed;
        let mut mechanisms = self.policy.mechanisms();
        let access = self.sh.state.counts();
        mechanisms.insert("state_hits".into(), access.hits);
        mechanisms.insert("state_misses".into(), access.misses);
        mechanisms.insert("state_remote".into(), access.remote);
        mechanisms.insert("lock_wait_us".into(), access.lock_wait_ns / 1000);
        // Spatial locality factor at the cores (Reframer's SLF, seed 002
        // §2.1): the mean run of packets of one flow a core processes back
        // to back, × 1000.
        let runs = self.sh.runs;
        if let Some(slf) = (processed * 1000 + runs / 2).checked_div(runs) {
            mechanisms.insert("slf_x1000".into(), slf);
        }
        let mut sorted = self.imbalance.clone();
        sorted.sort_by(f64::total_cmp);
        let imbalance_median = if sorted.is_empty() {
            0.0
        } else if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
        };
        let lat = &self.sh.latency;
        PolicyResult {
            name: self.policy.name(),
            summary: PolicySummary {
                imbalance_median,
                latency_p50_us: lat.quantile_ns(0.50) / 1000.0,
                latency_p95_us: lat.quantile_ns(0.95) / 1000.0,
                latency_p99_us: lat.quantile_ns(0.99) / 1000.0,
                drops: self.total_drops(),
                reordered: self.sh.reorder.reordered(),
                migrations: self.policy.migrations(),
                avg_cores,
                packets: self.offered,
                processed,
                avg_load: if self.load_n == 0 {
                    0.0
                } else {
                    self.load_sum / self.load_n as f64
                },
                cycles_per_packet: if processed == 0 {
                    0.0
                } else {
                    busy as f64 * cost.clock_ghz / processed as f64
                },
                mechanisms,
            },
            timeline: std::mem::take(&mut self.timeline),
            imbalance_samples: std::mem::take(&mut self.imbalance),
            latency_cdf: lat.cdf_us(self.sh.config.cdf_points),
        }
    }
}
