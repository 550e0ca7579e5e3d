//! The metrics server on an ephemeral loopback port: what it answers, and
//! that slow, silent or oversized requests do not stop it serving others.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rsspp_linux::metrics::{
    render, CpuMetrics, MetricsError, MetricsServer, MetricsSnapshot, ServerLimits, SharedMetrics,
    CONTENT_TYPE,
};

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn shared() -> SharedMetrics {
    let mut s = MetricsSnapshot::new("lo", "software");
    s.cpus.push(CpuMetrics {
        cpu: 1,
        load: 0.75,
        packets_total: 12,
        dropped: vec![("cpumap_full".into(), 0)],
    });
    SharedMetrics::new(s)
}

/// Short limits so the slow-client tests finish quickly.
fn quick() -> ServerLimits {
    ServerLimits {
        read_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_millis(300),
        max_request_bytes: 4096,
        max_connections: 64,
    }
}

/// Sends `request` and returns the whole response (the server closes).
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    // A bound so a broken server fails the test instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn split(response: &str) -> (&str, &str, &str) {
    let (head, body) = response.split_once("\r\n\r\n").expect("no end of head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status, headers, body)
}

fn get_metrics(addr: SocketAddr) -> String {
    exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n",
    )
}

#[test]
fn get_metrics_serves_the_current_snapshot() {
    let shared = shared();
    let server = MetricsServer::start(any_port(), shared.clone()).unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);

    let response = get_metrics(addr);
    let (status, headers, body) = split(&response);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains(&format!("Content-Type: {CONTENT_TYPE}")));
    assert!(headers.contains(&format!("Content-Length: {}", body.len())));
    assert_eq!(body, render(&shared.snapshot()));

    // The daemon's next round shows in the next scrape.
    shared.update(|s| s.cpus[0].packets_total = 99);
    let response = get_metrics(addr);
    assert!(split(&response)
        .2
        .contains("rsspp_cpu_packets_total{iface=\"lo\",cpu=\"1\"} 99\n"));
    server.stop();
}

#[test]
fn head_gives_the_headers_only() {
    let server = MetricsServer::start(any_port(), shared()).unwrap();
    let response = exchange(server.local_addr(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
    let (status, headers, body) = split(&response);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains("Content-Length: "));
    assert_eq!(body, "");
}

#[test]
fn other_paths_are_404_and_other_methods_405() {
    let server = MetricsServer::start(any_port(), shared()).unwrap();
    let addr = server.local_addr();
    for path in ["/", "/metricsx", "/metrics/x"] {
        let response = exchange(addr, format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes());
        assert_eq!(split(&response).0, "HTTP/1.1 404 Not Found", "{path}");
    }
    for method in ["POST", "PUT", "DELETE"] {
        let response = exchange(
            addr,
            format!("{method} /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        let (status, headers, _) = split(&response);
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed", "{method}");
        assert!(headers.contains("Allow: GET, HEAD"));
    }
    let response = exchange(addr, b"hello\r\n\r\n");
    assert_eq!(split(&response).0, "HTTP/1.1 400 Bad Request");
}

#[test]
fn a_silent_client_is_timed_out_and_does_not_hang_the_server() {
    let server = MetricsServer::start_with_limits(any_port(), shared(), quick()).unwrap();
    let addr = server.local_addr();
    // Connects and says nothing; a scrape queued behind it still answers.
    let mut silent = TcpStream::connect(addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let response = get_metrics(addr);
    assert_eq!(split(&response).0, "HTTP/1.1 200 OK");
    let mut told = String::new();
    silent.read_to_string(&mut told).unwrap();
    assert!(told.starts_with("HTTP/1.1 408 "), "{told:?}");
}

#[test]
fn a_trickling_client_cannot_extend_its_deadline() {
    let server = MetricsServer::start_with_limits(any_port(), shared(), quick()).unwrap();
    let addr = server.local_addr();
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    // One byte every 50 ms never completes a head: the server must give up
    // on it (408) long before 400 bytes, whatever the pace of each read.
    let mut told = String::new();
    for b in b"GET /metrics HTTP/1.1\r\nX-Slow: "
        .iter()
        .chain([b'a'; 400].iter())
    {
        if slow.write_all(&[*b]).is_err() {
            break; // closed by the server
        }
        let mut buf = [0u8; 256];
        match slow.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => told.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {} // nothing yet
        }
        if !told.is_empty() {
            break;
        }
    }
    assert!(told.starts_with("HTTP/1.1 408 "), "{told:?}");
    assert_eq!(split(&get_metrics(addr)).0, "HTTP/1.1 200 OK");
}

#[test]
fn an_oversized_request_is_refused_and_the_server_goes_on() {
    let server = MetricsServer::start_with_limits(any_port(), shared(), quick()).unwrap();
    let addr = server.local_addr();
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 * 1024));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server stops reading at its limit, so part of this write may fail.
    let _ = s.write_all(&huge);
    let mut told = String::new();
    let _ = s.read_to_string(&mut told);
    assert!(
        told.starts_with("HTTP/1.1 431 "),
        "oversized request answered {told:?}"
    );
    assert_eq!(split(&get_metrics(addr)).0, "HTTP/1.1 200 OK");
}

#[test]
fn a_busy_address_is_a_clear_error() {
    let first = MetricsServer::start(any_port(), shared()).unwrap();
    let err = MetricsServer::start(first.local_addr(), shared()).unwrap_err();
    assert!(matches!(err, MetricsError::AddrInUse { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&first.local_addr().to_string()), "{msg}");
    assert!(
        msg.contains("already in use") && msg.contains("--metrics-addr"),
        "{msg}"
    );
}

#[test]
fn a_privileged_port_without_the_capability_is_a_clear_error() {
    // Root (CI) may bind port 80; this only checks the message where the
    // kernel refuses, and that nothing else is reported instead.
    match MetricsServer::start("127.0.0.1:80".parse().unwrap(), shared()) {
        Ok(server) => {
            eprintln!("skipping: this process may bind port 80 (root or CAP_NET_BIND_SERVICE)");
            server.stop();
        }
        Err(MetricsError::PermissionDenied { addr }) => {
            let msg = MetricsError::PermissionDenied { addr }.to_string();
            assert!(msg.contains("permission denied") && msg.contains("CAP_NET_BIND_SERVICE"));
        }
        Err(MetricsError::AddrInUse { .. }) => {
            eprintln!("skipping: port 80 is already in use here");
        }
        Err(other) => panic!("binding port 80 failed unexpectedly: {other}"),
    }
}

#[test]
fn an_address_of_another_machine_is_a_clear_error() {
    // 192.0.2.0/24 is TEST-NET-1: never assigned to a local interface.
    let err = MetricsServer::start("192.0.2.1:0".parse().unwrap(), shared()).unwrap_err();
    assert!(
        matches!(err, MetricsError::AddrNotAvailable { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("192.0.2.1"));
}

#[test]
fn stop_and_drop_close_the_port() {
    let server = MetricsServer::start(any_port(), shared()).unwrap();
    let addr = server.local_addr();
    server.stop();
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after stop"
    );

    let server = MetricsServer::start(any_port(), shared()).unwrap();
    let addr = server.local_addr();
    drop(server);
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after drop"
    );
}

#[test]
fn idle_connections_do_not_delay_a_scrape() {
    // Thirty clients connect and say nothing for up to 10 s each. Served one
    // at a time, a scrape behind them would wait 30 × 10 s; served side by
    // side it answers at once.
    let limits = ServerLimits {
        read_timeout: Duration::from_secs(10),
        ..quick()
    };
    let server = MetricsServer::start_with_limits(any_port(), shared(), limits).unwrap();
    let addr = server.local_addr();
    let idle: Vec<TcpStream> = (0..30).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Let the server accept them all before the scrape connects.
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let response = get_metrics(addr);
    let took = started.elapsed();
    assert_eq!(split(&response).0, "HTTP/1.1 200 OK");
    // A bound far above a scrape's time and far below one idle client's.
    assert!(took < Duration::from_secs(5), "scrape took {took:?}");
    drop(idle);
}

#[test]
fn connections_beyond_the_limit_are_refused_at_once() {
    let limits = ServerLimits {
        read_timeout: Duration::from_secs(10),
        max_connections: 4,
        ..quick()
    };
    let server = MetricsServer::start_with_limits(any_port(), shared(), limits).unwrap();
    let addr = server.local_addr();
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let response = get_metrics(addr);
    assert_eq!(split(&response).0, "HTTP/1.1 503 Service Unavailable");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Once the idle clients hang up, scrapes are served again.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = get_metrics(addr);
        if split(&response).0 == "HTTP/1.1 200 OK" {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {response}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
