//! `rsspp run` for real, as root (CI is root): a veth pair in a network
//! namespace made for the test, traffic replayed by tcpreplay into one end,
//! the daemon steering the other end's packets over two CPUs. Two elephant
//! flows that the static table puts on the same CPU, among mice.
//!
//! - `--no-balance`: the per-CPU packet rates stay far apart;
//! - balancing: they come within 10% of each other in a few seconds;
//! - every packet the interface received was counted in a bucket and
//!   steered to a CPU: none lost to the table updates.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use std::collections::BTreeMap;
use std::io::BufWriter;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::Netns;
use rsspp_core::{bucket_of, Toeplitz};
use rsspp_trace::generate::build_frame;
use rsspp_trace::{GenPacket, PcapWriter, TimePrecision};

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
/// The daemon's end of the pair (veth0 is the sender's).
const DUT: &str = "veth1";
const RETA: usize = 128;
const PPS: u32 = 12_000;
const SECONDS: u32 = 7;

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the daemon test needs root (CI runs as root)");
        return false;
    }
    let online = rsspp_linux::cpu::CpuList::online().unwrap();
    if online.len() < 2 {
        eprintln!("skipping: balancing needs two CPUs, this machine has one");
        return false;
    }
    true
}

fn packet(src: u32, sport: u16, dport: u16, protocol: u8) -> GenPacket {
    GenPacket {
        timestamp_ns: 0,
        src,
        dst: u32::from(Ipv4Addr::new(10, 0, 0, 2)),
        sport,
        dport,
        protocol,
        tcp_flags: if protocol == 6 { 0x10 } else { 0 },
        wire_len: 64,
        seq: 0,
    }
}

/// Two TCP elephants whose buckets the equal table over `[cpu a, cpu b]`
/// gives to the first CPU (even buckets), and 256 UDP mice; 70% of the
/// packets are the elephants'.
fn write_trace(path: &Path) -> u64 {
    let toeplitz = Toeplitz::default();
    let bucket = |p: &GenPacket| {
        bucket_of(
            toeplitz.hash_ipv4(p.src.to_be_bytes(), p.dst.to_be_bytes(), p.sport, p.dport),
            RETA,
        )
    };
    let src = u32::from(Ipv4Addr::new(10, 0, 0, 1));
    let mut elephants: Vec<GenPacket> = Vec::new();
    for sport in 20_000.. {
        let p = packet(src, sport, 80, 6);
        let b = bucket(&p);
        if b % 2 == 0 && elephants.iter().all(|e| bucket(e) != b) {
            elephants.push(p);
            if elephants.len() == 2 {
                break;
            }
        }
    }
    let mice: Vec<GenPacket> = (0..256u32)
        .map(|i| packet(src + 1 + i, 30_000 + i as u16, 53, 17))
        .collect();
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(BufWriter::new(file), 64, TimePrecision::Micro).unwrap();
    let total = u64::from(PPS * SECONDS);
    let mut frame = [0u8; 64];
    let mut mouse = 0;
    for i in 0..total {
        let mut p = match i % 20 {
            0..=6 => elephants[0],
            7..=13 => elephants[1],
            _ => {
                mouse = (mouse + 1) % mice.len();
                mice[mouse]
            }
        };
        p.timestamp_ns = 1_700_000_000_000_000_000 + i * 1_000_000_000 / u64::from(PPS);
        p.seq = i as u32;
        let n = build_frame(&p, &mut frame);
        w.write_frame(p.timestamp_ns, &frame[..n], n as u32)
            .unwrap();
    }
    w.finish().unwrap();
    total
}

struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(ns: &Netns, port: u16, extra: &[&str], log: PathBuf) -> Daemon {
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args([
                "netns", "exec", &ns.name, RSSPP, "-v", "run", "--iface", DUT,
            ])
            .args(["--cpus", "0,1", "--load-source", "packets"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--duration", &(SECONDS + 8).to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM: the daemon detaches and exits.
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn wait_for_metrics(ns: &Netns, port: u16, daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while ns.scrape_metrics(port).is_none() {
        assert!(
            Instant::now() < deadline,
            "the daemon never served metrics:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cpu_packets(m: &BTreeMap<String, f64>) -> [f64; 2] {
    [
        m[r#"rsspp_cpu_packets_total{iface="veth1",cpu="0"}"#],
        m[r#"rsspp_cpu_packets_total{iface="veth1",cpu="1"}"#],
    ]
}

/// Per-CPU packet rates between two scrapes a second apart.
fn rates(ns: &Netns, port: u16) -> [f64; 2] {
    let a = cpu_packets(&ns.scrape_metrics(port).unwrap());
    std::thread::sleep(Duration::from_secs(1));
    let b = cpu_packets(&ns.scrape_metrics(port).unwrap());
    [b[0] - a[0], b[1] - a[1]]
}

fn imbalance(r: [f64; 2]) -> f64 {
    let (max, min) = (r[0].max(r[1]), r[0].min(r[1]));
    (max - min) / min.max(1.0)
}

fn replay(ns: &Netns, trace: &Path) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, "tcpreplay", "-q"])
        .args(["--pps", &PPS.to_string(), "-i", "veth0"])
        .arg(trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpreplay (scripts/test-deps installs it)")
}

fn rx_packets(ns: &Netns) -> u64 {
    ns.exec(&[
        "cat",
        &format!("/sys/class/net/{DUT}/statistics/rx_packets"),
    ])
    .trim()
    .parse()
    .unwrap()
}

/// A directory of the test's own (the tests run in parallel, and each
/// removes its directory at the end).
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsspp-daemon-veth-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_daemon_balances_two_elephants_over_two_cpus() {
    if !ready() {
        return;
    }
    let dir = scratch("balance");
    let trace = dir.join("elephants.pcap");
    let sent = write_trace(&trace);
    let ns = Netns::with_veth("daemon");
    ns.ip(&["link", "set", "lo", "up"]);
    let port = 19_464;

    // Static table: the two elephants share CPU 0.
    {
        let daemon = Daemon::start(&ns, port, &["--no-balance"], dir.join("static.log"));
        wait_for_metrics(&ns, port, &daemon);
        let mut replay = replay(&ns, &trace);
        std::thread::sleep(Duration::from_secs(2));
        let r = rates(&ns, port);
        assert!(r[0] > 3.0 * r[1], "static table: per-CPU rates {r:?}");
        assert!(imbalance(r) > 1.0);
        replay.wait().unwrap();
        let m = ns.scrape_metrics(port).unwrap();
        assert_eq!(m[r#"rsspp_migrations_total{iface="veth1"}"#], 0.0);
    }

    // Balanced: within 10% in a few seconds; nothing lost.
    let rx_before = rx_packets(&ns);
    let daemon = Daemon::start(&ns, port, &[], dir.join("balanced.log"));
    wait_for_metrics(&ns, port, &daemon);
    let mut replay = replay(&ns, &trace);
    std::thread::sleep(Duration::from_secs(3));
    let r = rates(&ns, port);
    assert!(
        imbalance(r) < 0.10,
        "balanced: per-CPU rates {r:?}\n{}",
        daemon.log()
    );
    let status = replay.wait().unwrap();
    assert!(status.success(), "tcpreplay failed");
    // The counters are published each round; rounds back off to 1 s when
    // the traffic stops.
    std::thread::sleep(Duration::from_millis(2500));
    let m = ns.scrape_metrics(port).unwrap();
    assert!(m[r#"rsspp_migrations_total{iface="veth1"}"#] > 0.0);
    let counted: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("rsspp_bucket_packets_total{"))
        .map(|(_, v)| v)
        .sum();
    let steered: f64 = cpu_packets(&m).iter().sum();
    let received = rx_packets(&ns) - rx_before;
    assert_eq!(received, sent, "the interface's counter");
    assert_eq!(counted as u64, sent, "packets counted in buckets");
    assert_eq!(steered as u64, sent, "packets steered to a CPU");
    drop(daemon);
    assert_eq!(ns.xdp_of(DUT), None, "the daemon detached on SIGTERM");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Waits for the daemon to exit by itself, at most `within`.
fn exits_within(daemon: &mut Daemon, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_hangup_or_quit_detaches_like_a_terminate() {
    if !ready() {
        return;
    }
    let dir = scratch("hangup");
    let ns = Netns::with_veth("daemon-hup");
    ns.ip(&["link", "set", "lo", "up"]);
    let port = 19_465;
    for (signal, name) in [(libc::SIGHUP, "SIGHUP"), (libc::SIGQUIT, "SIGQUIT")] {
        let mut daemon = Daemon::start(&ns, port, &[], dir.join(format!("{name}.log")));
        wait_for_metrics(&ns, port, &daemon);
        // The metrics port is bound before the program is attached.
        let deadline = Instant::now() + Duration::from_secs(10);
        while ns.xdp_of(DUT).is_none() {
            assert!(
                Instant::now() < deadline,
                "never attached:\n{}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(daemon.child.id() as i32, signal) };
        let status = exits_within(&mut daemon, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("still running 5 s after {name}:\n{}", daemon.log()));
        assert!(status.success(), "{name}: {status}\n{}", daemon.log());
        assert_eq!(ns.xdp_of(DUT), None, "{name} left the program attached");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
