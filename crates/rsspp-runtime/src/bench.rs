//! `rsspp bench nf`: what the runtime costs per packet, on a veth pair in a
//! network namespace of its own, with a bounded traffic source.
//!
//! A sender thread (pinned, in the namespace) transmits a fixed number of
//! 64-byte UDP frames of many flows into `veth0` as fast as the kernel takes
//! them; the runtime receives them on `veth1`. Every variant runs the same
//! traffic, and the variants alternate round after round (this machine is
//! shared and noisy: the figures are medians over the rounds, and each ratio
//! the median of the rounds' ratios, so both sides of a ratio ran within
//! seconds of each other):
//!
//! - `kernel`: one plain TPACKET_V3 socket read by one thread, counting
//!   frames — the kernel's own AF_PACKET receive path, no fanout, no
//!   program, no processing (the kernel side nobody here wrote);
//! - `tcpdump`: Debian's `tcpdump` (libpcap's TPACKET_V3 reader) on `veth1`,
//!   writing the frames' first 64 bytes to `/dev/null` — a whole userspace
//!   consumer nobody here wrote, its CPU time read from
//!   `/proc/PID/task/*/schedstat` and its frame count from its own exit
//!   report (left out, and said, when tcpdump is not installed);
//! - per chain, `static`: the runtime with per-bucket tables and a static
//!   table (`--no-balance`); `shared`: the same on one shared, locked flow
//!   table (`--table shared`); `rsspp`: RSS++ proper — rebalancing every
//!   round plus `--churn` random moves, each an order-preserving handoff;
//!   `afxdp`: `static` on the `afxdp` backend (AF_XDP sockets in copy mode,
//!   steered by the XDP program) instead of the fanout group.
//!
//! Cost per packet is the CPU time of the receiving threads (the workers,
//! or the plain reader) from the first frame sent until a short drain after
//! the last, over the frames they took: thread CPU time (the scheduler's,
//! `/proc/self/task/TID/schedstat`), so a thread preempted by the sender is
//! not charged for it, and start-up and idle polling before the traffic are
//! left out. The kernel's side (transmit, the veth's receive, AF_PACKET
//! delivery and the fanout program) runs in the sender's thread and is
//! reported apart, per frame sent.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rsspp_trace::generate::{build_frame, GenConfig, Generator, Preset};
use serde::Serialize;

use rsspp_core::RssKey;

use crate::afpacket::{self, pin_to, RingConfig, RxRing, TxSocket};
use crate::error::RuntimeError;
use crate::nf::{dpi, firewall::Rules, nat::Pool, Chain, ChainConfig};
use crate::runtime::{Backend, Config, TableMode};

/// The benchmark's settings.
#[derive(Debug, Clone)]
pub struct BenchNfConfig {
    /// The workers' CPUs (the plain reader runs on the first).
    pub cpus: Vec<u32>,
    /// The sender's CPU.
    pub sender_cpu: u32,
    /// Frames sent per run.
    pub frames: u64,
    /// Distinct UDP flows in the traffic.
    pub flows: usize,
    /// Rounds: every variant runs once a round.
    pub rounds: usize,
    /// Random buckets moved every round in the `rsspp` variant.
    pub churn: usize,
    /// Chains to measure, each as `--chain` spells it.
    pub chains: Vec<String>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchNfError {
    /// A setting out of range.
    #[error("{0}")]
    Config(String),
    /// The namespace or its veth pair could not be made.
    #[error("setting up the benchmark's namespace: `{command}` failed: {detail}")]
    Setup {
        /// The command.
        command: String,
        /// What it said.
        detail: String,
    },
    /// The runtime refused to start or failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A benchmark thread panicked.
    #[error("a benchmark thread panicked")]
    Panicked,
}

/// What one run measured.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sample {
    /// Frames sent.
    pub sent: u64,
    /// Frames the receiving threads took from their rings.
    pub received: u64,
    /// CPU time of the receiving threads while the traffic flowed (and a
    /// drain after it), nanoseconds.
    pub cpu_ns: u64,
    /// CPU time of the sender's thread, nanoseconds.
    pub sender_cpu_ns: u64,
    /// Wall time of the sending, nanoseconds.
    pub send_ns: u64,
    /// Buckets moved.
    pub migrations: u64,
}

impl Sample {
    /// Receiving CPU time per frame taken, nanoseconds.
    pub fn ns_per_packet(&self) -> f64 {
        self.cpu_ns as f64 / self.received.max(1) as f64
    }

    /// Sender's CPU time per frame sent, nanoseconds.
    pub fn sender_ns_per_packet(&self) -> f64 {
        self.sender_cpu_ns as f64 / self.sent.max(1) as f64
    }
}

/// One variant over the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    /// `kernel`, `tcpdump`, `static`, `shared`, `rsspp` or `afxdp`.
    pub variant: &'static str,
    /// Median receiving CPU time per frame, nanoseconds.
    pub ns_per_packet: f64,
    /// Frames a second one receiving core would take at that cost.
    pub pps_per_core: f64,
    /// Median sender CPU time per frame (the kernel's side), nanoseconds.
    pub sender_ns_per_packet: f64,
    /// Median frames received per second of sending, all cores together.
    pub received_pps: f64,
    /// Median share of the frames sent that were received.
    pub received_share: f64,
    /// Each round's run.
    pub samples: Vec<Sample>,
}

/// One chain's variants and ratios.
#[derive(Debug, Clone, Serialize)]
pub struct ChainReport {
    /// The chain, as `--chain` spells it.
    pub chain: String,
    /// `static`, `shared`, `rsspp`, `afxdp`.
    pub variants: Vec<VariantReport>,
    /// Per-bucket against shared table: shared's cost over static's
    /// (throughput ratio per core; the paper: 1.2).
    pub per_bucket_speedup: f64,
    /// RSS++'s cost (counting, rebalancing, churn and handoffs) over the
    /// static table's (1.0: free).
    pub rsspp_cost_ratio: f64,
    /// The static runtime's cost over the plain kernel reader's.
    pub vs_kernel_ratio: f64,
    /// The static runtime's cost over tcpdump's (`None` without tcpdump).
    pub vs_tcpdump_ratio: Option<f64>,
    /// The static runtime's cost on the `afxdp` backend over the same on
    /// `afpacket` (below 1.0: AF_XDP is cheaper for the workers).
    pub afxdp_vs_afpacket_ratio: f64,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct BenchNfReport {
    /// The workers' CPUs.
    pub cpus: Vec<u32>,
    /// The sender's CPU.
    pub sender_cpu: u32,
    /// Frames sent per run.
    pub frames: u64,
    /// Flows in the traffic.
    pub flows: usize,
    /// Rounds.
    pub rounds: usize,
    /// `--churn` of the `rsspp` variant.
    pub churn: usize,
    /// The plain kernel reader.
    pub kernel: VariantReport,
    /// Debian's tcpdump on the same veth; `None` when it is not installed.
    pub tcpdump: Option<VariantReport>,
    /// Per chain.
    pub chains: Vec<ChainReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Kernel,
    Tcpdump,
    Static,
    Shared,
    Rsspp,
    Afxdp,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Kernel => "kernel",
            Variant::Tcpdump => "tcpdump",
            Variant::Static => "static",
            Variant::Shared => "shared",
            Variant::Rsspp => "rsspp",
            Variant::Afxdp => "afxdp",
        }
    }
}

/// A network namespace with `veth0 <-> veth1`, deleted on drop (the pair
/// goes with it). The `afxdp` variant attaches a plain XDP program to veth1
/// through a BPF link, closed when the runtime returns, before the
/// namespace goes; never a device-bound one.
struct Namespace {
    name: String,
}

fn ip(args: &[&str]) -> Result<(), BenchNfError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| BenchNfError::Setup {
            command: format!("ip {}", args.join(" ")),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(BenchNfError::Setup {
            command: format!("ip {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

impl Namespace {
    fn new() -> Result<Self, BenchNfError> {
        let name = format!("rsspp-bench-nf-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        // From here on, a failure deletes the namespace.
        let ns = Namespace { name };
        let n = ns.name.as_str();
        ip(&[
            "netns",
            "exec",
            n,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        ip(&[
            "-n", n, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
        ])?;
        ip(&["-n", n, "link", "set", "veth0", "up"])?;
        ip(&["-n", n, "link", "set", "veth1", "up"])?;
        Ok(ns)
    }

    /// Moves the calling thread into the namespace.
    fn enter(&self) -> Result<(), BenchNfError> {
        let setup = |detail: String| BenchNfError::Setup {
            command: format!("setns {}", self.name),
            detail,
        };
        let file = std::fs::File::open(format!("/run/netns/{}", self.name))
            .map_err(|e| setup(e.to_string()))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a valid namespace fd; affects the calling thread only.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(setup(std::io::Error::last_os_error().to_string()));
        }
        Ok(())
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The traffic: `flows` equal UDP flows of 64-byte frames, one frame of
/// each in turn (what `rsspp trace gen --preset udp-flows` makes).
fn traffic(flows: usize) -> Result<Vec<[u8; 64]>, BenchNfError> {
    let mut config = GenConfig::new(Preset::UdpFlows);
    config.flows = Some(flows);
    config.frame_size = Some(64);
    // One frame of every flow, at the preset's 1 Mpps.
    config.duration_s = (flows as f64 / 1e6).max(1e-3);
    let mut gen = Generator::new(&config).map_err(|e| BenchNfError::Config(e.to_string()))?;
    let mut frames = Vec::new();
    while let Some(batch) = gen.next_batch() {
        for p in batch {
            let mut buf = [0u8; 64];
            build_frame(p, &mut buf);
            frames.push(buf);
        }
    }
    if frames.is_empty() {
        return Err(BenchNfError::Config("the generator made no frame".into()));
    }
    Ok(frames)
}

/// How long the receiver gets to start before the traffic.
const SETTLE: Duration = Duration::from_millis(400);
/// How long it gets to drain its ring after the traffic.
const DRAIN: Duration = Duration::from_millis(200);

/// The name of the plain reader's thread.
const READER_THREAD: &str = "rsspp-bench-rx";
/// The prefix of the runtime's worker threads' names.
const WORKER_THREADS: &str = "rsspp-nf-";

/// CPU time so far of this process's threads whose name starts with
/// `prefix`, nanoseconds, by thread id (the scheduler's account, the first
/// field of `/proc/self/task/TID/schedstat`).
fn threads_cpu_ns(prefix: &str) -> Vec<(u64, u64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let path = task.path();
        let named = std::fs::read_to_string(path.join("comm"))
            .is_ok_and(|c| c.trim_end().starts_with(prefix));
        let tid = task.file_name().to_str().and_then(|t| t.parse().ok());
        let ns = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        if let (true, Some(tid), Some(ns)) = (named, tid, ns) {
            out.push((tid, ns));
        }
    }
    out
}

/// CPU time the threads of `before` spent since.
fn spent_since(prefix: &str, before: &[(u64, u64)]) -> u64 {
    threads_cpu_ns(prefix)
        .iter()
        .filter_map(|(tid, now)| {
            let (_, then) = before.iter().find(|(t, _)| t == tid)?;
            Some(now.saturating_sub(*then))
        })
        .sum()
}

/// The calling thread's CPU time, nanoseconds.
fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sends `count` frames from `veth0`, cycling through `frames`; returns
/// (sent, sender CPU ns, wall ns).
fn send(frames: &[[u8; 64]], count: u64, cpu: u32) -> Result<(u64, u64, u64), RuntimeError> {
    pin_to(cpu)?;
    let mut tx = TxSocket::new(afpacket::ifindex("veth0")?)?;
    let (cpu0, t0) = (own_cpu_ns(), Instant::now());
    let mut sent = 0;
    for f in frames.iter().cycle().take(count as usize) {
        if tx.send(f) {
            sent += 1;
        }
    }
    Ok((sent, own_cpu_ns() - cpu0, t0.elapsed().as_nanos() as u64))
}

/// The plain reader: counts frames until stopped.
fn read_plain(cpu: u32, stop: &AtomicBool) -> Result<u64, RuntimeError> {
    pin_to(cpu)?;
    let mut ring = RxRing::plain(afpacket::ifindex("veth1")?, RingConfig::default())?;
    let mut frames = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = ring.next_block(|f| {
            std::hint::black_box(f.data.first());
        });
        if n == 0 {
            ring.wait(1);
        }
        frames += n as u64;
    }
    Ok(frames)
}

/// Whether Debian's `tcpdump` is on the PATH.
fn tcpdump_installed() -> bool {
    Command::new("tcpdump")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// CPU time so far of every thread of process `pid`, nanoseconds.
fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// The frames tcpdump says it captured, from its exit report on standard
/// error (`N packets captured`).
fn tcpdump_captured(report: &str) -> Option<u64> {
    report.lines().find_map(|l| {
        let (n, rest) = l.trim().split_once(' ')?;
        matches!(rest, "packets captured" | "packet captured")
            .then(|| n.parse().ok())
            .flatten()
    })
}

/// One run with tcpdump as the receiver: started in the namespace on
/// `veth1` (headers only, to `/dev/null`), pinned to the first worker CPU;
/// its CPU time is measured like the workers', from just before the first
/// frame sent to the end of the drain; its frame count is its own.
fn tcpdump_run(
    ns: &Namespace,
    config: &BenchNfConfig,
    frames: &[[u8; 64]],
) -> Result<Sample, BenchNfError> {
    let setup = |detail: String| BenchNfError::Setup {
        command: "tcpdump -i veth1 -n -p -s 64 -B 16384 -w /dev/null".into(),
        detail,
    };
    let mut child = Command::new("ip")
        .args([
            "netns", "exec", &ns.name, "tcpdump", "-i", "veth1", "-n", "-p",
        ])
        .args(["-s", "64", "-B", "16384", "-w", "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| setup(e.to_string()))?;
    // `ip netns exec` execs tcpdump: the child's pid is tcpdump's.
    let pid = child.id();
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stop = |child: &mut std::process::Child| {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
        let _ = child.wait();
    };
    let mut said = String::new();
    let listening = loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) if line.contains("listening on") => break true,
            Ok(line) => said += &(line + "\n"),
            Err(_) => break false,
        }
    };
    if !listening {
        stop(&mut child);
        let _ = lines.join();
        return Err(setup(format!(
            "it did not start listening: {}",
            said.trim()
        )));
    }
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a zeroed set, one CPU added, a process we started.
    unsafe {
        libc::CPU_SET(config.cpus[0] as usize, &mut set);
        libc::sched_setaffinity(pid as libc::pid_t, std::mem::size_of_val(&set), &set);
    }
    std::thread::sleep(SETTLE);
    let result = std::thread::scope(|s| {
        s.spawn(|| -> Result<(u64, u64, u64, u64), BenchNfError> {
            ns.enter()?;
            let before = process_cpu_ns(pid);
            let (sent, sender_cpu_ns, send_ns) = send(frames, config.frames, config.sender_cpu)?;
            std::thread::sleep(DRAIN);
            Ok((sent, sender_cpu_ns, send_ns, process_cpu_ns(pid) - before))
        })
        .join()
        .map_err(|_| BenchNfError::Panicked)?
    });
    stop(&mut child);
    let _ = lines.join();
    let report: String = rx.try_iter().map(|l| l + "\n").collect();
    let (sent, sender_cpu_ns, send_ns, cpu_ns) = result?;
    let received = tcpdump_captured(&report).ok_or_else(|| {
        setup(format!(
            "no \"packets captured\" line in its exit report: {}",
            report.trim()
        ))
    })?;
    Ok(Sample {
        sent,
        received,
        cpu_ns,
        sender_cpu_ns,
        send_ns,
        migrations: 0,
    })
}

fn one_run(
    ns: &Namespace,
    config: &BenchNfConfig,
    frames: &[[u8; 64]],
    variant: Variant,
    chain: &Chain,
    key: &RssKey,
) -> Result<Sample, BenchNfError> {
    std::thread::scope(|s| {
        let h = s.spawn(|| -> Result<Sample, BenchNfError> {
            ns.enter()?;
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                let receiver = std::thread::Builder::new()
                    .name(READER_THREAD.into())
                    .spawn_scoped(s, || -> Result<(u64, u64), RuntimeError> {
                        if variant == Variant::Kernel {
                            return Ok((read_plain(config.cpus[0], &stop)?, 0));
                        }
                        let mut rc = Config::new("veth1", config.cpus.clone());
                        rc.key = key.clone();
                        if variant == Variant::Afxdp {
                            rc.backend = Backend::AfXdp;
                        }
                        rc.table = if variant == Variant::Shared {
                            TableMode::Shared
                        } else {
                            TableMode::PerBucket
                        };
                        rc.balance = variant == Variant::Rsspp;
                        rc.churn = if variant == Variant::Rsspp {
                            config.churn
                        } else {
                            0
                        };
                        let out = crate::runtime::run(&rc, |_| chain.clone(), &stop)?;
                        Ok((out.summary.received, out.summary.migrations))
                    })
                    .map_err(|_| BenchNfError::Panicked)?;
                std::thread::sleep(SETTLE);
                let threads = if variant == Variant::Kernel {
                    READER_THREAD
                } else {
                    WORKER_THREADS
                };
                let before = threads_cpu_ns(threads);
                let sent = send(frames, config.frames, config.sender_cpu);
                std::thread::sleep(DRAIN);
                let cpu_ns = spent_since(threads, &before);
                stop.store(true, Ordering::Relaxed);
                let received = receiver.join().map_err(|_| BenchNfError::Panicked)?;
                let (sent, sender_cpu_ns, send_ns) = sent?;
                let (received, migrations) = received?;
                if before.is_empty() {
                    return Err(BenchNfError::Config(format!(
                        "no thread named {threads}* to measure (is /proc mounted?)"
                    )));
                }
                Ok(Sample {
                    sent,
                    received,
                    cpu_ns,
                    sender_cpu_ns,
                    send_ns,
                    migrations,
                })
            })
        });
        h.join().map_err(|_| BenchNfError::Panicked)?
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn report(variant: Variant, samples: Vec<Sample>) -> VariantReport {
    let ns = median(samples.iter().map(Sample::ns_per_packet).collect());
    VariantReport {
        variant: variant.name(),
        ns_per_packet: ns,
        pps_per_core: 1e9 / ns,
        sender_ns_per_packet: median(samples.iter().map(Sample::sender_ns_per_packet).collect()),
        received_pps: median(
            samples
                .iter()
                .map(|s| s.received as f64 * 1e9 / s.send_ns.max(1) as f64)
                .collect(),
        ),
        received_share: median(
            samples
                .iter()
                .map(|s| s.received as f64 / s.sent.max(1) as f64)
                .collect(),
        ),
        samples,
    }
}

/// Median over the rounds of `a`'s cost over `b`'s, round by round.
fn ratio(a: &[Sample], b: &[Sample]) -> f64 {
    median(
        a.iter()
            .zip(b)
            .map(|(a, b)| a.ns_per_packet() / b.ns_per_packet())
            .collect(),
    )
}

/// A chain as `rsspp nf` would run it on the bench's traffic (UDP from
/// 10.0.0.0/8), with what its functions need: rules that allow that
/// traffic, an address pool, a few patterns (which the traffic does not
/// carry: every packet is searched whole); and the key the runtime steers
/// with, symmetric when the chain tracks connections, as `rsspp nf` does.
fn bench_chain(list: &str) -> Result<(Chain, RssKey), RuntimeError> {
    let tracks = list.split(',').any(|n| n == "firewall" || n == "nat");
    let key = if tracks {
        RssKey::symmetric()
    } else {
        RssKey::microsoft()
    };
    let bench = |why: String| RuntimeError::Config(format!("rsspp bench nf: {why}"));
    let config = ChainConfig {
        key: key.clone(),
        rules: Some(Rules::parse("allow udp\n", "bench").map_err(|e| bench(e.to_string()))?),
        nat_pool: Some(Pool::parse("192.0.2.0/30").map_err(bench)?),
        patterns: Some((
            dpi::parse_patterns(b"rsspp-bench\nGET /\nUser-Agent:\n", "bench")
                .map_err(|e| bench(e.to_string()))?,
            "bench".into(),
        )),
        ..ChainConfig::default()
    };
    Ok((Chain::with_config(list, &config)?, key))
}

/// Runs the benchmark (root: a namespace, raw sockets, BPF).
pub fn measure(config: &BenchNfConfig) -> Result<BenchNfReport, BenchNfError> {
    if config.cpus.is_empty() {
        return Err(BenchNfError::Config("no CPU to run a worker on".into()));
    }
    if config.rounds == 0 || config.frames == 0 || config.flows == 0 {
        return Err(BenchNfError::Config(
            "rounds, frames and flows must be positive".into(),
        ));
    }
    let chains: Vec<(Chain, RssKey)> = config
        .chains
        .iter()
        .map(|c| bench_chain(c))
        .collect::<Result<_, _>>()?;
    let frames = traffic(config.flows)?;
    let ns = Namespace::new()?;
    let with_tcpdump = tcpdump_installed();
    if !with_tcpdump {
        tracing::warn!(
            "tcpdump is not installed: its baseline is left out (apt-get install tcpdump)"
        );
    }
    let mut kernel = Vec::new();
    let mut tcpdump = Vec::new();
    let variants = [
        Variant::Static,
        Variant::Shared,
        Variant::Rsspp,
        Variant::Afxdp,
    ];
    let mut runs: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); variants.len()]; chains.len()];
    for round in 0..config.rounds {
        tracing::info!("round {} of {}", round + 1, config.rounds);
        kernel.push(one_run(
            &ns,
            config,
            &frames,
            Variant::Kernel,
            &chains[0].0,
            &chains[0].1,
        )?);
        if with_tcpdump {
            tcpdump.push(tcpdump_run(&ns, config, &frames)?);
        }
        for (c, (chain, key)) in chains.iter().enumerate() {
            for (v, &variant) in variants.iter().enumerate() {
                let sample = one_run(&ns, config, &frames, variant, chain, key)?;
                tracing::debug!(chain = %config.chains[c], variant = variant.name(), ?sample);
                runs[c][v].push(sample);
            }
        }
    }
    let chains = config
        .chains
        .iter()
        .zip(runs)
        .map(|(name, mut r)| {
            let afxdp = r.pop().expect("four variants");
            let rsspp = r.pop().expect("four variants");
            let shared = r.pop().expect("four variants");
            let fixed = r.pop().expect("four variants");
            ChainReport {
                chain: name.clone(),
                per_bucket_speedup: ratio(&shared, &fixed),
                rsspp_cost_ratio: ratio(&rsspp, &fixed),
                vs_kernel_ratio: ratio(&fixed, &kernel),
                vs_tcpdump_ratio: with_tcpdump.then(|| ratio(&fixed, &tcpdump)),
                afxdp_vs_afpacket_ratio: ratio(&afxdp, &fixed),
                variants: vec![
                    report(Variant::Static, fixed),
                    report(Variant::Shared, shared),
                    report(Variant::Rsspp, rsspp),
                    report(Variant::Afxdp, afxdp),
                ],
            }
        })
        .collect();
    Ok(BenchNfReport {
        cpus: config.cpus.clone(),
        sender_cpu: config.sender_cpu,
        frames: config.frames,
        flows: config.flows,
        rounds: config.rounds,
        churn: config.churn,
        kernel: report(Variant::Kernel, kernel),
        tcpdump: with_tcpdump.then(|| report(Variant::Tcpdump, tcpdump)),
        chains,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traffic_is_one_frame_of_each_flow() {
        let frames = traffic(1000).unwrap();
        assert_eq!(frames.len(), 1000);
        let mut flows: Vec<_> = frames.iter().map(|f| f[26..38].to_vec()).collect();
        flows.sort();
        flows.dedup();
        assert_eq!(flows.len(), 1000);
        assert!(frames
            .iter()
            .all(|f| f[12..14] == [0x08, 0x00] && f[23] == 17));
    }

    #[test]
    fn tcpdump_exit_report_gives_the_frames_captured() {
        let report = "\n20000 packets captured\n20011 packets received by filter\n0 packets dropped by kernel\n";
        assert_eq!(tcpdump_captured(report), Some(20000));
        assert_eq!(tcpdump_captured("1 packet captured\n"), Some(1));
        assert_eq!(
            tcpdump_captured("tcpdump: veth1: No such device exists\n"),
            None
        );
    }

    #[test]
    fn ratios_are_medians_of_the_rounds() {
        let s = |cpu_ns| Sample {
            received: 100,
            cpu_ns,
            ..Sample::default()
        };
        let a = [s(200), s(300), s(1000)];
        let b = [s(100), s(100), s(100)];
        assert_eq!(ratio(&a, &b), 3.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
    }
}
