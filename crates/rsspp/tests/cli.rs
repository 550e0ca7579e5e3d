//! Runs the real `rsspp` binary.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{json, Value};

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

/// Bad input: exit code 1, nothing on stdout, `message` on stderr, no panic.
fn fails_with_one_clear_line(cmd: &mut Command, message: &str) {
    cmd.assert()
        .failure()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(message).and(predicate::str::contains("panicked").not()));
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.assert().success().get_output().stdout.clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn hash_matches_the_microsoft_vectors() {
    let cases = [
        (
            &["66.9.149.187", "161.142.100.80", "2794", "1766"][..],
            "0x51ccc178",
        ),
        (&["66.9.149.187", "161.142.100.80"][..], "0x323e8fc2"),
        (
            &["153.39.163.191", "202.188.127.2", "44251", "1303"][..],
            "0x10e828a2",
        ),
        (
            &[
                "3ffe:2501:200:1fff::7",
                "3ffe:2501:200:3::1",
                "2794",
                "1766",
            ][..],
            "0x40207d3d",
        ),
        (
            &["3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1"][..],
            "0x2cc18cd5",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(
            stdout_of(rsspp().arg("hash").args(args)),
            format!("{expected}\n"),
            "{args:?}"
        );
    }
}

#[test]
fn hash_prints_the_bucket_with_reta_size() {
    let out = stdout_of(rsspp().args([
        "hash",
        "--reta-size",
        "128",
        "66.9.149.187",
        "161.142.100.80",
        "2794",
        "1766",
    ]));
    assert_eq!(out, "0x51ccc178 120\n");
    let out = stdout_of(rsspp().args([
        "hash",
        "--reta-size",
        "512",
        "66.9.149.187",
        "161.142.100.80",
        "2794",
        "1766",
    ]));
    assert_eq!(out, "0x51ccc178 376\n");
}

#[test]
fn symmetric_key_hashes_both_directions_alike() {
    let fwd = stdout_of(rsspp().args([
        "hash",
        "--key",
        "symmetric",
        "10.1.2.3",
        "192.168.7.9",
        "40000",
        "443",
    ]));
    let rev = stdout_of(rsspp().args([
        "hash",
        "--key",
        "symmetric",
        "192.168.7.9",
        "10.1.2.3",
        "443",
        "40000",
    ]));
    assert_eq!(fwd, rev);
    let fwd = stdout_of(rsspp().args(["hash", "10.1.2.3", "192.168.7.9", "40000", "443"]));
    assert_ne!(fwd, rev, "the Microsoft key is not symmetric");
    // The same key given as hex bytes.
    let hex = "6d5a".repeat(20);
    let same = stdout_of(rsspp().args([
        "hash",
        "--key",
        &hex,
        "192.168.7.9",
        "10.1.2.3",
        "443",
        "40000",
    ]));
    assert_eq!(same, rev);
}

#[test]
fn hash_batch_keeps_order_and_mixes_families() {
    let input = "66.9.149.187 161.142.100.80 2794 1766\n\
                 # a comment\n\
                 \n\
                 3ffe:2501:200:1fff::7 3ffe:2501:200:3::1 - -\n\
                 199.92.111.2 65.69.140.83 14230 4739\n";
    let out = stdout_of(rsspp().args(["hash", "--batch"]).write_stdin(input));
    assert_eq!(out, "0x51ccc178\n0x2cc18cd5\n0xc626b0ea\n");
    let out = stdout_of(
        rsspp()
            .args(["hash", "--batch", "--reta-size", "128"])
            .write_stdin(input),
    );
    assert_eq!(out, "0x51ccc178 120\n0x2cc18cd5 85\n0xc626b0ea 106\n");
}

#[test]
fn hash_rejects_bad_input_with_one_clear_line() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["hash", "300.1.1.1", "1.1.1.1"],
            "source \"300.1.1.1\" is not an IPv4 or IPv6 address",
        ),
        (&["hash", "1.1.1.1", "::1"], "not of the same IP family"),
        (
            &["hash", "1.1.1.1", "2.2.2.2", "70000", "1"],
            "source port \"70000\" is not a port number",
        ),
        (
            &["hash", "--key", "6d5a", "1.1.1.1", "2.2.2.2"],
            "RSS key is 2 bytes long; it must be at least 40 bytes",
        ),
        (
            &["hash", "--key", "nonsense", "1.1.1.1", "2.2.2.2"],
            "is not 'microsoft', 'symmetric' or hexadecimal",
        ),
        (
            &["hash", "--reta-size", "100", "1.1.1.1", "2.2.2.2"],
            "--reta-size must be a power of two from 64 to 65536, got 100",
        ),
    ];
    for (args, message) in cases {
        fails_with_one_clear_line(rsspp().args(args), message);
    }
    // The lines before the bad one are answered, then the error names the line.
    let first = stdout_of(rsspp().args(["hash", "1.1.1.1", "2.2.2.2", "1", "2"]));
    rsspp()
        .args(["hash", "--batch"])
        .write_stdin("1.1.1.1 2.2.2.2 1 2\n1.1.1.1 2.2.2.2 1\n")
        .assert()
        .failure()
        .stdout(first)
        .stderr(predicate::str::contains(
            "line 2: expected 'SRC DST SPORT DPORT'",
        ));
    rsspp()
        .args(["hash", "--batch"])
        .write_stdin("1.1.1.1 fe80::1 1 2\n")
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "line 1: source 1.1.1.1 and destination fe80::1 are not of the same IP family",
        ));
    // A port without the other one is a usage error.
    rsspp()
        .args(["hash", "1.1.1.1", "2.2.2.2", "80"])
        .assert()
        .failure()
        .code(2);
}

fn balance(input: &Value, extra: &[&str]) -> Value {
    let out = stdout_of(
        rsspp()
            .args(["balance", "--input", "-"])
            .args(extra)
            .write_stdin(input.to_string()),
    );
    serde_json::from_str(&out).unwrap()
}

/// 128 buckets on 4 cores where core 0 got twice its share of buckets.
fn skewed() -> Value {
    let reta: Vec<usize> = (0..128)
        .map(|b| if b < 51 { 0 } else { 1 + (b - 51) % 3 })
        .collect();
    let packets = vec![1000u64; 128];
    let mut load = [0.0f64; 4];
    for &c in &reta {
        load[c] += 0.015;
    }
    json!({"reta": reta, "bucket_packets": packets, "core_load": load})
}

#[test]
fn balance_moves_buckets_off_the_loaded_core() {
    let input = skewed();
    let out = balance(&input, &[]);
    let reta: Vec<usize> = serde_json::from_value(out["reta"].clone()).unwrap();
    assert_eq!(reta.len(), 128);
    let moves = out["moves"].as_array().unwrap();
    assert!(!moves.is_empty());
    let old: Vec<usize> = serde_json::from_value(input["reta"].clone()).unwrap();
    for m in moves {
        let (b, from, to) = (
            m["bucket"].as_u64().unwrap() as usize,
            m["from"].as_u64().unwrap() as usize,
            m["to"].as_u64().unwrap() as usize,
        );
        assert_eq!(old[b], from);
        assert_eq!(reta[b], to);
        assert_eq!(from, 0);
    }
    let mut counts = [0; 4];
    for &c in &reta {
        counts[c] += 1;
    }
    assert_eq!(counts, [32, 32, 32, 32]);
    assert!(out["solve_us"].as_f64().unwrap() >= 0.0);
    assert_eq!(out["scaling"], json!({"action": "none"}));
}

#[test]
fn balance_is_a_pure_function_and_stable_on_its_output() {
    let input = skewed();
    let a = balance(&input, &[]);
    let b = balance(&input, &[]);
    assert_eq!(a["reta"], b["reta"]);
    assert_eq!(a["moves"], b["moves"]);
    // Feed the new table back with the loads it produces: nothing moves.
    let reta: Vec<usize> = serde_json::from_value(a["reta"].clone()).unwrap();
    let mut load = [0.0f64; 4];
    for &c in &reta {
        load[c] += 0.015;
    }
    let again = balance(
        &json!({"reta": reta, "bucket_packets": vec![1000; 128], "core_load": load}),
        &[],
    );
    assert_eq!(again["moves"], json!([]));
}

#[test]
fn balance_autoscale_adds_an_idle_core() {
    let reta: Vec<usize> = (0..128).map(|b| b % 2).collect();
    let input = json!({"reta": reta, "bucket_packets": vec![500; 128], "core_load": [0.95, 0.95, 0.0, 0.0]});
    let out = balance(&input, &["--autoscale"]);
    assert_eq!(out["scaling"], json!({"action": "add", "core": 2}));
    assert_eq!(out["active_cores"], json!([0, 1, 2]));
    let out = balance(&input, &[]);
    assert_eq!(out["scaling"], json!({"action": "none"}));
}

#[test]
fn balance_reads_a_file() {
    let dir = std::env::temp_dir().join(format!("rsspp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("in.json");
    std::fs::write(&path, skewed().to_string()).unwrap();
    let out = stdout_of(rsspp().args(["balance", "--input"]).arg(&path));
    assert!(out.contains("\"moves\""));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn balance_rejects_bad_input_with_one_clear_line() {
    let reta64: Vec<usize> = (0..64).map(|b| b % 2).collect();
    let cases = [
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 10], "core_load": [0.1, 0.2]})
                .to_string(),
            "bucket_packets has 10 entries but the table has 64 buckets",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 64], "core_load": [0.1]}).to_string(),
            "core 1 does not exist (there are 1 cores)",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 64], "core_load": [0.1, -0.5]})
                .to_string(),
            "core 1 has load -0.5; loads must be numbers between 0 and 1",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 64], "core_load": [1.5, 0.5]})
                .to_string(),
            "core 0 has load 1.5",
        ),
        (
            json!({"reta": [], "bucket_packets": [], "core_load": [0.5]}).to_string(),
            "indirection table size 0 is not a power of two",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 64], "core_load": []}).to_string(),
            "no cores",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![-1; 64], "core_load": [0.1, 0.2]})
                .to_string(),
            "invalid JSON input",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 64], "core_load": [0.1, "NaN"]})
                .to_string(),
            "invalid JSON input",
        ),
        (
            json!({"reta": reta64, "bucket_packets": vec![1; 64], "core_loads": [0.1, 0.2]})
                .to_string(),
            "unknown field `core_loads`",
        ),
        ("{\"reta\": [0, 1,".to_string(), "stdin: invalid JSON input"),
    ];
    for (input, message) in cases {
        fails_with_one_clear_line(
            rsspp().args(["balance", "--input", "-"]).write_stdin(input),
            message,
        );
    }
    rsspp()
        .args(["balance", "--input", "/nonexistent/rsspp.json"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "/nonexistent/rsspp.json: No such file or directory",
        ));
}

#[test]
fn demo_shows_the_skewed_state_and_its_repair() {
    let out = stdout_of(rsspp().arg("demo"));
    assert!(out.contains("static table"));
    assert!(out.contains("saturated"));
    assert!(out.contains("round 1:") && out.contains("buckets moved"));
    assert!(
        out.contains("nothing moves"),
        "a converged loop stops moving:\n{out}"
    );
    let out = stdout_of(rsspp().args(["demo", "--autoscale", "--load", "0.5"]));
    assert!(out.contains("core 4 added"), "{out}");
    rsspp()
        .args(["demo", "--buckets", "100"])
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "--buckets must be a power of two from 64 to 65536, got 100",
        ));
}

#[test]
fn demo_prints_each_round_as_it_ends() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    // Four rounds a second apart: the static table and the first round are
    // on the pipe long before the last round.
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rsspp"))
        .args(["demo", "--rounds", "4", "--pace-ms", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first_round = lines
        .by_ref()
        .map(Result::unwrap)
        .find(|l| l.starts_with("round 1:"))
        .expect("round 1 printed");
    let at = started.elapsed();
    assert!(
        at < Duration::from_millis(2500),
        "round 1 after {at:?}: {first_round}"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the demo was already done"
    );
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(rest.iter().any(|l| l.starts_with("round 4:")), "{rest:?}");
    assert!(child.wait().unwrap().success());
    assert!(started.elapsed() >= Duration::from_secs(4));
}

/// `-i IFACE` as xdp-tools and tcpdump spell it, beside the long flags.
#[test]
fn interfaces_take_the_short_flag_i() {
    for (args, says) in [
        (&["run", "--help"][..], "-i, --iface <IF>"),
        (&["nf", "--help"], "-i, --in <IFACE>"),
        (&["serve", "--help"], "-i, --iface <IF>"),
        (&["status", "--help"], "-i, --iface <IF>"),
        (&["detach", "--help"], "-i, --iface <IF>"),
        (&["compare", "--help"], "-r, --trace <FILE>"),
        (&["trace", "stats", "--help"], "-r <FILE>"),
    ] {
        rsspp()
            .args(args)
            .assert()
            .success()
            .stdout(predicate::str::contains(says));
    }
    // Parsed as the long form: checked, and refused, alike.
    for flag in ["-i", "--iface"] {
        fails_with_one_clear_line(
            rsspp().args(["run", flag, "lo", "--reta-size", "1", "--no-metrics"]),
            "--reta-size must be a power of two from 64 to 65536, got 1",
        );
    }
    for flag in ["-i", "--in"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rsspp"))
            .args(["nf", flag, "rsspp-none0", "--cpus", "0", "--duration", "1"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "rsspp: error: rsspp-none0: no such interface in this network namespace\n"
        );
    }
}

#[test]
fn every_command_has_help() {
    for args in [
        &["--help"][..],
        &["hash", "--help"],
        &["balance", "--help"],
        &["demo", "--help"],
    ] {
        rsspp()
            .args(args)
            .assert()
            .success()
            .stdout(predicate::str::contains("Usage: rsspp"));
    }
}

#[test]
fn bench_balance_reports_every_shape_within_the_quality_bar() {
    let out = stdout_of(rsspp().args(["bench", "balance", "--seeds", "1", "--json"]));
    let shapes: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(shapes.len(), 8);
    for s in &shapes {
        assert_eq!(s["cases"], 9);
        assert!(
            s["static_makespan_ratio"].as_f64().unwrap() > 1.2,
            "the workloads are skewed: {s}"
        );
        assert!(s["makespan_ratio"].as_f64().unwrap() <= 1.01, "{s}");
        assert!(s["imbalance"].as_f64().unwrap() <= 0.03, "{s}");
        assert!(s["max_rounds"].as_u64().unwrap() <= 3, "{s}");
    }
    // One round: no round on a converged state to time, said as n/a.
    let text = stdout_of(rsspp().args(["bench", "balance", "--seeds", "1", "--rounds", "1"]));
    assert!(!text.contains("NaN"), "{text}");
    assert!(text.contains("n/a"), "{text}");
    let out = stdout_of(rsspp().args([
        "bench", "balance", "--seeds", "1", "--rounds", "1", "--json",
    ]));
    let shapes: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert!(shapes
        .iter()
        .all(|s| s["converged_round_us_median"].is_null()));
    rsspp()
        .args(["bench", "balance", "--seeds", "0"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("at least 1"));
}

#[test]
fn bench_state_reports_both_variants_and_refuses_bad_options() {
    let out = stdout_of(rsspp().args([
        "bench",
        "state",
        "--seconds",
        "0.2",
        "--rounds",
        "1",
        "--change-interval-ms",
        "20",
        "--json",
    ]));
    let r: Value = serde_json::from_str(&out).unwrap();
    for field in [
        "per_bucket_pps",
        "shared_pps",
        "ratio",
        "round_ratios",
        "per_bucket_pps_per_core",
        "shared_pps_per_core",
        "ratio_per_core",
        "per_bucket_reordered",
        "shared_reordered",
        "lost_states",
        "migrations",
        "per_bucket",
        "shared",
    ] {
        assert!(r.get(field).is_some(), "{field}: {r}");
    }
    assert_eq!(r["per_bucket_reordered"], 0, "{r}");
    assert_eq!(r["lost_states"], 0, "{r}");
    assert!(r["migrations"].as_u64().unwrap() > 0, "{r}");
    assert!(r["per_bucket"]["packets"].as_u64().unwrap() > 0, "{r}");
    let text = stdout_of(rsspp().args(["bench", "state", "--seconds", "0.2", "--rounds", "1"]));
    assert!(text.contains("per-bucket / shared:"), "{text}");
    fails_with_one_clear_line(
        rsspp().args(["bench", "state", "--workers", "0"]),
        "--workers must be positive, got 0",
    );
    for flag in ["--batch", "--ring", "--stripes", "--rounds"] {
        fails_with_one_clear_line(
            rsspp().args(["bench", "state", flag, "0"]),
            &format!("rsspp: error: {flag} must be positive, got 0\n"),
        );
    }
    fails_with_one_clear_line(
        rsspp().args(["bench", "state", "--buckets", "100"]),
        "--buckets must be a power of two from 64 to 65536, got 100",
    );
}

#[test]
fn nf_refuses_an_unknown_function_in_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rsspp"))
        .args(["nf", "--in", "lo", "--cpus", "0", "--chain", "firewall,nta"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rsspp: error: unknown network function \"nta\" (known: firewall, nat, monitor, dpi)\n"
    );
}

#[test]
fn nf_refuses_a_malformed_rules_file_naming_its_line() {
    let dir = std::env::temp_dir().join(format!("rsspp-cli-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("fw.rules");
    std::fs::write(&rules, "# web\nallow tcp dport 80\nallow udp dprt 53\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rsspp"))
        .args(["nf", "--in", "lo", "--cpus", "0", "--chain", "firewall"])
        .arg("--rules")
        .arg(&rules)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "rsspp: error: {}:3: unknown field \"dprt\" (known: src, dst, sport, dport)\n",
            rules.display()
        )
    );
    for (args, message) in [
        (
            &["--chain", "firewall,nat"][..],
            "rsspp: error: firewall needs --rules FILE\n",
        ),
        (
            &["--chain", "monitor", "--nat-pool", "192.0.2.0/30"][..],
            "rsspp: error: --nat-pool is for nat, which --chain does not name\n",
        ),
        (
            &["--chain", "nat", "--nat-pool", "10.0.0.0/8"][..],
            "rsspp: error: --nat-pool 10.0.0.0/8: \"8\" is not a prefix length from 16 to 32\n",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rsspp"))
            .args(["nf", "--in", "lo", "--cpus", "0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&out.stderr), message);
    }
}

#[test]
fn nf_refuses_a_missing_interface_in_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rsspp"))
        .args([
            "nf",
            "--in",
            "rsspp-none0",
            "--cpus",
            "0",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Checked before anything is created, with or without root.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rsspp: error: rsspp-none0: no such interface in this network namespace\n"
    );
}

#[test]
fn nf_refuses_bad_metrics_scaling_and_mode_options_in_one_line() {
    for (args, said) in [
        (
            &["--autoscale", "--target-load", "2"][..],
            "rsspp: error: --target-load must be in (0, 1], got 2\n",
        ),
        (
            &["--metrics-addr", "nope"][..],
            "rsspp: error: --metrics-addr \"nope\" is not an address:port (e.g. 127.0.0.1:9464)\n",
        ),
        (
            &["--mode", "hardware"][..],
            "rsspp: error: --mode hardware needs --backend afxdp (AF_XDP sockets on the NIC's queues)\n",
        ),
        (
            &["--mode", "hardware", "--backend", "afxdp", "--elephants", "on"][..],
            "rsspp: error: --elephants on: `rsspp nf --mode hardware` moves buckets only (a move keeps order by fencing the NIC's queues, which an ntuple rule does not); `rsspp run --mode hardware` gives elephants ntuple rules\n",
        ),
        (
            &["--mode", "hardware", "--backend", "afxdp", "--rss-key", "symmetric"][..],
            "rsspp: error: --rss-key: hardware mode hashes with the NIC's key (set it with ethtool -X IFACE hkey)\n",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rsspp"))
            .args(["nf", "--in", "lo", "--cpus", "0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), said);
    }
}
