//! One worker: a thread pinned to its CPU that polls its receive ring,
//! runs each frame to completion through the network function with its
//! flow's state, and transmits or drops it; between blocks it applies the
//! controller's commands and takes over the buckets other workers hand it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crossbeam_channel::{Receiver, Sender};
use rsspp_core::state::marks::{Moving, Shard, Take};
use rsspp_core::state::{FlowTable, SharedFlowTable};
use rsspp_core::{bucket_of, FlowKey, Toeplitz};
use rsspp_trace::parse::{parse_frame, LinkType};
use rsspp_trace::{FrameKind, PacketRecord};
use serde::Serialize;

use crate::afpacket::{monotonic_ns, pin_to, Frame, RxRing, TxSocket};
use crate::afxdp::{XskRx, XskTx};
use crate::nf::{headers, BucketFlows, NetworkFunction, Packet, SharedFlows, Verdict};
use crate::reframe::{realtime_ns, HeldFrame, ReframeStage, ReframerReport};
use crate::steer::HashInput;

/// What a bucket carries from worker to worker: its flow table, or nothing
/// when the flow table is shared.
pub(crate) type BucketState<S> = Option<FlowTable<S>>;

/// A frame kept aside while its bucket's state is on its way.
#[derive(Debug)]
pub(crate) struct Parked {
    data: Vec<u8>,
    wire_len: u32,
    timestamp_ns: u64,
    key: FlowKey,
    hash: u32,
}

/// The controller's word to a worker.
#[derive(Debug)]
pub(crate) enum ToWorker<S> {
    /// The bucket is coming: park its packets (answered by
    /// [`ToController::Expecting`]).
    Expect { bucket: usize },
    /// The steering switched the bucket to `to` after `mark` packets.
    Release {
        bucket: usize,
        to: usize,
        mark: u64,
        immediate: bool,
    },
    /// Stop waiting for the bucket to drain.
    Force { bucket: usize },
    /// A bucket's state, from another worker.
    Moving(Moving<BucketState<S>>),
    /// Every bucket (and override slot) was switched to the parking member
    /// after these marks: drain them and exit.
    Finish { marks: Vec<u64> },
    /// An override slot is coming, for the flow of `inputs` of `bucket`:
    /// park the frames it steers here (answered by
    /// [`ToController::Expecting`]).
    ExpectFlow {
        slot: usize,
        bucket: usize,
        inputs: Vec<HashInput>,
    },
    /// The flow of `inputs` left `bucket` (this worker's) for override
    /// `slot` at the bucket's count `bucket_mark`: once this worker has
    /// taken that many of the bucket's frames, its entries leave the
    /// bucket's table for `to`, whose count of the slot starts at
    /// `slot_mark`.
    AddRelease {
        slot: usize,
        bucket: usize,
        inputs: Vec<HashInput>,
        to: usize,
        bucket_mark: u64,
        slot_mark: u64,
    },
    /// Override `slot`'s flow comes back into `bucket` (this worker's):
    /// park its frames until the slot's state arrives (answered by
    /// [`ToController::Expecting`]).
    ExpectReturn {
        slot: usize,
        bucket: usize,
        inputs: Vec<HashInput>,
    },
}

/// A worker's word to the controller.
#[derive(Debug)]
pub(crate) enum ToController {
    /// Ready to park the bucket's packets.
    Expecting { worker: usize },
    /// Took the bucket over.
    Accepted { bucket: usize, left_behind: u64 },
    /// Refused a command (a bug): the message.
    Refused { worker: usize, error: String },
}

/// Time a worker spent processing and waiting, for its load, and its
/// counts as of its last publication, for the metrics.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    pub busy_ns: AtomicU64,
    pub idle_ns: AtomicU64,
    counts: Mutex<LiveCounts>,
    /// Frames per flow of the hot buckets since the controller last took
    /// them (`--elephants on`).
    flows: Mutex<HashMap<HashInput, FlowSeen>>,
}

/// A flow counted in a hot bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowSeen {
    pub key: FlowKey,
    pub bucket: usize,
    pub packets: u64,
}

/// A worker's counts while it runs, published about every
/// [`PUBLISH_NS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LiveCounts {
    /// Frames taken from its ring.
    pub received: u64,
    /// Frames dropped, by reason (`ring_full` included).
    pub dropped: BTreeMap<String, u64>,
    /// Its Reframer stage's counts (`--reframer`), and the frames it holds.
    pub reframer: Option<(ReframerReport, u64)>,
}

impl Clock {
    /// The counts last published.
    pub(crate) fn counts(&self) -> LiveCounts {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The flows counted since the last call.
    pub(crate) fn take_flows(&self) -> HashMap<HashInput, FlowSeen> {
        std::mem::take(&mut *self.flows.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn publish_flows(&self, counted: &mut HashMap<HashInput, FlowSeen>) {
        if counted.is_empty() {
            return;
        }
        let mut flows = self.flows.lock().unwrap_or_else(PoisonError::into_inner);
        for (input, f) in counted.drain() {
            flows
                .entry(input)
                .and_modify(|g| g.packets += f.packets)
                .or_insert(f);
        }
    }

    fn publish(
        &self,
        report: &WorkerReport,
        ring_drops: u64,
        reframer: Option<(ReframerReport, u64)>,
    ) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.received = report.received;
        c.reframer = reframer;
        c.dropped.clone_from(&report.dropped);
        if ring_drops > 0 {
            c.dropped.insert("ring_full".into(), ring_drops);
        }
    }
}

/// How often a worker publishes its counts (the metrics read them once a
/// round).
const PUBLISH_NS: u64 = 50_000_000;

/// A worker's totals, in the summary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerReport {
    /// Worker index.
    pub worker: usize,
    /// Its CPU.
    pub cpu: u32,
    /// Frames taken from its ring.
    pub received: u64,
    /// Frames transmitted.
    pub forwarded: u64,
    /// Frames dropped, by reason (the ring's own drops included).
    pub dropped: BTreeMap<String, u64>,
    /// Frames processed without flow state: their bucket had left this
    /// worker before them (`--moves immediate`, or a move forced after a
    /// drop).
    pub stateless: u64,
    /// Frames parked while their bucket's state was on its way.
    pub parked: u64,
    /// Buckets handed over once drained.
    pub handed_over: u64,
    /// Buckets handed over before they drained.
    pub handed_over_early: u64,
    /// Buckets handed over after this worker had taken more of their
    /// frames than their mark (the steering's numbering and the worker's
    /// count disagree: 0 unless the data path has a bug).
    pub overshot: u64,
    /// Buckets taken over.
    pub taken_over: u64,
    /// Time processing, nanoseconds.
    pub busy_ns: u64,
    /// Time waiting for frames, nanoseconds.
    pub idle_ns: u64,
    /// Times CPU scaling left the worker without a bucket, so that it
    /// slept (blocked on its inbox, not polling) until given one.
    pub slept: u64,
    /// Time asleep so (neither busy nor idle in its load), nanoseconds.
    pub slept_ns: u64,
    /// Its Reframer stage (`--reframer`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reframer: Option<ReframerReport>,
}

/// A worker's receive side: its ring in the fanout group, or its AF_XDP
/// sockets.
#[derive(Debug)]
pub(crate) enum Rx {
    Packet(RxRing),
    Xdp(XskRx),
}

/// A worker's transmit side: an AF_PACKET socket (one `sendto` a frame),
/// or an AF_XDP socket on a queue of its own (frames copied into its UMEM,
/// sent a batch at a time).
pub(crate) enum Tx {
    Packet(TxSocket),
    Xdp(XskTx),
}

impl Tx {
    /// Sends `frame` (AF_PACKET), or queues it until the next flush
    /// (AF_XDP); false if refused.
    fn push(&mut self, frame: &[u8]) -> bool {
        match self {
            Tx::Packet(t) => t.send(frame),
            Tx::Xdp(t) => t.push(frame),
        }
    }
}

impl Rx {
    /// Calls `f` on the next frames ready, in order; returns how many (0:
    /// none ready).
    fn next_batch(&mut self, f: impl FnMut(Frame<'_>)) -> usize {
        match self {
            Rx::Packet(r) => r.next_block(f),
            Rx::Xdp(x) => x.next_batch(f),
        }
    }

    /// Waits at most `timeout_ms` for a frame on this ring or on `other`.
    fn wait_with(&self, other: Option<&Rx>, timeout_ms: i32) {
        match (self, other) {
            (Rx::Packet(a), Some(Rx::Packet(b))) => {
                let mut fds = [a.poll_fd(), b.poll_fd()].map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN | libc::POLLERR,
                    revents: 0,
                });
                // SAFETY: two valid pollfds.
                unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
            }
            (Rx::Xdp(a), Some(Rx::Xdp(b))) => a.wait_with(Some(b), timeout_ms),
            (Rx::Packet(a), _) => a.wait(timeout_ms),
            (Rx::Xdp(a), _) => a.wait_with(None, timeout_ms),
        }
    }

    /// Frames the kernel dropped before they reached the worker, since the
    /// last call.
    fn drops(&mut self) -> u64 {
        match self {
            Rx::Packet(r) => r.drops(),
            Rx::Xdp(x) => x.drops(),
        }
    }
}

/// Everything a worker needs, moved into its thread.
pub(crate) struct Worker<N: NetworkFunction> {
    pub index: usize,
    pub cpu: u32,
    pub ring: Rx,
    /// The ring of the frames steered by an override (`--elephants on`).
    pub override_ring: Option<Rx>,
    pub core: Core<N>,
    pub rx: Receiver<ToWorker<N::State>>,
}

/// The worker's state apart from its ring (borrowed separately).
pub(crate) struct Core<N: NetworkFunction> {
    pub index: usize,
    pub nf: N,
    pub shard: Shard<BucketState<N::State>, Parked>,
    pub shared: Option<Arc<SharedFlowTable<N::State>>>,
    pub tx: Option<Tx>,
    pub toeplitz: Toeplitz,
    pub buckets: usize,
    pub peers: Vec<Sender<ToWorker<N::State>>>,
    pub controller: Sender<ToController>,
    pub clock: Arc<Clock>,
    pub report: WorkerReport,
    /// States kept at the end (the final drain hands them to nobody).
    pub finished: Vec<(usize, BucketState<N::State>)>,
    /// Reframer between the ring and the functions (`--reframer`); off
    /// (frames straight through) once the final drain began.
    pub reframe: Option<ReframeStage>,
    /// Frames the stage let go, waiting to be processed.
    pub due: Vec<HeldFrame>,
    /// Monotonic time when the current block was taken (no frame of it
    /// arrived later).
    pub now: u64,
    /// `CLOCK_MONOTONIC` minus `CLOCK_REALTIME`, read with `now`: turns a
    /// frame's kernel timestamp (real time) into the stage's clock.
    pub realtime_to_monotonic: i128,
    /// Per-flow overrides (`--elephants on`).
    pub overrides: Option<FlowOverrides>,
}

/// A worker's side of the per-flow overrides. An override slot is one more
/// entry of the shard (index `buckets + slot`), moved as a bucket is; its
/// state is a table holding its flow's entries only. Adds and frees move
/// those entries between the flow's bucket's table and the slot's.
#[derive(Debug)]
pub(crate) struct FlowOverrides {
    /// Buckets whose flows are counted (the controller's hot buckets).
    pub hot: Arc<[AtomicBool]>,
    /// Flows of the hot buckets counted since the last publication.
    counted: HashMap<HashInput, FlowSeen>,
    /// Hash input → override slot, for the slots held or arriving here.
    slot_of: HashMap<HashInput, usize>,
    /// Slot → its flow's bucket and hash inputs.
    slots: HashMap<usize, (usize, Vec<HashInput>)>,
    /// Flows leaving one of this worker's buckets for an override.
    adds: Vec<Add>,
    /// Flows coming back into one of this worker's buckets, by slot.
    returns: HashMap<usize, Return>,
    /// The newest frame timestamp, the time of entries moved between
    /// tables.
    last_ns: u64,
}

impl FlowOverrides {
    pub(crate) fn new(hot: Arc<[AtomicBool]>) -> Self {
        Self {
            hot,
            counted: HashMap::new(),
            slot_of: HashMap::new(),
            slots: HashMap::new(),
            adds: Vec::new(),
            returns: HashMap::new(),
            last_ns: 0,
        }
    }

    /// The return a frame of `bucket` with hash input `input` belongs to.
    fn returning(&mut self, bucket: usize, input: &HashInput) -> Option<&mut Return> {
        self.returns
            .values_mut()
            .find(|r| r.bucket == bucket && r.inputs.contains(input))
    }
}

/// A flow leaving a bucket for an override slot.
#[derive(Debug)]
struct Add {
    slot: usize,
    bucket: usize,
    inputs: Vec<HashInput>,
    to: usize,
    bucket_mark: u64,
    slot_mark: u64,
    /// Told to stop waiting for the bucket's mark.
    forced: bool,
}

/// A flow coming back from an override slot into its bucket.
#[derive(Debug)]
struct Return {
    bucket: usize,
    inputs: Vec<HashInput>,
    parked: VecDeque<Parked>,
}

/// A flow's Toeplitz input, as the fanout program keys its overrides.
pub(crate) fn hash_input(key: &FlowKey) -> HashInput {
    let mut input = [0; rsspp_core::flow::MAX_HASH_INPUT];
    key.hash_input(&mut input);
    input
}

/// A worker's result: its report, its network function, its flow states.
pub(crate) struct Finished<N: NetworkFunction> {
    pub report: WorkerReport,
    pub nf: N,
    pub states: Vec<(usize, BucketState<N::State>)>,
}

fn count(map: &mut BTreeMap<String, u64>, reason: &str) {
    match map.get_mut(reason) {
        Some(n) => *n += 1,
        None => {
            map.insert(reason.to_string(), 1);
        }
    }
}

/// Runs the function on a packet with its bucket's table.
fn with_table<N: NetworkFunction>(
    nf: &mut N,
    table: &mut FlowTable<N::State>,
    bucket: usize,
    buckets: usize,
    packet: &mut Packet<'_>,
) -> Verdict {
    nf.process_flows(packet, &mut BucketFlows::new(table, bucket, buckets))
}

impl<N: NetworkFunction> Core<N> {
    /// Counts a frame received and parses it: its record, flow, the flow
    /// it is steered by (ICMP errors go with the flow they quote, as in the
    /// programs) and that flow's hash; `None`, counted as dropped, for a
    /// frame that is not IP or is malformed.
    fn classify(&mut self, frame: &Frame<'_>) -> Option<(PacketRecord, FlowKey, FlowKey, u32)> {
        self.report.received += 1;
        let record = parse_frame(
            LinkType::Ethernet,
            frame.data,
            frame.timestamp_ns,
            frame.wire_len,
        );
        let key = match (record.kind, record.flow) {
            (FrameKind::Ip, Some(key)) => key,
            (FrameKind::Malformed, _) => {
                count(&mut self.report.dropped, "malformed");
                return None;
            }
            _ => {
                count(&mut self.report.dropped, "not_ip");
                return None;
            }
        };
        let steering = headers::steering_key(&key, frame.data);
        // The NIC's own hash where it came with the frame: the NIC chose
        // the queue, and the program the word, by it.
        let hash = frame
            .nic_hash
            .unwrap_or_else(|| self.toeplitz.hash_flow(&steering));
        Some((record, key, steering, hash))
    }

    /// One frame, to completion.
    fn frame(&mut self, frame: Frame<'_>) {
        let Some((record, key, steering, hash)) = self.classify(&frame) else {
            return;
        };
        let bucket = bucket_of(hash, self.buckets);
        if let Some(o) = self.overrides.as_mut() {
            o.last_ns = o.last_ns.max(frame.timestamp_ns);
            if o.hot[bucket].load(Ordering::Relaxed) {
                o.counted
                    .entry(hash_input(&steering))
                    .or_insert(FlowSeen {
                        key: steering,
                        bucket,
                        packets: 0,
                    })
                    .packets += 1;
            }
        }
        if let Some(stage) = self.reframe.as_mut() {
            // A bucket leaving this worker skips the stage: its buffered
            // frames were sent on when it began to leave (`flush_bucket`),
            // and what is left of it must reach the mark at once.
            if !self.shard.releasing().contains(&bucket) {
                stage.push(
                    frame.data,
                    frame.wire_len,
                    frame.timestamp_ns,
                    key,
                    hash,
                    bucket,
                    record.tcp_flags,
                    // When the kernel received it, on the monotonic clock
                    // (a clock step moves it at most to the block's time).
                    (i128::from(frame.timestamp_ns) + self.realtime_to_monotonic)
                        .clamp(0, i128::from(self.now)) as u64,
                    &mut self.due,
                );
                self.process_due();
                return;
            }
        }
        if self.park_returning(bucket, &steering, || Parked {
            data: frame.data.to_vec(),
            wire_len: frame.wire_len,
            timestamp_ns: frame.timestamp_ns,
            key,
            hash,
        }) {
            return;
        }
        let packet = Packet {
            data: frame.data,
            wire_len: frame.wire_len,
            key,
            hash,
            timestamp_ns: frame.timestamp_ns,
        };
        self.take_and_process(bucket, bucket, packet);
    }

    /// A frame of `bucket` whose flow is coming back from an override here:
    /// counted as the bucket's (it was steered by the bucket's word) and
    /// parked until the override's state arrives. False for any other.
    fn park_returning(
        &mut self,
        bucket: usize,
        steering: &FlowKey,
        frame: impl FnOnce() -> Parked,
    ) -> bool {
        let Some(o) = self.overrides.as_mut() else {
            return false;
        };
        if o.returns.is_empty() {
            return false;
        }
        let Some(r) = o.returning(bucket, &hash_input(steering)) else {
            return false;
        };
        r.parked.push_back(frame());
        // It counts towards the bucket's mark; the bucket is held here.
        let _ = self.shard.take(bucket);
        true
    }

    /// One frame steered by an override, to completion (no Reframer
    /// stage: an elephant's frames come back to back anyway).
    fn override_frame(&mut self, frame: Frame<'_>) {
        let Some((_, key, steering, hash)) = self.classify(&frame) else {
            return;
        };
        let slot = self.overrides.as_mut().and_then(|o| {
            o.last_ns = o.last_ns.max(frame.timestamp_ns);
            let slot = *o.slot_of.get(&hash_input(&steering))?;
            Some((slot, o.slots.get(&slot)?.0))
        });
        let mut packet = Packet {
            data: frame.data,
            wire_len: frame.wire_len,
            key,
            hash,
            timestamp_ns: frame.timestamp_ns,
        };
        // A slot this worker was never told of: its frame left after the
        // slot did (a forced handoff), without state.
        let Some((slot, bucket)) = slot else {
            self.report.stateless += 1;
            let verdict = self.nf.process(&mut packet, None);
            return self.out(&packet, verdict);
        };
        let index = self.buckets + slot;
        self.take_and_process(index, bucket, packet);
    }

    /// The bucket whose flows a shard entry holds: itself, or an override
    /// slot's flow's bucket.
    fn flow_bucket(&self, index: usize) -> usize {
        if index < self.buckets {
            return index;
        }
        self.overrides
            .as_ref()
            .and_then(|o| o.slots.get(&(index - self.buckets)))
            .map_or(index, |&(bucket, _)| bucket)
    }

    /// Takes the entries of the flow of `inputs` out of `bucket`'s table
    /// into a table of their own (none when the table is shared).
    fn take_flow(&mut self, bucket: usize, inputs: &[HashInput]) -> BucketState<N::State> {
        let now = self.overrides.as_ref().map_or(0, |o| o.last_ns);
        let table = self.shard.state_mut(bucket)?.as_mut()?;
        let keys: Vec<FlowKey> = table
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| inputs.contains(&hash_input(k)))
            .collect();
        let mut own = FlowTable::new(*table.config());
        for k in keys {
            let hash = self.toeplitz.hash_flow(&k);
            if let Some(state) = table.remove(&k, hash) {
                own.insert(k, hash, now, state);
            }
        }
        Some(own)
    }

    /// Adds whose bucket reached its mark (or were told to stop waiting):
    /// the flow's entries leave for the slot's new owner.
    fn complete_adds(&mut self) {
        let Some(o) = self.overrides.as_mut() else {
            return;
        };
        if o.adds.is_empty() {
            return;
        }
        let shard = &self.shard;
        let (ready, waiting): (Vec<Add>, Vec<Add>) = std::mem::take(&mut o.adds)
            .into_iter()
            .partition(|a| a.forced || shard.seen(a.bucket).is_none_or(|s| s >= a.bucket_mark));
        o.adds = waiting;
        for a in ready {
            let seen = self.shard.seen(a.bucket).unwrap_or(a.bucket_mark);
            let state = self.take_flow(a.bucket, &a.inputs);
            let moving = Moving {
                bucket: self.buckets + a.slot,
                from: self.index,
                to: a.to,
                mark: a.slot_mark,
                left_behind: a.bucket_mark.saturating_sub(seen),
                state,
            };
            let _ = self.peers[a.to].send(ToWorker::Moving(moving));
        }
    }

    /// An override's state back into its flow's bucket: the entries join
    /// the bucket's table, then the frames parked for it go through.
    fn complete_return(&mut self, slot: usize, moving: Moving<BucketState<N::State>>) {
        let Some(r) = self
            .overrides
            .as_mut()
            .and_then(|o| o.returns.remove(&slot))
        else {
            return;
        };
        let now = self.overrides.as_ref().map_or(0, |o| o.last_ns);
        let (index, left_behind) = (moving.bucket, moving.left_behind);
        if let (Some(own), Some(Some(table))) = (moving.state, self.shard.state_mut(r.bucket)) {
            for (k, state) in own.into_flows() {
                let hash = self.toeplitz.hash_flow(&k);
                table.insert(k, hash, now, state);
            }
        }
        for mut p in r.parked {
            let mut packet = Packet {
                data: &mut p.data,
                wire_len: p.wire_len,
                key: p.key,
                hash: p.hash,
                timestamp_ns: p.timestamp_ns,
            };
            let verdict = match (self.shard.state_mut(r.bucket), &self.shared) {
                (Some(Some(table)), _) => {
                    with_table(&mut self.nf, table, r.bucket, self.buckets, &mut packet)
                }
                (_, Some(shared)) => self.nf.process_flows(&mut packet, &mut SharedFlows(shared)),
                _ => {
                    self.report.stateless += 1;
                    self.nf.process(&mut packet, None)
                }
            };
            self.out(&packet, verdict);
        }
        let _ = self.controller.send(ToController::Accepted {
            bucket: index,
            left_behind,
        });
    }

    /// Processes the frames the stage let go, in the order it let them go.
    fn process_due(&mut self) {
        if self.due.is_empty() {
            return;
        }
        let mut due = std::mem::take(&mut self.due);
        for f in due.drain(..) {
            self.held_frame(f);
        }
        // Keep the allocation.
        self.due = due;
    }

    /// One frame out of the stage, to completion.
    fn held_frame(&mut self, f: HeldFrame) {
        let HeldFrame {
            data,
            wire_len,
            timestamp_ns,
            key,
            hash,
            bucket,
        } = f;
        let steering = headers::steering_key(&key, &data);
        let mut taken = Some(data);
        if self.park_returning(bucket, &steering, || Parked {
            data: taken.take().expect("taken once"),
            wire_len,
            timestamp_ns,
            key,
            hash,
        }) {
            return;
        }
        let mut data = taken.expect("not parked");
        let packet = Packet {
            data: &mut data,
            wire_len,
            key,
            hash,
            timestamp_ns,
        };
        // Parked (a bucket on its way here), the frame is copied and this
        // buffer goes back to the stage with the others.
        self.take_and_process(bucket, bucket, packet);
        if let Some(stage) = self.reframe.as_mut() {
            stage.recycle(data);
        }
    }

    /// Lets the stage's clock reach `now`: the batches due go through the
    /// functions. True if any did.
    fn reframe_advance(&mut self, now: u64) -> bool {
        let Some(stage) = self.reframe.as_mut() else {
            return false;
        };
        if stage.next_deadline().is_none_or(|d| d > now) {
            return false;
        }
        stage.advance(now, &mut self.due);
        self.process_due();
        true
    }

    /// Sends the bucket's buffered frames through the functions now, while
    /// this worker still holds its state: a handoff never leaves frames of
    /// its bucket behind in the stage.
    fn reframe_flush_bucket(&mut self, bucket: usize) {
        if let Some(stage) = self.reframe.as_mut() {
            stage.flush_bucket(bucket, &mut self.due);
            self.process_due();
        }
    }

    /// Sends every buffered frame through the functions now.
    fn reframe_flush_all(&mut self) {
        if let Some(stage) = self.reframe.as_mut() {
            stage.flush_all(&mut self.due);
            self.process_due();
        }
    }

    /// The stage's counts and the frames it holds; once the final drain
    /// took the stage, its last counts.
    fn reframer_live(&self) -> Option<(ReframerReport, u64)> {
        match &self.reframe {
            Some(stage) => Some((stage.report(), stage.held())),
            None => self.report.reframer.map(|r| (r, 0)),
        }
    }

    /// Frames held in the stage.
    fn reframe_held(&self) -> u64 {
        self.reframe.as_ref().map_or(0, ReframeStage::held)
    }

    /// Processes `packet` with the state of entry `index` of the shard (a
    /// bucket, or an override slot after the buckets) if this worker holds
    /// it, parks it while the state is on its way, or processes it without
    /// state when it came after its entry left.
    fn take_and_process(&mut self, index: usize, bucket: usize, mut packet: Packet<'_>) {
        match self.shard.take(index) {
            Take::Process(state) => {
                let verdict = match (state, &self.shared) {
                    (Some(table), _) => {
                        with_table(&mut self.nf, table, bucket, self.buckets, &mut packet)
                    }
                    (None, Some(shared)) => {
                        self.nf.process_flows(&mut packet, &mut SharedFlows(shared))
                    }
                    (None, None) => unreachable!("an entry without a table and no shared table"),
                };
                self.out(&packet, verdict);
            }
            Take::Park => {
                let parked = Parked {
                    data: packet.data.to_vec(),
                    wire_len: packet.wire_len,
                    timestamp_ns: packet.timestamp_ns,
                    key: packet.key,
                    hash: packet.hash,
                };
                self.shard.park(index, parked);
            }
            Take::Stray => {
                self.report.stateless += 1;
                let verdict = self.nf.process(&mut packet, None);
                self.out(&packet, verdict);
            }
        }
    }

    fn out(&mut self, packet: &Packet<'_>, verdict: Verdict) {
        match verdict {
            Verdict::Drop(why) => count(&mut self.report.dropped, why),
            Verdict::Forward => match self.tx.as_mut().map(|tx| tx.push(packet.data)) {
                Some(true) => self.report.forwarded += 1,
                Some(false) => count(&mut self.report.dropped, "tx_error"),
                None => count(&mut self.report.dropped, "sink"),
            },
        }
    }

    /// Sends what the transmit side holds; true if there was something.
    /// Frames the interface refused were counted as forwarded: they move
    /// to `tx_error`, as do, at the end (`last`), those it never took.
    pub(crate) fn flush_tx(&mut self, last: bool) -> bool {
        let Some(Tx::Xdp(tx)) = self.tx.as_mut() else {
            return false;
        };
        if tx.queued() == 0 {
            return false;
        }
        let f = tx.flush();
        let lost = f.refused + if last { f.stuck } else { 0 };
        if lost > 0 {
            self.report.forwarded = self.report.forwarded.saturating_sub(lost);
            *self.report.dropped.entry("tx_error".into()).or_insert(0) += lost;
        }
        true
    }

    /// Processes the frames parked for a bucket just taken over.
    fn replay(&mut self, bucket: usize, parked: impl IntoIterator<Item = Parked>) {
        let flows_of = self.flow_bucket(bucket);
        for mut p in parked {
            let mut packet = Packet {
                data: &mut p.data,
                wire_len: p.wire_len,
                key: p.key,
                hash: p.hash,
                timestamp_ns: p.timestamp_ns,
            };
            let verdict = match self.shard.take(bucket) {
                Take::Process(Some(table)) => {
                    with_table(&mut self.nf, table, flows_of, self.buckets, &mut packet)
                }
                Take::Process(None) => {
                    let shared = self.shared.as_ref().expect("shared table");
                    self.nf.process_flows(&mut packet, &mut SharedFlows(shared))
                }
                Take::Park | Take::Stray => unreachable!("bucket {bucket} was just taken over"),
            };
            self.out(&packet, verdict);
        }
    }

    /// Sends the states that left to their new owners (or keeps them, in
    /// the final drain).
    fn deliver(&mut self) {
        // What this worker sent goes out before any state leaves it: the
        // new owner's frames of a flow come after its old owner's.
        self.flush_tx(false);
        self.complete_adds();
        self.shard.settle();
        let released: Vec<_> = self.shard.take_released().collect();
        for m in released {
            let slot = m.bucket.checked_sub(self.buckets);
            if let (Some(slot), Some(o)) = (slot, self.overrides.as_mut()) {
                // The slot's frames stop coming here.
                if let Some((_, inputs)) = o.slots.remove(&slot) {
                    for i in inputs {
                        o.slot_of.remove(&i);
                    }
                }
                if o.returns.contains_key(&slot) && m.to == self.index {
                    self.complete_return(slot, m);
                    continue;
                }
            }
            if m.to == self.index {
                self.finished.push((m.bucket, m.state));
            } else {
                // A peer that is gone has exited: nothing to deliver to.
                let _ = self.peers[m.to].send(ToWorker::Moving(m));
            }
        }
    }

    fn refused(&self, error: impl ToString) {
        let _ = self.controller.send(ToController::Refused {
            worker: self.index,
            error: error.to_string(),
        });
    }

    /// Applies one message; returns the final marks when told to finish.
    fn message(&mut self, msg: ToWorker<N::State>) -> Option<Vec<u64>> {
        match msg {
            ToWorker::Expect { bucket } => match self.shard.expect(bucket) {
                Ok(()) => {
                    let _ = self
                        .controller
                        .send(ToController::Expecting { worker: self.index });
                }
                Err(e) => self.refused(e),
            },
            ToWorker::Release {
                bucket,
                to,
                mark,
                immediate,
            } => {
                self.reframe_flush_bucket(bucket);
                if let Err(e) = self.shard.release(bucket, to, mark, immediate) {
                    self.refused(e);
                }
            }
            ToWorker::Force { bucket } => {
                let slot = bucket.checked_sub(self.buckets);
                let add = self
                    .overrides
                    .as_mut()
                    .and_then(|o| o.adds.iter_mut().find(|a| Some(a.slot) == slot));
                match add {
                    Some(a) => a.forced = true,
                    None => {
                        self.reframe_flush_bucket(bucket);
                        self.shard.force(bucket);
                    }
                }
            }
            ToWorker::ExpectFlow {
                slot,
                bucket,
                inputs,
            } => match (
                self.overrides.as_mut(),
                self.shard.expect(self.buckets + slot),
            ) {
                (Some(o), Ok(())) => {
                    for &i in &inputs {
                        o.slot_of.insert(i, slot);
                    }
                    o.slots.insert(slot, (bucket, inputs));
                    let _ = self
                        .controller
                        .send(ToController::Expecting { worker: self.index });
                }
                (None, _) => self.refused("an override without overrides"),
                (_, Err(e)) => self.refused(e),
            },
            ToWorker::AddRelease {
                slot,
                bucket,
                inputs,
                to,
                bucket_mark,
                slot_mark,
            } => match self.overrides.as_mut() {
                Some(o) if self.shard.seen(bucket).is_some() => o.adds.push(Add {
                    slot,
                    bucket,
                    inputs,
                    to,
                    bucket_mark,
                    slot_mark,
                    forced: false,
                }),
                _ => self.refused(format!(
                    "worker {}: an override from bucket {bucket}, not held here",
                    self.index
                )),
            },
            ToWorker::ExpectReturn {
                slot,
                bucket,
                inputs,
            } => match self.overrides.as_mut() {
                Some(o) if self.shard.seen(bucket).is_some() => {
                    o.returns.insert(
                        slot,
                        Return {
                            bucket,
                            inputs,
                            parked: VecDeque::new(),
                        },
                    );
                    let _ = self
                        .controller
                        .send(ToController::Expecting { worker: self.index });
                }
                _ => self.refused(format!(
                    "worker {}: an override back into bucket {bucket}, not held here",
                    self.index
                )),
            },
            ToWorker::Moving(m)
                if m.bucket >= self.buckets
                    && self
                        .overrides
                        .as_ref()
                        .is_some_and(|o| o.returns.contains_key(&(m.bucket - self.buckets))) =>
            {
                self.complete_return(m.bucket - self.buckets, m);
            }
            ToWorker::Moving(m) => {
                let (bucket, left_behind) = (m.bucket, m.left_behind);
                match self.shard.accept(m) {
                    Ok(parked) => {
                        self.replay(bucket, parked);
                        let _ = self.controller.send(ToController::Accepted {
                            bucket,
                            left_behind,
                        });
                    }
                    Err((e, _)) => self.refused(e),
                }
            }
            ToWorker::Finish { marks } => {
                // The final drain runs without the stage: what it holds goes
                // through now, and later frames straight through.
                self.reframe_flush_all();
                if let Some(stage) = self.reframe.take() {
                    self.report.reframer = Some(stage.report());
                }
                return Some(marks);
            }
        }
        self.deliver();
        None
    }
}

/// How long the final drain waits for frames still due, with the ring
/// empty, before it gives up on them (dropped by the ring, or late).
const FINISH_GRACE_NS: u64 = 200_000_000;

impl<N: NetworkFunction> Worker<N> {
    /// The worker's loop, until the controller's `Finish` has drained.
    pub(crate) fn run(self) -> Finished<N> {
        let Worker {
            index,
            cpu,
            mut ring,
            mut override_ring,
            mut core,
            rx,
        } = self;
        if let Err(e) = pin_to(cpu) {
            tracing::warn!("worker {index}: {e}; running unpinned");
        }
        let mut finishing: Option<u64> = None;
        // The moves' counters, before the final drain's.
        let mut stats = None;
        let mut last = monotonic_ns();
        let mut published = last;
        // The kernel's count of frames dropped before the ring, which it
        // resets on every read.
        let mut ring_drops = 0;
        // A message that woke the worker, handled first.
        let mut woken_by = None;
        loop {
            while let Some(msg) = woken_by.take().or_else(|| rx.try_recv().ok()) {
                if let Some(marks) = core.message(msg) {
                    stats = Some(core.shard.stats());
                    // Every bucket still here leaves for nowhere once its
                    // last frame before the final switch is processed.
                    let owned: Vec<usize> = core.shard.states().map(|(b, _)| b).collect();
                    for b in owned {
                        if !core.shard.releasing().contains(&b) {
                            let _ = core.shard.release(b, index, marks[b], false);
                        }
                    }
                    core.deliver();
                    finishing = Some(monotonic_ns());
                }
            }
            if core.reframe.is_some() {
                let real = realtime_ns();
                core.now = monotonic_ns();
                core.realtime_to_monotonic = i128::from(core.now) - i128::from(real);
            }
            let mut n = ring.next_batch(|frame| core.frame(frame));
            if let Some(r) = override_ring.as_mut() {
                n += r.next_batch(|frame| core.override_frame(frame));
            }
            // Nothing came: what waits to be sent goes out before any
            // sleep (sending is work, like a block).
            if n == 0 && core.flush_tx(false) {
                n = 1;
            }
            let now = monotonic_ns();
            if core.reframe_advance(now) {
                // Frames processed: work, like a block.
                n = n.max(1);
            }
            if now.saturating_sub(published) >= PUBLISH_NS {
                ring_drops += ring.drops() + override_ring.as_mut().map_or(0, Rx::drops);
                if let Some(o) = core.overrides.as_mut() {
                    core.clock.publish_flows(&mut o.counted);
                }
                core.clock
                    .publish(&core.report, ring_drops, core.reframer_live());
                published = now;
            }
            // Time since `last` (messages, this block) was work when a block
            // came, polling otherwise.
            if n > 0 {
                // Handing states over (and sending what goes before them)
                // is part of the block's work.
                core.deliver();
                let done = monotonic_ns();
                core.clock
                    .busy_ns
                    .fetch_add(done.saturating_sub(last), Ordering::Relaxed);
                if finishing.is_some() {
                    finishing = Some(now);
                }
                last = done;
            } else {
                core.clock
                    .idle_ns
                    .fetch_add(now.saturating_sub(last), Ordering::Relaxed);
                if let Some(since) = finishing {
                    let done = core.shard.releasing().is_empty();
                    if done || now.saturating_sub(since) > FINISH_GRACE_NS {
                        for b in core.shard.releasing().to_vec() {
                            core.shard.force(b);
                        }
                        core.deliver();
                        break;
                    }
                }
                if finishing.is_none() && core.shard.holds_nothing() && core.reframe_held() == 0 {
                    // Parked by CPU scaling: no bucket is steered here and
                    // the ring is empty, so sleep until the controller (or
                    // a peer handing a bucket over) says something.
                    core.report.slept += 1;
                    core.clock
                        .publish(&core.report, ring_drops, core.reframer_live());
                    tracing::debug!("worker {index} (CPU {cpu}) holds no bucket: asleep");
                    woken_by = rx.recv().ok();
                    let woke = monotonic_ns();
                    core.report.slept_ns += woke.saturating_sub(now);
                    last = woke;
                    if woken_by.is_none() {
                        // Disconnected: cannot happen (the worker holds a
                        // sender of its own among its peers); leave rather
                        // than spin.
                        break;
                    }
                    tracing::debug!("worker {index} (CPU {cpu}) woken");
                    continue;
                }
                if core.reframe_held() > 0 {
                    // Frames due within T_buff (≤ 10 ms): poll without
                    // sleeping past their deadline (poll's unit is 1 ms).
                    ring.wait_with(override_ring.as_ref(), 0);
                } else {
                    ring.wait_with(override_ring.as_ref(), 1);
                }
                let waited = monotonic_ns();
                core.clock
                    .idle_ns
                    .fetch_add(waited.saturating_sub(now), Ordering::Relaxed);
                last = waited;
            }
        }
        core.flush_tx(true);
        ring_drops += ring.drops() + override_ring.as_mut().map_or(0, Rx::drops);
        core.clock
            .publish(&core.report, ring_drops, core.reframer_live());
        if ring_drops > 0 {
            core.report.dropped.insert("ring_full".into(), ring_drops);
        }
        if let Some(stage) = core.reframe.take() {
            // Stopped without a final drain (cannot happen: the controller
            // always finishes); its frames are counted as stranded.
            let held = stage.held();
            core.report.reframer = Some(stage.report());
            if held > 0 {
                *core.report.dropped.entry("stranded".into()).or_insert(0) += held;
            }
        }
        let stats = stats.unwrap_or_else(|| core.shard.stats());
        core.report.parked = stats.parked;
        core.report.handed_over = stats.drained;
        core.report.handed_over_early = stats.early;
        core.report.overshot = stats.overshot;
        core.report.taken_over = stats.accepted;
        core.report.busy_ns = core.clock.busy_ns.load(Ordering::Relaxed);
        core.report.idle_ns = core.clock.idle_ns.load(Ordering::Relaxed);
        let Core {
            nf,
            shard,
            mut report,
            mut finished,
            overrides,
            ..
        } = core;
        let (states, mut parked) = shard.into_parts();
        if let Some(o) = overrides {
            // Flows whose override never came back (cannot happen: the
            // controller waits for every handoff before the end).
            parked.extend(o.returns.into_values().flat_map(|r| r.parked));
        }
        if !parked.is_empty() {
            *report.dropped.entry("stranded".into()).or_insert(0) += parked.len() as u64;
        }
        finished.extend(states);
        Finished {
            report,
            nf,
            states: finished,
        }
    }
}
