//! The control-loop policy: when to rebalance, and what to do with a plan.
//!
//! No clock is read here: the caller passes the current time (a [`Duration`]
//! since any fixed origin, e.g. `Instant::now() - start` in a daemon, or the
//! simulated time in the simulator) and asks [`ControlLoop::next_deadline`]
//! when to call again. By default the loop runs at 10 Hz; when the average
//! load *and* the imbalance are both low it backs off exponentially (20 Hz →
//! 10 → 5 … down to 1 Hz by default), and returns to the base interval as
//! soon as either rises or a plan moves buckets (§4 of the paper).
//!
//! A non-empty plan is handed to the caller's callback *before* the loop
//! adopts the new table, so per-bucket state can be prepared to follow the
//! moved buckets ("buckets X, Y, Z move from core A to core B").

use std::time::Duration;

use serde::Serialize;

use crate::balance::{rebalance, BalanceConfig, BalanceError, BalanceOutcome, LoadReport};
use crate::reta::{IndirectionTable, MigrationPlan};

/// Knobs of the control loop.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ControlConfig {
    /// Base interval between rebalancing rounds (100 ms: 10 Hz).
    pub interval: Duration,
    /// Longest interval back-off may reach (1 s: 1 Hz).
    pub max_interval: Duration,
    /// Back off only while the average load of the active cores is below this.
    pub backoff_load: f64,
    /// … and the imbalance ((max − min) / mean of the active cores' loads) below this.
    pub backoff_imbalance: f64,
    /// The rebalancer's own knobs.
    pub balance: BalanceConfig,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(100),
            max_interval: Duration::from_secs(1),
            backoff_load: 0.5,
            backoff_imbalance: 0.05,
            balance: BalanceConfig::default(),
        }
    }
}

/// What one call to [`ControlLoop::tick`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tick {
    /// The rebalancing round.
    pub outcome: BalanceOutcome,
    /// Average estimated load of the active cores before the round.
    pub average_load: f64,
    /// (max − min) / mean of the active cores' estimated loads before the round.
    pub imbalance: f64,
    /// The interval until the next round.
    pub next_interval: Duration,
}

/// Why a tick did not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// The measurements were refused by the rebalancer.
    #[error(transparent)]
    Balance(#[from] BalanceError),
    /// The callback refused the plan; the table was left as it was.
    #[error("the migration callback refused the plan: {0}")]
    Refused(String),
}

/// The RSS++ control loop for one indirection table.
#[derive(Debug, Clone)]
pub struct ControlLoop {
    config: ControlConfig,
    table: IndirectionTable,
    interval: Duration,
    next_deadline: Duration,
    rounds: u64,
    migrations: u64,
}

impl ControlLoop {
    /// A loop starting from `table`, whose first round is due at time zero.
    pub fn new(table: IndirectionTable, config: ControlConfig) -> Self {
        Self {
            interval: config.interval,
            config,
            table,
            next_deadline: Duration::ZERO,
            rounds: 0,
            migrations: 0,
        }
    }

    /// The table as the loop last applied it.
    pub fn table(&self) -> &IndirectionTable {
        &self.table
    }

    /// Replaces the table, e.g. after the device refused a write and the
    /// caller re-read what is really there.
    pub fn set_table(&mut self, table: IndirectionTable) {
        self.table = table;
    }

    /// The configuration.
    pub fn config(&self) -> &ControlConfig {
        &self.config
    }

    /// When the next round is due.
    pub fn next_deadline(&self) -> Duration {
        self.next_deadline
    }

    /// The current interval between rounds.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Rounds run so far.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Buckets moved so far.
    pub fn migrations(&self) -> u64 {
        self.migrations
    }

    /// Whether a round is due at `now`.
    pub fn is_due(&self, now: Duration) -> bool {
        now >= self.next_deadline
    }

    /// Runs one round on the counts and loads measured since the last one.
    ///
    /// When the plan is not empty, `before_apply` sees it first; if it
    /// returns an error the table stays as it was and the error is returned.
    /// Otherwise the loop adopts the new table, and the caller writes it to
    /// the device.
    pub fn tick<F>(
        &mut self,
        now: Duration,
        bucket_packets: &[u64],
        core_load: &[f64],
        before_apply: F,
    ) -> Result<Tick, ControlError>
    where
        F: FnOnce(&MigrationPlan) -> Result<(), String>,
    {
        let report = LoadReport {
            table: &self.table,
            bucket_packets,
            core_load,
        };
        let outcome = rebalance(&report, &self.config.balance)?;
        let active = self.table.cores_in_use();
        let loads: Vec<f64> = active.iter().map(|&c| outcome.load_before[c]).collect();
        let average_load = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
        let (max, min) = loads
            .iter()
            .fold((f64::MIN, f64::MAX), |(hi, lo), &l| (hi.max(l), lo.min(l)));
        let imbalance = if average_load > 0.0 {
            (max - min) / average_load
        } else {
            0.0
        };

        if !outcome.plan.is_empty() {
            before_apply(&outcome.plan).map_err(ControlError::Refused)?;
            self.table = outcome.table.clone();
            self.migrations += outcome.plan.moves.len() as u64;
        }
        let quiet = average_load < self.config.backoff_load
            && imbalance < self.config.backoff_imbalance
            && outcome.plan.is_empty();
        self.interval = if quiet {
            (self.interval * 2).min(self.config.max_interval)
        } else {
            self.config.interval
        };
        self.next_deadline = now + self.interval;
        self.rounds += 1;
        Ok(Tick {
            outcome,
            average_load,
            imbalance,
            next_interval: self.interval,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measure(table: &IndirectionTable, demand: &[f64], cores: usize) -> (Vec<u64>, Vec<f64>) {
        let mut load = vec![0.0f64; cores];
        for (b, &d) in demand.iter().enumerate() {
            load[table.core_of(b)] += d;
        }
        (
            demand.iter().map(|d| (d * 1e6) as u64).collect(),
            load.into_iter().map(|l| l.min(1.0)).collect(),
        )
    }

    #[test]
    fn plan_reaches_the_callback_before_the_table_changes() {
        let table = IndirectionTable::weighted(128, &[3, 1]).unwrap();
        let mut ctl = ControlLoop::new(table.clone(), ControlConfig::default());
        let demand = vec![0.01; 128];
        let (packets, load) = measure(ctl.table(), &demand, 2);
        let mut seen = None;
        let tick = ctl
            .tick(Duration::ZERO, &packets, &load, |plan| {
                seen = Some(plan.clone());
                Ok(())
            })
            .unwrap();
        let seen = seen.expect("callback called");
        assert_eq!(seen, tick.outcome.plan);
        assert!(seen.moves.iter().all(|m| m.from == 0 && m.to == 1));
        let mut expected = table;
        expected.apply(&seen, 2).unwrap();
        assert_eq!(ctl.table(), &expected);
        assert_eq!(ctl.migrations(), seen.moves.len() as u64);
        assert_eq!(tick.next_interval, Duration::from_millis(100));
    }

    #[test]
    fn refused_plan_leaves_the_table() {
        let table = IndirectionTable::weighted(128, &[3, 1]).unwrap();
        let mut ctl = ControlLoop::new(table.clone(), ControlConfig::default());
        let (packets, load) = measure(ctl.table(), &vec![0.01; 128], 2);
        let err = ctl
            .tick(
                Duration::ZERO,
                &packets,
                &load,
                |_| Err("state busy".into()),
            )
            .unwrap_err();
        assert_eq!(err, ControlError::Refused("state busy".into()));
        assert_eq!(ctl.table(), &table);
        assert_eq!(ctl.migrations(), 0);
    }

    #[test]
    fn backs_off_when_quiet_and_snaps_back_under_load() {
        let table = IndirectionTable::equal(128, 4).unwrap();
        let mut ctl = ControlLoop::new(table, ControlConfig::default());
        let quiet = vec![0.2 * 4.0 / 128.0; 128];
        let mut now = Duration::ZERO;
        let mut intervals = Vec::new();
        for _ in 0..6 {
            let (p, l) = measure(ctl.table(), &quiet, 4);
            let t = ctl.tick(now, &p, &l, |_| Ok(())).unwrap();
            assert!(t.outcome.plan.is_empty());
            intervals.push(t.next_interval.as_millis());
            now = ctl.next_deadline();
        }
        assert_eq!(intervals, vec![200, 400, 800, 1000, 1000, 1000]);
        assert!(!ctl.is_due(now - Duration::from_millis(1)) && ctl.is_due(now));
        // Load rises: back to 10 Hz at once.
        let busy = vec![0.7 * 4.0 / 128.0; 128];
        let (p, l) = measure(ctl.table(), &busy, 4);
        let t = ctl.tick(now, &p, &l, |_| Ok(())).unwrap();
        assert_eq!(t.next_interval, Duration::from_millis(100));
        assert_eq!(ctl.next_deadline(), now + Duration::from_millis(100));
    }

    #[test]
    fn imbalance_keeps_the_base_rate_even_at_low_load() {
        let table = IndirectionTable::equal(128, 2).unwrap();
        let mut ctl = ControlLoop::new(table, ControlConfig::default());
        // Two buckets on core 0 carry everything; nothing can fix that,
        // but the loop must keep watching at 10 Hz.
        let mut demand = vec![0.0; 128];
        demand[0] = 0.3;
        demand[2] = 0.01;
        let (p, l) = measure(ctl.table(), &demand, 2);
        let t = ctl.tick(Duration::ZERO, &p, &l, |_| Ok(())).unwrap();
        assert!(t.imbalance > 0.05);
        assert_eq!(t.next_interval, Duration::from_millis(100));
    }

    #[test]
    fn converges_then_moves_nothing() {
        let table = IndirectionTable::weighted(512, &[4, 1, 1, 1, 1, 1, 1, 1]).unwrap();
        let mut ctl = ControlLoop::new(table, ControlConfig::default());
        let demand: Vec<f64> = (0..512)
            .map(|b| 0.6 * 8.0 / 512.0 * (0.5 + (b % 7) as f64 / 6.0))
            .collect();
        let mut moved = Vec::new();
        for round in 0..5 {
            let (p, l) = measure(ctl.table(), &demand, 8);
            let t = ctl
                .tick(Duration::from_millis(100 * round), &p, &l, |_| Ok(()))
                .unwrap();
            moved.push(t.outcome.plan.moves.len());
        }
        assert!(moved[0] > 0);
        assert!(moved[2..].iter().all(|&m| m == 0), "{moved:?}");
    }
}
