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

/// Figure 12: on Campus #4 at 8 cores, software round-robin and Sprayer
/// are the fairest, RSS++ is several times fairer than RSS, and stateful
/// software dispatching and Metron are less fair than RSS++. The trace is
/// replayed at an eighth of its rate on cores slowed to 0.3 GHz: the same
/// load (about half) with eight times fewer packets to simulate.
#[test]
fn fairness_of_every_method() {
    let mut config = at_speed(campus4(8, 2.2, rsspp_sim::policy::POLICY_NAMES), 0.125);
    config.engine.cost.clock_ghz = 0.3;
    let r = results(&config);
    let imbalance = |name: &str| summary(&r, name).imbalance_median;
    let mut ranked: Vec<(&str, f64)> = r
        .iter()
        .map(|p| (p.name.as_str(), imbalance(&p.name)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    let fairest: Vec<&str> = ranked[..2].iter().map(|p| p.0).collect();
    assert!(
        fairest.contains(&"sw-rr") && fairest.contains(&"sprayer"),
        "{ranked:?}"
    );
    assert!(imbalance("rsspp") * 4.0 < imbalance("rss"), "{ranked:?}");
    for worse in ["sw-stateful-rr", "sw-stateful-load", "metron"] {
        assert!(imbalance(worse) > imbalance("rsspp"), "{worse}: {ranked:?}");
    }
    let load = summary(&r, "rss").avg_load;
    assert!((0.3..0.7).contains(&load), "load {load}");
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

/// Auto-scaling RSS++ starts on the fewest cores it keeps (2), as
/// metron-autoscale starts on one, and adds cores only when the load asks:
/// at a quarter of one core's work it never uses more than two. Started on
/// every core, it spent its first rounds releasing them, one a round, and
/// Figure 11's average counted them.
#[test]
fn autoscaling_starts_on_the_fewest_cores() {
    let config = at_load(campus4(8, 1.0, &["rsspp-autoscale"]), 0.03);
    let r = results(&config);
    let cores = &r[0].timeline.active_cores;
    assert!(cores.iter().all(|&c| c <= 2), "cores over time {cores:?}");
    assert_eq!(summary(&r, "rsspp-autoscale").drops, 0);
}

/// Figure 11: on a ramp up and down of the offered load, auto-scaling
/// RSS++ follows the load with far fewer cores on average than static RSS
/// and fewer than Metron's scaling, at the same throughput.
#[test]
fn autoscaling_follows_a_ramp_with_fewer_cores() {
    let mut config = campus4(8, 4.0, &["rss", "rsspp-autoscale", "metron-autoscale"]);
    let peak = common::speed_for(&config, 0.5);
    config.workload.rate = rsspp_sim::workload::RateProfile::ramp(4.0, peak * 0.15, peak).unwrap();
    let r = results(&config);
    let rss = summary(&r, "rss");
    let scaled = summary(&r, "rsspp-autoscale");
    let metron = summary(&r, "metron-autoscale");
    assert_eq!(rss.avg_cores, 8.0);
    assert!(
        scaled.avg_cores < 5.0 && scaled.avg_cores < metron.avg_cores,
        "RSS++ {} cores {:?}, Metron {} cores {:?}",
        scaled.avg_cores,
        r[1].timeline.active_cores,
        metron.avg_cores,
        r[2].timeline.active_cores
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
    assert!(scaled.mechanisms.rsspp().unwrap().cores_removed > 0);
    // Buckets moved to and from cores that come and go, in order.
    assert_eq!(scaled.reordered, 0);
}
