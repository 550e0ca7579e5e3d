//! The daemon under load, checked at a real receiver and against the
//! kernel's own tracepoint (root; CI is root).
//!
//! A veth pair in a network namespace made for the test; `rsspp run` steers
//! veth1's packets over two CPUs. A sender writes UDP frames of 256 flows
//! into veth0, each frame carrying its flow's sequence number; a UDP socket
//! behind veth1 counts, per flow, the packets that arrive after a later one
//! of the same flow (reordered).
//!
//! - Moves: random buckets move every round (`--churn`). With the default
//!   order-preserving moves no packet is reordered; with `--moves
//!   immediate` (the mechanism off) moves under load reorder.
//! - Drops: with short CPUMAP queues, the frames the daemon reports dropped
//!   are the ones the kernel's `xdp:xdp_cpumap_enqueue` tracepoint reports.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netns::Netns;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
const DUT: &str = "veth1";
const FLOWS: u32 = 256;
const PORT: u16 = 9_000;
/// Frames per second the sender aims at, and for how long.
const PPS: u64 = 250_000;
const SECONDS: u64 = 5;

/// One test at a time: each wants both CPUs to itself, and the kernel's
/// tracepoint counts every CPUMAP's drops.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the reordering test needs root (CI runs as root)");
        return false;
    }
    if rsspp_linux::cpu::CpuList::online().unwrap().len() < 2 {
        eprintln!("skipping: moving buckets between CPUs needs two CPUs, this machine has one");
        return false;
    }
    true
}

fn mac_of(ns: &Netns, dev: &str) -> [u8; 6] {
    let text = ns.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
    let bytes: Vec<u8> = text
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    bytes.try_into().unwrap()
}

fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet, IPv4 10.0.1.(flow / 256).(flow % 256) -> 10.0.0.2, UDP
/// (20000 + flow) -> PORT, payload: flow and sequence number.
fn frame(dst: [u8; 6], src: [u8; 6], flow: u32, seq: u32) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 8).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 1, (flow >> 8) as u8, flow as u8]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let sum = ip_checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&(20_000 + flow as u16).to_be_bytes());
    udp[2..4].copy_from_slice(&PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&16u16.to_be_bytes());
    f[42..46].copy_from_slice(&flow.to_be_bytes());
    f[46..50].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Sends the flows' frames round-robin out of veth0, paced to [`PPS`],
/// for [`SECONDS`]; returns how many were sent.
fn send(dst: [u8; 6], src: [u8; 6]) -> u64 {
    // SAFETY: plain socket creation; protocol 0 receives nothing.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new("veth0").unwrap();
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(ifindex, 0);
    // SAFETY: zeroed is a valid sockaddr_ll.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&dst);
    let start = Instant::now();
    let total = PPS * SECONDS;
    let mut seqs = vec![0u32; FLOWS as usize];
    let mut sent = 0u64;
    while sent < total {
        // Pace: never ahead of the schedule.
        let due = Duration::from_nanos(sent * 1_000_000_000 / PPS);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        for _ in 0..32 {
            let flow = (sent % u64::from(FLOWS)) as u32;
            let f = frame(dst, src, flow, seqs[flow as usize]);
            seqs[flow as usize] += 1;
            // SAFETY: the frame and the address outlive the call.
            let n = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&addr as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(n, 60, "sendto: {}", std::io::Error::last_os_error());
            sent += 1;
        }
    }
    sent
}

/// What the receiver saw.
#[derive(Debug, Default)]
struct Received {
    packets: u64,
    /// Packets that arrived after a later one of their flow.
    reordered: u64,
}

/// Receives on `socket` until `stop`, checking each flow's order.
fn receive(socket: &std::net::UdpSocket, stop: &AtomicBool) -> Received {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut highest: Vec<Option<u32>> = vec![None; FLOWS as usize];
    let mut r = Received::default();
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        if n < 8 {
            continue;
        }
        let flow = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
        let seq = u32::from_be_bytes(buf[4..8].try_into().unwrap());
        r.packets += 1;
        match highest[flow] {
            Some(h) if seq < h => r.reordered += 1,
            _ => highest[flow] = Some(seq),
        }
    }
    r
}

/// The first sample whose name starts with `prefix` and contains `part`.
fn sample(m: &BTreeMap<String, f64>, prefix: &str, part: &str) -> f64 {
    m.iter()
        .find(|(k, _)| k.starts_with(prefix) && k.contains(part))
        .map_or(0.0, |(_, v)| *v)
}

struct Outcome {
    sent: u64,
    received: Received,
    metrics: BTreeMap<String, f64>,
    log: String,
}

impl Outcome {
    fn migrations(&self) -> f64 {
        sample(&self.metrics, "rsspp_migrations_total", "")
    }

    fn forced(&self) -> f64 {
        sample(&self.metrics, "rsspp_handoffs_total", "forced")
    }
}

/// One run: the daemon with `args` while the sender sends; `during` runs
/// in the meantime (and its result is returned).
fn run<T: Send>(args: &[&str], port: u16, during: impl FnOnce() -> T + Send) -> (Outcome, T) {
    let ns = Netns::with_veth("order");
    ns.ip(&["link", "set", "lo", "up"]);
    ns.ip(&["addr", "add", "10.0.0.2/24", "dev", DUT]);
    for key in ["all", "default", DUT] {
        ns.exec(&["sysctl", "-qw", &format!("net.ipv4.conf.{key}.rp_filter=0")]);
    }
    let (dst, src) = (mac_of(&ns, DUT), mac_of(&ns, "veth0"));
    let log = std::env::temp_dir().join(format!("rsspp-load-{port}-{}.log", std::process::id()));
    let mut daemon: Child = Command::new("ip")
        .args([
            "netns", "exec", &ns.name, RSSPP, "-v", "run", "--iface", DUT,
        ])
        .args(["--cpus", "0,1"])
        .args(args)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--duration", &(SECONDS + 10).to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ns.scrape_metrics(port).is_none() || ns.xdp_of(DUT).is_none() {
        assert!(Instant::now() < deadline, "the daemon never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stop = AtomicBool::new(false);
    let (sent, received, extra) = ns.run(|| {
        let socket = std::net::UdpSocket::bind(("0.0.0.0", PORT)).unwrap();
        let big: libc::c_int = 64 << 20;
        // SAFETY: a valid socket and option value.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&big as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        std::thread::scope(|s| {
            let receiver = s.spawn(|| receive(&socket, &stop));
            let sender = s.spawn(|| send(dst, src));
            let extra = during();
            let sent = sender.join().unwrap();
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, Ordering::Relaxed);
            (sent, receiver.join().unwrap(), extra)
        })
    });
    // The last counters are published with the next round.
    std::thread::sleep(Duration::from_millis(1200));
    let m = ns.scrape_metrics(port).expect("metrics after the run");
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    (
        Outcome {
            sent,
            received,
            metrics: m,
            log,
        },
        extra,
    )
}

fn churn(moves: &str, port: u16) -> Outcome {
    let args = ["--no-balance", "--churn", "32", "--moves", moves];
    run(&args, port, || ()).0
}

#[test]
fn moves_under_load_keep_each_flows_order() {
    if !ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ordered = churn("ordered", 19_470);
    eprintln!(
        "ordered: sent {}, received {}, reordered {}, {} moves, {} forced",
        ordered.sent,
        ordered.received.packets,
        ordered.received.reordered,
        ordered.migrations(),
        ordered.forced()
    );
    assert!(
        ordered.migrations() >= 1_000.0,
        "too few moves to tell: {}\n{}",
        ordered.migrations(),
        ordered.log
    );
    assert!(
        ordered.received.packets as f64 > 0.9 * ordered.sent as f64,
        "most packets arrive: {:?} of {}",
        ordered.received,
        ordered.sent
    );
    assert_eq!(
        ordered.received.reordered,
        0,
        "order-preserving moves reordered packets ({} forced handoffs)",
        ordered.forced()
    );

    // The same with the mechanism off: the test can fail. Whether an
    // immediate move overtakes a packet still queued on the old CPU
    // depends on the two CPUs' timing (6 to 256 per 1,000 moves here, and
    // once none in a run): up to three runs must show it.
    let mut reordered = 0;
    for attempt in 1..=3 {
        let immediate = churn("immediate", 19_471);
        eprintln!(
            "immediate (run {attempt}): sent {}, received {}, reordered {}, {} moves",
            immediate.sent,
            immediate.received.packets,
            immediate.received.reordered,
            immediate.migrations()
        );
        assert!(immediate.migrations() >= 1_000.0, "{}", immediate.log);
        reordered = immediate.received.reordered;
        if reordered > 0 {
            break;
        }
    }
    assert!(
        reordered > 0,
        "immediate moves under load reordered nothing in three runs: the test cannot tell"
    );
}

/// A trace instance of the kernel's own, summing the `drops` of the
/// `xdp:xdp_cpumap_enqueue` events while it is open.
struct CpumapDropTrace {
    dir: std::path::PathBuf,
}

impl CpumapDropTrace {
    /// `None` when tracefs cannot be had (printed).
    fn start() -> Option<Self> {
        let root = std::path::Path::new("/sys/kernel/tracing");
        if !root.join("instances").is_dir() {
            let _ = Command::new("mount")
                .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
                .status();
        }
        if !root.join("events/xdp/xdp_cpumap_enqueue").is_dir() {
            eprintln!("skipping the kernel's count: no tracefs or no xdp:xdp_cpumap_enqueue");
            return None;
        }
        let dir = root.join(format!("instances/rsspp-drops-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let event = dir.join("events/xdp/xdp_cpumap_enqueue");
        std::fs::write(dir.join("buffer_size_kb"), "16384").unwrap();
        std::fs::write(event.join("filter"), "drops > 0").unwrap();
        std::fs::write(event.join("enable"), "1").unwrap();
        Some(Self { dir })
    }

    /// Stops tracing; the frames dropped, by target CPU, and whether the
    /// buffer overflowed.
    fn stop(self) -> (BTreeMap<u32, u64>, bool) {
        let event = self.dir.join("events/xdp/xdp_cpumap_enqueue");
        std::fs::write(event.join("enable"), "0").unwrap();
        let text = std::fs::read_to_string(self.dir.join("trace")).unwrap();
        let mut drops = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let field = |name: &str| -> Option<u64> {
                let at = line.find(&format!(" {name}="))? + name.len() + 2;
                line[at..].split_whitespace().next()?.parse().ok()
            };
            if let (Some(d), Some(cpu)) = (field("drops"), field("to_cpu")) {
                *drops.entry(cpu as u32).or_insert(0) += d;
            }
        }
        let stats =
            std::fs::read_to_string(self.dir.join("per_cpu/cpu0/stats")).unwrap_or_default();
        let overrun = stats
            .lines()
            .any(|l| l.starts_with("overrun:") && l.split_whitespace().nth(1) != Some("0"));
        drop(self);
        (drops, overrun)
    }
}

impl Drop for CpumapDropTrace {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("events/xdp/xdp_cpumap_enqueue/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn the_drops_reported_are_the_ones_the_kernel_saw() {
    if !ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(trace) = CpumapDropTrace::start() else {
        return;
    };
    // Queues of 8 frames overflow at this rate.
    let args = ["--no-balance", "--cpumap-queue", "8"];
    let (out, ()) = run(&args, 19_472, || ());
    let (kernel, overrun) = trace.stop();
    assert!(
        !overrun,
        "the trace buffer overflowed: the kernel's count is short"
    );
    let reported: BTreeMap<u32, u64> = [0u32, 1]
        .into_iter()
        .map(|cpu| {
            let v = sample(
                &out.metrics,
                "rsspp_dropped_packets_total",
                &format!("cpu=\"{cpu}\""),
            );
            (cpu, v as u64)
        })
        .filter(|&(_, v)| v > 0)
        .collect();
    let lost = out.sent - out.received.packets;
    eprintln!(
        "drops: kernel {kernel:?}, reported {reported:?}; sent {}, received {}",
        out.sent, out.received.packets
    );
    let total: u64 = kernel.values().sum();
    assert!(
        total > 0,
        "no drop to compare: the queues kept up\n{}",
        out.log
    );
    assert_eq!(
        reported, kernel,
        "per CPU, reported vs the kernel's tracepoint"
    );
    assert!(lost >= total, "the receiver missed fewer than were dropped");
}
