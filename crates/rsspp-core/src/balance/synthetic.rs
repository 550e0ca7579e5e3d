//! Synthetic per-bucket workloads and the measurements a data path would
//! report for them: shared by the tests, `rsspp bench balance` and
//! `rsspp demo`, so all three exercise the rebalancer the same way.
//!
//! A workload is the true demand of each bucket, in cores (1.0 = one core
//! fully busy). [`measure`] turns it into what the rebalancer sees: packets
//! counted per bucket on arrival (proportional to demand), and core loads
//! capped at 1.0, since a saturated core cannot report more.

use crate::balance::{BalanceOutcome, LoadReport};
pub use crate::rand::SplitMix64;
use crate::reta::IndirectionTable;

fn scale_to(demand: &mut [f64], total: f64) {
    let sum: f64 = demand.iter().sum();
    if sum > 0.0 {
        demand.iter_mut().for_each(|d| *d *= total / sum);
    }
}

/// Zipf-distributed bucket demands (the r-th heaviest ∝ 1/r^`exponent`) in
/// random bucket order, scaled so the average core demand is `average`.
pub fn zipf(seed: u64, buckets: usize, cores: usize, exponent: f64, average: f64) -> Vec<f64> {
    let mut demand: Vec<f64> = (1..=buckets)
        .map(|r| 1.0 / (r as f64).powf(exponent))
        .collect();
    SplitMix64::new(seed).shuffle(&mut demand);
    scale_to(&mut demand, average * cores as f64);
    demand
}

/// Light buckets (uniform between 0.2 and 1.8 times their mean) plus
/// `elephants` heavy buckets at random positions carrying `share` of the
/// demand between them (the heaviest twice the second, …), scaled so the
/// average core demand is `average`.
pub fn elephants(
    seed: u64,
    buckets: usize,
    cores: usize,
    elephants: usize,
    share: f64,
    average: f64,
) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    let total = average * cores as f64;
    let mut demand: Vec<f64> = (0..buckets).map(|_| 0.2 + 1.6 * rng.next_f64()).collect();
    let mut order: Vec<usize> = (0..buckets).collect();
    rng.shuffle(&mut order);
    let heavy = &order[..elephants.min(buckets)];
    for &b in heavy {
        demand[b] = 0.0;
    }
    scale_to(&mut demand, total * (1.0 - share));
    let weights: usize = (1..=heavy.len()).sum();
    for (i, &b) in heavy.iter().enumerate() {
        demand[b] = total * share * (heavy.len() - i) as f64 / weights as f64;
    }
    demand
}

/// What a data path reports for a workload under a table.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Packets counted per bucket over one interval (10⁶ per unit of demand).
    pub bucket_packets: Vec<u64>,
    /// Reported core loads, capped at 1.0.
    pub core_load: Vec<f64>,
    /// The true demand of each core (what `core_load` would be without the cap).
    pub true_load: Vec<f64>,
}

/// Packets counted per unit of demand over one interval.
pub const PACKETS_PER_LOAD: f64 = 1e6;

/// Measures `demand` (per bucket) under `table` with `cores` cores.
pub fn measure(table: &IndirectionTable, demand: &[f64], cores: usize) -> Measurement {
    let mut true_load = vec![0.0; cores];
    for (b, &d) in demand.iter().enumerate() {
        true_load[table.core_of(b)] += d;
    }
    Measurement {
        bucket_packets: demand
            .iter()
            .map(|d| (d * PACKETS_PER_LOAD).round() as u64)
            .collect(),
        core_load: true_load.iter().map(|l| l.min(1.0)).collect(),
        true_load,
    }
}

/// A lower bound of the best possible makespan (most loaded core) for
/// `demand` on `cores` cores: no core can do better than the heaviest bucket
/// or the mean.
pub fn makespan_lower_bound(demand: &[f64], cores: usize) -> f64 {
    let total: f64 = demand.iter().sum();
    demand.iter().copied().fold(total / cores as f64, f64::max)
}

/// The table shapes of the quality matrix: 4–128 cores, 128–4096 buckets.
pub const QUALITY_SHAPES: [(usize, usize); 8] = [
    (4, 128),
    (8, 128),
    (8, 512),
    (16, 512),
    (16, 4096),
    (32, 1024),
    (64, 2048),
    (128, 4096),
];

/// The average loads of the quality matrix.
pub const QUALITY_LOADS: [f64; 3] = [0.5, 0.7, 0.9];

/// The workload kinds of the quality matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// Zipf bucket loads, exponent 0.8.
    ZipfMild,
    /// Zipf bucket loads, exponent 1.1 (several buckets heavier than a core's share).
    ZipfSteep,
    /// Light buckets plus `1 + cores / 8` elephants carrying 30% of the demand.
    Elephants,
}

impl Skew {
    /// All kinds, in order.
    pub const ALL: [Skew; 3] = [Skew::ZipfMild, Skew::ZipfSteep, Skew::Elephants];

    /// The per-bucket demand of this kind.
    pub fn demand(self, seed: u64, buckets: usize, cores: usize, average: f64) -> Vec<f64> {
        match self {
            Skew::ZipfMild => zipf(seed, buckets, cores, 0.8, average),
            Skew::ZipfSteep => zipf(seed, buckets, cores, 1.1, average),
            Skew::Elephants => elephants(seed, buckets, cores, 1 + cores / 8, 0.3, average),
        }
    }
}

/// How a workload ended after [`converge`].
#[derive(Debug, Clone)]
pub struct Convergence {
    /// The final table.
    pub table: IndirectionTable,
    /// True per-core demand under the static `equal` table.
    pub load_before: Vec<f64>,
    /// True per-core demand under the final table.
    pub load_after: Vec<f64>,
    /// Rounds that moved buckets.
    pub rounds: usize,
    /// Buckets moved in all rounds.
    pub moves: usize,
    /// Buckets the last moving round isolated.
    pub isolated: Vec<usize>,
}

impl Convergence {
    /// The cores not holding an isolated elephant.
    pub fn shared_cores(&self) -> Vec<usize> {
        let elephant_cores: Vec<usize> = self
            .isolated
            .iter()
            .map(|&b| self.table.core_of(b))
            .collect();
        (0..self.load_after.len())
            .filter(|c| !elephant_cores.contains(c))
            .collect()
    }
}

/// [`imbalance_ratio`](crate::measure::imbalance_ratio) of `loads` at the
/// given cores (0 for an idle set).
pub fn imbalance(loads: &[f64], cores: &[usize]) -> f64 {
    let picked: Vec<f64> = cores.iter().map(|&c| loads[c]).collect();
    crate::measure::imbalance_ratio(&picked)
}

/// Starts from the static `equal` table and feeds `round` (a rebalancing
/// round: the caller decides how, e.g. timing it) the measurements its own
/// plans produce, until a round moves nothing or `max_rounds` have run.
pub fn converge<F>(demand: &[f64], cores: usize, max_rounds: usize, mut round: F) -> Convergence
where
    F: FnMut(&LoadReport<'_>) -> BalanceOutcome,
{
    let mut table = IndirectionTable::equal(demand.len(), cores).expect("a valid table shape");
    let load_before = measure(&table, demand, cores).true_load;
    let (mut rounds, mut moves, mut isolated) = (0, 0, Vec::new());
    for _ in 0..max_rounds {
        let m = measure(&table, demand, cores);
        let out = round(&LoadReport {
            table: &table,
            bucket_packets: &m.bucket_packets,
            core_load: &m.core_load,
        });
        if out.plan.is_empty() {
            break;
        }
        rounds += 1;
        moves += out.plan.moves.len();
        isolated = out.isolated_buckets;
        table = out.table;
    }
    let load_after = measure(&table, demand, cores).true_load;
    Convergence {
        table,
        load_before,
        load_after,
        rounds,
        moves,
        isolated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_have_the_requested_average() {
        for d in [
            zipf(3, 512, 16, 1.0, 0.7),
            elephants(3, 512, 16, 3, 0.3, 0.7),
        ] {
            assert!((d.iter().sum::<f64>() - 0.7 * 16.0).abs() < 1e-9);
            assert_eq!(d.len(), 512);
        }
        let d = elephants(3, 512, 16, 3, 0.3, 0.5);
        let mut sorted = d.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        assert!((sorted[0] - 8.0 * 0.3 * 3.0 / 6.0).abs() < 1e-9);
        assert!((sorted[1] - 8.0 * 0.3 * 2.0 / 6.0).abs() < 1e-9);
    }

    #[test]
    fn measurement_caps_loads_but_counts_every_packet() {
        let t = IndirectionTable::equal(64, 2).unwrap();
        let mut demand = vec![0.0; 64];
        demand[0] = 1.5;
        demand[1] = 0.25;
        let m = measure(&t, &demand, 2);
        assert_eq!(m.core_load, vec![1.0, 0.25]);
        assert_eq!(m.true_load, vec![1.5, 0.25]);
        assert_eq!(m.bucket_packets[0], 1_500_000);
        assert_eq!(makespan_lower_bound(&demand, 2), 1.5);
    }
}
