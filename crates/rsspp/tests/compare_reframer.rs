//! `rsspp compare --reframer` and `--cache-flows`, through the real binary.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn compare(extra: &[&str]) -> Command {
    let mut cmd = Command::cargo_bin("rsspp").unwrap();
    cmd.args([
        "compare",
        "--policies",
        "rss",
        "--speed",
        "1",
        "--duration",
        "0.05",
    ])
    .args(extra);
    cmd
}

#[test]
fn reframer_runs_in_front_of_the_policy_and_reports_its_counters() {
    let out = compare(&["--reframer", "64", "--cache-flows", "1", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let json: Value = serde_json::from_slice(&out).unwrap();
    let row = &json["policies"][0];
    assert_eq!(row["name"], "rss+reframer");
    let m = &row["summary"]["mechanisms"];
    for key in [
        "reframer_buffered",
        "reframer_flush_timeout",
        "reframer_mean_batch_x1000",
        "slf_x1000",
    ] {
        assert!(m[key].as_u64().unwrap() > 0, "{key}: {}", m[key]);
    }
}

#[test]
fn bad_reframer_and_cache_settings_get_one_clear_line() {
    for (args, message) in [
        (
            &["--reframer", "0"][..],
            "--reframer must be between 1 and 10000 µs",
        ),
        (
            &["--reframer", "20000"][..],
            "--reframer must be between 1 and 10000 µs",
        ),
        (
            &["--cache-flows", "3"][..],
            "--cache-flows must be a power of two",
        ),
        (
            &["--cache-flows", "0"][..],
            "--cache-flows must be a power of two",
        ),
    ] {
        compare(args).assert().failure().code(1).stdout("").stderr(
            predicate::str::contains(message).and(predicate::str::contains("panicked").not()),
        );
    }
}
