//! `rsspp nic` on bad input and on devices without a writable table
//! (loopback, a veth pair in a network namespace created here, which needs
//! root as CI runs). The table actually written is checked in a QEMU/KVM
//! guest: `nic_guest.rs`.

use std::process::Command as StdCommand;
use std::sync::atomic::{AtomicUsize, Ordering};

use assert_cmd::Command;
use predicates::prelude::*;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");

/// Exit code 1, nothing on stdout, `message` on stderr, no panic.
fn fails_with(cmd: &mut Command, message: &str) {
    cmd.assert()
        .failure()
        .code(1)
        .stdout("")
        .stderr(predicate::str::contains(message).and(predicate::str::contains("panicked").not()));
}

fn rsspp(args: &[&str]) -> Command {
    let mut cmd = Command::new(RSSPP);
    cmd.args(args);
    cmd
}

/// A network namespace holding a veth pair with 4 RX queues (`rsspp-a`,
/// `rsspp-b`); deleted on drop, the pair with it.
struct VethNetns {
    name: String,
}

impl VethNetns {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "rsspp-nic-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        Self::ip(&["netns", "add", &name]);
        let ns = Self { name };
        Self::ip(&[
            "-n",
            &ns.name,
            "link",
            "add",
            "rsspp-a",
            "numrxqueues",
            "4",
            "numtxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            "rsspp-b",
        ]);
        ns
    }

    fn ip(args: &[&str]) {
        let out = StdCommand::new("ip")
            .args(args)
            .output()
            .expect("running ip");
        assert!(
            out.status.success(),
            "ip {}: {} (this test needs root)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    /// `rsspp ARGS` inside the namespace.
    fn rsspp(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, RSSPP]).args(args);
        cmd
    }
}

impl Drop for VethNetns {
    fn drop(&mut self) {
        let _ = StdCommand::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn unknown_interface_is_named() {
    for args in [
        &["nic", "show", "rsspp-nosuch0"][..],
        &["nic", "show", "rsspp-nosuch0", "--json"],
        &["nic", "set", "rsspp-nosuch0", "--equal", "0"],
        &["nic", "set", "rsspp-nosuch0", "--weights", "1,1"],
    ] {
        fails_with(
            &mut rsspp(args),
            "rsspp: error: rsspp-nosuch0: no such network interface",
        );
    }
}

#[test]
fn invalid_interface_name_is_refused() {
    fails_with(
        &mut rsspp(&["nic", "show", "../eth0"]),
        "\"../eth0\" is not a valid interface name",
    );
    fails_with(
        &mut rsspp(&["nic", "set", "a-name-longer-than-15", "--equal", "0"]),
        "is not a valid interface name",
    );
}

#[test]
fn loopback_has_no_table() {
    fails_with(
        &mut rsspp(&["nic", "show", "lo"]),
        "lo: the driver has no indirection table (ETHTOOL_GRSSH: EOPNOTSUPP",
    );
    fails_with(
        &mut rsspp(&["nic", "show", "lo", "--json"]),
        "lo: the driver has no indirection table",
    );
    fails_with(
        &mut rsspp(&["nic", "set", "lo", "--equal", "0"]),
        "lo: the driver has no writable indirection table (ETHTOOL_GRSSH: EOPNOTSUPP",
    );
}

#[test]
fn malformed_requests_are_usage_errors() {
    for args in [
        &["nic", "set", "lo"][..],
        &["nic", "set", "lo", "--equal", "1,x"],
        &["nic", "set", "lo", "--equal", "-1"],
        &["nic", "set", "lo", "--equal", "0", "--weights", "1"],
        &["nic", "set", "lo", "--weights", ""],
        &["nic", "show"],
        &["nic", "frobnicate", "lo"],
    ] {
        rsspp(args).assert().failure().code(2).stdout("").stderr(
            predicate::str::contains("error:").and(predicate::str::contains("panicked").not()),
        );
    }
}

#[test]
fn queues_out_of_range_are_refused_before_the_device_is_touched() {
    let ns = VethNetns::new();
    fails_with(
        &mut ns.rsspp(&["nic", "set", "rsspp-a", "--equal", "0,7"]),
        "rsspp-a: queue 7 is out of range: the device has 4 RX queue(s) (0 to 3)",
    );
    fails_with(
        &mut ns.rsspp(&["nic", "set", "rsspp-a", "--weights", "1,1,1,1,1"]),
        "rsspp-a: 5 weights given, but the device has 4 RX queue(s)",
    );
}

#[test]
fn veth_has_no_writable_table() {
    let ns = VethNetns::new();
    fails_with(
        &mut ns.rsspp(&["nic", "show", "rsspp-a"]),
        "rsspp-a: the driver has no indirection table",
    );
    fails_with(
        &mut ns.rsspp(&["nic", "set", "rsspp-a", "--equal", "0,3"]),
        "rsspp-a: the driver has no writable indirection table",
    );
}
