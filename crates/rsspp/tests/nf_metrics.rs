//! `rsspp nf`'s metrics, for real, as root (CI is root): in a namespace
//! made for the test, tcpreplay sends a trace made by `rsspp trace gen` into
//! veth0; `rsspp nf --in veth1` (a sink, four random buckets moved a round)
//! serves the daemon's metrics on the namespace's loopback. A scrape while
//! the traffic flows carries the daemon's series with the runtime's
//! figures; promtool accepts it; `rsspp top --once` reads it unchanged.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::Netns;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
const PORT: u16 = 19_474;
const IF: &str = "iface=\"veth1\"";

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the nf metrics test needs root (CI runs as root)");
        return false;
    }
    if rsspp_linux::cpu::CpuList::online().unwrap().len() < 2 {
        eprintln!("skipping: two workers need two CPUs");
        return false;
    }
    true
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child stopped (SIGINT) and waited for on drop.
struct Reaped(Option<Child>);

impl Reaped {
    fn stop(&mut self) -> Option<std::process::Output> {
        let child = self.0.take()?;
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        child.wait_with_output().ok()
    }

    fn wait(&mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The metrics text inside the namespace; `None` while nothing answers.
fn scrape(ns: &Netns) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name, "curl", "-sf", "--max-time", "2"])
        .arg(format!("http://127.0.0.1:{PORT}/metrics"))
        .output()
        .expect("curl");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sum of the samples of `family` (its name followed by labels).
fn sum(m: &BTreeMap<String, f64>, family: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(&format!("{family}{{")))
        .map(|(_, v)| v)
        .sum()
}

/// `promtool check metrics` on `text`; `None` when promtool is absent.
fn promtool(text: &str) -> Option<(bool, String)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

#[test]
fn nf_serves_the_daemons_metrics_and_top_reads_them() {
    if !ready() {
        return;
    }
    let dir =
        Scratch(std::env::temp_dir().join(format!("rsspp-nf-metrics-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let trace = dir.0.join("trace.pcap");
    let status = Command::new(RSSPP)
        .args(["trace", "gen", "--preset", "elephants", "--duration", "0.1"])
        .arg("--output")
        .arg(&trace)
        .status()
        .unwrap();
    assert!(status.success());

    let ns = Netns::with_veth("nfm");
    ns.ip(&["link", "set", "lo", "up"]);
    let mut nf = Reaped(Some(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, RSSPP, "nf", "--in", "veth1"])
            .args(["--cpus", "0,1", "--churn", "4", "--duration", "8", "--json"])
            .args(["--metrics-addr", &format!("127.0.0.1:{PORT}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    while scrape(&ns).is_none() {
        assert!(Instant::now() < deadline, "rsspp nf never served metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
    // 100 000 frames at 25 000 a second: 4 s of traffic.
    let mut replay = Reaped(Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "tcpreplay",
                "-q",
                "--pps",
                "25000",
            ])
            .args(["-i", "veth0"])
            .arg(&trace)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpreplay (scripts/test-deps installs it)"),
    ));
    std::thread::sleep(Duration::from_millis(2500));
    let text = scrape(&ns).expect("metrics while the traffic flows");
    let m = samples(&text);

    assert_eq!(m[&format!("rsspp_info{{{IF},mode=\"afpacket\"}}")], 1.0);
    for cpu in [0, 1] {
        let load = m[&format!("rsspp_cpu_load{{{IF},cpu=\"{cpu}\"}}")];
        assert!((0.0..=1.0).contains(&load), "cpu {cpu} load {load}");
        assert!(m.contains_key(&format!("rsspp_cpu_packets_total{{{IF},cpu=\"{cpu}\"}}")));
        assert!(m.contains_key(&format!(
            "rsspp_dropped_packets_total{{{IF},cpu=\"{cpu}\",reason=\"ring_full\"}}"
        )));
    }
    let received = sum(&m, "rsspp_cpu_packets_total");
    assert!(
        received > 10_000.0,
        "received {received} after 2.5 s at 25 kpps"
    );
    // A sink drops what it processed, under `sink`.
    assert!(sum(&m, "rsspp_dropped_packets_total") > 0.0);
    let bucket_cpus: Vec<f64> = (0..128)
        .map(|b| m[&format!("rsspp_bucket_cpu{{{IF},bucket=\"{b}\"}}")])
        .collect();
    assert!(bucket_cpus.iter().all(|&c| c == 0.0 || c == 1.0));
    let steered = sum(&m, "rsspp_bucket_packets_total");
    assert!(
        steered >= received,
        "steered {steered} < received {received}"
    );
    assert!(m[&format!("rsspp_migrations_total{{{IF}}}")] >= 4.0);
    assert!(m[&format!("rsspp_rounds_total{{{IF}}}")] >= 10.0);
    assert!(m.contains_key(&format!("rsspp_imbalance_ratio{{{IF}}}")));
    assert!(m.contains_key(&format!("rsspp_handoffs_pending{{{IF}}}")));
    assert!(m[&format!("rsspp_handoffs_total{{{IF},outcome=\"drained\"}}")] > 0.0);
    assert!(m[&format!("rsspp_rebalance_seconds_count{{{IF}}}")] >= 10.0);
    match promtool(&text) {
        Some((ok, said)) => assert!(ok && said.trim().is_empty(), "promtool: {said}"),
        None => eprintln!("promtool not found (Debian package prometheus): not checked"),
    }

    let top = Command::new("ip")
        .args(["netns", "exec", &ns.name, RSSPP, "top", "--once"])
        .args(["--metrics-addr", &format!("127.0.0.1:{PORT}")])
        .args(["--interval-ms", "300"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "rsspp top --once: {}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(
        shown.contains("veth1") && shown.contains("afpacket"),
        "{shown}"
    );
    assert!(!shown.contains('\x1b'), "escapes in --once:\n{shown}");

    let replayed = replay.wait();
    assert!(
        replayed.status.success(),
        "tcpreplay: {}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    let out = nf.wait();
    assert!(
        out.status.success(),
        "rsspp nf: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["received"].as_f64().unwrap() >= received);
}

#[test]
fn reframe_serves_the_reframer_series() {
    if !ready() {
        return;
    }
    const PORT: u16 = 19_475;
    let dir = Scratch(
        std::env::temp_dir().join(format!("rsspp-nf-metrics-reframe-{}", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).unwrap();
    let trace = dir.0.join("trace.pcap");
    let status = Command::new(RSSPP)
        .args(["trace", "gen", "--preset", "campus", "--duration", "0.1"])
        .arg("--output")
        .arg(&trace)
        .status()
        .unwrap();
    assert!(status.success());

    let ns = Netns::with_veth("nfmr");
    ns.ip(&["link", "set", "lo", "up"]);
    let mut reframe = Reaped(Some(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, RSSPP, "reframe", "--in", "veth1"])
            .args(["--out", "lo", "--buffer-us", "2000", "--cpu", "1"])
            .args(["--duration", "6", "--json"])
            .args(["--metrics-addr", &format!("127.0.0.1:{PORT}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let url = format!("http://127.0.0.1:{PORT}/metrics");
    let get = || {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name, "curl", "-sf", "--max-time", "2"])
            .arg(&url)
            .output()
            .expect("curl");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while get().is_none() {
        assert!(
            Instant::now() < deadline,
            "rsspp reframe never served metrics"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut replay = Reaped(Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "tcpreplay",
                "-q",
                "--pps",
                "25000",
            ])
            .args(["-i", "veth0"])
            .arg(&trace)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpreplay (scripts/test-deps installs it)"),
    ));
    std::thread::sleep(Duration::from_millis(1500));
    let text = get().expect("metrics while the traffic flows");
    let m = samples(&text);
    let buffered = m[&format!("rsspp_reframer_buffered_packets_total{{{IF}}}")];
    assert!(
        buffered > 5_000.0,
        "buffered {buffered} after 1.5 s at 25 kpps"
    );
    assert!(m.contains_key(&format!("rsspp_reframer_held_packets{{{IF}}}")));
    let flushes = sum(&m, "rsspp_reframer_flushes_total");
    let timeouts = m[&format!("rsspp_reframer_flushes_total{{{IF},reason=\"timeout\"}}")];
    assert!(
        timeouts > 0.0 && flushes >= timeouts,
        "{flushes} {timeouts}"
    );
    // The stage regroups the interleaved flows: longer runs out than in.
    let slf_in = m[&format!("rsspp_reframer_slf{{{IF},stream=\"in\"}}")];
    let slf_out = m[&format!("rsspp_reframer_slf{{{IF},stream=\"out\"}}")];
    assert!(
        slf_in >= 1.0 && slf_out > slf_in,
        "SLF in {slf_in} out {slf_out}"
    );
    match promtool(&text) {
        Some((ok, said)) => assert!(ok && said.trim().is_empty(), "promtool: {said}"),
        None => eprintln!("promtool not found (Debian package prometheus): not checked"),
    }
    let replayed = replay.wait();
    assert!(replayed.status.success());
    let out = reframe.wait();
    assert!(
        out.status.success(),
        "rsspp reframe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["reframer"]["buffered"].as_f64().unwrap() >= buffered);
}
