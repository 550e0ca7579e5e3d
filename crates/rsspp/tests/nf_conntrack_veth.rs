//! `rsspp nf` with the connection-tracking functions, for real, as root:
//! the namespace and veth of `nf_veth.rs` (tcpreplay into veth0, `rsspp nf
//! --in veth1 --out veth2`, tcpdump on veth3), both directions of the
//! connections replayed into veth0, 32 random buckets moved every 100 ms
//! round (over a thousand moves a run).
//!
//! - `nat`: connections go out translated; their replies, built from what
//!   came out and sent seconds (hundreds of moves) later, all come back
//!   translated to the original client, checksums right. With
//!   `--nat-ports any` (ports chosen whatever bucket the reply lands in)
//!   most replies miss their mapping.
//! - `firewall`: established TCP connections and replied UDP flows pass,
//!   in order, across the moves; unsolicited packets (a SYN no rule allows,
//!   ACKs and replies of no connection, ICMP errors about no connection)
//!   are all dropped, counted under `firewall`; ICMP errors about tracked
//!   flows pass. With Microsoft's key instead of the symmetric one the
//!   replies land in other buckets and are dropped.

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;
#[path = "common/nf.rs"]
#[allow(dead_code)]
mod nf_common;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use netns::Netns;
use nf_common::{ready, Reaped, Scratch};
use rsspp_trace::parse::{parse_frame, LinkType};

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
static SERIAL: Mutex<()> = Mutex::new(());

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;

/// A frame whose payload names it: (test flow index, packet number).
fn frame(
    proto: u8,
    src: [u8; 4],
    dst: [u8; 4],
    ports: (u16, u16),
    flags: u8,
    id: (u32, u32),
) -> Vec<u8> {
    let mut payload = id.0.to_be_bytes().to_vec();
    payload.extend_from_slice(&id.1.to_be_bytes());
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64);
    let mut out = Vec::new();
    if proto == 6 {
        let mut t = b.tcp(ports.0, ports.1, 1000 + id.1, 64240);
        if flags & SYN != 0 {
            t = t.syn();
        }
        if flags & ACK != 0 {
            t = t.ack(1);
        }
        if flags & FIN != 0 {
            t = t.fin();
        }
        t.write(&mut out, &payload).unwrap();
    } else {
        b.udp(ports.0, ports.1).write(&mut out, &payload).unwrap();
    }
    out
}

/// An ICMPv4 destination unreachable from `router` quoting `quoted`.
fn icmp_error(router: [u8; 4], quoted: &[u8]) -> Vec<u8> {
    let to: [u8; 4] = quoted[26..30].try_into().unwrap();
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 1])
        .ipv4(router, to, 64)
        .icmpv4(etherparse::Icmpv4Type::Unknown {
            type_u8: 3,
            code_u8: 3,
            bytes5to8: [0; 4],
        })
        .write(&mut out, &quoted[14..14 + 28])
        .unwrap();
    out
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    // Version 2.4 is two u16s: rewrite that word.
    b[4..8].copy_from_slice(&[2, 0, 4, 0]);
    for (i, f) in frames.iter().enumerate() {
        for w in [
            i as u32 / 1000,
            (i as u32 % 1000) * 1000,
            f.len() as u32,
            f.len() as u32,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let le = matches!(
        bytes[..4],
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1]
    );
    let u32_at = |at: usize| {
        let b = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32_at(at + 8) as usize;
        // A record still being written.
        if at + 16 + caplen > bytes.len() {
            break;
        }
        frames.push(bytes[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    frames
}

/// The payload's (flow, packet) of a frame this test built, and its flow
/// as received.
fn id_of(f: &[u8]) -> Option<((u32, u32), rsspp_core::FlowKey)> {
    let p = etherparse::SlicedPacket::from_ethernet(f).ok()?;
    let payload = match &p.transport {
        Some(etherparse::TransportSlice::Tcp(t)) => t.payload(),
        Some(etherparse::TransportSlice::Udp(u)) => u.payload(),
        _ => return None,
    };
    let id = (
        u32::from_be_bytes(payload.get(0..4)?.try_into().ok()?),
        u32::from_be_bytes(payload.get(4..8)?.try_into().ok()?),
    );
    Some((
        id,
        parse_frame(LinkType::Ethernet, f, 0, f.len() as u32).flow?,
    ))
}

/// IPv4 and TCP/UDP checksums as etherparse computes them from scratch.
fn checksums_ok(f: &[u8]) -> bool {
    let p = etherparse::SlicedPacket::from_ethernet(f).unwrap();
    let Some(etherparse::NetSlice::Ipv4(v4)) = &p.net else {
        return false;
    };
    let h = v4.header().to_header();
    h.header_checksum == h.calc_header_checksum()
        && match &p.transport {
            Some(etherparse::TransportSlice::Tcp(t)) => {
                t.checksum() == t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap()
            }
            Some(etherparse::TransportSlice::Udp(u)) => {
                u.checksum() == u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap()
            }
            _ => true,
        }
}

/// The namespace, `rsspp nf` running in it, and what it sends and records.
struct Bench {
    ns: Netns,
    dir: Scratch,
    nf: Reaped,
}

impl Bench {
    fn start(test: &str, nf_args: &[&str], files: &[(&str, &str)]) -> Bench {
        let dir = Scratch::new(&format!("nfct-{test}"));
        for (name, text) in files {
            std::fs::write(dir.0.join(name), text).unwrap();
        }
        let ns = Netns::with_veth(test);
        ns.ip(&[
            "link", "add", "veth2", "type", "veth", "peer", "name", "veth3",
        ]);
        ns.ip(&["link", "set", "veth2", "up"]);
        ns.ip(&["link", "set", "veth3", "up"]);
        let nf = Command::new("ip")
            .args(["netns", "exec", &ns.name, RSSPP, "nf", "--in", "veth1"])
            .args(["--out", "veth2", "--cpus", "0,1", "--churn", "32", "--json"])
            .args(nf_args)
            .current_dir(&dir.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Bench {
            ns,
            dir,
            nf: Reaped(Some(nf)),
        }
    }

    fn capture(&self, name: &str) -> Reaped {
        Reaped(Some(
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.ns.name,
                    "tcpdump",
                    "-i",
                    "veth3",
                    "-n",
                ])
                .args(["-Q", "in", "-B", "65536", "-U", "-w"])
                .arg(self.dir.0.join(name))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("tcpdump (scripts/test-deps installs it)"),
        ))
    }

    /// The frames captured so far, once there are `n` (or after 10 s).
    fn wait_for(&self, name: &str, n: usize) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let frames = read_pcap(&self.dir.0.join(name));
            if frames.len() >= n || Instant::now() > deadline {
                return frames;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops a capture and returns its frames.
    fn frames(&self, mut capture: Reaped, name: &str) -> Vec<Vec<u8>> {
        capture.stop_capture();
        read_pcap(&self.dir.0.join(name))
    }

    fn replay(&self, name: &str, frames: &[Vec<u8>], pps: u32) {
        let path = self.dir.0.join(name);
        write_pcap(&path, frames);
        nf_common::replay(
            &self.ns.name,
            "veth0",
            true,
            &["--pps", &pps.to_string()],
            &path,
        );
    }

    /// Waits for `rsspp nf` to end; its summary.
    fn summary(&mut self) -> serde_json::Value {
        let out = self.nf.finish("rsspp nf", Duration::from_secs(30));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn dropped(s: &serde_json::Value, reason: &str) -> u64 {
    s["dropped"][reason].as_u64().unwrap_or(0)
}

const SERVERS: [[u8; 4]; 4] = [
    [198, 51, 100, 1],
    [198, 51, 100, 2],
    [203, 0, 113, 5],
    [203, 0, 113, 6],
];
const POOL: &str = "192.0.2.0/30";

/// A test connection: protocol, client and port, server and port.
type Conn = (u8, [u8; 4], u16, [u8; 4], u16);

/// A firewall run: the trace, which of its frames must pass, what came
/// out, the summary.
type FirewallRun = (Vec<Vec<u8>>, Vec<bool>, Vec<Vec<u8>>, serde_json::Value);

/// NAT: connections out, then their replies; returns the replies sent,
/// those that came back translated to their client, and the summary.
fn nat_run(test: &str, extra: &[&str]) -> (usize, usize, serde_json::Value) {
    let mut args = vec![
        "--chain",
        "nat,monitor",
        "--nat-pool",
        POOL,
        "--duration",
        "9",
    ];
    args.extend_from_slice(extra);
    let mut bench = Bench::start(test, &args, &[]);
    let capture = bench.capture("out.pcap");
    std::thread::sleep(Duration::from_millis(1500));
    // 300 connections (half TCP to port 80, half UDP to 53), three packets
    // each, interleaved.
    let flows: Vec<Conn> = (0..300u32)
        .map(|i| {
            let proto = if i % 2 == 0 { 6 } else { 17 };
            let client = [10, 1, (i / 200) as u8, (i % 200) as u8 + 1];
            (
                proto,
                client,
                30000 + i as u16,
                SERVERS[i as usize % 4],
                if proto == 6 { 80 } else { 53 },
            )
        })
        .collect();
    let mut out = Vec::new();
    for n in 0..3u32 {
        for (i, &(proto, c, cp, s, sp)) in flows.iter().enumerate() {
            let flags = [SYN, ACK, ACK][n as usize];
            out.push(frame(proto, c, s, (cp, sp), flags, (i as u32, n)));
        }
    }
    bench.replay("out-trace.pcap", &out, 1500);
    // What came out so far (tcpdump flushes every frame): the connections.
    let got: Vec<Vec<u8>> = bench
        .wait_for("out.pcap", out.len())
        .into_iter()
        .filter(|f| id_of(f).is_some_and(|((_, n), _)| n < 10))
        .collect();
    // Every packet out translated, each connection to one mapping.
    let pool: Vec<Ipv4Addr> = (0..4).map(|i| Ipv4Addr::new(192, 0, 2, i)).collect();
    let mut mapping: HashMap<u32, (Ipv4Addr, u16)> = HashMap::new();
    let mut outgoing = 0;
    for f in &got {
        let Some(((i, _), key)) = id_of(f) else {
            continue;
        };
        let (proto, _, _, s, sp) = flows[i as usize];
        let IpAddr::V4(src) = key.src else { panic!() };
        assert!(pool.contains(&src), "not translated: {key}");
        assert_eq!(
            (key.dst, key.ports.unwrap().1, key.protocol),
            (IpAddr::from(s), sp, proto)
        );
        assert!(checksums_ok(f), "{key}");
        let m = (src, key.ports.unwrap().0);
        assert_eq!(
            *mapping.entry(i).or_insert(m),
            m,
            "flow {i} changed mapping"
        );
        outgoing += 1;
    }
    assert_eq!(outgoing, out.len(), "packets out");
    // One connection per translated flow: no two connections to the same
    // server port share a pool address and port.
    let mut unique: Vec<_> = mapping
        .iter()
        .map(|(&i, &m)| {
            (
                m,
                flows[i as usize].0,
                flows[i as usize].3,
                flows[i as usize].4,
            )
        })
        .collect();
    unique.sort();
    unique.dedup();
    // (Only when the NAT can see its replies' entries: with --nat-ports
    // any it cannot tell a port in use.)
    if extra.is_empty() {
        assert_eq!(unique.len(), flows.len(), "a mapping given twice");
    }
    // Seconds later (hundreds of moves), the replies.
    std::thread::sleep(Duration::from_millis(1500));
    let mut replies = Vec::new();
    for n in 0..2u32 {
        for (i, &(proto, _, _, s, sp)) in flows.iter().enumerate() {
            let (a, p) = mapping[&(i as u32)];
            let flags = [SYN | ACK, ACK][n as usize];
            replies.push(frame(
                proto,
                s,
                a.octets(),
                (sp, p),
                flags,
                (i as u32, 10 + n),
            ));
        }
    }
    bench.replay("back-trace.pcap", &replies, 1500);
    bench.wait_for("out.pcap", out.len() + replies.len());
    let all = bench.frames(capture, "out.pcap");
    let mut translated = 0;
    for f in &all {
        let Some(((i, n), key)) = id_of(f) else {
            continue;
        };
        if n < 10 {
            continue;
        }
        let (_, c, cp, s, sp) = flows[i as usize];
        assert_eq!(
            (key.src, key.dst, key.ports.unwrap()),
            (IpAddr::from(s), IpAddr::from(c), (sp, cp)),
            "reply of flow {i} not translated back"
        );
        assert!(checksums_ok(f), "{key}");
        translated += 1;
    }
    let s = bench.summary();
    (replies.len(), translated, s)
}

#[test]
fn nat_replies_find_their_mapping_after_moves() {
    if !ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (sent, back, s) = nat_run("nat", &[]);
    eprintln!("nat: {back} of {sent} replies back: {s}");
    assert_eq!(back, sent, "{s}");
    assert_eq!(dropped(&s, "nat"), 0, "{s}");
    assert!(s["migrations"].as_u64().unwrap() >= 1000, "{s}");
    assert_eq!(s["handoffs"]["early"], 0, "{s}");
}

#[test]
fn nat_without_the_port_choice_loses_its_replies() {
    if !ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (sent, back, s) = nat_run("natany", &["--nat-ports", "any"]);
    eprintln!("nat --nat-ports any: {back} of {sent} replies back: {s}");
    assert!(back * 10 < sent, "{back} of {sent} came back: {s}");
    assert_eq!(dropped(&s, "nat") as usize, sent - back, "{s}");
}

/// Firewall: the trace, both directions; returns it with which frames
/// must pass.
fn firewall_trace() -> (Vec<Vec<u8>>, Vec<bool>) {
    let server = [198, 51, 100, 80];
    let client = |i: u32| [10, 2, (i / 200) as u8, (i % 200) as u8 + 1];
    // Per connection its packets: (frame, passes).
    let mut conns: Vec<Vec<(Vec<u8>, bool)>> = Vec::new();
    for i in 0..100u32 {
        let (c, cp) = (client(i), 40000 + i as u16);
        let out = |flags, n| frame(6, c, server, (cp, 80), flags, (i, n));
        let back = |flags, n| frame(6, server, c, (80, cp), flags, (i, n));
        let mut v = vec![
            (out(SYN, 0), true),
            (back(SYN | ACK, 1), true),
            (out(ACK, 2), true),
        ];
        for n in 3..15 {
            v.push((
                if n % 2 == 0 {
                    out(ACK, n)
                } else {
                    back(ACK, n)
                },
                true,
            ));
        }
        v.push((out(FIN | ACK, 15), true));
        v.push((back(FIN | ACK, 16), true));
        conns.push(v);
    }
    for i in 100..200u32 {
        let (c, cp) = (client(i), 40000 + i as u16);
        let mut v = Vec::new();
        for n in 0..8 {
            let f = if n % 2 == 0 {
                frame(17, c, server, (cp, 53), 0, (i, n))
            } else {
                frame(17, server, c, (53, cp), 0, (i, n))
            };
            v.push((f, true));
        }
        // An ICMP error about the flow (after it started): passes.
        let about = frame(17, c, server, (cp, 53), 0, (i, 99));
        v.insert(2, (icmp_error([203, 0, 113, 254], &about), true));
        conns.push(v);
    }
    // Unsolicited, spread over the replay.
    for i in 200..300u32 {
        let (c, cp) = (client(i), 40000 + i as u16);
        let f = match i % 4 {
            0 => frame(6, c, server, (cp, 22), SYN, (i, 0)),
            1 => frame(6, c, server, (cp, 80), ACK, (i, 0)),
            2 => frame(17, server, c, (53, cp), 0, (i, 0)),
            _ => icmp_error(
                [203, 0, 113, 254],
                &frame(17, c, server, (cp, 53), 0, (i, 0)),
            ),
        };
        let mut v = vec![(f, false)];
        // Unsolicited, later: the server's SYN-ACK to a port never opened.
        v.push((frame(6, server, c, (80, cp), SYN | ACK, (i, 1)), false));
        conns.push(v);
    }
    // The connections' packets round by round (each connection spread
    // over the replay), the unsolicited ones evenly among them.
    let (long, short): (Vec<_>, Vec<_>) = conns.into_iter().partition(|c| c.len() > 2);
    let rounds = long.iter().map(Vec::len).max().unwrap();
    let mut main = Vec::new();
    for r in 0..rounds {
        main.extend(long.iter().filter_map(|c| c.get(r).cloned()));
    }
    let extra: Vec<(Vec<u8>, bool)> = short.into_iter().flatten().collect();
    let every = main.len() / extra.len();
    let mut frames = Vec::new();
    let mut pass = Vec::new();
    let mut extra = extra.into_iter();
    for (k, (f, p)) in main.into_iter().enumerate() {
        if k % every == every / 2 {
            if let Some((f, p)) = extra.next() {
                frames.push(f);
                pass.push(p);
            }
        }
        frames.push(f);
        pass.push(p);
    }
    for (f, p) in extra {
        frames.push(f);
        pass.push(p);
    }
    (frames, pass)
}

/// Runs the firewall over the trace; returns (frames expected out, frames
/// out in order per flow as (flow, packet) ids, summary).
fn firewall_run(test: &str, extra: &[&str]) -> FirewallRun {
    let mut args = vec![
        "--chain",
        "firewall,monitor",
        "--rules",
        "fw.rules",
        "--duration",
        "10",
    ];
    args.extend_from_slice(extra);
    let rules = "# the web server and DNS\nallow tcp dport 80\nallow udp dport 53\n";
    let mut bench = Bench::start(test, &args, &[("fw.rules", rules)]);
    let capture = bench.capture("out.pcap");
    std::thread::sleep(Duration::from_millis(1500));
    let (frames, pass) = firewall_trace();
    bench.replay("trace.pcap", &frames, 600);
    // The receiver may lag behind on a busy machine: wait for what must come.
    bench.wait_for("out.pcap", pass.iter().filter(|p| **p).count());
    let got = bench.frames(capture, "out.pcap");
    let s = bench.summary();
    (frames, pass, got, s)
}

/// Frames of each flow, in order, as their (flow, packet) ids or the whole
/// frame for ICMP.
fn by_flow(frames: &[Vec<u8>]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for f in frames {
        let key = parse_frame(LinkType::Ethernet, f, 0, f.len() as u32)
            .flow
            .unwrap();
        m.entry(key.to_string()).or_default().push(f.clone());
    }
    m
}

#[test]
fn the_firewall_keeps_connections_across_moves_and_drops_the_unsolicited() {
    if !ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (frames, pass, got, s) = firewall_run("fw", &[]);
    let allowed: Vec<Vec<u8>> = frames
        .iter()
        .zip(&pass)
        .filter(|(_, p)| **p)
        .map(|(f, _)| f.clone())
        .collect();
    let refused = frames.len() - allowed.len();
    eprintln!(
        "firewall: {} frames, {} allowed, {} out: {s}",
        frames.len(),
        allowed.len(),
        got.len()
    );
    assert_eq!(
        s["received"].as_u64().unwrap() as usize,
        frames.len(),
        "{s}"
    );
    assert_eq!(dropped(&s, "firewall") as usize, refused, "{s}");
    assert_eq!(
        s["forwarded"].as_u64().unwrap() as usize,
        allowed.len(),
        "{s}"
    );
    assert!(s["migrations"].as_u64().unwrap() >= 1000, "{s}");
    assert_eq!(s["handoffs"]["early"], 0, "{s}");
    // Exactly the allowed frames came out, every flow in order.
    assert_eq!(by_flow(&got), by_flow(&allowed));
}

#[test]
fn without_the_symmetric_key_the_firewall_drops_replies() {
    if !ready() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (frames, pass, _, s) = firewall_run("fwms", &["--rss-key", "microsoft"]);
    let refused = pass.iter().filter(|p| !**p).count();
    let wrongly = dropped(&s, "firewall") as usize - refused;
    eprintln!("firewall --rss-key microsoft: {wrongly} allowed frames dropped: {s}");
    // The replies (about half the connections' frames) land in other
    // buckets than their connection and find nothing.
    assert!(wrongly > (frames.len() - refused) / 3, "{s}");
}
