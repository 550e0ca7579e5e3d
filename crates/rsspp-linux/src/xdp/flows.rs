//! Per-flow overrides of the steering table ("elephants inside buckets"):
//! the flags of each bucket (hot: count its flows one by one; has
//! overrides: look its flows up first), the override table, whose entries
//! move as the table's do (the CPU, and the next CPU while the old one
//! drains the flow, with the handoff state of slot `s` at table size + `s`),
//! and the per-flow counts of the hot buckets, read and cleared each round.

use std::fmt;
use std::net::IpAddr;

use libbpf_rs::{MapCore, MapFlags};
use rsspp_core::flow::MAX_HASH_INPUT;
use rsspp_core::FlowKey;

use super::maps::Entry;
use super::{Xdp, XdpError, XdpErrorKind};
use crate::skel::types;

/// A bucket's flag: its flows are counted one by one.
pub const BUCKET_HOT: u32 = 1;
/// A bucket's flag: some of its flows have an override.
pub const BUCKET_OVERRIDES: u32 = 2;

/// Bytes of the C code's `struct flow_key`.
const KEY_BYTES: usize = std::mem::size_of::<types::flow_key>();
const _: () = assert!(KEY_BYTES == MAX_HASH_INPUT + 4);
const KIND_IPV6: u32 = 1;
const KIND_PORTS: u32 = 2;

/// A flow as the steering program names it: its Toeplitz hash input
/// (source and destination addresses, then the ports when it has them),
/// zero-padded, and which of those layouts it is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowInput([u8; KEY_BYTES]);

impl FlowInput {
    /// The flow `key` (its protocol aside: the hash input has none).
    pub fn of(key: &FlowKey) -> Self {
        let mut input = [0u8; MAX_HASH_INPUT];
        let n = key.hash_input(&mut input);
        let mut bytes = [0u8; KEY_BYTES];
        bytes[..MAX_HASH_INPUT].copy_from_slice(&input);
        let kind = match n {
            8 => 0,
            12 => KIND_PORTS,
            32 => KIND_IPV6,
            _ => KIND_IPV6 | KIND_PORTS,
        };
        bytes[MAX_HASH_INPUT..].copy_from_slice(&kind.to_ne_bytes());
        Self(bytes)
    }

    fn kind(&self) -> u32 {
        u32::from_ne_bytes(self.0[MAX_HASH_INPUT..].try_into().expect("4 bytes"))
    }

    /// The Toeplitz hash input.
    pub fn hash_input(&self) -> &[u8] {
        let len = match self.kind() {
            0 => 8,
            KIND_PORTS => 12,
            KIND_IPV6 => 32,
            _ => MAX_HASH_INPUT,
        };
        &self.0[..len]
    }

    fn from_key(key: &[u8]) -> Option<Self> {
        Some(Self(key.get(..KEY_BYTES)?.try_into().ok()?))
    }
}

impl FlowInput {
    /// Source and destination addresses, and the source and destination
    /// ports when the flow has them.
    pub fn endpoints(&self) -> (IpAddr, IpAddr, Option<(u16, u16)>) {
        let b = &self.0;
        let ports = |at: usize| {
            (
                u16::from_be_bytes([b[at], b[at + 1]]),
                u16::from_be_bytes([b[at + 2], b[at + 3]]),
            )
        };
        let kind = self.kind();
        let (src, dst, at) = if kind & KIND_IPV6 != 0 {
            let addr =
                |at: usize| IpAddr::from(<[u8; 16]>::try_from(&b[at..at + 16]).expect("16 bytes"));
            (addr(0), addr(16), 32)
        } else {
            let addr = |at: usize| IpAddr::from([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            (addr(0), addr(4), 8)
        };
        (src, dst, (kind & KIND_PORTS != 0).then(|| ports(at)))
    }
}

impl fmt::Display for FlowInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.endpoints() {
            (IpAddr::V6(s), IpAddr::V6(d), Some((sp, dp))) => write!(f, "[{s}]:{sp} -> [{d}]:{dp}"),
            (s, d, Some((sp, dp))) => write!(f, "{s}:{sp} -> {d}:{dp}"),
            (s, d, None) => write!(f, "{s} -> {d}"),
        }
    }
}

impl fmt::Debug for FlowInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Xdp {
    /// Per-flow override slots loaded (0: none).
    pub fn override_slots(&self) -> usize {
        self.override_slots
    }

    /// The index of override slot `slot`'s handoff state (as a bucket's,
    /// for [`Xdp::handoff_state`]).
    pub fn override_handoff(&self, slot: usize) -> usize {
        self.reta_size + slot
    }

    fn check_slot(&self, slot: usize) -> Result<(), XdpError> {
        if slot >= self.override_slots {
            return Err(self.error(XdpErrorKind::SlotOutOfRange {
                slot,
                slots: self.override_slots,
            }));
        }
        Ok(())
    }

    /// Sets the flags of buckets: `(bucket, BUCKET_HOT | BUCKET_OVERRIDES)`.
    pub fn set_bucket_flags(&self, flags: &[(usize, u32)]) -> Result<(), XdpError> {
        let map = &self.maps.bucket_flags;
        if flags.is_empty() {
            return Ok(());
        }
        let mut keys = Vec::with_capacity(flags.len() * 4);
        let mut values = Vec::with_capacity(flags.len() * 4);
        for &(bucket, f) in flags {
            if bucket >= self.reta_size {
                return Err(self.error(XdpErrorKind::BucketOutOfRange {
                    bucket,
                    size: self.reta_size,
                }));
            }
            keys.extend_from_slice(&(bucket as u32).to_ne_bytes());
            values.extend_from_slice(&f.to_ne_bytes());
        }
        map.update_batch(
            &keys,
            &values,
            flags.len() as u32,
            MapFlags::ANY,
            MapFlags::ANY,
        )
        .map_err(|source| self.bpf_error("writing the buckets' flags", source))
    }

    /// Writes `flow`'s override: slot `slot` (its handoff state and
    /// counters), steering as `entry` says (a CPU, or a CPU and the one it
    /// moves to once drained). With `fresh`, the slot's handoff starts
    /// over (the flow was settled where `entry.cpu` says).
    pub fn write_override(
        &self,
        flow: &FlowInput,
        slot: usize,
        entry: Entry,
        fresh: bool,
    ) -> Result<(), XdpError> {
        self.check_slot(slot)?;
        self.check_cpus(entry)?;
        if entry.next.is_some() && !self.ordered_moves {
            return Err(self.error(XdpErrorKind::NoHandoffs));
        }
        if fresh && entry.next.is_some() {
            let handoff = self
                .maps
                .handoff
                .as_ref()
                .ok_or_else(|| self.error(XdpErrorKind::NoHandoffs))?;
            let state = [0u8; std::mem::size_of::<types::handoff>()];
            self.update(
                handoff,
                self.override_handoff(slot) as u32,
                &state,
                "resetting an override's handoff",
            )?;
        }
        self.put_override(flow, slot, entry.encode())
    }

    /// Counts `flow`'s packets in slot `slot` (a counting program's
    /// override: something else, the NIC's ntuple rule, steers the flow).
    pub fn count_override(&self, flow: &FlowInput, slot: usize) -> Result<(), XdpError> {
        self.check_slot(slot)?;
        self.put_override(flow, slot, 0)
    }

    fn put_override(&self, flow: &FlowInput, slot: usize, entry: u32) -> Result<(), XdpError> {
        let mut value = [0u8; std::mem::size_of::<types::flow_override>()];
        value[..4].copy_from_slice(&entry.to_ne_bytes());
        value[4..8].copy_from_slice(&(slot as u32).to_ne_bytes());
        self.maps
            .overrides
            .update(&flow.0, &value, MapFlags::ANY)
            .map_err(|source| self.bpf_error("writing an override", source))
    }

    /// `flow`'s override as the program sees it now: its entry and slot.
    pub fn override_of(&self, flow: &FlowInput) -> Result<Option<(Entry, usize)>, XdpError> {
        let map = &self.maps.overrides;
        let value = map
            .lookup(&flow.0, MapFlags::ANY)
            .map_err(|source| self.bpf_error("reading an override", source))?;
        Ok(value.and_then(|v| {
            let word = |i: usize| Some(u32::from_ne_bytes(v.get(i..i + 4)?.try_into().ok()?));
            Some((Entry::decode(word(0)?), word(4)? as usize))
        }))
    }

    /// Deletes `flow`'s override (its frames follow the table again).
    pub fn delete_override(&self, flow: &FlowInput) -> Result<(), XdpError> {
        let map = &self.maps.overrides;
        match map.delete(&flow.0) {
            Ok(()) => Ok(()),
            // Gone already (evicted): nothing steers by it.
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(self.bpf_error("deleting an override", source)),
        }
    }

    /// Packets of each override slot since load, summed over CPUs; `out`
    /// has [`Xdp::override_slots`] slots. Read through the map's memory
    /// mapping.
    pub fn override_packets(&self, out: &mut [u64]) -> Result<(), XdpError> {
        if out.len() != self.override_slots {
            return Err(self.error(XdpErrorKind::BufferLength {
                what: "per-override packets",
                expected: self.override_slots,
                got: out.len(),
            }));
        }
        out.fill(0);
        let (_, rows) = &self.maps.override_packets;
        for cpu in 0..self.possible_cpus {
            let base = cpu * self.override_slots;
            for (s, o) in out.iter_mut().enumerate() {
                *o += rows.get(base + s);
            }
        }
        Ok(())
    }

    /// Appends the flows of the hot buckets counted since the last call,
    /// with their packets, and clears them (one
    /// `BPF_MAP_LOOKUP_AND_DELETE_BATCH`).
    pub fn take_flow_packets(&self, out: &mut Vec<(FlowInput, u64)>) -> Result<(), XdpError> {
        let map = &self.maps.flow_packets;
        let batch = map
            .lookup_and_delete_batch(map.max_entries(), MapFlags::ANY, MapFlags::ANY)
            .map_err(|source| self.bpf_error("reading the flows' packets", source))?;
        for (key, value) in batch {
            let (Some(flow), Some(v)) = (
                FlowInput::from_key(&key),
                value.get(..8).and_then(|v| v.try_into().ok()),
            ) else {
                continue;
            };
            out.push((flow, u64::from_ne_bytes(v)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing;
    use super::*;

    /// An override moves as a bucket does: held on its old CPU, each frame
    /// stamped with the slot's handoff state, until the old CPU has
    /// dequeued the last one (written here as the CPUMAP program would);
    /// the next frame switches it.
    #[test]
    fn an_override_switches_only_once_its_old_cpu_has_dequeued_its_last_frame() {
        let test = "override handoff test";
        let Some((x, a, b)) = testing::ordered_steering(test, 3) else {
            return;
        };
        let flow = FlowInput::of(
            &FlowKey::new(
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                1,
                2,
                17,
            )
            .unwrap(),
        );
        let moving = Entry {
            cpu: a,
            next: Some(b),
        };
        x.write_override(&flow, 1, moving, true).unwrap();
        x.set_bucket_flags(&[(0, BUCKET_OVERRIDES)]).unwrap();
        let frame = testing::udp_frame();
        x.test_run(&frame, 3).unwrap();
        let index = x.override_handoff(1);
        assert_eq!(index, 2, "after the table's one bucket");
        let state = x.handoff_state(index).unwrap();
        assert_eq!((state.sent, state.dequeued), (3, 0));
        assert_eq!(x.override_of(&flow).unwrap(), Some((moving, 1)));
        // The bucket's own handoff state is untouched.
        assert_eq!(x.handoff_state(0).unwrap().sent, 0);
        // Dequeued the last stamp: the next frame switches the override.
        testing::write_handoff(&x, index, 3, 3);
        x.test_run(&frame, 1).unwrap();
        assert_eq!(
            x.override_of(&flow).unwrap(),
            Some((Entry { cpu: b, next: None }, 1))
        );
        let mut cpus = vec![0; x.possible_cpus()];
        x.cpu_packets(&mut cpus).unwrap();
        assert_eq!((cpus[a as usize], cpus[b as usize]), (3, 1));
        let mut slots = vec![0; 3];
        x.override_packets(&mut slots).unwrap();
        assert_eq!(slots, vec![0, 4, 0]);
    }

    #[test]
    fn a_flow_input_is_its_hash_input() {
        let v4 = FlowKey::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            1000,
            53,
            17,
        )
        .unwrap();
        let f = FlowInput::of(&v4);
        assert_eq!(f.hash_input(), &[10, 0, 0, 1, 10, 0, 0, 2, 3, 232, 0, 53]);
        assert_eq!(f.to_string(), "10.0.0.1:1000 -> 10.0.0.2:53");
        let v6 =
            FlowKey::addresses_only("::1".parse().unwrap(), "::2".parse().unwrap(), 58).unwrap();
        let f = FlowInput::of(&v6);
        assert_eq!(f.hash_input().len(), 32);
        assert_eq!(f.to_string(), "::1 -> ::2");
    }
}
