//! `rsspp run`'s life cycle on a real interface, through the real binary
//! (root; CI is root), each in a network namespace made for the test and
//! deleted afterwards:
//!
//! - killed with SIGKILL, the daemon leaves no program attached (its BPF
//!   link goes with it);
//! - `--keep` pins the program; `rsspp status --json` shows it pinned,
//!   `rsspp detach` removes it; another program is not rsspp's to detach;
//! - a log pipe whose reader is gone does not abort the daemon: SIGTERM
//!   still detaches, exit 0;
//! - an interface deleted or down while running ends it within a second,
//!   exit 1, saying so.
//!
//! The daemon runs under `nsenter --net` rather than `ip netns exec`: the
//! latter mounts its own /sys, whose BPF filesystem (and the pins of
//! `--keep`) would go with the command.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

#[path = "../../rsspp-linux/tests/common/foreign.rs"]
#[allow(dead_code)]
mod foreign;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use netns::Netns;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
const IFACE: &str = "veth1";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: the life-cycle tests need root (CI runs as root)");
    }
    root
}

/// `rsspp ARGS` in `ns`'s network namespace (and this mount namespace).
fn rsspp(ns: &Netns, args: &[&str]) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{}", ns.name))
        .arg(RSSPP)
        .args(args);
    c
}

fn output(ns: &Netns, args: &[&str]) -> Output {
    rsspp(ns, args).output().expect("nsenter (util-linux)")
}

/// `rsspp run` on veth1 over CPU 0, without metrics, with `extra`.
fn run_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run", "--iface", IFACE, "--cpus", "0", "--no-metrics"];
    v.extend_from_slice(extra);
    v
}

/// A daemon killed (SIGKILL) and reaped if the test ends early.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Daemon {
    /// Waits up to `limit` for the exit; its status and how long it took.
    fn wait_for_exit(&mut self, limit: Duration) -> Option<(std::process::ExitStatus, Duration)> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some((status, t0.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, signal) };
    }
}

/// Polls `f` for up to `limit`.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn attached(ns: &Netns) -> Option<u32> {
    ns.xdp_of(IFACE).map(|(_, id)| id)
}

/// Starts the daemon and waits (10 s at most) for its program.
fn start(ns: &Netns, extra: &[&str], stderr: Stdio) -> (Daemon, u32) {
    let child = rsspp(ns, &run_args(extra))
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("nsenter (util-linux)");
    let daemon = Daemon(child);
    assert!(
        eventually(Duration::from_secs(10), || attached(ns).is_some()),
        "the daemon never attached its program"
    );
    let id = attached(ns).unwrap();
    (daemon, id)
}

/// Removes rsspp's pins and state file for the namespace's veth1,
/// whatever the test did.
struct Unpin<'a>(&'a Netns);

impl Drop for Unpin<'_> {
    fn drop(&mut self) {
        let _ = rsspp(self.0, &["detach", "--iface", IFACE])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn a_killed_daemon_leaves_nothing_attached() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("life-kill");
    // The state file a killed daemon leaves.
    let _unpin = Unpin(&ns);
    let (mut daemon, _) = start(&ns, &[], Stdio::null());
    daemon.0.kill().unwrap(); // SIGKILL: no handler, no clean-up of ours
    daemon
        .wait_for_exit(Duration::from_secs(5))
        .expect("reaped");
    assert!(
        eventually(Duration::from_secs(2), || attached(&ns).is_none()),
        "SIGKILL left the program attached: {:?}",
        ns.xdp_of(IFACE)
    );
    // Status sees nothing either.
    let out = output(&ns, &["status", "--iface", IFACE]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no rsspp program attached"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn keep_pins_status_shows_it_and_detach_removes_it() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("life-keep");
    let _unpin = Unpin(&ns);
    let out = output(&ns, &run_args(&["--keep", "--duration", "0.3"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = attached(&ns).expect("--keep leaves the program attached");
    // Still attached once the command is gone: pinned.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(attached(&ns), Some(id));

    let out = output(&ns, &["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = &json["attached"][0];
    assert_eq!(entry["iface"], IFACE, "{json}");
    assert_eq!(entry["prog_id"], id, "{json}");
    assert_eq!(entry["program"], "xdp_rsspp_steer", "{json}");
    assert_eq!(entry["mode"], "native", "{json}");
    assert_eq!(entry["attach"], "link", "{json}");
    assert_eq!(entry["pinned"], true, "{json}");
    assert!(
        entry["pin"]
            .as_str()
            .is_some_and(|p| p.starts_with("/sys/fs/bpf/rsspp/") && p.ends_with("/veth1/link")),
        "{json}"
    );
    assert_eq!(entry["reta_size"], 128, "{json}");
    assert_eq!(entry["steering"], "software", "{json}");
    assert!(entry["since"].as_u64().is_some(), "{json}");
    assert_eq!(entry["daemon_pid"], serde_json::Value::Null, "{json}");

    // Another run is refused, saying whose it is and what removes it.
    let out = output(&ns, &run_args(&["--duration", "0.3", "--force"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("rsspp's own XDP program"), "{err}");
    assert!(err.contains("rsspp detach --iface veth1"), "{err}");
    assert_eq!(attached(&ns), Some(id));

    let out = output(&ns, &["detach", "--iface", IFACE]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("detached xdp_rsspp_steer"), "{text}");
    assert_eq!(attached(&ns), None);
    let out = output(&ns, &["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["attached"], serde_json::json!([]), "{json}");
    assert_eq!(json["stale_pins"], serde_json::json!([]), "{json}");
    // Nothing left: still exit 0, and says so.
    let out = output(&ns, &["detach", "--iface", IFACE]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no rsspp program attached"));
}

#[test]
fn detach_refuses_another_program() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("life-other");
    let id = ns.run(|| foreign::attach(IFACE, true));
    let out = output(&ns, &["detach", "--iface", IFACE]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not rsspp's"), "{err}");
    assert!(err.contains(foreign::NAME), "{err}");
    assert_eq!(attached(&ns), Some(id));
}

#[test]
fn a_closed_log_pipe_does_not_abort_the_daemon() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("life-pipe");
    // `-v`: a debug line every round, each written to a pipe nobody reads.
    let child = rsspp(&ns, &["-v"])
        .args(run_args(&[]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut daemon = Daemon(child);
    drop(daemon.0.stderr.take()); // the reader goes away (`| head -1`)
    let mut exited = None;
    eventually(Duration::from_secs(10), || {
        exited = daemon.0.try_wait().unwrap();
        exited.is_some() || attached(&ns).is_some()
    });
    assert_eq!(exited, None, "the daemon died writing its log");
    assert!(attached(&ns).is_some(), "never attached");
    // Rounds run and log into the closed pipe.
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon died");
    daemon.signal(libc::SIGTERM);
    let (status, _) = daemon
        .wait_for_exit(Duration::from_secs(5))
        .expect("SIGTERM ends the daemon");
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(attached(&ns), None, "detached on the way out");
}

#[test]
fn a_deleted_interface_ends_the_run_within_a_second() {
    if !is_root() {
        return;
    }
    let log = std::env::temp_dir().join(format!("rsspp-life-del-{}.log", std::process::id()));
    let ns = Netns::with_veth("life-del");
    let (mut daemon, _) = start(&ns, &[], Stdio::from(std::fs::File::create(&log).unwrap()));
    ns.ip(&["link", "del", IFACE]);
    let (status, took) = daemon
        .wait_for_exit(Duration::from_secs(5))
        .expect("the daemon goes on without its interface");
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(err.contains("rsspp: error: veth1 was deleted"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_interface_down_ends_the_run_and_detaches() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("life-down");
    let (mut daemon, _) = start(&ns, &[], Stdio::piped());
    ns.ip(&["link", "set", IFACE, "down"]);
    let (status, took) = daemon
        .wait_for_exit(Duration::from_secs(5))
        .expect("the daemon goes on with its interface down");
    let mut err = String::new();
    std::io::Read::read_to_string(daemon.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(err.contains("rsspp: error: veth1 went down"), "{err}");
    assert_eq!(attached(&ns), None, "detached");
}
