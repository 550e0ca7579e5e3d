//! Per-core, per-bucket packet counters (§4 of the paper).
//!
//! Every core that processes packets counts, for each RSS bucket (the low
//! bits of the packet's RSS hash), how many packets it received; the
//! balancing thread periodically collects the counts of the interval that
//! just ended and feeds them to the rebalancer.
//!
//! The threaded harness's RSS++ mode
//! ([`run_balanced`](crate::state::threaded::run_balanced)) works this way:
//! its worker threads record, its dispatcher thread collects and runs the
//! control loop.
//!
//! # Roles
//!
//! One [`CoreCounters`] table per core, created with [`core_counters`] (or
//! all of them at once with [`CounterSet::new`]), which hands out the only
//! two handles to it:
//!
//! - the [`CounterWriter`], for the core that processes the packets. It is
//!   not `Clone` and not `Sync`, so exactly one thread records into a table
//!   at a time (it can be moved to another thread, which synchronises);
//! - the [`CounterReader`], for the balancing thread. Its collecting methods
//!   take `&mut self`, so there is one reader per table; it can live on any
//!   thread.
//!
//! The table itself is `Sync`: both handles hold it through an [`Arc`].
//!
//! # Design: monotonic counters, reset by difference
//!
//! Each slot is one [`AtomicU64`] holding the number of packets the core
//! has ever recorded for that bucket. Recording is a relaxed load and a
//! relaxed store of the slot, no atomic read-modify-write (plain `mov`s on
//! x86-64, `ldr`/`str` on AArch64): the writer is the only thread that
//! stores, so nothing can slip in between its load and its store. The reader
//! keeps, per slot, the value it read at the previous collect (its
//! *baseline*); the count of the interval is the difference, and the value
//! just read becomes the new baseline. Resetting is therefore free and
//! done by the reader alone; the writer never zeroes anything.
//!
//! ## Why not the paper's epoch tags
//!
//! The paper's DPDK prototype tags each 8-byte slot with an epoch: the
//! reader reads the tables then increments the epoch, and a writer that
//! finds a slot tagged with an old epoch zeroes it before counting. With a
//! single writer, a single reader and no read-modify-write, that loses
//! packets however the reader orders its steps, and not only the few of a
//! batch in flight:
//!
//! - *read, then advance* (the paper's order): everything a core records
//!   for a bucket between the moment the reader's sweep passes that bucket
//!   and the moment the core sees the new epoch is tagged with the closed
//!   epoch; when the core then touches the bucket in the new epoch it zeroes
//!   the slot and those packets are gone. A sweep of a 65 536-bucket table
//!   takes about 100 µs (bench `counters/collect/65536`), during which a
//!   core records thousands of packets;
//! - *advance, then read*: a core that sees the new epoch before the sweep
//!   reaches a bucket it receives zeroes that bucket first, and the whole
//!   interval's count of the bucket is lost, which is most likely for the
//!   busiest buckets, the ones the rebalancer moves.
//!
//! Re-reading the slots at the next collect and crediting what grew
//! recovers late increments only in slots the core has not touched since,
//! so it does not close either hole; keeping the closed epoch's count next
//! to the current one would need a second word per slot (or narrower epoch
//! tags, which wrap around and then over-count). Monotonic counters with
//! reader-side baselines need neither, and the writer's hot path is shorter
//! (no epoch load, no tag test).
//!
//! # Guarantees
//!
//! - **Nothing is lost, nothing is counted twice.** Every packet recorded
//!   is counted in exactly one collect: the first whose load of the slot
//!   observes the store that recorded it. The sum of the counts of all
//!   collects, plus one collect made after the writer has stopped (joining
//!   its thread is enough), equals the number of packets recorded, per
//!   bucket and in total. The loss bound is zero, whether or not the reader
//!   runs concurrently with the writer.
//! - **Per-slot interval boundaries.** The reader loads the slots one after
//!   the other, so the boundary between two intervals is not one instant
//!   across the table: a packet recorded during a collect is counted in that
//!   collect if its slot is loaded after the store, otherwise in the next
//!   one. Read-read coherence of a single atomic makes each slot's values
//!   seen by the reader non-decreasing, so no interval count is ever
//!   negative or inflated.
//! - **Wrap-around is harmless.** Slots count modulo 2⁶⁴ and the reader
//!   subtracts modulo 2⁶⁴, so an interval's count is exact as long as fewer
//!   than 2⁶⁴ packets hit one bucket of one core within that interval (3 900
//!   years at 150 Mpps). Interval and core totals saturate at `u64::MAX`.
//! - **Relaxed ordering is enough.** Each slot is independent and the counts
//!   carry no other data, so neither side needs acquire/release; a collect
//!   does not synchronise with the writer (use the thread join, or another
//!   synchronisation, if the reader must see everything recorded so far).
//!
//! # Memory
//!
//! Shared table: 8 bytes per bucket per core (the paper's figure: 4 KiB per
//! core for 512 buckets, 512 KiB for 65 536), in cache lines of 8 slots
//! aligned to 64 bytes, so two cores' tables never share a line (no false
//! sharing between cores; the reader's loads only move lines to shared
//! state). The reader also keeps its baseline, 8 bytes per bucket per core,
//! in memory only the balancing thread touches. Only the slots of the
//! buckets a core actually receives (about 1/N of them) need be in that
//! core's cache.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::reta::{MAX_SIZE, MIN_SIZE, SIZE_RULE};

/// Bytes of shared counter memory per bucket per core.
pub const SLOT_BYTES: usize = std::mem::size_of::<AtomicU64>();

/// Slots in one 64-byte cache line.
const SLOTS_PER_LINE: usize = 64 / SLOT_BYTES;

/// Why counters could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountersError {
    /// Table size not [`SIZE_RULE`].
    #[error("counter table size {0} is not {SIZE_RULE}")]
    BadSize(usize),
    /// A counter set for zero cores.
    #[error("a counter set needs at least one core")]
    NoCores,
}

fn check_size(size: usize) -> Result<(), CountersError> {
    if size.is_power_of_two() && (MIN_SIZE..=MAX_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(CountersError::BadSize(size))
    }
}

/// Eight slots, one cache line.
#[repr(align(64))]
struct Line([AtomicU64; SLOTS_PER_LINE]);

/// The counter table of one core: one monotonic packet count per RSS bucket.
///
/// Shared (through an [`Arc`]) by the core's [`CounterWriter`] and
/// [`CounterReader`]; see the [module documentation](self) for the design.
pub struct CoreCounters {
    lines: Box<[Line]>,
    mask: usize,
}

impl CoreCounters {
    fn alloc(size: usize) -> Self {
        let lines = (0..size / SLOTS_PER_LINE)
            .map(|_| Line(Default::default()))
            .collect();
        Self {
            lines,
            mask: size - 1,
        }
    }

    #[inline(always)]
    fn slot(&self, bucket: usize) -> &AtomicU64 {
        &self.lines[bucket / SLOTS_PER_LINE].0[bucket % SLOTS_PER_LINE]
    }

    fn slots(&self) -> impl Iterator<Item = &AtomicU64> {
        self.lines.iter().flat_map(|line| line.0.iter())
    }

    /// Number of buckets.
    pub fn size(&self) -> usize {
        self.mask + 1
    }

    /// Packets recorded for `bucket` since the table was created, modulo
    /// 2⁶⁴ (a relaxed load; for monitoring, the reader's collects are what
    /// the balancer uses).
    ///
    /// # Panics
    ///
    /// If `bucket` is not below [`size`](Self::size).
    pub fn cumulative(&self, bucket: usize) -> u64 {
        assert!(
            bucket < self.size(),
            "bucket {bucket} out of a {}-bucket table",
            self.size()
        );
        self.slot(bucket).load(Ordering::Relaxed)
    }

    /// Bytes of the shared table ([`SLOT_BYTES`] per bucket).
    pub fn memory_bytes(&self) -> usize {
        self.size() * SLOT_BYTES
    }
}

impl fmt::Debug for CoreCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreCounters")
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}

/// Creates the counter table of one core with `size` buckets and returns its
/// writer (for the core processing packets) and its reader (for the
/// balancing thread).
///
/// # Errors
///
/// [`CountersError::BadSize`] unless `size` is a power of two in 64…65536.
pub fn core_counters(size: usize) -> Result<(CounterWriter, CounterReader), CountersError> {
    check_size(size)?;
    let shared = Arc::new(CoreCounters::alloc(size));
    let writer = CounterWriter {
        shared: Arc::clone(&shared),
        mask: size - 1,
        _not_sync: PhantomData,
    };
    let reader = CounterReader {
        shared,
        baseline: vec![0; size].into_boxed_slice(),
        intervals: 0,
    };
    Ok((writer, reader))
}

/// The recording side of one core's [`CoreCounters`]: used by the one thread
/// that processes that core's packets.
///
/// Neither `Clone` nor `Sync`, so at most one thread records at a time; it
/// is `Send`, so it can be moved to the packet-processing thread. Every
/// method is a relaxed load plus a relaxed store per packet (or per bucket
/// for [`record_n`](Self::record_n)), with no atomic read-modify-write.
pub struct CounterWriter {
    shared: Arc<CoreCounters>,
    mask: usize,
    _not_sync: PhantomData<Cell<()>>,
}

impl CounterWriter {
    /// Records one packet of `bucket`.
    ///
    /// `bucket` must be below [`size`](Self::size) (checked in debug
    /// builds); in release builds it is masked with `size − 1`, as the NIC
    /// masks the hash.
    #[inline]
    pub fn record(&self, bucket: usize) {
        self.record_n(bucket, 1);
    }

    /// Records `packets` packets of `bucket` (for example a burst whose
    /// packets share a bucket). Same bucket rule as [`record`](Self::record).
    #[inline]
    pub fn record_n(&self, bucket: usize, packets: u64) {
        debug_assert!(
            bucket <= self.mask,
            "bucket {bucket} out of a {}-bucket table",
            self.mask + 1
        );
        let slot = self.shared.slot(bucket & self.mask);
        // Single writer: no other store can fall between this load and store.
        slot.store(
            slot.load(Ordering::Relaxed).wrapping_add(packets),
            Ordering::Relaxed,
        );
    }

    /// Records one packet whose RSS hash is `hash`: its bucket is the hash's
    /// low bits (`hash & (size − 1)`, like [`crate::bucket_of`]).
    #[inline]
    pub fn record_hash(&self, hash: u32) {
        let slot = self.shared.slot(hash as usize & self.mask);
        slot.store(
            slot.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }

    /// Records one packet per hash in `hashes` (a receive burst).
    #[inline]
    pub fn record_hashes(&self, hashes: &[u32]) {
        let table = &*self.shared;
        for &hash in hashes {
            let slot = table.slot(hash as usize & self.mask);
            slot.store(
                slot.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        }
    }

    /// Number of buckets.
    pub fn size(&self) -> usize {
        self.mask + 1
    }

    /// The shared table.
    pub fn counters(&self) -> &Arc<CoreCounters> {
        &self.shared
    }
}

impl fmt::Debug for CounterWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterWriter")
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}

/// The collecting side of one core's [`CoreCounters`]: used by the balancing
/// thread, on any thread, concurrently with the writer.
///
/// Keeps the value each slot had at the previous collect (8 bytes per
/// bucket), so each collect returns exactly the packets recorded since the
/// previous one (see the [module documentation](self)).
pub struct CounterReader {
    shared: Arc<CoreCounters>,
    baseline: Box<[u64]>,
    intervals: u64,
}

impl CounterReader {
    /// Closes the current interval: writes into `out[b]` the packets recorded
    /// for bucket `b` since the previous collect (or since creation) and
    /// returns their sum (saturating). Does not allocate.
    ///
    /// # Panics
    ///
    /// If `out.len()` is not [`size`](Self::size).
    pub fn collect_into(&mut self, out: &mut [u64]) -> u64 {
        self.check_len(out.len());
        self.sweep(out, |o, d| *o = d)
    }

    /// Like [`collect_into`](Self::collect_into) but adds the interval's
    /// counts to `acc[b]` (saturating), to sum buckets over cores without a
    /// temporary buffer. Returns this core's total for the interval.
    ///
    /// # Panics
    ///
    /// If `acc.len()` is not [`size`](Self::size).
    pub fn collect_add(&mut self, acc: &mut [u64]) -> u64 {
        self.check_len(acc.len());
        self.sweep(acc, |o, d| *o = o.saturating_add(d))
    }

    /// Like [`collect_into`](Self::collect_into) into a new vector.
    pub fn collect(&mut self) -> Vec<u64> {
        let mut out = vec![0; self.size()];
        self.collect_into(&mut out);
        out
    }

    /// Closes the current interval without reporting it (for example after a
    /// reconfiguration, so the next collect starts afresh); returns the
    /// packets discarded.
    pub fn skip(&mut self) -> u64 {
        let mut total = 0u64;
        for (slot, base) in self.shared.slots().zip(self.baseline.iter_mut()) {
            let now = slot.load(Ordering::Relaxed);
            total = total.saturating_add(now.wrapping_sub(*base));
            *base = now;
        }
        self.intervals += 1;
        total
    }

    /// Intervals closed so far (collects and skips).
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// Number of buckets.
    pub fn size(&self) -> usize {
        self.baseline.len()
    }

    /// The shared table.
    pub fn counters(&self) -> &Arc<CoreCounters> {
        &self.shared
    }

    /// Bytes this reader keeps besides the shared table (its baseline).
    pub fn memory_bytes(&self) -> usize {
        self.baseline.len() * std::mem::size_of::<u64>()
    }

    fn check_len(&self, len: usize) {
        assert_eq!(
            len,
            self.size(),
            "buffer of {len} entries for a {}-bucket counter table",
            self.size()
        );
    }

    #[inline]
    fn sweep(&mut self, out: &mut [u64], mut put: impl FnMut(&mut u64, u64)) -> u64 {
        let mut total = 0u64;
        let slots = self.shared.slots();
        for ((slot, base), o) in slots.zip(self.baseline.iter_mut()).zip(out.iter_mut()) {
            let now = slot.load(Ordering::Relaxed);
            let delta = now.wrapping_sub(*base);
            *base = now;
            put(o, delta);
            total = total.saturating_add(delta);
        }
        self.intervals += 1;
        total
    }
}

impl fmt::Debug for CounterReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterReader")
            .field("size", &self.size())
            .field("intervals", &self.intervals)
            .finish_non_exhaustive()
    }
}

/// The counts of one interval over all cores: what the rebalancer needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalCounts {
    /// Packets per bucket, summed over cores (a bucket that moved during the
    /// interval has packets on both its old and its new core).
    pub bucket_packets: Vec<u64>,
    /// Packets per core.
    pub core_packets: Vec<u64>,
}

impl IntervalCounts {
    /// Packets of the interval over all cores (saturating).
    pub fn total(&self) -> u64 {
        self.core_packets
            .iter()
            .fold(0u64, |acc, &p| acc.saturating_add(p))
    }
}

/// The counter readers of all cores for one table size, collected together.
///
/// Built with [`CounterSet::new`], which also returns one
/// [`CounterWriter`] per core. Memory: `2 × 8 × size` bytes per core (the
/// shared table and the reader's baseline).
#[derive(Debug)]
pub struct CounterSet {
    readers: Vec<CounterReader>,
    size: usize,
}

impl CounterSet {
    /// Counters for `cores` cores (core `k` is index `k` of both the set and
    /// the returned writers) with `size` buckets each.
    ///
    /// # Errors
    ///
    /// [`CountersError::BadSize`] unless `size` is a power of two in
    /// 64…65536; [`CountersError::NoCores`] if `cores` is 0.
    pub fn new(cores: usize, size: usize) -> Result<(Self, Vec<CounterWriter>), CountersError> {
        check_size(size)?;
        if cores == 0 {
            return Err(CountersError::NoCores);
        }
        let mut readers = Vec::with_capacity(cores);
        let mut writers = Vec::with_capacity(cores);
        for _ in 0..cores {
            let (w, r) = core_counters(size)?;
            writers.push(w);
            readers.push(r);
        }
        Ok((Self { readers, size }, writers))
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.readers.len()
    }

    /// Number of buckets.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Closes the current interval of every core and writes its counts into
    /// `out`, resizing its vectors to `size` and `cores` entries (no
    /// allocation once they have that capacity). Returns the total.
    pub fn collect_into(&mut self, out: &mut IntervalCounts) -> u64 {
        out.bucket_packets.clear();
        out.bucket_packets.resize(self.size, 0);
        out.core_packets.clear();
        let mut total = 0u64;
        for reader in &mut self.readers {
            let core = reader.collect_add(&mut out.bucket_packets);
            out.core_packets.push(core);
            total = total.saturating_add(core);
        }
        total
    }

    /// Like [`collect_into`](Self::collect_into) into new vectors.
    pub fn collect(&mut self) -> IntervalCounts {
        let mut out = IntervalCounts {
            bucket_packets: Vec::with_capacity(self.size),
            core_packets: Vec::with_capacity(self.cores()),
        };
        self.collect_into(&mut out);
        out
    }

    /// Closes the current interval of every core without reporting it;
    /// returns the packets discarded.
    pub fn skip(&mut self) -> u64 {
        self.readers
            .iter_mut()
            .fold(0u64, |acc, r| acc.saturating_add(r.skip()))
    }

    /// The reader of `core`, to collect one core on its own (that closes the
    /// interval of that core only).
    ///
    /// # Panics
    ///
    /// If `core` is not below [`cores`](Self::cores).
    pub fn reader_mut(&mut self, core: usize) -> &mut CounterReader {
        &mut self.readers[core]
    }

    /// Bytes used by all cores: shared tables plus readers' baselines.
    pub fn memory_bytes(&self) -> usize {
        self.readers
            .iter()
            .map(|r| r.counters().memory_bytes() + r.memory_bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicUsize;
    use std::thread;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn handles_have_the_intended_auto_traits() {
        assert_send_sync::<CoreCounters>();
        assert_send_sync::<Arc<CoreCounters>>();
        assert_send::<CounterWriter>();
        assert_send_sync::<CounterReader>();
        assert_send_sync::<CounterSet>();
    }

    #[test]
    fn sizes_are_checked() {
        for size in [0, 1, 32, 63, 96, 100, 65535, 131072] {
            assert_eq!(
                core_counters(size).err(),
                Some(CountersError::BadSize(size))
            );
            assert_eq!(
                CounterSet::new(2, size).err(),
                Some(CountersError::BadSize(size))
            );
        }
        for size in [64, 128, 512, 4096, 65536] {
            let (w, r) = core_counters(size).unwrap();
            assert_eq!((w.size(), r.size()), (size, size));
            assert_eq!(w.counters().size(), size);
        }
        assert_eq!(CounterSet::new(0, 128).err(), Some(CountersError::NoCores));
        let msg = CountersError::BadSize(100).to_string();
        assert!(msg.contains("100") && msg.contains("power of two"), "{msg}");
    }

    #[test]
    fn memory_is_eight_bytes_per_bucket_and_line_aligned() {
        assert_eq!(SLOT_BYTES, 8);
        assert_eq!(std::mem::align_of::<Line>(), 64);
        assert_eq!(std::mem::size_of::<Line>(), 64);
        let (w, r) = core_counters(512).unwrap();
        assert_eq!(w.counters().memory_bytes(), 4096);
        assert_eq!(r.memory_bytes(), 4096);
        for size in [64, 65536] {
            let (w, _r) = core_counters(size).unwrap();
            let first = w.counters().slot(0) as *const AtomicU64 as usize;
            assert_eq!(first % 64, 0);
        }
        let (set, _w) = CounterSet::new(3, 128).unwrap();
        assert_eq!(set.memory_bytes(), 3 * 2 * 8 * 128);
    }

    #[test]
    fn single_thread_counts_are_exact_per_interval() {
        let (w, mut r) = core_counters(64).unwrap();
        w.record(3);
        w.record(3);
        w.record_n(10, 7);
        w.record_hash(64 + 5); // bucket 5
        w.record_hashes(&[1, 65, 129, 63]); // 1, 1, 1, 63
        let mut out = vec![u64::MAX; 64];
        assert_eq!(r.collect_into(&mut out), 2 + 7 + 1 + 4);
        let mut expected = vec![0; 64];
        expected[3] = 2;
        expected[10] = 7;
        expected[5] = 1;
        expected[1] = 3;
        expected[63] = 1;
        assert_eq!(out, expected);
        assert_eq!(r.intervals(), 1);

        // Next interval: only what was recorded since.
        w.record(3);
        let c = r.collect();
        assert_eq!(c[3], 1);
        assert_eq!(c.iter().sum::<u64>(), 1);

        // An interval with no packets reads all zero.
        assert!(r.collect().iter().all(|&c| c == 0));
        assert_eq!(r.intervals(), 3);
        assert_eq!(w.counters().cumulative(3), 3);
    }

    #[test]
    fn buckets_not_touched_in_an_interval_read_zero() {
        // The equivalent of the paper's stale-epoch slots: a bucket counted
        // in interval 1 and not in interval 2 reads 0 in interval 2, even
        // though its slot still holds the old count.
        let (w, mut r) = core_counters(128).unwrap();
        w.record_n(7, 1000);
        w.record_n(8, 5);
        assert_eq!(r.collect()[7], 1000);
        w.record_n(8, 2);
        let c = r.collect();
        assert_eq!((c[7], c[8]), (0, 2));
        assert_eq!(w.counters().cumulative(7), 1000);
    }

    #[test]
    fn skip_discards_an_interval() {
        let (w, mut r) = core_counters(64).unwrap();
        w.record_n(1, 9);
        assert_eq!(r.skip(), 9);
        w.record(2);
        let c = r.collect();
        assert_eq!((c[1], c[2]), (0, 1));
        assert_eq!(r.intervals(), 2);
    }

    #[test]
    fn counts_stay_exact_across_wrap_around() {
        // Slots count modulo 2^64 and the reader subtracts modulo 2^64, so
        // wrapping never corrupts an interval (where 32-bit counts would have
        // to saturate and lose packets).
        let (w, mut r) = core_counters(64).unwrap();
        w.record_n(4, u64::MAX - 2);
        assert_eq!(r.collect()[4], u64::MAX - 2);
        w.record_n(4, 5); // the slot wraps to 2
        assert_eq!(w.counters().cumulative(4), 2);
        assert_eq!(r.collect()[4], 5);
        w.record(4);
        assert_eq!(r.collect()[4], 1);
    }

    #[test]
    fn totals_saturate() {
        let (mut set, w) = CounterSet::new(2, 64).unwrap();
        w[0].record_n(0, u64::MAX - 1);
        w[0].record_n(1, 10);
        w[1].record_n(0, 10);
        let c = set.collect();
        assert_eq!(c.bucket_packets[0], u64::MAX);
        assert_eq!(c.bucket_packets[1], 10);
        assert_eq!(c.core_packets, vec![u64::MAX, 10]);
        assert_eq!(c.total(), u64::MAX);
    }

    #[test]
    #[should_panic(expected = "buffer of 10 entries")]
    fn collect_into_rejects_a_wrong_buffer() {
        let (_w, mut r) = core_counters(64).unwrap();
        r.collect_into(&mut [0; 10]);
    }

    #[test]
    fn counter_set_sums_buckets_over_cores() {
        let (mut set, w) = CounterSet::new(3, 64).unwrap();
        assert_eq!((set.cores(), set.size()), (3, 64));
        w[0].record_n(5, 10);
        w[1].record_n(5, 4); // bucket 5 moved from core 0 to core 1
        w[1].record(6);
        w[2].record_hash(0xffff_ff00); // bucket 0
        let mut out = IntervalCounts::default();
        assert_eq!(set.collect_into(&mut out), 16);
        assert_eq!(out.bucket_packets.len(), 64);
        assert_eq!(
            (
                out.bucket_packets[5],
                out.bucket_packets[6],
                out.bucket_packets[0]
            ),
            (14, 1, 1)
        );
        assert_eq!(out.core_packets, vec![10, 5, 1]);
        assert_eq!(out.total(), 16);

        // The buffers are reused and the next interval starts from zero.
        let cap = out.bucket_packets.capacity();
        w[2].record(1);
        assert_eq!(set.collect_into(&mut out), 1);
        assert_eq!(out.bucket_packets.capacity(), cap);
        assert_eq!(out.bucket_packets.iter().sum::<u64>(), 1);
        assert_eq!(out.core_packets, vec![0, 0, 1]);

        // One core on its own.
        w[1].record_n(9, 3);
        w[0].record(9);
        assert_eq!(set.reader_mut(1).collect()[9], 3);
        assert_eq!(set.collect().core_packets, vec![1, 0, 0]);
        w[0].record(2);
        assert_eq!(set.skip(), 1);
        assert_eq!(set.collect().total(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Record { core: usize, bucket: usize, n: u64 },
        Hash { core: usize, hash: u32 },
        Burst { core: usize, hashes: Vec<u32> },
        Collect,
        Skip,
    }

    fn op(cores: usize, size: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..cores, 0..size, 1u64..1000)
                .prop_map(|(core, bucket, n)| Op::Record { core, bucket, n }),
            4 => (0..cores, any::<u32>()).prop_map(|(core, hash)| Op::Hash { core, hash }),
            2 => (0..cores, proptest::collection::vec(any::<u32>(), 0..40))
                .prop_map(|(core, hashes)| Op::Burst { core, hashes }),
            2 => Just(Op::Collect),
            1 => Just(Op::Skip),
        ]
    }

    fn ops() -> impl Strategy<Value = (usize, usize, Vec<Op>)> {
        (1usize..5, prop_oneof![Just(64usize), Just(128), Just(1024)]).prop_flat_map(
            |(cores, size)| {
                (
                    Just(cores),
                    Just(size),
                    proptest::collection::vec(op(cores, size), 0..200),
                )
            },
        )
    }

    proptest! {
        #[test]
        fn random_sequences_match_a_model((cores, size, ops) in ops()) {
            let (mut set, writers) = CounterSet::new(cores, size).unwrap();
            // Model: packets per core and bucket since the last collect.
            let mut model = vec![vec![0u64; size]; cores];
            let mut out = IntervalCounts::default();
            let mut check = |set: &mut CounterSet, model: &mut Vec<Vec<u64>>| {
                set.collect_into(&mut out);
                let buckets: Vec<u64> =
                    (0..size).map(|b| model.iter().map(|m| m[b]).sum()).collect();
                let per_core: Vec<u64> = model.iter().map(|m| m.iter().sum()).collect();
                prop_assert_eq!(&out.bucket_packets, &buckets);
                prop_assert_eq!(&out.core_packets, &per_core);
                model.iter_mut().for_each(|m| m.fill(0));
                Ok(())
            };
            for op in ops {
                match op {
                    Op::Record { core, bucket, n } => {
                        if n == 1 {
                            writers[core].record(bucket);
                        } else {
                            writers[core].record_n(bucket, n);
                        }
                        model[core][bucket] += n;
                    }
                    Op::Hash { core, hash } => {
                        writers[core].record_hash(hash);
                        model[core][crate::bucket_of(hash, size)] += 1;
                    }
                    Op::Burst { core, hashes } => {
                        writers[core].record_hashes(&hashes);
                        for h in hashes {
                            model[core][crate::bucket_of(h, size)] += 1;
                        }
                    }
                    Op::Collect => check(&mut set, &mut model)?,
                    Op::Skip => {
                        let pending: u64 = model.iter().flatten().sum();
                        prop_assert_eq!(set.skip(), pending);
                        model.iter_mut().for_each(|m| m.fill(0));
                    }
                }
            }
            check(&mut set, &mut model)?;
        }
    }

    /// A xorshift generator: cheap enough not to dominate the writers' loops
    /// in debug builds.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn concurrent_writers_and_reader_lose_nothing() {
        const SIZE: usize = 1024;
        const WRITERS: usize = 2;
        const PACKETS: u64 = 3_000_000; // per writer
        const BURST: usize = 32;

        let (mut set, writers) = CounterSet::new(WRITERS, SIZE).unwrap();
        let finished = Arc::new(AtomicUsize::new(0));

        let handles: Vec<_> = writers
            .into_iter()
            .enumerate()
            .map(|(core, w)| {
                let finished = Arc::clone(&finished);
                thread::spawn(move || {
                    let mut sent = vec![0u64; SIZE];
                    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (core as u64 + 1);
                    let mut burst = [0u32; BURST];
                    let mut done = 0u64;
                    while done < PACKETS {
                        match xorshift(&mut rng) % 3 {
                            // A burst of hashes.
                            0 => {
                                for h in &mut burst {
                                    *h = xorshift(&mut rng) as u32;
                                    sent[crate::bucket_of(*h, SIZE)] += 1;
                                }
                                w.record_hashes(&burst);
                                done += BURST as u64;
                            }
                            // Several packets of one bucket.
                            1 => {
                                let r = xorshift(&mut rng);
                                let (b, n) = (r as usize % SIZE, (r >> 32) % 8 + 1);
                                w.record_n(b, n);
                                sent[b] += n;
                                done += n;
                            }
                            // Single packets, skewed to a few hot buckets.
                            _ => {
                                for _ in 0..BURST {
                                    let b = xorshift(&mut rng) as usize % 16;
                                    w.record(b);
                                    sent[b] += 1;
                                }
                                done += BURST as u64;
                            }
                        }
                    }
                    finished.fetch_add(1, Ordering::Release);
                    sent
                })
            })
            .collect();

        // The reader collects in a loop on its own thread while the writers
        // run, then hands the set back for the final collect.
        let reader = {
            let finished = Arc::clone(&finished);
            thread::spawn(move || {
                let mut got_buckets = vec![0u64; SIZE];
                let mut got_cores = vec![0u64; WRITERS];
                let mut out = IntervalCounts::default();
                let mut collects = 0u64;
                loop {
                    let last = finished.load(Ordering::Acquire) == WRITERS;
                    set.collect_into(&mut out);
                    collects += 1;
                    for (g, c) in got_buckets.iter_mut().zip(&out.bucket_packets) {
                        *g += c;
                    }
                    for (g, c) in got_cores.iter_mut().zip(&out.core_packets) {
                        *g += c;
                    }
                    // Never more than sent, at any point.
                    assert!(got_cores.iter().all(|&g| g <= PACKETS + BURST as u64));
                    if last {
                        break;
                    }
                    thread::yield_now();
                }
                (set, got_buckets, got_cores, collects)
            })
        };

        let sent: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let (mut set, mut got_buckets, mut got_cores, collects) = reader.join().unwrap();

        // After the joins, a final collect picks up whatever is left (there
        // is nothing left: the reader's last collect already followed the
        // writers' release of `finished`).
        let last = set.collect();
        assert_eq!(last.total(), 0);
        for (g, c) in got_buckets.iter_mut().zip(&last.bucket_packets) {
            *g += c;
        }
        for (g, c) in got_cores.iter_mut().zip(&last.core_packets) {
            *g += c;
        }

        let sent_cores: Vec<u64> = sent.iter().map(|s| s.iter().sum()).collect();
        let sent_buckets: Vec<u64> = (0..SIZE).map(|b| sent.iter().map(|s| s[b]).sum()).collect();
        assert!(sent_cores.iter().all(|&s| s >= PACKETS));
        // Upper bound: never more counted than sent; loss bound: zero. Both
        // per bucket and per core, so the two are one equality.
        assert_eq!(got_cores, sent_cores);
        assert_eq!(got_buckets, sent_buckets);
        assert!(collects >= 1);
    }
}
