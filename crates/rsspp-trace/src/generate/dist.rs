//! Empirical distributions given as published CDF points, sampled by
//! inverting the CDF between the points.

/// How to fill the gap between two CDF points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// Uniform in the value (frame sizes).
    Linear,
    /// Uniform in the logarithm of the value (flow sizes, which span six
    /// orders of magnitude).
    Logarithmic,
}

/// An integer-valued distribution with `P(X <= x_i) = F_i` exactly at each
/// published point `(x_i, F_i)`.
#[derive(Debug, Clone)]
pub struct EmpiricalCdf {
    /// `(value, cumulative fraction)`, increasing in both, the last fraction 1.
    points: Vec<(f64, f64)>,
    lowest: f64,
    interpolation: Interpolation,
}

impl EmpiricalCdf {
    /// A distribution from `points`; values below the first point start at
    /// `lowest`. Fractions are renormalised so the last one is 1.
    pub fn new(lowest: u64, points: &[(u64, f64)], interpolation: Interpolation) -> Self {
        let last = points.last().map_or(1.0, |p| p.1);
        Self {
            points: points.iter().map(|&(x, f)| (x as f64, f / last)).collect(),
            lowest: lowest as f64,
            interpolation,
        }
    }

    /// The same distribution restricted to values at most `max` (the point
    /// list is cut there and renormalised).
    pub fn truncated(&self, max: u64) -> Self {
        let points: Vec<(u64, f64)> = self
            .points
            .iter()
            .filter(|p| p.0 <= max as f64)
            .map(|&(x, f)| (x as u64, f))
            .collect();
        Self::new(self.lowest as u64, &points, self.interpolation)
    }

    /// The value at cumulative fraction `u` in `[0, 1)`.
    pub fn quantile(&self, u: f64) -> u64 {
        let mut lo = (self.lowest, 0.0);
        for &(x, f) in &self.points {
            if u < f {
                if x <= lo.0 {
                    return x as u64;
                }
                let t = (u - lo.1) / (f - lo.1);
                let v = match self.interpolation {
                    Interpolation::Linear => lo.0 + t * (x - lo.0),
                    Interpolation::Logarithmic => (lo.0.ln() + t * (x.ln() - lo.0.ln())).exp(),
                };
                // Values in (previous point, this point]: P(X <= x) is exact.
                return (v.ceil().max(lo.0 + 1.0).min(x)) as u64;
            }
            lo = (x, f);
        }
        lo.0 as u64
    }

    /// Exact mean, summing over the integer values between points.
    pub fn mean(&self) -> f64 {
        // Accurate enough with a fine numerical integration of the quantile.
        let steps = 200_000;
        (0..steps)
            .map(|i| self.quantile((i as f64 + 0.5) / steps as f64) as f64)
            .sum::<f64>()
            / steps as f64
    }

    /// The cumulative fraction at `x` (for tests and reports).
    pub fn cdf(&self, x: u64) -> f64 {
        let x = x as f64;
        let mut lo = (self.lowest, 0.0);
        for &(px, f) in &self.points {
            if x < px {
                if x <= lo.0 {
                    return lo.1;
                }
                return lo.1 + (f - lo.1) * (x - lo.0) / (px - lo.0);
            }
            lo = (px, f);
        }
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_hit_the_published_points_exactly() {
        let d = EmpiricalCdf::new(
            60,
            &[(64, 0.075), (66, 0.203), (1514, 1.0)],
            Interpolation::Linear,
        );
        let n = 100_000;
        let samples: Vec<u64> = (0..n)
            .map(|i| d.quantile((i as f64 + 0.5) / n as f64))
            .collect();
        let frac = |x: u64| samples.iter().filter(|&&s| s <= x).count() as f64 / n as f64;
        assert!((frac(64) - 0.075).abs() < 1e-3);
        assert!((frac(66) - 0.203).abs() < 1e-3);
        assert_eq!(frac(1514), 1.0);
        assert!(samples.iter().all(|&s| (61..=1514).contains(&s)));
    }

    #[test]
    fn logarithmic_interpolation_spreads_over_orders_of_magnitude() {
        let d = EmpiricalCdf::new(1, &[(1, 0.5), (10_000, 1.0)], Interpolation::Logarithmic);
        assert_eq!(d.quantile(0.2), 1);
        assert!((99..=101).contains(&d.quantile(0.75)));
        assert_eq!(d.quantile(0.999_999), 10_000);
    }
}
