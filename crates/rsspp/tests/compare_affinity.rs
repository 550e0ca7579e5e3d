//! `rsspp compare` on the Affinity-Accept workload through the real binary.

use assert_cmd::Command;
use serde_json::Value;

#[test]
fn compare_runs_affinity_accept_on_short_connections() {
    let out = Command::cargo_bin("rsspp")
        .unwrap()
        .args([
            "compare",
            "--preset",
            "short-connections",
            "--work-skew",
            "2",
        ])
        .args(["--policies", "rss,affinity-accept", "--cores", "2"])
        .args(["--speed", "0.5", "--duration", "0.2", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["workload"], "preset short-connections");
    let aa = &v["policies"][1];
    assert_eq!(aa["name"], "affinity-accept");
    let m = &aa["summary"]["mechanisms"];
    for key in [
        "steals",
        "flow_group_migrations",
        "busy_transitions",
        "forwarded_packets",
        "accept_queue_drops",
    ] {
        assert!(m[key].is_u64(), "{key} missing from {m}");
    }
    assert!(m["connections_accepted"].as_u64().unwrap() > 5_000, "{m}");
    assert_eq!(aa["summary"]["reordered"], 0);
}
