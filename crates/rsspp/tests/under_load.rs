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

#[path = "common/daemon_udp.rs"]
#[allow(dead_code)]
mod daemon_udp;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use daemon_udp::{receive, receiving_pair, send_paced, udp_receiver, Daemon, Received};

const FLOWS: u32 = 256;
/// Frames per second the sender aims at, and for how long.
const PPS: u64 = 250_000;
const SECONDS: u64 = 5;

/// One test at a time: each wants both CPUs to itself, and the kernel's
/// tracepoint counts every CPUMAP's drops.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ready() -> bool {
    daemon_udp::ready("moving buckets under load")
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
    let (ns, dst, src) = receiving_pair("order");
    let daemon = Daemon::start(&ns, &format!("load-{port}"), args, port, SECONDS + 10);
    let stop = AtomicBool::new(false);
    let (sent, received, extra) = ns.run(|| {
        let socket = udp_receiver();
        std::thread::scope(|s| {
            let receiver = s.spawn(|| receive(&socket, &stop));
            let sender =
                s.spawn(|| send_paced(dst, src, PPS, SECONDS, |n| (n % u64::from(FLOWS)) as u32));
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
    let log = daemon.stop();
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
    // depends on the two CPUs' timing (6 to 256 per 1,000 moves here; on
    // 2026-11-28 four runs of nine saw none, three of them in a row in one
    // fresh clone): up to five runs must show it.
    let mut reordered = 0;
    for attempt in 1..=5 {
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
        "immediate moves under load reordered nothing in five runs: the test cannot tell"
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
