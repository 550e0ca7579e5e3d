//! The RSS++ rebalancer (§3.1 of the paper) and CPU scaling (§3.2).
//!
//! Input: the indirection table, the packets counted per bucket over the
//! last interval, and each core's load in `[0, 1]`. Output: a new table, the
//! moves that lead to it, and the estimated per-core load before and after.
//! A pure function of its input.
//!
//! The algorithm, in order:
//! 1. **Estimate** ([`estimate::estimate`]): a bucket's load is its share of
//!    its core's packets times that core's load; a saturated core's demand is
//!    its packets times the per-packet cost seen on unsaturated cores.
//! 2. **Scale** (optional, [`scaling`]): add an idle core when the average
//!    load is above the target; remove the least loaded core, spreading its
//!    buckets heaviest-first onto the least loaded others, when the others
//!    have a whole core of headroom.
//! 3. **Isolate elephants**: a bucket heavier than the level the other cores
//!    would share gets a core to itself (the oRSS "core reduction"), and the
//!    rest are balanced without it.
//! 4. **Descend**: move the bucket of the most loaded cores that best closes
//!    the gap to the least loaded ones (swaps when no single bucket fits),
//!    each step strictly lowering `Σ ((load − level)/level)² + α·moves`,
//!    until every core is within the tolerance or nothing helps.

pub mod estimate;
pub mod scaling;
mod solver;
pub mod synthetic;

use serde::Serialize;

use crate::reta::{CoreId, IndirectionTable, MigrationPlan};
pub use estimate::LoadEstimate;
pub use scaling::ScalingAction;

/// Knobs of the rebalancer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BalanceConfig {
    /// A core within this relative distance of the target level counts as
    /// balanced; when all are, nothing moves.
    pub tolerance: f64,
    /// α: the cost of one bucket move in units of relative squared
    /// imbalance. A move must lower `Σ ((load − level)/level)²` by more.
    pub migration_cost: f64,
    /// A core reporting at least this load is taken as saturated.
    pub saturation: f64,
    /// Scaling: the average load above which a core is added.
    pub target_load: f64,
    /// Scaling: α of the removal rule `Σ (target − load) > 1 + α·N`.
    pub scale_down_slack: f64,
    /// Whether to add and remove cores.
    pub autoscale: bool,
    /// Scaling: fewest cores kept active (2: a core is removed only from
    /// three or more; 1: down to a single core).
    pub min_cores: usize,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        Self {
            tolerance: 0.005,
            migration_cost: 1e-5,
            saturation: 0.99,
            target_load: 0.8,
            scale_down_slack: 0.05,
            autoscale: false,
            min_cores: 2,
        }
    }
}

/// Why the rebalancer refused its input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BalanceError {
    /// No core loads given.
    #[error("no cores: core_load is empty")]
    NoCores,
    /// `bucket_packets` does not have one entry per bucket.
    #[error("bucket_packets has {packets} entries but the table has {buckets} buckets")]
    LengthMismatch {
        /// Table size.
        buckets: usize,
        /// Entries given.
        packets: usize,
    },
    /// A table entry names a core that has no load entry.
    #[error("bucket {bucket} names core {core}, but core_load has only {cores} cores")]
    UnknownCore {
        /// The bucket.
        bucket: usize,
        /// The core it names.
        core: CoreId,
        /// Number of cores.
        cores: usize,
    },
    /// A load that is negative, above 1 or not a number.
    #[error("core {core} has load {value}; loads must be numbers between 0 and 1")]
    BadLoad {
        /// The core.
        core: CoreId,
        /// The value given.
        value: f64,
    },
    /// A configuration value out of range.
    #[error("{setting} must be {expected}")]
    BadConfig {
        /// The knob.
        setting: Setting,
        /// Its valid range, in words.
        expected: &'static str,
    },
}

/// The measurements one rebalancing round works on.
#[derive(Debug, Clone, Copy)]
pub struct LoadReport<'a> {
    /// The current table.
    pub table: &'a IndirectionTable,
    /// Packets counted per bucket over the last interval (all cores summed).
    pub bucket_packets: &'a [u64],
    /// Load of every core `0..N` in `[0, 1]`; cores absent from the table are idle.
    pub core_load: &'a [f64],
}

/// The result of a rebalancing round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BalanceOutcome {
    /// The new table.
    pub table: IndirectionTable,
    /// The moves from the old table to the new one.
    pub plan: MigrationPlan,
    /// The scaling decision (always `None` without autoscale).
    pub scaling: ScalingAction,
    /// Cores owning buckets after the round, ascending.
    pub active_cores: Vec<CoreId>,
    /// Estimated demand per core before the round.
    pub load_before: Vec<f64>,
    /// Estimated load per core once the new table is in place.
    pub load_after: Vec<f64>,
    /// Buckets isolated on a core of their own.
    pub isolated_buckets: Vec<usize>,
    /// The load the non-isolated active cores aim for.
    pub level: f64,
    /// Steps taken by the descent.
    pub steps: usize,
}

impl BalanceConfig {
    /// Checks every knob's range; the error names the knob.
    pub fn validate(&self) -> Result<(), BalanceError> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        let bad = |setting, expected| Err(BalanceError::BadConfig { setting, expected });
        if !ok(self.tolerance) || self.tolerance >= 0.5 {
            return bad(Setting::Tolerance, "in [0, 0.5)");
        }
        if !ok(self.migration_cost) {
            return bad(Setting::MigrationCost, "a non-negative number");
        }
        if !(ok(self.saturation) && self.saturation > 0.0 && self.saturation <= 1.0) {
            return bad(Setting::Saturation, "in (0, 1]");
        }
        if !(ok(self.target_load) && self.target_load > 0.0 && self.target_load <= 1.0) {
            return bad(Setting::TargetLoad, "in (0, 1]");
        }
        if !ok(self.scale_down_slack) {
            return bad(Setting::ScaleDownSlack, "a non-negative number");
        }
        if self.min_cores == 0 {
            return bad(Setting::MinCores, "at least 1");
        }
        Ok(())
    }
}

/// A knob of the rebalancer or the control loop, as named in errors (front
/// ends map it to their own option names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// [`BalanceConfig::tolerance`].
    Tolerance,
    /// [`BalanceConfig::migration_cost`].
    MigrationCost,
    /// [`BalanceConfig::saturation`].
    Saturation,
    /// [`BalanceConfig::target_load`].
    TargetLoad,
    /// [`BalanceConfig::scale_down_slack`].
    ScaleDownSlack,
    /// [`BalanceConfig::min_cores`].
    MinCores,
    /// The control loop's base interval.
    Interval,
    /// The control loop's longest back-off interval.
    MaxInterval,
    /// The control loop's back-off load threshold.
    BackoffLoad,
    /// The control loop's back-off imbalance threshold.
    BackoffImbalance,
    /// The control loop's minimum predicted improvement of a plan.
    MinImprovement,
    /// The control loop's minimum time between two moves of a bucket.
    MinDwell,
    /// The override controller's table size
    /// ([`crate::orss::OverrideConfig::max_overrides`]).
    MaxOverrides,
    /// The override controller's hot-bucket and elephant thresholds.
    ElephantDetection,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Setting::Tolerance => "tolerance",
            Setting::MigrationCost => "migration cost",
            Setting::Saturation => "saturation",
            Setting::TargetLoad => "target load",
            Setting::ScaleDownSlack => "scale-down slack",
            Setting::MinCores => "minimum cores",
            Setting::Interval => "interval",
            Setting::MaxInterval => "maximum interval",
            Setting::BackoffLoad => "back-off load",
            Setting::BackoffImbalance => "back-off imbalance",
            Setting::MinImprovement => "minimum improvement",
            Setting::MinDwell => "minimum dwell",
            Setting::MaxOverrides => "maximum overrides",
            Setting::ElephantDetection => "elephant detection",
        })
    }
}

impl LoadReport<'_> {
    /// Checks lengths, core indices and load values.
    pub fn validate(&self) -> Result<(), BalanceError> {
        let cores = self.core_load.len();
        if cores == 0 {
            return Err(BalanceError::NoCores);
        }
        if self.bucket_packets.len() != self.table.len() {
            return Err(BalanceError::LengthMismatch {
                buckets: self.table.len(),
                packets: self.bucket_packets.len(),
            });
        }
        if let Some((bucket, &core)) = self
            .table
            .entries()
            .iter()
            .enumerate()
            .find(|(_, &c)| c >= cores)
        {
            return Err(BalanceError::UnknownCore {
                bucket,
                core,
                cores,
            });
        }
        if let Some((core, &value)) = self
            .core_load
            .iter()
            .enumerate()
            .find(|(_, &l)| !(0.0..=1.0).contains(&l))
        {
            return Err(BalanceError::BadLoad { core, value });
        }
        Ok(())
    }
}

/// The cores among `0..cores` that own at least one bucket, ascending.
fn cores_owning(owner: &[CoreId], cores: usize) -> Vec<CoreId> {
    let mut used = vec![false; cores];
    for &c in owner {
        used[c] = true;
    }
    (0..cores).filter(|&c| used[c]).collect()
}

/// One rebalancing round: a pure function of `report` and `config`.
pub fn rebalance(
    report: &LoadReport<'_>,
    config: &BalanceConfig,
) -> Result<BalanceOutcome, BalanceError> {
    rebalance_pinned(report, config, &[])
}

/// One rebalancing round in which the buckets marked in `pinned` stay where
/// they are (a bucket moved too recently, say), unless their core is
/// removed by scaling. Their load still counts on their core. `pinned` may
/// be shorter than the table (missing entries are not pinned).
pub fn rebalance_pinned(
    report: &LoadReport<'_>,
    config: &BalanceConfig,
    pinned: &[bool],
) -> Result<BalanceOutcome, BalanceError> {
    rebalance_with_fixed(report, config, pinned, &[])
}

/// [`rebalance_pinned`], where core `c` also received `fixed_packets[c]`
/// packets that no bucket carries (flows steered on their own by per-flow
/// overrides, [`crate::orss::overrides`]): load the buckets are spread
/// around ([`estimate::estimate_with_fixed`]).
pub fn rebalance_with_fixed(
    report: &LoadReport<'_>,
    config: &BalanceConfig,
    pinned: &[bool],
    fixed_packets: &[u64],
) -> Result<BalanceOutcome, BalanceError> {
    report.validate()?;
    config.validate()?;
    let mut estimate = estimate::estimate_with_fixed(
        report.table,
        report.bucket_packets,
        report.core_load,
        fixed_packets,
        config.saturation,
    );
    let mut owner: Vec<CoreId> = report.table.entries().to_vec();
    let mut active = cores_owning(&owner, report.core_load.len());

    let scaling = if config.autoscale {
        scaling::decide(
            &estimate,
            &active,
            config.target_load,
            config.scale_down_slack,
            config.min_cores,
        )
    } else {
        ScalingAction::None
    };
    match scaling {
        ScalingAction::Add(c) => {
            active.push(c);
            active.sort_unstable();
        }
        ScalingAction::Remove(c) => {
            active.retain(|&x| x != c);
            scaling::drain(&mut owner, &estimate, &active, c);
        }
        ScalingAction::None | ScalingAction::NoSpareCore => {}
    }
    // A pinned bucket still on its core becomes load the solver cannot
    // move; one drained off a removed core is free again.
    let held: Vec<usize> = pinned
        .iter()
        .enumerate()
        .filter(|&(b, &p)| p && b < owner.len() && owner[b] == report.table.core_of(b))
        .map(|(b, _)| b)
        .collect();
    for &b in &held {
        estimate.fixed_load[owner[b]] += estimate.bucket_load[b];
        estimate.bucket_load[b] = 0.0;
    }

    let params = solver::SolverParams {
        tolerance: config.tolerance,
        migration_cost: config.migration_cost,
        max_steps: 2 * owner.len(),
    };
    let solved = solver::solve(&mut owner, &active, &estimate, params);
    // The solver gains nothing by moving a load-free bucket, but make sure.
    for &b in &held {
        owner[b] = report.table.core_of(b);
    }

    let cores = report.core_load.len();
    // One pass: each core's load under `owner`, and which cores own buckets.
    let loads_of = |owner: &[CoreId]| {
        let mut load = estimate.fixed_load.clone();
        let mut used = vec![false; cores];
        for (&c, &l) in owner.iter().zip(&estimate.bucket_load) {
            load[c] += l;
            used[c] = true;
        }
        (load, used)
    };
    let load_before = estimate.core_demand.clone();
    let (mut load_after, mut used) = loads_of(&owner);
    // Safety net: balancing alone must never raise the most loaded core.
    let max = |l: &[f64]| l.iter().copied().fold(0.0, f64::max);
    if !matches!(scaling, ScalingAction::Remove(_)) && max(&load_after) > max(&load_before) + 1e-9 {
        owner.copy_from_slice(report.table.entries());
        (load_after, used) = loads_of(&owner);
    }

    let active_cores = (0..cores).filter(|&c| used[c]).collect();
    let table = IndirectionTable::from_entries(owner, cores)
        .expect("the solver only assigns existing cores");
    let plan = report.table.diff(&table).expect("same size");
    Ok(BalanceOutcome {
        active_cores,
        table,
        plan,
        scaling,
        load_before,
        load_after,
        isolated_buckets: solved.isolated,
        level: solved.level,
        steps: solved.steps,
    })
}

#[cfg(test)]
mod tests;
