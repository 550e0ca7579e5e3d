//! `orss`: offloaded RSS (`../shared/seeds/003_e1c4ef86a3a08391.txt`, §4).
//! A SmartNIC steers every flow through a per-flow table, places new flows
//! at random, estimates each flow's load by polling which flow each core is
//! processing, and moves flows between cores to lower the imbalance, with a
//! two-phase migration that never reorders a flow.
//!
//! How it maps onto the engine (choices made here are marked *choice*):
//!
//! - **Steering table**: a `Vec` indexed by [`SimPacket::flow`]. A packet
//!   with `seq == 0` starts a new flow (or a new incarnation of a reused
//!   flow number): it gets a core drawn uniformly at random (SplitMix64
//!   seeded from [`PolicyConfig::seed`]), as the thesis's OpenFlow
//!   controller does (§4.3.2).
//! - **Polling** (§4.4.2): every [`OrssParams::poll_ns`] of simulated time
//!   the NIC reads, per core, the flow the core is processing. The engine
//!   costs a batch when it starts, so the instants are found in
//!   [`Policy::process`]: each packet occupies `[start, end)` of its core's
//!   time and is credited with the poll instants falling inside; instants
//!   in idle time, batch overhead or buffering are credited to no flow.
//!   This costs one comparison per packet. *Choice*: 50 µs and 5 ms rounds
//!   give the thesis's 100 polls per core per round (§5.1).
//! - **Estimate**: the last 10 rounds weighted `0.15 / 1.1ⁿ`
//!   ([`rsspp_core::orss::load`]). A flow's load travels with it; a core's
//!   load is the sum of its flows'.
//! - **Rounds**: *choice* 5 ms (200 per second: "hundreds of iterations per
//!   second", §5.4), not [`PolicyConfig::interval_ns`]: oRSS-NIC runs a
//!   tight polling loop on the SmartNIC, not RSS++'s 100 ms control loop.
//! - **Balancing** ([`rsspp_core::orss::balancer`]): largest flow of the
//!   most loaded core to the least loaded core while the average squared
//!   imbalance falls, core reduction, and no ping-pong (a real decrease, no
//!   swap of two cores' roles, a cooldown after each move).
//! - **Two-phase migration** (§4.6.2). Flow `f` moves from core A to B:
//!   1. the table still sends `f` to A until the rule update takes effect
//!      ([`PolicyConfig::table_update_ns`], the switch's `FLOW_MOD`);
//!   2. from then on `f`'s packets go to B, which parks them in the
//!      migration's buffer instead of processing them (the thesis buffers on
//!      the destination host; *choice*: the buffer is B's, not the NIC's, so
//!      the engine needs no new method), at most
//!      [`OrssParams::buffer_packets`] of them — beyond, the packet is
//!      dropped and counted;
//!   3. the policy counts, per flow, the packets it steered into a queue and
//!      that were not processed yet (it mirrors the queue lengths to know
//!      which steered packets the engine accepted). When A processes the
//!      last of `f`'s packets it holds, the buffer is released at the
//!      instant that packet finishes (A's batch is costed when it starts,
//!      so the release waits for the packet's finishing time, not the
//!      batch's start): B processes it before anything else, and `f` is
//!      B's.
//!
//!   If A holds none of `f`'s packets, and has finished the last one it
//!   took, when the rule takes effect, the move is immediate. *Choice*: the
//!   release is notified at that instant; the thesis's NIC learns it at its
//!   next poll of A's packet counter.
//! - **Host cost**: [`OrssParams::host_cycles`] per packet (the flow id
//!   written to the DMA-shared slot before and cleared after, the packet
//!   counter, the check of incoming migrations, §4.2.2) and
//!   [`OrssParams::park_cycles`] per packet buffered.
//! - **Counters** ([`Policy::mechanisms`]): `buffered_packets` (parked in
//!   a migration buffer), `buffer_drops` (beyond its capacity),
//!   `buffer_peak` (the fullest buffer), `buffered_migrations` (migrations
//!   that had to buffer; the others were immediate), `rounds`,
//!   `rejected_moves` (rounds ended because the next move would not lower
//!   the imbalance enough), `pingpong_prevented` (moves refused to a flow
//!   still cooling down from its last move), `isolated_flows` (flows newly
//!   left alone on their core by core reduction), `tracked_flows` (flows
//!   with polls in the estimate at the end). [`Policy::migrations`] counts
//!   the flow migrations started.
//! - **State**: per core ([`StateTable::Sharded`]) whatever the
//!   configuration: the two-phase migration guarantees one core at a time
//!   touches a flow's state (§4.6.3), so oRSS needs no lock; a migrated
//!   flow's first packet on B pays the remote transfer of the cost model.

use rsspp_core::orss::{Balancer, BalancerParams, FlowLoad, FlowLoads};
use rsspp_core::rand::SplitMix64;

use crate::cost::StateTable;
use crate::mechanisms::{OrssCounters, PolicyMechanisms};
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, Queues, System, Topology};
use crate::SimError;

/// oRSS's own settings (the defaults follow the thesis).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrssParams {
    /// Interval between two polls of a core, nanoseconds.
    pub poll_ns: Ns,
    /// Length of a round (polls, estimate, balancing), nanoseconds.
    pub round_ns: Ns,
    /// Packets a migration buffers at most; more are dropped (1024, §5.1).
    pub buffer_packets: usize,
    /// oRSS-Host's cycles per packet.
    pub host_cycles: u32,
    /// Cycles to park a packet in a migration buffer (a pointer copy).
    pub park_cycles: u32,
    /// Migrate in two phases. Without, the table switches at once and the
    /// flow's packets queued at the old core race the new ones (only for
    /// showing what the two phases prevent).
    pub two_phase: bool,
    /// The balancing step.
    pub balancer: BalancerParams,
}

impl Default for OrssParams {
    fn default() -> Self {
        Self {
            poll_ns: 50_000,
            round_ns: 5_000_000,
            buffer_packets: 1024,
            host_cycles: 30,
            park_cycles: 10,
            two_phase: true,
            balancer: BalancerParams::default(),
        }
    }
}

const NONE: u32 = u32::MAX;
const UNPLACED: u16 = u16::MAX;

/// One flow's table entry.
#[derive(Debug, Clone, Copy)]
struct FlowEntry {
    /// The core the table sends it to (`UNPLACED` before its first packet).
    core: u16,
    /// Its packets steered into a queue and not processed yet, except those
    /// steered to a migration's destination while it buffers.
    queued: u32,
    /// Its migration under way (index into `migrations`), or `NONE`.
    migration: u32,
    /// When the last of its packets taken by a core finishes (a batch is
    /// costed when it starts: its packets are taken, not yet done).
    done_at: Ns,
}

impl Default for FlowEntry {
    fn default() -> Self {
        Self {
            core: UNPLACED,
            queued: 0,
            migration: NONE,
            done_at: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The rule update is not in effect yet: packets still go to the source.
    Pending,
    /// Packets go to the destination, which buffers them until the source
    /// has processed every packet of the flow it holds.
    Buffering,
}

#[derive(Debug, Clone)]
struct Migration {
    to: u16,
    effective_at: Ns,
    phase: Phase,
    /// Packets steered to the destination's queue, not polled yet.
    in_dest_queue: u32,
    buffer: Vec<SimPacket>,
    /// The source holds no packet of the flow any more: when its last one
    /// finishes, the buffer goes to the destination.
    release_at: Option<Ns>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    migrations: u64,
    buffered_migrations: u64,
    buffered: u64,
    buffer_drops: u64,
    buffer_peak: u64,
    rounds: u64,
    rejected: u64,
    bounces_prevented: u64,
    isolated: u64,
}

/// Offloaded RSS.
#[derive(Debug, Clone)]
pub struct Orss {
    params: OrssParams,
    topology: Topology,
    workers: usize,
    queue_capacity: usize,
    table_update_ns: Ns,
    rng: SplitMix64,
    flows: Vec<FlowEntry>,
    /// Per queue: its length as far as the policy knows (exact: it changes
    /// only by the packets steered in and those polled out).
    qlen: Vec<usize>,
    migrations: Vec<Migration>,
    free_migrations: Vec<u32>,
    /// Per core: released packets it processes before its next batch.
    ready: Vec<Vec<SimPacket>>,
    /// Per core: the next poll instant.
    next_poll: Vec<Ns>,
    loads: FlowLoads,
    balancer: Balancer,
    next_round: Ns,
    /// Migrations whose source is done, by the instant it finishes.
    releases: Vec<(Ns, u32)>,
    /// Per core: the flow core reduction left alone on it last round.
    isolated: Vec<u32>,
    estimates: Vec<(u32, f64)>,
    view: Vec<FlowLoad>,
    counters: Counters,
}

impl Orss {
    /// oRSS over `config.cores` cores with the thesis's settings.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        Self::with_params(config, OrssParams::default())
    }

    /// oRSS with explicit settings.
    pub fn with_params(config: &PolicyConfig, params: OrssParams) -> Result<Self, SimError> {
        let bad = |why: String| Err(SimError::InvalidOption(format!("orss: {why}")));
        if config.cores == 0 || config.cores >= usize::from(u8::MAX) {
            return bad(format!("cores must be in 1..=254, got {}", config.cores));
        }
        if config.queue_size == 0 {
            return bad("queues need at least one descriptor".into());
        }
        if params.poll_ns == 0 || params.round_ns < params.poll_ns {
            return bad(format!(
                "the poll interval ({} ns) must be positive and at most a round ({} ns)",
                params.poll_ns, params.round_ns
            ));
        }
        let polls = params.round_ns / params.poll_ns;
        if polls > u64::from(u16::MAX) {
            return bad(format!("{polls} polls per round: at most 65535"));
        }
        if params.buffer_packets == 0 {
            return bad("the migration buffer needs room for a packet".into());
        }
        let workers = config.cores;
        Ok(Self {
            params,
            topology: Topology::hardware(workers, config.queue_size),
            workers,
            queue_capacity: config.queue_size,
            table_update_ns: config.table_update_ns,
            rng: SplitMix64::new(config.seed ^ 0x6f52_5353_6f52_5353),
            flows: Vec::new(),
            qlen: vec![0; workers],
            migrations: Vec::new(),
            free_migrations: Vec::new(),
            ready: vec![Vec::new(); workers],
            next_poll: vec![params.poll_ns; workers],
            loads: FlowLoads::new(polls as u32),
            balancer: Balancer::new(params.balancer),
            next_round: params.round_ns,
            releases: Vec::new(),
            isolated: vec![NONE; workers],
            estimates: Vec::new(),
            view: Vec::new(),
            counters: Counters::default(),
        })
    }

    fn ensure(&mut self, flow: u32) {
        let need = flow as usize + 1;
        if self.flows.len() < need {
            self.flows
                .resize(need.next_power_of_two(), FlowEntry::default());
        }
    }

    /// A new flow (or a new incarnation of a flow number): a random core.
    fn place(&mut self, flow: u32) {
        self.loads.forget(flow);
        self.balancer.forget(flow);
        let e = self.flows[flow as usize];
        if e.migration != NONE {
            let m = &self.migrations[e.migration as usize];
            if e.queued > 0 || m.in_dest_queue > 0 || !m.buffer.is_empty() {
                // Packets of the old incarnation are still on their way (a
                // flow timeout shorter than a migration): the new one
                // follows the migration rather than race them.
                return;
            }
            self.end_migration(flow);
        }
        self.flows[flow as usize].core = self.rng.below_u32(self.workers) as u16;
    }

    /// Forgets the migration of `flow` (its table entry is already right).
    fn end_migration(&mut self, flow: u32) {
        let e = &mut self.flows[flow as usize];
        let id = e.migration;
        e.migration = NONE;
        let m = &mut self.migrations[id as usize];
        m.buffer.clear();
        self.free_migrations.push(id);
    }

    /// Starts moving `flow` to core `to` at `now`.
    fn start_migration(&mut self, flow: u32, to: usize, now: Ns) {
        let e = self.flows[flow as usize];
        if e.migration != NONE || e.core == UNPLACED || usize::from(e.core) == to {
            return;
        }
        self.counters.migrations += 1;
        if !self.params.two_phase {
            self.flows[flow as usize].core = to as u16;
            return;
        }
        let m = Migration {
            to: to as u16,
            effective_at: now + self.table_update_ns,
            phase: Phase::Pending,
            release_at: None,
            in_dest_queue: 0,
            buffer: Vec::new(),
        };
        let id = match self.free_migrations.pop() {
            Some(id) => {
                let buffer = std::mem::take(&mut self.migrations[id as usize].buffer);
                self.migrations[id as usize] = Migration { buffer, ..m };
                id
            }
            None => {
                self.migrations.push(m);
                (self.migrations.len() - 1) as u32
            }
        };
        self.flows[flow as usize].migration = id;
    }

    /// The source core took the last packet of `flow` it held: once that
    /// packet finishes, the buffer goes to the destination.
    fn schedule_release(&mut self, flow: u32) {
        let e = self.flows[flow as usize];
        self.migrations[e.migration as usize].release_at = Some(e.done_at);
        self.releases.push((e.done_at, flow));
    }

    /// The source has finished every packet of `flow` it held: the buffer
    /// goes to the destination, which owns the flow from now on.
    fn release(&mut self, flow: u32, sys: &mut System<'_>) {
        let id = self.flows[flow as usize].migration;
        let m = &mut self.migrations[id as usize];
        let to = usize::from(m.to);
        let e = &mut self.flows[flow as usize];
        e.core = m.to;
        // Packets steered to the destination and not polled yet are now
        // ordinary packets of the flow at its core.
        e.queued = m.in_dest_queue;
        if !m.buffer.is_empty() {
            self.ready[to].append(&mut m.buffer);
            sys.wake(to);
        }
        self.end_migration(flow);
    }

    /// Skips the poll instants of `core` before `t` (no flow in progress).
    fn skip_polls(&mut self, core: usize, t: Ns) {
        let np = &mut self.next_poll[core];
        if *np < t {
            let step = self.params.poll_ns;
            *np += (t - *np).div_ceil(step) * step;
        }
    }

    /// Processes `p` on `cpu`, crediting it with the polls it spans.
    fn run(&mut self, p: &SimPacket, cpu: &mut Cpu<'_>) {
        let core = cpu.core();
        let start = cpu.now();
        cpu.process_with(p, StateTable::Sharded, u64::from(self.params.host_cycles));
        let end = cpu.now();
        if self.next_poll[core] < end {
            self.skip_polls(core, start);
            while self.next_poll[core] < end {
                self.loads.poll(p.flow);
                self.next_poll[core] += self.params.poll_ns;
            }
        }
    }

    /// One round: estimates, balancing, migrations.
    fn round(&mut self, now: Ns) {
        self.counters.rounds += 1;
        self.estimates.clear();
        self.loads.end_round(&mut self.estimates);
        self.view.clear();
        for &(flow, load) in &self.estimates {
            let e = self.flows[flow as usize];
            let core = if e.migration != NONE {
                self.migrations[e.migration as usize].to
            } else {
                e.core
            };
            if core != UNPLACED {
                self.view.push(FlowLoad {
                    flow,
                    core: usize::from(core),
                    load,
                    pinned: e.migration != NONE,
                });
            }
        }
        let plan = self.balancer.round(self.workers, &self.view);
        self.counters.rejected += plan.rejected;
        self.counters.bounces_prevented += plan.bounces_prevented;
        let mut isolated = vec![NONE; self.workers];
        for &(core, flow) in &plan.isolated {
            if self.isolated[core] != flow {
                self.counters.isolated += 1;
            }
            isolated[core] = flow;
        }
        self.isolated = isolated;
        for m in &plan.moves {
            self.start_migration(m.flow, m.to, now);
        }
    }

    #[cfg(test)]
    fn pin(&mut self, flow: u32, core: usize) {
        self.ensure(flow);
        self.flows[flow as usize].core = core as u16;
    }
}

impl Policy for Orss {
    fn name(&self) -> String {
        "orss".into()
    }

    fn topology(&self) -> Topology {
        self.topology.clone()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Sharded
    }

    fn steer(&mut self, p: &SimPacket, now: Ns) -> Option<usize> {
        self.ensure(p.flow);
        let f = p.flow as usize;
        if p.seq == 0 || self.flows[f].core == UNPLACED {
            self.place(p.flow);
        }
        let e = self.flows[f];
        let mut to_dest = false;
        if e.migration != NONE {
            let m = &mut self.migrations[e.migration as usize];
            if m.phase == Phase::Pending && now >= m.effective_at {
                if e.queued == 0 && e.done_at <= now {
                    // The source holds nothing of the flow: move at once.
                    self.flows[f].core = m.to;
                    self.end_migration(p.flow);
                } else {
                    m.phase = Phase::Buffering;
                    self.counters.buffered_migrations += 1;
                    if e.queued == 0 {
                        // Only a packet in a batch in progress is left.
                        self.schedule_release(p.flow);
                    }
                }
            }
            let e = self.flows[f];
            if e.migration != NONE {
                to_dest = self.migrations[e.migration as usize].phase == Phase::Buffering;
            }
        }
        let e = self.flows[f];
        let q = if to_dest {
            usize::from(self.migrations[e.migration as usize].to)
        } else {
            usize::from(e.core)
        };
        // The engine drops a packet for a full queue: only the accepted
        // ones are waited for.
        if self.qlen[q] < self.queue_capacity {
            self.qlen[q] += 1;
            if to_dest {
                self.migrations[e.migration as usize].in_dest_queue += 1;
            } else {
                self.flows[f].queued += 1;
            }
        }
        Some(q)
    }

    fn poll(
        &mut self,
        core: usize,
        now: Ns,
        queues: &mut Queues,
        max: usize,
        batch: &mut Vec<SimPacket>,
    ) {
        queues.take_polled(core, now, max, batch);
        self.qlen[core] = queues.len(core);
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        let core = cpu.core();
        self.skip_polls(core, cpu.now());
        if !self.ready[core].is_empty() {
            // A released buffer: older than anything of its flow in the
            // batch. Nothing is released to a core while it processes (a
            // release comes from a flow's source core, never its
            // destination), so the vector can be put back as it is.
            let mut ready = std::mem::take(&mut self.ready[core]);
            for p in &ready {
                self.run(p, cpu);
                self.flows[p.flow as usize].done_at = cpu.now();
            }
            ready.clear();
            self.ready[core] = ready;
        }
        for p in batch.iter() {
            let f = p.flow as usize;
            let e = self.flows[f];
            if e.migration != NONE {
                let m = &mut self.migrations[e.migration as usize];
                if m.phase == Phase::Buffering && usize::from(m.to) == core {
                    debug_assert!(m.in_dest_queue > 0, "an uncounted packet");
                    m.in_dest_queue = m.in_dest_queue.saturating_sub(1);
                    cpu.charge(u64::from(self.params.park_cycles));
                    if m.buffer.len() < self.params.buffer_packets {
                        m.buffer.push(*p);
                        self.counters.buffered += 1;
                        self.counters.buffer_peak =
                            self.counters.buffer_peak.max(m.buffer.len() as u64);
                    } else {
                        cpu.drop_packet(p);
                        self.counters.buffer_drops += 1;
                    }
                    continue;
                }
            }
            self.run(p, cpu);
            let e = &mut self.flows[f];
            e.queued = e.queued.saturating_sub(1);
            e.done_at = cpu.now();
            if e.queued == 0 && e.migration != NONE {
                let m = &self.migrations[e.migration as usize];
                if m.phase == Phase::Buffering && m.release_at.is_none() {
                    debug_assert_ne!(usize::from(m.to), core);
                    self.schedule_release(p.flow);
                }
            }
        }
    }

    fn has_work(&self, core: usize) -> bool {
        !self.ready[core].is_empty()
    }

    fn next_timer(&self) -> Option<Ns> {
        let release = self.releases.iter().map(|&(at, _)| at).min();
        Some(release.map_or(self.next_round, |at| at.min(self.next_round)))
    }

    fn timer(&mut self, now: Ns, sys: &mut System<'_>) {
        if self.releases.iter().any(|&(at, _)| at <= now) {
            let mut i = 0;
            while i < self.releases.len() {
                if self.releases[i].0 <= now {
                    let (_, flow) = self.releases.swap_remove(i);
                    self.release(flow, sys);
                } else {
                    i += 1;
                }
            }
            return;
        }
        self.next_round = now + self.params.round_ns;
        self.round(now);
    }

    fn migrations(&self) -> u64 {
        self.counters.migrations
    }

    fn mechanisms(&self) -> PolicyMechanisms {
        let c = &self.counters;
        PolicyMechanisms::Orss(OrssCounters {
            buffered_packets: c.buffered,
            buffer_drops: c.buffer_drops,
            buffer_peak: c.buffer_peak,
            buffered_migrations: c.buffered_migrations,
            rounds: c.rounds,
            rejected_moves: c.rejected,
            pingpong_prevented: c.bounces_prevented,
            isolated_flows: c.isolated,
            tracked_flows: self.loads.tracked() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};
    use crate::result::PolicySummary;

    /// Two flows of `pps` packets per second each, both on core 0 of two
    /// cores, for `ms` milliseconds: core 0 is overloaded until one moves.
    fn two_heavy_flows(params: OrssParams, pps: u64, ms: u64) -> PolicySummary {
        let config = PolicyConfig {
            cores: 2,
            ..PolicyConfig::default()
        };
        let mut orss = Orss::with_params(&config, params).unwrap();
        orss.pin(0, 0);
        orss.pin(1, 0);
        let gap = 1_000_000_000 / pps;
        let mut packets = Vec::new();
        // Sequence numbers from 1: a `seq == 0` packet would be placed at
        // random.
        for i in 0..pps * ms / 1000 {
            for flow in 0..2u32 {
                let t = i * gap + u64::from(flow) * gap / 2;
                packets.push(SimPacket {
                    arrival_ns: t,
                    ready_ns: t,
                    flow,
                    seq: i as u32 + 1,
                    hash: flow,
                    wire_len: 64,
                    proto: 17,
                    ..SimPacket::default()
                });
            }
        }
        let mut engine = Engine::new(Box::new(orss), EngineConfig::default());
        engine.feed(&packets);
        engine.finish().summary
    }

    #[test]
    fn the_migration_buffer_holds_1024_packets_and_drops_the_rest() {
        let s = two_heavy_flows(OrssParams::default(), 400_000, 30);
        let m = s.mechanisms.orss().expect("oRSS counters");
        assert!(s.migrations >= 1, "{s:?}");
        assert_eq!(m.buffer_peak, 1024, "{m:?}");
        assert!(m.buffer_drops > 0, "{m:?}");
        assert!(m.buffered_packets >= 1024, "{m:?}");
        assert!(s.drops >= m.buffer_drops);
        // Every packet is either processed or dropped: none is left behind
        // in a buffer.
        assert_eq!(s.processed + s.drops, s.packets);
        assert_eq!(s.reordered, 0);
    }

    #[test]
    fn a_lighter_flow_migrates_without_loss() {
        let s = two_heavy_flows(OrssParams::default(), 250_000, 30);
        let m = s.mechanisms.orss().expect("oRSS counters");
        assert!(s.migrations >= 1, "{s:?}");
        assert!(m.buffered_packets > 0, "{m:?}");
        assert_eq!(m.buffer_drops, 0, "{m:?}");
        assert_eq!(s.drops, 0);
        assert_eq!(s.processed, s.packets);
        assert_eq!(s.reordered, 0);
    }

    #[test]
    fn without_the_two_phases_a_migration_reorders() {
        let params = OrssParams {
            two_phase: false,
            ..OrssParams::default()
        };
        let s = two_heavy_flows(params, 250_000, 30);
        assert!(s.migrations >= 1, "{s:?}");
        assert!(s.reordered > 0, "{s:?}");
    }

    #[test]
    fn bad_settings_are_refused() {
        let config = PolicyConfig::default();
        let bad = [
            OrssParams {
                poll_ns: 0,
                ..OrssParams::default()
            },
            OrssParams {
                round_ns: 10,
                ..OrssParams::default()
            },
            OrssParams {
                buffer_packets: 0,
                ..OrssParams::default()
            },
        ];
        for params in bad {
            assert!(Orss::with_params(&config, params).is_err(), "{params:?}");
        }
        let no_cores = PolicyConfig {
            cores: 0,
            ..PolicyConfig::default()
        };
        assert!(Orss::new(&no_cores).is_err());
    }

    #[test]
    fn new_flows_are_spread_at_random() {
        let config = PolicyConfig {
            cores: 4,
            ..PolicyConfig::default()
        };
        let mut orss = Orss::new(&config).unwrap();
        let mut per_core = [0u32; 4];
        for flow in 0..4000u32 {
            let p = SimPacket {
                flow,
                ..SimPacket::default()
            };
            per_core[orss.steer(&p, 0).unwrap()] += 1;
        }
        assert!(
            per_core.iter().all(|&n| (850..1150).contains(&n)),
            "{per_core:?}"
        );
    }
}
