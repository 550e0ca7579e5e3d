//! Elephants inside buckets in `rsspp nf` (root; CI is root).
//!
//! In a namespace made for the test, tcpreplay (pinned to one CPU, so
//! that the kernel delivers its frames in the order sent) writes UDP frames
//! into veth0: two elephant flows that hash to the same bucket (35% of the
//! frames each) among 256 mice (30%), each frame carrying its flow's
//! sequence number. `rsspp nf --chain monitor` on two workers forwards
//! veth1's frames through veth2 to veth3, where tcpdump records them.
//!
//! The rebalancer balances frame rates (`--load-source packets`): a debug
//! build's workers at 20 000 frames a second are busy 2% of the time, and
//! that busy time is mostly noise on a shared host.
//!
//! - `--elephants off`: RSS++ moves whole buckets, so the two elephants
//!   stay together: one worker takes more than twice the other's frames.
//! - `--elephants on` (the default): one elephant gets an override to the
//!   other worker, its state with it; over the last seconds the workers'
//!   frame counts are within 10%, no frame of any flow came out after a
//!   later one of its flow, and the monitor has one record per flow with
//!   as many frames as were sent (no state lost or duplicated).
//!
//! - the same with `--reframer 64 --chain firewall,monitor`: frames held
//!   per flow before the functions, an elephant's among them when it
//!   moves, still come out in order with their state.
//!
//! - the same through NAT: every flow keeps one translation.
//!
//! - the same on the afxdp backend (AF_XDP sockets behind an XDP program
//!   with the same override table).
//!
//! - with `--churn 1`: an override moved to the other worker nearly every
//!   round, whatever the load; still in order, every flow's state whole.
//!
//! The counts are the workers' `rsspp_cpu_packets_total`, over three
//! one-second windows from 4 s on; the window of median ratio is judged:
//! on a shared host a stalled CPU or sender skews one window now and then.

#[path = "common/daemon_udp.rs"]
#[allow(dead_code)]
mod daemon_udp;
#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;
#[path = "common/nf.rs"]
#[allow(dead_code)]
mod nf_common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use daemon_udp::{bucket, elephant_flows, elephants_and_mice, frame, source};
use netns::Netns;
use nf_common::{ready, Reaped, Scratch};

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
const BUCKETS: usize = 128;
const MICE: u32 = 256;
/// The frames' MAC addresses (veth2's and veth0's are not known when the
/// trace is written; veth1 is promiscuous for the runtime).
const MAC_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const MAC_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
/// Frames per second tcpreplay sends, and for how long.
const PPS: u32 = 20_000;
const SECONDS: u32 = 8;

/// The trace: of every 20 frames, 7 of each elephant and 6 mice in turn;
/// returns the frames sent per flow.
fn write_trace(path: &Path, big: [u32; 2]) -> BTreeMap<u32, u64> {
    let total = u64::from(PPS) * u64::from(SECONDS);
    let mut out = Vec::with_capacity(24 + total as usize * 76);
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        if v == 0x0004_0002 {
            out.extend_from_slice(&2u16.to_le_bytes());
            out.extend_from_slice(&4u16.to_le_bytes());
        } else {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut seqs: BTreeMap<u32, u64> = BTreeMap::new();
    let mut mouse = 0;
    for i in 0..total {
        let flow = elephants_and_mice(i, big, MICE, &mut mouse);
        let seq = seqs.entry(flow).or_insert(0);
        let f = frame(MAC_DST, MAC_SRC, flow, *seq as u32);
        *seq += 1;
        let us = i * 1_000_000 / u64::from(PPS);
        for v in [(us / 1_000_000) as u32, (us % 1_000_000) as u32, 60, 60] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out).unwrap();
    seqs
}

/// Calls `each` with every IPv4 UDP frame of a capture that carries a
/// flow and sequence number, in order.
fn udp_frames(path: &Path, mut each: impl FnMut(&[u8])) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes[..4], [0xd4, 0xc3, 0xb2, 0xa1], "a little-endian pcap");
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32_at(at + 8) as usize;
        let f = &bytes[at + 16..at + 16 + caplen];
        at += 16 + caplen;
        if f.len() >= 50 && f[12..14] == [0x08, 0x00] && f[23] == 17 {
            each(f);
        }
    }
}

/// The flow number a frame carries.
fn flow_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[42..46].try_into().unwrap())
}

/// Per flow, the sequence numbers of the frames in a capture, in order.
fn captured(path: &Path) -> HashMap<u32, Vec<u32>> {
    let mut flows: HashMap<u32, Vec<u32>> = HashMap::new();
    udp_frames(path, |f| {
        let seq = u32::from_be_bytes(f[46..50].try_into().unwrap());
        flows.entry(flow_of(f)).or_default().push(seq);
    });
    flows
}

/// Frames of each flow that came out after a later one of their flow.
fn reordered(got: &HashMap<u32, Vec<u32>>) -> u64 {
    got.values()
        .map(|seqs| {
            let mut highest = None;
            let mut late = 0;
            for &s in seqs {
                if highest.is_some_and(|h| s < h) {
                    late += 1;
                }
                highest = highest.max(Some(s));
            }
            late
        })
        .sum()
}

/// The workers' frames so far, by CPU 0 and 1.
fn cpu_packets(ns: &Netns, port: u16) -> [f64; 2] {
    let m = ns
        .scrape_metrics(port)
        .expect("metrics while the traffic flows");
    [0, 1].map(|cpu| {
        m.get(&format!(
            "rsspp_cpu_packets_total{{iface=\"veth1\",cpu=\"{cpu}\"}}"
        ))
        .copied()
        .unwrap_or(f64::NAN)
    })
}

fn ratio([a, b]: [f64; 2]) -> f64 {
    a.max(b) / a.min(b).max(1.0)
}

struct Run {
    summary: serde_json::Value,
    /// Per-worker frames in each one-second window.
    windows: Vec<[f64; 2]>,
    got: HashMap<u32, Vec<u32>>,
    /// The monitor's records: per flow (by source port), each record's
    /// frames.
    monitor: BTreeMap<u16, Vec<u64>>,
    stderr: String,
}

impl Run {
    /// The ratio of the window of median ratio, of windows that carried
    /// the traffic (a stalled scrape would show none and pass for balance).
    fn ratio(&self) -> f64 {
        for w in &self.windows {
            assert!(
                w[0] + w[1] > f64::from(PPS) / 2.0,
                "a window without the traffic: {:?}\n{}",
                self.windows,
                self.stderr
            );
        }
        let mut r: Vec<f64> = self.windows.iter().copied().map(ratio).collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }
}

/// One run at a time: two at once on a 2-CPU host would judge the
/// balance of starved workers.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `rsspp nf --elephants ELEPHANTS` with the chain and options in `extra`;
/// `tag` names its files.
fn run(elephants: &str, tag: &str, extra: &[&str], port: u16, trace: &Path, dir: &Path) -> Run {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let flows_out = dir.join(format!("flows-{tag}.jsonl"));
    let capture = dir.join(format!("out-{tag}.pcap"));
    let ns = Netns::with_veth(&format!("nfe{tag}"));
    ns.ip(&["link", "set", "lo", "up"]);
    ns.ip(&[
        "link", "add", "veth2", "type", "veth", "peer", "name", "veth3",
    ]);
    ns.ip(&["link", "set", "veth2", "up"]);
    ns.ip(&["link", "set", "veth3", "up"]);
    let mut tcpdump = Reaped(Some(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, "tcpdump", "-i", "veth3", "-n"])
            .args(["-Q", "in", "-B", "65536", "-U", "-w"])
            .arg(&capture)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (scripts/test-deps installs it)"),
    ));
    let mut nf = Reaped(Some(
        Command::new("ip")
            .args([
                "netns", "exec", &ns.name, RSSPP, "-v", "nf", "--in", "veth1",
            ])
            .args(["--out", "veth2", "--cpus", "0,1"])
            .args(extra)
            .args(["--elephants", elephants, "--load-source", "packets"])
            .args(["--duration", &(SECONDS + 3).to_string(), "--json"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .arg("--flows-out")
            .arg(&flows_out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    // The exporter answers before the fanout group exists; a round was run
    // after it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let rounds = "rsspp_rounds_total{iface=\"veth1\"}";
    while ns
        .scrape_metrics(port)
        .and_then(|m| m.get(rounds).copied())
        .is_none_or(|r| r < 1.0)
    {
        assert!(Instant::now() < deadline, "rsspp nf never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut replay =
        nf_common::start_replay(&ns.name, "veth0", true, &["--pps", &PPS.to_string()], trace);
    // Three one-second windows from 4 s on.
    std::thread::sleep(Duration::from_secs(4));
    let mut scrapes = vec![cpu_packets(&ns, port)];
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(1));
        scrapes.push(cpu_packets(&ns, port));
    }
    let windows = scrapes
        .windows(2)
        .map(|w| [w[1][0] - w[0][0], w[1][1] - w[0][1]])
        .collect();
    let replayed = replay.0.take().unwrap().wait_with_output().unwrap();
    assert!(
        replayed.status.success(),
        "tcpreplay: {}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    let out = nf.0.take().unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "rsspp nf: {stderr}");
    tcpdump.stop_capture();
    let summary: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("summary: {e}: {stderr}"));
    let mut monitor: BTreeMap<u16, Vec<u64>> = BTreeMap::new();
    for line in std::fs::read_to_string(&flows_out).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        monitor
            .entry(v["sport"].as_u64().unwrap() as u16)
            .or_default()
            .push(v["packets"].as_u64().unwrap());
    }
    Run {
        summary,
        windows,
        got: captured(&capture),
        monitor,
        stderr,
    }
}

#[test]
fn two_elephants_in_one_bucket_get_a_worker_each_with_their_state_and_order() {
    if !ready() {
        return;
    }
    let big = elephant_flows(BUCKETS);
    assert_eq!(bucket(big[0], BUCKETS), bucket(big[1], BUCKETS));
    let dir = Scratch::new("nf-elephants");
    let trace = dir.0.join("trace.pcap");
    let sent = write_trace(&trace, big);

    // Buckets only: the elephants' bucket stays whole.
    let monitor = ["--chain", "monitor"];
    let off = run("off", "off", &monitor, 19_482, &trace, &dir.0);
    eprintln!(
        "--elephants off: per-worker frames a second {:?} (median ratio {:.2})",
        off.windows,
        off.ratio()
    );
    assert!(
        off.ratio() > 2.0,
        "with --elephants off one worker takes more than twice the other's frames: {:?}\n{}",
        off.windows,
        off.stderr
    );
    assert!(off.summary.get("elephants").is_none(), "{}", off.summary);

    // With overrides: within 10%, nothing reordered, every flow's state
    // whole.
    let on = run("on", "on", &monitor, 19_483, &trace, &dir.0);
    balanced_in_order_and_whole(&on, &sent);
}

/// With a Reframer holding each flow's frames before a firewall and the
/// monitor: a moved elephant's held frames go out before its new worker
/// sends any, and its state goes with it, as without them.
#[test]
fn elephants_behind_a_reframer_and_a_firewall_keep_their_order_and_state() {
    if !ready() {
        return;
    }
    let (on, _dir) = on_through("reframer", 19_484, |dir| {
        let rules = dir.join("fw.rules");
        std::fs::write(&rules, format!("allow udp dport {}\n", daemon_udp::PORT)).unwrap();
        vec![
            "--chain".into(),
            "firewall,monitor".into(),
            "--rules".into(),
            rules.to_str().unwrap().into(),
            "--reframer".into(),
            "64".into(),
        ]
    });
    let s = &on.summary;
    assert!(
        s["reframer"]["buffered"].as_u64().unwrap() > 0,
        "the Reframer held frames: {s}"
    );
    assert_eq!(
        s["reframer"]["packets_out"], s["reframer"]["packets_in"],
        "{s}"
    );
}

/// `--elephants on` with the options `extra` gives (files may go in the
/// directory it is handed), on the two-elephants trace, judged by
/// [`balanced_in_order_and_whole`]; the run, and the directory that holds
/// its trace and capture. The steering is Microsoft's key, whose buckets
/// `elephant_flows` knows (a firewall or NAT chain would default to the
/// symmetric one).
fn on_through(tag: &str, port: u16, extra: impl FnOnce(&Path) -> Vec<String>) -> (Run, Scratch) {
    let dir = Scratch::new(&format!("nf-elephants-{tag}"));
    let trace = dir.0.join("trace.pcap");
    let sent = write_trace(&trace, elephant_flows(BUCKETS));
    let mut args = extra(&dir.0);
    args.extend(["--rss-key".into(), "microsoft".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let on = run("on", tag, &args, port, &trace, &dir.0);
    balanced_in_order_and_whole(&on, &sent);
    (on, dir)
}

/// Through NAT (after the monitor, which then sees the flows' own
/// ports): every flow keeps one translation from the pool across the
/// moves, and the rest holds as without NAT.
#[test]
fn elephants_through_nat_keep_their_order_and_state() {
    if !ready() {
        return;
    }
    let (_, dir) = on_through("nat", 19_485, |_| {
        ["--chain", "monitor,nat", "--nat-pool", "192.0.2.0/30"]
            .map(String::from)
            .to_vec()
    });
    // Every flow left with one translation from the pool, the moved
    // elephants' included.
    let translated = captured_translations(&dir.0.join("out-nat.pcap"));
    assert_eq!(translated.len(), MICE as usize + 2, "every flow came out");
    for (flow, sources) in &translated {
        assert_eq!(
            sources.len(),
            1,
            "flow {flow}: one translation, got {sources:?}"
        );
        let (addr, _) = sources.iter().next().unwrap();
        assert!(
            addr[..3] == [192, 0, 2] && addr[3] < 4,
            "flow {flow}: {addr:?} outside the pool"
        );
    }
}

/// On the afxdp backend: the XDP program looks the flow up in its
/// override table as the fanout program does and hands an overridden
/// flow's frames to its worker's second socket; the rest holds as with
/// AF_PACKET.
#[test]
fn elephants_on_af_xdp_sockets_keep_their_order_and_state() {
    if !ready() {
        return;
    }
    let (on, _dir) = on_through("afxdp", 19_486, |_| {
        ["--chain", "monitor", "--backend", "afxdp"]
            .map(String::from)
            .to_vec()
    });
    assert!(
        on.stderr.contains("AF_XDP on veth1"),
        "the afxdp backend ran: {}",
        on.stderr
    );
}

/// With `--churn 1` a random bucket and a random override move every
/// round, whatever the load: the override goes from worker to worker again
/// and again under traffic, each move in order (its new worker parks the
/// flow's frames until the old one has processed its last), its state
/// with it.
#[test]
fn churned_overrides_move_between_workers_in_order_with_their_state() {
    churned_overrides("afpacket", 19_487);
}

/// The same on the afxdp backend.
#[test]
fn churned_overrides_on_af_xdp_sockets_move_in_order_with_their_state() {
    churned_overrides("afxdp", 19_488);
}

fn churned_overrides(backend: &str, port: u16) {
    if !ready() {
        return;
    }
    let dir = Scratch::new(&format!("nf-elephants-churn-{backend}"));
    let trace = dir.0.join("trace.pcap");
    let sent = write_trace(&trace, elephant_flows(BUCKETS));
    let extra = [
        "--chain",
        "monitor",
        "--churn",
        "1",
        "--rss-key",
        "microsoft",
        "--backend",
        backend,
    ];
    let on = run(
        "on",
        &format!("churn{backend}"),
        &extra,
        port,
        &trace,
        &dir.0,
    );
    let s = &on.summary;
    let churned = s["elephants"]["churned"].as_u64().unwrap();
    eprintln!(
        "--churn 1 --backend {backend}: overrides moved by the churn {churned}; elephants {}; reordered {}",
        s["elephants"],
        reordered(&on.got)
    );
    assert!(
        churned >= 10,
        "the churn moved overrides between the workers: {s}\n{}",
        on.stderr
    );
    in_order_and_whole(&on, &sent);
}

/// Per flow (the number in the payload), the source addresses and ports
/// its frames left with.
fn captured_translations(path: &Path) -> BTreeMap<u32, BTreeSet<([u8; 4], u16)>> {
    let mut out: BTreeMap<u32, BTreeSet<([u8; 4], u16)>> = BTreeMap::new();
    udp_frames(path, |f| {
        let addr: [u8; 4] = f[26..30].try_into().unwrap();
        let port = u16::from_be_bytes([f[34], f[35]]);
        out.entry(flow_of(f)).or_default().insert((addr, port));
    });
    out
}

/// An elephant moved, the workers' frames within 10%, and
/// [`in_order_and_whole`].
fn balanced_in_order_and_whole(on: &Run, sent: &BTreeMap<u32, u64>) {
    let s = &on.summary;
    eprintln!(
        "--elephants on: per-worker frames a second {:?} (median ratio {:.2}); elephants {}; reordered {}",
        on.windows,
        on.ratio(),
        s["elephants"],
        reordered(&on.got)
    );
    assert!(
        s["elephants"]["moved"].as_u64().unwrap() >= 1,
        "{s}\n{}",
        on.stderr
    );
    assert!(
        on.ratio() < 1.10,
        "per-worker frames within 10%: {:?}\n{s}\n{}",
        on.windows,
        on.stderr
    );
    in_order_and_whole(on, sent);
}

/// No frame after a later one of its flow, no frame without its state,
/// every frame received and forwarded, and one monitor record per flow
/// with all its frames.
fn in_order_and_whole(on: &Run, sent: &BTreeMap<u32, u64>) {
    let s = &on.summary;
    assert_eq!(reordered(&on.got), 0, "{s}\n{}", on.stderr);
    assert_eq!(
        s["received"].as_u64().unwrap(),
        sent.values().sum::<u64>(),
        "{s}"
    );
    for w in s["workers"].as_array().unwrap() {
        assert_eq!(w["stateless"], 0, "a frame ran without its state: {s}");
    }
    for (&flow, &n) in sent {
        let (_, sport) = source(flow);
        assert_eq!(
            on.monitor.get(&sport),
            Some(&vec![n]),
            "flow {flow}: one record of all its frames\n{s}\n{}",
            on.stderr
        );
    }
    let out: u64 = on.got.values().map(|v| v.len() as u64).sum();
    assert_eq!(out, s["forwarded"].as_u64().unwrap(), "{s}");
}
