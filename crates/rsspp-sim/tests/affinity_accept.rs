//! Affinity-Accept on the workload it targets: many short TCP connections
//! with skewed service times. It beats static RSS at high load with its
//! mechanisms visible, leaves a balanced light load alone, reorders
//! nothing, and a seed names one result.

use rsspp_sim::run::{run, RunConfig};
use rsspp_sim::workload::{TraceSource, WorkloadConfig};
use rsspp_sim::PolicyResult;
use rsspp_trace::Preset;

/// `short-connections` on four cores for `seconds` at `speed` (1 = 100k
/// connections/s, 700 kpps; four cores take about 1.9 Mpps of them), with
/// log-normal per-connection service times of spread `skew`.
fn compare(speed: f64, skew: f64, seconds: f64, seed: u64) -> Vec<PolicyResult> {
    let source = TraceSource::preset(Preset::ShortConnections);
    let mut workload = WorkloadConfig::new(source, seconds, speed).unwrap();
    workload.seed = seed;
    let mut config = RunConfig::new(workload, 4, &["rss", "affinity-accept"]);
    config.engine.cost.work_skew = skew;
    config.policy.seed = seed;
    run(&config, |_| {}).unwrap().results
}

#[test]
fn beats_static_rss_under_skewed_service_at_high_load() {
    // Speed 2.4 with σ = 2: the cores are about 75% busy on average, and
    // the expensive connections overload one core or another for
    // milliseconds at a time. Idle cores steal the connections waiting
    // there (p99 about 0.3-0.45 of static RSS's over a dozen seeds).
    let results = compare(2.4, 2.0, 0.5, 7);
    let (rss, aa) = (&results[0].summary, &results[1].summary);
    assert_eq!(results[1].name, "affinity-accept");
    let m = aa.mechanisms.affinity_accept().expect("its counters");
    let summary = format!(
        "rss: {} drops, p95 {:.0} µs, p99 {:.0} µs; affinity-accept: {} drops, \
         p95 {:.0} µs, p99 {:.0} µs, {m:?}",
        rss.drops,
        rss.latency_p95_us,
        rss.latency_p99_us,
        aa.drops,
        aa.latency_p95_us,
        aa.latency_p99_us
    );
    assert!(
        aa.latency_p99_us < 0.6 * rss.latency_p99_us,
        "p99 not clearly lower: {summary}"
    );
    assert!(
        aa.latency_p95_us < rss.latency_p95_us,
        "p95 not lower: {summary}"
    );
    assert!(aa.drops <= rss.drops, "more drops: {summary}");
    // Its mechanisms did the work, and are counted.
    assert!(m.steals > 100, "{summary}");
    assert!(m.flow_group_migrations > 0, "{summary}");
    assert!(m.forwarded_packets > 0, "{summary}");
    assert_eq!(
        aa.migrations,
        m.steals + m.flow_group_migrations,
        "{summary}"
    );
    assert_eq!(aa.reordered, 0);
    assert_eq!(rss.reordered, 0);
    assert_eq!(aa.processed + aa.drops, aa.packets);
}

#[test]
fn balanced_light_load_steals_almost_nothing() {
    // Equal service times at about 40% load: no accept queue fills.
    let results = compare(1.0, 0.0, 0.3, 3);
    let (rss, aa) = (&results[0].summary, &results[1].summary);
    let m = aa.mechanisms.affinity_accept().expect("its counters");
    assert!(m.connections_accepted > 25_000, "{m:?}");
    assert!(
        m.steals * 1000 <= m.connections_accepted,
        "stole {} of {} connections",
        m.steals,
        m.connections_accepted
    );
    assert_eq!(m.flow_group_migrations, 0, "{m:?}");
    assert_eq!(aa.drops, 0);
    assert_eq!(aa.reordered, 0);
    // Without balancing to do, it performs like static RSS.
    assert!(
        (aa.latency_p99_us - rss.latency_p99_us).abs() <= 0.1 * rss.latency_p99_us,
        "p99 {:.1} µs against rss {:.1} µs",
        aa.latency_p99_us,
        rss.latency_p99_us
    );
}

#[test]
fn the_seed_names_the_result() {
    let a = compare(2.4, 2.0, 0.15, 11);
    let b = compare(2.4, 2.0, 0.15, 11);
    assert_eq!(a[1], b[1]);
    assert!(a[1].summary.mechanisms.affinity_accept().unwrap().steals > 0);
    let c = compare(2.4, 2.0, 0.15, 12);
    assert_ne!(a[1].summary, c[1].summary);
}
