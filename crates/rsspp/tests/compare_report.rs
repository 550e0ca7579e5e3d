//! `rsspp compare` end to end: the real binary, a short run of two
//! policies, the HTML report and the JSON.

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsspp-compare-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A short, cheap run: 2 cores, heavy packets (few of them), `duration`
/// simulated seconds.
fn short_run<'a>(cmd: &'a mut Command, duration: &str) -> &'a mut Command {
    cmd.args([
        "compare",
        "--policies",
        "rss,sprayer",
        "--cores",
        "2",
        "--work",
        "3000",
        "--duration",
        duration,
    ])
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn writes_the_report_and_json_with_the_issue_fields() {
    let dir = scratch("json");
    let out = dir.join("report.html");
    // 1.2 s: one 1-second imbalance sample.
    let assert = short_run(&mut rsspp(), "1.2")
        .arg("--json")
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let json: Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    let policies = json["policies"].as_array().unwrap();
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rss", "sprayer"]);
    for p in policies {
        let s = &p["summary"];
        for field in [
            "imbalance_median",
            "latency_p50_us",
            "latency_p95_us",
            "latency_p99_us",
            "avg_cores",
        ] {
            let v = s[field].as_f64().unwrap_or_else(|| panic!("{field}: {s}"));
            assert!(v.is_finite() && v >= 0.0, "{field} = {v}");
        }
        for field in ["drops", "reordered", "migrations", "packets"] {
            assert!(s[field].as_u64().is_some(), "{field}: {s}");
        }
        assert!(s["latency_p50_us"].as_f64() <= s["latency_p99_us"].as_f64());
        assert_eq!(s["avg_cores"].as_f64(), Some(2.0));
        assert!(s["packets"].as_u64().unwrap() > 1000);
    }
    // The same table keyed by policy name.
    for p in policies {
        assert_eq!(json["summary"][p["name"].as_str().unwrap()], p["summary"]);
    }
    // Sprayer spreads one flow's packets over both cores; RSS never does.
    assert_eq!(policies[0]["summary"]["reordered"].as_u64(), Some(0));
    assert!(json["sweep"].as_array().unwrap().is_empty());

    let html = fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    // The colour scale, a heatmap per policy, imbalance, CDF, tail, drops;
    // neither policy scales, so cores in use is a sentence, not a chart.
    assert_eq!(html.matches("<svg ").count(), 1 + 2 + 4);
    assert!(html.contains("No policy changed its number of cores"));
    for chart in [
        "per-core load over time, rss",
        "per-core load over time, sprayer",
        "imbalance per policy",
        "latency CDF per policy",
        "drops per policy",
    ] {
        assert!(html.contains(&format!("aria-label=\"{chart}\"")), "{chart}");
    }
    assert!(html.contains("</span>rss</td>"));
    assert!(html.contains("</span>sprayer</td>"));
    // Nothing but the report: the temporary file is gone.
    assert_eq!(files_in(&dir), ["report.html"]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_sweep_fills_load_curves() {
    let dir = scratch("sweep");
    let out = dir.join("sweep.html");
    let assert = short_run(&mut rsspp(), "0.3")
        .args(["--sweep", "--json", "--out"])
        .arg(&out)
        .assert()
        .success();
    let json: Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    let sweep = json["sweep"].as_array().unwrap();
    // Seven loads for each of the two policies.
    assert_eq!(sweep.len(), 14);
    for policy in ["rss", "sprayer"] {
        let mut loads: Vec<f64> = sweep
            .iter()
            .filter(|p| p["policy"] == policy)
            .map(|p| p["offered_load"].as_f64().unwrap())
            .collect();
        loads.dedup();
        assert_eq!(loads, [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0]);
    }
    // More load, more packets.
    let rss: Vec<u64> = sweep
        .iter()
        .filter(|p| p["policy"] == "rss")
        .map(|p| p["packets"].as_u64().unwrap())
        .collect();
    assert!(rss.windows(2).all(|w| w[0] < w[1]), "{rss:?}");
    let html = fs::read_to_string(&out).unwrap();
    assert!(html.contains("aria-label=\"drops against offered load\""));
    assert!(html.contains("aria-label=\"p95 latency against offered load\""));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_table_names_the_report_and_no_report_writes_none() {
    let dir = scratch("table");
    // The default file name, in the current directory.
    short_run(&mut rsspp(), "0.3")
        .current_dir(&dir)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("sprayer")
                .and(predicate::str::contains("report: rsspp-compare.html")),
        );
    assert_eq!(files_in(&dir), ["rsspp-compare.html"]);
    fs::remove_file(dir.join("rsspp-compare.html")).unwrap();
    short_run(&mut rsspp(), "0.3")
        .current_dir(&dir)
        .arg("--no-report")
        .assert()
        .success()
        .stdout(predicate::str::contains("report:").not());
    assert!(files_in(&dir).is_empty());
    // --json alone: the JSON on standard output, no report; --out asks
    // for one.
    let out = short_run(&mut rsspp(), "0.3")
        .current_dir(&dir)
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .clone();
    serde_json::from_slice::<Value>(&out.stdout).unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("report:"));
    assert!(files_in(&dir).is_empty());
    short_run(&mut rsspp(), "0.3")
        .current_dir(&dir)
        .args(["--json", "--out", "asked.html"])
        .assert()
        .success()
        .stderr(predicate::str::contains("report: asked.html"));
    assert_eq!(files_in(&dir), ["asked.html"]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_report_fails_before_simulating() {
    let dir = scratch("bad");
    for (out, message) in [
        (dir.join("missing/report.html"), "does not exist"),
        (dir.clone(), "is a directory"),
        // A directory that takes no file (sysfs refuses even root).
        (
            PathBuf::from("/sys/rsspp-report.html"),
            "/sys/rsspp-report.html: cannot create a file in /sys: ",
        ),
    ] {
        short_run(&mut rsspp(), "0.3")
            .arg("--out")
            .arg(&out)
            .assert()
            .failure()
            .code(1)
            .stdout("")
            .stderr(
                predicate::str::contains(message).and(predicate::str::contains("panicked").not()),
            );
    }
    short_run(&mut rsspp(), "0.3")
        .current_dir(&dir)
        .args(["--out", "-"])
        .assert()
        .failure()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains("--no-report"));
    assert!(files_in(&dir).is_empty());
    fs::remove_dir_all(&dir).unwrap();
}
