//! `ovs-alb`: Open vSwitch's PMD auto load balancer (`pmd-auto-lb`), the
//! core crate's [`OvsAlb`] deciding.
//!
//! The NIC spreads the RSS buckets equally over `rxqs_per_pmd × cores`
//! receive queues with a static table, as OVS configures it; each queue is
//! polled by one PMD (core), round-robin at the start. Each queue's
//! processing cycles are measured as the cores spend them; every sample
//! interval (10 s) they and each PMD's busy share are recorded, and every
//! rebalance interval (1 min) the balancer may reassign the queues by their
//! cycles (see [`rsspp_core::ovs_alb`]).
//!
//! What the simulation simplifies: a queue is a group of buckets in front
//! of its PMD's single simulated queue, and a move takes effect at once: the
//! moved queue's packets already waiting on the old PMD finish there while
//! the new PMD starts on the next ones, so a few packets are reordered at a
//! rebalance. OVS moves the hardware queue with what waits in it, keeping
//! its order, and pauses both PMDs to reload them (not charged here). Flow
//! state is per core, like RSS; a moved queue's flows find their state
//! cold.

use rsspp_core::measure::load_from_busy;
use rsspp_core::ovs_alb::{Decision, OvsAlb as Balancer};
use rsspp_core::{bucket_of, IndirectionTable};

use crate::cost::StateTable;
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, System, Topology};
use crate::SimError;

/// Open vSwitch's PMD auto load balancer.
#[derive(Debug, Clone)]
pub struct OvsAlb {
    balancer: Balancer,
    /// Bucket → receive queue (the NIC's static table).
    table: IndirectionTable,
    topology: Topology,
    state_table: StateTable,
    /// Per receive queue: nanoseconds spent on its packets this sample.
    queue_ns: Vec<u64>,

    busy_at: Vec<Ns>,
    sampled_at: Ns,
    next_sample: Ns,
    next_check: Ns,
    checks: u64,
    rebalances: u64,
    migrations: u64,
}

impl OvsAlb {
    /// `ovs-alb` over `config.cores` PMDs with `config.ovs_alb`'s settings.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        let opts = &config.ovs_alb;
        let queues = opts.rxqs_per_pmd.saturating_mul(config.cores);
        if opts.rxqs_per_pmd == 0 || queues > config.reta_size {
            return Err(SimError::InvalidOption(format!(
                "ovs-alb needs 1 to {} receive queues per core (the table has {} buckets), got {}",
                config.reta_size / config.cores.max(1),
                config.reta_size,
                opts.rxqs_per_pmd
            )));
        }
        let balancer =
            Balancer::new(opts.alb, queues, config.cores).map_err(SimError::InvalidOption)?;
        Ok(Self {
            balancer,
            table: IndirectionTable::equal(config.reta_size, queues)?,
            topology: Topology::hardware(config.cores, config.queue_size),
            state_table: StateTable::Sharded,
            queue_ns: vec![0; queues],
            busy_at: vec![0; config.cores],
            sampled_at: 0,
            next_sample: opts.alb.sample_ns,
            next_check: opts.alb.interval_ns,
            checks: 0,
            rebalances: 0,
            migrations: 0,
        })
    }

    fn rxq(&self, p: &SimPacket) -> usize {
        self.table.core_of(bucket_of(p.hash, self.table.len()))
    }

    /// Rebalance checks run and rebalances applied so far.
    pub fn rebalances(&self) -> (u64, u64) {
        (self.checks, self.rebalances)
    }

    /// Queue → PMD now.
    pub fn assignment(&self) -> &[usize] {
        self.balancer.assignment()
    }
}

impl Policy for OvsAlb {
    fn name(&self) -> String {
        "ovs-alb".into()
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
        Some(self.balancer.assignment()[self.rxq(p)])
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        for p in batch.iter() {
            let start = cpu.now();
            cpu.process(p);
            let q = self.rxq(p);
            self.queue_ns[q] += cpu.now() - start;
        }
    }

    fn next_timer(&self) -> Option<Ns> {
        Some(self.next_sample.min(self.next_check))
    }

    fn timer(&mut self, now: Ns, sys: &mut System<'_>) {
        if now >= self.next_sample {
            let span = now.saturating_sub(self.sampled_at).max(1);
            let load: Vec<f64> = (0..self.busy_at.len())
                .map(|core| {
                    let busy = sys.busy_ns(core);
                    let l = load_from_busy(busy.saturating_sub(self.busy_at[core]), span);
                    self.busy_at[core] = busy;
                    l
                })
                .collect();
            self.balancer.record(&self.queue_ns, &load);
            self.queue_ns.iter_mut().for_each(|c| *c = 0);
            self.sampled_at = now;
            self.next_sample = now + self.balancer.config().sample_ns;
        }
        if now >= self.next_check {
            self.checks += 1;
            let before = self.balancer.assignment().to_vec();
            if let Decision::Rebalance { assignment, .. } = self.balancer.check() {
                self.rebalances += 1;
                self.migrations += before
                    .iter()
                    .zip(&assignment)
                    .filter(|(a, b)| a != b)
                    .count() as u64;
            }
            self.next_check = now + self.balancer.config().interval_ns;
        }
    }

    fn migrations(&self) -> u64 {
        self.migrations
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::OvsAlbOptions;

    #[test]
    fn queues_start_round_robin_and_bad_settings_are_refused() {
        let config = PolicyConfig {
            cores: 2,
            ..PolicyConfig::default()
        };
        let p = OvsAlb::new(&config).unwrap();
        assert_eq!(p.assignment(), &[0, 1, 0, 1, 0, 1, 0, 1]);
        let too_many = PolicyConfig {
            ovs_alb: OvsAlbOptions {
                rxqs_per_pmd: 1000,
                ..OvsAlbOptions::default()
            },
            ..config.clone()
        };
        assert!(OvsAlb::new(&too_many).is_err());
        let mut bad = config;
        bad.ovs_alb.alb.load_threshold = 0.0;
        assert!(OvsAlb::new(&bad).is_err());
    }
}
