//! The header fields the built-in functions read and rewrite, found in an
//! Ethernet frame; Internet checksums updated incrementally (RFC 1624); and
//! the steering key of ICMP errors.

use std::net::{IpAddr, Ipv4Addr};

use rsspp_core::flow::proto;
use rsspp_core::FlowKey;

/// TCP flags.
pub mod tcp {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// Where an IP packet's headers are in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip {
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the transport header (after IPv6 extension headers).
    pub l4: usize,
    /// End of the IP packet in the frame (Ethernet padding excluded).
    pub end: usize,
    /// Transport protocol.
    pub proto: u8,
    /// IPv6 rather than IPv4.
    pub v6: bool,
    /// A fragment other than the first: no transport header.
    pub later_fragment: bool,
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    data.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// The IP headers of an Ethernet frame (up to two VLAN tags); `None` for
/// anything else or a truncated header.
pub fn parse_ip(data: &[u8]) -> Option<Ip> {
    let mut at = 12;
    let mut ethertype = be16(data, at)?;
    let mut tags = 0;
    while matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) && tags < 2 {
        at += 4;
        tags += 1;
        ethertype = be16(data, at)?;
    }
    let l3 = at + 2;
    match ethertype {
        0x0800 => {
            let h = data.get(l3..l3 + 20)?;
            if h[0] >> 4 != 4 || h[0] & 0x0f < 5 {
                return None;
            }
            let l4 = l3 + usize::from(h[0] & 0x0f) * 4;
            if l4 > data.len() {
                return None;
            }
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let frag = u16::from_be_bytes([h[6], h[7]]);
            Some(Ip {
                l3,
                l4,
                end: (l3 + total).clamp(l4, data.len()),
                proto: h[9],
                v6: false,
                later_fragment: frag & 0x1fff != 0,
            })
        }
        0x86dd => {
            let h = data.get(l3..l3 + 40)?;
            if h[0] >> 4 != 6 {
                return None;
            }
            let payload = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let mut nh = h[6];
            let mut l4 = l3 + 40;
            let mut later_fragment = false;
            for _ in 0..4 {
                match nh {
                    44 => {
                        let f = data.get(l4..l4 + 8)?;
                        later_fragment = u16::from_be_bytes([f[2], f[3]]) & 0xfff8 != 0;
                        nh = f[0];
                        l4 += 8;
                    }
                    0 | 43 | 60 | 51 => {
                        let o = data.get(l4..l4 + 2)?;
                        l4 += if nh == 51 {
                            (usize::from(o[1]) + 2) * 4
                        } else {
                            (usize::from(o[1]) + 1) * 8
                        };
                        nh = o[0];
                    }
                    _ => break,
                }
            }
            if l4 > data.len() {
                return None;
            }
            Some(Ip {
                l3,
                l4,
                end: (l3 + 40 + payload).clamp(l4, data.len()),
                proto: nh,
                v6: true,
                later_fragment,
            })
        }
        _ => None,
    }
}

impl Ip {
    /// The TCP flags, for a TCP packet with its header.
    pub fn tcp_flags(&self, data: &[u8]) -> Option<u8> {
        (self.proto == proto::TCP && !self.later_fragment && self.l4 + 14 <= self.end)
            .then(|| data[self.l4 + 13])
    }

    /// The transport payload (after the TCP or UDP header; after the IP
    /// headers for other protocols), within the IP packet's length.
    pub fn payload<'d>(&self, data: &'d [u8]) -> &'d [u8] {
        let start = match self.proto {
            _ if self.later_fragment => self.l4,
            proto::TCP => match data.get(self.l4 + 12) {
                Some(off) => self.l4 + usize::from(off >> 4) * 4,
                None => self.end,
            },
            proto::UDP => self.l4 + 8,
            _ => self.l4,
        };
        data.get(start.min(self.end)..self.end).unwrap_or(&[])
    }

    /// Offset of the transport checksum, for TCP and UDP with their header.
    pub fn l4_checksum_at(&self) -> Option<usize> {
        if self.later_fragment {
            return None;
        }
        match self.proto {
            proto::TCP if self.l4 + 20 <= self.end => Some(self.l4 + 16),
            proto::UDP if self.l4 + 8 <= self.end => Some(self.l4 + 6),
            _ => None,
        }
    }
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum `csum` of data in which the 16-bit-aligned words `old`
/// became `new` (same even length): RFC 1624, eqn. 3,
/// `HC' = ~(~HC + ~m + m')`.
pub fn checksum_update(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert!(old.len() == new.len() && old.len() % 2 == 0);
    let mut sum = u32::from(!csum);
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        sum += u32::from(!u16::from_be_bytes([o[0], o[1]]));
        sum += u32::from(u16::from_be_bytes([n[0], n[1]]));
    }
    !fold(sum)
}

/// The Internet checksum of `data` from scratch (RFC 1071), starting from
/// `initial` (a pseudo-header's sum).
pub fn checksum(initial: u32, data: &[u8]) -> u16 {
    let mut sum = initial;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        sum = (sum & 0xffff) + (sum >> 16);
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    !fold(sum)
}

fn get16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

fn put16(data: &mut [u8], at: usize, v: u16) {
    data[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Which end of an IPv4 packet a rewrite changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The source address and port.
    Source,
    /// The destination address and port.
    Destination,
}

/// Rewrites one end of an IPv4 TCP or UDP packet to `addr:port`, updating
/// the IP header's and the transport checksums incrementally (a UDP
/// checksum of 0, none, stays 0). `ip` must be an IPv4 packet whose
/// transport header is there ([`Ip::l4_checksum_at`]); returns false,
/// changing nothing, otherwise.
pub fn rewrite_v4(data: &mut [u8], ip: &Ip, end: End, addr: Ipv4Addr, port: u16) -> bool {
    let Some(l4_sum) = ip.l4_checksum_at() else {
        return false;
    };
    if ip.v6 {
        return false;
    }
    let (addr_at, port_at) = match end {
        End::Source => (ip.l3 + 12, ip.l4),
        End::Destination => (ip.l3 + 16, ip.l4 + 2),
    };
    let old_addr: [u8; 4] = data[addr_at..addr_at + 4].try_into().expect("4 bytes");
    let new_addr = addr.octets();
    let old_port = data[port_at..port_at + 2].to_vec();
    let new_port = port.to_be_bytes();
    // The IP header's checksum covers the address.
    let ip_sum = get16(data, ip.l3 + 10);
    put16(
        data,
        ip.l3 + 10,
        checksum_update(ip_sum, &old_addr, &new_addr),
    );
    // The transport checksum covers the address (pseudo-header) and port.
    let sum = get16(data, l4_sum);
    if !(ip.proto == proto::UDP && sum == 0) {
        let mut s = checksum_update(sum, &old_addr, &new_addr);
        s = checksum_update(s, &old_port, &new_port);
        if ip.proto == proto::UDP && s == 0 {
            s = 0xffff;
        }
        put16(data, l4_sum, s);
    }
    data[addr_at..addr_at + 4].copy_from_slice(&new_addr);
    data[port_at..port_at + 2].copy_from_slice(&new_port);
    true
}

/// ICMP types that are errors quoting the packet that caused them.
fn is_icmp_error(kind: u8) -> bool {
    // Destination unreachable, time exceeded, parameter problem.
    matches!(kind, 3 | 11 | 12)
}

/// The flow of the packet an unfragmented ICMPv4 error quotes, as that
/// packet was sent (ports when the quoted packet is TCP or UDP, not a
/// fragment, and its first four transport bytes are there); `None` when
/// the frame is not such an error or the quote is unreadable.
pub fn icmp_error_quote(data: &[u8], ip: &Ip) -> Option<FlowKey> {
    if ip.v6 || ip.proto != proto::ICMP || ip.later_fragment {
        return None;
    }
    // Unfragmented only (the fanout program's rule).
    if get16(data, ip.l3 + 6) & 0x3fff != 0 || !is_icmp_error(*data.get(ip.l4)?) {
        return None;
    }
    let inner = ip.l4 + 8;
    let h = data.get(inner..inner + 20)?;
    if h[0] >> 4 != 4 || h[0] & 0x0f < 5 {
        return None;
    }
    let src = IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]));
    let protocol = h[9];
    let fragment = u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0;
    let l4 = inner + usize::from(h[0] & 0x0f) * 4;
    let ports = match data.get(l4..l4 + 4) {
        Some(p) if !fragment && matches!(protocol, proto::TCP | proto::UDP) => Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        )),
        _ => None,
    };
    Some(FlowKey {
        src,
        dst,
        ports,
        protocol,
    })
}

/// The flow a frame is steered by: its own, except for an ICMPv4 error,
/// which goes where the replies to the packet it quotes go (the quoted
/// flow reversed), so that it meets that flow's state. The fanout program
/// (`src/bpf/fanout.bpf.c`) does the same.
pub fn steering_key(key: &FlowKey, data: &[u8]) -> FlowKey {
    if key.protocol != proto::ICMP || !key.src.is_ipv4() {
        return *key;
    }
    parse_ip(data)
        .and_then(|ip| icmp_error_quote(data, &ip))
        .map_or(*key, |q| q.reversed())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP/UDP frame with correct checksums, built by
    /// etherparse.
    pub(crate) fn frame(
        proto: u8,
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        flags: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src, dst, 64);
        let mut out = Vec::new();
        match proto {
            proto::TCP => {
                let mut t = b.tcp(sport, dport, 1000, 64240);
                if flags & tcp::SYN != 0 {
                    t = t.syn();
                }
                if flags & tcp::ACK != 0 {
                    t = t.ack(1);
                }
                if flags & tcp::FIN != 0 {
                    t = t.fin();
                }
                if flags & tcp::RST != 0 {
                    t = t.rst();
                }
                t.write(&mut out, payload).unwrap();
            }
            _ => b.udp(sport, dport).write(&mut out, payload).unwrap(),
        }
        out
    }

    /// Checks a frame's IPv4 and TCP/UDP checksums against etherparse's
    /// computation from scratch.
    pub(crate) fn checksums_ok(data: &[u8]) -> bool {
        let p = etherparse::SlicedPacket::from_ethernet(data).unwrap();
        let Some(etherparse::NetSlice::Ipv4(v4)) = &p.net else {
            return false;
        };
        let h = v4.header().to_header();
        if h.header_checksum != h.calc_header_checksum() {
            return false;
        }
        let payload = v4.payload().payload;
        match &p.transport {
            Some(etherparse::TransportSlice::Tcp(t)) => {
                t.checksum() == t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap()
            }
            Some(etherparse::TransportSlice::Udp(u)) => {
                u.checksum() == 0
                    || u.checksum() == u.to_header().calc_checksum_ipv4(&h, &payload[8..]).unwrap()
            }
            _ => false,
        }
    }

    #[test]
    fn incremental_checksums_equal_a_recomputation() {
        let mut rng = rsspp_core::rand::SplitMix64::new(7);
        for i in 0..500 {
            let proto = if i % 2 == 0 { proto::TCP } else { proto::UDP };
            let r = rng.next_u64();
            let payload: Vec<u8> = (0..(r % 64) as usize)
                .map(|j| (j as u8) ^ (r as u8))
                .collect();
            let mut f = frame(
                proto,
                (r as u32).to_be_bytes(),
                ((r >> 32) as u32).to_be_bytes(),
                (r >> 7) as u16,
                (r >> 23) as u16,
                tcp::ACK,
                &payload,
            );
            assert!(checksums_ok(&f));
            let ip = parse_ip(&f).unwrap();
            let to = Ipv4Addr::from(rng.next_u64() as u32);
            let port = rng.next_u64() as u16;
            let end = if i % 3 == 0 {
                End::Destination
            } else {
                End::Source
            };
            assert!(rewrite_v4(&mut f, &ip, end, to, port));
            assert!(checksums_ok(&f), "frame {i}");
            let key = rsspp_trace::parse::parse_frame(
                rsspp_trace::parse::LinkType::Ethernet,
                &f,
                0,
                f.len() as u32,
            )
            .flow
            .unwrap();
            match end {
                End::Source => assert_eq!((key.src, key.ports.unwrap().0), (IpAddr::V4(to), port)),
                End::Destination => {
                    assert_eq!((key.dst, key.ports.unwrap().1), (IpAddr::V4(to), port))
                }
            }
        }
    }

    #[test]
    fn checksum_from_scratch_matches_rfc_1071_example() {
        // RFC 1071's example words 0001 f203 f4f5 f6f7: sum 0xddf2.
        assert_eq!(
            checksum(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        let old = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        let new = [0x12, 0x34, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(
            checksum_update(checksum(0, &old), &old[..2], &new[..2]),
            checksum(0, &new)
        );
    }

    #[test]
    fn payload_excludes_headers_and_padding() {
        let f = frame(proto::UDP, [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 0, b"abc");
        let mut padded = f.clone();
        padded.resize(60, 0);
        let ip = parse_ip(&padded).unwrap();
        assert_eq!(ip.payload(&padded), b"abc");
        let f = frame(
            proto::TCP,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            1,
            2,
            tcp::SYN,
            b"hello",
        );
        let ip = parse_ip(&f).unwrap();
        assert_eq!(ip.payload(&f), b"hello");
        assert_eq!(ip.tcp_flags(&f), Some(tcp::SYN));
    }

    /// An ICMPv4 error (`kind`) from `router` quoting `quoted`'s first 28
    /// bytes of IP.
    pub(crate) fn icmp_error(kind: u8, router: [u8; 4], quoted: &[u8]) -> Vec<u8> {
        let ip = parse_ip(quoted).unwrap();
        let inner = &quoted[ip.l3..(ip.l3 + 28).min(quoted.len())];
        let to: [u8; 4] = quoted[ip.l3 + 12..ip.l3 + 16].try_into().unwrap();
        let mut out = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 1])
            .ipv4(router, to, 64)
            .icmpv4(etherparse::Icmpv4Type::Unknown {
                type_u8: kind,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut out, inner)
            .unwrap();
        out
    }

    #[test]
    fn an_icmp_error_is_steered_by_the_flow_it_quotes_reversed() {
        let sent = frame(proto::UDP, [10, 0, 0, 1], [192, 0, 2, 9], 4000, 53, 0, b"q");
        let err = icmp_error(3, [198, 51, 100, 1], &sent);
        let key = FlowKey::addresses_only(
            "198.51.100.1".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            proto::ICMP,
        )
        .unwrap();
        let quoted = icmp_error_quote(&err, &parse_ip(&err).unwrap()).unwrap();
        assert_eq!(
            quoted,
            FlowKey::new(
                "10.0.0.1".parse().unwrap(),
                "192.0.2.9".parse().unwrap(),
                4000,
                53,
                17
            )
            .unwrap()
        );
        assert_eq!(steering_key(&key, &err), quoted.reversed());
        // An echo request is steered by its own addresses.
        let mut echo = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([198, 51, 100, 1], [10, 0, 0, 1], 64)
            .icmpv4_echo_request(1, 1)
            .write(&mut echo, b"x")
            .unwrap();
        assert_eq!(steering_key(&key, &echo), key);
    }
}
