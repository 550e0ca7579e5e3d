//! What both data paths keep of per-flow overrides: which flow holds which
//! slot of the program's override table (the slot counts its packets), the
//! flows of the hot buckets as counted, and the buckets' flags as written.

use std::collections::HashMap;

use rsspp_core::orss::{FlowCount, OverrideCount};
use rsspp_core::{bucket_of, RssKey, Toeplitz};

use crate::xdp::{FlowInput, Xdp, XdpError, BUCKET_HOT, BUCKET_OVERRIDES};

pub(super) struct FlowSlots {
    toeplitz: Toeplitz,
    /// Per slot: its flow and bucket.
    slots: Vec<Option<(FlowInput, usize)>>,
    slot_of: HashMap<FlowInput, usize>,
    free: Vec<usize>,
    /// Per slot: its packets since load as last read.
    last: Vec<u64>,
    packets: Vec<u64>,
    /// Per bucket: its flags as written, and its overrides.
    flags: Vec<u32>,
    overrides_in: Vec<u32>,
    taken: Vec<(FlowInput, u64)>,
}

impl FlowSlots {
    /// `slots` slots of a program over `buckets` buckets hashing with `key`.
    pub(super) fn new(key: RssKey, slots: usize, buckets: usize) -> Self {
        Self {
            toeplitz: Toeplitz::new(key),
            slots: vec![None; slots],
            slot_of: HashMap::new(),
            free: (0..slots).rev().collect(),
            last: vec![0; slots],
            packets: vec![0; slots],
            flags: vec![0; buckets],
            overrides_in: vec![0; buckets],
            taken: Vec::new(),
        }
    }

    /// The slot's flow, if it holds one.
    pub(super) fn flow(&self, slot: usize) -> Option<FlowInput> {
        self.slots[slot].map(|(f, _)| f)
    }

    /// The flow's slot, if it holds one.
    pub(super) fn slot(&self, flow: &FlowInput) -> Option<usize> {
        self.slot_of.get(flow).copied()
    }

    /// Appends the flows of the hot buckets counted since the last call
    /// (the overridden ones aside) to `counted`, and every overridden
    /// flow's packets since then to `overridden`, `settled(slot)` saying
    /// whether its override has settled.
    pub(super) fn count(
        &mut self,
        xdp: &Xdp,
        counted: &mut Vec<FlowCount<FlowInput>>,
        overridden: &mut Vec<OverrideCount<FlowInput>>,
        settled: impl Fn(usize) -> bool,
    ) -> Result<(), XdpError> {
        self.taken.clear();
        xdp.take_flow_packets(&mut self.taken)?;
        let buckets = xdp.reta_size();
        for &(key, packets) in &self.taken {
            if self.slot_of.contains_key(&key) {
                continue;
            }
            let bucket = bucket_of(self.toeplitz.hash(key.hash_input()), buckets);
            counted.push(FlowCount {
                key,
                bucket,
                packets,
            });
        }
        xdp.override_packets(&mut self.packets)?;
        for (slot, flow) in self.slots.iter().enumerate() {
            let Some((key, _)) = *flow else { continue };
            let now = self.packets[slot];
            overridden.push(OverrideCount {
                key,
                packets: now.checked_sub(self.last[slot]).unwrap_or(now),
                settled: settled(slot),
            });
            self.last[slot] = now;
        }
        Ok(())
    }

    /// Takes `flow`'s slot back and deletes its entry from the program's
    /// override table (its frames follow its bucket again); returns the
    /// slot, `None` if the flow held none.
    pub(super) fn release(
        &mut self,
        xdp: &Xdp,
        flow: &FlowInput,
    ) -> Result<Option<usize>, XdpError> {
        let Some(slot) = self.slot_of.remove(flow) else {
            return Ok(None);
        };
        if let Some((_, bucket)) = self.slots[slot].take() {
            self.overrides_in[bucket] -= 1;
        }
        self.free.push(slot);
        xdp.delete_override(flow)?;
        Ok(Some(slot))
    }

    /// Re-reads the slots' packets, so that slots given next count from
    /// what their rows hold now.
    pub(super) fn refresh(&mut self, xdp: &Xdp) -> Result<(), XdpError> {
        xdp.override_packets(&mut self.packets)
    }

    /// Gives `flow` of `bucket` a free slot, if any is left.
    pub(super) fn give(&mut self, flow: FlowInput, bucket: usize) -> Option<usize> {
        let slot = self.free.pop()?;
        self.slot_of.insert(flow, slot);
        self.slots[slot] = Some((flow, bucket));
        self.overrides_in[bucket] += 1;
        self.last[slot] = self.packets[slot];
        Some(slot)
    }

    /// Writes the buckets' flags that changed: hot (`hot`, ascending) and
    /// having overrides. Last in a round: a flow is looked up only once
    /// its override is there.
    pub(super) fn write_flags(&mut self, xdp: &Xdp, hot: &[usize]) -> Result<(), XdpError> {
        let mut changed = Vec::new();
        for (b, flags) in self.flags.iter_mut().enumerate() {
            let want = if hot.binary_search(&b).is_ok() {
                BUCKET_HOT
            } else {
                0
            } | if self.overrides_in[b] > 0 {
                BUCKET_OVERRIDES
            } else {
                0
            };
            if *flags != want {
                *flags = want;
                changed.push((b, want));
            }
        }
        xdp.set_bucket_flags(&changed)
    }
}
