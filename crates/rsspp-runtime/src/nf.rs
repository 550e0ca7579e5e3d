//! Network functions: the [`NetworkFunction`] trait users implement, the
//! built-in ones, and the chain `rsspp nf --chain` builds.
//!
//! A network function sees each packet with its flow's state: one instance
//! runs on each worker, and the runtime keeps the per-flow states in the
//! flow table of the packet's RSS bucket, which follows the bucket when it
//! moves to another worker. So a function never locks anything and never
//! sees a flow's packets out of order, whatever the rebalancer does.

use std::net::IpAddr;

use rsspp_core::FlowKey;
use serde::Serialize;

use crate::error::RuntimeError;

/// A packet as a network function sees it.
#[derive(Debug)]
pub struct Packet<'a> {
    /// The frame from its Ethernet header; a function may rewrite it (the
    /// runtime transmits what is there).
    pub data: &'a mut [u8],
    /// Its length on the wire (the frame may have been captured shorter).
    pub wire_len: u32,
    /// Its flow, as the RSS hash saw it.
    pub key: FlowKey,
    /// Its Toeplitz hash.
    pub hash: u32,
    /// The kernel's receive timestamp, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
}

/// What becomes of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On to the next function, then out.
    Forward,
    /// Dropped, for this reason (counted under it in the summary).
    Drop(&'static str),
}

/// One flow's line in `--flows-out`: addresses and ports as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowRecord {
    /// IP protocol number.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 without ports).
    pub sport: u16,
    /// Destination port (0 without ports).
    pub dport: u16,
    /// Packets seen.
    pub packets: u64,
    /// Bytes seen (on the wire).
    pub bytes: u64,
    /// First packet's timestamp, nanoseconds since the Unix epoch.
    pub first_ns: u64,
    /// Last packet's timestamp.
    pub last_ns: u64,
}

/// A network function; see the module docs.
pub trait NetworkFunction: Send + 'static {
    /// Its state per flow.
    type State: Send + 'static;

    /// The state of a flow's first packet (before `process` sees it).
    fn new_flow(&mut self, packet: &Packet<'_>) -> Self::State;

    /// Processes a packet with its flow's state; `state` is `None` when the
    /// runtime has none to give (the flow table is full, or the packet
    /// reached a worker that no longer holds its bucket because a move did
    /// not wait for it: `--moves immediate`).
    fn process(&mut self, packet: &mut Packet<'_>, state: Option<&mut Self::State>) -> Verdict;

    /// The flow's line for `--flows-out`, for functions that keep one.
    fn record(&self, _key: &FlowKey, _state: &Self::State) -> Option<FlowRecord> {
        None
    }
}

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
            s.packets += 1;
            s.bytes += u64::from(packet.wire_len);
            s.last_ns = packet.timestamp_ns;
        }
        Verdict::Forward
    }

    fn record(&self, key: &FlowKey, s: &MonitorState) -> Option<FlowRecord> {
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
        })
    }
}

/// The network functions `--chain` knows, by name.
pub const KNOWN: &[&str] = &["monitor"];

/// A chain of built-in functions, run in order on each packet until one
/// drops it.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    monitor: Option<Monitor>,
    names: Vec<&'static str>,
}

/// The states of a flow in a [`Chain`], one per function that keeps one.
#[derive(Debug, Clone, Default)]
pub struct ChainState {
    /// The monitor's.
    pub monitor: Option<MonitorState>,
}

impl Chain {
    /// Parses `monitor[,…]`; an unknown name, a repeated one or an empty
    /// list is refused.
    pub fn parse(list: &str) -> Result<Self, RuntimeError> {
        let mut chain = Chain::default();
        for name in list.split(',').map(str::trim) {
            let unknown = || RuntimeError::UnknownNf {
                name: name.to_string(),
                known: KNOWN.join(", "),
            };
            match name {
                "monitor" if chain.monitor.is_none() => {
                    chain.monitor = Some(Monitor);
                    chain.names.push("monitor");
                }
                "monitor" => {
                    return Err(RuntimeError::Config(format!("--chain names {name} twice")))
                }
                _ => return Err(unknown()),
            }
        }
        Ok(chain)
    }

    /// The functions, in order.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }
}

impl NetworkFunction for Chain {
    type State = ChainState;

    fn new_flow(&mut self, packet: &Packet<'_>) -> ChainState {
        ChainState {
            monitor: self.monitor.as_mut().map(|m| m.new_flow(packet)),
        }
    }

    fn process(&mut self, packet: &mut Packet<'_>, state: Option<&mut ChainState>) -> Verdict {
        if let Some(m) = &mut self.monitor {
            let s = state.and_then(|s| s.monitor.as_mut());
            if let Verdict::Drop(why) = m.process(packet, s) {
                return Verdict::Drop(why);
            }
        }
        Verdict::Forward
    }

    fn record(&self, key: &FlowKey, state: &ChainState) -> Option<FlowRecord> {
        let m = self.monitor.as_ref()?;
        m.record(key, state.monitor.as_ref()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_parses_known_names_only() {
        assert_eq!(Chain::parse("monitor").unwrap().names(), ["monitor"]);
        let e = Chain::parse("monitor,nat").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown network function \"nat\" (known: monitor)"
        );
        assert!(Chain::parse("monitor,monitor").is_err());
        assert!(Chain::parse("").is_err());
    }

    #[test]
    fn the_monitor_counts_packets_and_bytes() {
        let key = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            1,
            2,
            17,
        )
        .unwrap();
        let mut data = [0u8; 60];
        let mut chain = Chain::parse("monitor").unwrap();
        let mut p = Packet {
            data: &mut data,
            wire_len: 100,
            key,
            hash: 0,
            timestamp_ns: 5,
        };
        let mut s = chain.new_flow(&p);
        for _ in 0..3 {
            assert_eq!(chain.process(&mut p, Some(&mut s)), Verdict::Forward);
        }
        let r = chain.record(&key, &s).unwrap();
        assert_eq!((r.packets, r.bytes, r.first_ns, r.last_ns), (3, 300, 5, 5));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"proto":17,"src":"10.0.0.1","dst":"10.0.0.2","sport":1,"dport":2,"packets":3,"bytes":300,"first_ns":5,"last_ns":5}"#
        );
    }
}
