//! `rsspp bench xdp` through the real binary: four cases with the right
//! verdicts, clear errors for bad arguments and without root.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn bench_xdp_measures_every_program_on_both_frames() {
    if !is_root() {
        eprintln!("skipping bench xdp test: it needs root (CI runs as root)");
        return;
    }
    let out = rsspp()
        .args([
            "bench", "xdp", "--repeat", "1000", "--rounds", "2", "--json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let cases: Vec<Value> = serde_json::from_slice(&out).unwrap();
    let got: Vec<(&str, &str, &str)> = cases
        .iter()
        .map(|c| {
            (
                c["program"].as_str().unwrap(),
                c["frame"].as_str().unwrap(),
                c["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    let mut expected = vec![
        ("count", "IPv4 TCP", "Pass"),
        ("count", "IPv6 UDP", "Pass"),
        ("steer", "IPv4 TCP", "Redirect"),
        ("steer", "IPv6 UDP", "Redirect"),
    ];
    // A handoff moves a bucket between two CPUs, an override steers a flow
    // to the other one.
    if rsspp_linux::cpu::CpuList::online().unwrap().len() > 1 {
        for program in ["handoff", "override"] {
            expected.push((program, "IPv4 TCP", "Redirect"));
            expected.push((program, "IPv6 UDP", "Redirect"));
        }
    }
    expected.push(("hot", "IPv4 TCP", "Redirect"));
    expected.push(("hot", "IPv6 UDP", "Redirect"));
    assert_eq!(got, expected);
    for c in &cases {
        assert!(
            c["best_ns"].as_u64().unwrap() <= c["median_ns"].as_u64().unwrap(),
            "{c}"
        );
    }
    // The table form.
    rsspp()
        .args(["bench", "xdp", "--repeat", "100", "--rounds", "1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("steer    IPv6 UDP"));
}

#[test]
fn bench_xdp_refuses_bad_arguments() {
    rsspp()
        .args(["bench", "xdp", "--rounds", "0"])
        .assert()
        .failure()
        .code(1)
        .stderr(predicate::str::contains("at least 1"));
    // The table-size rule, in the words of every other command, root or
    // not: 1 is a power of two, but no table of rsspp's.
    for size in ["1", "100", "131072"] {
        rsspp()
            .args(["bench", "xdp", "--reta-size", size, "--repeat", "10"])
            .assert()
            .failure()
            .code(1)
            .stderr(predicate::str::diff(format!(
                "rsspp: error: --reta-size must be a power of two from 64 to 65536, got {size}\n"
            )));
    }
}

#[test]
fn bench_daemon_times_rounds_by_table_size() {
    if !is_root() {
        eprintln!("skipping bench daemon test: it needs root (CI runs as root)");
        return;
    }
    let out = rsspp()
        .args([
            "bench",
            "daemon",
            "--rounds",
            "3",
            "--reta-sizes",
            "128,8192",
            "--json",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let rows: Vec<Value> = serde_json::from_slice(&out).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["reta_size"], 128);
    assert!(rows[0]["round_us"].as_f64().unwrap() > 0.0, "{}", rows[0]);
    // Per-bucket series: on at 128 buckets, off by default above 4096.
    assert!(rows[0]["scrape_bytes"].as_u64().unwrap() > 128 * 60);
    assert!(
        rows[1]["scrape_bytes"].as_u64().unwrap() < 8192,
        "{}",
        rows[1]
    );
}

#[test]
fn bench_daemon_refuses_bad_arguments() {
    for (args, says) in [
        (&["--reta-sizes", "100"][..], "power of two"),
        (&["--rounds", "0"][..], "at least 1"),
        (&["--bucket-metrics", "maybe"][..], "on or off"),
    ] {
        let assert = rsspp().args(["bench", "daemon"]).args(args).assert();
        if !is_root() {
            assert.failure();
            continue;
        }
        assert
            .failure()
            .code(1)
            .stderr(predicate::str::contains(says));
    }
}
