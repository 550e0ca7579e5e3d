//! `rsspp top` through the real binary, against the daemon's metrics server
//! started here on a loopback port with a snapshot of our making.

use assert_cmd::Command;
use predicates::prelude::*;
use rsspp_linux::metrics::{
    BucketMetrics, CpuMetrics, MetricsServer, MetricsSnapshot, SharedMetrics,
};

fn rsspp() -> Command {
    Command::cargo_bin("rsspp").unwrap()
}

/// Four CPUs, CPU 0 saturated and CPU 1 idle; 64 buckets, bucket b on CPU
/// b mod 4 except bucket 1, which the daemon moved to CPU 3.
fn snapshot() -> MetricsSnapshot {
    let mut s = MetricsSnapshot::new("veth-top0", "software");
    s.cpus = [(0, 1.0), (1, 0.0), (2, 0.5), (3, 0.25)]
        .into_iter()
        .map(|(cpu, load)| CpuMetrics {
            cpu,
            load,
            packets_total: 1000 * u64::from(cpu),
            dropped: vec![("cpumap_full".into(), 0)],
        })
        .collect();
    s.buckets = (0..64u32)
        .map(|b| BucketMetrics {
            packets_total: 10,
            cpu: if b == 1 { 3 } else { b % 4 },
        })
        .collect();
    s.imbalance_ratio = 1.5;
    s.migrations_total = 1;
    s.rounds_total = 40;
    s.interval_seconds = 0.1;
    s
}

fn server() -> MetricsServer {
    MetricsServer::start(
        "127.0.0.1:0".parse().unwrap(),
        SharedMetrics::new(snapshot()),
    )
    .unwrap()
}

#[test]
fn once_prints_the_heatmap_rows_and_the_table_without_escapes() {
    let server = server();
    let addr = server.local_addr().to_string();
    let out = rsspp()
        .args([
            "top",
            "--once",
            "--interval-ms",
            "50",
            "--metrics-addr",
            &addr,
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains('\x1b'), "escapes in --once output:\n{text}");
    assert!(
        text.contains(&format!("veth-top0 (software) at {addr}")),
        "{text}"
    );
    assert!(text.contains("imbalance 150%"), "{text}");
    // Two samples: one heat column each, block height = load; the daemon
    // ran no round between them (the snapshot stands still), so no rate is
    // known: "-", not a rate of 0.
    for row in [
        "cpu 0 │██│  100%          -        -       16",
        "cpu 1 │  │    0%          -        -       15",
        "cpu 2 │▄▄│   50%          -        -       16",
        "cpu 3 │▂▂│   25%          -        -       17",
    ] {
        assert!(text.contains(row), "no row {row:?} in:\n{text}");
    }
    assert!(text.contains("Indirection table: 64 buckets"), "{text}");
    let grid: String = (0..32)
        .map(|b| format!("{} ", if b == 1 { 3 } else { b % 4 }))
        .collect();
    assert!(
        text.contains(&format!("    0 {}", grid.trim_end())),
        "no first table row in:\n{text}"
    );
    assert!(text.contains("   32 0 1 2 3"), "{text}");
    server.stop();
}

#[test]
fn no_daemon_is_a_clear_error_naming_the_address() {
    // Bind then drop: a loopback port nobody listens on.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    rsspp()
        .args(["top", "--once", "--metrics-addr", &addr])
        .assert()
        .failure()
        .code(1)
        .stdout("")
        .stderr(
            predicate::str::contains(&addr)
                .and(predicate::str::contains("rsspp run"))
                .and(predicate::str::contains("--metrics-addr"))
                .and(predicate::str::contains("panicked").not()),
        );
}

#[test]
fn the_live_view_without_a_terminal_says_to_use_once() {
    let server = server();
    rsspp()
        .args(["top", "--metrics-addr", &server.local_addr().to_string()])
        .assert()
        .failure()
        .code(1)
        .stderr(
            predicate::str::contains("needs a terminal").and(predicate::str::contains("--once")),
        );
}

#[test]
fn a_bad_address_or_interval_is_refused() {
    rsspp()
        .args(["top", "--once", "--metrics-addr", "localhost"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("HOST:PORT"));
    rsspp()
        .args(["top", "--once", "--interval-ms", "5"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--interval-ms"));
}

#[test]
fn once_json_gives_the_rates_of_the_daemons_next_round() {
    // A "daemon" that runs a round every 200 ms, each adding 100 packets
    // to CPU 0 and 300 to CPU 1.
    let shared = SharedMetrics::new(snapshot());
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), shared.clone()).unwrap();
    let addr = server.local_addr().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                shared.update(|s| {
                    s.rounds_total += 1;
                    s.cpus[0].packets_total += 100;
                    s.cpus[1].packets_total += 300;
                });
            }
        })
    };
    let out = rsspp()
        .args([
            "top",
            "--once",
            "--json",
            "--interval-ms",
            "50",
            "--metrics-addr",
            &addr,
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    rounds.join().unwrap();
    server.stop();
    let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(v["iface"], "veth-top0");
    assert_eq!(v["table"].as_array().unwrap().len(), 64);
    let seconds = v["seconds"].as_f64().expect("rates over one round");
    assert!(
        seconds > 0.1 && seconds < 0.4,
        "one 200 ms round: {seconds} s"
    );
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), 4);
    // One round between the two samples: 100 and 300 packets over it.
    let r0 = cpus[0]["packets_per_second"].as_f64().unwrap() * seconds;
    let r1 = cpus[1]["packets_per_second"].as_f64().unwrap() * seconds;
    assert!(
        (r0 - 100.0).abs() < 1e-6 && (r1 - 300.0).abs() < 1e-6,
        "{v}"
    );
    assert_eq!(cpus[0]["buckets"], 16);
    // --json needs --once.
    rsspp()
        .args(["top", "--json", "--metrics-addr", &addr])
        .assert()
        .failure()
        .code(2);
}
