//! oRSS's balancing step (thesis §4.5): while the average squared imbalance
//! (ASI) of the core loads is above a threshold, move the largest flow of
//! the most loaded core to the least loaded core, if that lowers the ASI;
//! when the largest flow of the most loaded core cannot move usefully and
//! alone fills at least an average core (*core reduction*), leave that flow
//! alone on its core and balance the other cores without it.
//!
//! Against the ping-pong of the public code, three rules:
//! - a move is made only if it lowers the ASI by a real margin
//!   ([`BalancerParams::min_gain`] of it). A flow whose load equals the gap
//!   between the two cores leaves the ASI unchanged where it goes; moving it
//!   anyway swaps the two cores' roles, and the next round moves it back.
//!   With a strict decrease the ASI of a steady load falls at every move, so
//!   no placement can come back: the loop ends.
//! - a move may not leave the receiving core more than
//!   [`BalancerParams::max_overshoot`] of the former gap above the sending
//!   one: a flow of nearly the gap lowers the ASI a little but swaps the
//!   cores' roles, and the slightest drift of the other flows makes the way
//!   back look as good.
//! - a flow moved in the last [`BalancerParams::cooldown_rounds`] rounds is
//!   pinned: its load estimate still mixes polls from before the move (from
//!   a core where it may have been starved), and a wrong estimate must not
//!   send it straight back.

/// A flow as the balancer sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowLoad {
    /// Flow number.
    pub flow: u32,
    /// The core it is (or is being moved) on.
    pub core: usize,
    /// Its estimated load, in cores.
    pub load: f64,
    /// It cannot move now (a migration of it is under way).
    pub pinned: bool,
}

/// One flow to move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Flow number.
    pub flow: u32,
    /// Where it is.
    pub from: usize,
    /// Where it goes.
    pub to: usize,
}

/// What a round decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Flows to move, in order.
    pub moves: Vec<Move>,
    /// Cores left to one flow by core reduction: `(core, flow)`.
    pub isolated: Vec<(usize, u32)>,
    /// Rounds ended because moving the largest flow of the most loaded core
    /// would not lower the ASI enough (0 or 1).
    pub rejected: u64,
    /// Moves of a flow still cooling down from its last move that the plain
    /// algorithm would have made (ping-pong prevented).
    pub bounces_prevented: u64,
    /// ASI of all cores before and after the plan (estimated loads).
    pub asi_before: f64,
    /// See `asi_before`.
    pub asi_after: f64,
}

/// The balancer's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BalancerParams {
    /// Balancing starts when the ASI exceeds this (load², in cores²).
    pub asi_threshold: f64,
    /// A move must lower the ASI by at least this fraction of it.
    pub min_gain: f64,
    /// After a move, the receiving core may exceed the sending one by at
    /// most this fraction of the gap there was between them.
    pub max_overshoot: f64,
    /// Most moves per round (the thesis's iteration limit).
    pub max_moves: usize,
    /// Rounds a moved flow stays where it was put.
    pub cooldown_rounds: u32,
}

impl Default for BalancerParams {
    fn default() -> Self {
        Self {
            // A standard deviation of 3% of a core: twice the sampling noise
            // of 1000 polls.
            asi_threshold: 0.03 * 0.03,
            min_gain: 0.05,
            // A flow of nearly the gap swaps the two cores' roles: a small
            // drift of the other flows and the next round sends it back.
            max_overshoot: 0.5,
            max_moves: 16,
            // The estimate's whole horizon: after it, a flow's load is
            // measured on its new core only.
            cooldown_rounds: super::load::ROUNDS as u32,
        }
    }
}

/// The balancing step, with the memory of recent moves across rounds.
#[derive(Debug, Clone)]
pub struct Balancer {
    params: BalancerParams,
    round: u32,
    /// Per flow number: the round of its last move (0: never).
    moved_at: Vec<u32>,
}

/// Core loads and the flows on each core, largest first.
struct Cores<'a> {
    flows: &'a [FlowLoad],
    load: Vec<f64>,
    /// Per core: indices into `flows`, by decreasing load.
    on: Vec<Vec<usize>>,
    /// Per flow index: moved in this round.
    moved: Vec<bool>,
}

impl Cores<'_> {
    /// Index of the most (`most`) or least loaded core among `set`.
    fn extreme(&self, set: &[usize], most: bool) -> usize {
        let mut best = set[0];
        for &c in &set[1..] {
            let better = if most {
                self.load[c] > self.load[best]
            } else {
                self.load[c] < self.load[best]
            };
            if better {
                best = c;
            }
        }
        best
    }

    fn move_flow(&mut self, i: usize, from: usize, to: usize) {
        let x = self.flows[i].load;
        self.on[from].retain(|&j| j != i);
        let pos = self.on[to]
            .iter()
            .position(|&j| self.flows[j].load < x)
            .unwrap_or(self.on[to].len());
        self.on[to].insert(pos, i);
        self.load[from] -= x;
        self.load[to] += x;
        self.moved[i] = true;
    }
}

/// Average squared imbalance of `loads` over the cores in `set`.
pub fn asi(loads: &[f64], set: &[usize]) -> f64 {
    if set.is_empty() {
        return 0.0;
    }
    let n = set.len() as f64;
    let mean = set.iter().map(|&c| loads[c]).sum::<f64>() / n;
    set.iter().map(|&c| (loads[c] - mean).powi(2)).sum::<f64>() / n
}

impl Balancer {
    /// A balancer with `params`.
    pub fn new(params: BalancerParams) -> Self {
        Self {
            params,
            round: 0,
            moved_at: Vec::new(),
        }
    }

    /// Flow number `flow` names a new flow: it has never moved.
    pub fn forget(&mut self, flow: u32) {
        if let Some(r) = self.moved_at.get_mut(flow as usize) {
            *r = 0;
        }
    }

    fn cooling(&self, flow: u32) -> bool {
        match self.moved_at.get(flow as usize) {
            Some(&r) if r != 0 => self.round - r < self.params.cooldown_rounds,
            _ => false,
        }
    }

    /// Whether moving `x` from a core at `from` to one at `to` lowers the
    /// ASI (`asi`, over `n` cores) by the required margin without swapping
    /// the two cores' roles.
    fn lowers(&self, x: f64, from: f64, to: f64, asi: f64, n: usize) -> bool {
        let gap = from - to;
        if x <= 0.0 || asi <= 0.0 || gap <= 0.0 {
            return false;
        }
        // The mean does not change: only the two cores' squares do.
        let drop = 2.0 * x * (gap - x) / n as f64;
        let overshoot = 2.0 * x - gap;
        drop > 0.0
            && drop >= self.params.min_gain * asi
            && overshoot <= self.params.max_overshoot * gap
    }

    /// One balancing round over `cores` cores whose flows are `flows`.
    pub fn round(&mut self, cores: usize, flows: &[FlowLoad]) -> Plan {
        self.round += 1;
        let mut plan = Plan::default();
        if cores < 2 {
            return plan;
        }
        let mut st = Cores {
            flows,
            load: vec![0.0; cores],
            on: vec![Vec::new(); cores],
            moved: vec![false; flows.len()],
        };
        for (i, f) in flows.iter().enumerate() {
            st.load[f.core] += f.load;
            st.on[f.core].push(i);
        }
        for list in &mut st.on {
            list.sort_by(|&a, &b| {
                flows[b]
                    .load
                    .total_cmp(&flows[a].load)
                    .then(flows[a].flow.cmp(&flows[b].flow))
            });
        }
        let all: Vec<usize> = (0..cores).collect();
        plan.asi_before = asi(&st.load, &all);
        let movable = |st: &Cores<'_>, this: &Self, i: usize| {
            !flows[i].pinned && !st.moved[i] && !this.cooling(flows[i].flow)
        };
        let mut set = all.clone();
        while plan.moves.len() < self.params.max_moves && set.len() >= 2 {
            let asi_now = asi(&st.load, &set);
            if asi_now <= self.params.asi_threshold {
                break;
            }
            let hi = st.extreme(&set, true);
            let lo = st.extreme(&set, false);
            let Some(&top) = st.on[hi].first() else {
                break;
            };
            let (l_hi, l_lo) = (st.load[hi], st.load[lo]);
            let top_helps = self.lowers(flows[top].load, l_hi, l_lo, asi_now, set.len());
            if top_helps && movable(&st, self, top) {
                st.move_flow(top, hi, lo);
                plan.moves.push(Move {
                    flow: flows[top].flow,
                    from: hi,
                    to: lo,
                });
                continue;
            }
            if top_helps {
                // The move would help but the flow is held: by a migration
                // under way, by a move earlier in this round, or by its
                // cooldown — where the plain algorithm would send it on (or
                // back) now.
                if !flows[top].pinned && !st.moved[top] {
                    plan.bounces_prevented += 1;
                }
                break;
            }
            let mean = set.iter().map(|&c| st.load[c]).sum::<f64>() / set.len() as f64;
            if flows[top].load >= mean {
                // Core reduction: the flow alone fills at least an average
                // core, so no placement helps it. Leave it alone on its
                // core, move the core's other flows off, balance the rest.
                plan.isolated.push((hi, flows[top].flow));
                let with = set.clone();
                set.retain(|&c| c != hi);
                let others: Vec<usize> = st.on[hi][1..].to_vec();
                for i in others {
                    if plan.moves.len() >= self.params.max_moves || !movable(&st, self, i) {
                        continue;
                    }
                    let to = st.extreme(&set, false);
                    let asi_with = asi(&st.load, &with);
                    if self.lowers(
                        flows[i].load,
                        st.load[hi],
                        st.load[to],
                        asi_with,
                        with.len(),
                    ) {
                        st.move_flow(i, hi, to);
                        plan.moves.push(Move {
                            flow: flows[i].flow,
                            from: hi,
                            to,
                        });
                    }
                }
                continue;
            }
            plan.rejected += 1;
            break;
        }
        plan.asi_after = asi(&st.load, &all);
        for m in &plan.moves {
            let f = m.flow as usize;
            if f >= self.moved_at.len() {
                self.moved_at.resize((f + 1).next_power_of_two(), 0);
            }
            self.moved_at[f] = self.round;
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flows(spec: &[(usize, f64)]) -> Vec<FlowLoad> {
        spec.iter()
            .enumerate()
            .map(|(i, &(core, load))| FlowLoad {
                flow: i as u32,
                core,
                load,
                pinned: false,
            })
            .collect()
    }

    fn apply(flows: &mut [FlowLoad], plan: &Plan) {
        for m in &plan.moves {
            let f = flows.iter_mut().find(|f| f.flow == m.flow).unwrap();
            assert_eq!(f.core, m.from);
            f.core = m.to;
        }
    }

    fn loads(cores: usize, flows: &[FlowLoad]) -> Vec<f64> {
        let mut l = vec![0.0; cores];
        for f in flows {
            l[f.core] += f.load;
        }
        l
    }

    #[test]
    fn moves_the_largest_flow_of_the_most_loaded_core() {
        // Two elephants on core 0, a mouse on core 1.
        let mut b = Balancer::new(BalancerParams::default());
        let fl = flows(&[(0, 0.5), (0, 0.45), (1, 0.05), (2, 0.5), (3, 0.5)]);
        let plan = b.round(4, &fl);
        assert_eq!(
            plan.moves[0],
            Move {
                flow: 0,
                from: 0,
                to: 1
            }
        );
        assert!(plan.asi_after < plan.asi_before / 100.0, "{plan:?}");
    }

    #[test]
    fn a_move_that_leaves_the_imbalance_unchanged_is_not_made() {
        // Moving flow 0 (0.2) from core 0 (0.3) to core 1 (0.1) only swaps
        // the two loads; a plain `<=` test would then move it back from
        // core 1 (now the most loaded) to core 0, round after round: the
        // public code's ping-pong.
        let mut b = Balancer::new(BalancerParams::default());
        let mut fl = flows(&[(0, 0.2), (0, 0.1), (1, 0.1), (2, 0.2), (2, 0.1)]);
        for _ in 0..20 {
            let plan = b.round(3, &fl);
            assert!(plan.moves.is_empty(), "{plan:?}");
            assert_eq!(plan.rejected, 1);
            apply(&mut fl, &plan);
        }
    }

    /// Runs 60 rounds on a steady load, applying every plan; checks that
    /// no flow goes back where it came from, that the imbalance never rises
    /// and that the moves stop.
    fn steady(spec: &[(usize, f64)], cores: usize) {
        let mut fl = flows(spec);
        let mut b = Balancer::new(BalancerParams::default());
        let mut history: Vec<Vec<usize>> = fl.iter().map(|f| vec![f.core]).collect();
        let mut last_asi = f64::INFINITY;
        let mut moves_per_round = Vec::new();
        for _ in 0..60 {
            let plan = b.round(cores, &fl);
            assert!(plan.asi_after <= plan.asi_before);
            assert!(plan.asi_before <= last_asi + 1e-12);
            last_asi = plan.asi_after;
            apply(&mut fl, &plan);
            for m in &plan.moves {
                history[m.flow as usize].push(m.to);
            }
            moves_per_round.push(plan.moves.len());
        }
        for (f, h) in history.iter().enumerate() {
            for w in h.windows(3) {
                assert_ne!(w[0], w[2], "flow {f} went back: {h:?}");
            }
        }
        assert!(moves_per_round[0] > 0);
        assert!(
            moves_per_round[30..].iter().all(|&m| m == 0),
            "{moves_per_round:?}"
        );
    }

    #[test]
    fn a_steady_load_never_sends_a_flow_back() {
        // 40 flows of uneven, fixed loads on 4 cores, all on two of them.
        let uneven: Vec<(usize, f64)> = (0..40)
            .map(|i| (i % 2, 0.01 + f64::from((i * 37 % 23) as u32) * 0.004))
            .collect();
        steady(&uneven, 4);
        // Equal flows (of a load exact in binary): gaps of exactly one
        // flow, where a move changes nothing but the cores' roles.
        let equal: Vec<(usize, f64)> = [7, 3, 2, 1]
            .iter()
            .enumerate()
            .flat_map(|(core, &n)| std::iter::repeat_n((core, 0.125), n))
            .collect();
        steady(&equal, 4);
    }

    #[test]
    fn stops_when_no_move_lowers_the_imbalance() {
        let mut b = Balancer::new(BalancerParams {
            asi_threshold: 0.0,
            ..BalancerParams::default()
        });
        let mut fl = flows(&[
            (0, 0.3),
            (0, 0.3),
            (1, 0.25),
            (1, 0.25),
            (2, 0.1),
            (3, 0.15),
            (3, 0.15),
        ]);
        let plan = b.round(4, &fl);
        assert_eq!(plan.moves.len(), 1, "{plan:?}");
        assert_eq!(plan.rejected, 1);
        apply(&mut fl, &plan);
        // Moving the largest flow of the most loaded core to the least
        // loaded one would not lower the imbalance: that is why it stopped.
        let l = loads(4, &fl);
        let all: Vec<usize> = (0..4).collect();
        let hi = (0..4).fold(0, |m, c| if l[c] > l[m] { c } else { m });
        let lo = (0..4).fold(0, |m, c| if l[c] < l[m] { c } else { m });
        let top = fl
            .iter()
            .filter(|f| f.core == hi)
            .map(|f| f.load)
            .fold(0.0, f64::max);
        let mut moved = l.clone();
        moved[hi] -= top;
        moved[lo] += top;
        assert!(asi(&moved, &all) >= asi(&l, &all), "{l:?} top {top}");
        // And the next round, on the same load, does nothing.
        let again = b.round(4, &fl);
        assert!(again.moves.is_empty());
    }

    #[test]
    fn core_reduction_leaves_the_elephant_alone() {
        let mut b = Balancer::new(BalancerParams::default());
        // Core 0: an elephant that fits nowhere better, and two mice.
        let mut fl = flows(&[
            (0, 0.9),
            (0, 0.05),
            (0, 0.04),
            (1, 0.2),
            (1, 0.2),
            (1, 0.15),
            (2, 0.15),
            (3, 0.12),
        ]);
        let before = loads(4, &fl);
        let plan = b.round(4, &fl);
        assert_eq!(plan.isolated, vec![(0, 0)]);
        apply(&mut fl, &plan);
        let on0: Vec<u32> = fl.iter().filter(|f| f.core == 0).map(|f| f.flow).collect();
        assert_eq!(on0, vec![0]);
        // The other cores were balanced among themselves.
        let after = loads(4, &fl);
        let rest = [1, 2, 3];
        assert!(asi(&after, &rest) < asi(&before, &rest), "{after:?}");
        assert!(plan.moves.iter().any(|m| m.from == 1), "{plan:?}");
    }

    #[test]
    fn a_flow_just_moved_does_not_bounce_back() {
        let mut b = Balancer::new(BalancerParams {
            max_moves: 1,
            ..BalancerParams::default()
        });
        let mut fl = flows(&[(0, 0.4), (0, 0.4), (1, 0.1)]);
        let plan = b.round(2, &fl);
        assert_eq!(
            plan.moves,
            vec![Move {
                flow: 0,
                from: 0,
                to: 1
            }]
        );
        apply(&mut fl, &plan);
        // The estimates drift: core 0's flow now looks light and core 1's
        // other flow heavier, so the plain algorithm would send flow 0
        // straight back.
        fl[1].load = 0.05;
        fl[2].load = 0.3;
        let plan = b.round(2, &fl);
        assert!(plan.moves.is_empty(), "{plan:?}");
        assert_eq!(plan.bounces_prevented, 1);
        // After the cooldown the estimate is trusted again.
        let cooldown = BalancerParams::default().cooldown_rounds;
        let mut rounds_before_move = 0;
        loop {
            let plan = b.round(2, &fl);
            if plan.moves.iter().any(|m| m.flow == 0) {
                break;
            }
            rounds_before_move += 1;
            assert!(rounds_before_move < cooldown, "never moved");
        }
        assert_eq!(rounds_before_move, cooldown - 2);
    }

    #[test]
    fn pinned_flows_stay() {
        let mut b = Balancer::new(BalancerParams::default());
        let mut fl = flows(&[(0, 0.5), (0, 0.45), (1, 0.0)]);
        fl[0].pinned = true;
        fl[1].pinned = true;
        let plan = b.round(2, &fl);
        assert!(plan.moves.is_empty());
        assert_eq!(plan.bounces_prevented, 0);
    }
}
