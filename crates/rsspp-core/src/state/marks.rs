//! Order-preserving bucket moves by counted marks, for data paths whose
//! steering point numbers each bucket's packets.
//!
//! The [`migration`](crate::state::migration) protocol knows only how many
//! packets were queued to each core; a software steering point can do
//! better. When it takes, for every packet, the bucket's owner and the
//! bucket's packet number in one atomic step (one fetch-and-add on a word
//! that holds both, as `rsspp-runtime`'s fanout program does), the switch
//! of a bucket to a new owner (one compare-and-swap on the same word)
//! returns the exact number of the bucket's packets steered before it: the
//! *mark*. Packets numbered below the mark went to the old owner, the
//! others go to the new one. The old owner counts the bucket's packets it
//! takes from its queue; when its count reaches the mark it has processed
//! every packet of the bucket sent to it, and hands the bucket's state
//! over. The new owner keeps the bucket's packets aside until the state
//! arrives, then processes them first, in order. No lock on the fast path,
//! no packet of a flow overtakes an earlier one, and no state is lost or
//! duplicated.
//!
//! A [`Shard`] is one core's side of this: a slot per bucket, generic over
//! the state a bucket carries (its flow table, or nothing when the flow
//! table is shared) and over the parked packets. It does no I/O; its
//! driver feeds it the steering point's marks and moves the [`Moving`]
//! values between cores.
//!
//! A move happens in three steps, each driven from outside:
//!
//! 1. [`Shard::expect`] on the new owner, before the steering point
//!    switches: from then on its packets of the bucket are parked.
//! 2. The switch, which gives the mark, then [`Shard::release`] on the old
//!    owner with that mark. Its table leaves ([`Shard::take_released`])
//!    once it has taken `mark` packets of the bucket, at once if it already
//!    has, or when its driver gives up waiting ([`Shard::force`]: a
//!    packet the queue dropped never arrives).
//! 3. [`Shard::accept`] on the new owner, which returns the parked packets
//!    to process before any other.
//!
//! A packet of a bucket a shard neither holds nor expects is a *stray*
//! ([`Take::Stray`]): one the old owner finds after handing the bucket over
//! early (forced, or on purpose by an immediate move), processed by its
//! driver without flow state.

use std::collections::VecDeque;

use crate::reta::CoreId;

/// What a shard holds for one bucket.
#[derive(Debug)]
enum Slot<S, P> {
    /// Another core's bucket.
    Absent,
    /// This core's bucket; `seen` is the number of the bucket's next packet.
    Owned { state: S, seen: u64 },
    /// Leaving for `to` once `seen` reaches `mark`.
    Releasing {
        state: S,
        seen: u64,
        to: CoreId,
        mark: u64,
    },
    /// Coming here: the bucket's packets wait for its state.
    Waiting { pending: VecDeque<P> },
}

/// A bucket's state on its way from one core to another.
#[derive(Debug)]
pub struct Moving<S> {
    /// The bucket.
    pub bucket: usize,
    /// The core it leaves.
    pub from: CoreId,
    /// The core it goes to.
    pub to: CoreId,
    /// Number of the first packet of the bucket the new owner processes.
    pub mark: u64,
    /// Packets of the bucket numbered below the mark that the old owner had
    /// not taken when it let the bucket go (0 for a drained handoff).
    pub left_behind: u64,
    /// The bucket's state.
    pub state: S,
}

/// What to do with a packet taken from the queue.
#[derive(Debug)]
pub enum Take<'a, S> {
    /// Process it with its bucket's state.
    Process(&'a mut S),
    /// Its bucket's state is on its way here: [`Shard::park`] the packet.
    Park,
    /// Its bucket is not this core's (any more): process it without state.
    Stray,
}

/// A command the shard refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// No such bucket.
    #[error("bucket {bucket} does not exist (table of {size})")]
    UnknownBucket {
        /// The bucket.
        bucket: usize,
        /// The table size.
        size: usize,
    },
    /// The move names a bucket in the wrong state on this core.
    #[error("core {core}: bucket {bucket} is {actual}, not {expected}")]
    WrongState {
        /// This core.
        core: CoreId,
        /// The bucket.
        bucket: usize,
        /// The state the command needs.
        expected: &'static str,
        /// The state it is in.
        actual: &'static str,
    },
    /// A handoff delivered to another core.
    #[error("a handoff for core {to} was delivered to core {core}")]
    WrongCore {
        /// Its addressee.
        to: CoreId,
        /// This core.
        core: CoreId,
    },
}

/// Counters of one shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Packets parked while their bucket's state was on its way.
    pub parked: u64,
    /// Most packets parked at once.
    pub peak_parked: u64,
    /// Packets of buckets this core did not hold.
    pub strays: u64,
    /// Buckets handed over once drained.
    pub drained: u64,
    /// Buckets handed over before their mark (forced or immediate).
    pub early: u64,
    /// Buckets handed over after this core had taken more of their packets
    /// than the mark said it would: the steering point's numbering and the
    /// core's count disagree (a bug of the data path; 0 when they agree).
    pub overshot: u64,
    /// Buckets taken over.
    pub accepted: u64,
}

/// One core's buckets; see the module docs.
#[derive(Debug)]
pub struct Shard<S, P> {
    core: CoreId,
    slots: Vec<Slot<S, P>>,
    releasing: Vec<usize>,
    parked: u64,
    released: Vec<Moving<S>>,
    stats: ShardStats,
}

impl<S, P> Slot<S, P> {
    fn name(&self) -> &'static str {
        match self {
            Slot::Absent => "absent",
            Slot::Owned { .. } => "owned",
            Slot::Releasing { .. } => "releasing",
            Slot::Waiting { .. } => "waiting",
        }
    }
}

impl<S, P> Shard<S, P> {
    /// The shard of `core` in a table of `size` buckets, owning those for
    /// which `owned` gives a state, with the number of the bucket's next
    /// packet (the mark of the switch that gave it to this core; 0 for a
    /// steering point that has counted nothing yet).
    pub fn new(
        core: CoreId,
        size: usize,
        mut owned: impl FnMut(usize) -> Option<(S, u64)>,
    ) -> Self {
        Self {
            core,
            slots: (0..size)
                .map(|b| match owned(b) {
                    Some((state, seen)) => Slot::Owned { state, seen },
                    None => Slot::Absent,
                })
                .collect(),
            releasing: Vec::new(),
            parked: 0,
            released: Vec::new(),
            stats: ShardStats::default(),
        }
    }

    /// The core.
    pub fn core(&self) -> CoreId {
        self.core
    }

    /// The counters.
    pub fn stats(&self) -> ShardStats {
        self.stats
    }

    /// Packets parked now.
    pub fn parked(&self) -> u64 {
        self.parked
    }

    /// True when no bucket is leaving or arriving.
    pub fn is_settled(&self) -> bool {
        self.releasing.is_empty()
            && self.released.is_empty()
            && !self.slots.iter().any(|s| matches!(s, Slot::Waiting { .. }))
    }

    /// True when the shard holds no bucket and none is arriving or leaving:
    /// nothing is steered to its core, which may sleep until told
    /// otherwise (a core parked by CPU scaling).
    pub fn holds_nothing(&self) -> bool {
        self.is_settled() && self.states().next().is_none()
    }

    fn check(&self, bucket: usize) -> Result<(), MarkError> {
        if bucket >= self.slots.len() {
            return Err(MarkError::UnknownBucket {
                bucket,
                size: self.slots.len(),
            });
        }
        Ok(())
    }

    fn wrong(&self, bucket: usize, expected: &'static str) -> MarkError {
        MarkError::WrongState {
            core: self.core,
            bucket,
            expected,
            actual: self.slots[bucket].name(),
        }
    }

    /// Step 1 on the new owner: the bucket is coming; park its packets.
    pub fn expect(&mut self, bucket: usize) -> Result<(), MarkError> {
        self.check(bucket)?;
        match self.slots[bucket] {
            Slot::Absent => {
                self.slots[bucket] = Slot::Waiting {
                    pending: VecDeque::new(),
                };
                Ok(())
            }
            _ => Err(self.wrong(bucket, "absent")),
        }
    }

    /// Step 2 on the old owner: the steering point switched `bucket` to
    /// `to` after its packet `mark - 1`. With `immediate`, the state leaves
    /// now whatever is still queued (whose packets become strays).
    pub fn release(
        &mut self,
        bucket: usize,
        to: CoreId,
        mark: u64,
        immediate: bool,
    ) -> Result<(), MarkError> {
        self.check(bucket)?;
        let Slot::Owned { .. } = self.slots[bucket] else {
            return Err(self.wrong(bucket, "owned"));
        };
        let Slot::Owned { state, seen } = std::mem::replace(&mut self.slots[bucket], Slot::Absent)
        else {
            unreachable!("checked above")
        };
        self.slots[bucket] = Slot::Releasing {
            state,
            seen,
            to,
            mark,
        };
        if immediate {
            self.let_go(bucket);
        } else {
            self.releasing.push(bucket);
            self.release_ready();
        }
        Ok(())
    }

    /// Gives up waiting for `bucket` to drain (its remaining packets were
    /// dropped, or are late): its state leaves now. False if it was not
    /// releasing.
    pub fn force(&mut self, bucket: usize) -> bool {
        let Some(i) = self.releasing.iter().position(|&b| b == bucket) else {
            return false;
        };
        self.releasing.swap_remove(i);
        self.let_go(bucket);
        true
    }

    fn let_go(&mut self, bucket: usize) {
        let Slot::Releasing {
            state,
            seen,
            to,
            mark,
        } = std::mem::replace(&mut self.slots[bucket], Slot::Absent)
        else {
            unreachable!("bucket {bucket} let go while not releasing")
        };
        let left_behind = mark.saturating_sub(seen);
        if seen > mark {
            self.stats.overshot += 1;
        }
        if left_behind == 0 {
            self.stats.drained += 1;
        } else {
            self.stats.early += 1;
        }
        self.released.push(Moving {
            bucket,
            from: self.core,
            to,
            mark,
            left_behind,
            state,
        });
    }

    fn release_ready(&mut self) {
        let mut i = 0;
        while i < self.releasing.len() {
            let bucket = self.releasing[i];
            let done = match &self.slots[bucket] {
                Slot::Releasing { seen, mark, .. } => seen >= mark,
                other => unreachable!("bucket {bucket} listed as releasing but {}", other.name()),
            };
            if done {
                self.releasing.swap_remove(i);
                self.let_go(bucket);
            } else {
                i += 1;
            }
        }
    }

    /// The states that left since the last call, for the driver to deliver
    /// to their new owners.
    pub fn take_released(&mut self) -> std::vec::Drain<'_, Moving<S>> {
        self.released.drain(..)
    }

    /// Step 3 on the new owner: takes the bucket's state over, and returns
    /// the packets parked for it, to process (in order) before any other.
    pub fn accept(&mut self, moving: Moving<S>) -> Result<VecDeque<P>, (MarkError, Moving<S>)> {
        if moving.to != self.core {
            let e = MarkError::WrongCore {
                to: moving.to,
                core: self.core,
            };
            return Err((e, moving));
        }
        if let Err(e) = self.check(moving.bucket) {
            return Err((e, moving));
        }
        let bucket = moving.bucket;
        if !matches!(self.slots[bucket], Slot::Waiting { .. }) {
            return Err((self.wrong(bucket, "waiting"), moving));
        }
        let Slot::Waiting { pending } = std::mem::replace(
            &mut self.slots[bucket],
            Slot::Owned {
                state: moving.state,
                seen: moving.mark,
            },
        ) else {
            unreachable!("checked above")
        };
        self.parked -= pending.len() as u64;
        self.stats.accepted += 1;
        Ok(pending)
    }

    /// A packet of `bucket` taken from the queue: what to do with it. A
    /// packet to process counts towards its bucket's mark.
    ///
    /// # Panics
    /// If `bucket` is out of the table.
    #[inline]
    pub fn take(&mut self, bucket: usize) -> Take<'_, S> {
        match &mut self.slots[bucket] {
            Slot::Owned { state, seen } => {
                *seen += 1;
                Take::Process(state)
            }
            // A releasing bucket that reaches its mark here is let go once
            // the caller is done with its state, in `settle`.
            Slot::Releasing { state, seen, .. } => {
                *seen += 1;
                Take::Process(state)
            }
            Slot::Waiting { .. } => Take::Park,
            Slot::Absent => {
                self.stats.strays += 1;
                Take::Stray
            }
        }
    }

    /// The number of `bucket`'s next packet while this core holds it (owned
    /// or leaving): how many of its packets the core has taken, counted
    /// from the first steering point's count it was given. `None` when it
    /// does not hold it. A data path that moves part of a bucket's state
    /// elsewhere at a mark of the bucket's own (a flow given a steering of
    /// its own) waits until this reaches it.
    pub fn seen(&self, bucket: usize) -> Option<u64> {
        match self.slots.get(bucket)? {
            Slot::Owned { seen, .. } | Slot::Releasing { seen, .. } => Some(*seen),
            Slot::Absent | Slot::Waiting { .. } => None,
        }
    }

    /// The state of `bucket` while this core holds it (owned or leaving),
    /// without counting a packet: for a data path that takes part of it
    /// out (see [`seen`](Self::seen)) or puts some back.
    pub fn state_mut(&mut self, bucket: usize) -> Option<&mut S> {
        match self.slots.get_mut(bucket)? {
            Slot::Owned { state, .. } | Slot::Releasing { state, .. } => Some(state),
            Slot::Absent | Slot::Waiting { .. } => None,
        }
    }

    /// Parks a packet of `bucket` after [`Take::Park`].
    ///
    /// # Panics
    /// If the bucket is not waiting.
    pub fn park(&mut self, bucket: usize, packet: P) {
        let Slot::Waiting { pending } = &mut self.slots[bucket] else {
            panic!("parking a packet of bucket {bucket}, which is not waiting");
        };
        pending.push_back(packet);
        self.parked += 1;
        self.stats.parked += 1;
        self.stats.peak_parked = self.stats.peak_parked.max(self.parked);
    }

    /// Lets go of the releasing buckets that reached their mark: call it
    /// after a batch (then [`take_released`](Self::take_released)).
    pub fn settle(&mut self) {
        if !self.releasing.is_empty() {
            self.release_ready();
        }
    }

    /// Buckets waiting to leave.
    pub fn releasing(&self) -> &[usize] {
        &self.releasing
    }

    /// The states this shard holds (owned or leaving), with their bucket.
    pub fn states(&self) -> impl Iterator<Item = (usize, &S)> + '_ {
        self.slots.iter().enumerate().filter_map(|(b, s)| match s {
            Slot::Owned { state, .. } | Slot::Releasing { state, .. } => Some((b, state)),
            _ => None,
        })
    }

    /// Consumes the shard: its states with their bucket, and the packets
    /// still parked (their state never arrived).
    pub fn into_parts(self) -> (Vec<(usize, S)>, Vec<P>) {
        let mut states = Vec::new();
        let mut parked = Vec::new();
        for (b, slot) in self.slots.into_iter().enumerate() {
            match slot {
                Slot::Owned { state, .. } | Slot::Releasing { state, .. } => {
                    states.push((b, state))
                }
                Slot::Waiting { pending } => parked.extend(pending),
                Slot::Absent => {}
            }
        }
        for m in self.released {
            states.push((m.bucket, m.state));
        }
        (states, parked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rand::SplitMix64;

    /// Bucket state: the packets of each flow processed, in order.
    type Log = Vec<(u32, u32)>;

    #[test]
    fn a_core_past_its_mark_at_the_release_is_counted_as_overshot() {
        let mut a: Shard<Log, (u32, u32)> = Shard::new(0, 2, |b| (b == 0).then(|| (Vec::new(), 0)));
        for _ in 0..5 {
            assert!(matches!(a.take(0), Take::Process(_)));
        }
        // The steering says 3 went here; 5 were taken.
        a.release(0, 1, 3, false).unwrap();
        let m = a.take_released().next().unwrap();
        assert_eq!((m.mark, m.left_behind), (3, 0));
        assert_eq!((a.stats().overshot, a.stats().drained), (1, 1));
        // At the mark exactly: not overshot.
        let mut b: Shard<Log, (u32, u32)> = Shard::new(0, 2, |b| (b == 0).then(|| (Vec::new(), 0)));
        for _ in 0..3 {
            assert!(matches!(b.take(0), Take::Process(_)));
        }
        b.release(0, 1, 3, false).unwrap();
        assert_eq!(b.take_released().count(), 1);
        assert_eq!(b.stats().overshot, 0);
    }

    #[test]
    fn the_old_owner_lets_go_at_the_mark_and_the_new_one_parks_until_then() {
        let mut a: Shard<Log, (u32, u32)> = Shard::new(0, 4, |b| (b == 1).then(|| (Vec::new(), 0)));
        let mut b: Shard<Log, (u32, u32)> = Shard::new(1, 4, |_| None);
        b.expect(1).unwrap();
        // Packets 0..3 of bucket 1 went to core 0; the switch came after 3.
        a.release(1, 1, 3, false).unwrap();
        assert_eq!(a.take_released().count(), 0);
        // Packet 3 reaches core 1 first: parked.
        assert!(matches!(b.take(1), Take::Park));
        b.park(1, (7, 3));
        for seq in 0..3 {
            match a.take(1) {
                Take::Process(log) => log.push((7, seq)),
                other => panic!("{other:?}"),
            }
        }
        a.settle();
        let moving: Vec<_> = a.take_released().collect();
        assert_eq!(moving.len(), 1);
        let m = moving.into_iter().next().unwrap();
        assert_eq!((m.mark, m.left_behind), (3, 0));
        let parked = b.accept(m).unwrap();
        assert_eq!(parked, VecDeque::from([(7, 3)]));
        assert_eq!(b.stats().accepted, 1);
        assert!(a.is_settled() && b.is_settled());
        assert!(matches!(a.take(1), Take::Stray));
    }

    #[test]
    fn seen_counts_a_held_buckets_packets_from_its_mark() {
        let mut a: Shard<u32, ()> = Shard::new(0, 3, |b| (b == 1).then_some((0, 5)));
        assert_eq!(a.seen(1), Some(5));
        for _ in 0..3 {
            assert!(matches!(a.take(1), Take::Process(_)));
        }
        assert_eq!(a.seen(1), Some(8));
        a.release(1, 1, 10, false).unwrap();
        assert_eq!(a.seen(1), Some(8), "leaving, still held");
        assert_eq!((a.seen(0), a.seen(7)), (None, None));
        a.expect(2).unwrap();
        assert_eq!(a.seen(2), None, "arriving, not held yet");
        *a.state_mut(1).unwrap() = 4;
        assert_eq!(a.seen(1), Some(8), "a state reached without a packet");
        assert!(a.state_mut(2).is_none());
    }

    #[test]
    fn a_shard_holds_nothing_once_its_last_bucket_left_and_until_one_is_expected() {
        let mut a: Shard<u32, ()> = Shard::new(0, 2, |b| (b == 0).then_some((0, 0)));
        assert!(!a.holds_nothing());
        a.release(0, 1, 2, false).unwrap();
        assert!(!a.holds_nothing(), "leaving, two packets still due");
        for _ in 0..2 {
            assert!(matches!(a.take(0), Take::Process(_)));
        }
        a.settle();
        assert!(!a.holds_nothing(), "released but not yet handed over");
        assert_eq!(a.take_released().count(), 1);
        assert!(a.holds_nothing());
        a.expect(1).unwrap();
        assert!(!a.holds_nothing(), "a bucket is arriving");
    }

    #[test]
    fn a_mark_already_reached_releases_at_once_and_immediate_leaves_packets_behind() {
        let mut a: Shard<u32, ()> = Shard::new(0, 2, |_| Some((0, 0)));
        a.release(0, 1, 0, false).unwrap();
        assert_eq!(a.take_released().next().unwrap().left_behind, 0);
        a.release(1, 1, 5, true).unwrap();
        let m = a.take_released().next().unwrap();
        assert_eq!(m.left_behind, 5);
        assert_eq!(a.stats().early, 1);
    }

    #[test]
    fn commands_in_the_wrong_state_are_refused() {
        let mut a: Shard<u32, ()> = Shard::new(0, 2, |b| (b == 0).then_some((0, 0)));
        assert!(a.expect(0).is_err());
        assert!(a.release(1, 1, 0, false).is_err());
        assert!(a.expect(9).is_err());
        let m = Moving {
            bucket: 1,
            from: 1,
            to: 0,
            mark: 0,
            left_behind: 0,
            state: 0,
        };
        let (e, m) = a.accept(m).unwrap_err();
        assert!(e.to_string().contains("not waiting"), "{e}");
        a.expect(1).unwrap();
        assert!(a.accept(m).is_ok());
        assert!(!a.force(0));
    }

    /// A steering point numbering each bucket's packets, FIFO queues per
    /// core, cores taking packets in random interleavings, random moves:
    /// every flow's packets are processed in order, exactly once, and the
    /// states end up whole.
    #[test]
    fn random_moves_keep_every_flow_in_order() {
        const BUCKETS: usize = 8;
        const CORES: usize = 3;
        for seed in 0..50 {
            let mut rng = SplitMix64::new(seed);
            let mut owner: Vec<usize> = (0..BUCKETS).map(|b| b % CORES).collect();
            let mut counts = [0u64; BUCKETS];
            let mut shards: Vec<Shard<Log, (u32, u32)>> = (0..CORES)
                .map(|c| {
                    let owner = owner.clone();
                    Shard::new(c, BUCKETS, move |b| {
                        (owner[b] == c).then(|| (Vec::new(), 0))
                    })
                })
                .collect();
            let mut queues: Vec<VecDeque<(usize, u32, u32)>> = vec![VecDeque::new(); CORES];
            let mut inflight: Vec<Moving<Log>> = Vec::new();
            let mut moving = [false; BUCKETS];
            let mut next_seq = [0u32; 16];
            let process = |log: &mut Log, flow: u32, seq: u32| log.push((flow, seq));
            for _ in 0..2_000 {
                match rng.below(10) {
                    0..=4 => {
                        // A packet of a random flow (flow f is in bucket f % BUCKETS).
                        let flow = rng.below(16) as u32;
                        let bucket = flow as usize % BUCKETS;
                        counts[bucket] += 1;
                        queues[owner[bucket]].push_back((bucket, flow, next_seq[flow as usize]));
                        next_seq[flow as usize] += 1;
                    }
                    5..=7 => {
                        let c = rng.below(CORES);
                        if let Some((bucket, flow, seq)) = queues[c].pop_front() {
                            match shards[c].take(bucket) {
                                Take::Process(log) => process(log, flow, seq),
                                Take::Park => shards[c].park(bucket, (flow, seq)),
                                Take::Stray => panic!("stray packet"),
                            }
                            shards[c].settle();
                            inflight.extend(shards[c].take_released());
                        }
                    }
                    8 => {
                        let bucket = rng.below(BUCKETS);
                        if moving[bucket] {
                            continue;
                        }
                        let from = owner[bucket];
                        let to = (from + 1 + rng.below(CORES - 1)) % CORES;
                        shards[to].expect(bucket).unwrap();
                        owner[bucket] = to;
                        moving[bucket] = true;
                        shards[from]
                            .release(bucket, to, counts[bucket], false)
                            .unwrap();
                        inflight.extend(shards[from].take_released());
                    }
                    _ => {
                        if !inflight.is_empty() {
                            let m = inflight.swap_remove(rng.below(inflight.len()));
                            let (to, bucket) = (m.to, m.bucket);
                            let parked = shards[to].accept(m).map_err(|(e, _)| e).unwrap();
                            moving[bucket] = false;
                            for (flow, seq) in parked {
                                match shards[to].take(bucket) {
                                    Take::Process(log) => process(log, flow, seq),
                                    _ => unreachable!(),
                                }
                            }
                        }
                    }
                }
            }
            // Drain everything.
            loop {
                let mut progress = false;
                for c in 0..CORES {
                    while let Some((bucket, flow, seq)) = queues[c].pop_front() {
                        progress = true;
                        match shards[c].take(bucket) {
                            Take::Process(log) => process(log, flow, seq),
                            Take::Park => shards[c].park(bucket, (flow, seq)),
                            Take::Stray => panic!("stray packet"),
                        }
                        shards[c].settle();
                        inflight.extend(shards[c].take_released());
                    }
                }
                while let Some(m) = inflight.pop() {
                    progress = true;
                    let (to, bucket) = (m.to, m.bucket);
                    for (flow, seq) in shards[to].accept(m).map_err(|(e, _)| e).unwrap() {
                        match shards[to].take(bucket) {
                            Take::Process(log) => process(log, flow, seq),
                            _ => unreachable!(),
                        }
                    }
                }
                if !progress {
                    break;
                }
            }
            let mut seen = vec![Vec::new(); 16];
            for shard in shards {
                assert!(shard.is_settled(), "seed {seed}");
                let (states, parked) = shard.into_parts();
                assert!(parked.is_empty());
                for (_, log) in states {
                    for (flow, seq) in log {
                        seen[flow as usize].push(seq);
                    }
                }
            }
            for (flow, seqs) in seen.iter().enumerate() {
                let expected: Vec<u32> = (0..next_seq[flow]).collect();
                assert_eq!(seqs, &expected, "seed {seed}, flow {flow}");
            }
        }
    }
}
