//! `rsspp trace gen` and `rsspp trace stats` through the real binary.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rsspp-cli-{}-{name}", std::process::id()))
}

#[test]
fn gen_then_stats_json_has_the_documented_fields() {
    let path = temp("udp.pcap");
    rsspp()
        .args([
            "trace",
            "gen",
            "--preset",
            "udp-flows",
            "--flows",
            "8",
            "--pps",
            "100000",
        ])
        .args(["--duration", "0.1", "-o"])
        .arg(&path)
        .assert()
        .success();
    let out = rsspp()
        .args(["trace", "stats", "--json"])
        .arg(&path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["packets"], 10_000);
    assert_eq!(v["flows"], 8);
    assert_eq!(v["bytes"], 640_000);
    // Every flow has 1250 packets: nothing at 1 packet, everything at 1250.
    let cdf = v["flow_size_cdf"].as_array().unwrap();
    assert_eq!(cdf[0], serde_json::json!([1, 0.0]));
    assert_eq!(cdf.last().unwrap(), &serde_json::json!([1250, 1.0]));
    assert_eq!(
        v["frame_size_cdf"].as_array().unwrap().last().unwrap()[0],
        64
    );
    assert!(v["active_flows_per_s"]["series"].is_array());
    // 8 flows round-robin: never two packets of a flow back to back.
    assert_eq!(v["spatial_locality_factor"], 1.0);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn same_seed_same_bytes_and_stdout_pipes_into_stdin() {
    let gen = |seed: &str| {
        rsspp()
            .args([
                "trace",
                "gen",
                "--preset",
                "campus",
                "--duration",
                "0.05",
                "--seed",
                seed,
                "-o",
                "-",
            ])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone()
    };
    let a = gen("5");
    assert_eq!(a, gen("5"));
    assert_ne!(a, gen("6"));
    rsspp()
        .args(["trace", "stats", "-"])
        .write_stdin(a)
        .assert()
        .success()
        .stdout(predicate::str::contains("spatial locality factor"))
        .stdout(predicate::str::contains("flow sizes (per 1-second window)"));
}

#[test]
fn bad_captures_and_options_fail_with_a_message() {
    let path = temp("garbage.pcap");
    std::fs::write(&path, b"this is not a capture at all, just text").unwrap();
    rsspp()
        .args(["trace", "stats"])
        .arg(&path)
        .assert()
        .failure()
        .stderr(predicate::str::contains("not a pcap or pcapng file"));
    let _ = std::fs::remove_file(&path);
    rsspp()
        .args(["trace", "stats", "/nonexistent/x.pcap"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("/nonexistent/x.pcap"));
    rsspp()
        .args([
            "trace", "gen", "--preset", "campus", "--speed", "2", "--pps", "5", "-o", "-",
        ])
        .assert()
        .failure();
    rsspp()
        .args([
            "trace",
            "gen",
            "--preset",
            "campus",
            "--snaplen",
            "0",
            "-o",
            "-",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("snaplen"));
}

#[test]
fn short_connections_take_a_connection_rate() {
    let out = rsspp()
        .args(["trace", "gen", "--preset", "short-connections"])
        .args(["--conn-rate", "20000", "--duration", "0.2", "-o", "-"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = rsspp()
        .args(["trace", "stats", "--json", "-"])
        .write_stdin(out)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    // 4000 connections expected (a Poisson count), 7 packets each.
    let flows = v["flows"].as_u64().unwrap();
    assert!((3_700..=4_300).contains(&flows), "{flows} connections");
    let per_flow = v["packets"].as_f64().unwrap() / flows as f64;
    assert!((6.5..=7.2).contains(&per_flow), "{per_flow} packets each");
    rsspp()
        .args(["trace", "gen", "--preset", "campus", "--conn-rate", "5"])
        .args(["--duration", "0.1", "-o", "-"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--conn-rate applies to"));
}
