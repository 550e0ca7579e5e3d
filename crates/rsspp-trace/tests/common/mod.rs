//! Helpers shared by the integration tests.
#![allow(dead_code)]

use rsspp_trace::generate::write_pcap;
use rsspp_trace::{GenConfig, PacketRecord, Preset, TimePrecision, TraceReader};

/// A generated trace as pcap bytes.
pub fn generated(preset: Preset, seconds: f64, seed: u64, snaplen: u32) -> Vec<u8> {
    let mut config = GenConfig::new(preset);
    config.duration_s = seconds;
    config.seed = seed;
    let mut out = Vec::new();
    write_pcap(&config, &mut out, snaplen, TimePrecision::Nano).unwrap();
    out
}

/// All records of a capture.
pub fn records(bytes: &[u8]) -> Vec<PacketRecord> {
    TraceReader::from_bytes(bytes)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// Builds a classic pcap file around Ethernet frames `(ts_ns, data, wire_len)`.
pub fn pcap_of(frames: &[(u64, Vec<u8>, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (ts, data, wire) in frames {
        out.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&wire.to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}
