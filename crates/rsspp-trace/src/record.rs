//! The compact per-packet record every reader and generator produces.

use rsspp_core::FlowKey;

/// What the link and network layers of a frame turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// An IPv4 or IPv6 packet whose flow could be identified.
    Ip,
    /// A frame that carries no IP packet (ARP, LLDP, unknown EtherType, …).
    NonIp,
    /// An IP packet whose headers are cut short or inconsistent (counted,
    /// not analysed).
    Malformed,
}

/// One packet, reduced to what load balancing and trace analysis need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRecord {
    /// Capture time in nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// Length of the frame on the wire (the capture's original length, not
    /// the snaplen-truncated one).
    pub wire_len: u32,
    /// Bytes actually stored in the capture.
    pub captured_len: u32,
    /// What the frame is.
    pub kind: FrameKind,
    /// The directional flow (addresses always; ports for TCP and UDP when
    /// the packet is not a fragment). `None` unless `kind` is [`FrameKind::Ip`].
    pub flow: Option<FlowKey>,
    /// TCP flags byte (FIN = 0x01, SYN = 0x02, RST = 0x04, ACK = 0x10); 0 otherwise.
    pub tcp_flags: u8,
    /// TCP sequence number; 0 otherwise.
    pub tcp_seq: u32,
    /// Outer 802.1Q VLAN identifier, if tagged.
    pub vlan: Option<u16>,
    /// Inner VLAN identifier of a QinQ (802.1ad) frame.
    pub inner_vlan: Option<u16>,
    /// Differentiated-services code point of the IP header.
    pub dscp: u8,
    /// The packet is an IP fragment (its ports are not known: it is keyed on
    /// addresses only, as NICs hash fragments).
    pub fragment: bool,
}

/// TCP flag bits.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

impl PacketRecord {
    /// A record with no network-layer information.
    pub fn non_ip(timestamp_ns: u64, wire_len: u32, captured_len: u32) -> Self {
        Self {
            timestamp_ns,
            wire_len,
            captured_len,
            kind: FrameKind::NonIp,
            flow: None,
            tcp_flags: 0,
            tcp_seq: 0,
            vlan: None,
            inner_vlan: None,
            dscp: 0,
            fragment: false,
        }
    }

    /// Whether the packet belongs to a TCP or UDP flow with known ports.
    pub fn is_transport_flow(&self) -> bool {
        matches!(self.flow, Some(f) if f.ports.is_some())
    }
}
