//! The baseline the per-bucket design is measured against: one flow table
//! shared by all cores, as the Linux kernel's conntrack or a DPDK
//! multi-writer `rte_hash` keeps it.
//!
//! [`SharedFlowTable`] is lock-striped like conntrack: the flows are split
//! over a power-of-two number of [`FlowTable`]s by the mixed RSS hash (not by
//! bucket, so every core touches every stripe), each behind its own mutex on
//! its own cache line. Reusing [`FlowTable`] keeps the hash, the capacity
//! policy and the expiry identical to the per-bucket tables, so a comparison
//! measures only the sharing itself: the locks and the cache lines bouncing
//! between cores.
//!
//! Moving a bucket needs no state transfer here, so [`SharedWorker`]
//! completes moves at once, and packets of a moved bucket may be processed
//! by the new core while the old one still has earlier ones queued: this is
//! the reordering the per-bucket protocol avoids.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::reta::CoreId;
use crate::state::migration::{Completed, CoreCommand, Handoff, HandoffRejected, MigrationError};
use crate::state::table::{prefetch_line, FlowTable, TableConfig, TableStats};
use crate::state::worker::{process, FlowHandler, FlowPacket, Outbox, Worker, WorkerStats};

/// A mutex on its own 128-byte block, so two stripes never share a cache
/// line (or an adjacent-line prefetch pair).
#[repr(align(128))]
struct Stripe<S>(Mutex<FlowTable<S>>);

/// One flow table for all cores, behind striped locks; see the module docs.
pub struct SharedFlowTable<S> {
    stripes: Box<[Stripe<S>]>,
    mask: usize,
}

impl<S> std::fmt::Debug for SharedFlowTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFlowTable")
            .field("stripes", &self.stripes.len())
            .field("flows", &self.len())
            .finish()
    }
}

/// Default number of lock stripes (conntrack uses 1 024). At most 2^24 are
/// told apart.
pub const DEFAULT_STRIPES: usize = 1024;

impl<S> SharedFlowTable<S> {
    /// A table of `stripes` stripes (rounded up to a power of two, at least
    /// 1), each a [`FlowTable`] with `config` — as with per-bucket tables,
    /// the capacity is per table.
    pub fn new(config: TableConfig, stripes: usize) -> Self {
        let stripes = stripes.max(1).next_power_of_two();
        Self {
            stripes: (0..stripes)
                .map(|_| Stripe(Mutex::new(FlowTable::new(config))))
                .collect(),
            mask: stripes - 1,
        }
    }

    /// Number of stripes.
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    #[inline]
    fn stripe_of(&self, hash: u32) -> &Stripe<S> {
        // Bits 40.. of the multiplied hash: clear of the bits a stripe's own
        // index uses (its low bits and its top-7-bit tag), so flows sharing
        // a stripe still spread inside it.
        let x = u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.stripes[(x >> 40) as usize & self.mask]
    }

    /// Starts loading the lock (and table header) of the stripe of RSS hash
    /// `hash` into the cache. The entries themselves cannot be located
    /// without taking the lock.
    #[inline]
    pub fn prefetch(&self, hash: u32) {
        prefetch_line(self.stripe_of(hash));
    }

    #[inline]
    fn stripe(&self, hash: u32) -> MutexGuard<'_, FlowTable<S>> {
        // A handler that panicked while holding the lock leaves the table
        // structurally sound (it only had `&mut S`).
        self.stripe_of(hash)
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the stripe holding the flows of RSS hash `hash`, under
    /// its lock.
    #[inline]
    pub fn with_stripe<R>(&self, hash: u32, f: impl FnOnce(&mut FlowTable<S>) -> R) -> R {
        f(&mut self.stripe(hash))
    }

    /// Number of flows stored.
    pub fn len(&self) -> usize {
        self.stripes.iter().map(|s| lock(&s.0).len()).sum()
    }

    /// True when no flow is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sum of the stripes' counters.
    pub fn stats(&self) -> TableStats {
        let mut total = TableStats::default();
        for s in self.stripes.iter() {
            total.add(lock(&s.0).stats());
        }
        total
    }

    /// Drops the flows idle for the timeout; returns how many.
    pub fn expire(&self, now: u64) -> usize {
        self.stripes.iter().map(|s| lock(&s.0).expire(now)).sum()
    }

    /// Calls `f` on every flow, one stripe locked at a time.
    pub fn for_each(&self, mut f: impl FnMut(&crate::FlowKey, &S)) {
        for s in self.stripes.iter() {
            for (k, v) in lock(&s.0).iter() {
                f(k, v);
            }
        }
    }
}

fn lock<S>(m: &Mutex<FlowTable<S>>) -> MutexGuard<'_, FlowTable<S>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A worker of the shared-table baseline: the same [`Worker`] interface as
/// [`BucketWorker`](crate::state::BucketWorker), every state access going
/// through the [`SharedFlowTable`].
pub struct SharedWorker<H: FlowHandler> {
    core: CoreId,
    table: Arc<SharedFlowTable<H::State>>,
    handler: H,
    stats: WorkerStats,
    batch: Vec<H::Packet>,
}

impl<H: FlowHandler> std::fmt::Debug for SharedWorker<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWorker")
            .field("core", &self.core)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<H: FlowHandler> SharedWorker<H> {
    /// The worker of `core`, using `table` (shared with the other cores).
    pub fn new(core: CoreId, table: Arc<SharedFlowTable<H::State>>, handler: H) -> Self {
        Self {
            core,
            table,
            handler,
            stats: WorkerStats::default(),
            batch: Vec::new(),
        }
    }

    /// The shared table.
    pub fn table(&self) -> &Arc<SharedFlowTable<H::State>> {
        &self.table
    }

    /// Consumes the worker, returning its network function.
    pub fn into_handler(self) -> H {
        self.handler
    }
}

impl<H: FlowHandler> Worker for SharedWorker<H> {
    type Handler = H;

    fn core(&self) -> CoreId {
        self.core
    }

    fn receive<I>(&mut self, packets: I, now: u64, out: &mut Outbox<H::State>)
    where
        I: IntoIterator<Item = H::Packet>,
    {
        let mut batch = std::mem::take(&mut self.batch);
        batch.extend(packets);
        self.receive_batch(&mut batch, now, out);
        self.batch = batch;
    }

    fn receive_batch(&mut self, batch: &mut Vec<H::Packet>, now: u64, _out: &mut Outbox<H::State>) {
        let Self {
            table,
            handler,
            stats,
            ..
        } = self;
        if batch.len() > 1 {
            for packet in batch.iter() {
                table.prefetch(packet.rss_hash());
            }
        }
        for packet in batch.drain(..) {
            stats.received += 1;
            table.with_stripe(packet.rss_hash(), |t| process(t, handler, &packet, now));
            stats.processed += 1;
        }
    }

    fn command(
        &mut self,
        command: CoreCommand,
        _now: u64,
        out: &mut Outbox<H::State>,
    ) -> Result<(), MigrationError> {
        if command.core != self.core {
            return Err(MigrationError::WrongCore {
                addressed: command.core,
                core: self.core,
            });
        }
        // Nothing to move: the state is already where every core can see it.
        out.completed
            .extend(command.arrivals.iter().map(|a| Completed {
                bucket: a.bucket,
                generation: command.generation,
            }));
        Ok(())
    }

    fn accept(
        &mut self,
        handoff: Handoff<H::State>,
        _now: u64,
        _out: &mut Outbox<H::State>,
    ) -> Result<(), HandoffRejected<H::State>> {
        Err(HandoffRejected {
            error: MigrationError::SharedTable,
            handoff: Box::new(handoff),
        })
    }

    fn expire(&mut self, now: u64) -> usize {
        // Every core would sweep the same table: core 0 does it.
        if self.core == 0 {
            self.table.expire(now)
        } else {
            0
        }
    }

    fn is_settled(&self) -> bool {
        true
    }

    fn stats(&self) -> WorkerStats {
        self.stats
    }

    fn handler(&self) -> &H {
        &self.handler
    }
}
