//! `monitor`: per-flow packets, bytes, first and last seen.

use rsspp_core::FlowKey;

use super::{FlowRecord, NetworkFunction, Packet, Verdict};

/// `monitor`: per-flow packets, bytes, first and last seen.
#[derive(Debug, Clone, Default)]
pub struct Monitor;

/// The monitor's state of one flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MonitorState {
    /// Packets.
    pub packets: u64,
    /// Bytes on the wire.
    pub bytes: u64,
    /// First packet's timestamp.
    pub first_ns: u64,
    /// Last packet's timestamp.
    pub last_ns: u64,
}

impl MonitorState {
    /// Counts a packet of `wire_len` bytes seen at `timestamp_ns`.
    pub fn count(&mut self, wire_len: u32, timestamp_ns: u64) {
        if self.packets == 0 {
            self.first_ns = timestamp_ns;
        }
        self.packets += 1;
        self.bytes += u64::from(wire_len);
        self.last_ns = timestamp_ns;
    }
}

impl NetworkFunction for Monitor {
    type State = MonitorState;

    fn new_flow(&mut self, packet: &Packet<'_>) -> MonitorState {
        MonitorState {
            first_ns: packet.timestamp_ns,
            ..MonitorState::default()
        }
    }

    fn process(&mut self, packet: &mut Packet<'_>, state: Option<&mut MonitorState>) -> Verdict {
        if let Some(s) = state {
            s.count(packet.wire_len, packet.timestamp_ns);
        }
        Verdict::Forward
    }

    fn record(&self, key: &FlowKey, s: &MonitorState) -> Option<FlowRecord> {
        // An entry stored for a flow not seen yet (the reply side of a NAT
        // mapping) is no flow of the traffic.
        if s.packets == 0 {
            return None;
        }
        let (sport, dport) = key.ports.unwrap_or((0, 0));
        Some(FlowRecord {
            proto: key.protocol,
            src: key.src,
            dst: key.dst,
            sport,
            dport,
            packets: s.packets,
            bytes: s.bytes,
            first_ns: s.first_ns,
            last_ns: s.last_ns,
            dpi_matches: None,
        })
    }
}
