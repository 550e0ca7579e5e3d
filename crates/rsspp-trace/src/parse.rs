//! Frame parsing: link layer (Ethernet, 802.1Q, QinQ, raw IP) down to the
//! TCP/UDP ports, with etherparse's lax slicer, which accepts frames cut
//! short by a snaplen and reports what it could not read instead of failing.

use std::net::IpAddr;

use etherparse::{IpNumber, LaxLinkExtSlice, LaxNetSlice, LaxSlicedPacket, TransportSlice};
use rsspp_core::FlowKey;

use crate::record::{FrameKind, PacketRecord};

/// Link-layer types (pcap `LINKTYPE_*`) the parser understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1).
    Ethernet,
    /// `LINKTYPE_RAW` (101), `LINKTYPE_IPV4` (228), `LINKTYPE_IPV6` (229):
    /// the frame starts with the IP header.
    RawIp,
    /// Anything else: every frame is counted as non-IP.
    Other(u32),
}

impl LinkType {
    /// From a pcap link-type number.
    pub fn from_pcap(linktype: u32) -> Self {
        match linktype {
            1 => LinkType::Ethernet,
            101 | 228 | 229 => LinkType::RawIp,
            other => LinkType::Other(other),
        }
    }
}

/// Parses one captured frame into a record. Never fails: what cannot be
/// read is reported through [`PacketRecord::kind`].
pub fn parse_frame(link: LinkType, data: &[u8], timestamp_ns: u64, wire_len: u32) -> PacketRecord {
    let captured_len = data.len() as u32;
    let mut record = PacketRecord::non_ip(timestamp_ns, wire_len, captured_len);
    let sliced = match link {
        LinkType::Ethernet => LaxSlicedPacket::from_ethernet(data).ok(),
        LinkType::RawIp => LaxSlicedPacket::from_ip(data).ok(),
        LinkType::Other(_) => return record,
    };
    let Some(packet) = sliced else {
        if link == LinkType::RawIp || carries_ip(data) {
            record.kind = FrameKind::Malformed;
        }
        return record;
    };
    let mut vlans = packet.link_exts.iter().filter_map(|ext| match ext {
        LaxLinkExtSlice::Vlan(v) => Some(v.vlan_identifier().value()),
        _ => None,
    });
    record.vlan = vlans.next();
    record.inner_vlan = vlans.next();

    let (src, dst, ip_number, fragment, dscp) = match &packet.net {
        Some(LaxNetSlice::Ipv4(ip)) => {
            let h = ip.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                ip.payload().ip_number,
                ip.is_payload_fragmented(),
                h.dcp().value(),
            )
        }
        Some(LaxNetSlice::Ipv6(ip)) => {
            let h = ip.header();
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                ip.payload().ip_number,
                ip.is_payload_fragmented(),
                h.traffic_class() >> 2,
            )
        }
        Some(LaxNetSlice::Arp(_)) => return record,
        None => {
            // An IP EtherType whose header could not be read is malformed;
            // any other EtherType is simply not IP.
            if link == LinkType::RawIp || carries_ip(data) {
                record.kind = FrameKind::Malformed;
            }
            return record;
        }
    };
    record.dscp = dscp;
    record.fragment = fragment;
    let protocol = ip_number.0;
    let mut ports = None;
    if !fragment {
        match &packet.transport {
            Some(TransportSlice::Tcp(tcp)) => {
                ports = Some((tcp.source_port(), tcp.destination_port()));
                record.tcp_flags = tcp.slice()[13];
                record.tcp_seq = tcp.sequence_number();
            }
            Some(TransportSlice::Udp(udp)) => {
                ports = Some((udp.source_port(), udp.destination_port()));
            }
            _ => {
                if ip_number == IpNumber::TCP || ip_number == IpNumber::UDP {
                    // The L4 header is cut short: the flow cannot be named.
                    record.kind = FrameKind::Malformed;
                    return record;
                }
            }
        }
    }
    record.flow = Some(FlowKey {
        src,
        dst,
        ports,
        protocol,
    });
    record.kind = FrameKind::Ip;
    record
}

/// Whether an Ethernet frame's EtherType (after any VLAN tags) is IPv4 or
/// IPv6.
fn carries_ip(frame: &[u8]) -> bool {
    let mut offset = 12;
    while let Some(t) = frame.get(offset..offset + 2) {
        match u16::from_be_bytes([t[0], t[1]]) {
            0x8100 | 0x88a8 | 0x9100 => offset += 4,
            0x0800 | 0x86dd => return true,
            _ => return false,
        }
    }
    false
}
