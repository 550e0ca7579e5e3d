//! The daemon's service on a veth pair in a network namespace: it runs
//! until its stop flag or its duration, serves the metrics, and leaves the
//! interface as it found it (or with the last table, when kept).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::bpf_ready;
use common::netns::Netns;
use rsspp_linux::lifecycle::{self, Detached, Loss};
use rsspp_linux::service::{Service, ServiceConfig, ServiceError, DEFAULT_SOFTWARE_RETA_SIZE};
use rsspp_linux::xdp::XdpErrorKind;

const IFACE: &str = "veth0";

fn config() -> ServiceConfig {
    let mut c = ServiceConfig::new(IFACE, vec![0]);
    c.metrics = Some("127.0.0.1:0".parse().unwrap());
    c.control.interval = Duration::from_millis(10);
    c.control.max_interval = Duration::from_millis(10);
    c
}

#[test]
fn runs_until_stopped_then_detaches() {
    if !bpf_ready("service stop test") {
        return;
    }
    let ns = Netns::with_veth("svc-stop");
    ns.ip(&["link", "set", "lo", "up"]);
    ns.run(|| {
        let mut service = Service::start(config()).unwrap();
        assert!(ns.xdp_of(IFACE).is_some());
        assert!(service.metrics_addr().is_some_and(|a| a.port() != 0));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(150));
                stop.store(true, Ordering::Relaxed);
            });
            service.run(&stop).unwrap();
        });
        let snapshot = service.metrics().snapshot();
        assert!(snapshot.rounds_total >= 3, "{}", snapshot.rounds_total);
        assert_eq!(snapshot.buckets.len(), DEFAULT_SOFTWARE_RETA_SIZE);
        let summary = service.shutdown().unwrap();
        assert_eq!(summary.rounds, snapshot.rounds_total);
        assert_eq!(ns.xdp_of(IFACE), None);
    });
}

#[test]
fn a_duration_ends_the_run_and_keep_leaves_the_program() {
    if !bpf_ready("service keep test") {
        return;
    }
    let ns = Netns::with_veth("svc-keep");
    ns.run(|| {
        let mut c = config();
        c.metrics = None;
        c.keep = true;
        c.duration = Some(Duration::from_millis(60));
        let mut service = Service::start(c).unwrap();
        assert_eq!(service.metrics_addr(), None);
        // Never raised: the duration ends the run.
        service.run(&AtomicBool::new(false)).unwrap();
        service.shutdown().unwrap();
        let (_, id) = ns.xdp_of(IFACE).expect("--keep leaves it attached");
        // Pinned, and described in the state file.
        let status = lifecycle::status(Some(IFACE)).unwrap();
        let kept = &status.attached[0];
        assert_eq!(kept.prog_id, id);
        assert!(kept.link_id.is_some());
        let pin = lifecycle::pin_dir(IFACE).join("link");
        assert_eq!(kept.pinned.as_deref(), Some(pin.as_path()));
        assert!(pin.exists());
        let state = kept.state.as_ref().expect("the state file");
        assert_eq!(state.reta_size, DEFAULT_SOFTWARE_RETA_SIZE);
        assert_eq!(state.pid, std::process::id());
        assert!(kept.holders.is_empty(), "{:?}", kept.holders);
        // Detached and unpinned.
        let detached = lifecycle::detach(IFACE).unwrap();
        assert!(
            matches!(detached, Detached::Removed { pinned: true, prog_id, .. } if prog_id == id),
            "{detached:?}"
        );
        assert_eq!(ns.xdp_of(IFACE), None);
        assert!(!pin.exists());
        assert!(!lifecycle::state_path(IFACE).exists());
    });
}

#[test]
fn a_failed_start_leaves_nothing_attached() {
    if !bpf_ready("service start test") {
        return;
    }
    let ns = Netns::with_veth("svc-fail");
    ns.run(|| {
        // CPU 4000 is not online: the load fails before any attach.
        let e = Service::start(ServiceConfig::new(IFACE, vec![4000])).unwrap_err();
        assert!(
            matches!(&e, ServiceError::Xdp(x) if matches!(x.kind(), XdpErrorKind::CpuOffline { cpu: 4000, .. })),
            "{e}"
        );
        assert_eq!(ns.xdp_of(IFACE), None);
    });
}

#[test]
fn a_deleted_or_downed_interface_ends_the_run() {
    if !bpf_ready("service interface test") {
        return;
    }
    for (what, loss) in [("down", Loss::Down), ("del", Loss::Deleted)] {
        let ns = Netns::with_veth("svc-lost");
        ns.run(|| {
            let mut c = config();
            c.metrics = None;
            let mut service = Service::start(c).unwrap();
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(150));
                    match what {
                        "down" => ns.ip(&["link", "set", IFACE, "down"]),
                        _ => ns.ip(&["link", "del", IFACE]),
                    };
                });
                let e = service.run(&AtomicBool::new(false)).unwrap_err();
                assert!(
                    matches!(&e, ServiceError::InterfaceLost { loss: l, .. } if *l == loss),
                    "{e}"
                );
            });
            assert_eq!(
                service.shutdown().err().map(|e| e.to_string()),
                None,
                "detaching after the loss"
            );
            if loss == Loss::Down {
                assert_eq!(ns.xdp_of(IFACE), None);
            }
        });
    }
}

/// Deleting an interface takes it down before it goes: a watch looking at
/// it all the while must still call it deleted, never down.
#[test]
fn a_deletion_is_never_reported_as_down() {
    if !bpf_ready("interface watch test") {
        return;
    }
    for _ in 0..10 {
        let ns = Netns::with_veth("svc-watch");
        ns.run(|| {
            let watch = lifecycle::Watch::new(lifecycle::ifindex_of(IFACE).unwrap()).unwrap();
            std::thread::scope(|s| {
                s.spawn(|| ns.ip(&["link", "del", IFACE]));
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                let loss = loop {
                    if let Some(loss) = watch.check() {
                        break loss;
                    }
                    assert!(std::time::Instant::now() < deadline, "never lost");
                };
                assert_eq!(loss, Loss::Deleted);
            });
        });
    }
}
