//! `rsspp`: RSS++ as the real data paths run it — the core crate's
//! [`ControlLoop`] (rebalancer, CPU scaling, back-off) decides, the
//! [`MigrationCoordinator`] rewrites the NIC's table, and every core runs a
//! [`BucketWorker`] whose per-bucket flow tables migrate by the lock-free,
//! order-preserving protocol of §3.3.
//!
//! What the simulation adds around that code:
//! - the NIC counts packets per bucket as they arrive (before any queue
//!   drops them), and the control loop reads each core's load as busy time
//!   over the interval — RSS++'s "cycles spent processing over cycles spent
//!   polling";
//! - a plan reaches the NIC after `PolicyConfig::table_update_ns` (about
//!   20 µs on Intel NICs); at that instant the coordinator reads the NIC's
//!   per-queue receive counters for the first release condition;
//! - a batch is costed when it starts, but the core is not done with its
//!   packets before the batch ends: a table released by the old core
//!   reaches the new one at the end of the batch that released it (or of
//!   the batch in progress when the command came); the new core then
//!   processes the packets it parked at its next poll, before anything
//!   else, and their time is charged to it;
//! - no new plan is applied while a bucket of the previous one is still
//!   migrating (the coordinator would refuse it): the round is retried 1 ms
//!   later.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use rsspp_core::measure::load_from_busy;
use rsspp_core::state::{
    BucketWorker, FlowHandler, FlowPacket, Handoff, MigrationCoordinator, Outbox, TableConfig,
    Worker,
};
use rsspp_core::{
    bucket_of, ControlConfig, ControlLoop, FlowKey, IndirectionTable, MigrationPlan, ScalingAction,
};

use crate::cost::StateTable;
use crate::mechanisms::{PolicyMechanisms, RssPlusPlusCounters};
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, System, Topology};
use crate::SimError;

/// A simulated packet as the state layer sees it: a flow key built from the
/// flow number (unique among live flows) and the packet's RSS hash.
#[derive(Debug, Clone, Copy)]
pub struct KeyedPacket {
    key: FlowKey,
    packet: SimPacket,
}

impl KeyedPacket {
    fn new(packet: SimPacket) -> Self {
        Self {
            key: FlowKey {
                src: IpAddr::V4(Ipv4Addr::from(packet.flow)),
                dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                ports: None,
                protocol: packet.proto,
            },
            packet,
        }
    }
}

impl FlowPacket for KeyedPacket {
    fn flow_key(&self) -> &FlowKey {
        &self.key
    }

    fn rss_hash(&self) -> u32 {
        self.packet.hash
    }
}

/// The network function of every core: counts each flow's packets in its
/// state, and hands the packets it processed back to the simulation in the
/// order it processed them, which then charges their cost.
#[derive(Debug, Default)]
pub struct Recorder {
    done: Vec<SimPacket>,
}

impl FlowHandler for Recorder {
    type Packet = KeyedPacket;
    type State = u32;

    fn new_flow(&mut self, _packet: &KeyedPacket, _now: u64) -> u32 {
        0
    }

    fn process(&mut self, packet: &KeyedPacket, state: Option<&mut u32>, _now: u64) {
        if let Some(count) = state {
            *count = count.wrapping_add(1);
        }
        self.done.push(packet.packet);
    }
}

/// RSS++.
pub struct RssPlusPlus {
    control: ControlLoop,
    /// Owns the table the NIC uses (the control loop proposes, the
    /// coordinator applies).
    coordinator: MigrationCoordinator,
    workers: Vec<BucketWorker<Recorder>>,
    /// Packets processed by a core's worker outside its own batch (parked
    /// packets run when their table arrives): charged at its next poll.
    deferred: Vec<Vec<SimPacket>>,
    /// Packets per bucket since the last round, counted by the NIC.
    bucket_packets: Vec<u64>,
    busy_at_round: Vec<Ns>,
    last_round: Ns,
    next_round: Ns,
    /// A plan on its way to the NIC, and when it lands.
    switch: Option<(Ns, MigrationPlan)>,
    active: Vec<bool>,
    topology: Topology,
    outbox: Outbox<u32>,
    /// Tables released by their old owner, with the instant they arrive.
    in_flight: Vec<(Ns, Handoff<u32>)>,
    scratch: Vec<KeyedPacket>,
    rounds: u64,
    plans: u64,
    postponed: u64,
    added: u64,
    removed: u64,
    autoscale: bool,
    table_update: Ns,
}

impl RssPlusPlus {
    /// RSS++ over `config.cores` cores, starting from the `equal` table
    /// over all of them; with autoscale, over the fewest cores scaling
    /// keeps (`BalanceConfig::min_cores`), cores then added one per round
    /// as the load requires, as `metron-autoscale` starts on one core
    /// (a run that started on every core would spend its first rounds
    /// releasing them, one per round: Figure 11's average counted them).
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        let cores = config.cores;
        let mut control_config = ControlConfig {
            interval: Duration::from_nanos(config.interval_ns),
            ..ControlConfig::default()
        };
        control_config.balance.autoscale = config.autoscale;
        control_config.balance.target_load = config.target_load;
        let first_cores = if config.autoscale {
            control_config.balance.min_cores.clamp(1, cores.max(1))
        } else {
            cores
        };
        let table = IndirectionTable::equal(config.reta_size, first_cores)?;
        let tables = TableConfig {
            idle_timeout_ns: Some(5_000_000_000),
            ..TableConfig::default()
        };
        let workers = (0..cores)
            .map(|c| BucketWorker::new(c, &table, tables, Recorder::default()))
            .collect();
        let coordinator = MigrationCoordinator::new(table.clone(), cores)?;
        let mut active = vec![false; cores];
        for c in table.cores_in_use() {
            active[c] = true;
        }
        Ok(Self {
            control: ControlLoop::new(control_config),
            coordinator,
            workers,
            deferred: vec![Vec::new(); cores],
            bucket_packets: vec![0; table.len()],
            busy_at_round: vec![0; cores],
            last_round: 0,
            next_round: config.interval_ns,
            switch: None,
            active,
            topology: Topology::hardware(cores, config.queue_size),
            outbox: Outbox::default(),
            in_flight: Vec::new(),
            scratch: Vec::with_capacity(64),
            rounds: 0,
            plans: 0,
            postponed: 0,
            added: 0,
            removed: 0,
            autoscale: config.autoscale,
            table_update: config.table_update_ns,
        })
    }

    /// Takes what the workers put in the outbox: tables released by an old
    /// owner leave at `at`, when that core has finished the batch whose
    /// packets it processed before letting go; completed moves are
    /// reported to the coordinator.
    fn collect(&mut self, at: Ns) {
        let out = std::mem::take(&mut self.outbox);
        for handoff in out.handoffs {
            self.in_flight.push((at, handoff));
        }
        for completed in out.completed {
            self.coordinator
                .complete(completed)
                .expect("a completion for a move in flight");
        }
    }

    /// Hands every table due by `now` to its new owner, whose parked
    /// packets then run at its next poll.
    fn deliver_due(&mut self, now: Ns, sys: &mut System<'_>) {
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].0 > now {
                i += 1;
                continue;
            }
            let (_, handoff) = self.in_flight.swap_remove(i);
            let to = handoff.to;
            if let Err(rejected) = self.workers[to].accept(handoff, now, &mut self.outbox) {
                // The protocol never sends a table to the wrong core; if it
                // did, the run would be wrong: stop loudly.
                panic!("rsspp: handoff refused: {rejected}");
            }
            let done = &mut self.workers[to].handler_mut().done;
            if !done.is_empty() {
                self.deferred[to].append(done);
                sys.wake(to);
            }
            self.collect(now);
        }
    }

    fn round(&mut self, now: Ns, sys: &mut System<'_>) {
        let cores = self.workers.len();
        let elapsed = now.saturating_sub(self.last_round).max(1);
        let loads: Vec<f64> = (0..cores)
            .map(|c| load_from_busy(sys.busy_ns(c) - self.busy_at_round[c], elapsed))
            .collect();
        if self.switch.is_some() || self.coordinator.migrating() > 0 {
            // The previous plan is still being carried out.
            self.postponed += 1;
            self.next_round = now + 1_000_000;
            return;
        }
        for c in 0..cores {
            self.busy_at_round[c] = sys.busy_ns(c);
        }
        self.last_round = now;
        let counts = std::mem::replace(
            &mut self.bucket_packets,
            vec![0; self.coordinator.table().len()],
        );
        let tick = self.control.tick(
            Duration::from_nanos(now),
            self.coordinator.table(),
            &counts,
            &loads,
        );
        self.rounds += 1;
        match tick {
            Ok(t) => {
                match t.outcome.scaling {
                    ScalingAction::Add(_) => self.added += 1,
                    ScalingAction::Remove(_) => self.removed += 1,
                    ScalingAction::None | ScalingAction::NoSpareCore => {}
                }
                if !t.outcome.plan.is_empty() {
                    self.plans += 1;
                    self.switch = Some((now + self.table_update_ns(), t.outcome.plan));
                }
            }
            Err(e) => {
                // Measurements the rebalancer refuses cannot come from the
                // engine; report rather than hide.
                panic!("rsspp: control loop refused its input: {e}");
            }
        }
        self.next_round = self.control.next_deadline().as_nanos() as Ns;
        if now % 1_000_000_000 < self.control.interval().as_nanos() as Ns {
            for w in &mut self.workers {
                w.expire(now);
            }
        }
    }

    fn table_update_ns(&self) -> Ns {
        self.table_update
    }

    /// The plan lands in the NIC: the coordinator reads the per-queue
    /// receive counters, rewrites the table and tells every concerned core.
    fn switch_table(&mut self, now: Ns, plan: &MigrationPlan, sys: &mut System<'_>) {
        let cores = self.workers.len();
        let queued: Vec<u64> = (0..cores).map(|c| sys.queues().enqueued(c)).collect();
        let commands = self
            .coordinator
            .apply(plan, &queued)
            .expect("plans are applied only when no bucket is migrating");
        self.control
            .commit()
            .expect("the plan in flight is the control loop's pending plan");
        self.active.iter_mut().for_each(|a| *a = false);
        for c in self.coordinator.table().cores_in_use() {
            self.active[c] = true;
        }
        for command in commands {
            let core = command.core;
            self.workers[core]
                .command(command, now, &mut self.outbox)
                .expect("the coordinator's commands fit the workers");
            // A table released at once still waits for the batch in progress.
            let at = sys.busy_until(core);
            self.collect(at);
        }
        self.deliver_due(now, sys);
    }
}

impl Policy for RssPlusPlus {
    fn name(&self) -> String {
        if self.autoscale {
            "rsspp-autoscale".into()
        } else {
            "rsspp".into()
        }
    }

    fn topology(&self) -> Topology {
        self.topology.clone()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Sharded
    }

    fn steer(&mut self, p: &SimPacket, _now: Ns) -> Option<usize> {
        let table = self.coordinator.table();
        let bucket = bucket_of(p.hash, table.len());
        self.bucket_packets[bucket] += 1;
        Some(table.core_of(bucket))
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        let core = cpu.core();
        for p in std::mem::take(&mut self.deferred[core]) {
            cpu.process(&p);
        }
        if batch.is_empty() {
            return;
        }
        self.scratch.clear();
        self.scratch
            .extend(batch.iter().map(|&p| KeyedPacket::new(p)));
        let now = cpu.now();
        self.workers[core].receive_batch(&mut self.scratch, now, &mut self.outbox);
        let done = std::mem::take(&mut self.workers[core].handler_mut().done);
        for p in &done {
            cpu.process(p);
        }
        // Give the buffer back to keep its allocation.
        let mut done = done;
        done.clear();
        self.workers[core].handler_mut().done = done;
        self.collect(cpu.now());
    }

    fn has_work(&self, core: usize) -> bool {
        !self.deferred[core].is_empty()
    }

    fn next_timer(&self) -> Option<Ns> {
        let mut next = self.next_round;
        if let Some((at, _)) = &self.switch {
            next = next.min(*at);
        }
        for (at, _) in &self.in_flight {
            next = next.min(*at);
        }
        Some(next)
    }

    fn timer(&mut self, now: Ns, sys: &mut System<'_>) {
        if self.in_flight.iter().any(|(at, _)| *at <= now) {
            self.deliver_due(now, sys);
            return;
        }
        if let Some((at, _)) = &self.switch {
            if *at <= now {
                let (_, plan) = self.switch.take().expect("checked");
                self.switch_table(now, &plan, sys);
                return;
            }
        }
        if self.next_round <= now {
            self.round(now, sys);
        }
    }

    fn is_active(&self, core: usize) -> bool {
        self.active[core]
    }

    fn migrations(&self) -> u64 {
        self.coordinator.completed_moves()
    }

    fn mechanisms(&self) -> PolicyMechanisms {
        let mut parked = 0;
        let mut peak_pending = 0;
        for w in &self.workers {
            let s = w.stats();
            parked += s.parked;
            peak_pending = peak_pending.max(s.peak_pending);
        }
        PolicyMechanisms::RssPlusPlus(RssPlusPlusCounters {
            rounds: self.rounds,
            plans: self.plans,
            rounds_postponed: self.postponed,
            parked_packets: parked,
            peak_pending,
            cores_added: self.added,
            cores_removed: self.removed,
        })
    }
}
