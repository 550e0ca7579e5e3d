//! One flow table: flow key → user state, for the flows of one RSS bucket.
//!
//! A [`FlowTable`] is a plain single-owner structure (no lock, no atomic):
//! the per-bucket design gives each table exactly one owning core at a time,
//! and the shared baseline wraps tables in locks.
//!
//! Layout: the entries (key, hash, state, last-use time) live densely in a
//! `Vec`; the links of the least-recently-used list live in a parallel
//! compact `Vec` (8 bytes a flow), so that reordering the list does not pull
//! whole entries into the cache; an open-addressing index of `(hash,
//! position)` words locates them (`state::index`). The flow's Toeplitz hash,
//! which the NIC has already computed, is reused as the index hash: no key is
//! hashed again. Because the words carry the hash and their home slot is a
//! function of the hash, a batch can prefetch its index words, then its
//! entries, before processing ([`FlowTable::prefetch_index`],
//! [`FlowTable::prefetch`]).
//!
//! The recency list serves both policies that need an "oldest" flow: idle
//! expiry pops from its cold end while the flow there has been idle for the
//! timeout, and a full table evicts from the same end.

use serde::{Deserialize, Serialize};

use crate::state::index::FlowIndex;

use crate::flow::FlowKey;

/// What a table does with a new flow when it already holds `capacity` flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum WhenFull {
    /// Drop the least recently used flow's state to make room (counted in
    /// [`TableStats::evicted`]).
    EvictLeastRecentlyUsed,
    /// Keep the existing flows and process the new flow's packet without
    /// state (counted in [`TableStats::refused`]).
    Refuse,
}

/// Limits of one flow table; copied into every table, so tables carry them
/// when they migrate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct TableConfig {
    /// Most flows one table holds. With per-bucket tables this is a limit per
    /// bucket; 0 means no flow is ever stored.
    pub capacity: usize,
    /// A flow unused for this many nanoseconds is expired: swept by
    /// [`FlowTable::expire`] and treated as new if a packet finds it first.
    /// `None`: flows never expire.
    pub idle_timeout_ns: Option<u64>,
    /// Policy when the table is full.
    pub when_full: WhenFull,
}

impl Default for TableConfig {
    /// 65 536 flows per table, a 30 s idle timeout (a typical UDP/conntrack
    /// default), least-recently-used eviction.
    fn default() -> Self {
        Self {
            capacity: 65_536,
            idle_timeout_ns: Some(30_000_000_000),
            when_full: WhenFull::EvictLeastRecentlyUsed,
        }
    }
}

/// Counters of one table. They travel with the table when it migrates, so
/// summing over every table of every core gives the totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct TableStats {
    /// New flows stored (including flows that replaced an expired entry).
    pub inserted: u64,
    /// Flows whose state was dropped because they were idle for the timeout.
    pub expired: u64,
    /// Flows dropped to make room under [`WhenFull::EvictLeastRecentlyUsed`].
    pub evicted: u64,
    /// New flows not stored under [`WhenFull::Refuse`].
    pub refused: u64,
}

impl TableStats {
    /// Adds `other`'s counters to these.
    pub fn add(&mut self, other: &TableStats) {
        self.inserted += other.inserted;
        self.expired += other.expired;
        self.evicted += other.evicted;
        self.refused += other.refused;
    }
}

/// Result of [`FlowTable::get_or_insert_with`].
#[derive(Debug)]
pub enum Access<'a, S> {
    /// The flow was known; its state.
    Found(&'a mut S),
    /// The flow was new (or its old entry had expired); its fresh state.
    Inserted(&'a mut S),
    /// The flow was new and the table is full under [`WhenFull::Refuse`].
    Refused,
}

impl<'a, S> Access<'a, S> {
    /// The flow's state, unless it was refused.
    pub fn state(self) -> Option<&'a mut S> {
        match self {
            Access::Found(s) | Access::Inserted(s) => Some(s),
            Access::Refused => None,
        }
    }
}

/// End marker of the recency list.
const NIL: u32 = u32::MAX;

#[derive(Clone, Hash)]
struct Entry<S> {
    key: FlowKey,
    hash: u32,
    last_used: u64,
    state: S,
}

/// An entry's place in the recency list.
#[derive(Clone, Copy, Hash)]
struct Link {
    /// Neighbour used more recently (towards the head), or `NIL`.
    newer: u32,
    /// Neighbour used less recently (towards the tail), or `NIL`.
    older: u32,
}

/// Asks the CPU to start loading the cache line at `p` (no effect off
/// x86-64).
#[inline(always)]
pub(crate) fn prefetch_line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline, and a prefetch neither
    // faults nor makes memory visible to the program: any address will do.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A flow table with a capacity limit and idle expiry; see the module docs.
#[derive(Clone)]
pub struct FlowTable<S> {
    config: TableConfig,
    index: FlowIndex,
    entries: Vec<Entry<S>>,
    links: Vec<Link>,
    /// Most recently used entry, or `NIL`.
    head: u32,
    /// Least recently used entry, or `NIL`.
    tail: u32,
    /// Latest time seen: times handed in are clamped to it, so the recency
    /// list stays sorted by `last_used` even if callers' clocks step back.
    clock: u64,
    stats: TableStats,
}

/// Hashes the stored flows and their recency order (not the index, whose
/// lookups they determine), so that model checkers can recognise states they
/// have already explored.
impl<S: std::hash::Hash> std::hash::Hash for FlowTable<S> {
    fn hash<Hs: std::hash::Hasher>(&self, state: &mut Hs) {
        self.config.hash(state);
        self.entries.hash(state);
        self.links.hash(state);
        self.head.hash(state);
        self.tail.hash(state);
        self.clock.hash(state);
        self.stats.hash(state);
    }
}

impl<S> std::fmt::Debug for FlowTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowTable")
            .field("flows", &self.entries.len())
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<S> FlowTable<S> {
    /// An empty table (allocates nothing until the first flow).
    pub fn new(config: TableConfig) -> Self {
        Self {
            config,
            index: FlowIndex::new(),
            entries: Vec::new(),
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            clock: 0,
            stats: TableStats::default(),
        }
    }

    /// The table's limits.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// Number of flows stored.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no flow is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table's counters.
    pub fn stats(&self) -> &TableStats {
        &self.stats
    }

    #[inline]
    fn position(&self, key: &FlowKey, hash: u32) -> Option<usize> {
        let entries = &self.entries;
        self.index.find(hash, |p| entries[p].key == *key)
    }

    /// Starts loading into the cache the index slot where the search for RSS
    /// hash `hash` begins: first stage of a batch, before
    /// [`prefetch`](Self::prefetch).
    #[inline]
    pub fn prefetch_index(&self, hash: u32) {
        self.index.prefetch_home(hash);
    }

    /// Starts loading into the cache the entry of the flow with RSS hash
    /// `hash`, if there is one: call it for the packets of a batch before
    /// processing them, so that their cache misses overlap. Touches only the
    /// index.
    #[inline]
    pub fn prefetch(&self, hash: u32) {
        if let Some(p) = self.index.find(hash, |_| true) {
            // An entry may straddle two cache lines: load both.
            let first = (&self.entries[p] as *const Entry<S>).cast::<u8>();
            prefetch_line(first);
            prefetch_line(first.wrapping_add(std::mem::size_of::<Entry<S>>() - 1));
            prefetch_line(&self.links[p]);
        }
    }

    /// The state of a flow, without counting as a use. `hash` is the flow's
    /// RSS (Toeplitz) hash.
    pub fn get(&self, key: &FlowKey, hash: u32) -> Option<&S> {
        self.position(key, hash).map(|i| &self.entries[i].state)
    }

    /// True when `key` is stored (expired or not).
    pub fn contains(&self, key: &FlowKey, hash: u32) -> bool {
        self.position(key, hash).is_some()
    }

    fn is_idle(&self, i: usize, now: u64) -> bool {
        self.config
            .idle_timeout_ns
            .is_some_and(|t| now.saturating_sub(self.entries[i].last_used) >= t)
    }

    /// The state of `key` at time `now` (nanoseconds, any epoch, supplied by
    /// the caller), created with `init` if the flow is new or its entry had
    /// expired. A found or created flow becomes the most recently used.
    #[inline]
    pub fn get_or_insert_with(
        &mut self,
        key: &FlowKey,
        hash: u32,
        now: u64,
        init: impl FnOnce() -> S,
    ) -> Access<'_, S> {
        self.clock = self.clock.max(now);
        let now = self.clock;
        if let Some(i) = self.position(key, hash) {
            let expired = self.is_idle(i, now);
            self.touch(i, now);
            let entry = &mut self.entries[i];
            if expired {
                entry.state = init();
                self.stats.expired += 1;
                self.stats.inserted += 1;
                return Access::Inserted(&mut entry.state);
            }
            return Access::Found(&mut entry.state);
        }
        if self.entries.len() >= self.config.capacity && !self.make_room(now) {
            self.stats.refused += 1;
            return Access::Refused;
        }
        let i = self.push(*key, hash, now, init());
        Access::Inserted(&mut self.entries[i].state)
    }

    /// Frees one place in a full table if the policy allows; false if not.
    fn make_room(&mut self, now: u64) -> bool {
        if self.tail == NIL {
            return false; // capacity 0
        }
        let tail = self.tail as usize;
        if self.is_idle(tail, now) {
            self.remove_at(tail);
            self.stats.expired += 1;
            return true;
        }
        match self.config.when_full {
            WhenFull::Refuse => false,
            WhenFull::EvictLeastRecentlyUsed => {
                self.remove_at(tail);
                self.stats.evicted += 1;
                true
            }
        }
    }

    /// The state of a stored flow at time `now`, counted as a use (it
    /// becomes the most recently used); `None` when the flow is not stored,
    /// or when its entry had been idle for the timeout (the entry is then
    /// dropped, counted in [`TableStats::expired`]). Unlike
    /// [`get_or_insert_with`](Self::get_or_insert_with), never stores a flow.
    pub fn get_mut(&mut self, key: &FlowKey, hash: u32, now: u64) -> Option<&mut S> {
        self.clock = self.clock.max(now);
        let now = self.clock;
        let i = self.position(key, hash)?;
        if self.is_idle(i, now) {
            self.stats.expired += 1;
            self.remove_at(i);
            return None;
        }
        self.touch(i, now);
        Some(&mut self.entries[i].state)
    }

    /// Inserts or replaces the state of `key` at time `now`, ignoring the
    /// capacity policy's refusal (a full table still evicts its least
    /// recently used flow first). Returns the previous state, if any.
    pub fn insert(&mut self, key: FlowKey, hash: u32, now: u64, state: S) -> Option<S> {
        self.clock = self.clock.max(now);
        let now = self.clock;
        if let Some(i) = self.position(&key, hash) {
            self.touch(i, now);
            return Some(std::mem::replace(&mut self.entries[i].state, state));
        }
        while self.entries.len() >= self.config.capacity.max(1) && self.tail != NIL {
            let tail = self.tail as usize;
            if self.is_idle(tail, now) {
                self.stats.expired += 1;
            } else {
                self.stats.evicted += 1;
            }
            self.remove_at(tail);
        }
        self.push(key, hash, now, state);
        None
    }

    /// Removes a flow and returns its state.
    pub fn remove(&mut self, key: &FlowKey, hash: u32) -> Option<S> {
        let i = self.position(key, hash)?;
        Some(self.remove_at(i).1)
    }

    /// Drops every flow idle for at least the timeout at time `now`; returns
    /// how many.
    pub fn expire(&mut self, now: u64) -> usize {
        self.expire_with(now, |_, _| {})
    }

    /// Like [`expire`](Self::expire), handing each expired flow to `on_expire`
    /// (to release a NAT port, log a connection end…). Costs O(expired flows).
    pub fn expire_with(&mut self, now: u64, mut on_expire: impl FnMut(FlowKey, S)) -> usize {
        self.clock = self.clock.max(now);
        let now = self.clock;
        let mut n = 0;
        while self.tail != NIL && self.is_idle(self.tail as usize, now) {
            let (key, state) = self.remove_at(self.tail as usize);
            self.stats.expired += 1;
            on_expire(key, state);
            n += 1;
        }
        n
    }

    /// The flows, most recently used first.
    pub fn iter(&self) -> impl Iterator<Item = (&FlowKey, &S)> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            if at == NIL {
                return None;
            }
            let e = &self.entries[at as usize];
            at = self.links[at as usize].older;
            Some((&e.key, &e.state))
        })
    }

    /// Consumes the table, yielding every flow and its state (no order).
    pub fn into_flows(self) -> impl Iterator<Item = (FlowKey, S)> {
        self.entries.into_iter().map(|e| (e.key, e.state))
    }

    fn push(&mut self, key: FlowKey, hash: u32, now: u64, state: S) -> usize {
        let i = self.entries.len();
        debug_assert!(i < NIL as usize, "flow table larger than 2^32 - 1 entries");
        self.entries.push(Entry {
            key,
            hash,
            last_used: now,
            state,
        });
        self.links.push(Link {
            newer: NIL,
            older: NIL,
        });
        self.link_head(i);
        self.index.insert(hash, i);
        self.stats.inserted += 1;
        i
    }

    /// Marks entry `i` used at `now`: moves it to the head of the recency list.
    #[inline]
    fn touch(&mut self, i: usize, now: u64) {
        self.entries[i].last_used = now;
        if self.head != i as u32 {
            self.unlink(i);
            self.link_head(i);
        }
    }

    fn link_head(&mut self, i: usize) {
        let old_head = self.head;
        self.links[i] = Link {
            newer: NIL,
            older: old_head,
        };
        if old_head == NIL {
            self.tail = i as u32;
        } else {
            self.links[old_head as usize].newer = i as u32;
        }
        self.head = i as u32;
    }

    fn unlink(&mut self, i: usize) {
        let Link { newer, older } = self.links[i];
        if newer == NIL {
            self.head = older;
        } else {
            self.links[newer as usize].older = older;
        }
        if older == NIL {
            self.tail = newer;
        } else {
            self.links[older as usize].newer = newer;
        }
    }

    /// Removes entry `i`, moving the last entry into its place.
    fn remove_at(&mut self, i: usize) -> (FlowKey, S) {
        self.unlink(i);
        let hash = self.entries[i].hash;
        self.index.remove(hash, i);
        let last = self.entries.len() - 1;
        let removed = self.entries.swap_remove(i);
        self.links.swap_remove(i);
        if i != last {
            // The former last entry now lives at `i`: repoint its index word
            // and its list neighbours.
            self.index.repoint(self.entries[i].hash, last, i);
            let Link { newer, older } = self.links[i];
            if newer == NIL {
                self.head = i as u32;
            } else {
                self.links[newer as usize].older = i as u32;
            }
            if older == NIL {
                self.tail = i as u32;
            } else {
                self.links[older as usize].newer = i as u32;
            }
        }
        (removed.key, removed.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn v4(n: u32) -> FlowKey {
        FlowKey::new(
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | n)),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            1024 + (n % 60000) as u16,
            80,
            6,
        )
        .unwrap()
    }

    fn config(capacity: usize, timeout: Option<u64>, when_full: WhenFull) -> TableConfig {
        TableConfig {
            capacity,
            idle_timeout_ns: timeout,
            when_full,
        }
    }

    /// All flows of one bucket share the hash's low bits: use hashes that only
    /// differ above bit 9, as a 512-bucket table would see them.
    fn hash(n: u32) -> u32 {
        (n << 9) | 0x1ab
    }

    fn check_list<S>(t: &FlowTable<S>) {
        // Walk both ways; the list holds every entry exactly once, sorted by
        // last use.
        let forward: Vec<u32> = {
            let mut v = Vec::new();
            let mut at = t.head;
            while at != NIL {
                v.push(at);
                at = t.links[at as usize].older;
            }
            v
        };
        let mut backward = Vec::new();
        let mut at = t.tail;
        while at != NIL {
            backward.push(at);
            at = t.links[at as usize].newer;
        }
        backward.reverse();
        assert_eq!(forward, backward);
        assert_eq!(forward.len(), t.len());
        assert_eq!(t.index.len(), t.len());
        for w in forward.windows(2) {
            assert!(t.entries[w[0] as usize].last_used >= t.entries[w[1] as usize].last_used);
        }
        for (i, e) in t.entries.iter().enumerate() {
            assert_eq!(t.position(&e.key, e.hash), Some(i));
        }
    }

    #[test]
    fn insert_find_update() {
        let mut t = FlowTable::new(config(100, None, WhenFull::Refuse));
        for n in 0..50 {
            assert!(matches!(
                t.get_or_insert_with(&v4(n), hash(n), 1, || n),
                Access::Inserted(_)
            ));
        }
        for n in 0..50 {
            match t.get_or_insert_with(&v4(n), hash(n), 2, || 999) {
                Access::Found(s) => {
                    assert_eq!(*s, n);
                    *s += 1000;
                }
                other => panic!("flow {n}: {other:?}"),
            }
        }
        assert_eq!(t.get(&v4(7), hash(7)), Some(&1007));
        assert_eq!(t.len(), 50);
        assert_eq!(t.stats().inserted, 50);
        check_list(&t);
    }

    #[test]
    fn equal_hashes_are_told_apart_by_key() {
        let mut t = FlowTable::new(TableConfig::default());
        // Toeplitz is 32 bits: distinct flows can share a hash.
        let six = FlowKey::new(
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            1,
            2,
            17,
        )
        .unwrap();
        assert!(matches!(
            t.get_or_insert_with(&v4(1), 42, 0, || 1),
            Access::Inserted(&mut 1)
        ));
        assert!(matches!(
            t.get_or_insert_with(&six, 42, 0, || 2),
            Access::Inserted(&mut 2)
        ));
        assert_eq!(t.get(&v4(1), 42), Some(&1));
        assert_eq!(t.get(&six, 42), Some(&2));
        assert_eq!(t.get(&v4(2), 42), None);
    }

    #[test]
    fn full_table_evicts_least_recently_used() {
        let mut t = FlowTable::new(config(3, None, WhenFull::EvictLeastRecentlyUsed));
        for n in 0..3 {
            t.get_or_insert_with(&v4(n), hash(n), u64::from(n), || n);
        }
        // Use flow 0 again: flow 1 is now the least recently used.
        assert!(matches!(
            t.get_or_insert_with(&v4(0), hash(0), 10, || 99),
            Access::Found(_)
        ));
        assert!(matches!(
            t.get_or_insert_with(&v4(3), hash(3), 11, || 3),
            Access::Inserted(_)
        ));
        assert!(!t.contains(&v4(1), hash(1)));
        for n in [0, 2, 3] {
            assert!(t.contains(&v4(n), hash(n)), "flow {n}");
        }
        assert_eq!(t.stats().evicted, 1);
        check_list(&t);
    }

    #[test]
    fn full_table_refuses_and_counts() {
        let mut t = FlowTable::new(config(2, None, WhenFull::Refuse));
        t.get_or_insert_with(&v4(0), hash(0), 0, || 0);
        t.get_or_insert_with(&v4(1), hash(1), 0, || 1);
        assert!(matches!(
            t.get_or_insert_with(&v4(2), hash(2), 0, || 2),
            Access::Refused
        ));
        assert_eq!(t.stats().refused, 1);
        // Known flows are still served.
        assert!(matches!(
            t.get_or_insert_with(&v4(1), hash(1), 0, || 9),
            Access::Found(&mut 1)
        ));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn refusing_table_still_replaces_an_expired_flow() {
        let mut t = FlowTable::new(config(1, Some(100), WhenFull::Refuse));
        t.get_or_insert_with(&v4(0), hash(0), 0, || 0);
        assert!(matches!(
            t.get_or_insert_with(&v4(1), hash(1), 50, || 1),
            Access::Refused
        ));
        assert!(matches!(
            t.get_or_insert_with(&v4(1), hash(1), 100, || 1),
            Access::Inserted(_)
        ));
        assert_eq!(t.stats().expired, 1);
        assert!(!t.contains(&v4(0), hash(0)));
    }

    #[test]
    fn zero_capacity_stores_nothing() {
        for policy in [WhenFull::Refuse, WhenFull::EvictLeastRecentlyUsed] {
            let mut t = FlowTable::new(config(0, None, policy));
            assert!(matches!(
                t.get_or_insert_with(&v4(0), hash(0), 0, || 0),
                Access::Refused
            ));
            assert!(t.is_empty());
        }
    }

    #[test]
    fn idle_flows_expire() {
        let mut t = FlowTable::new(config(100, Some(1_000), WhenFull::Refuse));
        for n in 0..10u32 {
            t.get_or_insert_with(&v4(n), hash(n), u64::from(n) * 100, || n);
        }
        // Flow 0 was last used at 0, flow 9 at 900: at 1 450, flows 0..=4
        // have been idle for ≥ 1 000 ns.
        t.get_or_insert_with(&v4(2), hash(2), 1_000, || 99);
        let mut gone = Vec::new();
        assert_eq!(t.expire_with(1_450, |_, s| gone.push(s)), 4);
        gone.sort_unstable();
        assert_eq!(gone, vec![0, 1, 3, 4]);
        assert_eq!(t.len(), 6);
        assert_eq!(t.stats().expired, 4);
        check_list(&t);
        // A packet of an expired-but-not-yet-swept flow starts a new state.
        assert!(matches!(
            t.get_or_insert_with(&v4(5), hash(5), 1_500, || 55),
            Access::Inserted(&mut 55)
        ));
        assert_eq!(t.stats().expired, 5);
        assert_eq!(t.expire(u64::MAX), 6);
        assert!(t.is_empty());
        check_list(&t);
    }

    #[test]
    fn get_mut_never_stores_and_drops_an_idle_flow() {
        let mut t = FlowTable::new(config(100, Some(1_000), WhenFull::Refuse));
        assert!(t.get_mut(&v4(1), hash(1), 0).is_none());
        assert!(t.is_empty());
        t.insert(v4(1), hash(1), 0, 7u32);
        *t.get_mut(&v4(1), hash(1), 500).unwrap() += 1;
        // The use at 500 counts: still there at 1 400.
        assert_eq!(t.get_mut(&v4(1), hash(1), 1_400).copied(), Some(8));
        assert!(t.get_mut(&v4(1), hash(1), 2_400).is_none());
        assert!(t.is_empty());
        assert_eq!(t.stats().expired, 1);
        check_list(&t);
    }

    #[test]
    fn clock_stepping_back_keeps_order() {
        let mut t = FlowTable::new(config(10, Some(100), WhenFull::Refuse));
        t.get_or_insert_with(&v4(0), hash(0), 1_000, || 0);
        t.get_or_insert_with(&v4(1), hash(1), 500, || 1); // stamped 1 000
        check_list(&t);
        assert_eq!(t.expire(1_099), 0);
        assert_eq!(t.expire(1_100), 2);
    }

    #[test]
    fn insert_remove_and_iterate() {
        let mut t = FlowTable::new(config(4, None, WhenFull::Refuse));
        assert_eq!(t.insert(v4(0), hash(0), 0, 'a'), None);
        assert_eq!(t.insert(v4(0), hash(0), 0, 'b'), Some('a'));
        for n in 1..4 {
            t.insert(v4(n), hash(n), u64::from(n), 'x');
        }
        // Full: insert evicts the least recently used even under Refuse.
        t.insert(v4(4), hash(4), 9, 'y');
        assert!(!t.contains(&v4(0), hash(0)));
        assert_eq!(t.remove(&v4(2), hash(2)), Some('x'));
        assert_eq!(t.remove(&v4(2), hash(2)), None);
        let order: Vec<FlowKey> = t.iter().map(|(k, _)| *k).collect();
        assert_eq!(order, vec![v4(4), v4(3), v4(1)]);
        check_list(&t);
        let mut all: Vec<char> = t.into_flows().map(|(_, s)| s).collect();
        all.sort_unstable();
        assert_eq!(all, vec!['x', 'x', 'y']);
    }

    /// Random operations against a naive model: a vector ordered from most
    /// to least recently used.
    #[test]
    fn matches_a_naive_lru_model() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        const CAP: usize = 64;
        const TIMEOUT: u64 = 1_000;
        let mut rng = StdRng::seed_from_u64(7);
        let mut t = FlowTable::new(config(CAP, Some(TIMEOUT), WhenFull::EvictLeastRecentlyUsed));
        // (flow, last use, packets)
        let mut model: Vec<(u32, u64, u64)> = Vec::new();
        let mut now = 0;
        for step in 0..20_000 {
            // Mostly dense traffic (the table fills and evicts), now and
            // then a pause (flows expire).
            now += if rng.random_range(0..100) == 0 {
                rng.random_range(0..2_000)
            } else {
                rng.random_range(0..3)
            };
            let n = rng.random_range(0..200);
            match rng.random_range(0..10) {
                0 => {
                    let pos = model.iter().position(|m| m.0 == n);
                    let removed = t.remove(&v4(n), hash(n));
                    assert_eq!(removed, pos.map(|p| model.remove(p).2), "step {step}");
                }
                1 => {
                    let before = model.len();
                    model.retain(|m| now - m.1 < TIMEOUT);
                    assert_eq!(t.expire(now), before - model.len(), "step {step}");
                }
                _ => {
                    *t.get_or_insert_with(&v4(n), hash(n), now, || 0)
                        .state()
                        .unwrap() += 1;
                    let packets = match model.iter().position(|m| m.0 == n) {
                        Some(p) => {
                            let old = model.remove(p);
                            if now - old.1 >= TIMEOUT {
                                1
                            } else {
                                old.2 + 1
                            }
                        }
                        None => {
                            if model.len() >= CAP {
                                model.pop();
                            }
                            1
                        }
                    };
                    model.insert(0, (n, now, packets));
                }
            }
            let actual: Vec<(u32, u64)> = t
                .iter()
                .map(|(k, s)| match k.src {
                    IpAddr::V4(a) => (u32::from(a) & 0xff_ffff, *s),
                    IpAddr::V6(_) => unreachable!(),
                })
                .collect();
            let expected: Vec<(u32, u64)> = model.iter().map(|m| (m.0, m.2)).collect();
            assert_eq!(actual, expected, "step {step}");
            if step % 1_000 == 0 {
                check_list(&t);
            }
        }
        check_list(&t);
        let s = t.stats();
        assert!(s.evicted > 0 && s.expired > 0, "{s:?}");
    }
}
