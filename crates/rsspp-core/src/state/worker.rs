//! Workers: one per core, run to completion over batches of packets.
//!
//! A worker is driven from outside (sans I/O): its driver hands it batches
//! taken from the core's receive queue, the coordinator's [`CoreCommand`]s and
//! the [`Handoff`]s other cores send, plus the time; the worker returns, in an
//! [`Outbox`], the handoffs to deliver and the completed moves to report. The
//! simulator calls these methods directly; the threaded harness
//! ([`crate::state::threaded`]) and the real data paths move the same values
//! over channels.
//!
//! Two implementations share the [`Worker`] trait: [`BucketWorker`], with one
//! table per RSS bucket migrated as in §3.3, and
//! [`SharedWorker`](crate::state::shared::SharedWorker), the baseline with one
//! locked table for all cores.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::flow::FlowKey;
use crate::reta::{CoreId, IndirectionTable};
use crate::state::migration::{
    Completed, CoreCommand, Handoff, HandoffRejected, MigrationError, Release,
};
use crate::state::table::{FlowTable, TableConfig, TableStats};
use crate::toeplitz::bucket_of;

/// A packet as the state layer sees it: its flow and the RSS hash the NIC
/// computed for it (which selects its bucket, and indexes the flow tables).
pub trait FlowPacket {
    /// The packet's flow.
    fn flow_key(&self) -> &FlowKey;
    /// The packet's RSS (Toeplitz) hash.
    fn rss_hash(&self) -> u32;
}

/// The network function run on every packet with its flow's state (a NAT, a
/// firewall, a DPI engine…). One instance per core: it is never shared.
pub trait FlowHandler {
    /// Packets it processes.
    type Packet: FlowPacket;
    /// Per-flow state it keeps.
    type State;

    /// State for the first packet of a flow (or the first after it expired).
    fn new_flow(&mut self, packet: &Self::Packet, now: u64) -> Self::State;

    /// Processes `packet`; `state` is `None` when the flow's table is full and
    /// refuses new flows ([`WhenFull::Refuse`](crate::state::WhenFull::Refuse)).
    fn process(&mut self, packet: &Self::Packet, state: Option<&mut Self::State>, now: u64);
}

/// What a worker asks its driver to deliver.
#[derive(Debug)]
pub struct Outbox<S> {
    /// Tables to move to other cores (to `handoff.to`).
    pub handoffs: Vec<Handoff<S>>,
    /// Moves to report to the coordinator.
    pub completed: Vec<Completed>,
}

impl<S> Default for Outbox<S> {
    fn default() -> Self {
        Self {
            handoffs: Vec::new(),
            completed: Vec::new(),
        }
    }
}

impl<S> Outbox<S> {
    /// True when there is nothing to deliver.
    pub fn is_empty(&self) -> bool {
        self.handoffs.is_empty() && self.completed.is_empty()
    }
}

/// Counters of one worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct WorkerStats {
    /// Packets taken from the receive queue.
    pub received: u64,
    /// Packets handed to the handler (parked packets count when processed).
    pub processed: u64,
    /// Packets that waited in a pending queue for their bucket's table.
    pub parked: u64,
    /// Most packets waiting in pending queues at once.
    pub peak_pending: u64,
    /// Tables handed to another core.
    pub released: u64,
    /// Tables taken over from another core.
    pub accepted: u64,
}

/// The handler's state type of a worker.
pub type StateOf<W> = <<W as Worker>::Handler as FlowHandler>::State;
/// The handler's packet type of a worker.
pub type PacketOf<W> = <<W as Worker>::Handler as FlowHandler>::Packet;

/// One core's packet processing with flow state; see the module docs.
///
/// All times are nanoseconds on a clock shared by the cores, supplied by the
/// caller.
pub trait Worker {
    /// The network function.
    type Handler: FlowHandler;

    /// The core this worker runs on.
    fn core(&self) -> CoreId;

    /// Processes a batch taken from the core's receive queue, in order.
    fn receive<I>(&mut self, packets: I, now: u64, out: &mut Outbox<StateOf<Self>>)
    where
        I: IntoIterator<Item = PacketOf<Self>>;

    /// Like [`receive`](Self::receive), from a buffer that it empties (its
    /// capacity stays, for the caller to refill): no copy of the batch.
    fn receive_batch(
        &mut self,
        batch: &mut Vec<PacketOf<Self>>,
        now: u64,
        out: &mut Outbox<StateOf<Self>>,
    ) {
        self.receive(batch.drain(..), now, out);
    }

    /// Applies the coordinator's command for one table rewrite. An invalid
    /// command is refused whole.
    fn command(
        &mut self,
        command: CoreCommand,
        now: u64,
        out: &mut Outbox<StateOf<Self>>,
    ) -> Result<(), MigrationError>;

    /// Takes over a table released by another core. A refused handoff is
    /// returned with its table.
    fn accept(
        &mut self,
        handoff: Handoff<StateOf<Self>>,
        now: u64,
        out: &mut Outbox<StateOf<Self>>,
    ) -> Result<(), HandoffRejected<StateOf<Self>>>;

    /// Drops the flows idle for the timeout; returns how many.
    fn expire(&mut self, now: u64) -> usize;

    /// True when no table of this core is waiting to leave or to arrive.
    fn is_settled(&self) -> bool;

    /// The worker's counters.
    fn stats(&self) -> WorkerStats;

    /// The network function.
    fn handler(&self) -> &Self::Handler;
}

/// Flow tables with their bucket number.
pub type BucketTables<S> = Vec<(usize, FlowTable<S>)>;

/// What a core holds for one bucket.
#[derive(Clone, Hash)]
enum Slot<S, P> {
    /// Another core's bucket.
    Absent,
    /// This core's bucket, since rewrite `since`.
    Owned { table: FlowTable<S>, since: u64 },
    /// Moving to `to`: packets queued before the rewrite are still processed
    /// here until a release condition holds.
    Releasing {
        table: FlowTable<S>,
        to: CoreId,
        after_received: u64,
        generation: u64,
    },
    /// Coming here: packets wait until the table arrives. `generation` is
    /// `None` while packets arrived before the coordinator's command.
    Waiting {
        generation: Option<u64>,
        pending: VecDeque<P>,
    },
}

/// A worker with one flow table per RSS bucket, migrated between cores by
/// the protocol of [`crate::state::migration`]. No lock, no atomic: the
/// tables it holds are its own.
///
/// `Clone` and `Hash` (when the handler, its packets and states have them)
/// let a model checker copy and recognise whole systems of workers.
#[derive(Clone, Hash)]
pub struct BucketWorker<H: FlowHandler> {
    core: CoreId,
    config: TableConfig,
    slots: Vec<Slot<H::State, H::Packet>>,
    /// Buckets in `Slot::Releasing`.
    releasing: Vec<usize>,
    /// Number of buckets in `Slot::Waiting`.
    waiting: usize,
    pending: u64,
    /// Newest rewrite whose newly assigned bucket had a packet taken from
    /// this core's queue (0: none).
    newest_arrival_seen: u64,
    handler: H,
    stats: WorkerStats,
    /// The batch being processed (kept to reuse its allocation).
    batch: Vec<H::Packet>,
}

impl<H: FlowHandler> std::fmt::Debug for BucketWorker<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketWorker")
            .field("core", &self.core)
            .field("buckets", &self.owned_buckets().count())
            .field("releasing", &self.releasing)
            .field("waiting", &self.waiting)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Looks up (or creates) the packet's flow in `table` and runs the handler:
/// the per-packet work of both the per-bucket and the shared-table workers.
#[inline]
pub(crate) fn process<H: FlowHandler>(
    table: &mut FlowTable<H::State>,
    handler: &mut H,
    packet: &H::Packet,
    now: u64,
) {
    let state = table
        .get_or_insert_with(packet.flow_key(), packet.rss_hash(), now, || {
            handler.new_flow(packet, now)
        })
        .state();
    handler.process(packet, state, now);
}

impl<H: FlowHandler> BucketWorker<H> {
    /// The worker of `core`, owning (with empty tables) the buckets `table`
    /// assigns to it.
    pub fn new(core: CoreId, table: &IndirectionTable, config: TableConfig, handler: H) -> Self {
        let slots = table
            .entries()
            .iter()
            .map(|&c| {
                if c == core {
                    Slot::Owned {
                        table: FlowTable::new(config),
                        since: 0,
                    }
                } else {
                    Slot::Absent
                }
            })
            .collect();
        Self {
            core,
            config,
            slots,
            releasing: Vec::new(),
            waiting: 0,
            pending: 0,
            newest_arrival_seen: 0,
            handler,
            stats: WorkerStats::default(),
            batch: Vec::new(),
        }
    }

    /// The table configuration new tables get.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// Buckets whose table this core holds (owned or about to leave).
    pub fn owned_buckets(&self) -> impl Iterator<Item = usize> + '_ {
        self.tables().map(|(b, _)| b)
    }

    /// The tables this core holds, with their bucket.
    pub fn tables(&self) -> impl Iterator<Item = (usize, &FlowTable<H::State>)> + '_ {
        self.slots.iter().enumerate().filter_map(|(b, s)| match s {
            Slot::Owned { table, .. } | Slot::Releasing { table, .. } => Some((b, table)),
            _ => None,
        })
    }

    /// Sum of the counters of the tables this core holds.
    pub fn table_stats(&self) -> TableStats {
        let mut total = TableStats::default();
        for (_, t) in self.tables() {
            total.add(t.stats());
        }
        total
    }

    /// Packets waiting for a table to arrive.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// The network function, mutably.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// Consumes the worker, returning its network function and its tables.
    pub fn into_parts(self) -> (H, BucketTables<H::State>) {
        let tables = self
            .slots
            .into_iter()
            .enumerate()
            .filter_map(|(b, s)| match s {
                Slot::Owned { table, .. } | Slot::Releasing { table, .. } => Some((b, table)),
                _ => None,
            })
            .collect();
        (self.handler, tables)
    }

    /// Processes and empties `batch`.
    fn run_batch(&mut self, batch: &mut Vec<H::Packet>, now: u64, out: &mut Outbox<H::State>) {
        let size = self.slots.len();
        // Start every index slot's, then every entry's cache miss before
        // processing the first packet, so that the misses of the batch
        // overlap instead of queueing one after another.
        if batch.len() > 1 {
            for packet in batch.iter() {
                let hash = packet.rss_hash();
                if let Slot::Owned { table, .. } | Slot::Releasing { table, .. } =
                    &self.slots[bucket_of(hash, size)]
                {
                    table.prefetch_index(hash);
                }
            }
            for packet in batch.iter() {
                let hash = packet.rss_hash();
                if let Slot::Owned { table, .. } | Slot::Releasing { table, .. } =
                    &self.slots[bucket_of(hash, size)]
                {
                    table.prefetch(hash);
                }
            }
        }
        for packet in batch.drain(..) {
            self.stats.received += 1;
            let bucket = bucket_of(packet.rss_hash(), size);
            match &mut self.slots[bucket] {
                Slot::Owned { table, since } => {
                    // A bucket that arrived with rewrite `since`: this packet
                    // was queued under that rewrite or a later one (the
                    // second release condition, for handoffs that beat
                    // their bucket's first packet here).
                    self.newest_arrival_seen = self.newest_arrival_seen.max(*since);
                    process(table, &mut self.handler, &packet, now);
                    self.stats.processed += 1;
                }
                Slot::Releasing { table, .. } => {
                    process(table, &mut self.handler, &packet, now);
                    self.stats.processed += 1;
                }
                Slot::Waiting {
                    generation,
                    pending,
                } => {
                    pending.push_back(packet);
                    if let Some(g) = *generation {
                        self.newest_arrival_seen = self.newest_arrival_seen.max(g);
                    }
                    self.pending += 1;
                    self.stats.parked += 1;
                }
                slot @ Slot::Absent => {
                    // Queued to this core, so the bucket is on its way here
                    // even if the command has not arrived yet.
                    *slot = Slot::Waiting {
                        generation: None,
                        pending: VecDeque::from([packet]),
                    };
                    self.waiting += 1;
                    self.pending += 1;
                    self.stats.parked += 1;
                }
            }
        }
        self.stats.peak_pending = self.stats.peak_pending.max(self.pending);
        self.release_ready(out);
    }

    fn saw_arrival(&mut self, generation: u64) {
        self.newest_arrival_seen = self.newest_arrival_seen.max(generation);
    }

    /// Hands over every releasing table whose release condition holds.
    fn release_ready(&mut self, out: &mut Outbox<H::State>) {
        let mut i = 0;
        while i < self.releasing.len() {
            let bucket = self.releasing[i];
            let ready = match self.slots[bucket] {
                Slot::Releasing {
                    after_received,
                    generation,
                    ..
                } => {
                    self.stats.received >= after_received || self.newest_arrival_seen >= generation
                }
                _ => unreachable!("bucket {bucket} listed as releasing"),
            };
            if !ready {
                i += 1;
                continue;
            }
            self.releasing.swap_remove(i);
            if let Slot::Releasing {
                table,
                to,
                generation,
                ..
            } = std::mem::replace(&mut self.slots[bucket], Slot::Absent)
            {
                self.stats.released += 1;
                out.handoffs.push(Handoff {
                    bucket,
                    from: self.core,
                    to,
                    generation,
                    table,
                });
            }
        }
    }

    fn check_command(&self, command: &CoreCommand) -> Result<(), MigrationError> {
        if command.core != self.core {
            return Err(MigrationError::WrongCore {
                addressed: command.core,
                core: self.core,
            });
        }
        let size = self.slots.len();
        let mut named: Vec<usize> = command
            .releases
            .iter()
            .map(|r| r.bucket)
            .chain(command.arrivals.iter().map(|a| a.bucket))
            .collect();
        if let Some(&bucket) = named.iter().find(|&&b| b >= size) {
            return Err(MigrationError::UnknownBucket { bucket, size });
        }
        named.sort_unstable();
        if let Some(w) = named.windows(2).find(|w| w[0] == w[1]) {
            return Err(MigrationError::Duplicate(w[0]));
        }
        let core = self.core;
        for r in &command.releases {
            if !matches!(self.slots[r.bucket], Slot::Owned { .. }) {
                return Err(MigrationError::NotOwner {
                    core,
                    bucket: r.bucket,
                });
            }
        }
        for a in &command.arrivals {
            let bucket = a.bucket;
            match &self.slots[bucket] {
                Slot::Absent
                | Slot::Waiting {
                    generation: None, ..
                } => {}
                // The table came before the command.
                Slot::Owned { since, .. } if *since == command.generation => {}
                Slot::Waiting { .. } => {
                    return Err(MigrationError::AlreadyAnnounced { core, bucket })
                }
                Slot::Owned { .. } | Slot::Releasing { .. } => {
                    return Err(MigrationError::AlreadyOwner { core, bucket })
                }
            }
        }
        Ok(())
    }
}

impl<H: FlowHandler> Worker for BucketWorker<H> {
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
        self.run_batch(&mut batch, now, out);
        self.batch = batch;
    }

    fn receive_batch(&mut self, batch: &mut Vec<H::Packet>, now: u64, out: &mut Outbox<H::State>) {
        self.run_batch(batch, now, out);
    }

    fn command(
        &mut self,
        command: CoreCommand,
        _now: u64,
        out: &mut Outbox<H::State>,
    ) -> Result<(), MigrationError> {
        self.check_command(&command)?;
        let generation = command.generation;
        // Arrivals first: a packet already parked for one of them satisfies
        // the second release condition of this rewrite.
        for a in &command.arrivals {
            match &mut self.slots[a.bucket] {
                slot @ Slot::Absent => {
                    *slot = Slot::Waiting {
                        generation: Some(generation),
                        pending: VecDeque::new(),
                    };
                    self.waiting += 1;
                }
                Slot::Waiting {
                    generation: g,
                    pending,
                } => {
                    *g = Some(generation);
                    if !pending.is_empty() {
                        self.saw_arrival(generation);
                    }
                }
                _ => {} // already arrived
            }
        }
        for &Release {
            bucket,
            to,
            after_received,
        } in &command.releases
        {
            let slot = std::mem::replace(&mut self.slots[bucket], Slot::Absent);
            let Slot::Owned { table, .. } = slot else {
                unreachable!("checked above")
            };
            self.slots[bucket] = Slot::Releasing {
                table,
                to,
                after_received,
                generation,
            };
            self.releasing.push(bucket);
        }
        self.release_ready(out);
        Ok(())
    }

    fn accept(
        &mut self,
        handoff: Handoff<H::State>,
        now: u64,
        out: &mut Outbox<H::State>,
    ) -> Result<(), HandoffRejected<H::State>> {
        let reject = |error, handoff| {
            Err(HandoffRejected {
                error,
                handoff: Box::new(handoff),
            })
        };
        if handoff.to != self.core {
            let error = MigrationError::WrongCore {
                addressed: handoff.to,
                core: self.core,
            };
            return reject(error, handoff);
        }
        let size = self.slots.len();
        let bucket = handoff.bucket;
        if bucket >= size {
            return reject(MigrationError::UnknownBucket { bucket, size }, handoff);
        }
        let core = self.core;
        match &self.slots[bucket] {
            Slot::Owned { .. } | Slot::Releasing { .. } => {
                return reject(MigrationError::AlreadyOwner { core, bucket }, handoff)
            }
            Slot::Absent | Slot::Waiting { .. } => {}
        }
        let Handoff {
            generation,
            mut table,
            ..
        } = handoff;
        if let Slot::Waiting { pending, .. } =
            std::mem::replace(&mut self.slots[bucket], Slot::Absent)
        {
            self.waiting -= 1;
            if !pending.is_empty() {
                self.saw_arrival(generation);
            }
            self.pending -= pending.len() as u64;
            for packet in pending {
                process(&mut table, &mut self.handler, &packet, now);
                self.stats.processed += 1;
            }
        }
        self.slots[bucket] = Slot::Owned {
            table,
            since: generation,
        };
        self.stats.accepted += 1;
        out.completed.push(Completed { bucket, generation });
        self.release_ready(out);
        Ok(())
    }

    fn expire(&mut self, now: u64) -> usize {
        self.slots
            .iter_mut()
            .map(|s| match s {
                Slot::Owned { table, .. } | Slot::Releasing { table, .. } => table.expire(now),
                _ => 0,
            })
            .sum()
    }

    fn is_settled(&self) -> bool {
        self.releasing.is_empty() && self.waiting == 0
    }

    fn stats(&self) -> WorkerStats {
        self.stats
    }

    fn handler(&self) -> &H {
        &self.handler
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reta::{BucketMove, MigrationPlan};
    use crate::state::check::{SequenceCheck, SequencedPacket};
    use crate::state::migration::{Arrival, MigrationCoordinator};
    use crate::state::table::WhenFull;
    use crate::Toeplitz;
    use std::net::{IpAddr, Ipv4Addr};

    type W = BucketWorker<SequenceCheck>;

    const SIZE: usize = 64;

    /// `n` flows whose hash falls in `bucket`.
    fn flows_in(bucket: usize, n: usize) -> Vec<(FlowKey, u32)> {
        let t = Toeplitz::default();
        (0u32..)
            .map(|i| {
                let key = FlowKey::new(
                    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
                    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                    4000,
                    80,
                    6,
                )
                .unwrap();
                (key, t.hash_flow(&key))
            })
            .filter(|(_, h)| bucket_of(*h, SIZE) == bucket)
            .take(n)
            .collect()
    }

    fn pkt(flow: &(FlowKey, u32), id: u32, seq: u32) -> SequencedPacket {
        SequencedPacket {
            key: flow.0,
            hash: flow.1,
            flow: id,
            seq,
        }
    }

    /// Two cores over an equal table: even buckets on 0, odd on 1.
    fn setup() -> (MigrationCoordinator, W, W) {
        let reta = IndirectionTable::equal(SIZE, 2).unwrap();
        let config = TableConfig::default();
        (
            MigrationCoordinator::new(reta.clone(), 2).unwrap(),
            BucketWorker::new(0, &reta, config, SequenceCheck::default()),
            BucketWorker::new(1, &reta, config, SequenceCheck::default()),
        )
    }

    fn plan(moves: &[(usize, CoreId, CoreId)]) -> MigrationPlan {
        MigrationPlan {
            moves: moves
                .iter()
                .map(|&(bucket, from, to)| BucketMove { bucket, from, to })
                .collect(),
        }
    }

    fn deliver(commands: Vec<CoreCommand>, a: &mut W, b: &mut W, out: &mut Outbox<SequenceState>) {
        for c in commands {
            let w = if c.core == 0 { &mut *a } else { &mut *b };
            w.command(c, 0, out).unwrap();
        }
    }

    use crate::state::check::SequenceState;

    #[test]
    fn early_packets_wait_for_the_table_and_keep_their_order() {
        let (mut coord, mut a, mut b) = setup();
        let f = flows_in(4, 1)[0];
        let mut out = Outbox::default();
        // Packets 0..3 queued to core 0, then bucket 4 moves to core 1.
        let cmds = coord.apply(&plan(&[(4, 0, 1)]), &[3, 0]).unwrap();
        // Packets 3..5 reach core 1 first.
        b.receive([pkt(&f, 0, 3), pkt(&f, 0, 4)], 1, &mut out);
        assert_eq!(b.pending(), 2);
        deliver(cmds, &mut a, &mut b, &mut out);
        a.receive([pkt(&f, 0, 0), pkt(&f, 0, 1)], 2, &mut out);
        assert!(out.handoffs.is_empty(), "released before its queue drained");
        a.receive([pkt(&f, 0, 2)], 3, &mut out);
        let h = out.handoffs.pop().expect("released at the mark");
        assert_eq!((h.bucket, h.from, h.to, h.generation), (4, 0, 1, 1));
        assert!(a.owned_buckets().all(|x| x != 4));
        b.receive([pkt(&f, 0, 5)], 4, &mut out);
        b.accept(h, 5, &mut out).unwrap();
        b.receive([pkt(&f, 0, 6)], 6, &mut out);
        assert_eq!(
            out.completed,
            vec![Completed {
                bucket: 4,
                generation: 1
            }]
        );
        coord.complete(out.completed.pop().unwrap()).unwrap();
        let checks = [a.handler(), b.handler()];
        assert!(checks.iter().all(|c| c.reordered == 0 && c.gaps == 0));
        let (_, tables) = b.into_parts();
        let state = tables
            .iter()
            .find(|(x, _)| *x == 4)
            .unwrap()
            .1
            .get(&f.0, f.1);
        assert_eq!(state.unwrap().packets, 7);
        assert!(a.is_settled());
        assert_eq!(a.stats().released, 1);
    }

    #[test]
    fn a_packet_of_a_new_bucket_releases_before_the_mark() {
        let (mut coord, mut a, mut b) = setup();
        let x = flows_in(4, 1)[0]; // core 0 → 1
        let y = flows_in(5, 1)[0]; // core 1 → 0
        let mut out = Outbox::default();
        // The mark says 1 000 packets were queued to core 0: far away.
        let cmds = coord
            .apply(&plan(&[(4, 0, 1), (5, 1, 0)]), &[1_000, 0])
            .unwrap();
        deliver(cmds, &mut a, &mut b, &mut out);
        // Core 1 releases bucket 5 at once (nothing was queued to it).
        let h5 = out.handoffs.pop().unwrap();
        assert_eq!(h5.bucket, 5);
        a.receive([pkt(&x, 0, 0)], 1, &mut out);
        assert!(out.handoffs.is_empty());
        // Core 0 takes a packet of bucket 5, assigned to it by the same
        // rewrite: everything queued before the rewrite is behind it.
        a.receive([pkt(&y, 1, 0)], 2, &mut out);
        let h4 = out.handoffs.pop().expect("second release condition");
        assert_eq!(h4.bucket, 4);
        assert_eq!(a.stats().received, 2);
        b.accept(h4, 3, &mut out).unwrap();
        a.accept(h5, 3, &mut out).unwrap();
        assert_eq!(out.completed.len(), 2);
        assert!(a.is_settled() && b.is_settled());
    }

    #[test]
    fn a_packet_of_a_bucket_already_taken_over_releases_too() {
        let (mut coord, mut a, mut b) = setup();
        let y = flows_in(5, 1)[0]; // core 1 → 0
        let mut out = Outbox::default();
        let cmds = coord
            .apply(&plan(&[(4, 0, 1), (5, 1, 0)]), &[1_000, 0])
            .unwrap();
        deliver(cmds, &mut a, &mut b, &mut out);
        // Core 0 takes bucket 5 over before any of its packets arrives.
        let h5 = out.handoffs.pop().unwrap();
        a.accept(h5, 1, &mut out).unwrap();
        assert!(out.handoffs.is_empty());
        a.receive([pkt(&y, 0, 0)], 2, &mut out);
        let h4 = out.handoffs.pop().expect("second release condition");
        assert_eq!(h4.bucket, 4);
    }

    #[test]
    fn parked_packet_before_the_command_counts_for_the_second_condition() {
        let (mut coord, mut a, mut b) = setup();
        let y = flows_in(5, 1)[0];
        let mut out = Outbox::default();
        let cmds = coord
            .apply(&plan(&[(4, 0, 1), (5, 1, 0)]), &[1_000, 0])
            .unwrap();
        // A packet of bucket 5 reaches core 0 before any command: parked.
        a.receive([pkt(&y, 0, 0)], 1, &mut out);
        assert_eq!(a.pending(), 1);
        deliver(cmds, &mut a, &mut b, &mut out);
        let buckets: Vec<usize> = out.handoffs.iter().map(|h| h.bucket).collect();
        assert!(buckets.contains(&4), "{buckets:?}");
    }

    #[test]
    fn handoff_may_overtake_the_arrival_command() {
        let (mut coord, mut a, mut b) = setup();
        let f = flows_in(4, 1)[0];
        let mut out = Outbox::default();
        let mut cmds = coord.apply(&plan(&[(4, 0, 1)]), &[0, 0]).unwrap();
        let for_b = cmds.pop().unwrap();
        a.command(cmds.pop().unwrap(), 0, &mut out).unwrap();
        let h = out.handoffs.pop().unwrap();
        b.receive([pkt(&f, 0, 0)], 1, &mut out);
        b.accept(h, 2, &mut out).unwrap();
        assert_eq!(b.pending(), 0);
        b.command(for_b, 3, &mut out).unwrap();
        assert_eq!(out.completed.len(), 1);
        assert!(b.is_settled());
        assert_eq!(b.handler().new_flows, 1);
    }

    #[test]
    fn invalid_commands_are_refused_whole() {
        let (_, mut a, _) = setup();
        let mut out = Outbox::default();
        let release = |bucket| Release {
            bucket,
            to: 1,
            after_received: 0,
        };
        let cmd = |releases: Vec<Release>, arrivals: Vec<Arrival>| CoreCommand {
            core: 0,
            generation: 1,
            releases,
            arrivals,
        };
        let bad = [
            (
                CoreCommand {
                    core: 1,
                    ..cmd(vec![release(0)], vec![])
                },
                "delivered to core 0",
            ),
            (cmd(vec![release(0), release(64)], vec![]), "does not exist"),
            (cmd(vec![release(0), release(1)], vec![]), "does not own"),
            (cmd(vec![release(0), release(0)], vec![]), "twice"),
            (
                cmd(vec![release(0)], vec![Arrival { bucket: 2, from: 1 }]),
                "already owns",
            ),
        ];
        for (c, message) in bad {
            let err = a.command(c, 0, &mut out).unwrap_err();
            assert!(err.to_string().contains(message), "{err}");
        }
        assert!(out.is_empty());
        assert!(a.is_settled());
        assert_eq!(a.owned_buckets().count(), 32);
    }

    #[test]
    fn refused_handoff_gives_the_table_back() {
        let (_, mut a, _) = setup();
        let f = flows_in(2, 1)[0];
        let mut table = FlowTable::new(TableConfig::default());
        table.insert(f.0, f.1, 0, SequenceState::default());
        let mut out = Outbox::default();
        for (to, bucket) in [(1, 3), (0, 2), (0, 99)] {
            let h = Handoff {
                bucket,
                from: 1,
                to,
                generation: 1,
                table: table.clone(),
            };
            let rejected = a.accept(h, 0, &mut out).unwrap_err();
            assert_eq!(rejected.handoff.table.len(), 1, "{rejected}");
        }
        assert!(out.is_empty());
    }

    #[test]
    fn full_tables_follow_their_policy_and_flows_expire() {
        let reta = IndirectionTable::equal(SIZE, 1).unwrap();
        let config = TableConfig {
            capacity: 2,
            idle_timeout_ns: Some(1_000),
            when_full: WhenFull::Refuse,
        };
        let mut w = BucketWorker::new(0, &reta, config, SequenceCheck::default());
        let flows = flows_in(7, 3);
        let mut out = Outbox::default();
        let batch: Vec<_> = flows.iter().map(|f| pkt(f, 0, 0)).collect();
        w.receive(batch, 0, &mut out);
        assert_eq!(w.handler().stateless, 1);
        assert_eq!(w.table_stats().refused, 1);
        assert_eq!(w.expire(999), 0);
        assert_eq!(w.expire(1_000), 2);
        assert_eq!(w.tables().map(|(_, t)| t.len()).sum::<usize>(), 0);
    }
}
