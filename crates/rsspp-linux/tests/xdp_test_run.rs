//! The XDP programs run on crafted frames through BPF_PROG_TEST_RUN: the
//! bucket each frame is counted in must be the one the core crate's
//! Toeplitz hash predicts, and the steering decision the table's entry.
//! Needs root (CI runs as root); loads programs for `lo` without attaching.

mod common;

use std::net::IpAddr;

use common::*;
use rsspp_core::toeplitz::MICROSOFT_VECTORS;
use rsspp_core::{FlowKey, RssKey};
use rsspp_linux::xdp::{
    AttachMode, BadAttachMode, Entry, FlowInput, OtherCounts, Program, Xdp, XdpAction,
    XdpErrorKind, XdpOptions, BUCKET_HOT, BUCKET_OVERRIDES, DEFAULT_CPUMAP_QUEUE,
};

/// What a frame must do to the counters.
#[derive(Debug, Clone)]
enum Expect {
    /// Counted in this flow's bucket.
    Flow(FlowKey),
    NotIp,
    Malformed,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A frame of every kind the parser handles, with what it must count.
fn cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    let (s4, d4) = (ip("66.9.149.187"), ip("161.142.100.80"));
    let (s6, d6) = (ip("3ffe:2501:200:1fff::7"), ip("3ffe:2501:200:3::1"));
    let tcp = L4::Tcp(2794, 1766);
    let udp = L4::Udp(53, 40000);
    let v4_tcp = ip_frame(s4, d4, tcp);
    let v4_udp = ip_frame(s4, d4, udp);
    let v6_tcp = ip_frame(s6, d6, tcp);
    let v6_udp = ip_frame(s6, d6, udp);
    let flow = |s, d, l4| Expect::Flow(flow_of(s, d, l4));
    let addrs = |s, d| Expect::Flow(FlowKey::addresses_only(s, d, 6).unwrap());

    let mut garbage = Rng(7).bytes::<60>().to_vec();
    garbage[12..14].copy_from_slice(&[0x12, 0x34]);
    let mut bad_version = v4_tcp.clone();
    bad_version[14] = 0x65;
    let mut short_ihl = v4_tcp.clone();
    short_ihl[14] = 0x44;
    let mut long_ihl = v4_tcp[..14 + 20 + 20].to_vec();
    long_ihl[14] = 0x4f; // 60 bytes of header announced, 40 present

    vec![
        ("IPv4 TCP", v4_tcp.clone(), flow(s4, d4, tcp)),
        ("IPv4 UDP", v4_udp.clone(), flow(s4, d4, udp)),
        ("IPv6 TCP", v6_tcp.clone(), flow(s6, d6, tcp)),
        ("IPv6 UDP", v6_udp.clone(), flow(s6, d6, udp)),
        ("IPv4 ICMP", ip_frame(s4, d4, L4::Icmp), addrs(s4, d4)),
        ("IPv6 ICMPv6", ip_frame(s6, d6, L4::Icmp), addrs(s6, d6)),
        (
            "802.1Q IPv4 TCP",
            with_vlans(&v4_tcp, &[(0x8100, 100)]),
            flow(s4, d4, tcp),
        ),
        (
            "QinQ IPv6 UDP",
            with_vlans(&v6_udp, &[(0x88a8, 10), (0x8100, 20)]),
            flow(s6, d6, udp),
        ),
        (
            "QinQ 802.1Q twice IPv4 UDP",
            with_vlans(&v4_udp, &[(0x8100, 10), (0x8100, 20)]),
            flow(s4, d4, udp),
        ),
        (
            "IPv4 options",
            with_ipv4_options(&v4_tcp, &[0x01, 0x01, 0x01, 0x00, 0x94, 0x04, 0, 0]),
            flow(s4, d4, tcp),
        ),
        (
            "IPv4 first fragment",
            ipv4_fragment(&v4_tcp, 0, true),
            addrs(s4, d4),
        ),
        (
            "IPv4 last fragment",
            ipv4_fragment(&v4_udp, 100, false),
            addrs(s4, d4),
        ),
        (
            "IPv6 hop-by-hop + destination options",
            with_ipv6_ext(&with_ipv6_ext(&v6_tcp, 60), 0),
            flow(s6, d6, tcp),
        ),
        (
            "IPv6 routing header",
            with_ipv6_ext(&v6_udp, 43),
            flow(s6, d6, udp),
        ),
        (
            "IPv6 authentication header",
            with_ipv6_ext(&v6_tcp, 51),
            flow(s6, d6, tcp),
        ),
        (
            "IPv6 first fragment",
            with_ipv6_fragment(&v6_udp, 0, true),
            addrs(s6, d6),
        ),
        (
            "IPv6 later fragment",
            with_ipv6_fragment(&v6_tcp, 185, false),
            addrs(s6, d6),
        ),
        (
            "IPv6 atomic fragment",
            with_ipv6_fragment(&v6_tcp, 0, false),
            flow(s6, d6, tcp),
        ),
        (
            "IPv6 five extension headers",
            (0..5).fold(v6_udp.clone(), |f, _| with_ipv6_ext(&f, 60)),
            addrs(s6, d6),
        ),
        ("ARP", arp_frame(), Expect::NotIp),
        ("garbage", garbage, Expect::NotIp),
        (
            "three VLAN tags",
            with_vlans(&v4_tcp, &[(0x88a8, 1), (0x8100, 2), (0x8100, 3)]),
            Expect::NotIp,
        ),
        (
            "Ethernet header only",
            v4_tcp[..14].to_vec(),
            Expect::Malformed,
        ),
        (
            "IPv4 header cut",
            v4_tcp[..14 + 10].to_vec(),
            Expect::Malformed,
        ),
        (
            "TCP header cut",
            v4_tcp[..14 + 20 + 12].to_vec(),
            Expect::Malformed,
        ),
        (
            "UDP header cut",
            v6_udp[..14 + 40 + 6].to_vec(),
            Expect::Malformed,
        ),
        (
            "IPv6 header cut",
            with_vlans(&v6_tcp, &[(0x8100, 5)])[..18 + 30].to_vec(),
            Expect::Malformed,
        ),
        (
            "VLAN tag cut",
            with_vlans(&v4_tcp, &[(0x8100, 5)])[..16].to_vec(),
            Expect::Malformed,
        ),
        ("IP version 6 in IPv4", bad_version, Expect::Malformed),
        ("IHL 4", short_ihl, Expect::Malformed),
        ("IHL past the frame", long_ihl, Expect::Malformed),
    ]
}

/// The counters of a loaded program.
struct Snapshot {
    buckets: Vec<u64>,
    cpus: Vec<u64>,
    other: OtherCounts,
}

fn snapshot(x: &Xdp) -> Snapshot {
    let mut buckets = vec![0; x.reta_size()];
    let mut cpus = vec![0; x.possible_cpus()];
    x.bucket_packets(&mut buckets).unwrap();
    x.cpu_packets(&mut cpus).unwrap();
    Snapshot {
        buckets,
        cpus,
        other: x.other_counts().unwrap(),
    }
}

/// Indices whose count grew, with the growth.
fn grown(before: &[u64], after: &[u64]) -> Vec<(usize, u64)> {
    before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (b, a))| a != b)
        .map(|(i, (b, a))| (i, a - b))
        .collect()
}

/// Up to two online CPUs to steer to.
fn steering_cpus() -> Vec<u32> {
    let online = rsspp_linux::cpu::CpuList::online().unwrap().cpus().to_vec();
    online.into_iter().take(2).collect()
}

#[test]
fn steering_counts_each_frame_in_its_bucket_and_redirects_to_its_cpu() {
    if !bpf_ready("steering test") {
        return;
    }
    let cpus = steering_cpus();
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 128;
    opts.default_cpu = *cpus.last().unwrap();
    let x = Xdp::load(
        &opts,
        Program::Steer {
            cpus: cpus.clone(),
            cpumap_queue: DEFAULT_CPUMAP_QUEUE,
            ordered_moves: true,
        },
    )
    .unwrap();
    for (name, frame, expect) in cases() {
        let before = snapshot(&x);
        let run = x.test_run(&frame, 1).unwrap();
        let after = snapshot(&x);
        // Every frame is redirected: IP ones to their bucket's CPU, the
        // others to the default CPU.
        assert_eq!(run.action, XdpAction::Redirect, "{name}");
        let target = match &expect {
            Expect::Flow(flow) => {
                let b = bucket(&opts.key, flow, 128);
                assert_eq!(
                    grown(&before.buckets, &after.buckets),
                    [(b, 1)],
                    "{name}: {flow}"
                );
                assert_eq!(after.other, before.other, "{name}");
                // The initial `equal` table: bucket i -> cpus[i mod n].
                cpus[b % cpus.len()]
            }
            unhashed => {
                assert!(grown(&before.buckets, &after.buckets).is_empty(), "{name}");
                let mut other = before.other;
                match unhashed {
                    Expect::NotIp => other.not_ip += 1,
                    _ => other.malformed += 1,
                }
                assert_eq!(after.other, other, "{name}");
                opts.default_cpu
            }
        };
        assert_eq!(
            grown(&before.cpus, &after.cpus),
            [(target as usize, 1)],
            "{name}"
        );
    }
}

#[test]
fn counting_counts_each_frame_in_its_bucket_and_passes_it() {
    if !bpf_ready("counting test") {
        return;
    }
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 512;
    opts.key = RssKey::symmetric();
    let x = Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap();
    assert!(x.steering_cpus().is_empty());
    for (name, frame, expect) in cases() {
        let before = snapshot(&x);
        let run = x.test_run(&frame, 3).unwrap();
        let after = snapshot(&x);
        assert_eq!(run.action, XdpAction::Pass, "{name}");
        match &expect {
            Expect::Flow(flow) => {
                let b = bucket(&opts.key, flow, 512);
                assert_eq!(
                    grown(&before.buckets, &after.buckets),
                    [(b, 3)],
                    "{name}: {flow}"
                );
                assert_eq!(after.other, before.other, "{name}");
            }
            unhashed => {
                assert!(grown(&before.buckets, &after.buckets).is_empty(), "{name}");
                let (n, m) = match unhashed {
                    Expect::NotIp => (3, 0),
                    _ => (0, 3),
                };
                assert_eq!(after.other.not_ip, before.other.not_ip + n, "{name}");
                assert_eq!(after.other.malformed, before.other.malformed + m, "{name}");
            }
        }
        // Counted on the CPU that ran it (the test thread may migrate
        // between runs, so only the total is fixed).
        let total: u64 = grown(&before.cpus, &after.cpus).iter().map(|g| g.1).sum();
        assert_eq!(total, 3, "{name}");
    }
}

/// The one bucket a frame is counted in.
fn bucket_hit(x: &Xdp, frame: &[u8]) -> usize {
    let mut before = vec![0; x.reta_size()];
    let mut after = vec![0; x.reta_size()];
    x.bucket_packets(&mut before).unwrap();
    x.test_run(frame, 1).unwrap();
    x.bucket_packets(&mut after).unwrap();
    let hits = grown(&before, &after);
    assert_eq!(hits.len(), 1, "{hits:?}");
    hits[0].0
}

#[test]
fn bpf_toeplitz_matches_microsoft_vectors() {
    if !bpf_ready("Microsoft vectors test") {
        return;
    }
    // With 65536 buckets the bucket is the hash's low 16 bits.
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 65536;
    let count = Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap();
    let steer = Xdp::load(
        &opts,
        Program::Steer {
            cpus: steering_cpus(),
            cpumap_queue: 64,
            ordered_moves: true,
        },
    )
    .unwrap();
    for x in [&count, &steer] {
        for &(src, sport, dst, dport, addr_hash, port_hash) in MICROSOFT_VECTORS {
            let (s, d) = (ip(src), ip(dst));
            let with_ports = ip_frame(s, d, L4::Tcp(sport, dport));
            assert_eq!(
                bucket_hit(x, &with_ports),
                (port_hash & 0xffff) as usize,
                "{src} {dst}"
            );
            // A UDP fragment is hashed on its addresses.
            let fragment = match s {
                IpAddr::V4(_) => ipv4_fragment(&ip_frame(s, d, L4::Udp(sport, dport)), 10, true),
                IpAddr::V6(_) => {
                    with_ipv6_fragment(&ip_frame(s, d, L4::Udp(sport, dport)), 10, true)
                }
            };
            assert_eq!(
                bucket_hit(x, &fragment),
                (addr_hash & 0xffff) as usize,
                "{src} {dst}"
            );
        }
    }
}

#[test]
fn bpf_toeplitz_matches_the_core_crate_with_another_key() {
    if !bpf_ready("other key test") {
        return;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 65536;
    // A 52-byte key, as some NICs use: only the first 40 bytes matter.
    opts.key = RssKey::new(rng.bytes::<52>().to_vec()).unwrap();
    let x = Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap();
    // Many flows, then one read of the counters: the whole histogram must
    // match the core crate's.
    let mut expected = vec![0u64; 65536];
    let mut flows = Vec::new();
    for i in 0..600 {
        let (s, d) = if i % 2 == 0 {
            (
                IpAddr::from(rng.bytes::<4>()),
                IpAddr::from(rng.bytes::<4>()),
            )
        } else {
            (
                IpAddr::from(rng.bytes::<16>()),
                IpAddr::from(rng.bytes::<16>()),
            )
        };
        let (sp, dp) = (rng.next() as u16, rng.next() as u16);
        let l4 = match i % 3 {
            0 => L4::Tcp(sp, dp),
            1 => L4::Udp(sp, dp),
            _ => L4::Icmp,
        };
        let flow = flow_of(s, d, l4);
        expected[bucket(&opts.key, &flow, 65536)] += 1;
        x.test_run(&ip_frame(s, d, l4), 1).unwrap();
        flows.push(flow);
    }
    let mut got = vec![0u64; 65536];
    x.bucket_packets(&mut got).unwrap();
    let wrong: Vec<String> = flows
        .iter()
        .filter(|f| {
            let b = bucket(&opts.key, f, 65536);
            got[b] != expected[b]
        })
        .map(|f| f.to_string())
        .collect();
    assert!(wrong.is_empty(), "flows counted elsewhere: {wrong:?}");
    assert_eq!(got, expected);
}

#[test]
fn write_entries_changes_the_decision() {
    if !bpf_ready("table update test") {
        return;
    }
    let cpus = steering_cpus();
    if cpus.len() < 2 {
        eprintln!("skipping table update test: it needs two online CPUs, this machine has one");
        return;
    }
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 64;
    let x = Xdp::load(
        &opts,
        Program::Steer {
            cpus: cpus.clone(),
            cpumap_queue: DEFAULT_CPUMAP_QUEUE,
            ordered_moves: true,
        },
    )
    .unwrap();
    let (s, d, l4) = (ip("10.1.2.3"), ip("10.9.8.7"), L4::Udp(1234, 4321));
    let frame = ip_frame(s, d, l4);
    let b = bucket(&opts.key, &flow_of(s, d, l4), 64);
    let target_of = |x: &Xdp| {
        let before = snapshot(x);
        assert_eq!(x.test_run(&frame, 1).unwrap().action, XdpAction::Redirect);
        let after = snapshot(x);
        let g = grown(&before.cpus, &after.cpus);
        assert_eq!(g.len(), 1);
        g[0].0 as u32
    };
    let first = cpus[b % 2];
    let other = cpus[(b + 1) % 2];
    assert_eq!(target_of(&x), first);
    x.write_entries(&[(b, other)]).unwrap();
    assert_eq!(target_of(&x), other);
    // A whole table naming only `first`.
    x.write_table(&vec![first; 64]).unwrap();
    assert_eq!(target_of(&x), first);
    // Refused updates leave the table as it was.
    let e = x.write_entries(&[(b, other), (64, other)]).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            XdpErrorKind::BucketOutOfRange {
                bucket: 64,
                size: 64
            }
        ),
        "{e}"
    );
    assert_eq!(target_of(&x), first);
    let absent = (0..4096).find(|c| !x.steering_cpus().contains(c)).unwrap();
    let e = x.write_entries(&[(b, other), (0, absent)]).unwrap_err();
    assert!(
        matches!(e.kind(), XdpErrorKind::CpuNotSteered { cpu, .. } if *cpu == absent),
        "{e}"
    );
    assert_eq!(target_of(&x), first);
    let e = x.write_table(&[first; 32]).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            XdpErrorKind::TableLength {
                expected: 64,
                got: 32
            }
        ),
        "{e}"
    );
}

#[test]
fn bad_options_are_refused_with_clear_errors() {
    if !bpf_ready("bad options test") {
        return;
    }
    let steer = |cpus: Vec<u32>| Program::Steer {
        cpus,
        cpumap_queue: DEFAULT_CPUMAP_QUEUE,
        ordered_moves: true,
    };
    let load = |opts: &XdpOptions, p: Program| Xdp::load(opts, p).map(|_| ()).unwrap_err();
    let opts = XdpOptions::new("lo");

    let e = load(
        &XdpOptions::new("rsspp-no-such0"),
        Program::Count { rx_hash: false },
    );
    assert!(matches!(e.kind(), XdpErrorKind::UnknownInterface), "{e}");
    assert!(e.to_string().contains("rsspp-no-such0"), "{e}");

    for size in [0, 100, 131072] {
        let mut o = opts.clone();
        o.reta_size = size;
        assert!(
            matches!(load(&o, steer(vec![0])).kind(), XdpErrorKind::TableSize(s) if *s == size)
        );
    }
    assert!(matches!(
        load(&opts, steer(vec![])).kind(),
        XdpErrorKind::NoCpus
    ));
    let e = load(
        &opts,
        Program::Steer {
            cpus: vec![0],
            cpumap_queue: 0,
            ordered_moves: true,
        },
    );
    assert!(matches!(e.kind(), XdpErrorKind::QueueSize(0)), "{e}");

    let online = rsspp_linux::cpu::CpuList::online().unwrap().cpus().to_vec();
    let offline = (0..).find(|c| !online.contains(c)).unwrap();
    let e = load(&opts, steer(vec![0, offline]));
    assert!(
        matches!(e.kind(), XdpErrorKind::CpuOffline { cpu, .. } if *cpu == offline),
        "{e}"
    );
    assert!(e.to_string().contains(&format!("CPU {offline} ")), "{e}");
    let mut o = opts.clone();
    o.default_cpu = offline;
    assert!(matches!(
        load(&o, steer(vec![0])).kind(),
        XdpErrorKind::CpuOffline { .. }
    ));

    let mut o = opts.clone();
    o.attach = AttachMode::Skb;
    let e = load(&o, Program::Count { rx_hash: true });
    assert!(matches!(e.kind(), XdpErrorKind::RxHashNeedsNative), "{e}");
    // lo has no native XDP, so no program can be bound to it.
    let e = load(&opts, Program::Count { rx_hash: true });
    assert!(
        matches!(e.kind(), XdpErrorKind::RxHashUnsupported(_)),
        "{e}"
    );

    let x = Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap();
    let e = x.write_entries(&[(0, 0)]).unwrap_err();
    assert!(matches!(e.kind(), XdpErrorKind::NoTable), "{e}");
    let mut short = vec![0; x.reta_size() - 1];
    let e = x.bucket_packets(&mut short).unwrap_err();
    assert!(matches!(e.kind(), XdpErrorKind::BufferLength { .. }), "{e}");
    let mut long = vec![0; x.possible_cpus() + 1];
    let e = x.cpu_packets(&mut long).unwrap_err();
    assert!(matches!(e.kind(), XdpErrorKind::BufferLength { .. }), "{e}");
    // The kernel wants at least an Ethernet header.
    let e = x.test_run(&[0; 10], 1).unwrap_err();
    assert!(e.to_string().contains("os error"), "{e}");

    assert!(matches!("native".parse(), Ok(AttachMode::Native)));
    assert!(matches!("skb".parse(), Ok(AttachMode::Skb)));
    assert_eq!("hw".parse::<AttachMode>(), Err(BadAttachMode("hw".into())));
}

/// A steering program with `slots` override slots over two CPUs, every
/// bucket on the first; `None` without root or a second CPU.
fn with_overrides(slots: usize) -> Option<(Xdp, u32, u32)> {
    if !bpf_ready("override test") {
        return None;
    }
    let cpus = steering_cpus();
    if cpus.len() < 2 {
        eprintln!("skipping override test: an override needs a second CPU");
        return None;
    }
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 64;
    opts.default_cpu = cpus[0];
    opts.override_slots = slots;
    let x = Xdp::load(
        &opts,
        Program::Steer {
            cpus: cpus.clone(),
            cpumap_queue: DEFAULT_CPUMAP_QUEUE,
            ordered_moves: true,
        },
    )
    .unwrap();
    let all: Vec<(usize, u32)> = (0..64).map(|b| (b, cpus[0])).collect();
    x.write_entries(&all).unwrap();
    Some((x, cpus[0], cpus[1]))
}

/// IPv4 and IPv6 frames of two flows each, the flows' keys and buckets.
fn override_flows() -> Vec<(&'static str, Vec<u8>, FlowKey)> {
    let (s4, d4) = (ip("10.0.0.1"), ip("10.0.0.2"));
    let (s6, d6) = (ip("fd00::1"), ip("fd00::2"));
    let a = L4::Tcp(40_000, 80);
    let b = L4::Udp(40_001, 53);
    vec![
        ("IPv4 TCP", ip_frame(s4, d4, a), flow_of(s4, d4, a)),
        ("IPv4 UDP", ip_frame(s4, d4, b), flow_of(s4, d4, b)),
        ("IPv6 TCP", ip_frame(s6, d6, a), flow_of(s6, d6, a)),
        ("IPv6 UDP", ip_frame(s6, d6, b), flow_of(s6, d6, b)),
        (
            "IPv4 ICMP",
            ip_frame(s4, d4, L4::Icmp),
            FlowKey::addresses_only(s4, d4, 1).unwrap(),
        ),
    ]
}

#[test]
fn an_override_steers_its_flow_once_its_bucket_is_flagged() {
    let Some((x, a, b)) = with_overrides(4) else {
        return;
    };
    let key = RssKey::microsoft();
    for (name, frame, flow) in override_flows() {
        let input = FlowInput::of(&flow);
        let bucket = bucket(&key, &flow, 64);
        let slot = 2;
        x.write_override(&input, slot, Entry { cpu: b, next: None }, false)
            .unwrap();
        // Not flagged: the table decides, the override is not looked up.
        let before = snapshot(&x);
        x.test_run(&frame, 3).unwrap();
        let after = snapshot(&x);
        assert_eq!(
            grown(&before.cpus, &after.cpus),
            [(a as usize, 3)],
            "{name}"
        );
        // Flagged: the override decides, and counts.
        x.set_bucket_flags(&[(bucket, BUCKET_OVERRIDES)]).unwrap();
        let mut slot_before = vec![0; 4];
        x.override_packets(&mut slot_before).unwrap();
        let before = snapshot(&x);
        let run = x.test_run(&frame, 5).unwrap();
        let after = snapshot(&x);
        assert_eq!(run.action, XdpAction::Redirect, "{name}");
        assert_eq!(
            grown(&before.cpus, &after.cpus),
            [(b as usize, 5)],
            "{name}"
        );
        // Still counted in its bucket (the daemon takes it out).
        assert_eq!(
            grown(&before.buckets, &after.buckets),
            [(bucket, 5)],
            "{name}"
        );
        assert_eq!(
            after.other.overridden - before.other.overridden,
            5,
            "{name}"
        );
        let mut slot_after = vec![0; 4];
        x.override_packets(&mut slot_after).unwrap();
        assert_eq!(grown(&slot_before, &slot_after), [(slot, 5)], "{name}");
        // Another flow of the flagged bucket follows the table. (A frame
        // of the same addresses with other ports is another flow.)
        let mut sport = 1u16;
        let other_frame = loop {
            let f = flow_of(ip("10.9.9.9"), ip("10.0.0.2"), L4::Udp(sport, 2));
            if common::bucket(&key, &f, 64) == bucket {
                break ip_frame(ip("10.9.9.9"), ip("10.0.0.2"), L4::Udp(sport, 2));
            }
            sport += 1;
        };
        let before = snapshot(&x);
        x.test_run(&other_frame, 2).unwrap();
        let after = snapshot(&x);
        assert_eq!(
            grown(&before.cpus, &after.cpus),
            [(a as usize, 2)],
            "{name}"
        );
        // Deleted: the table again.
        x.delete_override(&input).unwrap();
        assert_eq!(x.override_of(&input).unwrap(), None);
        let before = snapshot(&x);
        x.test_run(&frame, 1).unwrap();
        let after = snapshot(&x);
        assert_eq!(
            grown(&before.cpus, &after.cpus),
            [(a as usize, 1)],
            "{name}"
        );
        x.set_bucket_flags(&[(bucket, 0)]).unwrap();
    }
}

#[test]
fn hot_buckets_count_their_flows_and_cool_ones_do_not() {
    let Some((x, _, _)) = with_overrides(1) else {
        return;
    };
    let key = RssKey::microsoft();
    let flows = override_flows();
    // The first flow's bucket is hot; frames of every flow.
    let hot = bucket(&key, &flows[0].2, 64);
    x.set_bucket_flags(&[(hot, BUCKET_HOT)]).unwrap();
    let mut expected: Vec<(FlowInput, u64)> = Vec::new();
    for (i, (_, frame, flow)) in flows.iter().enumerate() {
        let n = i as u32 + 2;
        x.test_run(frame, n).unwrap();
        if bucket(&key, flow, 64) == hot {
            expected.push((FlowInput::of(flow), u64::from(n)));
        }
    }
    let mut taken = Vec::new();
    x.take_flow_packets(&mut taken).unwrap();
    taken.sort();
    expected.sort();
    assert_eq!(taken, expected);
    assert!(!expected.is_empty());
    // Read and cleared.
    taken.clear();
    x.take_flow_packets(&mut taken).unwrap();
    assert!(taken.is_empty(), "{taken:?}");
}

#[test]
fn override_slots_and_cpus_are_checked() {
    let Some((x, a, _)) = with_overrides(2) else {
        return;
    };
    let flow = FlowInput::of(&override_flows()[0].2);
    let e = x
        .write_override(&flow, 2, Entry { cpu: a, next: None }, false)
        .unwrap_err();
    assert!(
        matches!(e.kind(), XdpErrorKind::SlotOutOfRange { slot: 2, slots: 2 }),
        "{e}"
    );
    let e = x
        .write_override(
            &flow,
            0,
            Entry {
                cpu: 4095,
                next: None,
            },
            false,
        )
        .unwrap_err();
    assert!(
        matches!(e.kind(), XdpErrorKind::CpuNotSteered { cpu: 4095, .. }),
        "{e}"
    );
    let mut opts = XdpOptions::new("lo");
    opts.override_slots = 1 << 20;
    let e = Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap_err();
    assert!(matches!(e.kind(), XdpErrorKind::OverrideSlots(_)), "{e}");
}
