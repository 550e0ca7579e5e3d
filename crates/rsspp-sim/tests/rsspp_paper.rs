//! The RSS++ paper's results that involve RSS, RSS++ and Sprayer, on small
//! runs (the full figures are in the README, from `rsspp compare`).

mod common;

use common::*;

/// Figure 10: at 90–94% average load RSS++ drops orders of magnitude fewer
/// packets than RSS and has a much lower 95th-percentile latency (Campus #4,
/// 4 cores).
#[test]
fn high_load_rsspp_drops_far_less_with_lower_tail_latency() {
    let r = results(&at_load(campus4(4, 3.0, &["rss", "rsspp"]), 0.94));
    let (rss, rsspp) = (summary(&r, "rss"), summary(&r, "rsspp"));
    assert!(rss.avg_load > 0.85, "load {}", rss.avg_load);
    assert!(rss.drops > 1000, "RSS drops {}", rss.drops);
    assert!(
        rsspp.drops * 100 <= rss.drops,
        "RSS++ {} drops vs RSS {}",
        rsspp.drops,
        rss.drops
    );
    assert!(
        rsspp.latency_p95_us * 4.0 < rss.latency_p95_us,
        "p95 RSS++ {} µs vs RSS {} µs",
        rsspp.latency_p95_us,
        rss.latency_p95_us
    );
    assert!(rsspp.migrations > 0);
    assert_eq!(rsspp.reordered, 0);
}

/// Figure 12 (the RSS/RSS++/Sprayer part): Sprayer is fairest, RSS++ is
/// several times fairer than RSS.
#[test]
fn rsspp_is_several_times_fairer_than_rss() {
    let r = results(&at_load(campus4(8, 3.0, &["rss", "rsspp", "sprayer"]), 0.5));
    let (rss, rsspp, sprayer) = (
        summary(&r, "rss"),
        summary(&r, "rsspp"),
        summary(&r, "sprayer"),
    );
    assert!(
        rsspp.imbalance_median * 4.0 < rss.imbalance_median,
        "RSS++ {}% vs RSS {}%",
        rsspp.imbalance_median,
        rss.imbalance_median
    );
    assert!(sprayer.imbalance_median < rsspp.imbalance_median.max(1.0));
}

/// Figure 15: with few flows Sprayer reorders a large share of packets
/// (the paper's generator sends as fast as the cores go: high load);
/// RSS and RSS++ reorder none.
#[test]
fn sprayer_reorders_few_flows_rss_and_rsspp_do_not() {
    let r = results(&at_load(
        udp_flows(4, 8, 1.0, &["rss", "rsspp", "sprayer"]),
        0.8,
    ));
    let sprayer = summary(&r, "sprayer");
    let share = sprayer.reordered as f64 / sprayer.processed as f64;
    assert!(share > 0.2, "Sprayer reordered {:.1}%", share * 100.0);
    assert_eq!(summary(&r, "rss").reordered, 0);
    assert_eq!(summary(&r, "rsspp").reordered, 0);
}

/// Figure 16: per-bucket flow tables beat one shared table, and the gap
/// grows as cores are added (the shared table's lines bounce between more
/// caches). W = 100, as in the paper's test.
#[test]
fn per_bucket_tables_beat_a_shared_table_as_cores_are_added() {
    let mut gaps = Vec::new();
    for cores in [1, 2, 8] {
        let mut base = at_speed(udp_flows(1024, cores, 0.3, &["rss"]), 0.5 * cores as f64);
        base.engine.cost.work = 100;
        let sharded = results(&base)[0].summary.cycles_per_packet;
        let shared = results(&shared_table(base))[0].summary.cycles_per_packet;
        gaps.push(shared / sharded);
    }
    assert!(gaps[0] > 1.0 && gaps[0] < 1.05, "1 core: {gaps:?}");
    assert!(gaps[1] > gaps[0] && gaps[2] > gaps[1], "{gaps:?}");
    assert!(gaps[2] > 1.1, "8 cores: {gaps:?}");
}

/// The same seed gives the same results, whatever the threads did.
#[test]
fn same_seed_same_results() {
    let config = at_speed(campus4(4, 0.5, &["rss", "rsspp", "sprayer"]), 0.8);
    assert_eq!(results(&config), results(&config));
}

/// Figure 11 (the RSS++ part): on a ramp up and down of the offered load,
/// auto-scaling RSS++ follows the load with far fewer cores on average than
/// static RSS, at the same throughput.
#[test]
fn autoscaling_follows_a_ramp_with_fewer_cores() {
    let mut config = campus4(8, 4.0, &["rss", "rsspp-autoscale"]);
    let peak = common::speed_for(&config, 0.5);
    config.workload.rate = rsspp_sim::workload::RateProfile::ramp(4.0, peak * 0.15, peak).unwrap();
    let r = results(&config);
    let (rss, scaled) = (summary(&r, "rss"), summary(&r, "rsspp-autoscale"));
    assert_eq!(rss.avg_cores, 8.0);
    assert!(
        scaled.avg_cores < 5.0,
        "avg cores {} {:?}",
        scaled.avg_cores,
        r[1].timeline.active_cores
    );
    assert!(
        scaled.processed as f64 >= 0.999 * rss.processed as f64,
        "processed {} vs {}",
        scaled.processed,
        rss.processed
    );
    let cores = &r[1].timeline.active_cores;
    let (low, high) = (cores[2], *cores.iter().max().unwrap());
    assert!(low < high, "cores over time {cores:?}");
    assert!(summary(&r, "rsspp-autoscale").mechanisms["cores_removed"] > 0);
}
