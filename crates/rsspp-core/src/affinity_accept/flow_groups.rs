//! The NIC side of Affinity-Accept: flow groups (the RSS buckets) mapped to
//! cores by the indirection table, rewrites that take effect after the NIC's
//! update delay, and a fence that keeps a migrated group's packets in order.
//!
//! When a group moves from core V to core T, packets of it may still sit in
//! V's receive queue while new ones reach T's. T holds the group's packets
//! until V has received every packet that was queued before the move, then
//! receives them itself: no connection sees its packets out of order. To
//! know how many packets of a group wait in a queue, the policy mirrors the
//! queues' occupancy (the engine drops a packet exactly when its queue is
//! full, and only this policy takes packets out).
//!
//! Packets are known by their RSS hash; time is passed in, in nanoseconds.

use std::collections::VecDeque;

use super::lists::{List, Lists};
use super::Ns;
use crate::reta::{IndirectionTable, RetaError};
use crate::toeplitz::bucket_of;

/// What a core's receive path finds a packet it took from its queue to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A packet of a group the core owns, free to handle.
    Current,
    /// A packet of a group that moved here while older packets of it still
    /// wait in the previous core's queue: held until they are out.
    Held,
    /// A packet queued before its group moved away: handle it, then call
    /// [`FlowGroups::old_handled`].
    Old(usize),
}

/// Flow groups, the table that maps them, and their fences.
#[derive(Debug)]
pub struct FlowGroups {
    table: IndirectionTable,
    update_ns: Ns,
    /// Rewrites waiting for the NIC: (effective at, group, new core).
    pending: VecDeque<(Ns, usize, usize)>,
    /// Per group: a move of it is pending or its fence is open; it cannot
    /// move again until both are over.
    moving: Vec<bool>,
    /// Per group: packets in its current core's receive queue.
    in_queue: Vec<u32>,
    /// Per group: packets still in the previous core's receive queue.
    fence: Vec<u32>,
    /// Per group: packets its current core holds behind the fence.
    held: Vec<List>,
    /// Per core: packets in its receive queue.
    queue_len: Vec<usize>,
    queue_capacity: usize,
    /// Per group: connections opened since the last round.
    opened: Vec<u32>,
}

impl FlowGroups {
    /// `groups` flow groups spread equally over `cores` cores, with
    /// receive queues of `queue_capacity` packets and table rewrites that
    /// take `update_ns` to reach the NIC.
    pub fn new(
        groups: usize,
        cores: usize,
        queue_capacity: usize,
        update_ns: Ns,
    ) -> Result<Self, RetaError> {
        let table = IndirectionTable::equal(groups, cores)?;
        Ok(Self {
            table,
            update_ns,
            pending: VecDeque::new(),
            moving: vec![false; groups],
            in_queue: vec![0; groups],
            fence: vec![0; groups],
            held: vec![List::default(); groups],
            queue_len: vec![0; cores],
            queue_capacity,
            opened: vec![0; groups],
        })
    }

    /// The flow group of a packet of RSS hash `hash`.
    pub fn group(&self, hash: u32) -> usize {
        bucket_of(hash, self.table.len())
    }

    /// The NIC receives a packet of RSS hash `hash` at `now`: the core whose
    /// queue it joins.
    pub fn steer(&mut self, hash: u32, now: Ns) -> usize {
        while let Some(&(at, group, to)) = self.pending.front() {
            if at > now {
                break;
            }
            self.pending.pop_front();
            self.table
                .move_bucket(group, to)
                .expect("the group was taken from the table");
            // What is queued now is on the previous core: the fence.
            self.fence[group] = self.in_queue[group];
            self.in_queue[group] = 0;
            self.moving[group] = self.fence[group] > 0;
        }
        let group = self.group(hash);
        let core = self.table.core_of(group);
        // The engine drops the packet when the queue is full.
        if self.queue_len[core] < self.queue_capacity {
            self.queue_len[core] += 1;
            self.in_queue[group] += 1;
        }
        core
    }

    /// Core `core` took `n` packets from its queue.
    pub fn took(&mut self, core: usize, n: usize) {
        self.queue_len[core] -= n;
    }

    /// Packets in `core`'s receive queue, as the policy counts them.
    pub fn queue_len(&self, core: usize) -> usize {
        self.queue_len[core]
    }

    /// Classifies packet `p` of RSS hash `hash`, just taken by `core`; a
    /// held packet goes into the group's list.
    pub fn receive<P: Copy>(
        &mut self,
        core: usize,
        hash: u32,
        p: P,
        lists: &mut Lists<P>,
    ) -> Received {
        let group = self.group(hash);
        if self.table.core_of(group) != core {
            return Received::Old(group);
        }
        self.in_queue[group] -= 1;
        if self.fence[group] > 0 {
            lists.push(&mut self.held[group], p, core as u8);
            Received::Held
        } else {
            Received::Current
        }
    }

    /// An old packet of `group` was handled. When it was the last one, the
    /// fence opens: returns the group's core and the packets it held, in
    /// arrival order (possibly none).
    pub fn old_handled(&mut self, group: usize) -> Option<(usize, List)> {
        self.fence[group] -= 1;
        if self.fence[group] > 0 {
            return None;
        }
        self.moving[group] = false;
        let held = std::mem::take(&mut self.held[group]);
        Some((self.table.core_of(group), held))
    }

    /// Counts a connection opened in `group`.
    pub fn opened(&mut self, group: usize) {
        self.opened[group] += 1;
    }

    /// Moves one group of `victim` to `thief` once the NIC applies it: the
    /// one that opened the most connections since the last round (the
    /// lowest on a tie), among those not already moving. False when the
    /// victim has none to give.
    pub fn migrate(&mut self, victim: usize, thief: usize, now: Ns) -> bool {
        let mut best: Option<(u32, usize)> = None;
        for (group, &core) in self.table.entries().iter().enumerate() {
            if core != victim || self.moving[group] {
                continue;
            }
            let n = self.opened[group];
            if best.is_none_or(|(m, _)| n > m) {
                best = Some((n, group));
            }
        }
        let Some((_, group)) = best else {
            return false;
        };
        self.moving[group] = true;
        self.pending.push_back((now + self.update_ns, group, thief));
        true
    }

    /// Starts a new round of connection counts.
    pub fn new_round(&mut self) {
        self.opened.iter_mut().for_each(|n| *n = 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_group_is_held_until_the_old_queue_drains() {
        let mut lists = Lists::default();
        let mut g = FlowGroups::new(64, 2, 16, 100).unwrap();
        // Group 2 is on core 0; two of its packets wait there.
        assert_eq!(g.steer(2, 0), 0);
        assert_eq!(g.steer(2, 1), 0);
        g.opened(2);
        assert!(g.migrate(0, 1, 10));
        // Not yet in the NIC: still core 0, and the group cannot move twice.
        assert_eq!(g.steer(2, 50), 0);
        assert!(g.migrate(0, 1, 60)); // another group of core 0
        assert_eq!(g.steer(2, 110), 1);
        assert_eq!(g.queue_len(0), 3);
        // Core 1 takes the new packet first: held.
        g.took(1, 1);
        assert_eq!(g.receive(1, 2, 2u32, &mut lists), Received::Held);
        // Core 0 takes the three old ones; the last opens the fence.
        g.took(0, 3);
        for i in 0..3 {
            assert_eq!(g.receive(0, 2, 2u32, &mut lists), Received::Old(2));
            let released = g.old_handled(2);
            assert_eq!(released.is_some(), i == 2);
            if let Some((core, held)) = released {
                assert_eq!((core, held.len()), (1, 1));
            }
        }
        assert_eq!(g.steer(2, 200), 1);
        g.took(1, 1);
        assert_eq!(g.receive(1, 2, 2u32, &mut lists), Received::Current);
    }

    #[test]
    fn a_full_queue_is_mirrored() {
        let mut g = FlowGroups::new(64, 1, 2, 0).unwrap();
        for t in 0..5 {
            g.steer(t, u64::from(t));
        }
        assert_eq!(g.queue_len(0), 2);
    }
}
