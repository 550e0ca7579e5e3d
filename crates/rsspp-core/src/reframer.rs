//! Reframer (seed 002 §4): a stage in front of the NIC that delays packets
//! briefly to rebuild per-flow bursts, so that the cores process packets of
//! one flow back to back (a higher spatial locality factor, SLF) and hit
//! their state caches more often.
//!
//! The stage keeps one batch per flow and a *flush list* of the flows that
//! have a batch, oldest first packet first. A batch leaves when its first
//! packet has waited the buffering time `T_buff` (at exactly that deadline)
//! or when it reaches the maximum burst (at once). TCP SYNs bypass it: a SYN
//! is never followed by more packets of its flow in `T_buff`, so delaying it
//! gains nothing. When several batches are due at the same instant they
//! leave oldest first (the paper's "oldest flow first" priority).
//!
//! The stage only changes *when* and *in which order* packets leave: it
//! takes a packet at its [`ReframedPacket::ready_ns`] and sets it to the
//! instant the packet leaves. Time is passed in with the packets (and
//! [`Reframer::advance`]), in nanoseconds; the stage reads no clock. Any
//! packet type works through [`ReframedPacket`] (the simulator's packet, a
//! data path's descriptor).
//!
//! Every operation is O(1): flows are dense numbers, so the flow table is a
//! `Vec` indexed by flow, the flush list is a doubly-linked list threaded
//! through it, and buffered packets live in one slab with a free list
//! (memory bounded by the packets buffered, not by the flows seen).

/// Nanoseconds, on the caller's clock.
pub type Ns = u64;

/// What the stage needs of a packet.
pub trait ReframedPacket: Copy {
    /// Its flow, a dense number (unique among the flows alive at a time):
    /// the index of the flow table.
    fn flow(&self) -> u32;
    /// When it reaches the stage; once it leaves, when it left.
    fn ready_ns(&self) -> Ns;
    /// Sets the instant it leaves the stage.
    fn set_ready_ns(&mut self, at: Ns);
    /// Whether it is a TCP connection request (SYN without ACK): those
    /// bypass the stage.
    fn is_syn(&self) -> bool;
    /// Whether it leaves without delay (the paper's bypass class): by
    /// default a SYN. A data path may widen the class (FIN and RST too:
    /// nothing of the flow follows them to batch with). Whatever its flow
    /// had buffered leaves first, so the flow's order holds.
    fn bypasses(&self) -> bool {
        self.is_syn()
    }
}

/// "No index" in the intrusive lists.
const NIL: u32 = u32::MAX;

/// Settings of the stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReframerConfig {
    /// `T_buff`: the longest a batch waits after its first packet.
    pub buffer_ns: Ns,
    /// A flow's batch leaves as soon as it holds this many packets (32 in
    /// the paper: a DPDK burst).
    pub max_burst: u32,
}

/// Bounds of `T_buff` accepted, microseconds: below 1 µs nothing can be
/// batched at line rate; beyond 10 ms the delay dwarfs any latency target.
pub const BUFFER_US_RANGE: std::ops::RangeInclusive<u64> = 1..=10_000;

/// Bounds of the maximum burst accepted.
pub const MAX_BURST_RANGE: std::ops::RangeInclusive<u32> = 1..=4096;

/// A setting of the stage out of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReframerError {
    /// `T_buff` outside [`BUFFER_US_RANGE`].
    #[error("Reframer buffering time must be between {lo} and {hi} µs, got {got_us} µs")]
    BufferTime {
        /// Lowest accepted, microseconds.
        lo: u64,
        /// Highest accepted, microseconds.
        hi: u64,
        /// The time given, microseconds.
        got_us: f64,
    },
    /// The maximum burst outside [`MAX_BURST_RANGE`].
    #[error("Reframer maximum burst must be between {lo} and {hi} packets, got {got}")]
    MaxBurst {
        /// Lowest accepted.
        lo: u32,
        /// Highest accepted.
        hi: u32,
        /// The burst given.
        got: u32,
    },
}

impl ReframerConfig {
    /// The paper's setting: `buffer_us` of buffering, bursts of at most 32.
    pub fn new(buffer_us: u64) -> Result<Self, ReframerError> {
        let config = Self {
            buffer_ns: buffer_us.saturating_mul(1000),
            max_burst: 32,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ReframerError> {
        let (lo, hi) = (*BUFFER_US_RANGE.start(), *BUFFER_US_RANGE.end());
        if !(lo * 1000..=hi * 1000).contains(&self.buffer_ns) {
            return Err(ReframerError::BufferTime {
                lo,
                hi,
                got_us: self.buffer_ns as f64 / 1000.0,
            });
        }
        if !MAX_BURST_RANGE.contains(&self.max_burst) {
            return Err(ReframerError::MaxBurst {
                lo: *MAX_BURST_RANGE.start(),
                hi: *MAX_BURST_RANGE.end(),
                got: self.max_burst,
            });
        }
        Ok(())
    }
}

/// What the stage did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReframerCounts {
    /// Packets that went in.
    pub packets_in: u64,
    /// Packets that came out.
    pub packets_out: u64,
    /// Packets held in a batch (all but the bypassed ones).
    pub buffered: u64,
    /// SYNs sent on without delay.
    pub bypassed: u64,
    /// Batches that left at their deadline.
    pub flush_timeout: u64,
    /// Batches that left because they reached the maximum burst.
    pub flush_burst: u64,
    /// Batches sent early because a SYN of their flow bypassed them (a
    /// reused flow number or a retransmitted SYN: the flow's order is kept).
    pub flush_bypass: u64,
    /// Batches sent before their deadline on the caller's word
    /// ([`Reframer::flush_flow`], [`Reframer::flush_all`]: a data path
    /// handing a bucket over, or stopping).
    pub flush_early: u64,
    /// Packets in the largest batch emitted.
    pub largest_batch: u32,
    /// Runs of consecutive packets of one flow in the input stream.
    pub runs_in: u64,
    /// Runs of consecutive packets of one flow in the output stream.
    pub runs_out: u64,
}

impl ReframerCounts {
    /// Batches emitted.
    pub fn batches(&self) -> u64 {
        self.flush_timeout + self.flush_burst + self.flush_bypass + self.flush_early
    }

    /// Mean packets per emitted batch.
    pub fn mean_batch(&self) -> f64 {
        match self.batches() {
            0 => 0.0,
            b => self.buffered as f64 / b as f64,
        }
    }

    /// Spatial locality factor of the input stream (mean run length of
    /// packets of one flow back to back).
    pub fn slf_in(&self) -> f64 {
        ratio(self.packets_in, self.runs_in)
    }

    /// Spatial locality factor of the output stream.
    pub fn slf_out(&self) -> f64 {
        ratio(self.packets_out, self.runs_out)
    }
}

fn ratio(packets: u64, runs: u64) -> f64 {
    if runs == 0 {
        0.0
    } else {
        packets as f64 / runs as f64
    }
}

/// One flow's entry in the flow table.
#[derive(Debug, Clone, Copy)]
struct FlowEntry {
    /// When the batch's first packet came in (its deadline is this plus
    /// `T_buff`).
    first_ns: Ns,
    /// The batch's packets in the slab: first, last, how many (0: no batch).
    head: u32,
    tail: u32,
    len: u32,
    /// Neighbours in the flush list.
    prev: u32,
    next: u32,
}

impl Default for FlowEntry {
    fn default() -> Self {
        Self {
            first_ns: 0,
            head: NIL,
            tail: NIL,
            len: 0,
            prev: NIL,
            next: NIL,
        }
    }
}

/// A buffered packet and the next one of its batch.
#[derive(Debug, Clone, Copy)]
struct Node<P> {
    packet: P,
    next: u32,
}

/// Why a batch leaves.
#[derive(Debug, Clone, Copy)]
enum Flush {
    Timeout,
    Burst,
    Bypass,
    Early,
}

/// The stage. Feed it packets in time order with [`Reframer::push`], then
/// call [`Reframer::finish`] at the end of the input.
#[derive(Debug, Clone)]
pub struct Reframer<P> {
    config: ReframerConfig,
    flows: Vec<FlowEntry>,
    /// Flush list ends (flows, oldest first packet first).
    oldest: u32,
    newest: u32,
    slab: Vec<Node<P>>,
    free: u32,
    /// Latest input time: time never goes back.
    now: Ns,
    last_in: u32,
    last_out: u32,
    counts: ReframerCounts,
}

impl<P: ReframedPacket> Reframer<P> {
    /// An empty stage.
    pub fn new(config: ReframerConfig) -> Result<Self, ReframerError> {
        config.validate()?;
        Ok(Self {
            config,
            flows: Vec::new(),
            oldest: NIL,
            newest: NIL,
            slab: Vec::new(),
            free: NIL,
            now: 0,
            last_in: NIL,
            last_out: NIL,
            counts: ReframerCounts::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &ReframerConfig {
        &self.config
    }

    /// What it did so far.
    pub fn counts(&self) -> ReframerCounts {
        self.counts
    }

    /// Packets held now.
    pub fn held(&self) -> u64 {
        self.counts.packets_in - self.counts.packets_out
    }

    /// Takes `p` in at its `ready_ns` (inputs must come in time order; an
    /// earlier time is taken as the latest seen). Appends to `out` every
    /// packet that leaves up to that instant, in time order.
    pub fn push(&mut self, p: &P, out: &mut Vec<P>) {
        let now = p.ready_ns().max(self.now);
        let flow = p.flow();
        self.advance(now, out);
        self.counts.packets_in += 1;
        if flow != self.last_in {
            self.counts.runs_in += 1;
            self.last_in = flow;
        }
        let f = flow as usize;
        if f >= self.flows.len() {
            self.flows
                .resize((f + 1).next_power_of_two(), FlowEntry::default());
        }
        if p.bypasses() {
            // Never delayed; whatever its flow had buffered leaves first so
            // the flow's order holds.
            if self.flows[f].len > 0 {
                self.flush(flow, now, Flush::Bypass, out);
            }
            self.counts.bypassed += 1;
            self.emit(*p, now, out);
            return;
        }
        self.counts.buffered += 1;
        let node = self.alloc(*p);
        let entry = &mut self.flows[f];
        if entry.len == 0 {
            entry.first_ns = now;
            entry.head = node;
            entry.tail = node;
            entry.len = 1;
            self.append(flow);
        } else {
            let tail = entry.tail as usize;
            entry.tail = node;
            entry.len += 1;
            self.slab[tail].next = node;
        }
        if self.flows[f].len >= self.config.max_burst {
            self.flush(flow, now, Flush::Burst, out);
        }
    }

    /// Lets time pass up to `now`: every batch whose deadline is at or
    /// before it leaves at its deadline, oldest first.
    pub fn advance(&mut self, now: Ns, out: &mut Vec<P>) {
        self.now = self.now.max(now);
        while self.oldest != NIL {
            let flow = self.oldest;
            let deadline = self.flows[flow as usize].first_ns + self.config.buffer_ns;
            if deadline > self.now {
                break;
            }
            self.flush(flow, deadline, Flush::Timeout, out);
        }
    }

    /// The input is over: every batch still held leaves at its deadline.
    pub fn finish(&mut self, out: &mut Vec<P>) {
        self.advance(Ns::MAX, out);
        debug_assert_eq!(self.held(), 0);
    }

    /// Sends `flow`'s batch on now (the latest time seen), before its
    /// deadline; false if the flow holds nothing.
    pub fn flush_flow(&mut self, flow: u32, out: &mut Vec<P>) -> bool {
        match self.flows.get(flow as usize) {
            Some(entry) if entry.len > 0 => {
                self.flush(flow, self.now, Flush::Early, out);
                true
            }
            _ => false,
        }
    }

    /// Sends every batch on now (the latest time seen), oldest first,
    /// before their deadlines.
    pub fn flush_all(&mut self, out: &mut Vec<P>) {
        while self.oldest != NIL {
            self.flush(self.oldest, self.now, Flush::Early, out);
        }
    }

    /// Deadline of the oldest batch, if any: when [`advance`](Self::advance)
    /// next has something to send.
    pub fn next_deadline(&self) -> Option<Ns> {
        (self.oldest != NIL)
            .then(|| self.flows[self.oldest as usize].first_ns + self.config.buffer_ns)
    }

    /// Sends `flow`'s batch on at `at` and takes it off the flush list.
    fn flush(&mut self, flow: u32, at: Ns, why: Flush, out: &mut Vec<P>) {
        match why {
            Flush::Timeout => self.counts.flush_timeout += 1,
            Flush::Burst => self.counts.flush_burst += 1,
            Flush::Bypass => self.counts.flush_bypass += 1,
            Flush::Early => self.counts.flush_early += 1,
        }
        self.unlink(flow);
        let entry = &mut self.flows[flow as usize];
        self.counts.largest_batch = self.counts.largest_batch.max(entry.len);
        let mut node = entry.head;
        entry.head = NIL;
        entry.tail = NIL;
        entry.len = 0;
        while node != NIL {
            let Node { packet, next } = self.slab[node as usize];
            self.slab[node as usize].next = self.free;
            self.free = node;
            self.emit(packet, at, out);
            node = next;
        }
    }

    fn emit(&mut self, mut p: P, at: Ns, out: &mut Vec<P>) {
        p.set_ready_ns(at);
        self.counts.packets_out += 1;
        let flow = p.flow();
        if flow != self.last_out {
            self.counts.runs_out += 1;
            self.last_out = flow;
        }
        out.push(p);
    }

    fn alloc(&mut self, packet: P) -> u32 {
        let node = Node { packet, next: NIL };
        if self.free == NIL {
            self.slab.push(node);
            (self.slab.len() - 1) as u32
        } else {
            let i = self.free;
            self.free = self.slab[i as usize].next;
            self.slab[i as usize] = node;
            i
        }
    }

    /// Puts `flow` at the young end of the flush list: batches start in
    /// time order, so the list stays sorted by first-packet time.
    fn append(&mut self, flow: u32) {
        let f = flow as usize;
        self.flows[f].prev = self.newest;
        self.flows[f].next = NIL;
        if self.newest == NIL {
            self.oldest = flow;
        } else {
            self.flows[self.newest as usize].next = flow;
        }
        self.newest = flow;
    }

    fn unlink(&mut self, flow: u32) {
        let FlowEntry { prev, next, .. } = self.flows[flow as usize];
        if prev == NIL {
            self.oldest = next;
        } else {
            self.flows[prev as usize].next = next;
        }
        if next == NIL {
            self.newest = prev;
        } else {
            self.flows[next as usize].prev = prev;
        }
        let entry = &mut self.flows[flow as usize];
        entry.prev = NIL;
        entry.next = NIL;
    }
}

/// A packet for the tests: its times, flow, position in the flow, and
/// whether it is a SYN.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TestPacket {
    arrival_ns: Ns,
    ready_ns: Ns,
    flow: u32,
    seq: u32,
    syn: bool,
}

#[cfg(test)]
impl ReframedPacket for TestPacket {
    fn flow(&self) -> u32 {
        self.flow
    }

    fn ready_ns(&self) -> Ns {
        self.ready_ns
    }

    fn set_ready_ns(&mut self, at: Ns) {
        self.ready_ns = at;
    }

    fn is_syn(&self) -> bool {
        self.syn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Ns = 1000;

    fn udp(flow: u32, seq: u32, t: Ns) -> TestPacket {
        TestPacket {
            arrival_ns: t,
            ready_ns: t,
            flow,
            seq,
            syn: false,
        }
    }

    fn syn(flow: u32, seq: u32, t: Ns) -> TestPacket {
        TestPacket {
            syn: true,
            ..udp(flow, seq, t)
        }
    }

    fn stage(buffer_us: u64) -> Reframer<TestPacket> {
        Reframer::new(ReframerConfig::new(buffer_us).unwrap()).unwrap()
    }

    fn run(r: &mut Reframer<TestPacket>, input: &[TestPacket]) -> Vec<TestPacket> {
        let mut out = Vec::new();
        for p in input {
            r.push(p, &mut out);
        }
        r.finish(&mut out);
        out
    }

    #[test]
    fn interleaved_flows_leave_as_bursts_at_the_deadline() {
        let mut r = stage(16);
        // A B C A B C … one packet per µs.
        let input: Vec<_> = (0..9).map(|i| udp(i % 3, i / 3, i as Ns * US)).collect();
        let out = run(&mut r, &input);
        let flows: Vec<u32> = out.iter().map(|p| p.flow).collect();
        assert_eq!(flows, [0, 0, 0, 1, 1, 1, 2, 2, 2]);
        // Each batch leaves exactly T_buff after its first packet.
        for p in &out {
            assert_eq!(p.ready_ns, (u64::from(p.flow) + 16) * US);
            assert_eq!(p.arrival_ns, u64::from(p.seq * 3 + p.flow) * US);
        }
        let c = r.counts();
        assert_eq!((c.flush_timeout, c.flush_burst, c.bypassed), (3, 0, 0));
        assert_eq!(c.mean_batch(), 3.0);
        assert_eq!(c.slf_in(), 1.0);
        assert_eq!(c.slf_out(), 3.0);
    }

    #[test]
    fn a_batch_leaves_when_time_reaches_its_deadline_not_before() {
        let mut r = stage(16);
        let mut out = Vec::new();
        r.push(&udp(5, 0, 100), &mut out);
        r.advance(100 + 16 * US - 1, &mut out);
        assert!(out.is_empty());
        assert_eq!(r.held(), 1);
        r.advance(100 + 16 * US, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ready_ns, 100 + 16 * US);
        // A packet arriving exactly at a deadline starts a new batch.
        let t = 50 * US;
        r.push(&udp(7, 0, t), &mut out);
        r.push(&udp(7, 1, t + 16 * US), &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!((out[1].seq, out[1].ready_ns), (0, t + 16 * US));
        assert_eq!(r.held(), 1);
    }

    #[test]
    fn the_32nd_packet_sends_the_batch_at_once() {
        let mut r = stage(1000);
        let mut out = Vec::new();
        for seq in 0..31 {
            r.push(&udp(1, seq, u64::from(seq) * 10), &mut out);
        }
        assert!(out.is_empty());
        r.push(&udp(1, 31, 310), &mut out);
        assert_eq!(out.len(), 32);
        assert!(out.iter().all(|p| p.ready_ns == 310));
        assert!(out.iter().enumerate().all(|(i, p)| p.seq == i as u32));
        r.push(&udp(1, 32, 320), &mut out);
        assert_eq!(r.held(), 1);
        assert_eq!(r.counts().flush_burst, 1);
    }

    #[test]
    fn syn_is_never_delayed_and_keeps_its_flow_in_order() {
        let mut r = stage(64);
        let mut out = Vec::new();
        r.push(&udp(2, 0, 0), &mut out);
        r.push(&syn(3, 0, 10), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].flow, out[0].ready_ns), (3, 10));
        // A SYN on a flow number with packets held: they leave first.
        r.push(&syn(2, 1, 20), &mut out);
        let tail: Vec<(u32, u32, Ns)> = out[1..]
            .iter()
            .map(|p| (p.flow, p.seq, p.ready_ns))
            .collect();
        assert_eq!(tail, [(2, 0, 20), (2, 1, 20)]);
        let c = r.counts();
        assert_eq!((c.bypassed, c.flush_bypass, c.buffered), (2, 1, 1));
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn early_flushes_send_a_flow_or_all_now_in_order() {
        let mut r = stage(64);
        let mut out = Vec::new();
        r.push(&udp(1, 0, 0), &mut out);
        r.push(&udp(2, 0, 5), &mut out);
        r.push(&udp(1, 1, 10), &mut out);
        assert_eq!(r.next_deadline(), Some(64_000));
        assert!(!r.flush_flow(7, &mut out));
        assert!(r.flush_flow(2, &mut out));
        assert_eq!(
            out.iter()
                .map(|p| (p.flow, p.seq, p.ready_ns))
                .collect::<Vec<_>>(),
            [(2, 0, 10)]
        );
        r.push(&udp(3, 0, 20), &mut out);
        r.flush_all(&mut out);
        let all: Vec<(u32, u32, Ns)> = out.iter().map(|p| (p.flow, p.seq, p.ready_ns)).collect();
        assert_eq!(all, [(2, 0, 10), (1, 0, 20), (1, 1, 20), (3, 0, 20)]);
        assert_eq!(r.next_deadline(), None);
        let c = r.counts();
        assert_eq!((c.flush_early, c.batches(), r.held()), (3, 3, 0));
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(ReframerConfig::new(0).is_err());
        assert!(ReframerConfig::new(10_001).is_err());
        assert!(ReframerConfig::new(u64::MAX).is_err());
        let config = ReframerConfig {
            max_burst: 0,
            ..ReframerConfig::new(16).unwrap()
        };
        assert!(Reframer::<TestPacket>::new(config).is_err());
        assert_eq!(
            ReframerConfig::new(0).unwrap_err().to_string(),
            "Reframer buffering time must be between 1 and 10000 µs, got 0 µs"
        );
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "Reframer maximum burst must be between 1 and 4096 packets, got 0"
        );
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// A random stream: (gap to the previous packet in ns, flow, is a SYN).
    fn stream() -> impl Strategy<Value = Vec<(u64, u32, bool)>> {
        prop::collection::vec((0u64..3_000, 0u32..24, prop::bool::weighted(0.05)), 0..600)
    }

    fn packets(spec: &[(u64, u32, bool)]) -> Vec<TestPacket> {
        let mut seq = [0u32; 24];
        let mut t = 0;
        spec.iter()
            .map(|&(gap, flow, syn)| {
                t += gap;
                let s = seq[flow as usize];
                seq[flow as usize] += 1;
                TestPacket {
                    arrival_ns: t,
                    ready_ns: t,
                    flow,
                    seq: s,
                    syn,
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn nothing_lost_order_kept_delay_bounded(
            spec in stream(),
            buffer_us in 1u64..20,
            max_burst in 1u32..40,
        ) {
            let input = packets(&spec);
            let config = ReframerConfig { max_burst, ..ReframerConfig::new(buffer_us).unwrap() };
            let mut stage = Reframer::new(config).unwrap();
            let mut out = Vec::new();
            for p in &input {
                stage.push(p, &mut out);
            }
            stage.finish(&mut out);
            // Nothing lost, nothing made up.
            prop_assert_eq!(out.len(), input.len());
            let mut a: Vec<_> = input.iter().map(|p| (p.flow, p.seq, p.arrival_ns)).collect();
            let mut b: Vec<_> = out.iter().map(|p| (p.flow, p.seq, p.arrival_ns)).collect();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
            // Time-ordered output.
            prop_assert!(out.windows(2).all(|w| w[0].ready_ns <= w[1].ready_ns));
            let mut next = [0u32; 24];
            for p in &out {
                // Each flow in order.
                prop_assert_eq!(p.seq, next[p.flow as usize]);
                next[p.flow as usize] += 1;
                // Never early, never later than T_buff; SYNs not delayed.
                prop_assert!(p.ready_ns >= p.arrival_ns);
                prop_assert!(p.ready_ns - p.arrival_ns <= config.buffer_ns);
                if p.is_syn() {
                    prop_assert_eq!(p.ready_ns, p.arrival_ns);
                }
            }
            let c = stage.counts();
            prop_assert_eq!(c.packets_in, c.packets_out);
            prop_assert_eq!(c.buffered + c.bypassed, c.packets_in);
            // No batch above the maximum burst.
            prop_assert!(c.largest_batch <= max_burst);
            prop_assert!(c.buffered <= u64::from(max_burst) * c.batches());
        }
    }
}
