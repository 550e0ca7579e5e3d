//! What the engine records about every packet: latency, reordering, drops,
//! and per-core counts per interval.

use std::collections::VecDeque;

use crate::packet::Ns;

/// Latencies in logarithmic buckets: 64 per power of two (about 1.1%
/// resolution) from 1 ns to about 70 s, in constant memory.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
    max_ns: Ns,
}

const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
const OCTAVES: usize = 37;

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            counts: vec![0; OCTAVES * SUB],
            total: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl LatencyHistogram {
    fn index(ns: Ns) -> usize {
        if ns < SUB as u64 {
            return ns as usize;
        }
        let octave = 63 - ns.leading_zeros() - SUB_BITS; // ns >= 2^SUB_BITS
        let sub = (ns >> octave) as usize - SUB;
        ((octave as usize + 1) * SUB + sub).min(OCTAVES * SUB - 1)
    }

    /// Smallest value of bucket `i`.
    fn lower(i: usize) -> f64 {
        if i < SUB {
            return i as f64;
        }
        let octave = i / SUB - 1;
        let sub = i % SUB;
        ((SUB + sub) as f64) * (1u64 << octave) as f64
    }

    /// Records one latency.
    pub fn record(&mut self, ns: Ns) {
        self.counts[Self::index(ns)] += 1;
        self.total += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Mean, nanoseconds.
    pub fn mean_ns(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.total as f64
        }
    }

    /// The `q` quantile (0 ≤ q ≤ 1), nanoseconds (a bucket's lower edge,
    /// never above the largest value recorded).
    pub fn quantile_ns(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::lower(i).min(self.max_ns as f64);
            }
        }
        self.max_ns as f64
    }

    /// The distribution as `(microseconds, fraction at or below)` points,
    /// at most `points` of them, increasing in both.
    pub fn cdf_us(&self, points: usize) -> Vec<(f64, f64)> {
        let mut out: Vec<(f64, f64)> = Vec::new();
        if self.total == 0 || points == 0 {
            return out;
        }
        let occupied: Vec<usize> = (0..self.counts.len())
            .filter(|&i| self.counts[i] > 0)
            .collect();
        let step = occupied.len().div_ceil(points).max(1);
        let mut seen = 0u64;
        let mut last = 0;
        for (k, &i) in occupied.iter().enumerate() {
            // Every bucket up to i.
            seen += self.counts[last..=i].iter().sum::<u64>();
            last = i + 1;
            if k % step == step - 1 || k == occupied.len() - 1 {
                let upper = Self::lower(i + 1).min(self.max_ns as f64) / 1000.0;
                out.push((upper, seen as f64 / self.total as f64));
            }
        }
        out
    }
}

/// Asks the host to bring `value`'s cache line closer, when there is one:
/// a hint that reads nothing, for an access that comes soon.
#[inline]
pub(crate) fn prefetch<T>(value: Option<&T>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(value) = value {
        // SAFETY: SSE is in every x86_64, and a prefetch has no effect on
        // memory (it takes a valid address here anyway).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (value as *const T).cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Counts packets that finish before an earlier packet of their flow.
#[derive(Debug, Clone, Default)]
pub struct ReorderTracker {
    /// Per flow: one more than the highest sequence number finished so far.
    next: Vec<u32>,
    reordered: u64,
}

impl ReorderTracker {
    /// Flow number `flow` starts a new flow: forget its past.
    pub fn new_flow(&mut self, flow: u32) {
        if let Some(n) = self.next.get_mut(flow as usize) {
            *n = 0;
        }
    }

    /// Packet `seq` of `flow` finished; returns whether it is out of order.
    pub fn finish(&mut self, flow: u32, seq: u32) -> bool {
        let i = flow as usize;
        if i >= self.next.len() {
            self.next.resize((i + 1).next_power_of_two(), 0);
        }
        let n = &mut self.next[i];
        if seq.wrapping_add(1) < *n {
            self.reordered += 1;
            true
        } else {
            *n = seq.wrapping_add(1);
            false
        }
    }

    /// Packets finished out of order so far.
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Asks the host to bring `flow`'s line to the cache ahead of its
    /// [`Self::finish`].
    #[inline]
    fn prefetch(&self, flow: u32) {
        prefetch(self.next.get(flow as usize));
    }

    /// One more than the highest sequence number of `flow` finished so far.
    fn next_of(&self, flow: u32) -> u32 {
        self.next.get(flow as usize).copied().unwrap_or(0)
    }

    /// Sets what [`Self::next_of`] answers for `flow`.
    fn set_next(&mut self, flow: u32, next: u32) {
        let i = flow as usize;
        if i >= self.next.len() {
            self.next.resize((i + 1).next_power_of_two(), 0);
        }
        self.next[i] = next;
    }
}

/// Hands the cores' finishes to a [`ReorderTracker`] in time order. A core
/// reports the finishing times of a whole batch when the batch starts, so
/// reports from different cores arrive out of time order: a packet that a
/// second core starts later may finish before the end of the first core's
/// batch. Such reports wait, sorted by time, until the simulation clock
/// passes them (equal times in the order reported).
///
/// Most flows never have packets in flight on two cores at once, and
/// their reports need no waiting: while every packet of a flow still in
/// flight is on the reporting core, every packet reported before finishes
/// before this one (a core reports in time order), so it is judged at once
/// ("quiet" flows). A flow becomes "tracked" when a core reports it while
/// another core has it in flight: its packets still in flight are taken
/// back (their judgement undone) and, like its later ones, wait in time
/// order for the tracker. It is quiet again once all of them were handed
/// over. Either way every packet gets the verdict of the time-ordered
/// tracker (`finish_order_is_a_stable_sort_by_time`).
#[derive(Debug, Clone, Default)]
pub struct FinishOrder {
    /// Tracked flows' `(finish time, flow, seq)` not handed over yet, by
    /// time (equal times in the order reported).
    pending: VecDeque<(Ns, u32, u32)>,
    tracker: ReorderTracker,
    /// Per flow.
    flows: Vec<FlowFinishes>,
    /// Per core: its quiet reports that may still be in flight, in the
    /// order reported, and the latest finishing time it reported.
    cores: Vec<CoreFinishes>,
    /// Every finish at or before this went to the tracker or was judged.
    flushed: Ns,
}

/// What [`FinishOrder`] knows of one flow.
#[derive(Debug, Clone, Copy, Default)]
struct FlowFinishes {
    /// The latest finishing time reported.
    until: Ns,
    /// Quiet: one more than the highest sequence number reported.
    next: u32,
    /// The core that reported it last.
    core: u16,
    tracked: bool,
}

#[derive(Debug, Clone, Default)]
struct CoreFinishes {
    in_flight: Vec<QuietFinish>,
    last: Ns,
}

/// A quiet flow's report, as judged.
#[derive(Debug, Clone, Copy)]
struct QuietFinish {
    at: Ns,
    flow: u32,
    seq: u32,
    /// The flow's `next` before this report.
    next_before: u32,
    reordered: bool,
}

impl FinishOrder {
    /// Packet `seq` of `flow` finishes on core `core` at `at` (no earlier
    /// than the last [`Self::flush`]).
    pub fn finish(&mut self, core: usize, at: Ns, flow: u32, seq: u32) {
        debug_assert!(at >= self.flushed, "a finish in the past");
        let f = flow as usize;
        if f >= self.flows.len() {
            self.flows
                .resize((f + 1).next_power_of_two(), FlowFinishes::default());
        }
        if core >= self.cores.len() {
            self.cores.resize_with(core + 1, CoreFinishes::default);
        }
        let now = self.flushed;
        let c = &mut self.cores[core];
        let in_order = at >= c.last;
        c.last = c.last.max(at);
        let rec = &mut self.flows[f];
        if rec.tracked && rec.until <= now {
            // Every tracked packet of it was handed over.
            rec.tracked = false;
            rec.next = self.tracker.next_of(flow);
        }
        let alone = rec.until <= now || usize::from(rec.core) == core;
        if !rec.tracked && alone && in_order {
            let next_before = rec.next;
            let reordered = seq.wrapping_add(1) < next_before;
            if !reordered {
                rec.next = seq.wrapping_add(1);
            }
            rec.until = rec.until.max(at);
            rec.core = core as u16;
            self.tracker.reordered += u64::from(reordered);
            let in_flight = &mut c.in_flight;
            if in_flight.last().is_some_and(|q| q.at <= now) {
                // The core finished them all (its earlier batches, as a
                // rule): the front ones that finished are skipped when
                // read, this clears the rest.
                in_flight.clear();
            }
            in_flight.push(QuietFinish {
                at,
                flow,
                seq,
                next_before,
                reordered,
            });
            return;
        }
        if !rec.tracked {
            self.track(flow);
        }
        let rec = &mut self.flows[f];
        rec.until = rec.until.max(at);
        rec.core = core as u16;
        self.wait(at, flow, seq);
    }

    /// Makes quiet `flow` tracked: its reports still in flight (all on the
    /// core that reported it last) are judged again, in time order.
    fn track(&mut self, flow: u32) {
        let now = self.flushed;
        let rec = self.flows[flow as usize];
        let mut next = rec.next;
        if rec.until > now {
            let mut first = true;
            let in_flight = std::mem::take(&mut self.cores[usize::from(rec.core)].in_flight);
            for q in &in_flight {
                if q.flow == flow && q.at > now {
                    if first {
                        next = q.next_before;
                        first = false;
                    }
                    if q.reordered {
                        self.tracker.reordered -= 1;
                    }
                    self.wait(q.at, flow, q.seq);
                }
            }
            self.cores[usize::from(rec.core)].in_flight = in_flight;
        }
        self.tracker.set_next(flow, next);
        self.flows[flow as usize].tracked = true;
    }

    /// A tracked flow's report waits for its time.
    fn wait(&mut self, at: Ns, flow: u32, seq: u32) {
        self.tracker.prefetch(flow);
        match self.pending.back() {
            Some(last) if last.0 > at => {
                // After every finish at or before `at`: equal times keep
                // the order reported.
                let i = self.pending.partition_point(|f| f.0 <= at);
                self.pending.insert(i, (at, flow, seq));
            }
            _ => self.pending.push_back((at, flow, seq)),
        }
    }

    /// Asks the host to bring what a report of `flow` reads to the cache:
    /// called for a batch's packets before the batch runs.
    #[inline]
    pub fn prefetch(&self, flow: u32) {
        prefetch(self.flows.get(flow as usize));
    }

    /// Hands over every finish at or before `upto`, in time order.
    #[inline]
    pub fn flush(&mut self, upto: Ns) {
        self.flushed = self.flushed.max(upto);
        if self.pending.front().is_some_and(|f| f.0 <= upto) {
            self.hand_over(upto);
        }
    }

    fn hand_over(&mut self, upto: Ns) {
        while let Some(&(at, flow, seq)) = self.pending.front() {
            if at > upto {
                return;
            }
            self.pending.pop_front();
            self.tracker.finish(flow, seq);
        }
        // Emptied: back to the start of the buffer, whose first lines stay
        // in the host's cache.
        self.pending.clear();
    }

    /// Flow number `flow` starts a new flow. Call after [`Self::flush`] up to
    /// now: the previous flow of that number has finished by then.
    pub fn new_flow(&mut self, flow: u32) {
        let Some(mut rec) = self.flows.get(flow as usize).copied() else {
            return;
        };
        if !rec.tracked && rec.until > self.flushed {
            // Its predecessor is still in flight: judged in time order,
            // against the new flow's packets.
            self.track(flow);
            rec.tracked = true;
        }
        self.tracker.new_flow(flow);
        rec.next = 0;
        self.flows[flow as usize] = rec;
    }

    /// Packets finished out of order among those handed over.
    pub fn reordered(&self) -> u64 {
        self.tracker.reordered()
    }
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    /// What a test does to a [`FinishOrder`]: core, finish time, flow and
    /// seq of a report, then the clock a flush goes up to; or a new flow
    /// of that number (after a flush).
    #[derive(Debug, Clone)]
    enum Step {
        Report(usize, Ns, u32, u32, Ns),
        NewFlow(u32),
    }

    /// Reports from cores whose batches overlap in time: per core, mostly
    /// increasing finishing times (with ties across cores; now and then
    /// one out of order), a few flows, a flush point after each report,
    /// and now and then a flow number starting again while its last
    /// packets may still be in flight.
    fn steps() -> impl Strategy<Value = Vec<Step>> {
        vec((0usize..4, 1u64..4, 0u32..3, 0u64..6, 0u8..20), 1..300).prop_map(|steps| {
            let mut core_clock = [0u64; 4];
            let mut seqs = [0u32; 3];
            let mut clock = 0;
            let mut out = Vec::new();
            for (core, gap, flow, advance, odd) in steps {
                if odd == 0 {
                    seqs[flow as usize] = 0;
                    out.push(Step::NewFlow(flow));
                    continue;
                }
                let at = if odd == 1 {
                    // Behind the core's own last report.
                    clock + gap
                } else {
                    core_clock[core] = core_clock[core].max(clock) + gap;
                    core_clock[core]
                };
                let seq = seqs[flow as usize];
                seqs[flow as usize] += 1;
                clock += advance;
                out.push(Step::Report(core, at, flow, seq, clock));
            }
            out
        })
    }

    proptest! {
        /// Whichever way a flow's finishes go (judged at once or waiting),
        /// the count is that of handing every finish to the tracker as a
        /// stable sort by time of those the clock passed.
        #[test]
        fn finish_order_is_a_stable_sort_by_time(steps in steps()) {
            let mut order = FinishOrder::default();
            let mut model = ReorderTracker::default();
            let mut waiting: Vec<(Ns, u32, u32)> = Vec::new();
            let mut clock = 0;
            for step in steps {
                match step {
                    Step::Report(core, at, flow, seq, now) => {
                        order.finish(core, at, flow, seq);
                        order.flush(now);
                        clock = now;
                        waiting.push((at, flow, seq));
                        waiting.sort_by_key(|f| f.0); // stable: ties in report order
                        let due = waiting.partition_point(|f| f.0 <= now);
                        for (_, flow, seq) in waiting.drain(..due) {
                            model.finish(flow, seq);
                        }
                    }
                    Step::NewFlow(flow) => {
                        order.flush(clock);
                        order.new_flow(flow);
                        model.new_flow(flow);
                    }
                }
            }
            order.flush(Ns::MAX);
            for (_, flow, seq) in waiting.drain(..) {
                model.finish(flow, seq);
            }
            prop_assert_eq!(order.reordered(), model.reordered());
        }
    }

    #[test]
    fn quantiles_are_within_the_resolution() {
        let mut h = LatencyHistogram::default();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for q in [0.5, 0.95, 0.99] {
            let want = q * 100_000.0;
            let got = h.quantile_ns(q);
            assert!((got - want).abs() / want < 0.02, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.count(), 100_000);
        assert!((h.mean_ns() - 50_000.5).abs() < 1e-6);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = LatencyHistogram::default();
        for v in [3, 3, 3, 40] {
            h.record(v);
        }
        assert_eq!(h.quantile_ns(0.5), 3.0);
        assert_eq!(h.quantile_ns(1.0), 40.0);
    }

    #[test]
    fn cdf_is_increasing_and_ends_at_one() {
        let mut h = LatencyHistogram::default();
        for v in 0..50_000u64 {
            h.record(v * v % 1_000_003);
        }
        let cdf = h.cdf_us(100);
        assert!(cdf.len() <= 100 && cdf.len() > 10);
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!((cdf.last().unwrap().1 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn reordering_is_counted_per_flow() {
        let mut r = ReorderTracker::default();
        assert!(!r.finish(1, 0));
        assert!(!r.finish(1, 2));
        assert!(r.finish(1, 1)); // 1 after 2
        assert!(!r.finish(2, 0)); // another flow
        assert!(!r.finish(1, 3));
        r.new_flow(1);
        assert!(!r.finish(1, 0));
        assert_eq!(r.reordered(), 1);
    }

    #[test]
    fn finishes_are_ordered_by_time_across_cores() {
        let mut f = FinishOrder::default();
        // Core 0 starts a batch of flow 1's packets 0..4 finishing at 10,
        // 20, 30, 40; core 1 then starts packet 4 finishing at 15.
        for (seq, at) in [(0, 10), (1, 20), (2, 30), (3, 40)] {
            f.finish(0, at, 1, seq);
        }
        f.flush(5);
        f.finish(1, 15, 1, 4);
        assert_eq!(f.reordered(), 0, "nothing handed over before its time");
        f.flush(Ns::MAX);
        // Packets 1, 2 and 3 finished after packet 4.
        assert_eq!(f.reordered(), 3);
    }

    #[test]
    fn in_order_finishes_on_two_cores_are_not_reordered() {
        let mut f = FinishOrder::default();
        f.finish(0, 10, 7, 0);
        f.finish(0, 12, 7, 1);
        f.finish(0, 14, 7, 2);
        f.flush(13);
        f.finish(1, 16, 7, 3);
        f.flush(Ns::MAX);
        assert_eq!(f.reordered(), 0);
    }
}
