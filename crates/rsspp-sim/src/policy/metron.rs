//! `metron`: traffic-class based dispatching (Metron, NSDI'18; RSS++ paper
//! §2, Figure 4c, and §5.3, Figure 11). The NIC classifies packets on a
//! field that is not the RSS input — here prefixes of
//! [`SimPacket::class_key`], the folded addresses — and sends each traffic
//! class to its core's queue, so there is no inter-core transfer and a
//! class's flows stay on one core (per-core state).
//!
//! Every control interval, a core whose load is above the target sends
//! *half of its traffic classes* — those that carried packets, chosen
//! independently of their load, which is why the RSS++ paper finds Metron
//! "too harsh" — to another core; a core with a single class first splits it
//! in two by one more prefix bit. Without auto-scaling the classes start
//! spread over all cores and go to the least loaded one; with auto-scaling
//! Metron starts on one core, an overloaded core's classes go to a newly
//! allocated core, and pairs of underloaded cores are merged to release one:
//! Metron "can only merge/split pairs of underloaded/overloaded cores".
//! A moved class's packets go to its new core from the next packet: there is
//! no migration protocol (packets still queued on the old core may finish
//! after newer ones).
//!
//! The classifier is an array over the finest prefixes ([`FINEST_BITS`]
//! bits): a packet's lookup is one index, a class covers a range of it.

use rsspp_core::measure::load_from_busy;

use crate::cost::StateTable;
use crate::mechanisms::{MetronCounters, PolicyMechanisms};
use crate::packet::{Ns, SimPacket};
use crate::system::{Cpu, Policy, PolicyConfig, System, Topology};
use crate::SimError;

/// Bits of the finest traffic classes: classes are prefixes of at most this
/// many bits of the class key.
pub const FINEST_BITS: u32 = 12;

/// Merging needs both cores under this fraction of the target load.
const MERGE_BELOW: f64 = 0.4;

/// ... and their sum under this fraction of it, so that the merged core is
/// not overloaded at the next interval (splitting and merging would
/// alternate).
const MERGE_SUM_BELOW: f64 = 0.75;

/// Most cores: the classifier stores a core in a byte.
const MAX_CORES: usize = 255;

/// A traffic class: the class keys whose first `depth` bits are `prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Class {
    depth: u32,
    prefix: u32,
}

impl Class {
    /// The finest classes it covers: a range of the classifier array.
    fn range(self) -> std::ops::Range<usize> {
        let shift = FINEST_BITS - self.depth;
        ((self.prefix as usize) << shift)..((self.prefix as usize + 1) << shift)
    }

    /// The two classes one prefix bit longer.
    fn halves(self) -> [Class; 2] {
        let depth = self.depth + 1;
        [
            Class {
                depth,
                prefix: self.prefix << 1,
            },
            Class {
                depth,
                prefix: (self.prefix << 1) | 1,
            },
        ]
    }

    /// Ordered by the key range they cover.
    fn start(self) -> usize {
        self.range().start
    }
}

/// Traffic-class based dispatching.
#[derive(Debug, Clone)]
pub struct Metron {
    topology: Topology,
    autoscale: bool,
    target_load: f64,
    interval_ns: Ns,
    next_timer: Ns,
    /// Per finest class: its core.
    core_of: Vec<u8>,
    /// Per finest class: packets in the current interval.
    packets: Vec<u32>,
    /// Per core: its classes, in key order.
    classes: Vec<Vec<Class>>,
    active: Vec<bool>,
    busy_at: Vec<Ns>,
    measured_at: Ns,
    migrations: u64,
    class_splits: u64,
    core_splits: u64,
    core_merges: u64,
    unsplittable: u64,
}

impl Metron {
    /// Metron over `config.cores` cores: the classes spread over all of
    /// them, or, with `config.autoscale`, all on core 0.
    pub fn new(config: &PolicyConfig) -> Result<Self, SimError> {
        let cores = config.cores;
        if !(1..=MAX_CORES).contains(&cores) {
            return Err(SimError::InvalidOption(format!(
                "metron needs 1 to {MAX_CORES} cores, got {cores}"
            )));
        }
        if config.interval_ns == 0 {
            return Err(SimError::InvalidOption(
                "the control interval must be positive".into(),
            ));
        }
        if !(config.target_load.is_finite() && config.target_load > 0.0) {
            return Err(SimError::InvalidOption(format!(
                "the target load must be positive, got {}",
                config.target_load
            )));
        }
        // The fewest classes that give every core one (2^d >= cores).
        let depth = cores.next_power_of_two().trailing_zeros();
        let mut classes = vec![Vec::new(); cores];
        for prefix in 0..1u32 << depth {
            let core = if config.autoscale {
                0
            } else {
                prefix as usize % cores
            };
            classes[core].push(Class { depth, prefix });
        }
        let mut metron = Self {
            topology: Topology::hardware(cores, config.queue_size),
            autoscale: config.autoscale,
            target_load: config.target_load,
            interval_ns: config.interval_ns,
            next_timer: config.interval_ns,
            core_of: vec![0; 1 << FINEST_BITS],
            packets: vec![0; 1 << FINEST_BITS],
            classes,
            active: (0..cores).map(|c| !config.autoscale || c == 0).collect(),
            busy_at: vec![0; cores],
            measured_at: 0,
            migrations: 0,
            class_splits: 0,
            core_splits: 0,
            core_merges: 0,
            unsplittable: 0,
        };
        for core in 0..cores {
            for i in 0..metron.classes[core].len() {
                let class = metron.classes[core][i];
                metron.assign(class, core);
            }
        }
        Ok(metron)
    }

    /// Points `class` at `core` in the classifier.
    fn assign(&mut self, class: Class, core: usize) {
        // `new` bounds the cores to a byte.
        self.core_of[class.range()].fill(core as u8);
    }

    /// Packets `class` carried in the current interval.
    fn traffic(&self, class: Class) -> u64 {
        self.packets[class.range()]
            .iter()
            .map(|&n| u64::from(n))
            .sum()
    }

    /// The classes of `core` that carried packets in the interval, splitting
    /// a lone one until it yields two (or cannot be split further), and the
    /// splits that took.
    fn sending_classes(&mut self, core: usize) -> (Vec<Class>, u64) {
        let mut splits = 0;
        loop {
            let sending: Vec<Class> = self.classes[core]
                .iter()
                .copied()
                .filter(|&c| self.traffic(c) > 0)
                .collect();
            if sending.len() != 1 || sending[0].depth == FINEST_BITS {
                return (sending, splits);
            }
            let lone = sending[0];
            let list = &mut self.classes[core];
            list.retain(|&c| c != lone);
            list.extend(lone.halves());
            list.sort_by_key(|c| c.start());
            splits += 1;
        }
    }

    /// Sends half of the sending classes of overloaded core `from` to
    /// `to`; false when there is nothing to split.
    fn split(&mut self, from: usize, to: usize) -> bool {
        let (sending, splits) = self.sending_classes(from);
        if sending.len() < 2 {
            // All its traffic is one finest class (one host pair): Metron
            // cannot spread it. Undo the fruitless splits.
            self.coalesce(from);
            self.unsplittable += 1;
            return false;
        }
        self.class_splits += splits;
        // The second half, in key order: Metron does not weigh the classes.
        let moved = &sending[sending.len() - sending.len() / 2..];
        for &class in moved {
            self.assign(class, to);
        }
        self.classes[from].retain(|c| !moved.contains(c));
        self.classes[to].extend_from_slice(moved);
        self.classes[to].sort_by_key(|c| c.start());
        self.migrations += moved.len() as u64;
        self.core_splits += 1;
        true
    }

    /// Moves every class of `from` to `into` and releases `from`.
    fn merge(&mut self, from: usize, into: usize) {
        let moved = std::mem::take(&mut self.classes[from]);
        for &class in &moved {
            self.assign(class, into);
        }
        self.migrations += moved.len() as u64;
        self.classes[into].extend(moved);
        self.coalesce(into);
        self.active[from] = false;
        self.core_merges += 1;
    }

    /// Joins sibling classes that ended up on the same core, so that the
    /// class count does not grow with every split and merge.
    fn coalesce(&mut self, core: usize) {
        let list = &mut self.classes[core];
        loop {
            list.sort_by_key(|c| c.start());
            let pair = list.windows(2).position(|w| {
                w[0].depth == w[1].depth && w[0].depth > 0 && w[0].prefix ^ 1 == w[1].prefix
            });
            let Some(i) = pair else { return };
            let parent = Class {
                depth: list[i].depth - 1,
                prefix: list[i].prefix >> 1,
            };
            list[i] = parent;
            list.remove(i + 1);
        }
    }

    /// The control loop: split overloaded cores, merge underloaded pairs.
    fn rebalance(&mut self, load: &[f64]) {
        let cores = load.len();
        let mut overloaded: Vec<usize> = (0..cores)
            .filter(|&c| self.active[c] && load[c] > self.target_load)
            .collect();
        overloaded.sort_by(|&a, &b| load[b].total_cmp(&load[a]).then(a.cmp(&b)));
        // A core takes part in one split or merge per interval: its
        // measured load says nothing of what it received since.
        let mut touched = vec![false; cores];
        for &from in &overloaded {
            touched[from] = true;
            // A new core when scaling (and one is left), else the least
            // loaded core that has room.
            let new_core = (0..cores)
                .find(|&c| !self.active[c])
                .filter(|_| self.autoscale);
            let to = new_core.or_else(|| {
                (0..cores)
                    .filter(|&c| self.active[c] && !touched[c] && load[c] < self.target_load)
                    .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            });
            let Some(to) = to else { continue };
            if self.split(from, to) {
                touched[to] = true;
                self.active[to] = true;
            }
        }
        if !self.autoscale {
            return;
        }
        let mut under: Vec<usize> = (0..cores)
            .filter(|&c| self.active[c] && !touched[c] && load[c] < MERGE_BELOW * self.target_load)
            .collect();
        under.sort_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
        for pair in under.chunks_exact(2) {
            let (a, b) = (pair[0], pair[1]);
            if load[a] + load[b] > MERGE_SUM_BELOW * self.target_load {
                break;
            }
            // The lower-numbered core stays, so the cores in use stay the
            // first ones.
            self.merge(a.max(b), a.min(b));
        }
    }
}

impl Policy for Metron {
    fn name(&self) -> String {
        if self.autoscale {
            "metron-autoscale".into()
        } else {
            "metron".into()
        }
    }

    fn topology(&self) -> Topology {
        self.topology.clone()
    }

    fn state_table(&self) -> StateTable {
        StateTable::Sharded
    }

    fn polls_own_queues_only(&self) -> bool {
        true
    }

    fn steer(&mut self, p: &SimPacket, _now: Ns) -> Option<usize> {
        let i = (p.class_key >> (32 - FINEST_BITS)) as usize;
        self.packets[i] = self.packets[i].saturating_add(1);
        Some(usize::from(self.core_of[i]))
    }

    fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
        for p in batch.iter() {
            cpu.process(p);
        }
    }

    fn next_timer(&self) -> Option<Ns> {
        Some(self.next_timer)
    }

    fn timer(&mut self, now: Ns, sys: &mut System<'_>) {
        let span = now.saturating_sub(self.measured_at).max(1);
        let load: Vec<f64> = (0..self.busy_at.len())
            .map(|core| {
                let busy = sys.busy_ns(core);
                let l = load_from_busy(busy.saturating_sub(self.busy_at[core]), span);
                self.busy_at[core] = busy;
                l
            })
            .collect();
        self.rebalance(&load);
        self.packets.fill(0);
        self.measured_at = now;
        self.next_timer = now + self.interval_ns;
    }

    fn is_active(&self, core: usize) -> bool {
        self.active[core]
    }

    fn migrations(&self) -> u64 {
        self.migrations
    }

    fn mechanisms(&self) -> PolicyMechanisms {
        PolicyMechanisms::Metron(MetronCounters {
            class_splits: self.class_splits,
            core_splits: self.core_splits,
            core_merges: self.core_merges,
            unsplittable: self.unsplittable,
            classes: self.classes.iter().map(|c| c.len() as u64).sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metron(cores: usize, autoscale: bool) -> Metron {
        Metron::new(&PolicyConfig {
            cores,
            autoscale,
            ..PolicyConfig::default()
        })
        .unwrap()
    }

    fn key_in(class: Class) -> u32 {
        (class.range().start as u32) << (32 - FINEST_BITS)
    }

    /// Sends one packet to every finest class (every class carries traffic).
    fn touch_all(m: &mut Metron) {
        for i in 0..1u32 << FINEST_BITS {
            let p = SimPacket {
                class_key: i << (32 - FINEST_BITS),
                ..SimPacket::default()
            };
            m.steer(&p, 0);
        }
    }

    fn check_table(m: &Metron) {
        let mut covered = vec![0u32; 1 << FINEST_BITS];
        for (core, list) in m.classes.iter().enumerate() {
            for &c in list {
                for i in c.range() {
                    covered[i] += 1;
                    assert_eq!(usize::from(m.core_of[i]), core, "class {c:?}");
                }
            }
        }
        assert!(
            covered.iter().all(|&n| n == 1),
            "classes partition the keys"
        );
    }

    #[test]
    fn classes_start_dealt_over_all_cores() {
        let m = metron(6, false);
        check_table(&m);
        let counts: Vec<usize> = m.classes.iter().map(Vec::len).collect();
        assert_eq!(counts, vec![2, 2, 1, 1, 1, 1]);
        assert!((0..6).all(|c| m.is_active(c)));
    }

    #[test]
    fn autoscale_starts_on_one_core() {
        let m = metron(4, true);
        check_table(&m);
        assert_eq!(m.classes[0].len(), 4);
        assert!(m.is_active(0) && !m.is_active(1));
    }

    #[test]
    fn overloaded_core_sends_half_its_classes_to_the_least_loaded() {
        let mut m = metron(4, false);
        touch_all(&mut m);
        m.rebalance(&[0.95, 0.5, 0.2, 0.6]);
        check_table(&m);
        // Core 0 had one class: split in two, one half to core 2.
        assert_eq!(m.class_splits, 1);
        assert_eq!(m.core_splits, 1);
        assert_eq!(m.migrations(), 1);
        assert_eq!(m.classes[0].len(), 1);
        assert_eq!(m.classes[2].len(), 2);
        let moved = *m.classes[2].iter().find(|c| c.depth == 3).unwrap();
        let p = SimPacket {
            class_key: key_in(moved),
            ..SimPacket::default()
        };
        assert_eq!(m.steer(&p, 0), Some(2));
    }

    #[test]
    fn idle_classes_stay_and_a_lone_busy_one_is_split() {
        let mut m = metron(2, false);
        // Only core 0's class (prefix 0 at depth 1) carries packets, all in
        // one finest class: it cannot be split into two sending classes.
        let p = SimPacket::default();
        m.steer(&p, 0);
        m.rebalance(&[0.99, 0.1]);
        assert_eq!(m.migrations(), 0);
        assert_eq!(m.unsplittable, 1);
        assert_eq!(m.class_splits, 0);
        assert_eq!(m.classes[0].len(), 1, "fruitless splits undone");
        check_table(&m);
        // Two finest classes carry packets: the split takes.
        let q = SimPacket {
            class_key: 1 << (32 - FINEST_BITS),
            ..SimPacket::default()
        };
        m.steer(&q, 0);
        m.rebalance(&[0.99, 0.1]);
        assert_eq!(m.class_splits, u64::from(FINEST_BITS - 1));
        assert_eq!(m.migrations(), 1);
        assert_eq!(m.steer(&p, 0), Some(0));
        assert_eq!(m.steer(&q, 0), Some(1));
        check_table(&m);
    }

    #[test]
    fn autoscale_splits_to_a_new_core_and_merges_back() {
        let mut m = metron(4, true);
        touch_all(&mut m);
        m.rebalance(&[0.9, 0.0, 0.0, 0.0]);
        assert!(m.is_active(1) && !m.is_active(2));
        assert_eq!(m.migrations(), 2);
        check_table(&m);
        touch_all(&mut m);
        m.rebalance(&[0.95, 0.95, 0.0, 0.0]);
        assert!(m.is_active(2) && m.is_active(3));
        // Low load: two pairs merge, releasing two cores.
        m.rebalance(&[0.1, 0.1, 0.1, 0.1]);
        assert_eq!(m.core_merges, 2);
        assert_eq!((0..4).filter(|&c| m.is_active(c)).count(), 2);
        check_table(&m);
        // Merged siblings joined again.
        assert!(m.classes.iter().map(Vec::len).sum::<usize>() <= 4);
        // A pair whose sum would overload the survivor stays.
        let load: Vec<f64> = (0..4)
            .map(|c| if m.is_active(c) { 0.31 } else { 0.0 })
            .collect();
        m.rebalance(&load);
        assert_eq!(m.core_merges, 2);
        // Under the threshold, the last pair merges.
        let load: Vec<f64> = load.iter().map(|l| l / 2.0).collect();
        m.rebalance(&load);
        assert_eq!(m.core_merges, 3);
        assert_eq!((0..4).filter(|&c| m.is_active(c)).count(), 1);
        check_table(&m);
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = |c: PolicyConfig| Metron::new(&c).is_err();
        assert!(bad(PolicyConfig {
            cores: 0,
            ..PolicyConfig::default()
        }));
        assert!(bad(PolicyConfig {
            interval_ns: 0,
            ..PolicyConfig::default()
        }));
        assert!(bad(PolicyConfig {
            target_load: f64::NAN,
            ..PolicyConfig::default()
        }));
    }
}
