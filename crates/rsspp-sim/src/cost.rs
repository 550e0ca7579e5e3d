//! What a packet costs a core: a fixed part, the configurable work (the
//! paper's W pseudo-random numbers), and the access to its flow's state,
//! whose cost depends on where that state is.
//!
//! State model: each core caches the states of a few recently touched flows
//! (a direct-mapped cache of `cache_flows` entries). A flow whose state is in
//! the core's cache is a hit; one whose state sits in another core's cache
//! (its last user — after a migration, or with flow-unaware dispatching) is a
//! remote transfer; anything else is a miss to memory. Back-to-back packets
//! of a flow hit, so the cost per packet falls with spatial locality as
//! Reframer measured (`α / SLF + β`). A shared flow table adds a lock per
//! access on one of its stripes (the stripe's line moves between cores) and
//! serialises concurrent packets of one flow.

use serde::Serialize;

use crate::packet::{mix32, Ns, SimPacket};

/// What the network function does with its flow's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateAccess {
    /// No per-flow state (the paper's W-only fairness test).
    None,
    /// Reads and writes a per-flow entry (a NAT, flow statistics).
    Write,
}

/// Where a policy keeps flow state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateTable {
    /// One table per core or per RSS bucket: no lock, a flow's state is
    /// touched by one core at a time.
    Sharded,
    /// One table for all cores, with lock stripes.
    Shared,
}

/// The cost model's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostModel {
    /// Core clock, GHz.
    pub clock_ghz: f64,
    /// Fixed cycles per packet (receive and transmit descriptors, parsing).
    pub packet_cycles: u32,
    /// Cycles per non-empty poll of a queue.
    pub batch_cycles: u32,
    /// W: pseudo-random numbers generated per packet.
    pub work: u32,
    /// Cycles per unit of W (8 in the paper).
    pub cycles_per_work: u32,
    /// Per-flow service-time skew: 0 gives every flow the same work; σ > 0
    /// multiplies a flow's work by a log-normal factor of mean 1.
    pub work_skew: f64,
    /// Per-flow state access.
    pub state: StateAccess,
    /// Flows whose state a core keeps cached.
    pub cache_flows: u32,
    /// Cycles of a state access that hits the core's cache.
    pub hit_cycles: u32,
    /// Cycles of a state access that misses to memory.
    pub miss_cycles: u32,
    /// Cycles of a state access whose line sits in another core's cache.
    pub remote_cycles: u32,
    /// Cycles of taking an uncontended lock stripe of a shared table.
    pub lock_cycles: u32,
    /// Lock stripes of a shared table.
    pub stripes: u32,
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            clock_ghz: 2.3,
            packet_cycles: 250,
            batch_cycles: 100,
            work: 600,
            cycles_per_work: 8,
            work_skew: 0.0,
            state: StateAccess::Write,
            cache_flows: 512,
            hit_cycles: 20,
            miss_cycles: 250,
            remote_cycles: 350,
            lock_cycles: 40,
            stripes: 1024,
        }
    }
}

impl CostModel {
    /// Nanoseconds for `cycles`.
    pub fn ns(&self, cycles: u64) -> Ns {
        round_half_up(to_f64(cycles) / self.clock_ghz)
    }

    /// The work cycles of a packet (its flow's skew factor applied).
    pub fn work_cycles(&self, p: &SimPacket) -> u64 {
        let base = u64::from(self.work) * u64::from(self.cycles_per_work);
        if self.work_skew <= 0.0 || base == 0 {
            return base;
        }
        (base as f64 * skew_factor(p.salt, self.work_skew)).round() as u64
    }

    /// Average cycles per packet assuming every state access misses: a
    /// first guess of the cost, before anything is simulated.
    pub fn nominal_cycles(&self) -> f64 {
        let state = match self.state {
            StateAccess::None => 0.0,
            StateAccess::Write => f64::from(self.miss_cycles),
        };
        f64::from(self.packet_cycles)
            + f64::from(self.work) * f64::from(self.cycles_per_work)
            + state
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.clock_ghz.is_finite() && self.clock_ghz > 0.0 && self.clock_ghz <= 10.0) {
            return Err(format!(
                "clock must be in (0, 10] GHz, got {}",
                self.clock_ghz
            ));
        }
        if !(self.work_skew.is_finite() && (0.0..=4.0).contains(&self.work_skew)) {
            return Err(format!(
                "work skew must be in [0, 4], got {}",
                self.work_skew
            ));
        }
        if self.cache_flows == 0 || !self.cache_flows.is_power_of_two() {
            return Err(format!(
                "cached flows per core must be a power of two, got {}",
                self.cache_flows
            ));
        }
        if self.stripes == 0 {
            return Err("a shared table needs at least one lock stripe".into());
        }
        if self.nominal_cycles() < 1.0 {
            return Err("a packet must cost at least one cycle".into());
        }
        Ok(())
    }
}

/// [`CostModel::ns`] remembered for the few cycle counts a run keeps asking
/// for (a packet's fixed part and work, each kind of state access, a
/// poll): a direct-mapped table of the last answers, the same values.
#[derive(Debug, Clone)]
pub(crate) struct NsMemo {
    /// Slot `cycles % SLOTS`: the cycles it holds the answer for.
    cycles: [u64; NsMemo::SLOTS],
    ns: [Ns; NsMemo::SLOTS],
}

impl NsMemo {
    const SLOTS: usize = 32;

    pub(crate) fn new() -> Self {
        // Each slot starts with a count that belongs to another slot, so
        // that nothing is found before it is computed.
        let mut cycles = [0; Self::SLOTS];
        cycles[0] = 1;
        Self {
            cycles,
            ns: [0; Self::SLOTS],
        }
    }

    /// `cost.ns(cycles)`.
    pub(crate) fn ns(&mut self, cost: &CostModel, cycles: u64) -> Ns {
        let i = cycles as usize % Self::SLOTS;
        if self.cycles[i] != cycles {
            self.cycles[i] = cycles;
            self.ns[i] = cost.ns(cycles);
        }
        self.ns[i]
    }
}

/// `x.round() as u64` for `x ≥ 0`, without the call to libm's `round` (the
/// simulator's hottest arithmetic): the integer part, plus one when the
/// fraction is at least a half. Both steps are exact: below 2⁵³ the integer
/// part is a float and `x` minus it loses nothing; above, `x` is an integer
/// and converts as it is (saturating, as `as` does).
fn round_half_up(x: f64) -> u64 {
    if x >= 9.2e18 {
        return x as u64;
    }
    // Through i64, which holds it: one instruction each way on x86-64, where
    // u64 conversions take several.
    let whole = x as i64 as u64;
    if x - to_f64(whole) >= 0.5 {
        whole + 1
    } else {
        whole
    }
}

/// `v as f64`, through i64 where it fits (the same value: one instruction).
fn to_f64(v: u64) -> f64 {
    match i64::try_from(v) {
        Ok(v) => v as f64,
        Err(_) => v as f64,
    }
}

/// A log-normal factor of mean 1 and shape `sigma`, drawn from `salt`.
fn skew_factor(salt: u32, sigma: f64) -> f64 {
    // Irwin-Hall: the sum of four uniforms, centred and scaled, is close
    // enough to a standard normal for a service-time spread.
    let mut h = salt;
    let mut sum = 0.0;
    for _ in 0..4 {
        h = mix32(h.wrapping_add(0x9e37_79b9));
        sum += f64::from(h) / f64::from(u32::MAX);
    }
    let z = (sum - 2.0) / (4.0f64 / 12.0).sqrt();
    (sigma * z - sigma * sigma / 2.0).exp()
}

/// Kinds of state access, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AccessCounts {
    /// Hits in the core's cache.
    pub hits: u64,
    /// Misses to memory.
    pub misses: u64,
    /// Transfers from another core's cache.
    pub remote: u64,
    /// Nanoseconds spent waiting for a flow locked by another core.
    pub lock_wait_ns: u64,
}

/// The caches and ownership the cost of state accesses depends on.
#[derive(Debug, Clone)]
pub struct StateModel {
    cache_mask: u32,
    /// `[core * cache_flows + slot]`: the flow cached there, or `u32::MAX`.
    cache: Vec<u32>,
    /// Per flow: the core that last touched its state (`u8::MAX`: none).
    last_core: Vec<u8>,
    /// Per flow: when its lock is held, `[from, until)` (shared table only).
    /// Batches are costed when they start, so a core may reserve the lock
    /// for a later instant than another core asks for it: only a request
    /// inside the interval waits.
    locked: Vec<(Ns, Ns)>,
    /// Per stripe of the shared table: the core that last took it.
    stripe_owner: Vec<u8>,
    cores: usize,
    counts: AccessCounts,
}

impl StateModel {
    /// The model for `cores` cores.
    pub fn new(cost: &CostModel, cores: usize) -> Self {
        assert!(cores < usize::from(u8::MAX), "at most 254 cores");
        Self {
            cache_mask: cost.cache_flows - 1,
            cache: vec![u32::MAX; cores * cost.cache_flows as usize],
            last_core: Vec::new(),
            locked: Vec::new(),
            stripe_owner: vec![u8::MAX; cost.stripes as usize],
            cores,
            counts: AccessCounts::default(),
        }
    }

    /// Counts so far.
    pub fn counts(&self) -> AccessCounts {
        self.counts
    }

    fn ensure(&mut self, flow: u32) {
        let need = flow as usize + 1;
        if self.last_core.len() < need {
            let len = need.next_power_of_two();
            self.last_core.resize(len, u8::MAX);
            self.locked.resize(len, (0, 0));
        }
    }

    /// A new flow took number `flow`: its previous owner's state is gone.
    pub fn forget(&mut self, flow: u32) {
        if let Some(c) = self.last_core.get_mut(flow as usize) {
            *c = u8::MAX;
        }
    }

    /// Asks the host to bring what [`Self::access`] reads of `flow` on
    /// `core` to the cache.
    #[inline]
    pub(crate) fn prefetch(&self, table: StateTable, core: usize, flow: u32) {
        use crate::metrics::prefetch;
        prefetch(self.last_core.get(flow as usize));
        let slot = (flow & self.cache_mask) as usize;
        prefetch(self.cache.get(core * (self.cache_mask as usize + 1) + slot));
        if table == StateTable::Shared {
            prefetch(self.locked.get(flow as usize));
        }
    }

    /// Cycles core `core` spends on `flow`'s state at time `now`, and the
    /// nanoseconds it first waits for the flow's lock (shared table only).
    /// The lock is held for the access itself plus `busy_for` (0 for an
    /// update under the lock; a packet's whole processing time for a
    /// network function that must process a flow's packets one at a time).
    pub fn access(
        &mut self,
        cost: &CostModel,
        table: StateTable,
        core: usize,
        flow: u32,
        now: Ns,
        busy_for: Ns,
    ) -> (u64, Ns) {
        if cost.state == StateAccess::None {
            return (0, 0);
        }
        debug_assert!(core < self.cores);
        self.ensure(flow);
        let slot = (flow & self.cache_mask) as usize;
        let mine = core * (self.cache_mask as usize + 1) + slot;
        let last = self.last_core[flow as usize];
        let mut cycles = if self.cache[mine] == flow && last as usize == core {
            self.counts.hits += 1;
            u64::from(cost.hit_cycles)
        } else if last != u8::MAX
            && last as usize != core
            && self.cache[last as usize * (self.cache_mask as usize + 1) + slot] == flow
        {
            // The line moves: the other core loses it.
            self.cache[last as usize * (self.cache_mask as usize + 1) + slot] = u32::MAX;
            self.counts.remote += 1;
            u64::from(cost.remote_cycles)
        } else {
            self.counts.misses += 1;
            u64::from(cost.miss_cycles)
        };
        self.cache[mine] = flow;
        self.last_core[flow as usize] = core as u8;
        let mut wait = 0;
        if table == StateTable::Shared {
            let stripe = (mix32(flow) % cost.stripes) as usize;
            cycles += if self.stripe_owner[stripe] as usize == core {
                u64::from(cost.lock_cycles)
            } else {
                u64::from(cost.remote_cycles)
            };
            self.stripe_owner[stripe] = core as u8;
            let (from, until) = self.locked[flow as usize];
            if from <= now && now < until {
                wait = until - now;
                self.counts.lock_wait_ns += wait;
            }
            let start = now + wait;
            if start >= from {
                self.locked[flow as usize] = (start, start + cost.ns(cycles) + busy_for);
            }
        }
        (cycles, wait)
    }
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The rounding without libm gives libm's answer, halves included
        /// (odd cycle counts at 2 GHz).
        #[test]
        fn ns_rounds_as_libm_does(
            cycles in prop_oneof![0u64..100_000, any::<u64>()],
            clock_ghz in prop_oneof![Just(2.0), Just(0.5), Just(2.3), 0.001f64..10.0],
        ) {
            let cost = CostModel { clock_ghz, ..CostModel::default() };
            prop_assert_eq!(cost.ns(cycles), (cycles as f64 / clock_ghz).round() as Ns);
        }

        /// The memo answers what the cost model answers, whatever the order
        /// of the questions (slots shared by several counts included).
        #[test]
        fn memo_gives_what_ns_gives(
            asks in vec(prop_oneof![0u64..100, (0u64..40).prop_map(|k| k * 32 + 7)], 1..300),
            clock_ghz in 0.1f64..10.0,
        ) {
            let cost = CostModel { clock_ghz, ..CostModel::default() };
            let mut memo = NsMemo::new();
            for cycles in asks {
                prop_assert_eq!(memo.ns(&cost, cycles), cost.ns(cycles), "{} cycles", cycles);
            }
        }
    }

    fn model() -> (CostModel, StateModel) {
        let cost = CostModel {
            cache_flows: 4,
            ..CostModel::default()
        };
        let state = StateModel::new(&cost, 2);
        (cost, state)
    }

    #[test]
    fn back_to_back_packets_hit() {
        let (cost, mut s) = model();
        let (first, _) = s.access(&cost, StateTable::Sharded, 0, 7, 0, 0);
        let (second, _) = s.access(&cost, StateTable::Sharded, 0, 7, 10, 0);
        assert_eq!(first, u64::from(cost.miss_cycles));
        assert_eq!(second, u64::from(cost.hit_cycles));
        assert_eq!(s.counts().hits, 1);
    }

    #[test]
    fn conflicting_flows_evict_each_other() {
        let (cost, mut s) = model();
        s.access(&cost, StateTable::Sharded, 0, 1, 0, 0);
        s.access(&cost, StateTable::Sharded, 0, 5, 0, 0); // same slot (mod 4)
        let (c, _) = s.access(&cost, StateTable::Sharded, 0, 1, 0, 0);
        assert_eq!(c, u64::from(cost.miss_cycles));
    }

    #[test]
    fn state_in_another_core_is_a_remote_transfer() {
        let (cost, mut s) = model();
        s.access(&cost, StateTable::Sharded, 0, 3, 0, 0);
        let (c, _) = s.access(&cost, StateTable::Sharded, 1, 3, 0, 0);
        assert_eq!(c, u64::from(cost.remote_cycles));
        // The line left core 0: going back is a transfer again.
        let (c, _) = s.access(&cost, StateTable::Sharded, 0, 3, 0, 0);
        assert_eq!(c, u64::from(cost.remote_cycles));
        assert_eq!(s.counts().remote, 2);
    }

    #[test]
    fn shared_table_serialises_a_flow() {
        let (cost, mut s) = model();
        let (_, w0) = s.access(&cost, StateTable::Shared, 0, 9, 1_000, 500);
        assert_eq!(w0, 0);
        // Core 1 wants the same flow while core 0 holds it.
        let (_, w1) = s.access(&cost, StateTable::Shared, 1, 9, 1_100, 500);
        assert!(w1 > 400, "waited {w1}");
        assert_eq!(s.counts().lock_wait_ns, w1);
    }

    #[test]
    fn no_state_costs_nothing() {
        let cost = CostModel {
            state: StateAccess::None,
            ..CostModel::default()
        };
        let mut s = StateModel::new(&cost, 1);
        assert_eq!(s.access(&cost, StateTable::Shared, 0, 1, 0, 0), (0, 0));
    }

    #[test]
    fn skew_keeps_the_mean_and_spreads() {
        let n = 20_000u32;
        let f: Vec<f64> = (0..n).map(|i| skew_factor(mix32(i), 1.0)).collect();
        let mean = f.iter().sum::<f64>() / f64::from(n);
        assert!((mean - 1.0).abs() < 0.05, "mean {mean}");
        let max = f.iter().copied().fold(0.0, f64::max);
        assert!(max > 5.0, "max {max}");
    }
}
