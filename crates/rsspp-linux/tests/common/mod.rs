//! Helpers shared by the XDP tests: crafted frames, the bucket the core
//! crate predicts, the root check.
#![allow(dead_code)] // each test binary uses its own subset

pub mod foreign;
pub mod netns;

use std::net::IpAddr;

use etherparse::{ArpHardwareId, ArpOperation, ArpPacket, EtherType, PacketBuilder};
use rsspp_core::{bucket_of, FlowKey, RssKey, Toeplitz};
use rsspp_linux::xdp::{Program, Xdp, XdpErrorKind, XdpOptions};

pub const MAC_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const MAC_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const ETH_LEN: usize = 14;

/// Whether the tests can load BPF programs here; prints why not.
pub fn bpf_ready(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {test}: loading XDP programs needs root (CI runs as root)");
        return false;
    }
    match Xdp::load(&XdpOptions::new("lo"), Program::Count { rx_hash: false }) {
        Err(e) => match e.kind() {
            XdpErrorKind::Unsupported { feature } => {
                eprintln!("skipping {test}: this kernel has no {feature}");
                false
            }
            _ => true,
        },
        Ok(_) => true,
    }
}

/// Layer 4 of a crafted frame.
#[derive(Debug, Clone, Copy)]
pub enum L4 {
    Tcp(u16, u16),
    Udp(u16, u16),
    /// ICMP echo request (ICMPv6 for IPv6): hashed on addresses only.
    Icmp,
}

/// An Ethernet frame carrying `src → dst` over `l4`, with a small payload.
pub fn ip_frame(src: IpAddr, dst: IpAddr, l4: L4) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(MAC_SRC, MAC_DST);
    let payload = [0xabu8; 6];
    let mut out = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = eth.ipv4(s.octets(), d.octets(), 64);
            match l4 {
                L4::Tcp(sp, dp) => ip.tcp(sp, dp, 1, 1024).write(&mut out, &payload),
                L4::Udp(sp, dp) => ip.udp(sp, dp).write(&mut out, &payload),
                L4::Icmp => ip.icmpv4_echo_request(1, 1).write(&mut out, &payload),
            }
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = eth.ipv6(s.octets(), d.octets(), 64);
            match l4 {
                L4::Tcp(sp, dp) => ip.tcp(sp, dp, 1, 1024).write(&mut out, &payload),
                L4::Udp(sp, dp) => ip.udp(sp, dp).write(&mut out, &payload),
                L4::Icmp => ip.icmpv6_echo_request(1, 1).write(&mut out, &payload),
            }
        }
        _ => panic!("mixed address families"),
    }
    .expect("writes to a Vec");
    out
}

/// The flow the NIC hashes for a frame made by [`ip_frame`].
pub fn flow_of(src: IpAddr, dst: IpAddr, l4: L4) -> FlowKey {
    match l4 {
        L4::Tcp(sp, dp) => FlowKey::new(src, dst, sp, dp, 6).unwrap(),
        L4::Udp(sp, dp) => FlowKey::new(src, dst, sp, dp, 17).unwrap(),
        L4::Icmp => FlowKey::addresses_only(src, dst, 1).unwrap(),
    }
}

/// The bucket the core crate predicts.
pub fn bucket(key: &RssKey, flow: &FlowKey, size: usize) -> usize {
    bucket_of(Toeplitz::new(key.clone()).hash_flow(flow), size)
}

/// An ARP request.
pub fn arp_frame() -> Vec<u8> {
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &MAC_SRC,
        &[10, 0, 0, 1],
        &[0; 6],
        &[10, 0, 0, 2],
    )
    .unwrap();
    let mut out = Vec::new();
    PacketBuilder::ethernet2(MAC_SRC, [0xff; 6])
        .arp(arp)
        .write(&mut out)
        .unwrap();
    out
}

/// `frame` with VLAN tags (TPID, VLAN id) inserted after the MAC addresses,
/// outermost first.
pub fn with_vlans(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    for &(tpid, vid) in tags {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&vid.to_be_bytes());
    }
    out.extend_from_slice(&frame[12..]);
    out
}

/// An untagged IPv4 frame with `options` (a multiple of 4 bytes) after
/// its 20-byte header; IHL and total length adjusted.
pub fn with_ipv4_options(frame: &[u8], options: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let ip = ETH_LEN;
    let mut out = frame[..ip + 20].to_vec();
    out.extend_from_slice(options);
    out.extend_from_slice(&frame[ip + 20..]);
    out[ip] = 0x40 | (5 + options.len() / 4) as u8;
    let total = u16::from_be_bytes([out[ip + 2], out[ip + 3]]) + options.len() as u16;
    out[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
    out
}

/// An untagged IPv4 frame turned into a fragment: `offset` in 8-byte
/// units, `more` the MF flag. A fragment past the first keeps only the
/// bytes after the IP header as opaque payload.
pub fn ipv4_fragment(frame: &[u8], offset: u16, more: bool) -> Vec<u8> {
    let mut out = frame.to_vec();
    let field = offset | if more { 0x2000 } else { 0 };
    out[ETH_LEN + 6..ETH_LEN + 8].copy_from_slice(&field.to_be_bytes());
    out
}

/// An untagged IPv6 frame with an 8-byte extension header of type
/// `kind` inserted after the fixed header: hop-by-hop 0, routing 43,
/// destination options 60 (length field 0: (0 + 1) * 8 bytes) or
/// authentication 51 (length field 0: (0 + 2) * 4 bytes).
pub fn with_ipv6_ext(frame: &[u8], kind: u8) -> Vec<u8> {
    let ip = ETH_LEN;
    let next = frame[ip + 6];
    // Next header, length 0 (8 bytes), then a PadN option of 4 bytes.
    let ext = [next, 0, 1, 4, 0, 0, 0, 0];
    insert_ipv6_ext(frame, kind, &ext)
}

/// An untagged IPv6 frame with a fragment header (`offset` in 8-byte
/// units, `more` the M flag).
pub fn with_ipv6_fragment(frame: &[u8], offset: u16, more: bool) -> Vec<u8> {
    let next = frame[ETH_LEN + 6];
    let field = (offset << 3) | u16::from(more);
    let [a, b] = field.to_be_bytes();
    let ext = [next, 0, a, b, 0, 0, 0x12, 0x34];
    insert_ipv6_ext(frame, 44, &ext)
}

fn insert_ipv6_ext(frame: &[u8], kind: u8, ext: &[u8]) -> Vec<u8> {
    let ip = ETH_LEN;
    let mut out = frame[..ip + 40].to_vec();
    out.extend_from_slice(ext);
    out.extend_from_slice(&frame[ip + 40..]);
    out[ip + 6] = kind;
    let len = u16::from_be_bytes([out[ip + 4], out[ip + 5]]) + ext.len() as u16;
    out[ip + 4..ip + 6].copy_from_slice(&len.to_be_bytes());
    out
}

/// A small deterministic generator (xorshift) for varied flows.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.next() as u8)
    }
}
