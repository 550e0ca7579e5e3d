//! `rsspp serve` for real, as root (CI is root): the server in one network
//! namespace, a client of our own in another, a veth pair between them.
//!
//! On veth the kernel processes a received packet on the CPU that sent it
//! (no RSS), so where packets land is chosen by the test:
//!
//! - With `rsspp run --mode software` steering the server's end, each
//!   packet is redirected to the CPU its bucket maps to in the daemon's
//!   table, whatever CPU the client sent it from: the client is pinned to
//!   CPU 0, so without steering every connection would arrive on CPU 0.
//!   `rsspp serve --iface veth1` shares the daemon's table and key maps.
//!   Affinity on: ≥ 95% of the connections are served by the CPU that
//!   processed their packets (`SO_INCOMING_CPU`); off: about half (1/N).
//!   This shows the daemon's steering and the library's placement agree
//!   connection by connection; it does not show a NIC doing the steering.
//! - A core slowed down (`--slow`): the other steals its connections, and
//!   every request the client made is answered.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
const SERVER: &str = "10.77.0.2";

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the serve tests need root (CI runs as root)");
        return false;
    }
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online < 2 {
        eprintln!("skipping: needs two CPUs");
        return false;
    }
    true
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces, `cli` (veth0, 10.77.0.1) and `srv` (veth1, 10.77.0.2),
/// deleted on drop.
struct Pair {
    cli: String,
    srv: String,
}

impl Pair {
    fn new() -> Pair {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let tag = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pair = Pair {
            cli: format!("rsspp-acc-c-{tag}"),
            srv: format!("rsspp-acc-s-{tag}"),
        };
        run("ip", &["netns", "add", &pair.cli]);
        run("ip", &["netns", "add", &pair.srv]);
        run(
            "ip",
            &[
                "link", "add", "veth0", "netns", &pair.cli, "type", "veth", "peer", "name",
                "veth1", "netns", &pair.srv,
            ],
        );
        for (ns, dev, addr) in [
            (&pair.cli, "veth0", "10.77.0.1/24"),
            (&pair.srv, "veth1", "10.77.0.2/24"),
        ] {
            run("ip", &["-n", ns, "addr", "add", addr, "dev", dev]);
            run("ip", &["-n", ns, "link", "set", dev, "up"]);
            run("ip", &["-n", ns, "link", "set", "lo", "up"]);
        }
        // The daemon's frames go through a CPUMAP, which rebuilds the skb
        // without veth's checksum-offload state (CHECKSUM_PARTIAL): TCP
        // would drop them as corrupt. The client computes its checksums.
        run(
            "ip",
            &[
                "netns", "exec", &pair.cli, "ethtool", "-K", "veth0", "tx", "off",
            ],
        );
        pair
    }

    fn spawn(&self, ns: &str, args: &[&str]) -> Proc {
        Proc(Some(
            Command::new("ip")
                .args(["netns", "exec", ns, RSSPP])
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        ))
    }

    /// `rsspp run` on veth1, software steering over CPUs 0 and 1, the
    /// table kept still (--no-balance); waits until attached.
    fn daemon(&self, seconds: u32) -> Proc {
        let child = self.spawn(
            &self.srv,
            &[
                "run",
                "--iface",
                "veth1",
                "--mode",
                "software",
                "--cpus",
                "0,1",
                "--no-balance",
                "--no-metrics",
                "--duration",
                &seconds.to_string(),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let link = run("ip", &["-n", &self.srv, "link", "show", "veth1"]);
            if link.contains("prog/xdp") {
                return child;
            }
            assert!(Instant::now() < deadline, "the daemon never attached");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn server(&self, args: &[&str], seconds: f64) -> Proc {
        let listen = format!("{SERVER}:8080");
        let seconds = seconds.to_string();
        let mut all = vec![
            "serve",
            "--listen",
            &listen,
            "--cpus",
            "0,1",
            "--duration",
            &seconds,
            "--json",
        ];
        all.extend_from_slice(args);
        let child = self.spawn(&self.srv, &all);
        // Listening once a connection from the client's side succeeds.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !in_netns(&self.cli, || {
            TcpStream::connect_timeout(&addr(), Duration::from_millis(200)).is_ok()
        }) {
            assert!(Instant::now() < deadline, "the server never listened");
            std::thread::sleep(Duration::from_millis(100));
        }
        child
    }
}

/// A child process, stopped (SIGTERM) and waited for if dropped.
struct Proc(Option<Child>);

impl Proc {
    /// Waits for it to exit by itself.
    fn finish(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // SAFETY: kill on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.cli, &self.srv] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn addr() -> SocketAddr {
    format!("{SERVER}:8080").parse().unwrap()
}

fn enter(ns: &str) {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).expect("namespace file");
    // SAFETY: a valid namespace fd; affects the calling thread only.
    let ret = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(ret, 0, "setns: {}", std::io::Error::last_os_error());
}

fn pin(cpu: usize) {
    // SAFETY: an empty set with one CPU set, in range.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns);
            f()
        })
        .join()
        .unwrap()
    })
}

/// What the client saw.
#[derive(Debug, Default)]
struct Seen {
    connections: u64,
    answered: u64,
    /// Requests refused with an error the client saw (reset, refused).
    errors: u64,
    /// Requests never answered (timed out).
    lost: u64,
}

/// One request on `s`; true when a 200 came back in full.
fn request(s: &mut TcpStream, close: bool) -> std::io::Result<bool> {
    let req = if close {
        "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    } else {
        "GET / HTTP/1.1\r\nHost: t\r\n\r\n"
    };
    s.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Ok(false);
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return Ok(text.starts_with("HTTP/1.1 200"));
            }
        }
    }
}

/// `threads` client threads in `ns`, each pinned to `cpus[i % len]` if
/// given, each opening `conns` connections one after the other with
/// `reqs` keep-alive requests each (the last asks to close).
fn load(ns: &str, threads: usize, cpus: &[usize], conns: usize, reqs: usize) -> Seen {
    let results: Vec<Seen> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    enter(ns);
                    if !cpus.is_empty() {
                        pin(cpus[i % cpus.len()]);
                    }
                    let mut seen = Seen::default();
                    for _ in 0..conns {
                        let mut stream =
                            match TcpStream::connect_timeout(&addr(), Duration::from_secs(5)) {
                                Ok(s) => s,
                                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                                    seen.lost += reqs as u64;
                                    continue;
                                }
                                Err(_) => {
                                    seen.errors += reqs as u64;
                                    continue;
                                }
                            };
                        seen.connections += 1;
                        stream
                            .set_read_timeout(Some(Duration::from_secs(5)))
                            .unwrap();
                        stream.set_nodelay(true).unwrap();
                        for r in 0..reqs {
                            match request(&mut stream, r + 1 == reqs) {
                                Ok(true) => seen.answered += 1,
                                Ok(false) => {
                                    seen.errors += (reqs - r) as u64;
                                    break;
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) =>
                                {
                                    seen.lost += (reqs - r) as u64;
                                    break;
                                }
                                Err(_) => {
                                    seen.errors += (reqs - r) as u64;
                                    break;
                                }
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    results.into_iter().fold(Seen::default(), |a, b| Seen {
        connections: a.connections + b.connections,
        answered: a.answered + b.answered,
        errors: a.errors + b.errors,
        lost: a.lost + b.lost,
    })
}

fn summary(server: Proc) -> Value {
    let out = server.finish();
    assert!(
        out.status.success(),
        "rsspp serve failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn accepted(s: &Value, worker: usize) -> u64 {
    s["workers"][worker]["accepted"].as_u64().unwrap()
}

/// The daemon steers, the client sends everything from CPU 0: the share of
/// connections served on the CPU that processed their packets. Returns the
/// server's summary and what the client saw.
fn locality(affinity: &str) -> (Value, Seen) {
    let pair = Pair::new();
    let daemon = pair.daemon(30);
    let mut args = vec!["--affinity", affinity, "--work-us", "20"];
    if affinity == "on" {
        args.extend(["--iface", "veth1"]);
    }
    let server = pair.server(&args, 6.0);
    // The readiness probe's connections count too: 4 threads x 60
    // connections x 5 requests, all sent from CPU 0.
    let seen = load(&pair.cli, 4, &[0], 60, 5);
    let s = summary(server);
    // SIGTERM: the daemon detaches before the namespaces go.
    drop(daemon);
    (s, seen)
}

#[test]
fn affinity_on_serves_connections_where_their_packets_were_processed() {
    if !ready() {
        return;
    }
    let (s, seen) = locality("on");
    eprintln!("affinity on: {s}\nclient: {seen:?}");
    assert_eq!((seen.errors, seen.lost), (0, 0), "{seen:?}");
    assert_eq!(seen.answered, 4 * 60 * 5);
    assert_eq!(s["table"], "daemon");
    let share = s["local_share"].as_f64().unwrap();
    assert!(share >= 0.95, "local_share {share} under 0.95");
    // The table spreads the connections over both CPUs (the client sent
    // them all from CPU 0).
    let (a, b) = (accepted(&s, 0), accepted(&s, 1));
    assert!(a.min(b) * 4 > a + b, "connections per CPU {a} / {b}");
    assert!(s["select"]["table"].as_u64().unwrap() >= 240);
}

#[test]
fn affinity_off_serves_about_half_where_their_packets_were_processed() {
    if !ready() {
        return;
    }
    let (s, seen) = locality("off");
    eprintln!("affinity off: {s}\nclient: {seen:?}");
    assert_eq!((seen.errors, seen.lost), (0, 0), "{seen:?}");
    let share = s["local_share"].as_f64().unwrap();
    // Plain SO_REUSEPORT hashing: 1/N of the connections by chance.
    assert!(
        (0.3..=0.7).contains(&share),
        "local_share {share}, not about 1/2"
    );
    // What the test above asks of affinity on fails here.
    assert!(share < 0.95);
}

#[test]
fn a_slowed_cores_connections_are_stolen_and_every_request_answered() {
    if !ready() {
        return;
    }
    let pair = Pair::new();
    // CPU 1's worker spends 20 ms on each request: its accept queue
    // fills while CPU 0's worker idles. Our own table, no daemon.
    let server = pair.server(
        &["--affinity", "on", "--slow", "1:20000", "--backlog", "16"],
        8.0,
    );
    let seen = load(&pair.cli, 16, &[], 12, 1);
    let s = summary(server);
    eprintln!("slowed: {s}\nclient: {seen:?}");
    assert_eq!((seen.errors, seen.lost), (0, 0), "{seen:?}");
    assert_eq!(seen.answered, 16 * 12);
    let stolen_by_0 = s["workers"][0]["stolen"].as_u64().unwrap();
    let stolen_from_1 = s["workers"][1]["stolen_from"].as_u64().unwrap();
    assert!(stolen_by_0 > 0 && stolen_by_0 == stolen_from_1, "{s}");
    // The fast core served most of the connections.
    assert!(accepted(&s, 0) > 2 * accepted(&s, 1), "{s}");
}
