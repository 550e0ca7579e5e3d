//! `rsspp trace replay` on a veth pair in a namespace of its own: what it
//! says it sent is what arrived on the peer; its refusals are one line.
//! The sending runs as root (CI is root); the refusals run anywhere.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use std::process::{Command, Output};

use netns::Netns;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: sending on a veth pair needs root (CI runs as root)");
    }
    root
}

fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rsspp-replay-{}-{name}", std::process::id()))
}

/// A capture of `packets` UDP frames of 16 flows, 10,000 a second.
fn capture(name: &str, packets: u32) -> std::path::PathBuf {
    let path = scratch(name);
    let out = Command::new(RSSPP)
        .args(["trace", "gen", "--preset", "udp-flows", "--flows", "16"])
        .args(["--pps", "10000", "--duration"])
        .arg(format!("{}", f64::from(packets) / 10_000.0))
        .arg("-o")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    path
}

/// `rsspp trace replay ARGS` in `ns`.
fn replay(ns: &Netns, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, RSSPP, "trace", "replay"])
        .args(args)
        .output()
        .unwrap()
}

/// Frames received by `dev` in `ns`, as the kernel counts them.
fn received(ns: &Netns, dev: &str) -> u64 {
    let json = ns.ip(&["-j", "-s", "link", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
}

fn refused(out: &Output, message: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err, format!("rsspp: error: {message}\n"));
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn what_is_sent_arrives_on_the_peer() {
    if !is_root() {
        return;
    }
    let pcap = capture("sent.pcap", 1000);
    let path = pcap.to_str().unwrap();
    let ns = Netns::with_veth("replay");
    let before = received(&ns, "veth1");
    let out = replay(&ns, &["-i", "veth0", "--pps", "20000", path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.starts_with("sent 1000 frames ("), "{text}");
    assert!(text.contains("out of veth0"), "{text}");
    assert!(text.trim_end().ends_with("1 pass"), "{text}");
    assert_eq!(received(&ns, "veth1") - before, 1000);

    // Looped, bounded by --count: two passes and a half.
    let before = received(&ns, "veth1");
    let out = replay(
        &ns,
        &[
            "--iface", "veth0", "--pps", "50000", "--loop", "--count", "2500", path,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.starts_with("sent 2500 frames"), "{text}");
    assert!(text.contains("3 passes"), "{text}");
    assert_eq!(received(&ns, "veth1") - before, 2500);

    // At the capture's own pace (10,000 a second): about 0.1 s.
    let started = std::time::Instant::now();
    let out = replay(&ns, &["-i", "veth0", "--count", "500", path]);
    assert!(out.status.success(), "{out:?}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(45));

    // An interface that is down is said so.
    ns.ip(&["link", "set", "veth0", "down"]);
    refused(
        &replay(&ns, &["-i", "veth0", path]),
        "veth0 is down: bring it up first (ip link set veth0 up)",
    );
    refused(
        &replay(&ns, &["-i", "rsspp-nosuch0", path]),
        "rsspp-nosuch0: no such interface in this network namespace",
    );
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn bad_options_are_refused_before_sending() {
    let run = |args: &[&str]| {
        Command::new(RSSPP)
            .args(["trace", "replay", "-i", "lo"])
            .args(args)
            .output()
            .unwrap()
    };
    refused(
        &run(&["--pps", "0", "x.pcap"]),
        "--pps must be more than 0 and at most 100000000, got 0",
    );
    refused(
        &run(&["--pps", "-5", "x.pcap"]),
        "--pps must be more than 0 and at most 100000000, got -5",
    );
    refused(
        &run(&["--count", "0", "x.pcap"]),
        "--count must be at least 1, got 0",
    );
    refused(
        &run(&["--loop", "-"]),
        "--loop reads the capture again: it needs a file, not standard input",
    );
    if is_root() {
        refused(
            &run(&["/nonexistent/x.pcap"]),
            "/nonexistent/x.pcap: No such file or directory (os error 2)",
        );
    }
}
