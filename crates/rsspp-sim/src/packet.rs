//! The packet as the simulator sees it: times, a compact flow identifier,
//! and the header-derived fields the policies steer on.

/// Nanoseconds of simulated time since the start of the run.
pub type Ns = u64;

/// One simulated packet (40 bytes; a window of the trace is held at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimPacket {
    /// When the packet reached the system (before any Reframer stage): the
    /// origin of its latency.
    pub arrival_ns: Ns,
    /// When it can be taken from the queue it sits in: its arrival at the
    /// NIC, or the instant a dispatching core put it in a software queue.
    pub ready_ns: Ns,
    /// Flow identifier, unique among the flows alive at a time (identifiers
    /// of flows idle for the workload's flow timeout are reused).
    pub flow: u32,
    /// Position of the packet in its flow (0 for the first packet seen).
    pub seq: u32,
    /// Toeplitz RSS hash of the flow (Microsoft key), as the NIC computes it.
    pub hash: u32,
    /// A header field that is not the RSS input: the addresses folded
    /// together. Traffic classes (Metron) are prefixes of it.
    pub class_key: u32,
    /// A per-flow pseudo-random value (a hash of the 5-tuple with another
    /// function than Toeplitz), for per-flow service-time skew.
    pub salt: u32,
    /// Frame length on the wire.
    pub wire_len: u16,
    /// TCP flags (SYN = 0x02, FIN = 0x01, RST = 0x04); 0 for UDP.
    pub tcp_flags: u8,
    /// IP protocol (6 TCP, 17 UDP, …).
    pub proto: u8,
}

impl SimPacket {
    /// Whether this is a TCP connection request (SYN without ACK).
    pub fn is_syn(&self) -> bool {
        self.proto == 6 && self.tcp_flags & 0x12 == 0x02
    }

    /// Whether this packet closes its TCP connection (FIN or RST).
    pub fn is_fin(&self) -> bool {
        self.proto == 6 && self.tcp_flags & 0x05 != 0
    }

    /// A pseudo-random value per packet that does not depend on the flow's
    /// RSS fields (Sprayer hashes the checksum, which changes per packet).
    pub fn spray_value(&self) -> u32 {
        mix32(self.salt ^ self.seq.wrapping_mul(0x9e37_79b9))
    }
}

/// A 32-bit finaliser (MurmurHash3's fmix32): cheap, well spread.
pub fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_stays_small() {
        assert_eq!(std::mem::size_of::<SimPacket>(), 40);
    }

    #[test]
    fn syn_and_fin_need_tcp() {
        let mut p = SimPacket {
            proto: 6,
            tcp_flags: 0x02,
            ..Default::default()
        };
        assert!(p.is_syn());
        p.tcp_flags = 0x12;
        assert!(!p.is_syn());
        p.tcp_flags = 0x11;
        assert!(p.is_fin());
        p.proto = 17;
        assert!(!p.is_fin());
    }

    #[test]
    fn spray_value_changes_per_packet() {
        let p = SimPacket {
            salt: 7,
            ..Default::default()
        };
        let values: std::collections::BTreeSet<u32> = (0..64)
            .map(|seq| SimPacket { seq, ..p }.spray_value() % 8)
            .collect();
        assert_eq!(values.len(), 8);
    }
}
