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

use rsspp_core::measure::imbalance_ratio;

use crate::cost::{CostModel, NsMemo, StateModel};
use crate::mechanisms::{Mechanisms, StateAccessCounters};
use crate::metrics::{FinishOrder, LatencyHistogram};
use crate::packet::{Ns, SimPacket};
use crate::result::{PolicyResult, PolicySummary, Timeline};
use crate::system::{CoreState, Policy, PollEvents, Shared};
pub use crate::system::{Cpu, Queues, System};

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
    /// Whether a core whose queues are empty when its batch ends holds its
    /// next poll until a packet is queued for it or it is woken, for the
    /// policies that allow it ([`Policy::polls_own_queues_only`]). The
    /// results are the same either way; holding is faster.
    pub hold_idle_polls: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            batch: 32,
            sample_ns: 100_000_000,
            samples_per_second: 10,
            cost: CostModel::default(),
            cdf_points: 200,
            hold_idle_polls: true,
        }
    }
}

/// Runs one policy over a stream of packets.
pub struct Engine {
    policy: Box<dyn Policy>,
    config: EngineConfig,
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
    /// Whether a core whose queues are empty when its batch ends holds its
    /// next poll ([`Policy::polls_own_queues_only`]).
    hold_idle_polls: bool,
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
        let events = PollEvents::new(topology.cores);
        let hold_idle_polls = config.hold_idle_polls && policy.polls_own_queues_only();
        Self {
            policy,
            sh: Shared {
                queues: Queues::new(&topology),
                topology,
                cores,
                state,
                events,
                latency: LatencyHistogram::default(),
                reorder: FinishOrder::default(),
                processed: 0,
                policy_drops: 0,
                last_flow,
                runs: 0,
                cost: config.cost,
                ns: NsMemo::new(),
            },
            config,
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
            hold_idle_polls,
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
        // Held polls run, in their places, as the idle polls they are: the
        // samples and timers before the last of them run too.
        self.hold_idle_polls = false;
        self.sh.events.release_all();
        self.run_until(Ns::MAX, true);
        self.sh.reorder.flush(Ns::MAX);
        // The last, partial sample.
        let now = self.sh.cores.iter().map(|c| c.batch_end).max().unwrap_or(0);
        if now > self.next_sample - self.config.sample_ns {
            self.sample(now.max(self.last_arrival));
        }
        self.result()
    }

    fn total_drops(&self) -> u64 {
        self.sh.queues.queues.iter().map(|q| q.drops).sum::<u64>() + self.sh.policy_drops
    }

    fn arrive(&mut self, p: &SimPacket) {
        let now = p.ready_ns;
        // Every poll due up to now has run.
        self.sh
            .events
            .advance((u128::from(now) << 64) | u128::from(u64::MAX));
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
            let core_at = self.sh.events.peek();
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
                    // Before the polls due at the same instant.
                    self.sh.events.advance(u128::from(next) << 64);
                    let mut sys = System {
                        now: next,
                        sh: &mut self.sh,
                    };
                    self.policy.timer(next, &mut sys);
                }
                _ => {
                    let (t, core) = self.sh.events.pop().expect("peeked");
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
        let max = self.config.batch;
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
        // What processing the batch reads per flow, asked for at once.
        for p in &self.batch {
            self.sh.reorder.prefetch(p.flow);
            self.sh.state.prefetch(table, core, p.flow);
        }
        let batch_cycles = u64::from(self.sh.cost.batch_cycles);
        let start = now + self.sh.ns.ns(&self.sh.cost, batch_cycles);
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
        if self.hold_idle_polls && self.sh.queues.polled_empty(core) {
            self.sh.events.hold(core, end);
        } else {
            self.sh.events.push(core, end);
        }
    }

    fn sample(&mut self, t: Ns) {
        let interval = self.config.sample_ns as f64;
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
        self.next_sample = t + self.config.sample_ns;
        self.samples_in_second += 1;
        if self.samples_in_second == self.config.samples_per_second {
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
        let cost = self.sh.cost;
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
        let access = self.sh.state.counts();
        // Spatial locality factor at the cores (Reframer's SLF, seed 002
        // §2.1): the mean run of packets of one flow a core processes back
        // to back, × 1000.
        let runs = self.sh.runs;
        let mechanisms = Mechanisms {
            policy: self.policy.mechanisms(),
            state: StateAccessCounters {
                state_hits: access.hits,
                state_misses: access.misses,
                state_remote: access.remote,
                lock_wait_us: access.lock_wait_ns / 1000,
            },
            slf_x1000: (processed * 1000 + runs / 2).checked_div(runs),
            reframer: None,
        };
        let mut sorted = self.imbalance.clone();
        sorted.sort_by(f64::total_cmp);
        // No sample, no statistic: NaN (`null` in JSON, `n/a` in tables),
        // never a 0 that reads as a perfect balance.
        let imbalance_median = if sorted.is_empty() {
            f64::NAN
        } else if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
        };
        let lat = &self.sh.latency;
        let quantile_us = |q: f64| {
            if processed == 0 {
                f64::NAN
            } else {
                lat.quantile_ns(q) / 1000.0
            }
        };
        PolicyResult {
            name: self.policy.name(),
            summary: PolicySummary {
                imbalance_median,
                latency_p50_us: quantile_us(0.50),
                latency_p95_us: quantile_us(0.95),
                latency_p99_us: quantile_us(0.99),
                drops: self.total_drops(),
                reordered: self.sh.reorder.reordered(),
                migrations: self.policy.migrations(),
                avg_cores,
                packets: self.offered,
                processed,
                avg_load: if self.load_n == 0 {
                    f64::NAN
                } else {
                    self.load_sum / self.load_n as f64
                },
                cycles_per_packet: if processed == 0 {
                    f64::NAN
                } else {
                    busy as f64 * cost.clock_ghz / processed as f64
                },
                mechanisms,
            },
            timeline: std::mem::take(&mut self.timeline),
            imbalance_samples: std::mem::take(&mut self.imbalance),
            latency_cdf: lat.cdf_us(self.config.cdf_points),
        }
    }
}
