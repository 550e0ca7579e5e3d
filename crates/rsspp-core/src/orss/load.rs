//! oRSS's per-flow load estimate (thesis §4.4.2): the NIC polls, per core,
//! which flow the core is processing; a round's polls give each flow's share
//! of its core, and the estimate weighs the last [`ROUNDS`] rounds with
//! `0.15 / 1.1ⁿ` (round `n` rounds old; §5.1).
//!
//! Only flows caught by a poll in the last [`ROUNDS`] rounds are kept: a
//! flow never caught has no measurable load, and memory stays bounded by the
//! polls, not by the live flows.

/// Rounds the estimate looks back over (the thesis keeps 1000 polls per core
/// and adds 100 per round).
pub const ROUNDS: usize = 10;

/// The weight of a round `n` rounds old.
pub fn weight(n: usize) -> f64 {
    0.15 / 1.1f64.powi(n as i32)
}

/// One polled flow: its polls in each of the last rounds (a ring).
#[derive(Debug, Clone, Copy)]
struct Entry {
    flow: u32,
    polls: [u32; ROUNDS],
}

const NONE: u32 = u32::MAX;

/// Polls per flow over the last [`ROUNDS`] rounds.
#[derive(Debug, Clone)]
pub struct FlowLoads {
    /// Per flow number: its index in `entries`, or `NONE`.
    slot_of: Vec<u32>,
    entries: Vec<Entry>,
    /// The ring slot of the current round.
    head: usize,
    /// Polls of one core in one round: a flow caught by all of them used a
    /// whole core.
    polls_per_round: f64,
    weights: [f64; ROUNDS],
}

impl FlowLoads {
    /// Estimates from `polls_per_round` polls per core per round.
    pub fn new(polls_per_round: u32) -> Self {
        let mut weights = [0.0; ROUNDS];
        for (n, w) in weights.iter_mut().enumerate() {
            *w = weight(n);
        }
        Self {
            slot_of: Vec::new(),
            entries: Vec::new(),
            head: 0,
            polls_per_round: f64::from(polls_per_round.max(1)),
            weights,
        }
    }

    /// A poll found a core processing `flow`.
    pub fn poll(&mut self, flow: u32) {
        self.add(flow, 1);
    }

    /// `n` polls of `flow` at once: a data path that counts a flow's
    /// packets rather than polling the cores adds each round's count (the
    /// estimate is then in packets per round over `polls_per_round`).
    pub fn add(&mut self, flow: u32, n: u32) {
        let f = flow as usize;
        if f >= self.slot_of.len() {
            self.slot_of.resize((f + 1).next_power_of_two(), NONE);
        }
        let slot = match self.slot_of[f] {
            NONE => {
                self.slot_of[f] = self.entries.len() as u32;
                self.entries.push(Entry {
                    flow,
                    polls: [0; ROUNDS],
                });
                self.entries.len() - 1
            }
            s => s as usize,
        };
        let p = &mut self.entries[slot].polls[self.head];
        *p = p.saturating_add(n);
    }

    /// Flow number `flow` now names a new flow: the old one's polls go.
    pub fn forget(&mut self, flow: u32) {
        if let Some(&slot) = self.slot_of.get(flow as usize) {
            if slot != NONE {
                self.entries[slot as usize].polls = [0; ROUNDS];
            }
        }
    }

    /// Closes the current round: appends `(flow, load)` for every flow
    /// polled in the last [`ROUNDS`] rounds (load in cores: 1 is a whole
    /// core), in a deterministic order, then starts a new round.
    pub fn end_round(&mut self, out: &mut Vec<(u32, f64)>) {
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            let mut load = 0.0;
            for (n, w) in self.weights.iter().enumerate() {
                let slot = (self.head + ROUNDS - n) % ROUNDS;
                load += w * f64::from(e.polls[slot]);
            }
            if load > 0.0 {
                out.push((e.flow, load / self.polls_per_round));
                i += 1;
            } else {
                // Not polled for ROUNDS rounds: forget it.
                let flow = e.flow;
                self.slot_of[flow as usize] = NONE;
                self.entries.swap_remove(i);
                if let Some(moved) = self.entries.get(i) {
                    self.slot_of[moved.flow as usize] = i as u32;
                }
            }
        }
        self.head = (self.head + 1) % ROUNDS;
        for e in &mut self.entries {
            e.polls[self.head] = 0;
        }
    }

    /// Flows with polls kept.
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_thesis() {
        assert!((weight(0) - 0.15).abs() < 1e-12);
        assert!((weight(1) - 0.15 / 1.1).abs() < 1e-12);
        let total: f64 = (0..ROUNDS).map(weight).sum();
        assert!((total - 1.0).abs() < 0.02, "weights sum to {total}");
    }

    #[test]
    fn a_steady_share_converges_to_its_share() {
        let mut l = FlowLoads::new(100);
        let mut out = Vec::new();
        for _ in 0..ROUNDS {
            out.clear();
            for _ in 0..60 {
                l.poll(3);
            }
            for _ in 0..20 {
                l.poll(9);
            }
            l.end_round(&mut out);
        }
        let total: f64 = (0..ROUNDS).map(weight).sum();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0, 3);
        assert!((out[0].1 - 0.6 * total).abs() < 1e-9, "{:?}", out);
        assert!((out[1].1 - 0.2 * total).abs() < 1e-9, "{:?}", out);
    }

    #[test]
    fn recent_rounds_weigh_more_and_old_ones_expire() {
        let mut l = FlowLoads::new(10);
        let mut out = Vec::new();
        l.poll(1);
        l.end_round(&mut out);
        let fresh = out[0].1;
        out.clear();
        l.end_round(&mut out);
        assert!(out[0].1 < fresh);
        for _ in 0..ROUNDS {
            out.clear();
            l.end_round(&mut out);
        }
        assert!(out.is_empty());
        assert_eq!(l.tracked(), 0);
    }

    #[test]
    fn forgetting_a_flow_clears_it() {
        let mut l = FlowLoads::new(10);
        let mut out = Vec::new();
        l.poll(5);
        l.poll(6);
        l.forget(5);
        l.end_round(&mut out);
        assert_eq!(out, vec![(6, 0.1 * 0.15)]);
        // The slot of flow 6 moved when flow 5 was dropped: still counted.
        l.poll(6);
        out.clear();
        l.end_round(&mut out);
        assert_eq!(out.len(), 1);
        assert!(out[0].1 > 0.1 * 0.15);
    }
}
