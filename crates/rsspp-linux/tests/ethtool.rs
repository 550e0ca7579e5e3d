//! The ethtool layer against this machine's kernel: loopback and a veth pair
//! in a network namespace created here have no writable indirection table,
//! and the errors must say so. (A device with a writable table is tested in
//! a QEMU/KVM guest: `crates/rsspp/tests/nic_guest.rs`.)
//!
//! Creating the namespace needs root, as CI runs.

mod common;

use common::netns::Netns;
use rsspp_linux::ethtool::{Ethtool, EthtoolError, FlowRule, RssDevice, RuleMatch};

#[test]
fn unknown_interface_is_named() {
    let e = Ethtool::open("rsspp-nosuch0").unwrap_err();
    assert_eq!(
        e,
        EthtoolError::NoSuchInterface {
            iface: "rsspp-nosuch0".into()
        }
    );
    assert_eq!(
        e.to_string(),
        "rsspp-nosuch0: no such interface in this network namespace"
    );
}

#[test]
fn invalid_name_is_refused_before_any_ioctl() {
    let e = Ethtool::open("eth0/../x").unwrap_err();
    assert!(matches!(e, EthtoolError::BadName { .. }), "{e}");
    assert!(e.to_string().contains("not a valid interface name"), "{e}");
}

#[test]
fn loopback_has_no_table_and_no_queue_count() {
    let mut lo = Ethtool::open("lo").expect("open lo");
    assert_eq!(lo.name(), "lo");
    let e = lo.rss().unwrap_err();
    assert!(matches!(e, EthtoolError::NoTable { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "lo: the driver has no indirection table (ETHTOOL_GRSSH: EOPNOTSUPP (Operation not supported))"
    );
    let e = lo.set_indirection(&[0; 128]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "lo: the driver has no writable indirection table \
         (ETHTOOL_GRSSH: EOPNOTSUPP (Operation not supported))"
    );
    let e = lo.rx_queues().unwrap_err();
    assert!(matches!(e, EthtoolError::NoQueueCount { .. }), "{e:?}");
    assert!(e
        .to_string()
        .starts_with("lo: the driver does not report its number of RX queues"));
}

#[test]
fn loopback_and_veth_have_no_ntuple_rules_and_say_so() {
    let mut lo = Ethtool::open("lo").expect("open lo");
    let e = lo.rule_table().unwrap_err();
    assert_eq!(
        e.to_string(),
        "lo: the driver has no ntuple rules (ETHTOOL_GRXCLSRLCNT: EOPNOTSUPP (Operation not supported))"
    );
    let ns = Netns::with_veth_queues("nt", 2);
    let (table, insert, delete) = ns.run(|| {
        let mut veth = Ethtool::open("veth0").expect("open the veth in its namespace");
        let matches = RuleMatch::for_flow(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            Some((1000, 53)),
        )[1];
        let rule = FlowRule {
            matches,
            queue: 1,
            location: 0,
        };
        (
            veth.rule_table(),
            veth.insert_rule(&rule),
            veth.delete_rule(0),
        )
    });
    assert!(
        matches!(table, Err(EthtoolError::NoRules { .. })),
        "{table:?}"
    );
    // The kernel's refusal of the rule itself, naming it as ethtool takes it.
    assert_eq!(
        insert.unwrap_err().to_string(),
        "veth0: the driver refused the ntuple rule `flow-type udp4 src-ip 10.0.0.1 dst-ip 10.0.0.2 \
         src-port 1000 dst-port 53 action 1 loc 0` (EOPNOTSUPP (Operation not supported))"
    );
    assert_eq!(
        delete.unwrap_err().to_string(),
        "veth0: ETHTOOL_SRXCLSRLDEL failed: EOPNOTSUPP (Operation not supported)"
    );
}

#[test]
fn veth_reports_its_queues_but_has_no_writable_table() {
    let ns = Netns::with_veth_queues("et", 4);
    let (queues, read, write) = ns.run(|| {
        let mut veth = Ethtool::open("veth0").expect("open the veth in its namespace");
        (
            veth.rx_queues(),
            veth.rss(),
            veth.set_indirection(&[0, 1, 2, 3]),
        )
    });
    assert_eq!(queues, Ok(4), "a veth created with numrxqueues 4");
    let read = read.unwrap_err();
    assert!(matches!(read, EthtoolError::NoTable { .. }), "{read:?}");
    assert!(read
        .to_string()
        .starts_with("veth0: the driver has no indirection table"));
    let write = write.unwrap_err();
    assert!(
        matches!(write, EthtoolError::NotWritable { .. }),
        "{write:?}"
    );
    assert!(
        write.to_string().contains("no writable indirection table")
            && write.to_string().contains("EOPNOTSUPP"),
        "{write}"
    );
}

#[test]
fn an_interface_is_looked_up_in_the_callers_namespace() {
    let ns = Netns::with_veth_queues("et", 4);
    // The veth exists only inside the namespace.
    let e = Ethtool::open("veth0").unwrap_err();
    assert!(matches!(e, EthtoolError::NoSuchInterface { .. }), "{e:?}");
    assert!(ns.run(|| Ethtool::open("veth0").is_ok()));
}
