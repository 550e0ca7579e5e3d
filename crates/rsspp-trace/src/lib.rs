//! Packet traces for rsspp: reading pcap and pcapng captures into compact
//! packet records, writing pcap, calibrated synthetic traffic, and trace
//! statistics including Reframer's locality measures.
//!
//! - [`read`]: streaming pcap/pcapng reader ([`TraceReader`]).
//! - [`parse`]: frame parsing (Ethernet, 802.1Q/QinQ, IPv4, IPv6 with
//!   extension headers, TCP, UDP, ICMP) into a [`PacketRecord`].
//! - [`write`](mod@write): pcap writer with a snaplen ([`PcapWriter`]).
//! - [`generate`]: the `campus`, `campus4`, `udp-flows` and `elephants`
//!   presets ([`Generator`]).
//! - [`stats`]: trace analysis ([`TraceStats`], [`TraceReport`]).

#![warn(missing_docs)]

pub mod error;
pub mod generate;
pub mod parse;
pub mod read;
pub mod record;
pub mod stats;
pub mod write;

pub use error::TraceError;
pub use generate::{GenConfig, GenPacket, Generator, Preset};
pub use read::{RawFrame, ReadCounts, TraceReader};
pub use record::{FrameKind, PacketRecord};
pub use stats::{analyse, QueueLocality, StatsConfig, TraceReport, TraceStats};
pub use write::{PcapWriter, TimePrecision};
