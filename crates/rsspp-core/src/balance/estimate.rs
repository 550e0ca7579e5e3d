//! From measurements to loads: per-core demand and per-bucket fractional load.

use crate::reta::IndirectionTable;

/// What the solver works on, all in units of one core's capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadEstimate {
    /// Estimated demand of each core: its measured load, or more when it was
    /// saturated (see [`estimate`]).
    pub core_demand: Vec<f64>,
    /// Fractional load of each bucket: its packets / its core's packets ×
    /// its core's demand (§3.1 of the paper).
    pub bucket_load: Vec<f64>,
    /// Load of each core that no bucket explains (a core with load but no
    /// counted packets): it cannot be moved.
    pub fixed_load: Vec<f64>,
    /// Cores whose measured load was at or above the saturation threshold.
    pub saturated: Vec<bool>,
}

/// Estimates core demand and bucket loads.
///
/// A core that reports a load at or above `saturation` is busy all the time:
/// its true demand can be higher than 1.0, and the packets it did not have
/// time for are waiting or dropped. Bucket counters count packets on arrival
/// (the NIC's or the XDP hook's count, before any queue), so the saturated
/// core's demand is its packets times the cost of a packet measured on the
/// cores that were not saturated. Without such a reference (every core
/// with packets saturated) the saturated cores' total load is shared out in
/// proportion to their packets: with no better knowledge, a packet costs the
/// same everywhere, and balancing packets is the best move.
pub fn estimate(
    table: &IndirectionTable,
    bucket_packets: &[u64],
    core_load: &[f64],
    saturation: f64,
) -> LoadEstimate {
    estimate_with_fixed(table, bucket_packets, core_load, &[], saturation)
}

/// [`estimate`], where core `c` also received `fixed_packets[c]` packets
/// that no bucket carries (flows steered on their own, by a per-flow
/// override): they cost what its other packets cost, and their load is
/// fixed to the core. `fixed_packets` may be shorter than the cores.
pub fn estimate_with_fixed(
    table: &IndirectionTable,
    bucket_packets: &[u64],
    core_load: &[f64],
    fixed_packets: &[u64],
    saturation: f64,
) -> LoadEstimate {
    let cores = core_load.len();
    let mut core_packets = vec![0u64; cores];
    for (&p, &c) in bucket_packets.iter().zip(table.entries()) {
        core_packets[c] += p;
    }
    for (c, &p) in fixed_packets.iter().enumerate().take(cores) {
        core_packets[c] += p;
    }
    let saturated: Vec<bool> = core_load.iter().map(|&l| l >= saturation).collect();

    // Cost of one packet, in core-loads, summed over a set of cores.
    let cost_over = |wanted: bool| {
        let (load, packets) = (0..cores)
            .filter(|&c| saturated[c] == wanted && core_packets[c] > 0)
            .fold((0.0, 0u64), |(l, p), c| {
                (l + core_load[c], p + core_packets[c])
            });
        (packets > 0 && load > 0.0).then(|| load / packets as f64)
    };
    let core_demand: Vec<f64> = match (cost_over(false), cost_over(true)) {
        // Saturated cores did at least their measured load, and as much as
        // their packets cost on the cores that kept up.
        (Some(reference), _) => (0..cores)
            .map(|c| {
                if saturated[c] {
                    core_load[c].max(core_packets[c] as f64 * reference)
                } else {
                    core_load[c]
                }
            })
            .collect(),
        // No core kept up: share the saturated cores' load by packets.
        (None, Some(average)) => (0..cores)
            .map(|c| {
                if saturated[c] && core_packets[c] > 0 {
                    core_packets[c] as f64 * average
                } else {
                    core_load[c]
                }
            })
            .collect(),
        (None, None) => core_load.to_vec(),
    };
    // Load of one packet on each core.
    let per_packet: Vec<f64> = (0..cores)
        .map(|c| match core_packets[c] {
            0 => 0.0,
            p => core_demand[c] / p as f64,
        })
        .collect();
    let fixed_load = (0..cores)
        .map(|c| {
            if core_packets[c] == 0 {
                core_demand[c]
            } else {
                fixed_packets
                    .get(c)
                    .map_or(0.0, |&p| p as f64 * per_packet[c])
            }
        })
        .collect();
    let bucket_load = bucket_packets
        .iter()
        .zip(table.entries())
        .map(|(&p, &c)| p as f64 * per_packet[c])
        .collect();
    LoadEstimate {
        core_demand,
        bucket_load,
        fixed_load,
        saturated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractional_load_splits_core_load_by_packets() {
        let t = IndirectionTable::equal(64, 2).unwrap();
        let mut packets = vec![0u64; 64];
        packets[0] = 300; // core 0
        packets[2] = 100; // core 0
        packets[1] = 50; // core 1
        let e = estimate(&t, &packets, &[0.8, 0.1], 0.99);
        assert!((e.bucket_load[0] - 0.6).abs() < 1e-12);
        assert!((e.bucket_load[2] - 0.2).abs() < 1e-12);
        assert!((e.bucket_load[1] - 0.1).abs() < 1e-12);
        assert_eq!(e.fixed_load, vec![0.0, 0.0]);
    }

    #[test]
    fn packets_no_bucket_carries_are_load_fixed_to_their_core() {
        let t = IndirectionTable::equal(64, 2).unwrap();
        let mut packets = vec![0u64; 64];
        packets[0] = 300; // core 0
        packets[1] = 100; // core 1
                          // Core 0 also steered 100 packets of an overridden flow.
        let e = estimate_with_fixed(&t, &packets, &[0.8, 0.2], &[100, 0], 0.99);
        assert!((e.bucket_load[0] - 0.6).abs() < 1e-12);
        assert!((e.fixed_load[0] - 0.2).abs() < 1e-12);
        assert!((e.bucket_load[1] - 0.2).abs() < 1e-12);
        assert_eq!(e.fixed_load[1], 0.0);
    }

    #[test]
    fn saturated_core_demand_comes_from_its_packets() {
        let t = IndirectionTable::equal(64, 2).unwrap();
        let mut packets = vec![0u64; 64];
        packets[0] = 1500; // core 0: 1.5 cores' worth at 1e-3 per packet
        packets[1] = 500; // core 1: 0.5
        let e = estimate(&t, &packets, &[1.0, 0.5], 0.99);
        assert!((e.core_demand[0] - 1.5).abs() < 1e-12);
        assert!(e.saturated[0] && !e.saturated[1]);
        // With every core saturated there is no reference: the total is
        // shared in proportion to packets (1500 : 500 of 2.0).
        let e = estimate(&t, &packets, &[1.0, 1.0], 0.99);
        assert!((e.core_demand[0] - 1.5).abs() < 1e-12 && (e.core_demand[1] - 0.5).abs() < 1e-12);
    }

    #[test]
    fn load_without_packets_is_fixed() {
        let t = IndirectionTable::equal(64, 2).unwrap();
        let mut packets = vec![0u64; 64];
        packets[0] = 10;
        let e = estimate(&t, &packets, &[0.4, 0.3], 0.99);
        assert_eq!(e.fixed_load, vec![0.0, 0.3]);
    }
}
