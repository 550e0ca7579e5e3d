//! `rsspp compare --figures DIR`, `rsspp figures DIR` and the production
//! baselines' flags, end to end with the real binary on short runs.

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

/// A CSV's header and rows (no field here holds a comma).
fn table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .expect("a header")
        .split(',')
        .map(String::from)
        .collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect::<Vec<_>>())
        .collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{r:?} under {header:?}");
    }
    (header, rows)
}

/// The number in column `name` of `row`.
fn num(header: &[String], row: &[String], name: &str) -> f64 {
    let i = header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    row[i]
        .parse()
        .unwrap_or_else(|_| panic!("{name} = {:?} in {row:?}", row[i]))
}

/// The figures, their CSV columns, and a word their caption must hold.
const PAPER_FIGURES: [(&str, &str, &str); 9] = [
    (
        "rsspp-fig10",
        "policy,load,measured_load,packets,drops,latency_p50_us,latency_p95_us,latency_p99_us,imbalance_pct",
        "Figure 10",
    ),
    ("rsspp-fig11", "policy,time_s,active_cores", "Figure 11"),
    ("rsspp-fig12", "policy,sample,imbalance_pct", "Figure 12"),
    (
        "rsspp-fig15",
        "policy,flows,packets,processed,reordered,reordered_pct,cycles_per_packet",
        "Figure 15",
    ),
    (
        "rsspp-fig16",
        "table,cores,packets,processed,drops,cycles_per_packet,measured_load,latency_p50_us",
        "Figure 16",
    ),
    (
        "reframer-locality",
        "buffer_us,slf_cores,slf_reframer_in,slf_reframer_out,mean_batch",
        "Reframer",
    ),
    (
        "reframer-throughput",
        "buffer_us,cycles_per_packet,latency_p50_us,latency_p99_us,drops,measured_load",
        "Reframer",
    ),
    (
        "affinity-accept",
        "policy,latency_us,fraction_at_or_below",
        "Affinity-Accept",
    ),
    ("orss", "policy,latency_us,fraction_at_or_below", "oRSS"),
];

#[test]
fn every_paper_figure_is_written_and_keeps_the_papers_shapes() {
    let dir = scratch("paper");
    rsspp()
        .args(["figures", "--quick"])
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("index: "))
        .stderr(predicate::str::contains("running: rsspp compare"));
    let index = fs::read_to_string(dir.join("index.md")).unwrap();
    for (stem, columns, paper) in PAPER_FIGURES {
        let svg = fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<svg").count(),
            svg.matches("</svg>").count(),
            "{stem}"
        );
        let csv = fs::read_to_string(dir.join(format!("{stem}.csv"))).unwrap();
        let (header, rows) = table(&csv);
        assert_eq!(header.join(","), columns, "{stem}");
        assert!(!rows.is_empty(), "{stem}: no rows");
        let caption = fs::read_to_string(dir.join(format!("{stem}.txt"))).unwrap();
        for said in [paper, "The paper:", "This run:", "rsspp compare --preset"] {
            assert!(caption.contains(said), "{stem}: {said:?} in {caption}");
        }
        assert!(
            index.contains(&format!("({stem}.svg)")),
            "{stem} in the index"
        );
    }

    // RSS++ Figure 15: Sprayer reorders with 4 flows, not with 256; the
    // flow-aware methods never do.
    let (h, rows) = table(&fs::read_to_string(dir.join("rsspp-fig15.csv")).unwrap());
    let reordered = |policy: &str, flows: f64| {
        let row = rows
            .iter()
            .find(|r| r[0] == policy && num(&h, r, "flows") == flows)
            .unwrap_or_else(|| panic!("{policy} with {flows} flows"));
        num(&h, row, "reordered_pct")
    };
    assert!(reordered("sprayer", 4.0) > 10.0, "{rows:?}");
    assert_eq!(reordered("sprayer", 256.0), 0.0, "{rows:?}");
    for r in rows.iter().filter(|r| r[0] != "sprayer") {
        assert_eq!(num(&h, r, "reordered"), 0.0, "{r:?}");
    }

    // RSS++ Figure 16: per-bucket tables cost fewer cycles than the shared
    // one at 8 cores.
    let (h, rows) = table(&fs::read_to_string(dir.join("rsspp-fig16.csv")).unwrap());
    let cycles = |t: &str| {
        let row = rows
            .iter()
            .find(|r| r[0] == t && num(&h, r, "cores") == 8.0)
            .unwrap_or_else(|| panic!("{t} at 8 cores"));
        num(&h, row, "cycles_per_packet")
    };
    assert!(cycles("per-bucket") < cycles("shared"), "{rows:?}");

    // Reframer: the locality at the cores grows with the buffering time.
    let (h, rows) = table(&fs::read_to_string(dir.join("reframer-locality.csv")).unwrap());
    let slf: Vec<f64> = rows.iter().map(|r| num(&h, r, "slf_cores")).collect();
    assert_eq!(rows.len(), 4);
    assert!(slf.windows(2).all(|w| w[0] < w[1]), "{slf:?}");

    // RSS++ Figure 10: at the highest load RSS++'s p95 is below RSS's.
    let (h, rows) = table(&fs::read_to_string(dir.join("rsspp-fig10.csv")).unwrap());
    let top = rows.iter().map(|r| num(&h, r, "load")).fold(0.0, f64::max);
    let p95 = |policy: &str| {
        let row = rows
            .iter()
            .find(|r| r[0] == policy && num(&h, r, "load") == top)
            .unwrap();
        num(&h, row, "latency_p95_us")
    };
    assert!(p95("rsspp") < p95("rss"), "{rows:?}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn figures_only_writes_the_figures_named_and_refuses_unknown_ones() {
    let dir = scratch("only");
    rsspp()
        .args(["figures", "--quick", "--only", "rsspp-fig16"])
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicate::str::contains("rsspp-fig16"));
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "index.md",
            "rsspp-fig16.csv",
            "rsspp-fig16.svg",
            "rsspp-fig16.txt"
        ]
    );
    let _ = fs::remove_dir_all(&dir);
    rsspp()
        .args(["figures", "--quick", "--only", "rsspp-fig13"])
        .arg(&dir)
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("--only rsspp-fig13")
                .and(predicate::str::contains("rsspp-fig16")),
        );
    assert!(
        !dir.exists(),
        "nothing written before the names are checked"
    );
}
