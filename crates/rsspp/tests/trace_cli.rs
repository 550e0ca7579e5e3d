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
    // The duration's range in the same words as `rsspp compare`'s, a
    // negative value included (not taken for an unknown flag).
    for (value, message) in [
        (
            "0",
            "rsspp: error: --duration must be more than 0 and at most 86400 seconds, got 0\n",
        ),
        (
            "-1",
            "rsspp: error: --duration must be more than 0 and at most 86400 seconds, got -1\n",
        ),
    ] {
        rsspp()
            .args(["trace", "gen", "--preset", "campus", "-o", "-"])
            .args(["--duration", value])
            .assert()
            .failure()
            .code(1)
            .stdout("")
            .stderr(predicate::str::diff(message));
    }
    rsspp()
        .args([
            "trace", "gen", "--preset", "campus", "-o", "-", "--pps", "-5",
        ])
        .assert()
        .failure()
        .code(1)
        .stderr(predicate::str::diff(
            "rsspp: error: --pps must be positive, got -5\n",
        ));
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

/// `rsspp trace gen` of a small valid trace into `path`.
fn gen_small(path: &std::path::Path) {
    rsspp()
        .args(["trace", "gen", "--preset", "udp-flows", "--flows", "16"])
        .args(["--pps", "10000", "--duration", "1", "-o"])
        .arg(path)
        .assert()
        .success();
}

#[test]
fn a_bad_option_leaves_an_existing_output_alone() {
    let dir = temp("keep");
    std::fs::create_dir_all(&dir).unwrap();
    let keep = dir.join("keep.pcap");
    gen_small(&keep);
    let before = std::fs::read(&keep).unwrap();
    for (bad, message) in [
        (
            &["--preset", "campus", "--flows", "5"][..],
            "--flows applies to",
        ),
        (
            &["--preset", "campus", "--duration", "0"],
            "duration must be",
        ),
        (
            &["--preset", "udp-flows", "--frame-size", "10"],
            "frame size must be",
        ),
        (&["--preset", "campus", "--snaplen", "0"], "snaplen"),
        (&["--preset", "udp-flows", "--pps", "1e12"], "150000000 pps"),
    ] {
        rsspp()
            .args(["trace", "gen"])
            .args(bad)
            .arg("-o")
            .arg(&keep)
            .assert()
            .failure()
            .stderr(predicate::str::contains(message));
        assert_eq!(std::fs::read(&keep).unwrap(), before, "{bad:?}");
    }
    // A good run replaces it, and leaves no temporary file behind.
    rsspp()
        .args(["trace", "gen", "--preset", "udp-flows", "--flows", "4"])
        .args(["--duration", "0.01", "-o"])
        .arg(&keep)
        .assert()
        .success();
    assert_ne!(std::fs::read(&keep).unwrap(), before);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["keep.pcap"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn absurd_flow_counts_and_rates_are_refused_at_once() {
    let started = std::time::Instant::now();
    rsspp()
        .args([
            "trace",
            "gen",
            "--preset",
            "udp-flows",
            "--flows",
            "100000000",
        ])
        .args(["--duration", "0.01", "-o", "-"])
        .assert()
        .failure()
        .stdout("")
        .stderr(predicate::str::contains("--flows must be at most 10000000"));
    rsspp()
        .args([
            "trace",
            "gen",
            "--preset",
            "udp-flows",
            "--flows",
            "1000000",
        ])
        .args(["--duration", "0.01", "-o", "-"])
        .assert()
        .failure()
        .stdout("")
        .stderr(predicate::str::contains(
            "--flows 1000000 is more than the 10000 packets the trace holds",
        ));
    rsspp()
        .args([
            "trace",
            "gen",
            "--preset",
            "elephants",
            "--speed",
            "1e6",
            "-o",
            "-",
        ])
        .assert()
        .failure()
        .stdout("")
        .stderr(predicate::str::contains("beyond the 150000000 pps"));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn a_corrupt_record_is_an_error_unless_kept_partial() {
    let path = temp("corrupt.pcap");
    gen_small(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    // Record 14's captured length.
    let mut at = 24;
    for _ in 0..13 {
        at += 16 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    bytes[at + 8..at + 12].copy_from_slice(&0x4141_4141u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    rsspp()
        .args(["trace", "stats"])
        .arg(&path)
        .assert()
        .failure()
        .stdout("")
        .stderr(predicate::str::contains(format!(
            "corrupt record at byte {at} (after packet 13): its length field claims 1094795585 bytes"
        )))
        .stderr(predicate::str::contains("--keep-partial"));
    let out = rsspp()
        .args(["trace", "stats", "--keep-partial", "--json", "-"])
        .write_stdin(bytes.clone())
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "kept the 13 packets before it, skipped the remaining {} bytes",
            bytes.len() - at
        )))
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["packets"], 13);
    assert_eq!(v["skipped_bytes"], (bytes.len() - at) as u64);
    assert_eq!(v["corrupt_record"]["offset"], at as u64);
    // A last record cut short stays a warning.
    gen_small(&path);
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() - 10]).unwrap();
    rsspp()
        .args(["trace", "stats"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("packets          9999"))
        .stderr(predicate::str::contains(
            "the last record is cut short (70 bytes left out)",
        ));
    let _ = std::fs::remove_file(&path);
}

/// The short flags of tcpdump and xdp-tools: `-r FILE` for a capture, as
/// the long forms and the positional file still are.
#[test]
fn short_flags_read_the_capture_as_the_long_ones() {
    let path = temp("short-flags.pcap");
    rsspp()
        .args(["trace", "gen", "--preset", "campus", "--duration", "0.05"])
        .arg("-o")
        .arg(&path)
        .assert()
        .success();
    let stats = |args: &[&str]| {
        rsspp()
            .args(["trace", "stats", "--json"])
            .args(args)
            .arg(&path)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone()
    };
    assert_eq!(stats(&["-r"]), stats(&[]));
    // One capture: FILE or -r FILE, not both, not neither.
    rsspp()
        .args(["trace", "stats", "a.pcap", "-r", "b.pcap"])
        .assert()
        .failure()
        .code(2);
    rsspp().args(["trace", "stats"]).assert().failure().code(2);
    // compare -r FILE is compare --trace FILE.
    let compare = |flag: &str| {
        let out = rsspp()
            .args(["compare", "--no-report", "--json", "--policies", "rss"])
            .args(["--cores", "2", "--duration", "0.05", "--speed", "1"])
            .arg(flag)
            .arg(&path)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        v["policies"][0]["summary"]["packets"].clone()
    };
    assert_eq!(compare("-r"), compare("--trace"));
    let _ = std::fs::remove_file(&path);
}
