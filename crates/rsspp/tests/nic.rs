//! `rsspp nic` on bad input and on devices without a writable table
//! (loopback, a veth pair in a network namespace created here, which needs
//! root as CI runs). The table actually written is checked in a QEMU/KVM
//! guest: `nic_guest.rs`.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use assert_cmd::Command;
use netns::Netns;
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

/// `rsspp ARGS` inside `ns`.
fn rsspp_in(ns: &Netns, args: &[&str]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.name, RSSPP]).args(args);
    cmd
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
            "rsspp: error: rsspp-nosuch0: no such interface in this network namespace\n",
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
    let ns = Netns::with_veth_queues("nic", 4);
    fails_with(
        &mut rsspp_in(&ns, &["nic", "set", "veth0", "--equal", "0,7"]),
        "veth0: queue 7 is out of range: the device has 4 RX queue(s) (0 to 3)",
    );
    fails_with(
        &mut rsspp_in(&ns, &["nic", "set", "veth0", "--weights", "1,1,1,1,1"]),
        "veth0: 5 weights given, but the device has 4 RX queue(s)",
    );
}

#[test]
fn veth_has_no_writable_table() {
    let ns = Netns::with_veth_queues("nic", 4);
    fails_with(
        &mut rsspp_in(&ns, &["nic", "show", "veth0"]),
        "veth0: the driver has no indirection table",
    );
    fails_with(
        &mut rsspp_in(&ns, &["nic", "set", "veth0", "--equal", "0,3"]),
        "veth0: the driver has no writable indirection table",
    );
}
