//! `rsspp compare --figures DIR` and the production baselines' flags, end
//! to end with the real binary on short runs.

use std::fs;
use std::path::PathBuf;

use assert_cmd::Command;
use predicates::prelude::*;

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsspp-figures-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// Checks a CSV: a header, then rows of as many fields whose numeric ones
/// parse. Returns the data rows.
fn csv_rows(text: &str) -> usize {
    let mut lines = text.lines();
    let header = lines.next().expect("a header");
    let width = header.split(',').count();
    assert!(header.starts_with("policy,"), "{header}");
    let mut rows = 0;
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), width, "{line}");
        for f in &fields[1..] {
            assert!(f.is_empty() || f.parse::<f64>().is_ok(), "{line}");
        }
        rows += 1;
    }
    rows
}

#[test]
fn figures_are_written_with_their_data_and_captions() {
    let dir = scratch("run").join("nested");
    rsspp()
        .args([
            "compare",
            "--policies",
            "rss,rsspp-autoscale",
            "--cores",
            "2",
            "--work",
            "3000",
            "--duration",
            "2",
            "--ramp",
            "--no-report",
            "--figures",
        ])
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("figures: "));
    for (stem, figure) in [
        ("rsspp-fig10-latency", "Figure 10"),
        ("rsspp-fig12-imbalance", "Figure 12"),
    ] {
        let svg = fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
        let csv = fs::read_to_string(dir.join(format!("{stem}.csv"))).unwrap();
        assert!(csv_rows(&csv) > 0, "{stem}: no rows");
        let caption = fs::read_to_string(dir.join(format!("{stem}.txt"))).unwrap();
        assert!(
            caption.contains(figure) && caption.contains("RSS++"),
            "{caption}"
        );
        assert!(caption.contains("rsspp-autoscale"), "{caption}");
    }
    // The scaling figure exists when a policy changed its cores.
    let scaling = dir.join("rsspp-fig11-scaling.txt");
    if scaling.exists() {
        assert!(fs::read_to_string(scaling).unwrap().contains("Figure 11"));
        let csv = fs::read_to_string(dir.join("rsspp-fig11-scaling.csv")).unwrap();
        assert!(csv_rows(&csv) > 0);
    }
    let _ = fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn the_production_baselines_run_and_their_flags_are_checked() {
    rsspp()
        .args([
            "compare",
            "--policies",
            "ovs-alb,rfs",
            "--cores",
            "2",
            "--work",
            "3000",
            "--duration",
            "1",
            "--ovs-sample-s",
            "0.1",
            "--ovs-interval-s",
            "0.6",
            "--no-report",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("ovs-alb").and(predicate::str::contains("rfs")));
    for (flag, value) in [
        ("--ovs-improvement", "1.5"),
        ("--ovs-load-threshold", "0"),
        ("--ovs-interval-s", "0"),
        ("--ovs-sample-s", "-1"),
        ("--ovs-rxqs-per-core", "0"),
    ] {
        rsspp()
            .args([
                "compare",
                "--policies",
                "ovs-alb",
                "--no-report",
                flag,
                value,
            ])
            .assert()
            .failure()
            .stderr(predicate::str::contains(flag));
    }
}
