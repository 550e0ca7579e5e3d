//! A Prometheus histogram of durations: fixed upper bounds, one counter per
//! bucket, the sum and the count of the observations.

use std::time::Duration;

/// Upper bounds (seconds) of [`Histogram::rebalance`]: 1 µs to 10 ms in 1-2.5-5
/// steps. A round over a 128-bucket table takes a few µs and one over 512
/// buckets tens of µs; a round near 10 ms would already eat a tenth of the
/// 100 ms interval, so slower ones fall into `+Inf` together.
pub const REBALANCE_BOUNDS: &[f64] = &[
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
];

/// Observations counted into buckets by upper bound.
///
/// Counts are kept per bucket (not cumulative) so an observation touches one
/// counter; [`Histogram::cumulative`] gives what the exposition format wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// `counts[i]` observations in `(bounds[i-1], bounds[i]]`; the last entry
    /// (index `bounds.len()`) those above every bound.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram with the given upper bounds, which must be finite
    /// and strictly increasing (they are constants of the program: checked in
    /// debug builds only).
    pub fn with_bounds(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.iter().all(|b| b.is_finite()));
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// An empty histogram of rebalancing-round durations ([`REBALANCE_BOUNDS`]).
    pub fn rebalance() -> Self {
        Self::with_bounds(REBALANCE_BOUNDS)
    }

    /// Counts one observation, in seconds. A negative or NaN value (a clock
    /// gone backwards) counts as zero rather than corrupting the sum.
    pub fn observe(&mut self, seconds: f64) {
        let v = if seconds.is_nan() || seconds < 0.0 {
            0.0
        } else {
            seconds
        };
        // `le` is inclusive: a value equal to a bound belongs to that bucket.
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Counts one observed duration.
    pub fn observe_duration(&mut self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// The upper bounds, without `+Inf`.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Cumulative counts, one per bound then one for `+Inf` (equal to
    /// [`Histogram::count`]).
    pub fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0u64, |acc, &c| {
                *acc += c;
                Some(*acc)
            })
            .collect()
    }

    /// Sum of the observations, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::rebalance()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_is_not_below() {
        let mut h = Histogram::rebalance();
        h.observe(1e-6); // exactly the first bound: inclusive
        h.observe(3e-6); // (2.5 µs, 5 µs]
        h.observe(0.5); // above every bound
        let c = h.cumulative();
        assert_eq!(c.len(), REBALANCE_BOUNDS.len() + 1);
        assert_eq!(c[0], 1);
        assert_eq!(c[1], 1);
        assert_eq!(c[2], 2);
        assert_eq!(c[REBALANCE_BOUNDS.len() - 1], 2);
        assert_eq!(c[REBALANCE_BOUNDS.len()], 3);
        assert_eq!(h.count(), 3);
        assert!((h.sum() - (1e-6 + 3e-6 + 0.5)).abs() < 1e-12);
    }

    #[test]
    fn a_negative_or_nan_duration_counts_as_zero() {
        let mut h = Histogram::rebalance();
        h.observe(-1.0);
        h.observe(f64::NAN);
        assert_eq!(h.count(), 2);
        assert_eq!(h.sum(), 0.0);
        assert_eq!(h.cumulative()[0], 2);
    }

    #[test]
    fn durations_are_observed_in_seconds() {
        let mut h = Histogram::rebalance();
        h.observe_duration(Duration::from_micros(40));
        // 40 µs: above 25 µs, within 50 µs (index 5).
        assert_eq!(h.cumulative()[4], 0);
        assert_eq!(h.cumulative()[5], 1);
    }
}
