//! What an operator installs next to the binary (`deploy/`): the Prometheus
//! alert rules (checked and unit-tested by promtool), the Grafana dashboard
//! (every query valid PromQL, every metric one the exporter writes), and
//! the systemd unit (`systemd-analyze verify`, its exposure score, and the
//! daemon run on a veth with exactly the unit's capabilities, and failing
//! without one of them).

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rsspp_linux::metrics::names;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Runs a tool the test suite installs (scripts/test-deps), failing the
/// test with its output when it fails.
fn tool(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/test-deps installs it)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}:\n{text}");
    text
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsspp-deploy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_alert_rules_check_and_pass_their_tests() {
    let dir = deploy().join("prometheus");
    tool(
        Command::new("promtool")
            .args(["check", "rules"])
            .arg(dir.join("rsspp-alerts.yml")),
    );
    tool(
        Command::new("promtool")
            .args(["test", "rules", "rsspp-alerts.test.yml"])
            .current_dir(&dir),
    );
}

/// Every metric name the exporter writes (histograms with their series).
fn exported() -> BTreeSet<String> {
    let mut all: BTreeSet<String> = [
        names::INFO,
        names::CPU_LOAD,
        names::CPU_PACKETS_TOTAL,
        names::BUCKET_PACKETS_TOTAL,
        names::BUCKET_CPU,
        names::IMBALANCE_RATIO,
        names::MIGRATIONS_TOTAL,
        names::ROUNDS_TOTAL,
        names::INTERVAL_SECONDS,
        names::DROPPED_PACKETS_TOTAL,
        names::PACKETS_TOTAL,
        names::HANDOFFS_PENDING,
        names::HANDOFFS_TOTAL,
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for suffix in ["_bucket", "_sum", "_count"] {
        all.insert(format!("{}{suffix}", names::REBALANCE_SECONDS));
    }
    all
}

/// The `rsspp_…` names in a PromQL expression.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("rsspp_") {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[i + name.len()..];
        found.push(name);
    }
    found
}

#[test]
fn every_dashboard_query_is_valid_and_names_exported_metrics() {
    let text = std::fs::read_to_string(deploy().join("grafana/rsspp.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["query"]["query"].as_str() {
            // label_values(METRIC{…}, LABEL): the metric must exist.
            for name in metrics_in(q) {
                assert!(exported.contains(&name), "variable {}: {name}", var["name"]);
            }
        }
    }
    assert!(exprs.len() >= 8, "{} queries", exprs.len());
    // Grafana's variables replaced as Grafana would, then promtool parses
    // each query as a recording rule's expression.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        let names = metrics_in(expr);
        assert!(!names.is_empty(), "a query with no rsspp metric: {expr}");
        for name in names {
            assert!(exported.contains(&name), "{name} is not exported: {expr}");
        }
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$iface", ".*")
            .replace("$instance", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:query{i}\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ));
    }
    let dir = scratch("dashboard");
    std::fs::write(dir.join("queries.yml"), rules).unwrap();
    tool(
        Command::new("promtool")
            .args(["check", "rules"])
            .arg(dir.join("queries.yml")),
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn unit_text() -> String {
    std::fs::read_to_string(deploy().join("systemd/rsspp@.service")).unwrap()
}

/// The unit, its ExecStart pointing at the binary under test, as
/// `rsspp@veth0.service` in a scratch directory.
fn installed_unit(dir: &Path) -> PathBuf {
    let template = dir.join("rsspp@.service");
    std::fs::write(&template, unit_text().replace("/usr/bin/rsspp", RSSPP)).unwrap();
    let instance = dir.join("rsspp@veth0.service");
    std::os::unix::fs::symlink(&template, &instance).unwrap();
    instance
}

#[test]
fn the_systemd_unit_verifies_and_is_confined() {
    let dir = scratch("unit");
    let unit = installed_unit(&dir);
    let out = tool(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit),
    );
    assert!(out.trim().is_empty(), "systemd-analyze verify:\n{out}");
    // systemd's exposure score, 0 (confined) to 10: 3.0 or better.
    tool(
        Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--threshold=30"])
            .arg(&unit),
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The capabilities the unit grants (its `CapabilityBoundingSet=`).
fn unit_capabilities() -> Vec<String> {
    let text = unit_text();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("CapabilityBoundingSet= in the unit");
    line.split_whitespace()
        .map(|c| {
            c.strip_prefix("CAP_")
                .expect("CAP_ names")
                .to_ascii_lowercase()
        })
        .collect()
}

/// `rsspp run` on a veth in `ns` as root limited to `caps` (the bounding
/// set, as systemd's CapabilityBoundingSet does).
fn run_with(ns: &netns::Netns, caps: &[String]) -> std::process::Output {
    let set = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    Command::new("ip")
        .args(["netns", "exec", &ns.name, "setpriv"])
        .arg(format!("--bounding-set={set}"))
        .args([RSSPP, "run", "--iface", "veth1", "--duration", "1"])
        .args(["--metrics-addr", "127.0.0.1:19464"])
        .output()
        .unwrap()
}

#[test]
fn the_daemon_runs_with_the_units_capabilities_and_not_fewer() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the daemon needs root (CI runs as root)");
        return;
    }
    let caps = unit_capabilities();
    assert_eq!(caps, ["bpf", "perfmon", "net_admin"]);
    let ns = netns::Netns::with_veth("deploy");
    ns.ip(&["link", "set", "lo", "up"]);
    let out = run_with(&ns, &caps);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "with {caps:?}:\n{stderr}");
    assert!(stderr.contains("stopping rounds="), "{stderr}");
    // Each one is needed: without it the daemon stops at once, saying
    // which it needs, and leaves nothing attached.
    for missing in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != missing).cloned().collect();
        let out = run_with(&ns, &fewer);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "without {missing}:\n{stderr}");
        assert!(
            stderr.contains(&format!("CAP_{}", missing.to_ascii_uppercase())),
            "without {missing}, the error should name it:\n{stderr}"
        );
        assert_eq!(
            ns.xdp_of("veth1"),
            None,
            "nothing attached without {missing}"
        );
    }
}

#[test]
fn the_debian_package_installs_and_its_daemon_runs() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "skipping: installing a package and running the daemon need root (CI runs as root)"
        );
        return;
    }
    let dir = scratch("deb");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/deb");
    let out = tool(
        Command::new(script)
            .args(["--binary", RSSPP, "--out"])
            .arg(dir.join("out")),
    );
    let deb = PathBuf::from(out.lines().last().expect("the package's path").trim());
    assert!(deb.exists(), "{out}");
    // Installed with dpkg into an empty root of its own.
    let root = dir.join("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    tool(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["--force-depends", "--force-script-chrootless", "-i"])
            .arg(&deb),
    );
    let listed = tool(
        Command::new("dpkg-query")
            .arg(format!(
                "--admindir={}",
                root.join("var/lib/dpkg").display()
            ))
            .args(["-L", "rsspp"]),
    );
    for file in [
        "/usr/bin/rsspp",
        "/lib/systemd/system/rsspp@.service",
        "/usr/share/man/man1/rsspp-run.1.gz",
        "/usr/share/bash-completion/completions/rsspp",
        "/usr/share/rsspp/prometheus/rsspp-alerts.yml",
        "/usr/share/rsspp/grafana/rsspp.json",
        "/usr/share/doc/rsspp/copyright",
        "/usr/share/doc/rsspp/examples/rsspp.toml",
    ] {
        assert!(
            listed.lines().any(|l| l == file),
            "{file} not in the package:\n{listed}"
        );
        assert!(root.join(&file[1..]).exists(), "{file} not installed");
    }
    // The installed daemon, started as the installed unit starts it: its
    // ExecStart, with its capabilities only, on a veth.
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/rsspp@.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart=");
    let argv: Vec<String> = exec
        .replace(
            "/usr/bin/rsspp",
            &root.join("usr/bin/rsspp").display().to_string(),
        )
        .replace("%i", "veth1")
        .replace("$RSSPP_ARGS", "--duration 1 --metrics-addr 127.0.0.1:19465")
        .split_whitespace()
        .map(String::from)
        .collect();
    let caps: Vec<String> = unit_capabilities()
        .iter()
        .map(|c| format!("+{c}"))
        .collect();
    let ns = netns::Netns::with_veth("deb");
    ns.ip(&["link", "set", "lo", "up"]);
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "setpriv"])
        .arg(format!("--bounding-set=-all,{}", caps.join(",")))
        .args(&argv)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{argv:?}:\n{stderr}");
    assert!(stderr.contains("stopping rounds="), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_example_config_holds_only_options_of_rsspp_run() {
    // Read as `rsspp run --config` reads it: a key that is not an option
    // would be refused before the interface is looked up.
    let out = Command::new(RSSPP)
        .args(["run", "--config"])
        .arg(deploy().join("rsspp.toml"))
        .args(["--iface", "rsspp-nosuch0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rsspp-nosuch0"),
        "the interface, not the file, is refused: {stderr}"
    );
}
