//! Reading and writing: frames parsed into the right records, pcap written
//! and read back packet for packet, pcapng time resolutions.

mod common;

use std::net::IpAddr;

use common::{generated, pcap_of, records};
use etherparse::PacketBuilder;
use rsspp_trace::generate::{build_frame, header_len};
use rsspp_trace::record::tcp_flags;
use rsspp_trace::{
    FrameKind, GenConfig, Generator, PcapWriter, Preset, TimePrecision, TraceReader,
};

fn tcp_frame(vlans: &[u16], payload: usize) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]);
    let mut out = Vec::new();
    let payload = vec![0u8; payload];
    match vlans {
        [] => eth
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 443, 12345, 1000)
            .syn()
            .write(&mut out, &payload)
            .unwrap(),
        [a] => eth
            .single_vlan((*a).try_into().unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 443, 12345, 1000)
            .syn()
            .write(&mut out, &payload)
            .unwrap(),
        [a, b] => eth
            .double_vlan((*a).try_into().unwrap(), (*b).try_into().unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 443, 12345, 1000)
            .syn()
            .write(&mut out, &payload)
            .unwrap(),
        _ => unreachable!(),
    }
    out
}

#[test]
fn ethernet_vlan_and_qinq_frames_give_the_same_flow() {
    let frames: Vec<_> = [&[][..], &[100][..], &[200, 300][..]]
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64, tcp_frame(v, 10), 0))
        .map(|(t, f, _)| {
            let len = f.len() as u32;
            (t, f, len)
        })
        .collect();
    let recs = records(&pcap_of(&frames));
    assert_eq!(recs.len(), 3);
    for r in &recs {
        assert_eq!(r.kind, FrameKind::Ip);
        let flow = r.flow.unwrap();
        assert_eq!(flow.src, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(flow.ports, Some((40000, 443)));
        assert_eq!(flow.protocol, 6);
        assert_eq!(r.tcp_flags & tcp_flags::SYN, tcp_flags::SYN);
        assert_eq!(r.tcp_seq, 12345);
    }
    assert_eq!((recs[0].vlan, recs[0].inner_vlan), (None, None));
    assert_eq!((recs[1].vlan, recs[1].inner_vlan), (Some(100), None));
    assert_eq!((recs[2].vlan, recs[2].inner_vlan), (Some(200), Some(300)));
}

/// An IPv6 packet with hop-by-hop and destination-options headers before UDP.
fn ipv6_with_extensions() -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let payload_len: u16 = 8 + 8 + 8 + 4;
    f.extend_from_slice(&[0x6b, 0x80, 0, 0]); // version 6, traffic class 0xb8 (DSCP 46)
    f.extend_from_slice(&payload_len.to_be_bytes());
    f.push(0); // next header: hop-by-hop
    f.push(64);
    f.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    f.extend_from_slice(
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    f.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop → destination options, PadN
    f.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // destination options → UDP
    f.extend_from_slice(&[0x13, 0x88, 0x00, 0x35, 0, 12, 0, 0]); // UDP 5000 → 53
    f.extend_from_slice(&[1, 2, 3, 4]);
    f
}

#[test]
fn ipv6_extension_headers_are_skipped_to_the_ports() {
    let f = ipv6_with_extensions();
    let len = f.len() as u32;
    let r = records(&pcap_of(&[(5, f, len)]))[0];
    assert_eq!(r.kind, FrameKind::Ip);
    let flow = r.flow.unwrap();
    assert_eq!(flow.ports, Some((5000, 53)));
    assert_eq!(flow.protocol, 17);
    assert_eq!(r.dscp, 46);
    assert_eq!(flow.dst, "2001:db8::2".parse::<IpAddr>().unwrap());
}

#[test]
fn fragments_non_ip_icmp_and_cut_headers_are_classified() {
    // IPv4 fragment (more-fragments set): keyed on addresses only.
    let mut frag = tcp_frame(&[], 20);
    frag[14 + 6] = 0x20; // MF
    let ip_sum_zeroed = frag.len() as u32;
    // ARP.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0; 20]);
    // ICMP echo.
    let mut icmp = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut icmp, &[0; 8])
        .unwrap();
    // TCP header cut after 4 bytes, claiming a long packet.
    let cut: Vec<u8> = tcp_frame(&[], 0)[..14 + 20 + 4].to_vec();
    let frames = vec![
        (1, frag, ip_sum_zeroed),
        (2, arp.clone(), arp.len() as u32),
        (3, icmp.clone(), icmp.len() as u32),
        (4, cut, 1514),
    ];
    let recs = records(&pcap_of(&frames));
    assert!(recs[0].fragment);
    assert_eq!(recs[0].kind, FrameKind::Ip);
    assert_eq!(recs[0].flow.unwrap().ports, None);
    assert_eq!(recs[1].kind, FrameKind::NonIp);
    assert_eq!(recs[2].kind, FrameKind::Ip);
    assert_eq!(recs[2].flow.unwrap().protocol, 1);
    assert_eq!(recs[2].flow.unwrap().ports, None);
    assert_eq!(recs[3].kind, FrameKind::Malformed);
    assert_eq!(recs[3].wire_len, 1514);
}

#[test]
fn generated_pcap_reads_back_packet_for_packet() {
    let mut config = GenConfig::new(Preset::Campus);
    config.duration_s = 0.2;
    config.seed = 9;
    let mut expected = Vec::new();
    let mut g = Generator::new(&config).unwrap();
    while let Some(batch) = g.next_batch() {
        expected.extend_from_slice(batch);
    }
    let bytes = generated(Preset::Campus, 0.2, 9, 64);
    let recs = records(&bytes);
    assert_eq!(recs.len(), expected.len());
    assert!(recs.len() > 50_000);
    for (r, p) in recs.iter().zip(&expected) {
        let flow = r.flow.unwrap();
        assert_eq!(r.timestamp_ns, p.timestamp_ns);
        assert_eq!(r.wire_len, u32::from(p.wire_len));
        assert_eq!(r.captured_len, u32::from(p.wire_len).min(64));
        assert_eq!(flow.src, IpAddr::from(p.src.to_be_bytes()));
        assert_eq!(flow.dst, IpAddr::from(p.dst.to_be_bytes()));
        assert_eq!(flow.ports, Some((p.sport, p.dport)));
        assert_eq!(flow.protocol, p.protocol);
        if p.protocol == 6 {
            assert_eq!(r.tcp_flags, p.tcp_flags);
            assert_eq!(r.tcp_seq, p.seq);
        }
    }
}

#[test]
fn generated_frames_have_valid_checksums() {
    let mut config = GenConfig::new(Preset::Elephants);
    config.duration_s = 0.01;
    let mut g = Generator::new(&config).unwrap();
    let batch = g.next_batch().unwrap().to_vec();
    let mut frame = [0u8; 64];
    for p in batch.iter().take(2000) {
        let n = build_frame(p, &mut frame);
        assert_eq!(n, header_len(p));
        let mut full = frame[..n].to_vec();
        full.resize(usize::from(p.wire_len), 0);
        let sliced = etherparse::SlicedPacket::from_ethernet(&full).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else {
            panic!("not IPv4")
        };
        let header = ip.header().to_header();
        assert_eq!(header.header_checksum, header.calc_header_checksum());
        match sliced.transport {
            Some(etherparse::TransportSlice::Tcp(tcp)) => {
                let h = tcp.to_header();
                let want = h.calc_checksum_ipv4(&header, tcp.payload()).unwrap();
                assert_eq!(h.checksum, want);
            }
            Some(etherparse::TransportSlice::Udp(udp)) => {
                let h = udp.to_header();
                let want = h.calc_checksum_ipv4(&header, udp.payload()).unwrap();
                assert_eq!(h.checksum, want);
            }
            _ => panic!("no transport header"),
        }
    }
}

#[test]
fn snaplen_and_time_precision_are_honoured() {
    let frame = tcp_frame(&[], 1000);
    let wire = frame.len() as u32;
    for (precision, ts_back) in [
        (TimePrecision::Nano, 1_700_000_000_123_456_789u64),
        (TimePrecision::Micro, 1_700_000_000_123_456_000u64),
    ] {
        let mut w = PcapWriter::new(Vec::new(), 60, precision).unwrap();
        w.write_frame(1_700_000_000_123_456_789, &frame, wire)
            .unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len(), 24 + 16 + 60);
        let r = records(&bytes)[0];
        assert_eq!(r.timestamp_ns, ts_back);
        assert_eq!(r.wire_len, wire);
        assert_eq!(r.captured_len, 60);
        assert_eq!(r.flow.unwrap().ports, Some((40000, 443)));
    }
    assert!(PcapWriter::new(Vec::new(), 0, TimePrecision::Nano).is_err());
}

fn pcapng_block(kind: u32, body: &[u8]) -> Vec<u8> {
    let padded = body.len().div_ceil(4) * 4;
    let total = (12 + padded) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&total.to_le_bytes());
    b.extend_from_slice(body);
    b.resize(8 + padded, 0);
    b.extend_from_slice(&total.to_le_bytes());
    b
}

/// A pcapng file with one interface of the given `if_tsresol` and one packet.
fn pcapng(tsresol: Option<u8>, units: u64, frame: &[u8]) -> Vec<u8> {
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&0u32.to_le_bytes());
    if let Some(res) = tsresol {
        idb.extend_from_slice(&9u16.to_le_bytes());
        idb.extend_from_slice(&1u16.to_le_bytes());
        idb.extend_from_slice(&[res, 0, 0, 0]);
        idb.extend_from_slice(&[0, 0, 0, 0]);
    }
    let mut epb = Vec::new();
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&((units >> 32) as u32).to_le_bytes());
    epb.extend_from_slice(&(units as u32).to_le_bytes());
    epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    epb.extend_from_slice(&(frame.len() as u32 + 100).to_le_bytes());
    epb.extend_from_slice(frame);
    epb.resize(20 + frame.len().div_ceil(4) * 4, 0);
    let mut out = pcapng_block(0x0a0d_0d0a, &shb);
    out.extend(pcapng_block(1, &idb));
    out.extend(pcapng_block(6, &epb));
    out
}

#[test]
fn pcapng_timestamps_follow_the_interface_resolution() {
    let frame = tcp_frame(&[7], 0);
    for (res, units, want) in [
        (None, 1_700_000_000_000_001u64, 1_700_000_000_000_001_000u64),
        (
            Some(9),
            1_700_000_000_000_000_007,
            1_700_000_000_000_000_007,
        ),
    ] {
        let r = records(&pcapng(res, units, &frame))[0];
        assert_eq!(r.timestamp_ns, want);
        assert_eq!(r.vlan, Some(7));
        assert_eq!(r.wire_len, frame.len() as u32 + 100, "original length kept");
        assert_eq!(r.flow.unwrap().ports, Some((40000, 443)));
    }
}

#[test]
fn a_reader_streams_from_any_read() {
    let bytes = generated(Preset::UdpFlows, 0.01, 1, 64);
    // A reader that hands out 7 bytes at a time, like a slow pipe.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(7).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let n = TraceReader::new(Trickle(&bytes)).unwrap().count();
    assert_eq!(n, records(&bytes).len());
    assert!(
        (9_990..=10_010).contains(&n),
        "{n} packets in 10 ms at 1 Mpps"
    );
}
