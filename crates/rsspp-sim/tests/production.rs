//! The balancers production runs, `ovs-alb` (Open vSwitch's PMD auto load
//! balancer) and `rfs` (Linux RFS), beside RSS and RSS++ on short runs of
//! campus4: where RSS++ wins and where it does not.

mod common;

use common::{at_load, campus4, results, summary};
use rsspp_sim::run::RunConfig;

/// campus4 on 4 cores at average load `load` for `seconds`.
fn campus(load: f64, seconds: f64, policies: &[&str]) -> RunConfig {
    at_load(campus4(4, seconds, policies), load)
}

#[test]
fn ovs_alb_waits_a_minute_where_rsspp_reacts_at_once() {
    // 90% average load: under static RSS the busiest core is saturated.
    let r = results(&campus(0.9, 2.0, &["rss", "ovs-alb", "rsspp"]));
    let (rss, ovs, rsspp) = (
        summary(&r, "rss"),
        summary(&r, "ovs-alb"),
        summary(&r, "rsspp"),
    );
    // Within OVS's first minute nothing moves, and ovs-alb's queues spread
    // the buckets over the cores exactly as RSS does.
    assert_eq!(ovs.migrations, 0);
    assert_eq!(ovs.imbalance_median, rss.imbalance_median);
    assert_eq!(ovs.drops, rss.drops);
    assert!(rss.drops > 0, "RSS is overloaded: {}", rss.drops);
    // RSS++ balanced within its first rounds.
    assert_eq!(rsspp.drops, 0);
    assert!(
        rsspp.imbalance_median < rss.imbalance_median / 4.0,
        "{} vs {}",
        rsspp.imbalance_median,
        rss.imbalance_median
    );
}

#[test]
fn ovs_alb_on_short_intervals_moves_a_few_queues_once() {
    // OVS's timers divided by 40: samples every 0.25 s, a check every
    // 1.5 s, over 3 s.
    let mut config = campus(0.9, 3.0, &["rss", "ovs-alb", "rsspp"]);
    config.policy.ovs_alb.alb.sample_ns = 250_000_000;
    config.policy.ovs_alb.alb.interval_ns = 1_500_000_000;
    let r = results(&config);
    let (rss, ovs, rsspp) = (
        summary(&r, "rss"),
        summary(&r, "ovs-alb"),
        summary(&r, "rsspp"),
    );
    // It rebalanced once, at 1.5 s, moving a few queues (each a quarter of
    // a core's buckets), where RSS++ moved buckets within its first rounds:
    // RSS's drops, all before 1.5 s, were ovs-alb's too.
    assert!(
        ovs.migrations > 0 && ovs.migrations <= 16,
        "{}",
        ovs.migrations
    );
    assert!(ovs.imbalance_median < rss.imbalance_median);
    assert_eq!(ovs.drops, rss.drops);
    assert_eq!(rsspp.drops, 0);
    // Queues are coarser than buckets: RSS++ stays fairer.
    assert!(
        rsspp.imbalance_median < ovs.imbalance_median,
        "{} vs {}",
        rsspp.imbalance_median,
        ovs.imbalance_median
    );
}

#[test]
fn ovs_alb_leaves_a_load_under_its_threshold_alone() {
    // 60%: no core reaches 95%, OVS never rebalances even on short timers,
    // and nobody drops: RSS++'s balancing buys no packet here.
    let mut config = campus(0.6, 2.0, &["rss", "ovs-alb", "rsspp"]);
    config.policy.ovs_alb.alb.sample_ns = 100_000_000;
    config.policy.ovs_alb.alb.interval_ns = 600_000_000;
    let r = results(&config);
    let (rss, ovs, rsspp) = (
        summary(&r, "rss"),
        summary(&r, "ovs-alb"),
        summary(&r, "rsspp"),
    );
    assert_eq!(ovs.migrations, 0);
    assert_eq!((rss.drops, ovs.drops, rsspp.drops), (0, 0, 0));
}

#[test]
fn rfs_follows_its_consumers_in_order_at_a_price() {
    let r = results(&campus(0.7, 2.0, &["rss", "rfs", "rsspp"]));
    let (rss, rfs, rsspp) = (summary(&r, "rss"), summary(&r, "rfs"), summary(&r, "rsspp"));
    // Every packet is processed or dropped, none out of order: a flow
    // switches CPU only once its old backlog has passed its last packet.
    assert_eq!(rfs.processed + rfs.drops, rfs.packets);
    assert_eq!(rfs.reordered, 0);
    // Steering in software costs cycles on the receiving core, and the
    // packets that cross cores pay for their cache lines: RSS++ steers in
    // the NIC for free.
    assert!(
        rfs.cycles_per_packet > rss.cycles_per_packet * 1.02,
        "{} vs {}",
        rfs.cycles_per_packet,
        rss.cycles_per_packet
    );
    assert!(rsspp.cycles_per_packet < rfs.cycles_per_packet);
    // The scheduler balancing the consumer threads makes RFS fairer than
    // RSS, but threads are coarser than buckets: RSS++ is fairer still, and
    // its packets take no extra hop.
    assert!(
        rfs.imbalance_median < rss.imbalance_median,
        "{} vs {}",
        rfs.imbalance_median,
        rss.imbalance_median
    );
    assert!(
        rsspp.imbalance_median < rfs.imbalance_median,
        "{} vs {}",
        rsspp.imbalance_median,
        rfs.imbalance_median
    );
    assert!(rsspp.latency_p95_us < rfs.latency_p95_us);
}
