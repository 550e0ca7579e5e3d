//! The ethtool layer against this machine's kernel: loopback and a veth pair
//! in a network namespace created here have no writable indirection table,
//! and the errors must say so. (A device with a writable table is tested in
//! a QEMU/KVM guest: `crates/rsspp/tests/nic_guest.rs`.)
//!
//! Creating the namespace needs root, as CI runs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use rsspp_linux::ethtool::{Ethtool, EthtoolError, RssDevice};

/// A network namespace with a 4-queue veth pair, deleted on drop (the veth
/// pair goes with it), even when the test fails.
struct VethNetns {
    name: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {} (this test needs root)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl VethNetns {
    fn new() -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "rsspp-et-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        let ns = Self { name };
        ip(&[
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
            "numrxqueues",
            "4",
            "numtxqueues",
            "4",
        ]);
        ns
    }

    /// Runs `f` on a thread that entered the namespace, so that the ethtool
    /// socket (and the interface lookup) belong to it.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let ns = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: setns on an open namespace fd; it only changes this
            // thread's network namespace, and the thread ends with `f`.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("namespace thread")
    }
}

impl Drop for VethNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn unknown_interface_is_named() {
    let e = Ethtool::open("rsspp-nosuch0").unwrap_err();
    assert_eq!(
        e,
        EthtoolError::NoSuchInterface {
            iface: "rsspp-nosuch0".into()
        }
    );
    assert_eq!(e.to_string(), "rsspp-nosuch0: no such network interface");
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
fn veth_reports_its_queues_but_has_no_writable_table() {
    let ns = VethNetns::new();
    let (queues, read, write) = ns.run(|| {
        let mut veth = Ethtool::open("rsspp-a").expect("open the veth in its namespace");
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
        .starts_with("rsspp-a: the driver has no indirection table"));
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
    let ns = VethNetns::new();
    // The veth exists only inside the namespace.
    let e = Ethtool::open("rsspp-a").unwrap_err();
    assert!(matches!(e, EthtoolError::NoSuchInterface { .. }), "{e:?}");
    assert!(ns.run(|| Ethtool::open("rsspp-a").is_ok()));
}
