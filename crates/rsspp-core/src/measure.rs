//! Measures every front end reports the same way: the simulator, the
//! daemon, its `/metrics`, `rsspp top` and the control loop's back-off.

/// What every front end calls imbalance, in these words: `rsspp compare`'s
/// table (in %), `rsspp top` (in %) and `/metrics` (a ratio, as
/// Prometheus wants).
pub const IMBALANCE_DEFINITION: &str = "imbalance: (max - min) / min of the per-CPU packet rates";

/// Load imbalance of a set of per-core figures (packets, packet rates or
/// loads): (max − min) / min, a ratio (×100 for percent).
///
/// This is the RSS++ paper's measure (Figure 12: the packets of the most
/// loaded core relative to the least loaded one, minus one): 0 is perfect
/// balance, 1 means the busiest core got twice what the idlest got. It is
/// infinite when one core got nothing while another got something (no finite
/// ratio describes an idle core beside a busy one), and 0 when nothing
/// arrived at all or there is no core.
pub fn imbalance_ratio(values: &[f64]) -> f64 {
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if values.is_empty() || max <= 0.0 {
        0.0
    } else if min <= 0.0 {
        f64::INFINITY
    } else {
        (max - min) / min
    }
}

/// A core's load over an interval: the fraction of it the core was busy,
/// in `[0, 1]` (busy time is sampled at the ends of the interval, so a busy
/// clock read a little late can exceed the interval). Both in nanoseconds;
/// an empty interval is load 0.
pub fn load_from_busy(busy_ns: u64, interval_ns: u64) -> f64 {
    if interval_ns == 0 {
        return 0.0;
    }
    (busy_ns as f64 / interval_ns as f64).clamp(0.0, 1.0)
}

/// Loads that follow packets: the cores' loads added up, then shared in
/// proportion to the packets each core got (all 0 when no packet came),
/// each clamped to `[0, 1]`. Balancing these balances packet rates,
/// whatever else the cores do and however unevenly they batch — the
/// daemon's `--load-source packets` and `rsspp nf`'s.
pub fn loads_by_packets(loads: &[f64], packets: &[f64]) -> Vec<f64> {
    let total_load: f64 = loads.iter().sum();
    let total_packets: f64 = packets.iter().sum();
    packets
        .iter()
        .map(|&p| {
            if total_packets > 0.0 {
                (total_load * p / total_packets).clamp(0.0, 1.0)
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_by_packets_share_the_total_load_by_packets() {
        assert_eq!(loads_by_packets(&[0.5, 0.1], &[300.0, 100.0]), [0.45, 0.15]);
        assert_eq!(loads_by_packets(&[0.9, 0.9], &[3.0, 1.0]), [1.0, 0.45]);
        assert_eq!(loads_by_packets(&[0.5, 0.1], &[0.0, 0.0]), [0.0, 0.0]);
    }

    #[test]
    fn imbalance_is_max_minus_min_over_min() {
        assert_eq!(imbalance_ratio(&[100.0, 150.0, 200.0]), 1.0);
        assert_eq!(imbalance_ratio(&[50.0, 50.0]), 0.0);
        assert_eq!(imbalance_ratio(&[0.0, 10.0]), f64::INFINITY);
        assert_eq!(imbalance_ratio(&[0.0, 0.0]), 0.0);
        assert_eq!(imbalance_ratio(&[]), 0.0);
        assert_eq!(imbalance_ratio(&[7.0]), 0.0);
    }

    #[test]
    fn load_is_busy_over_interval_clamped() {
        assert_eq!(load_from_busy(25, 100), 0.25);
        assert_eq!(load_from_busy(130, 100), 1.0);
        assert_eq!(load_from_busy(0, 100), 0.0);
        assert_eq!(load_from_busy(5, 0), 0.0);
    }
}
