//! What every policy must keep, whatever it does: every packet offered is
//! either processed or dropped, and the flow-aware policies never reorder a
//! flow, even while they move flows, buckets or cores around.

mod common;

use common::*;
use rsspp_sim::policy::{build, AUTOSCALING_NAMES, POLICY_NAMES, PRODUCTION_NAMES};
use rsspp_sim::system::PolicyConfig;

#[test]
fn packets_are_conserved_and_flow_aware_policies_keep_order() {
    let names: Vec<&str> = POLICY_NAMES
        .iter()
        .chain(AUTOSCALING_NAMES)
        .copied()
        .collect();
    // An eighth of campus4's rate on cores slowed to 0.3 GHz at a high
    // load: queues build up, and the dynamic policies move things around.
    let mut config = at_speed(campus4(8, 1.5, &names), 0.2);
    config.engine.cost.clock_ghz = 0.3;
    let r = results(&config);
    assert_eq!(r.len(), names.len());
    for p in &r {
        let s = &p.summary;
        assert_eq!(s.processed + s.drops, s.packets, "{}", p.name);
        assert!(s.avg_load > 0.5, "{}: load {}", p.name, s.avg_load);
    }
    // Flow-aware methods: flow affinity and, when they move state, an
    // order-preserving handoff. (Sprayer and the flow-unaware software
    // queues reorder by design; Metron moves classes without draining.)
    for name in [
        "rss",
        "rsspp",
        "rsspp-autoscale",
        "sw-stateful-rr",
        "sw-stateful-load",
        "orss",
        "affinity-accept",
    ] {
        let s = summary(&r, name);
        assert_eq!(s.reordered, 0, "{name} reordered");
    }
    for moving in ["rsspp", "rsspp-autoscale", "orss", "affinity-accept"] {
        assert!(summary(&r, moving).migrations > 0, "{moving} moved nothing");
    }
}

/// Holding a core's idle polls (the poll after a batch that left its queues
/// empty) until a packet is queued for it changes nothing: every policy
/// that allows it gives the same results, counters and timelines as with
/// every poll run. Saturated (queues fill, drops) and light (cores sleep
/// between packets), with the dispatching policies' software rings.
#[test]
fn held_idle_polls_change_no_result() {
    let names: Vec<&str> = POLICY_NAMES
        .iter()
        .chain(AUTOSCALING_NAMES)
        .chain(PRODUCTION_NAMES)
        .copied()
        .filter(|name| {
            build(name, &PolicyConfig::default())
                .unwrap()
                .polls_own_queues_only()
        })
        .collect();
    assert!(names.len() >= 8, "{names:?}");
    for (speed, clock_ghz) in [(0.2, 0.3), (0.05, 2.3)] {
        let mut held = at_speed(campus4(4, 1.0, &names), speed);
        held.engine.cost.clock_ghz = clock_ghz;
        let mut every = held.clone();
        every.engine.hold_idle_polls = false;
        let (a, b) = (results(&held), results(&every));
        for (a, b) in a.iter().zip(&b) {
            assert_eq!(
                serde_json::to_string(a).unwrap(),
                serde_json::to_string(b).unwrap(),
                "{} at speed {speed}, {clock_ghz} GHz",
                a.name
            );
        }
    }
}
