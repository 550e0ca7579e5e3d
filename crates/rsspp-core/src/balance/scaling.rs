//! CPU scaling (§3.2 of the paper): when to add or remove a core, and how to
//! empty a removed core.

use serde::Serialize;

use crate::balance::estimate::LoadEstimate;
use crate::reta::CoreId;

/// What the scaling step decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "action", content = "core", rename_all = "snake_case")]
pub enum ScalingAction {
    /// The core count stays.
    None,
    /// This idle core joins the active set.
    Add(CoreId),
    /// This core's buckets were spread over the others and it leaves.
    Remove(CoreId),
    /// The average load is above the target but every core is already active.
    NoSpareCore,
}

/// Decides whether to add or remove a core.
///
/// - Add the lowest-numbered idle core when the average demand of the active
///   cores exceeds `target`.
/// - Remove the least loaded active core when `Σ (target − demand) > 1 + slack·N`
///   and `N > min_cores`: the others can absorb a whole core of work and
///   stay under the target (the `slack·N` margin keeps measurement noise
///   from flapping the decision).
pub fn decide(
    estimate: &LoadEstimate,
    active: &[CoreId],
    target: f64,
    slack: f64,
    min_cores: usize,
) -> ScalingAction {
    let n = active.len();
    if n == 0 {
        return ScalingAction::None;
    }
    let demand = |c: CoreId| estimate.core_demand[c];
    let average = active.iter().map(|&c| demand(c)).sum::<f64>() / n as f64;
    if average > target {
        let cores = estimate.core_demand.len();
        return match (0..cores).find(|c| !active.contains(c)) {
            Some(c) => ScalingAction::Add(c),
            None => ScalingAction::NoSpareCore,
        };
    }
    let headroom: f64 = active.iter().map(|&c| target - demand(c)).sum();
    if n > min_cores.max(1) && headroom > 1.0 + slack * n as f64 {
        let victim = active
            .iter()
            .copied()
            .min_by(|&a, &b| demand(a).total_cmp(&demand(b)).then(b.cmp(&a)))
            .expect("n > 1");
        return ScalingAction::Remove(victim);
    }
    ScalingAction::None
}

/// Empties `victim`: its buckets, heaviest first, each go to the remaining
/// core that is least loaded at that moment, its current load included
/// (the original ignored the remaining cores' load).
pub fn drain(owner: &mut [CoreId], estimate: &LoadEstimate, remaining: &[CoreId], victim: CoreId) {
    let load = &estimate.bucket_load;
    let mut core_load = estimate.fixed_load.clone();
    for (b, &c) in owner.iter().enumerate() {
        core_load[c] += load[b];
    }
    let mut buckets: Vec<usize> = (0..owner.len()).filter(|&b| owner[b] == victim).collect();
    buckets.sort_by(|&a, &b| load[b].total_cmp(&load[a]).then(a.cmp(&b)));
    for b in buckets {
        let to = remaining
            .iter()
            .copied()
            .min_by(|&x, &y| core_load[x].total_cmp(&core_load[y]).then(x.cmp(&y)))
            .expect("a core remains");
        core_load[to] += load[b];
        owner[b] = to;
    }
}
