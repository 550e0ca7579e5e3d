//! `metron` on small runs of campus4: classes move only when a core is
//! overloaded, and with auto-scaling the cores in use follow the load.

use rsspp_sim::run::{run, RunConfig};
use rsspp_sim::workload::{RateProfile, TraceSource, WorkloadConfig};
use rsspp_sim::PolicyResult;
use rsspp_trace::Preset;

/// campus4 at a quarter of its rate on `cores` cores at `clock_ghz`.
fn metron(
    cores: usize,
    clock_ghz: f64,
    seconds: f64,
    rate: RateProfile,
    autoscale: bool,
) -> PolicyResult {
    let mut workload =
        WorkloadConfig::new(TraceSource::preset(Preset::Campus4), seconds, 1.0).unwrap();
    workload.rate = rate;
    let mut config = RunConfig::new(workload, cores, &["metron"]);
    config.engine.cost.clock_ghz = clock_ghz;
    config.policy.autoscale = autoscale;
    run(&config, |_| {}).unwrap().results.remove(0)
}

#[test]
fn classes_move_only_when_a_core_is_overloaded() {
    let quarter = RateProfile::constant(0.25).unwrap();
    // About 40% load on 4 cores: nothing moves.
    let calm = metron(4, 1.5, 1.0, quarter.clone(), false);
    assert_eq!(calm.summary.migrations, 0);
    assert_eq!(calm.summary.mechanisms.metron().unwrap().core_splits, 0);
    // About 90%: the busiest cores give half their classes away.
    let busy = metron(4, 0.65, 1.0, quarter, false);
    let m = busy.summary.mechanisms.metron().expect("its counters");
    assert!(busy.summary.migrations > 0);
    assert!(m.core_splits > 0);
    assert_eq!(m.core_merges, 0, "no merging without auto-scaling");
    assert_eq!(busy.summary.avg_cores, 4.0);
}

#[test]
fn autoscaling_follows_a_ramp() {
    // The Figure 11 shape over 4 s: 5% of campus4's rate, up to a half, and
    // back, on 8 cores that a half rate loads at about 60% (one at 5%).
    let ramp = RateProfile::ramp(4.0, 0.05, 0.5).unwrap();
    let r = metron(8, 1.0, 4.0, ramp, true);
    let active = &r.timeline.active_cores;
    let mean = |from: usize, to: usize| {
        active[from..to].iter().map(|&a| f64::from(a)).sum::<f64>() / (to - from) as f64
    };
    assert_eq!(active[0], 1, "starts on one core");
    let low = mean(0, 3);
    let high = mean(12, 20);
    let m = r.summary.mechanisms.metron().expect("its counters");
    assert!(
        high > low + 1.0,
        "{low} cores at low load, {high} at high load"
    );
    assert!(m.core_splits > 0 && m.core_merges > 0);
    assert!(r.summary.avg_cores < 8.0);
    // Released cores at the end: fewer than at the peak.
    assert!(mean(active.len() - 3, active.len()) < high);
}
