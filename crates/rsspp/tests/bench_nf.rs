//! `rsspp bench nf` for real, as root (CI is root), kept short: one round
//! of a few thousand frames. It checks what the benchmark reports and that
//! the cost model it writes is one `rsspp compare --cost-model` takes — no
//! timing is asserted (this machine is shared; the figures are the
//! README's, from a real run).

use std::process::Command;

use serde_json::Value;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: rsspp bench nf needs root (CI runs as root)");
        return false;
    }
    if rsspp_linux::cpu::CpuList::online().unwrap().len() < 2 {
        eprintln!("skipping: two workers need two CPUs");
        return false;
    }
    true
}

#[test]
fn bench_nf_reports_every_variant_and_writes_a_cost_model_compare_reads() {
    if !ready() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rsspp-bench-nf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cost = dir.join("cost.json");
    let child = Command::new(RSSPP)
        .args(["bench", "nf", "--cpus", "0,1", "--frames", "20000"])
        .args(["--flows", "1000", "--rounds", "1", "--churn", "4", "--json"])
        .arg("--cost-out")
        .arg(&cost)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "rsspp bench nf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();

    let check = |v: &Value, name: &str| {
        assert_eq!(v["variant"], name);
        let s = &v["samples"][0];
        assert_eq!(s["sent"], 20000, "{name}: {s}");
        // Veth delivers what it is given; a full ring may drop some.
        let received = s["received"].as_u64().unwrap();
        assert!(received > 10_000 && received <= 20_000, "{name}: {s}");
        assert!(s["cpu_ns"].as_u64().unwrap() > 0, "{name}: {s}");
        let ns = v["ns_per_packet"].as_f64().unwrap();
        assert!(ns.is_finite() && ns > 0.0, "{name}: {ns}");
    };
    check(&report["kernel"], "kernel");
    // tcpdump, the baseline nobody here wrote (scripts/test-deps installs it).
    check(&report["tcpdump"], "tcpdump");
    let chains = report["chains"].as_array().unwrap();
    let monitor = chains.iter().find(|c| c["chain"] == "monitor").unwrap();
    for (v, name) in monitor["variants"]
        .as_array()
        .unwrap()
        .iter()
        .zip(["static", "shared", "rsspp"])
    {
        check(v, name);
    }
    let variants = monitor["variants"].as_array().unwrap();
    assert_eq!(variants[0]["samples"][0]["migrations"], 0);
    assert!(variants[2]["samples"][0]["migrations"].as_u64().unwrap() > 0);
    for ratio in [
        "per_bucket_speedup",
        "rsspp_cost_ratio",
        "vs_kernel_ratio",
        "vs_tcpdump_ratio",
    ] {
        let r = monitor[ratio].as_f64().unwrap();
        assert!(r.is_finite() && r > 0.0, "{ratio} {r}");
    }
    // Its namespace is gone.
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&netns.stdout).contains(&format!("rsspp-bench-nf-{pid}")));

    // The cost model: the static run's figure, which compare takes.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&cost).unwrap()).unwrap();
    assert_eq!(
        file["functions"]["monitor"]["ns_per_packet"],
        variants[0]["ns_per_packet"]
    );
    let compare = Command::new(RSSPP)
        .args(["compare", "--no-report", "--policies", "rss,rsspp"])
        .args(["--preset", "campus", "--cores", "2", "--duration", "0.3"])
        .arg("--cost-model")
        .arg(&cost)
        .args(["--cost-function", "monitor"])
        .output()
        .unwrap();
    assert!(
        compare.status.success(),
        "rsspp compare: {}",
        String::from_utf8_lossy(&compare.stderr)
    );
    assert!(String::from_utf8_lossy(&compare.stdout).contains("cost model: monitor"));
    std::fs::remove_dir_all(dir).unwrap();
}
