//! `rsspp compare` on real binaries: its inputs (a pcap from `rsspp trace
//! gen`, presets, options), the policies' own counters, and its refusals.
//! Every run here passes `--no-report`: tests write nothing into the tree.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

/// `rsspp compare --no-report` with `args`.
fn compare(args: &[&str]) -> Command {
    let mut cmd = rsspp();
    cmd.arg("compare").args(args).arg("--no-report");
    cmd
}

fn json_of(cmd: &mut Command) -> Value {
    let out = cmd.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&out).unwrap()
}

/// Bad input: exit code 1, nothing on stdout, `message` on stderr, no panic.
fn refused(args: &[&str], message: &str) {
    compare(args)
        .assert()
        .failure()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(message).and(predicate::str::contains("panicked").not()));
}

#[test]
fn a_pcap_replays_through_every_named_policy() {
    let dir = tempdir();
    let pcap = dir.join("elephants.pcap");
    rsspp()
        .args(["trace", "gen", "--preset", "elephants", "--duration", "2"])
        .args(["-o", pcap.to_str().unwrap()])
        .assert()
        .success();
    let v = json_of(
        compare(&["--trace", pcap.to_str().unwrap()])
            .args(["--policies", "rss,rsspp", "--cores", "4", "--duration", "1"])
            .args(["--load", "0.7", "--json"]),
    );
    assert_eq!(v["cores"], 4);
    assert!(v["workload"].as_str().unwrap().ends_with("elephants.pcap"));
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rss", "rsspp"]);
    for p in policies {
        let s = &p["summary"];
        assert!(s["packets"].as_u64().unwrap() > 100_000);
        assert_eq!(
            s["processed"].as_u64().unwrap() + s["drops"].as_u64().unwrap(),
            s["packets"].as_u64().unwrap()
        );
        assert_eq!(s["reordered"], 0);
        let load = s["avg_load"].as_f64().unwrap();
        assert!((0.55..0.85).contains(&load), "load {load}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_table_names_every_policy() {
    compare(&["--policies", "rss,sprayer", "--duration", "0.5"])
        .args(["--preset", "campus", "--cores", "2"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("rss ")
                .and(predicate::str::contains("sprayer"))
                .and(predicate::str::contains("imbalance"))
                // Named and measured as rsspp top and /metrics say it.
                .and(predicate::str::contains(
                    "\nimbalance: (max - min) / min of the per-CPU packet rates, % (median of 1-s samples)\n",
                )),
        );
    rsspp()
        .args(["top", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "imbalance ((max - min) / min of the per-CPU packet rates, %)",
        ));
}

#[test]
fn bad_options_are_refused_with_a_clear_message() {
    refused(&["--policies", "rss,magic"], "unknown policy 'magic'");
    refused(&["--policies", ""], "at least one");
    refused(
        &["--policies", "rss,,rsspp"],
        "rsspp: error: --policies rss,,rsspp: an empty name (two commas in a row, or one at an end)\n",
    );
    refused(&["--policies", "rss,"], "--policies rss,: an empty name");
    refused(
        &["--policies", "rss,rsspp,rss"],
        "rsspp: error: --policies names rss twice: name each policy once\n",
    );
    refused(&["--cores", "0"], "--cores must be between 1 and 64");
    refused(
        &["--load", "0"],
        "rsspp: error: --load must be more than 0 and at most 1.5, got 0\n",
    );
    // A negative value is the option's value, not an unknown flag.
    refused(
        &["--load", "-1"],
        "rsspp: error: --load must be more than 0 and at most 1.5, got -1\n",
    );
    refused(
        &["--load", "nan"],
        "--load must be more than 0 and at most 1.5",
    );
    refused(&["--speed", "-2"], "replay speed must be a positive number");
    refused(
        &["--duration", "0"],
        "rsspp: error: --duration must be more than 0 and at most 86400 seconds, got 0\n",
    );
    refused(
        &["--duration", "-1"],
        "--duration must be more than 0 and at most 86400 seconds, got -1",
    );
    refused(&["--queue-size", "0"], "--queue-size must be at least 1");
    refused(
        &["--interval-ms", "0"],
        "--interval-ms must be between 1 ms and 10 s, got 0",
    );
    refused(
        &["--interval-ms", "20000"],
        "--interval-ms must be between 1 ms and 10 s, got 20000",
    );
    refused(
        &["--target-load", "1.5"],
        "--target-load must be in (0, 1], got 1.5",
    );
    refused(
        &["--table-update-us", "-1"],
        "--table-update-us must be between",
    );
    refused(
        &["--reta-size", "100"],
        "rsspp: error: --reta-size must be a power of two from 64 to 65536, got 100\n",
    );
    refused(
        &["--reta-size", "1"],
        "--reta-size must be a power of two from 64 to 65536, got 1",
    );
    refused(&["--clock-ghz", "0"], "clock must be in (0, 10]");
    refused(&["--work-skew", "9"], "work skew must be in [0, 4]");
    refused(
        &["--trace", "/nonexistent/x.pcap"],
        "cannot open /nonexistent/x.pcap",
    );
}

#[test]
fn a_file_that_is_not_a_capture_is_refused() {
    let dir = tempdir();
    let bogus = dir.join("notes.pcap");
    std::fs::write(&bogus, b"this is not a capture, just text\n").unwrap();
    refused(&["--trace", bogus.to_str().unwrap()], "notes.pcap");
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rsspp-compare-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn affinity_accept_runs_on_short_connections_and_reports_its_counters() {
    let v = json_of(&mut compare(&[
        "--preset",
        "short-connections",
        "--work-skew",
        "2",
        "--policies",
        "rss,affinity-accept",
        "--cores",
        "2",
        "--speed",
        "0.5",
        "--duration",
        "0.2",
        "--json",
    ]));
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

#[test]
fn reframer_runs_in_front_of_the_policy_and_reports_its_counters() {
    let v = json_of(&mut compare(&[
        "--policies",
        "rss",
        "--speed",
        "1",
        "--duration",
        "0.05",
        "--reframer",
        "64",
        "--cache-flows",
        "1",
        "--json",
    ]));
    let row = &v["policies"][0];
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
fn bad_reframer_and_cache_settings_are_refused() {
    let reframer = "--reframer must be between 1 and 10000 µs";
    let cache = "--cache-flows must be a power of two";
    refused(&["--reframer", "0"], reframer);
    refused(&["--reframer", "20000"], reframer);
    refused(&["--cache-flows", "3"], cache);
    refused(&["--cache-flows", "0"], cache);
}

/// A cost-model file with these functions' nanoseconds a packet.
fn cost_model(dir: &std::path::Path, name: &str, functions: &[(&str, f64)]) -> String {
    let functions: serde_json::Map<String, Value> = functions
        .iter()
        .map(|&(f, ns)| (f.to_string(), serde_json::json!({ "ns_per_packet": ns })))
        .collect();
    let text = serde_json::json!({
        "format": "rsspp-cost-model",
        "version": 1,
        "source": "test",
        "functions": functions,
    });
    let path = dir.join(name);
    std::fs::write(&path, text.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

fn cycles_per_packet(extra: &[&str]) -> f64 {
    let out = json_of(
        compare(&["--policies", "rss", "--duration", "0.5", "--cores", "2"])
            .args(["--preset", "campus", "--speed", "0.1", "--json"])
            .args(extra),
    );
    out["summary"]["rss"]["cycles_per_packet"].as_f64().unwrap()
}

#[test]
fn a_cost_model_file_sets_the_cost_per_packet() {
    let dir = tempdir();
    let cheap = cost_model(&dir, "cheap.json", &[("monitor", 100.0)]);
    let dear = cost_model(&dir, "dear.json", &[("monitor", 1000.0), ("dpi", 3000.0)]);
    let default = cycles_per_packet(&[]);
    let a = cycles_per_packet(&["--cost-model", &cheap]);
    let b = cycles_per_packet(&["--cost-model", &dear, "--cost-function", "monitor"]);
    let c = cycles_per_packet(&["--cost-model", &dear, "--cost-function", "dpi"]);
    // 100 ns at 2.3 GHz is 230 cycles, state accesses on top; W (600 × 8
    // cycles) is gone.
    assert!((230.0..1000.0).contains(&a), "{a}");
    assert!(b > 5.0 * a && c > 2.5 * b, "{a} {b} {c}");
    assert!(default > 4800.0 && default > b, "{default} {b}");
    // The text output says which function it took.
    compare(&["--policies", "rss", "--duration", "0.2", "--cores", "2"])
        .args(["--preset", "campus", "--cost-model", &cheap])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "cost model: monitor, 100.0 ns a packet measured → 210 cycles a packet at 2.3 GHz",
        ));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_cost_model_files_are_refused_with_a_clear_message() {
    let dir = tempdir();
    let two = cost_model(&dir, "two.json", &[("monitor", 100.0), ("dpi", 900.0)]);
    let zero = cost_model(&dir, "zero.json", &[("monitor", 0.0)]);
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "{\"format\": 1").unwrap();
    let garbage = garbage.to_str().unwrap();
    let missing = dir.join("missing.json");
    let missing = missing.to_str().unwrap();
    refused(
        &["--cost-model", &two],
        "several functions (dpi, monitor): choose one with --cost-function",
    );
    refused(
        &["--cost-model", &two, "--cost-function", "nat"],
        "no function \"nat\" in the cost model (it has: dpi, monitor)",
    );
    refused(
        &["--cost-model", &zero],
        "functions.monitor.ns_per_packet is 0",
    );
    refused(&["--cost-model", garbage], "not a cost model:");
    refused(&["--cost-model", missing], "missing.json");
    rsspp()
        .args([
            "compare",
            "--no-report",
            "--cost-model",
            &two,
            "--work",
            "5",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("cannot be used with"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A 1-second capture of 16 UDP flows at 10 kpps (10 000 packets).
fn short_capture(dir: &std::path::Path) -> std::path::PathBuf {
    let pcap = dir.join("short.pcap");
    rsspp()
        .args(["trace", "gen", "--preset", "udp-flows", "--flows", "16"])
        .args(["--pps", "10000", "--duration", "1", "-o"])
        .arg(&pcap)
        .assert()
        .success();
    pcap
}

/// The offsets of a classic pcap's records.
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= bytes.len() {
        out.push(at);
        at += 16 + u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    out
}

#[test]
fn a_short_capture_is_refused_at_a_load_it_cannot_give_and_looped_on_request() {
    let dir = tempdir();
    let pcap = short_capture(&dir);
    let trace = pcap.to_str().unwrap();
    // At load 0.8 on 2 cores the 1-second capture lasts a few ms.
    refused(
        &["--trace", trace, "--cores", "2", "--duration", "3"],
        "--loop replays the capture",
    );
    compare(&["--trace", trace, "--cores", "2", "--duration", "3"])
        .assert()
        .stderr(predicate::str::contains("load 0.8 needs replay speed"));
    // Looped: the whole duration at the load asked.
    let out = compare(&[
        "--trace",
        trace,
        "--loop",
        "--cores",
        "2",
        "--duration",
        "2",
    ])
    .args(["--policies", "rss", "--json"])
    .assert()
    .success()
    .stderr(predicate::str::contains("the trace was replayed"))
    .get_output()
    .clone();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let load = v["summary"]["rss"]["avg_load"].as_f64().unwrap();
    assert!((0.6..0.95).contains(&load), "load {load}");
    assert_eq!(v["caveats"][0]["kind"], "repeated");
    assert!(v["caveats"][0]["passes"].as_u64().unwrap() > 10);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_capture_that_runs_out_is_said_and_missing_statistics_are_not_zero() {
    let dir = tempdir();
    let pcap = short_capture(&dir);
    // At speed 2 the capture lasts 0.5 s: no full second for an imbalance
    // sample.
    compare(&["--trace", pcap.to_str().unwrap(), "--speed", "2"])
        .args(["--cores", "2", "--duration", "3", "--policies", "rss"])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "the trace ran out at 0.500 s of the 3 s asked",
        ))
        .stdout(
            predicate::str::contains("0.500 s (the trace ran out; 3.0 s asked)")
                .and(predicate::str::is_match(r"\nrss +n/a ").unwrap()),
        );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_wild_timestamp_is_found_before_anything_runs() {
    let dir = tempdir();
    let bytes = std::fs::read(short_capture(&dir)).unwrap();
    // The first 100 packets, the last of them an hour late.
    let offsets = record_offsets(&bytes);
    let mut wild = bytes[..offsets[100]].to_vec();
    let last = offsets[99];
    let seconds = u32::from_le_bytes(wild[last..last + 4].try_into().unwrap()) + 3600;
    wild[last..last + 4].copy_from_slice(&seconds.to_le_bytes());
    let path = dir.join("wild.pcap");
    std::fs::write(&path, wild).unwrap();
    refused(
        &[
            "--trace",
            path.to_str().unwrap(),
            "--cores",
            "2",
            "--duration",
            "1",
        ],
        "packets 99 and 100 (frame numbers) are 3600.000 s apart",
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_capture_is_refused_unless_kept_partial() {
    let dir = tempdir();
    let mut bytes = std::fs::read(short_capture(&dir)).unwrap();
    let at = record_offsets(&bytes)[5000];
    bytes[at + 8..at + 12].copy_from_slice(&0x4141_4141u32.to_le_bytes());
    let path = dir.join("corrupt.pcap");
    std::fs::write(&path, &bytes).unwrap();
    let trace = path.to_str().unwrap();
    refused(
        &[
            "--trace",
            trace,
            "--speed",
            "1",
            "--cores",
            "2",
            "--duration",
            "1",
        ],
        &format!("corrupt record at byte {at} (after packet 5000)"),
    );
    let out = compare(&["--trace", trace, "--keep-partial", "--speed", "1"])
        .args([
            "--cores",
            "2",
            "--duration",
            "1",
            "--policies",
            "rss",
            "--json",
        ])
        .assert()
        .success()
        .stderr(predicate::str::contains(format!(
            "only the 5000 packets before it were replayed ({} bytes skipped)",
            bytes.len() - at
        )))
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["summary"]["rss"]["packets"], 5000);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_capture_on_standard_input_replays_as_a_file_does() {
    let dir = tempdir();
    let bytes = std::fs::read(short_capture(&dir)).unwrap();
    let run = |input: Option<&[u8]>| {
        let mut cmd = compare(&["--speed", "1", "--cores", "2", "--duration", "1"]);
        cmd.args(["--policies", "rss", "--json", "--trace"]);
        match input {
            Some(bytes) => cmd.arg("-").write_stdin(bytes.to_vec()),
            None => cmd.arg(dir.join("short.pcap")),
        };
        let mut v = json_of(&mut cmd);
        v["workload"]
            .take()
            .as_str()
            .map(str::to_string)
            .zip(Some(v["summary"]["rss"].clone()))
            .unwrap()
    };
    let (name, piped) = run(Some(&bytes));
    assert_eq!(name, "standard input");
    let (_, from_file) = run(None);
    assert_eq!(piped, from_file);
    assert_eq!(piped["packets"], 10_000);
    std::fs::remove_dir_all(dir).unwrap();
}
