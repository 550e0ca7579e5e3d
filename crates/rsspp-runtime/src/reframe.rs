//! Reframer on real packets: a worker's stage between its receive ring and
//! its network functions (seed 002 §4). Each frame is copied out of the ring
//! and held per flow for up to `T_buff`; batches leave at their deadline,
//! at the maximum burst, or when a SYN, FIN or RST of their flow bypasses
//! them, flow-grouped, oldest first. The policy is the engine's
//! ([`rsspp_core::reframer::Reframer`], the simulator's own): this module
//! only gives it dense flow numbers and keeps the frames' bytes.
//!
//! A frame enters at its kernel receive timestamp (on the worker's
//! monotonic clock), not when its ring block was read: the ring hands frames
//! over in blocks (retired every 2 ms at low rates), and timing them by the
//! block would regroup a whole block whatever `T_buff`.
//!
//! Flow numbers are dense and recycled: a flow holds one while it has
//! frames buffered, so the engine's table grows with the flows buffered at
//! once, not with the flows seen. The spatial locality factor of the stream
//! in and out is counted here by flow key (exact whatever the recycling).
//!
//! A worker hands a bucket over only once the bucket's buffered frames went
//! through its functions: see [`ReframeStage::flush_bucket`] and the worker.

use std::collections::HashMap;

use rsspp_core::reframer::{Ns, ReframedPacket, Reframer, ReframerConfig, ReframerCounts};
use rsspp_core::FlowKey;
use rsspp_trace::record::tcp_flags;
use serde::Serialize;

/// `CLOCK_REALTIME`, nanoseconds: the clock of the frames' kernel
/// timestamps, which the worker turns into its monotonic clock.
pub(crate) fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the engine moves around: a handle on a held frame.
#[derive(Debug, Clone, Copy)]
struct Held {
    flow: u32,
    at: Ns,
    slot: u32,
    bypass: bool,
    syn: bool,
}

impl ReframedPacket for Held {
    fn flow(&self) -> u32 {
        self.flow
    }
    fn ready_ns(&self) -> Ns {
        self.at
    }
    fn set_ready_ns(&mut self, at: Ns) {
        self.at = at;
    }
    fn is_syn(&self) -> bool {
        self.syn
    }
    fn bypasses(&self) -> bool {
        self.bypass
    }
}

/// A frame that left the stage, for the worker to process.
#[derive(Debug)]
pub(crate) struct HeldFrame {
    pub data: Vec<u8>,
    pub wire_len: u32,
    pub timestamp_ns: u64,
    pub key: FlowKey,
    pub hash: u32,
    pub bucket: usize,
}

/// A flow with frames buffered: its number and how many.
#[derive(Debug, Clone, Copy)]
struct Buffered {
    id: u32,
    held: u32,
    bucket: usize,
}

/// One worker's stage.
#[derive(Debug)]
pub(crate) struct ReframeStage {
    engine: Reframer<Held>,
    flows: HashMap<FlowKey, Buffered>,
    /// Flow numbers handed out so far.
    next_id: u32,
    free_ids: Vec<u32>,
    frames: Vec<Option<HeldFrame>>,
    free_slots: Vec<u32>,
    /// Spare frame buffers.
    spare: Vec<Vec<u8>>,
    due: Vec<Held>,
    last_in: Option<FlowKey>,
    last_out: Option<FlowKey>,
    runs_in: u64,
    runs_out: u64,
}

/// What a worker's stage did, in its report.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct ReframerReport {
    /// The engine's counts (runs by flow number: see `runs_in`).
    #[serde(flatten)]
    pub counts: ReframerCounts,
    /// Runs of frames of one flow back to back, as received, by flow key.
    pub key_runs_in: u64,
    /// The same, as sent on to the functions.
    pub key_runs_out: u64,
}

impl ReframerReport {
    /// Spatial locality factor of the frames received (mean run of one
    /// flow's frames back to back, seed 002 §2.1).
    pub fn slf_in(&self) -> f64 {
        ratio(self.counts.packets_in, self.key_runs_in)
    }
    /// Spatial locality factor of the frames sent on.
    pub fn slf_out(&self) -> f64 {
        ratio(self.counts.packets_out, self.key_runs_out)
    }
}

fn ratio(packets: u64, runs: u64) -> f64 {
    if runs == 0 {
        0.0
    } else {
        packets as f64 / runs as f64
    }
}

/// Whether TCP flags put a frame in the bypass class: a connection request,
/// or the end of a connection (nothing follows to batch with).
fn bypass_flags(flags: u8) -> (bool, bool) {
    let syn = flags & tcp_flags::SYN != 0 && flags & tcp_flags::ACK == 0;
    (syn || flags & (tcp_flags::FIN | tcp_flags::RST) != 0, syn)
}

impl ReframeStage {
    pub(crate) fn new(config: ReframerConfig) -> Result<Self, rsspp_core::reframer::ReframerError> {
        Ok(Self {
            engine: Reframer::new(config)?,
            flows: HashMap::new(),
            next_id: 0,
            free_ids: Vec::new(),
            frames: Vec::new(),
            free_slots: Vec::new(),
            spare: Vec::new(),
            due: Vec::new(),
            last_in: None,
            last_out: None,
            runs_in: 0,
            runs_out: 0,
        })
    }

    /// Frames held now.
    pub(crate) fn held(&self) -> u64 {
        self.engine.held()
    }

    /// When the oldest batch is due.
    pub(crate) fn next_deadline(&self) -> Option<Ns> {
        self.engine.next_deadline()
    }

    pub(crate) fn report(&self) -> ReframerReport {
        ReframerReport {
            counts: self.engine.counts(),
            key_runs_in: self.runs_in,
            key_runs_out: self.runs_out,
        }
    }

    /// Takes a frame in at `now`; appends to `out` what leaves up to then.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        data: &[u8],
        wire_len: u32,
        timestamp_ns: u64,
        key: FlowKey,
        hash: u32,
        bucket: usize,
        flags: u8,
        now: Ns,
        out: &mut Vec<HeldFrame>,
    ) {
        if self.last_in != Some(key) {
            self.runs_in += 1;
            self.last_in = Some(key);
        }
        let id = match self.flows.get_mut(&key) {
            Some(b) => {
                b.held += 1;
                b.id
            }
            None => {
                let id = self.free_ids.pop().unwrap_or_else(|| {
                    self.next_id += 1;
                    self.next_id - 1
                });
                self.flows.insert(
                    key,
                    Buffered {
                        id,
                        held: 1,
                        bucket,
                    },
                );
                id
            }
        };
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        let frame = HeldFrame {
            data: buf,
            wire_len,
            timestamp_ns,
            key,
            hash,
            bucket,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.frames[s as usize] = Some(frame);
                s
            }
            None => {
                self.frames.push(Some(frame));
                (self.frames.len() - 1) as u32
            }
        };
        let (bypass, syn) = bypass_flags(flags);
        let held = Held {
            flow: id,
            at: now,
            slot,
            bypass,
            syn,
        };
        self.engine.push(&held, &mut self.due);
        self.drain(out);
    }

    /// Lets time pass to `now`: the batches due leave.
    pub(crate) fn advance(&mut self, now: Ns, out: &mut Vec<HeldFrame>) {
        self.engine.advance(now, &mut self.due);
        self.drain(out);
    }

    /// Sends on at once every frame buffered of `bucket` (before the
    /// bucket's state leaves this worker).
    pub(crate) fn flush_bucket(&mut self, bucket: usize, out: &mut Vec<HeldFrame>) {
        let mut ids: Vec<u32> = self
            .flows
            .values()
            .filter(|b| b.bucket == bucket)
            .map(|b| b.id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.engine.flush_flow(id, &mut self.due);
        }
        self.drain(out);
    }

    /// Sends on at once everything buffered.
    pub(crate) fn flush_all(&mut self, out: &mut Vec<HeldFrame>) {
        self.engine.flush_all(&mut self.due);
        self.drain(out);
    }

    /// Gives a frame buffer back for reuse.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < 4096 {
            self.spare.push(buf);
        }
    }

    fn drain(&mut self, out: &mut Vec<HeldFrame>) {
        for h in self.due.drain(..) {
            let frame = self.frames[h.slot as usize]
                .take()
                .expect("a held frame leaves once");
            self.free_slots.push(h.slot);
            if let Some(b) = self.flows.get_mut(&frame.key) {
                b.held -= 1;
                if b.held == 0 {
                    self.free_ids.push(b.id);
                    self.flows.remove(&frame.key);
                }
            }
            if self.last_out != Some(frame.key) {
                self.runs_out += 1;
                self.last_out = Some(frame.key);
            }
            out.push(frame);
        }
    }
}

/// The function of `rsspp reframe`, a bump in the wire that only regroups:
/// forwards every frame unchanged and keeps no flow state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forward;

impl crate::nf::NetworkFunction for Forward {
    type State = ();

    fn new_flow(&mut self, _packet: &crate::nf::Packet<'_>) -> Self::State {}

    fn process(
        &mut self,
        _packet: &mut crate::nf::Packet<'_>,
        _state: Option<&mut Self::State>,
    ) -> crate::nf::Verdict {
        crate::nf::Verdict::Forward
    }

    fn process_flows<F: crate::nf::Flows<Self::State>>(
        &mut self,
        _packet: &mut crate::nf::Packet<'_>,
        _flows: &mut F,
    ) -> crate::nf::Verdict {
        crate::nf::Verdict::Forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(port: u16) -> FlowKey {
        FlowKey {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            protocol: 17,
            ports: Some((port, 53)),
        }
    }

    fn stage() -> ReframeStage {
        ReframeStage::new(ReframerConfig::new(100).unwrap()).unwrap()
    }

    /// (flow port, frame byte) of what left.
    fn seen(out: &[HeldFrame]) -> Vec<(u16, u8)> {
        out.iter()
            .map(|f| (f.key.ports.unwrap().0, f.data[0]))
            .collect()
    }

    #[test]
    fn interleaved_flows_leave_grouped_and_slf_rises() {
        let mut s = stage();
        let mut out = Vec::new();
        for i in 0..6u8 {
            let port = 1 + u16::from(i % 3);
            s.push(
                &[i],
                60,
                0,
                key(port),
                0,
                port as usize,
                0,
                u64::from(i) * 1000,
                &mut out,
            );
        }
        assert!(out.is_empty());
        s.advance(200_000, &mut out);
        assert_eq!(seen(&out), [(1, 0), (1, 3), (2, 1), (2, 4), (3, 2), (3, 5)]);
        let r = s.report();
        assert_eq!((r.key_runs_in, r.key_runs_out), (6, 3));
        assert!((r.slf_in() - 1.0).abs() < 1e-9 && (r.slf_out() - 2.0).abs() < 1e-9);
        // Flow numbers were recycled: nothing left in the tables.
        assert_eq!((s.held(), s.flows.len(), s.free_ids.len()), (0, 0, 3));
    }

    #[test]
    fn fin_and_rst_bypass_after_their_flow() {
        let mut s = stage();
        let mut out = Vec::new();
        s.push(&[0], 60, 0, key(1), 0, 1, tcp_flags::ACK, 0, &mut out);
        s.push(&[1], 60, 0, key(2), 0, 2, tcp_flags::ACK, 1, &mut out);
        s.push(
            &[2],
            60,
            0,
            key(1),
            0,
            1,
            tcp_flags::FIN | tcp_flags::ACK,
            2,
            &mut out,
        );
        assert_eq!(seen(&out), [(1, 0), (1, 2)]);
        s.push(&[3], 60, 0, key(2), 0, 2, tcp_flags::RST, 3, &mut out);
        assert_eq!(seen(&out)[2..], [(2, 1), (2, 3)]);
        assert_eq!(s.report().counts.bypassed, 2);
    }

    #[test]
    fn a_bucket_flushes_alone() {
        let mut s = stage();
        let mut out = Vec::new();
        for (i, (port, bucket)) in [(1, 7), (2, 8), (1, 7), (3, 7)].into_iter().enumerate() {
            s.push(
                &[i as u8],
                60,
                0,
                key(port),
                0,
                bucket,
                0,
                i as u64,
                &mut out,
            );
        }
        s.flush_bucket(7, &mut out);
        assert_eq!(seen(&out), [(1, 0), (1, 2), (3, 3)]);
        assert_eq!(s.held(), 1);
        s.flush_all(&mut out);
        assert_eq!(seen(&out)[3..], [(2, 1)]);
        assert_eq!(s.report().counts.flush_early, 3);
    }
}
