//! Per-flow overrides of the indirection table: elephants inside buckets.
//!
//! RSS++ moves whole buckets, so two elephant flows that share a bucket stay
//! on one core whatever the rebalancer does. A data path that can steer a
//! few flows on their own (an override table consulted before the bucket
//! table) lets this controller split them, with oRSS's balancer
//! ([`super::Balancer`]) and load estimate ([`super::FlowLoads`]): each
//! flow's load is an EMA of its packets over the last rounds, a move must
//! lower the squared imbalance by a margin without swapping two cores'
//! roles, and a moved flow stays put for the balancer's cooldown (no
//! ping-pong, a minimum dwell).
//!
//! **What is counted.** Counting every flow costs every packet a hash-map
//! update. The data path counts per flow only inside the buckets this
//! controller marks *hot* ([`OverridePlan::hot`]: the few heaviest buckets,
//! each carrying at least [`OverrideConfig::hot_share`] of an average core's
//! packets): an elephant makes its bucket heavy, so it is found there, and
//! the mice of the cool buckets cost nothing. Overridden flows are counted
//! by their override, always.
//!
//! **What is balanced.** The balancer sees the elephants only (flows of at
//! least [`OverrideConfig::elephant_share`] of an average core, and every
//! overridden flow), each on the core it is on now. The rest of each core's
//! load is the mice's, in buckets the RSS++ rebalancer moves: the daemon
//! gives it the overridden flows' packets as load fixed to their cores
//! ([`Overrides::split`]), and it spreads the buckets around them. So this
//! controller spreads the elephants over the cores, and the buckets fill in.
//!
//! **Moving and freeing.** A move of a flow that has no override adds one
//! (from its bucket's core); a move of an overridden flow retargets it. The
//! data path moves both in order (the flow stays on its old core until that
//! core has drained it). An override is freed once its flow has sent
//! nothing for [`OverrideConfig::idle_rounds`] rounds, or once its bucket's
//! core is its own (it steers nothing the table would not) — both only when
//! settled, so a free never reorders.
//!
//! Loads are in units of the average core's packets this round (1.0: an
//! average core's worth), so the balancer's thresholds are relative.

use std::collections::HashMap;
use std::hash::Hash;

use super::balancer::{Balancer, BalancerParams, FlowLoad};
use super::load::FlowLoads;
use crate::balance::{BalanceError, Setting};
use crate::rand::SplitMix64;

/// Most overrides a table may hold.
pub const MAX_OVERRIDES: usize = 65_536;

/// Most flows tracked at once (counted flows beyond are ignored until
/// tracked ones expire).
pub const MAX_TRACKED: usize = 16_384;

/// The controller's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverrideConfig {
    /// Most flows overridden at once (the data path's table size).
    pub max_overrides: usize,
    /// A bucket is hot when its packets (its overridden flows' aside) are at
    /// least this fraction of an average core's.
    pub hot_share: f64,
    /// Most hot buckets at once (the heaviest).
    pub max_hot: usize,
    /// A flow is an elephant, given to the balancer, when its estimated
    /// load is at least this fraction of an average core's.
    pub elephant_share: f64,
    /// Most elephants given to the balancer (the heaviest).
    pub max_elephants: usize,
    /// An override whose flow sent nothing for this many rounds is freed.
    pub idle_rounds: u32,
    /// oRSS's balancer rules: threshold, margin, overshoot, cooldown.
    pub balancer: BalancerParams,
}

impl Default for OverrideConfig {
    fn default() -> Self {
        Self {
            max_overrides: 64,
            hot_share: 0.1,
            max_hot: 16,
            elephant_share: 0.05,
            max_elephants: 64,
            idle_rounds: 20,
            balancer: BalancerParams::default(),
        }
    }
}

impl OverrideConfig {
    /// Checks the knobs' ranges; the error names the knob.
    pub fn validate(&self) -> Result<(), BalanceError> {
        let bad = |setting, expected| Err(BalanceError::BadConfig { setting, expected });
        if self.max_overrides > MAX_OVERRIDES {
            return bad(Setting::MaxOverrides, "at most 65536");
        }
        let share = |x: f64| x.is_finite() && x > 0.0 && x <= 1.0;
        if !share(self.hot_share) || !share(self.elephant_share) || self.max_hot == 0 {
            return bad(
                Setting::ElephantDetection,
                "hot and elephant shares in (0, 1]",
            );
        }
        if self.idle_rounds == 0 || self.max_elephants == 0 {
            return bad(
                Setting::ElephantDetection,
                "at least one hot bucket, idle round and elephant",
            );
        }
        Ok(())
    }
}

/// A flow counted in a hot bucket over the last interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowCount<K> {
    /// The flow, as the data path names it.
    pub key: K,
    /// Its bucket.
    pub bucket: usize,
    /// Its packets over the interval.
    pub packets: u64,
}

/// An overridden flow over the last interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverrideCount<K> {
    /// The flow.
    pub key: K,
    /// Its packets over the interval.
    pub packets: u64,
    /// Its override is not in handoff (it may move or be freed).
    pub settled: bool,
}

/// What the data path measured over one interval, and its table.
#[derive(Debug, Clone, Copy)]
pub struct RoundInput<'a, K> {
    /// Bucket → core, as it will be once this round's bucket moves are
    /// done.
    pub table: &'a [usize],
    /// Buckets in handoff or moved this round: their flows are not
    /// settled on a core, and may not get an override now. Sorted.
    pub held: &'a [usize],
    /// Packets per bucket, overridden flows included.
    pub bucket_packets: &'a [u64],
    /// Packets per core.
    pub core_packets: &'a [u64],
    /// Flows counted in the hot buckets, overridden ones excepted.
    pub counted: &'a [FlowCount<K>],
    /// Every overridden flow.
    pub overridden: &'a [OverrideCount<K>],
}

/// One flow to steer on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowMove<K> {
    /// The flow.
    pub key: K,
    /// Its bucket.
    pub bucket: usize,
    /// The core it is on now.
    pub from: usize,
    /// The core it goes to.
    pub to: usize,
}

/// Why an override is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Free {
    /// Its flow sent nothing for [`OverrideConfig::idle_rounds`] rounds.
    Idle,
    /// Its bucket is on its core: the table steers it there anyway.
    Redundant,
}

/// What one round decided.
#[derive(Debug, Clone, PartialEq)]
pub struct OverridePlan<K> {
    /// Buckets whose flows the data path counts until the next round,
    /// sorted.
    pub hot: Vec<usize>,
    /// New overrides: flows leaving their bucket's core.
    pub add: Vec<FlowMove<K>>,
    /// Overridden flows going to another core.
    pub moves: Vec<FlowMove<K>>,
    /// Overrides to delete.
    pub free: Vec<(K, Free)>,
    /// Flows the balancer was given.
    pub elephants: usize,
    /// Moves the plain algorithm would have made back (ping-pong).
    pub bounces_prevented: u64,
    /// Average squared imbalance of the elephants' loads, before and after.
    pub asi_before: f64,
    /// See `asi_before`.
    pub asi_after: f64,
}

impl<K> Default for OverridePlan<K> {
    fn default() -> Self {
        Self {
            hot: Vec::new(),
            add: Vec::new(),
            moves: Vec::new(),
            free: Vec::new(),
            elephants: 0,
            bounces_prevented: 0,
            asi_before: 0.0,
            asi_after: 0.0,
        }
    }
}

/// Packets of the buckets without their overridden flows, and the
/// overridden flows' packets by the core they are steered to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Per bucket.
    pub bucket_packets: Vec<u64>,
    /// Per core: packets no bucket carries.
    pub fixed_packets: Vec<u64>,
}

#[derive(Debug, Clone)]
struct Tracked<K> {
    key: K,
    bucket: usize,
    /// The core of its override, if it has one.
    core: Option<usize>,
    /// Rounds in a row its override counted nothing.
    idle: u32,
}

/// The override controller for one table.
#[derive(Debug, Clone)]
pub struct Overrides<K> {
    config: OverrideConfig,
    slots: Vec<Option<Tracked<K>>>,
    free_slots: Vec<u32>,
    by_key: HashMap<K, u32>,
    loads: FlowLoads,
    balancer: Balancer,
    in_use: usize,
    moved: u64,
    estimates: Vec<(u32, f64)>,
}

impl<K: Copy + Eq + Hash> Overrides<K> {
    /// A controller with no override.
    pub fn new(config: OverrideConfig) -> Self {
        Self {
            balancer: Balancer::new(config.balancer),
            config,
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_key: HashMap::new(),
            // Packets per round: normalised each round by the average core's.
            loads: FlowLoads::new(1),
            in_use: 0,
            moved: 0,
            estimates: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &OverrideConfig {
        &self.config
    }

    /// Overrides in use.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Flows given an override or moved to another core so far.
    pub fn moved_total(&self) -> u64 {
        self.moved
    }

    /// `--churn`'s share for overrides: moves one overridden flow to
    /// another core of `table`, whatever the load, and adds the move to
    /// `plan` (this round's, which the data path carries out in order, as
    /// the balancer's moves). The flow is drawn among those out of `plan`,
    /// their bucket not `held` (ascending), that `movable` allows (the data
    /// path's: settled). The balancer may move it back.
    pub fn churn(
        &mut self,
        rng: &mut SplitMix64,
        table: &[usize],
        held: &[usize],
        plan: &mut OverridePlan<K>,
        movable: impl Fn(&K) -> bool,
    ) -> Option<FlowMove<K>> {
        let planned = |key: &K| {
            plan.moves.iter().any(|m| m.key == *key) || plan.free.iter().any(|(k, _)| k == key)
        };
        let candidates: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.as_ref().is_some_and(|t| {
                    t.core.is_some()
                        && held.binary_search(&t.bucket).is_err()
                        && !planned(&t.key)
                        && movable(&t.key)
                })
            })
            .map(|(slot, _)| slot)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let t = self.slots[candidates[rng.below(candidates.len())]]
            .as_mut()
            .expect("a candidate");
        let from = t.core.expect("overridden");
        let mut others: Vec<usize> = table.iter().copied().filter(|&c| c != from).collect();
        others.sort_unstable();
        others.dedup();
        if others.is_empty() {
            return None;
        }
        let to = others[rng.below(others.len())];
        t.core = Some(to);
        t.idle = 0;
        self.moved += 1;
        let m = FlowMove {
            key: t.key,
            bucket: t.bucket,
            from,
            to,
        };
        plan.moves.push(m);
        Some(m)
    }

    /// The core of `key`'s override, if it has one.
    pub fn core_of(&self, key: &K) -> Option<usize> {
        let &slot = self.by_key.get(key)?;
        self.slots[slot as usize].as_ref()?.core
    }

    /// The bucket counts without the overridden flows' packets, and those
    /// packets as load fixed to each of `cores` cores: what the bucket
    /// rebalancer is to see.
    pub fn split(
        &self,
        bucket_packets: &[u64],
        overridden: &[OverrideCount<K>],
        cores: usize,
    ) -> Split {
        let mut split = Split {
            bucket_packets: bucket_packets.to_vec(),
            fixed_packets: vec![0; cores],
        };
        for o in overridden {
            let Some(t) = self
                .by_key
                .get(&o.key)
                .and_then(|&s| self.slots[s as usize].as_ref())
            else {
                continue;
            };
            let (Some(core), Some(b)) = (t.core, split.bucket_packets.get_mut(t.bucket)) else {
                continue;
            };
            // The two counters are read a moment apart.
            let packets = o.packets.min(*b);
            *b -= packets;
            if let Some(f) = split.fixed_packets.get_mut(core) {
                *f += packets;
            }
        }
        split
    }

    fn track(&mut self, key: K, bucket: usize) -> Option<u32> {
        if let Some(&slot) = self.by_key.get(&key) {
            return Some(slot);
        }
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None if self.slots.len() < MAX_TRACKED => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        // A new flow in an old slot: nothing of the old one carries over.
        self.loads.forget(slot);
        self.balancer.forget(slot);
        self.slots[slot as usize] = Some(Tracked {
            key,
            bucket,
            core: None,
            idle: 0,
        });
        self.by_key.insert(key, slot);
        Some(slot)
    }

    fn untrack(&mut self, slot: u32) {
        if let Some(t) = self.slots[slot as usize].take() {
            self.by_key.remove(&t.key);
            self.free_slots.push(slot);
        }
    }

    /// One round: takes the interval's counts, and decides which buckets to
    /// count per flow, which flows to give an override or move, and which
    /// overrides to free. The plan is the controller's state from now on:
    /// the caller applies all of it.
    pub fn round(&mut self, input: &RoundInput<'_, K>) -> OverridePlan<K> {
        let mut plan = OverridePlan::default();
        let cores = input.core_packets.len();
        let total: u64 = input.core_packets.iter().sum();
        let mean = total as f64 / cores.max(1) as f64;
        let held = |b: usize| input.held.binary_search(&b).is_ok();

        // Counts in.
        let mut settled = HashMap::with_capacity(input.overridden.len());
        for o in input.overridden {
            let Some(&slot) = self.by_key.get(&o.key) else {
                continue;
            };
            let Some(t) = self.slots[slot as usize].as_mut() else {
                continue;
            };
            if t.core.is_none() {
                continue;
            }
            t.idle = if o.packets == 0 { t.idle + 1 } else { 0 };
            settled.insert(slot, o.settled);
            self.loads
                .add(slot, o.packets.min(u64::from(u32::MAX)) as u32);
        }
        for c in input.counted {
            if c.packets == 0 || self.core_of(&c.key).is_some() {
                continue;
            }
            if let Some(slot) = self.track(c.key, c.bucket) {
                self.loads
                    .add(slot, c.packets.min(u64::from(u32::MAX)) as u32);
            }
        }
        self.estimates.clear();
        self.loads.end_round(&mut self.estimates);
        let mut estimate: HashMap<u32, f64> = self.estimates.iter().copied().collect();
        // Flows not counted for the estimate's whole horizon are forgotten,
        // unless overridden (an idle override is freed below).
        for slot in 0..self.slots.len() as u32 {
            let gone = matches!(&self.slots[slot as usize], Some(t) if t.core.is_none())
                && !estimate.contains_key(&slot);
            if gone {
                self.untrack(slot);
            }
        }

        // Frees: settled overrides only.
        for slot in 0..self.slots.len() as u32 {
            let Some(t) = self.slots[slot as usize].as_mut() else {
                continue;
            };
            let Some(core) = t.core else { continue };
            if !settled.get(&slot).copied().unwrap_or(true) {
                continue;
            }
            let why = if t.idle >= self.config.idle_rounds {
                Free::Idle
            } else if input.table.get(t.bucket) == Some(&core) && !held(t.bucket) {
                Free::Redundant
            } else {
                continue;
            };
            t.core = None;
            t.idle = 0;
            self.in_use -= 1;
            plan.free.push((t.key, why));
            if why == Free::Idle {
                estimate.remove(&slot);
                self.untrack(slot);
            }
        }

        // Hot buckets: the heaviest, their overridden flows aside.
        let mut residual = input.bucket_packets.to_vec();
        for o in input.overridden {
            if let Some(t) = self
                .by_key
                .get(&o.key)
                .and_then(|&s| self.slots[s as usize].as_ref())
            {
                if let Some(b) = residual.get_mut(t.bucket) {
                    *b = b.saturating_sub(o.packets);
                }
            }
        }
        let mut heavy: Vec<(usize, u64)> = residual
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, p)| p > 0 && p as f64 >= self.config.hot_share * mean)
            .collect();
        heavy.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        plan.hot = heavy
            .iter()
            .take(self.config.max_hot)
            .map(|&(b, _)| b)
            .collect();
        plan.hot.sort_unstable();

        if mean <= 0.0 || cores < 2 {
            return plan;
        }
        // The elephants, each on the core it is on now.
        let full = self.in_use >= self.config.max_overrides;
        let mut flows: Vec<FlowLoad> = Vec::new();
        for (&slot, &ema) in &estimate {
            let Some(t) = self.slots[slot as usize].as_ref() else {
                continue;
            };
            let load = ema / mean;
            let (core, pinned) = match t.core {
                Some(core) => (core, !settled.get(&slot).copied().unwrap_or(true)),
                None => {
                    if load < self.config.elephant_share {
                        continue;
                    }
                    let Some(&core) = input.table.get(t.bucket) else {
                        continue;
                    };
                    (core, full || held(t.bucket))
                }
            };
            if core >= cores {
                continue;
            }
            flows.push(FlowLoad {
                flow: slot,
                core,
                load,
                pinned,
            });
        }
        // The heaviest, overridden ones first; a fixed order for the
        // balancer's ties.
        flows.sort_by(|a, b| {
            let over = |f: &FlowLoad| self.slots[f.flow as usize].as_ref().and_then(|t| t.core);
            over(b)
                .is_some()
                .cmp(&over(a).is_some())
                .then(b.load.total_cmp(&a.load))
                .then(a.flow.cmp(&b.flow))
        });
        flows.truncate(
            self.config.max_elephants.max(
                flows
                    .iter()
                    .filter(|f| {
                        self.slots[f.flow as usize]
                            .as_ref()
                            .and_then(|t| t.core)
                            .is_some()
                    })
                    .count(),
            ),
        );
        plan.elephants = flows.len();
        let balanced = self.balancer.round(cores, &flows);
        plan.bounces_prevented = balanced.bounces_prevented;
        plan.asi_before = balanced.asi_before;
        plan.asi_after = balanced.asi_after;
        for m in balanced.moves {
            let Some(t) = self.slots[m.flow as usize].as_mut() else {
                continue;
            };
            let mv = FlowMove {
                key: t.key,
                bucket: t.bucket,
                from: m.from,
                to: m.to,
            };
            if t.core.is_some() {
                t.core = Some(m.to);
                plan.moves.push(mv);
            } else if self.in_use < self.config.max_overrides {
                t.core = Some(m.to);
                t.idle = 0;
                self.in_use += 1;
                plan.add.push(mv);
            }
        }
        self.moved += (plan.add.len() + plan.moves.len()) as u64;
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `buckets` over two cores (bucket i → core i % 2), flows
    /// with fixed packet rates per round, and a data path that applies the
    /// plans at once.
    struct Sim {
        table: Vec<usize>,
        /// (key, bucket, packets per round)
        flows: Vec<(u32, usize, u64)>,
        overrides: HashMap<u32, usize>,
        hot: Vec<usize>,
        held: Vec<usize>,
        cores: usize,
    }

    impl Sim {
        fn new(buckets: usize, cores: usize, flows: Vec<(u32, usize, u64)>) -> Self {
            Self {
                table: (0..buckets).map(|b| b % cores).collect(),
                flows,
                overrides: HashMap::new(),
                hot: Vec::new(),
                held: Vec::new(),
                cores,
            }
        }

        fn core_of(&self, key: u32, bucket: usize) -> usize {
            self.overrides
                .get(&key)
                .copied()
                .unwrap_or(self.table[bucket])
        }

        fn core_packets(&self) -> Vec<u64> {
            let mut c = vec![0; self.cores];
            for &(k, b, p) in &self.flows {
                c[self.core_of(k, b)] += p;
            }
            c
        }

        fn step(&mut self, o: &mut Overrides<u32>) -> OverridePlan<u32> {
            let mut buckets = vec![0; self.table.len()];
            for &(_, b, p) in &self.flows {
                buckets[b] += p;
            }
            let counted: Vec<FlowCount<u32>> = self
                .flows
                .iter()
                .filter(|(k, b, _)| self.hot.contains(b) && !self.overrides.contains_key(k))
                .map(|&(key, bucket, packets)| FlowCount {
                    key,
                    bucket,
                    packets,
                })
                .collect();
            let overridden: Vec<OverrideCount<u32>> = self
                .overrides
                .keys()
                .map(|&k| OverrideCount {
                    key: k,
                    packets: self.flows.iter().find(|f| f.0 == k).map_or(0, |f| f.2),
                    settled: true,
                })
                .collect();
            let core_packets = self.core_packets();
            let plan = o.round(&RoundInput {
                table: &self.table,
                held: &self.held,
                bucket_packets: &buckets,
                core_packets: &core_packets,
                counted: &counted,
                overridden: &overridden,
            });
            for m in plan.add.iter().chain(&plan.moves) {
                assert_eq!(self.core_of(m.key, m.bucket), m.from, "{m:?}");
                self.overrides.insert(m.key, m.to);
            }
            for (k, _) in &plan.free {
                self.overrides.remove(k).expect("freed an override it had");
            }
            self.hot = plan.hot.clone();
            plan
        }
    }

    /// Two elephants in bucket 0, 256 mice over the other buckets.
    fn two_elephants() -> Vec<(u32, usize, u64)> {
        let mut flows = vec![(1, 0, 3_500), (2, 0, 3_500)];
        flows.extend((0..256u32).map(|i| (100 + i, 1 + (i as usize % 127), 10)));
        flows
    }

    #[test]
    fn two_elephants_in_one_bucket_are_split() {
        let mut sim = Sim::new(128, 2, two_elephants());
        let mut o = Overrides::new(OverrideConfig::default());
        // Round 1: no flow counted yet; bucket 0 is found hot.
        let first = sim.step(&mut o);
        assert_eq!(first.hot, vec![0]);
        assert!(first.add.is_empty());
        // Round 2: its flows counted, one elephant gets the other core.
        let second = sim.step(&mut o);
        assert_eq!(second.add.len(), 1, "{second:?}");
        let m = second.add[0];
        assert_eq!((m.bucket, m.from, m.to), (0, 0, 1));
        assert_eq!(o.in_use(), 1);
        // From then on: nothing moves, nothing is freed; the mice were
        // never counted (their buckets are not hot).
        for _ in 0..50 {
            let p = sim.step(&mut o);
            assert!(
                p.add.is_empty() && p.moves.is_empty() && p.free.is_empty(),
                "{p:?}"
            );
            assert_eq!(p.hot, vec![0], "the other elephant's bucket stays hot");
        }
        assert_eq!(o.moved_total(), 1);
        let c = sim.core_packets();
        let elephants_on = |core| {
            [1u32, 2]
                .iter()
                .filter(|&&k| sim.core_of(k, 0) == core)
                .count()
        };
        assert_eq!((elephants_on(0), elephants_on(1)), (1, 1), "{c:?}");
    }

    #[test]
    fn churn_moves_an_overridden_flow_it_may_move_to_another_core() {
        let mut sim = Sim::new(128, 2, two_elephants());
        let mut o = Overrides::new(OverrideConfig::default());
        let mut rng = SplitMix64::new(7);
        let table = sim.table.clone();
        // No override yet: nothing to churn.
        let mut plan = sim.step(&mut o);
        assert_eq!(o.churn(&mut rng, &table, &[], &mut plan, |_| true), None);
        let mut plan = sim.step(&mut o);
        let (&key, &core) = sim.overrides.iter().next().expect("one override");
        // Not movable (in handoff, say), or its bucket held, or in the
        // plan already: left alone.
        assert_eq!(o.churn(&mut rng, &table, &[], &mut plan, |_| false), None);
        assert_eq!(o.churn(&mut rng, &table, &[0], &mut plan, |_| true), None);
        let mut freeing = OverridePlan::default();
        freeing.free.push((key, Free::Idle));
        assert_eq!(o.churn(&mut rng, &table, &[], &mut freeing, |_| true), None);
        // One core only: nowhere to go.
        assert_eq!(o.churn(&mut rng, &[core], &[], &mut plan, |_| true), None);
        let m = o
            .churn(&mut rng, &table, &[], &mut plan, |_| true)
            .expect("a move");
        assert_eq!((m.key, m.bucket, m.from, m.to), (key, 0, core, 1 - core));
        assert_eq!(plan.moves.last(), Some(&m), "added to the plan");
        assert_eq!(o.core_of(&key), Some(1 - core));
        assert_eq!(o.moved_total(), 2);
    }

    #[test]
    fn split_takes_overridden_packets_out_of_their_buckets() {
        let mut sim = Sim::new(128, 2, two_elephants());
        let mut o = Overrides::new(OverrideConfig::default());
        sim.step(&mut o);
        sim.step(&mut o);
        let key = *sim.overrides.keys().next().unwrap();
        let mut buckets = vec![0u64; 128];
        buckets[0] = 7_000;
        buckets[1] = 30;
        let over = [OverrideCount {
            key,
            packets: 3_500,
            settled: true,
        }];
        let s = o.split(&buckets, &over, 2);
        assert_eq!(s.bucket_packets[0], 3_500);
        assert_eq!(s.bucket_packets[1], 30);
        assert_eq!(s.fixed_packets, vec![0, 3_500]);
        // An override that counted more than its bucket (read a moment
        // later) takes the bucket to zero, not below.
        let over = [OverrideCount {
            key,
            packets: 9_000,
            settled: true,
        }];
        assert_eq!(o.split(&buckets, &over, 2).bucket_packets[0], 0);
    }

    #[test]
    fn idle_overrides_are_freed_and_redundant_ones_too() {
        let mut sim = Sim::new(128, 2, two_elephants());
        let config = OverrideConfig {
            idle_rounds: 5,
            ..OverrideConfig::default()
        };
        let mut o = Overrides::new(config);
        sim.step(&mut o);
        sim.step(&mut o);
        let key = *sim.overrides.keys().next().unwrap();
        // The overridden elephant stops.
        sim.flows.retain(|f| f.0 != key);
        let mut freed_at = None;
        for round in 1..=10 {
            let p = sim.step(&mut o);
            if !p.free.is_empty() {
                assert_eq!(p.free, vec![(key, Free::Idle)]);
                freed_at = Some(round);
                break;
            }
        }
        assert_eq!(freed_at, Some(5));
        assert_eq!(o.in_use(), 0);

        // Redundant: the bucket is moved to the override's core.
        let mut sim = Sim::new(128, 2, two_elephants());
        let mut o = Overrides::new(OverrideConfig::default());
        sim.step(&mut o);
        sim.step(&mut o);
        let (&key, &core) = sim.overrides.iter().next().unwrap();
        // Still in handoff: kept.
        sim.table[0] = core;
        sim.held = vec![0];
        let p = sim.step(&mut o);
        assert!(p.free.is_empty(), "{p:?}");
        sim.held.clear();
        let p = sim.step(&mut o);
        assert_eq!(p.free, vec![(key, Free::Redundant)]);
    }

    #[test]
    fn at_most_max_overrides_and_held_buckets_wait() {
        // Four elephants in bucket 0, four cores; one override allowed.
        let mut flows: Vec<(u32, usize, u64)> = (1..=4).map(|k| (k, 0, 1_000)).collect();
        flows.extend((0..64u32).map(|i| (100 + i, 1 + i as usize, 10)));
        let mut sim = Sim::new(128, 4, flows.clone());
        let config = OverrideConfig {
            max_overrides: 1,
            ..OverrideConfig::default()
        };
        let mut o = Overrides::new(config);
        for _ in 0..20 {
            sim.step(&mut o);
            assert!(o.in_use() <= 1);
        }
        assert_eq!(sim.overrides.len(), 1);

        // Bucket 0 in handoff: its flows get no override until settled.
        let mut sim = Sim::new(128, 4, flows);
        let mut o = Overrides::new(OverrideConfig::default());
        sim.held = vec![0];
        for _ in 0..5 {
            let p = sim.step(&mut o);
            assert!(p.add.is_empty(), "{p:?}");
        }
        sim.held.clear();
        let p = sim.step(&mut o);
        assert!(!p.add.is_empty());
    }

    #[test]
    fn elephants_spread_and_never_go_back() {
        // Six elephants of uneven rates in two buckets, three cores.
        let rates = [900, 700, 650, 500, 300, 200];
        let mut flows: Vec<(u32, usize, u64)> = rates
            .iter()
            .enumerate()
            .map(|(i, &r)| (i as u32 + 1, 3 * (i % 2), r))
            .collect();
        flows.extend((0..128u32).map(|i| (100 + i, 1 + (i as usize % 127), 5)));
        let mut sim = Sim::new(128, 3, flows);
        let mut o = Overrides::new(OverrideConfig::default());
        let mut history: HashMap<u32, Vec<usize>> = HashMap::new();
        let mut moves_by_round = Vec::new();
        for _ in 0..80 {
            let p = sim.step(&mut o);
            for m in p.add.iter().chain(&p.moves) {
                history
                    .entry(m.key)
                    .or_insert_with(|| vec![m.from])
                    .push(m.to);
            }
            moves_by_round.push(p.add.len() + p.moves.len());
        }
        for (k, h) in &history {
            for w in h.windows(3) {
                assert_ne!(w[0], w[2], "flow {k} went back: {h:?}");
            }
        }
        assert!(
            moves_by_round[40..].iter().all(|&m| m == 0),
            "{moves_by_round:?}"
        );
        // All on core 0 at first; then every core within 25% of the mean
        // (the greedy balancer, which moves no flow of nearly a gap, stops
        // short of the best packing).
        let mut per_core = [0.0f64; 3];
        for &(k, b, p) in sim.flows.iter().filter(|f| f.0 < 100) {
            per_core[sim.core_of(k, b)] += p as f64;
        }
        let mean = per_core.iter().sum::<f64>() / 3.0;
        assert!(
            per_core.iter().all(|&l| (l - mean).abs() < 0.25 * mean),
            "{per_core:?}"
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(OverrideConfig::default().validate().is_ok());
        let c = OverrideConfig {
            max_overrides: MAX_OVERRIDES + 1,
            ..OverrideConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(BalanceError::BadConfig {
                setting: Setting::MaxOverrides,
                ..
            })
        ));
    }
}
