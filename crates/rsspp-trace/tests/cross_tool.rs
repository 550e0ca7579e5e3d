//! Cross-checks with real tools (installed by scripts/deps): what we write
//! is read by tcpdump, tshark and tcpreplay's tools with the same packets;
//! our statistics of captures made by tcpdump (live, on loopback) and by
//! scapy agree with what those tools report.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{generated, records};
use rsspp_trace::generate::write_pcap;
use rsspp_trace::record::tcp_flags::SYN;
use rsspp_trace::{analyse, GenConfig, Preset, StatsConfig, TimePrecision, TraceReader};

fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "{name} is not installed: run scripts/deps");
    Command::new(name)
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rsspp-trace-{}-{name}", std::process::id()))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("tool runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// tshark's view of a capture: one row of fields per frame.
fn tshark_fields(path: &PathBuf, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = tool("tshark");
    cmd.args(["-n", "-r"])
        .arg(path)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    run_ok(&mut cmd)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

#[test]
fn tcpdump_tshark_and_tcpreplay_read_what_we_write() {
    for (precision, name) in [
        (TimePrecision::Nano, "ns.pcap"),
        (TimePrecision::Micro, "us.pcap"),
    ] {
        let path = temp_file(name);
        let mut config = GenConfig::new(Preset::Campus);
        config.duration_s = 0.02;
        let mut bytes = Vec::new();
        write_pcap(&config, &mut bytes, 64, precision).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let ours = records(&bytes);
        assert!(ours.len() > 5_000);

        let tcpdump = run_ok(tool("tcpdump").args(["-nn", "-tt", "-r"]).arg(&path));
        assert_eq!(tcpdump.lines().count(), ours.len(), "tcpdump packet count");
        let first = tcpdump.lines().next().unwrap();
        let f = ours[0].flow.unwrap();
        let (sport, dport) = f.ports.unwrap();
        assert!(
            first.contains(&format!("{}.{} > {}.{}", f.src, sport, f.dst, dport)),
            "tcpdump line {first:?} vs {f}"
        );

        let rows = tshark_fields(
            &path,
            &[
                "frame.time_epoch",
                "frame.len",
                "frame.cap_len",
                "ip.src",
                "ip.dst",
                "tcp.srcport",
                "udp.srcport",
                "tcp.dstport",
                "udp.dstport",
                "tcp.seq_raw",
            ],
        );
        assert_eq!(rows.len(), ours.len(), "tshark packet count");
        for (row, r) in rows.iter().zip(&ours) {
            let f = r.flow.unwrap();
            let (sport, dport) = f.ports.unwrap();
            let seconds: f64 = row[0].parse().unwrap();
            assert!(
                (seconds - r.timestamp_ns as f64 / 1e9).abs() < 2e-6,
                "{row:?}"
            );
            assert_eq!(row[1], r.wire_len.to_string());
            assert_eq!(row[2], r.captured_len.to_string());
            assert_eq!(row[3], f.src.to_string());
            assert_eq!(row[4], f.dst.to_string());
            assert_eq!(format!("{}{}", row[5], row[6]), sport.to_string());
            assert_eq!(format!("{}{}", row[7], row[8]), dport.to_string());
            if f.protocol == 6 {
                assert_eq!(row[9], r.tcp_seq.to_string());
            }
        }

        // tcpreplay's tools: tcpcapinfo checks every record, tcpprep reads
        // the file through libpcap as tcpreplay does.
        let info = run_ok(tool("tcpcapinfo").arg(&path));
        let ok_records = info
            .lines()
            .filter(|l| l.trim_end().ends_with("OK"))
            .count();
        assert_eq!(ok_records, ours.len(), "tcpcapinfo records marked OK");
        let cache = temp_file(&format!("{name}.cache"));
        run_ok(
            tool("tcpprep")
                .args(["--auto=bridge", "--pcap"])
                .arg(&path)
                .arg("--cachefile")
                .arg(&cache),
        );
        let _ = std::fs::remove_file(&cache);
        let _ = std::fs::remove_file(&path);
    }
}

/// Captures on loopback with tcpdump while the test sends a fixed number
/// of UDP datagrams and one TCP connection to 127.0.0.1, then compares our
/// statistics with tshark's reading of the same file.
#[test]
fn our_stats_agree_with_tshark_on_a_live_tcpdump_capture() {
    let base = 20_000 + (std::process::id() % 2_000) as u16 * 10;
    let path = temp_file("loopback.pcap");
    let filter = format!(
        "(udp and dst portrange {base}-{}) or (tcp and port {})",
        base + 4,
        base + 9
    );
    // `timeout` bounds the capture even if the test dies before stopping it.
    let mut capture = tool("timeout")
        .args([
            "-s",
            "INT",
            "30",
            "tcpdump",
            "--immediate-mode",
            // A small snaplen and a large buffer: with immediate mode every
            // ring slot is snaplen-sized, and the default 256 KiB slots in
            // a 2 MiB buffer would drop all but the first few packets.
            "-s",
            "2048",
            "-B",
            "8192",
            "-i",
            "lo",
            "-U",
            "-n",
            "-w",
        ])
        .arg(&path)
        .arg(&filter)
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump starts");
    let mut stderr = BufReader::new(capture.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "tcpdump: {line}");

    let receivers: Vec<UdpSocket> = (0..5)
        .map(|i| UdpSocket::bind(("127.0.0.1", base + i)).unwrap())
        .collect();
    // One TCP connection first: data one way, a reply, both sides closed.
    let listener = TcpListener::bind(("127.0.0.1", base + 9)).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        s.write_all(b"bye").unwrap();
        got.len()
    });
    let mut client = TcpStream::connect(("127.0.0.1", base + 9)).unwrap();
    client.write_all(&vec![7u8; 5000]).unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = Vec::new();
    client.read_to_end(&mut reply).unwrap();
    assert_eq!(server.join().unwrap(), 5000);
    drop(client);
    // Then a fixed number of UDP datagrams of growing sizes to 5 ports.
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sent = 60;
    for i in 0..sent {
        let payload = vec![i as u8; 10 + 17 * i];
        sender
            .send_to(&payload, ("127.0.0.1", base + (i % 5) as u16))
            .unwrap();
    }
    drop(receivers);
    // Wait (at most 10 s) until tcpdump has written the last datagram.
    let udp_in_file = || -> usize {
        let Ok(bytes) = std::fs::read(&path) else {
            return 0;
        };
        let Ok(reader) = TraceReader::from_bytes(&bytes) else {
            return 0;
        };
        reader
            .filter_map(Result::ok)
            .filter(|r| r.flow.is_some_and(|f| f.protocol == 17))
            .count()
    };
    for _ in 0..100 {
        if udp_in_file() >= sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Stop the capture (SIGINT: tcpdump flushes and exits).
    let pid = capture.id().to_string();
    let _ = Command::new("pkill")
        .args(["-INT", "-P", &pid, "tcpdump"])
        .status();
    let status = capture.wait().unwrap();
    assert!(status.code().is_some(), "capture ended");

    let bytes = std::fs::read(&path).unwrap();
    let report = analyse(
        &mut TraceReader::from_bytes(&bytes).unwrap(),
        StatsConfig::default(),
    )
    .unwrap();
    let rows = tshark_fields(
        &path,
        &[
            "frame.len",
            "ip.src",
            "ip.dst",
            "ip.proto",
            "tcp.srcport",
            "tcp.dstport",
            "udp.srcport",
            "udp.dstport",
            "tcp.flags.syn",
        ],
    );
    assert!(
        rows.len() >= sent + 6,
        "{} frames captured ({} bytes of pcap)",
        rows.len(),
        bytes.len()
    );
    assert_eq!(report.packets, rows.len() as u64);
    let bytes_tshark: u64 = rows.iter().map(|r| r[0].parse::<u64>().unwrap()).sum();
    assert_eq!(report.bytes, bytes_tshark);
    let flows: HashSet<(String, String, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r[1].clone(),
                r[2].clone(),
                r[3].clone(),
                format!("{}{}", r[4], r[6]),
                format!("{}{}", r[5], r[7]),
            )
        })
        .collect();
    // 5 UDP destination ports from one socket, and the TCP connection's
    // two directions.
    assert_eq!(flows.len(), 7);
    assert_eq!(report.flows, flows.len() as u64);
    let syn_tshark = rows
        .iter()
        .filter(|r| r[8] == "1" || r[8] == "True")
        .count();
    let syn_ours = records(&bytes)
        .iter()
        .filter(|r| r.tcp_flags & SYN != 0)
        .count();
    assert_eq!(syn_ours, syn_tshark);
    assert_eq!(syn_ours, 2, "SYN and SYN-ACK");
    let _ = std::fs::remove_file(&path);
}

/// `tcpdump -i any` on loopback (UDP over IPv4 and IPv6, a TCP
/// connection), as Linux cooked captures v1 and v2: every frame is read as
/// the IP packet tshark sees in it.
#[test]
fn tcpdump_any_captures_are_read_as_tshark_reads_them() {
    for name in ["tcpdump-any-sll.pcap", "tcpdump-any-sll2.pcap"] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(name);
        let ours = records(&std::fs::read(&path).unwrap());
        let rows = tshark_fields(
            &path,
            &[
                "ip.src",
                "ipv6.src",
                "ip.dst",
                "ipv6.dst",
                "udp.srcport",
                "tcp.srcport",
                "udp.dstport",
                "tcp.dstport",
                "frame.len",
                "tcp.flags.syn",
            ],
        );
        assert_eq!(ours.len(), rows.len(), "{name}");
        assert_eq!(ours.len(), 20, "{name}");
        for (r, row) in ours.iter().zip(&rows) {
            let flow = r
                .flow
                .unwrap_or_else(|| panic!("{name}: {r:?} has no flow"));
            let (sport, dport) = flow.ports.expect("TCP or UDP");
            let theirs = (
                format!("{}{}", row[0], row[1]),
                format!("{}{}", row[2], row[3]),
                format!("{}{}", row[4], row[5]),
                format!("{}{}", row[6], row[7]),
            );
            let mine = (
                flow.src.to_string(),
                flow.dst.to_string(),
                sport.to_string(),
                dport.to_string(),
            );
            assert_eq!(mine, theirs, "{name}");
            assert_eq!(r.wire_len.to_string(), row[8], "{name}");
            let syn = row[9] == "1" || row[9] == "True";
            assert_eq!(r.tcp_flags & SYN != 0, syn, "{name}");
        }
    }
}

const SCAPY_SCRIPT: &str = r#"
import sys
from scapy.all import Ether, Dot1Q, IP, IPv6, IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, TCP, UDP, ICMP, ARP, Raw, fragment, wrpcapng
pkts = []
for i in range(5):
    pkts.append(Ether()/IP(src="10.1.0.1", dst="10.1.0.2")/TCP(sport=1000+i, dport=80, flags="S"))
for i in range(4):
    pkts.append(Ether()/Dot1Q(vlan=10)/IP(src="10.2.0.1", dst="10.2.0.2")/UDP(sport=53, dport=2000))
for i in range(3):
    pkts.append(Ether()/Dot1Q(vlan=20)/Dot1Q(vlan=30)/IP(src="10.3.0.1", dst="10.3.0.2")/TCP(sport=5, dport=6, flags="A"))
pkts.append(Ether()/IPv6(src="2001:db8::1", dst="2001:db8::2")/IPv6ExtHdrHopByHop()/IPv6ExtHdrDestOpt()/UDP(sport=7, dport=8)/Raw(b"x"*40))
frags = fragment(IP(src="10.4.0.1", dst="10.4.0.2")/UDP(sport=9, dport=10)/Raw(b"y"*3000), fragsize=1000)
pkts += [Ether()/f for f in frags]
pkts.append(Ether()/IP(src="10.5.0.1", dst="10.5.0.2")/ICMP())
pkts.append(Ether(dst="ff:ff:ff:ff:ff:ff")/ARP())
wrpcapng(sys.argv[1], pkts)
vlan = sum(1 for p in pkts if p.haslayer(Dot1Q))
flows = {(p[IP].src if p.haslayer(IP) else p[IPv6].src, p.sport, p.dport, p.haslayer(TCP))
         for p in pkts if (p.haslayer(TCP) or p.haslayer(UDP)) and not (p.haslayer(IP) and (p[IP].flags.MF or p[IP].frag))}
print(len(pkts), sum(len(p) for p in pkts), vlan, len(frags), len(flows), sum(1 for p in pkts if not (p.haslayer(IP) or p.haslayer(IPv6))))
"#;

#[test]
fn our_stats_agree_with_scapy_on_vlan_qinq_ipv6_and_fragments() {
    let path = temp_file("scapy.pcapng");
    let out = run_ok(
        tool("/usr/bin/python3")
            .args(["-c", SCAPY_SCRIPT])
            .arg(&path),
    );
    let expected: Vec<u64> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    let [packets, bytes, vlan, fragments, flows, non_ip] = expected[..] else {
        panic!("scapy printed {out:?}")
    };
    let data = std::fs::read(&path).unwrap();
    let report = analyse(
        &mut TraceReader::from_bytes(&data).unwrap(),
        StatsConfig::default(),
    )
    .unwrap();
    assert_eq!(report.packets, packets);
    assert_eq!(report.bytes, bytes);
    assert_eq!(report.vlan_tagged, vlan);
    assert_eq!(report.fragments, fragments);
    assert_eq!(report.flows, flows);
    assert_eq!(report.non_ip_packets, non_ip);
    assert_eq!(report.malformed_packets, 0);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn generated_pcap_is_the_same_file_tshark_rewrites() {
    // editcap (Wireshark) rewrites our file as pcapng; we read both the same.
    let path = temp_file("orig.pcap");
    let ng = temp_file("rewritten.pcapng");
    let bytes = generated(Preset::UdpFlows, 0.002, 1, 64);
    std::fs::write(&path, &bytes).unwrap();
    run_ok(tool("editcap").args(["-F", "pcapng"]).arg(&path).arg(&ng));
    let a = records(&bytes);
    let b = records(&std::fs::read(&ng).unwrap());
    assert_eq!(a, b);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&ng);
}
