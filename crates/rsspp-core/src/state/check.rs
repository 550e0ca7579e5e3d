//! A network function that checks the state layer itself: every packet
//! carries its flow's number and a per-flow sequence number; the per-flow
//! state counts packets and remembers the next sequence number expected.
//! After a run, [`audit`] compares the states with what was sent.
//!
//! The stress tests and `rsspp bench state` use it; it is also a template for
//! a real [`FlowHandler`].

use serde::Serialize;

use crate::flow::FlowKey;
use crate::state::worker::{FlowHandler, FlowPacket};

/// A packet of flow number `flow`, the `seq`-th of that flow (from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SequencedPacket {
    /// The flow.
    pub key: FlowKey,
    /// Its RSS hash.
    pub hash: u32,
    /// Number of the flow in the generator's list.
    pub flow: u32,
    /// Position of the packet in its flow.
    pub seq: u32,
}

impl FlowPacket for SequencedPacket {
    #[inline]
    fn flow_key(&self) -> &FlowKey {
        &self.key
    }

    #[inline]
    fn rss_hash(&self) -> u32 {
        self.hash
    }
}

/// Per-flow state of [`SequenceCheck`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SequenceState {
    /// The flow number of the packet that created it.
    pub flow: u32,
    /// Packets processed with this state.
    pub packets: u64,
    /// One past the highest sequence number processed.
    pub next_seq: u32,
}

/// Counters of [`SequenceCheck`], per core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Hash)]
pub struct SequenceCheck {
    /// Packets with a sequence number below one already processed for their
    /// flow: processed out of order.
    pub reordered: u64,
    /// Packets whose sequence number skipped ahead of the next expected one
    /// (an earlier packet is late, or was lost).
    pub gaps: u64,
    /// Packets processed without state (the table refused their flow).
    pub stateless: u64,
    /// Packets whose state belongs to another flow number (never, unless
    /// keys are confused).
    pub wrong_state: u64,
    /// States created.
    pub new_flows: u64,
}

impl SequenceCheck {
    /// Adds `other`'s counters to these.
    pub fn add(&mut self, other: &SequenceCheck) {
        self.reordered += other.reordered;
        self.gaps += other.gaps;
        self.stateless += other.stateless;
        self.wrong_state += other.wrong_state;
        self.new_flows += other.new_flows;
    }
}

impl FlowHandler for SequenceCheck {
    type Packet = SequencedPacket;
    type State = SequenceState;

    fn new_flow(&mut self, packet: &SequencedPacket, _now: u64) -> SequenceState {
        self.new_flows += 1;
        SequenceState {
            flow: packet.flow,
            packets: 0,
            next_seq: 0,
        }
    }

    #[inline]
    fn process(&mut self, packet: &SequencedPacket, state: Option<&mut SequenceState>, _now: u64) {
        let Some(state) = state else {
            self.stateless += 1;
            return;
        };
        if state.flow != packet.flow {
            self.wrong_state += 1;
        }
        state.packets += 1;
        if packet.seq < state.next_seq {
            self.reordered += 1;
        } else {
            if packet.seq > state.next_seq {
                self.gaps += 1;
            }
            state.next_seq = packet.seq + 1;
        }
    }
}

/// Result of comparing the states found after a run with the packets sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// Flows that were sent packets.
    pub flows: u64,
    /// Flows sent packets but with no state anywhere.
    pub missing: u64,
    /// Flows with more than one state.
    pub duplicated: u64,
    /// Flows whose single state counted a different number of packets than
    /// were sent.
    pub miscounted: u64,
    /// States naming a flow number that was never sent.
    pub unknown: u64,
}

impl Audit {
    /// Flows whose state is missing or lost updates.
    pub fn lost(&self) -> u64 {
        self.missing + self.miscounted
    }

    /// True when every flow has exactly one state with the right count.
    pub fn is_clean(&self) -> bool {
        self.missing == 0 && self.duplicated == 0 && self.miscounted == 0 && self.unknown == 0
    }
}

/// Compares `states` (every state of every table) with `sent[f]`, the
/// packets sent for flow `f`.
pub fn audit<'a>(sent: &[u64], states: impl IntoIterator<Item = &'a SequenceState>) -> Audit {
    let mut seen = vec![0u32; sent.len()];
    let mut counted = vec![0u64; sent.len()];
    let mut a = Audit::default();
    for s in states {
        match seen.get_mut(s.flow as usize) {
            Some(n) => {
                *n += 1;
                counted[s.flow as usize] = s.packets;
            }
            None => a.unknown += 1,
        }
    }
    for (f, &n) in sent.iter().enumerate() {
        if n == 0 {
            continue;
        }
        a.flows += 1;
        match seen[f] {
            0 => a.missing += 1,
            1 if counted[f] != n => a.miscounted += 1,
            1 => {}
            _ => a.duplicated += 1,
        }
    }
    a
}
