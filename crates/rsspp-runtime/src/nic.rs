//! Hardware mode of the afxdp backend (`rsspp nf --backend afxdp --mode
//! hardware`): the NIC's RSS spreads frames over its queues, worker w
//! holding queue w, and the controller moves buckets by rewriting the NIC's
//! indirection table (through rsspp-linux's ethtool layer, as the daemon's
//! hardware mode does). The XDP program (`src/bpf/xsk_nic.bpf.c`) counts
//! each frame on its bucket's word only when it arrives on the owner's
//! queue, and on the bucket's *early* count otherwise.
//!
//! A move of bucket b from worker A to worker B, in order:
//! 1. B expects b (it parks b's frames), as in software mode;
//! 2. the NIC's table is written: b's new frames go to B's queue, while A's
//!    queue may still hold some of b's (the NIC's receive ring);
//! 3. the fence: the controller waits until A's queue has passed every
//!    frame it held at the write, which it knows when the program has seen
//!    as many frames on that queue as its ring holds, or when the queue
//!    has seen none for [`QUIET`] (its ring is then empty: a frame in it
//!    would have been taken at once), at most [`FENCE_LIMIT`];
//! 4. the word's compare-and-swap to B gives the mark of b's frames A took;
//!    once the program's runs in progress are over, b's early count (its
//!    frames that reached B's queue between 2 and 4) is read and zeroed:
//!    B parked them, so they count towards B's later marks (`offsets`).
//!
//! The NIC's table as it was is put back at the end, and saved in
//! `/run/rsspp/IFACE/original-table` meanwhile, so that `rsspp detach`
//! puts it back after a SIGKILL.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rsspp_core::{IndirectionTable, RssKey};
use rsspp_linux::ethtool::{put_back, Ethtool, HashFunction, RssDevice};
use rsspp_linux::lifecycle::SavedTable;
use tracing::{info, warn};

use crate::afxdp::{ethtool_request, NicCounts};
use crate::error::RuntimeError;

/// A queue that took no frame for this long after the table's write had
/// none left from before it: a frame in a receive ring is taken by the
/// next poll of its queue, within microseconds on a CPU that runs (an
/// assumption, not a proof: a CPU stalled longer breaks it, and the frame
/// it held reaches its worker as a stray, counted as `stateless`).
pub const QUIET: Duration = Duration::from_millis(5);
/// How long a queue's worker must have run in a quiet time for it to
/// count (its loop sleeps at most 1 ms at a time).
const WORKER_RAN: u64 = 2_000_000;
/// The longest a fence waits; a move then goes on (a frame still held by
/// the old queue would reach its worker after the state left: a stray,
/// counted as `stateless`).
pub const FENCE_LIMIT: Duration = Duration::from_millis(500);
/// The ring size assumed for a queue whose driver does not say.
const UNKNOWN_RING: u64 = 4096;

/// What the NIC gives hardware mode: its table's size and its key.
#[derive(Debug)]
pub struct NicRss {
    /// Entries of the indirection table (the buckets).
    pub size: usize,
    /// The NIC's Toeplitz key.
    pub key: RssKey,
}

/// How fences ended, over the run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FenceSummary {
    /// Passed when the old queue had seen as many frames as its ring holds.
    pub ring: u64,
    /// Passed when the old queue had been quiet for [`QUIET`].
    pub quiet: u64,
    /// Gave up after [`FENCE_LIMIT`].
    pub timed_out: u64,
    /// Frames that reached their old queue after their bucket's fence had
    /// passed (each a stray, or a mark one frame off): 0 when every fence
    /// held.
    pub late_frames: u64,
}

/// By which hash hardware mode's program bucketed the frames.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BucketedBy {
    /// The NIC's own, read through `bpf_xdp_metadata_rx_hash` and handed
    /// to the worker in the frame's metadata.
    pub nic_hash: u64,
    /// Toeplitz under the NIC's key, computed in XDP (and by the worker):
    /// a driver or kernel without the RX-hash kfunc, or a frame it has no
    /// hash for.
    pub toeplitz: u64,
}

/// The NIC in hardware mode; see the module docs.
#[derive(Debug)]
pub struct Nic {
    device: Ethtool,
    iface: String,
    original: Vec<u32>,
    counts: Option<NicCounts>,
    /// Descriptors of each receive ring (`ethtool -g`: one size for all).
    ring: u64,
    /// Per bucket: frames its owner took that its word did not number.
    offsets: Vec<u64>,
    /// The table was written (and is put back on drop).
    written: bool,
    /// The original was saved for `rsspp detach`.
    saved: bool,
    /// How the frames were bucketed was said.
    said_hashes: bool,
    /// The table last written (bucket → queue).
    current: Vec<u32>,
    /// How the fences ended.
    fences: FenceSummary,
}

impl Nic {
    /// Opens `iface`'s RSS configuration for `workers` workers: its table
    /// must be Toeplitz's, with a queue per worker.
    pub fn open(iface: &str, workers: usize) -> Result<(Self, NicRss), RuntimeError> {
        let fail = |e: rsspp_linux::ethtool::EthtoolError| {
            RuntimeError::Config(format!("hardware mode: {e}"))
        };
        let mut device = Ethtool::open(iface).map_err(fail)?;
        let rss = device.rss().map_err(fail)?;
        let queues = device.rx_queues().map_err(fail)?;
        if (queues as usize) < workers {
            return Err(RuntimeError::Config(format!(
                "{iface} has {queues} receive queue{}: hardware mode needs one per worker ({workers})",
                if queues == 1 { "" } else { "s" }
            )));
        }
        if !matches!(rss.hfunc, HashFunction::Toeplitz | HashFunction::Unknown) {
            return Err(RuntimeError::Config(format!(
                "{iface} hashes with {}: hardware mode counts with Toeplitz's",
                rss.hfunc
            )));
        }
        // The table to put back: the NIC's, unless a run that never put its
        // original back (SIGKILL) saved it; the ntuple rules a killed
        // `rsspp run --mode hardware` left are deleted (they would steer
        // flows past the buckets).
        let (original, saved_by) =
            SavedTable::recover(&mut device, iface, 0, rss.indirection.clone());
        if let Some(pid) = saved_by {
            warn!("{iface}'s table was left by an rsspp run (pid {pid}) that did not put the original back: the original it saved will be put back on exit");
        }
        let size = rss.indirection.len();
        if !size.is_power_of_two() {
            return Err(RuntimeError::Config(format!(
                "{iface}'s indirection table has {size} entries: hardware mode needs a power of two"
            )));
        }
        let key = if rss.key.is_empty() {
            warn!("{iface} reports no RSS key: counting with Microsoft's");
            RssKey::microsoft()
        } else {
            RssKey::new(rss.key.clone())
                .map_err(|e| RuntimeError::Config(format!("{iface}'s RSS key: {e}")))?
        };
        let ring = ring_size(iface).map_or(UNKNOWN_RING, u64::from);
        Ok((
            Self {
                device,
                iface: iface.to_string(),
                original,
                counts: None,
                ring,
                offsets: vec![0; size],
                written: false,
                saved: false,
                said_hashes: false,
                current: Vec::new(),
                fences: FenceSummary::default(),
            },
            NicRss { size, key },
        ))
    }

    /// By which hash the program bucketed the frames so far.
    pub fn bucketed_by(&self) -> BucketedBy {
        self.counts
            .as_ref()
            .map_or_else(BucketedBy::default, |c| BucketedBy {
                nic_hash: c.hashes.get(0).load(Ordering::Relaxed),
                toeplitz: c.hashes.get(1).load(Ordering::Relaxed),
            })
    }

    /// Says once, when the first frames have come, whether the NIC's own
    /// hash reaches the program (a driver may report none with its
    /// rx-hashing feature off).
    pub fn say_how_bucketed(&mut self) {
        let Some(counts) = &self.counts else {
            return;
        };
        if self.said_hashes {
            return;
        }
        let by = self.bucketed_by();
        if by.nic_hash + by.toeplitz == 0 {
            return;
        }
        self.said_hashes = true;
        if by.nic_hash > 0 {
            info!("{}: frames bucketed by the NIC's own hash", self.iface);
        } else if counts.rx_hash {
            info!(
                "{}: the driver gives XDP no RSS hash (is rx-hashing off? ethtool -K {} rxhash on): bucketing with Toeplitz under the NIC's key",
                self.iface, self.iface
            );
        } else {
            info!(
                "{}: bucketing with Toeplitz under the NIC's key (no RX-hash program)",
                self.iface
            );
        }
    }

    /// Writes `table` (bucket → worker, worker w on queue w) to the NIC,
    /// the original saved first (once) for `rsspp detach`.
    pub fn write(&mut self, table: &IndirectionTable) -> Result<(), RuntimeError> {
        if !std::mem::replace(&mut self.saved, true) {
            let saved = SavedTable {
                pid: std::process::id(),
                context: 0,
                table: self.original.clone(),
                rules: Vec::new(),
            };
            if let Err(e) = saved.write(&self.iface) {
                warn!(
                    "{}: cannot save the NIC's table for `rsspp detach` ({e}); it is put back on exit",
                    self.iface
                );
            }
        }
        let entries: Vec<u32> = table.entries().iter().map(|&c| c as u32).collect();
        // The program's mirror first: a frame that comes on the new queue
        // before the word moves is then counted as early there.
        if let Some(counts) = &self.counts {
            mirror(counts, &entries);
        }
        self.current = entries.clone();
        self.written = true;
        self.device.set_indirection(&entries).map_err(|e| {
            RuntimeError::Config(format!("{}: writing the NIC's table: {e}", self.iface))
        })
    }

    /// Hands over the program's counts, once it is loaded (the table
    /// written so far mirrored in it).
    pub fn counting(&mut self, counts: NicCounts) {
        mirror(&counts, &self.current);
        self.counts = Some(counts);
    }

    /// The fences' summary, the late frames counted.
    pub fn fences(&self) -> FenceSummary {
        FenceSummary {
            late_frames: self
                .counts
                .as_ref()
                .map_or(0, |c| c.late.get(0).load(Ordering::Relaxed)),
            ..self.fences
        }
    }

    /// Waits until each of `queues` has passed every frame it held when
    /// the table was last written (see the module docs). `ran(q)` is how
    /// long worker q's loop has run in all (busy and idle): a queue is
    /// quiet only if its worker, pinned to the CPU that serves it, ran in
    /// the quiet time (a stalled CPU takes no frame and says nothing).
    pub fn fence(&mut self, queues: &[usize], ran: impl Fn(usize) -> u64) {
        let Some(counts) = &self.counts else {
            return;
        };
        let seen = |q: usize| counts.queue_frames.get(q).load(Ordering::Acquire);
        let busy = fence(queues, self.ring, seen, ran, &mut self.fences);
        if !busy.is_empty() {
            warn!(
                "{}: queue{} {busy:?} still busy {} ms after the table's write: moving on",
                self.iface,
                if busy.len() == 1 { "" } else { "s" },
                FENCE_LIMIT.as_millis()
            );
        }
    }

    /// The mark to give `bucket`'s worker for a word count of `raw`: the
    /// frames it took that the word did not number added.
    pub fn mark(&self, bucket: usize, raw: u64) -> u64 {
        raw + self.offsets[bucket]
    }

    /// After `bucket`'s word was switched to its new worker and the
    /// program's runs in progress ended: the frames of it that reached the
    /// new worker's queue first (parked there) count towards its marks
    /// from now on.
    pub fn handed_over(&mut self, bucket: usize) {
        if let Some(counts) = &self.counts {
            self.offsets[bucket] += counts.early.get(bucket).swap(0, Ordering::AcqRel);
        }
    }

    /// Puts the NIC's table back as it was (once; dropping does it).
    pub fn put_back(&mut self) {
        if !std::mem::take(&mut self.written) {
            return;
        }
        match put_back(&mut self.device, &self.original) {
            Ok(()) => {
                info!("{}: the NIC's table put back", self.iface);
                SavedTable::remove(&self.iface);
            }
            Err(e) => warn!(
                "{}: cannot put the NIC's table back ({e}); `rsspp detach --iface {}` will",
                self.iface, self.iface
            ),
        }
    }
}

/// The fence itself (see the module docs): waits until each of `queues`
/// has seen as many frames as a ring holds (`seen(q)`: frames so far),
/// or none for [`QUIET`] while its worker ran ([`WORKER_RAN`] of
/// `ran(q)`), at most [`FENCE_LIMIT`]; counts how each ended in `summary`
/// and returns the queues it gave up on.
fn fence(
    queues: &[usize],
    ring: u64,
    seen: impl Fn(usize) -> u64,
    ran: impl Fn(usize) -> u64,
    summary: &mut FenceSummary,
) -> Vec<usize> {
    let start = Instant::now();
    // Per queue still waited for: its count at the write, the last count
    // seen, when it changed, and its worker's run time then.
    let mut waiting: Vec<(usize, u64, u64, Instant, u64)> = Vec::new();
    for &q in queues {
        if !waiting.iter().any(|w| w.0 == q) {
            let c = seen(q);
            waiting.push((q, c, c, start, ran(q)));
        }
    }
    loop {
        let now = Instant::now();
        waiting.retain_mut(|(q, at_write, last, changed, ran_then)| {
            let c = seen(*q);
            if c.saturating_sub(*at_write) >= ring {
                summary.ring += 1;
                return false;
            }
            if c != *last {
                *last = c;
                *changed = now;
                *ran_then = ran(*q);
            } else if now.duration_since(*changed) >= QUIET
                && ran(*q).saturating_sub(*ran_then) >= WORKER_RAN
            {
                summary.quiet += 1;
                return false;
            }
            true
        });
        if waiting.is_empty() {
            return Vec::new();
        }
        if start.elapsed() >= FENCE_LIMIT {
            summary.timed_out += waiting.len() as u64;
            return waiting.iter().map(|w| w.0).collect();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes the table into the program's mirror of it.
fn mirror(counts: &NicCounts, entries: &[u32]) {
    for (b, &q) in entries.iter().enumerate() {
        counts
            .nic_queue
            .get(b)
            .store(u64::from(q), Ordering::Release);
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        self.put_back();
    }
}

/// `struct ethtool_ringparam`.
#[repr(C)]
#[derive(Default)]
struct RingParam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

const ETHTOOL_GRINGPARAM: u32 = 0x10;

/// The descriptors of `iface`'s receive rings (`ethtool -g`), if the
/// driver says.
fn ring_size(iface: &str) -> Option<u32> {
    let mut ring = RingParam {
        cmd: ETHTOOL_GRINGPARAM,
        ..RingParam::default()
    };
    (ethtool_request(iface, &mut ring) && ring.rx_pending > 0).then_some(ring.rx_pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_parameters_have_the_kernels_size() {
        assert_eq!(std::mem::size_of::<RingParam>(), 36);
    }

    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Queue 0's frames and its worker's run time, advanced by a thread
    /// for `for_ms`: a frame every `frame_every_ms` (0: none), the worker
    /// running as the clock does.
    fn traffic(frame_every_ms: u64, for_ms: u64) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
        let frames = Arc::new(AtomicU64::new(0));
        let ran = Arc::new(AtomicU64::new(0));
        let (f, r) = (Arc::clone(&frames), Arc::clone(&ran));
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut ms = 0;
            while start.elapsed() < Duration::from_millis(for_ms) {
                std::thread::sleep(Duration::from_millis(1));
                ms += 1;
                r.fetch_add(1_000_000, Ordering::Relaxed);
                if frame_every_ms > 0 && ms % frame_every_ms == 0 {
                    f.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        (frames, ran)
    }

    fn run_fence(
        ring: u64,
        frames: &AtomicU64,
        ran: &AtomicU64,
    ) -> (FenceSummary, Vec<usize>, Duration) {
        let mut summary = FenceSummary::default();
        let start = Instant::now();
        let busy = fence(
            &[0, 0],
            ring,
            |_| frames.load(Ordering::Relaxed),
            |_| ran.load(Ordering::Relaxed),
            &mut summary,
        );
        (summary, busy, start.elapsed())
    }

    #[test]
    fn a_quiet_queue_whose_worker_runs_passes_after_the_quiet_time() {
        let (frames, ran) = traffic(0, 1_000);
        let (s, busy, took) = run_fence(256, &frames, &ran);
        assert_eq!((s.quiet, s.ring, s.timed_out), (1, 0, 0), "{s:?}");
        assert!(busy.is_empty());
        assert!(took >= QUIET, "{took:?}");
    }

    #[test]
    fn a_queue_whose_worker_does_not_run_is_not_quiet() {
        // A stalled CPU: no frame, and no run time either.
        let frames = AtomicU64::new(0);
        let ran = AtomicU64::new(0);
        let (s, busy, took) = run_fence(256, &frames, &ran);
        assert_eq!((s.quiet, s.ring, s.timed_out), (0, 0, 1), "{s:?}");
        assert_eq!(busy, vec![0]);
        assert!(took >= FENCE_LIMIT, "{took:?}");
    }

    #[test]
    fn a_busy_queue_passes_once_it_has_seen_its_ring() {
        // A frame a millisecond: never quiet; a ring of 20 frames is
        // passed after about 20 ms.
        let (frames, ran) = traffic(1, 2_000);
        let (s, busy, took) = run_fence(20, &frames, &ran);
        assert_eq!((s.quiet, s.ring, s.timed_out), (0, 1, 0), "{s:?}");
        assert!(busy.is_empty());
        assert!(took >= Duration::from_millis(19), "{took:?}");
    }

    #[test]
    fn a_busy_queue_with_a_large_ring_gives_up_at_the_limit() {
        let (frames, ran) = traffic(1, 2_000);
        let (s, busy, _) = run_fence(1_000_000, &frames, &ran);
        assert_eq!((s.quiet, s.ring, s.timed_out), (0, 0, 1), "{s:?}");
        assert_eq!(busy, vec![0]);
    }

    #[test]
    fn a_missing_interface_has_no_ring_size() {
        assert_eq!(ring_size("rsspp-none0"), None);
    }
}
