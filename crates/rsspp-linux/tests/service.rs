//! The daemon's service on a veth pair in a network namespace: it runs
//! until its stop flag or its duration, serves the metrics, and leaves the
//! interface as it found it (or with the last table, when kept).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::bpf_ready;
use common::netns::Netns;
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
        assert!(ns.xdp_of(IFACE).is_some(), "--keep leaves it attached");
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
