//! The daemon's two data paths (`rsspp run --mode`):
//!
//! - [`SoftwarePath`]: the XDP program hashes every packet, counts it in its
//!   bucket and redirects it through a CPUMAP to the CPU the table names;
//!   the table is a BPF map, updated entry by entry. A moved bucket stays
//!   on its old CPU until that CPU has drained it (order-preserving moves,
//!   [`rsspp_core::handoff`]), unless moves are immediate.
//! - [`HardwarePath`]: the NIC spreads packets over its receive queues with
//!   its own indirection table; the XDP program only counts per bucket, and
//!   the table is rewritten through ethtool. A queue's packets are those
//!   counted on the CPU serving it (its interrupt's, see
//!   [`crate::queues`]; CPU = queue number when that is not known).

mod slots;

use std::time::Duration;

use rsspp_core::handoff::{Begin, Completion, Handoffs};
use rsspp_core::orss::{FlowCount, OverrideCount};
use rsspp_core::RssKey;

use slots::FlowSlots;

use crate::daemon::{DataPath, FlowTarget, Settlement};
use crate::ethtool::{EthtoolError, FlowRule, RssDevice, RuleMatch, RuleTable};
use crate::lifecycle::SavedTable;
use crate::xdp::{Entry, FlowInput, Xdp, XdpError};

/// Software RSS: the XDP program steers.
pub struct SoftwarePath {
    xdp: Xdp,
    cpus: Vec<u32>,
    per_cpu: Vec<u64>,
    entries: Vec<(usize, u32)>,
    /// Order-preserving moves under way (`None`: moves are immediate).
    handoffs: Option<Handoffs>,
    /// The table last written (CPU numbers); `None` before the first.
    written: Option<Vec<u32>>,
    /// The time of the round under way (from [`DataPath::settle`]).
    now: Duration,
    /// Per-flow overrides, when loaded with slots for them.
    flows: Option<Box<FlowSide>>,
}

/// The software path's side of per-flow overrides: the slots, and their
/// handoffs (as buckets').
struct FlowSide {
    slots: FlowSlots,
    /// Per slot: the CPU its frames go to once settled.
    at: Vec<u32>,
    /// Order-preserving moves of overrides under way, by slot.
    handoffs: Option<Handoffs>,
}

impl SoftwarePath {
    /// Drives `xdp` (a steering program, attached or not) over `cpus`.
    /// With `handoff_timeout`, moves keep order (the program must have been
    /// loaded with them, [`Xdp::ordered_moves`]) and a handoff that has not
    /// drained after that long is completed anyway; without, moves take
    /// effect at once.
    pub fn new(xdp: Xdp, cpus: Vec<u32>, handoff_timeout: Option<Duration>) -> Self {
        let per_cpu = vec![0; xdp.possible_cpus()];
        let handoffs = handoff_timeout
            .filter(|_| xdp.ordered_moves())
            .map(|t| Handoffs::new(xdp.reta_size(), t));
        Self {
            xdp,
            cpus,
            per_cpu,
            entries: Vec::new(),
            handoffs,
            written: None,
            now: Duration::ZERO,
            flows: None,
        }
    }

    /// Steers flows on their own too, in the program's override slots (it
    /// was loaded with some, [`Xdp::override_slots`]); `key` is the RSS key
    /// it hashes with, to find a counted flow's bucket. Overrides move in
    /// order when buckets do.
    pub fn with_overrides(mut self, key: RssKey) -> Self {
        let slots = self.xdp.override_slots();
        if slots == 0 {
            return self;
        }
        let handoffs = self
            .handoffs
            .as_ref()
            .map(|h| Handoffs::new(slots, h.timeout()));
        self.flows = Some(Box::new(FlowSide {
            slots: FlowSlots::new(key, slots, self.xdp.reta_size()),
            at: vec![0; slots],
            handoffs,
        }));
        self
    }

    /// Completes the overrides' handoffs that drained or waited too long.
    fn settle_overrides(&mut self) -> Result<(), XdpError> {
        let Some(side) = &mut self.flows else {
            return Ok(());
        };
        let Some(handoffs) = &mut side.handoffs else {
            return Ok(());
        };
        for slot in handoffs.held() {
            let Some(flow) = side.slots.flow(slot) else {
                handoffs.complete(slot, Completion::Idle);
                continue;
            };
            let h = handoffs.get(slot).expect("held");
            match self.xdp.override_of(&flow)? {
                Some((entry, _)) if entry.next.is_none() => {
                    side.at[slot] = entry.cpu;
                    handoffs.complete(slot, Completion::Drained);
                }
                // Evicted (the map has room for twice the slots: not
                // expected): the flow follows its bucket.
                None => {
                    handoffs.complete(slot, Completion::Idle);
                }
                Some(_) if self.now.saturating_sub(h.since) >= handoffs.timeout() => {
                    let state = self.xdp.handoff_state(self.xdp.override_handoff(slot))?;
                    let how = if state.drained() {
                        Completion::Idle
                    } else {
                        tracing::debug!(%flow, "override handoff forced: the old CPU never dequeued the flow's last frame");
                        Completion::Forced
                    };
                    let entry = Entry {
                        cpu: h.to,
                        next: None,
                    };
                    self.xdp.write_override(&flow, slot, entry, false)?;
                    side.at[slot] = h.to;
                    handoffs.complete(slot, how);
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Number of possible CPUs (the length of the per-CPU counters).
    pub fn possible_cpus(&self) -> usize {
        self.xdp.possible_cpus()
    }

    /// Whether moves keep order.
    pub fn ordered_moves(&self) -> bool {
        self.handoffs.is_some()
    }

    /// Notes the handoffs among `buckets` that the program has completed
    /// (their entry names no next CPU any more).
    fn note_switched(&mut self, buckets: &[usize]) -> Result<(), XdpError> {
        let Some(handoffs) = &mut self.handoffs else {
            return Ok(());
        };
        let pending: Vec<usize> = buckets
            .iter()
            .copied()
            .filter(|&b| handoffs.get(b).is_some())
            .collect();
        for (b, entry) in pending.iter().zip(self.xdp.entries(&pending)?) {
            if entry.next.is_none() {
                handoffs.complete(*b, Completion::Drained);
            }
        }
        Ok(())
    }

    /// The XDP programs.
    pub fn xdp(&mut self) -> &mut Xdp {
        &mut self.xdp
    }

    /// Gives the XDP programs back (to detach them, or keep them).
    pub fn into_xdp(self) -> Xdp {
        self.xdp
    }
}

/// `out[i]` = `per_cpu[cpus[i]]`.
fn pick(per_cpu: &[u64], cpus: &[u32], out: &mut [u64]) {
    for (o, &c) in out.iter_mut().zip(cpus) {
        *o = per_cpu.get(c as usize).copied().unwrap_or(0);
    }
}

impl DataPath for SoftwarePath {
    type Error = XdpError;

    fn bucket_packets(&mut self, out: &mut [u64]) -> Result<(), XdpError> {
        self.xdp.bucket_packets(out)
    }

    fn target_packets(&mut self, out: &mut [u64]) -> Result<(), XdpError> {
        self.xdp.cpu_packets(&mut self.per_cpu)?;
        pick(&self.per_cpu, &self.cpus, out);
        Ok(())
    }

    fn write_table(&mut self, table: &[u32], changed: &[usize]) -> Result<(), XdpError> {
        let (Some(written), true) = (&self.written, self.handoffs.is_some()) else {
            // Immediate moves, or the first table (the program steers with
            // the loader's until now; nothing of ours is in flight).
            self.entries.clear();
            self.entries.extend(changed.iter().map(|&b| (b, table[b])));
            self.xdp.write_entries(&self.entries)?;
            self.written = Some(table.to_vec());
            return Ok(());
        };
        let written = written.clone();
        self.note_switched(changed)?;
        let handoffs = self.handoffs.as_mut().expect("checked above");
        let (mut fresh, mut retargets, mut cancels) = (Vec::new(), Vec::new(), Vec::new());
        for &b in changed {
            match handoffs.begin(b, written[b], table[b], self.now) {
                Begin::Start { from } => fresh.push((b, from, table[b])),
                Begin::Retarget { from } => retargets.push((b, from, table[b])),
                Begin::Cancel { at } => cancels.push((b, at)),
            }
        }
        self.xdp.begin_handoffs(&fresh, true)?;
        self.xdp.begin_handoffs(&retargets, false)?;
        self.xdp.write_entries(&cancels)?;
        self.written = Some(table.to_vec());
        Ok(())
    }

    fn settle(&mut self, now: Duration) -> Result<Settlement, XdpError> {
        self.now = now;
        let Some(handoffs) = &self.handoffs else {
            return Ok(Settlement::default());
        };
        let pending = handoffs.held();
        self.note_switched(&pending)?;
        let handoffs = self.handoffs.as_ref().expect("checked above");
        let expired = handoffs.expired(now);
        let mut complete = Vec::with_capacity(expired.len());
        for &b in &expired {
            let to = handoffs.get(b).expect("expired ones are pending").to;
            let how = if self.xdp.handoff_state(b)?.drained() {
                Completion::Idle
            } else {
                Completion::Forced
            };
            complete.push((b, to, how));
        }
        self.entries.clear();
        self.entries
            .extend(complete.iter().map(|&(b, to, _)| (b, to)));
        self.xdp.write_entries(&self.entries)?;
        let handoffs = self.handoffs.as_mut().expect("checked above");
        for &(b, _, how) in &complete {
            if how == Completion::Forced {
                tracing::debug!(
                    bucket = b,
                    "handoff forced: the old CPU never dequeued the bucket's last frame"
                );
            }
            handoffs.complete(b, how);
        }
        Ok(Settlement {
            held: handoffs.held(),
            totals: handoffs.totals(),
            foreign_table: None,
        })
    }

    fn target_drops(&mut self, out: &mut [u64]) -> Result<(), XdpError> {
        self.xdp.cpumap_drops(&mut self.per_cpu)?;
        pick(&self.per_cpu, &self.cpus, out);
        Ok(())
    }

    fn flow_counts(
        &mut self,
        _now: Duration,
        counted: &mut Vec<FlowCount<FlowInput>>,
        overridden: &mut Vec<OverrideCount<FlowInput>>,
    ) -> Result<bool, XdpError> {
        if self.flows.is_none() {
            return Ok(false);
        }
        self.settle_overrides()?;
        let side = self.flows.as_mut().expect("checked above");
        let handoffs = side.handoffs.as_ref();
        side.slots.count(&self.xdp, counted, overridden, |slot| {
            handoffs.is_none_or(|h| h.get(slot).is_none())
        })?;
        Ok(true)
    }

    fn write_overrides(
        &mut self,
        hot: &[usize],
        moves: &[FlowTarget],
        free: &[FlowInput],
    ) -> Result<(), XdpError> {
        let Some(side) = &mut self.flows else {
            return Ok(());
        };
        for flow in free {
            let Some(slot) = side.slots.release(&self.xdp, flow)? else {
                continue;
            };
            if let Some(h) = &mut side.handoffs {
                h.complete(slot, Completion::Idle);
            }
        }
        if moves.iter().any(|m| m.new) {
            side.slots.refresh(&self.xdp)?;
        }
        for m in moves {
            let slot = match side.slots.slot(&m.flow) {
                Some(slot) => slot,
                None => {
                    let Some(slot) = side.slots.give(m.flow, m.bucket) else {
                        tracing::warn!(flow = %m.flow, "no override slot left");
                        continue;
                    };
                    side.at[slot] = m.from;
                    slot
                }
            };
            let (entry, fresh) = match &mut side.handoffs {
                None => (
                    Entry {
                        cpu: m.to,
                        next: None,
                    },
                    false,
                ),
                Some(h) => match h.begin(slot, side.at[slot], m.to, self.now) {
                    Begin::Start { from } => (
                        Entry {
                            cpu: from,
                            next: Some(m.to),
                        },
                        true,
                    ),
                    Begin::Retarget { from } => (
                        Entry {
                            cpu: from,
                            next: Some(m.to),
                        },
                        false,
                    ),
                    Begin::Cancel { at } => (
                        Entry {
                            cpu: at,
                            next: None,
                        },
                        false,
                    ),
                },
            };
            if entry.next.is_none() {
                side.at[slot] = entry.cpu;
            }
            self.xdp.write_override(&m.flow, slot, entry, fresh)?;
        }
        side.slots.write_flags(&self.xdp, hot)
    }
}

/// What the hardware path fails with: starting, reading the counters,
/// writing the NIC's table.
#[derive(Debug, thiserror::Error)]
pub enum HardwareError {
    /// The NIC's table could not be read or written.
    #[error(transparent)]
    Nic(#[from] EthtoolError),
    /// The XDP counters could not be loaded.
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// A queue the table should name that the NIC does not have.
    #[error("{iface} has {queues} receive queues (0 to {last}); queue {queue} does not exist", last = .queues.saturating_sub(1))]
    NoQueue {
        /// Interface.
        iface: String,
        /// The queue asked for.
        queue: u32,
        /// Queues the NIC has.
        queues: u32,
    },
}

/// Hardware RSS: the NIC steers, the XDP program counts.
///
/// The NIC's table is put back however the path ends: by
/// [`HardwarePath::restore`], or when it is dropped (an error, a panic)
/// unless [`HardwarePath::keep`] said to leave it.
pub struct HardwarePath<N: RssDevice> {
    xdp: Xdp,
    nic: N,
    queues: Vec<u32>,
    /// The CPU serving each queue of `queues` (its packets are counted
    /// there, and its load is that CPU's busy time).
    cpus: Vec<u32>,
    /// The table the NIC had before the daemon wrote its own.
    original: Vec<u32>,
    per_cpu: Vec<u64>,
    /// Restored or kept: nothing left to do on drop.
    settled: bool,
    /// Put the original back even if nothing was written (it is not the
    /// table the NIC has: a crashed run's was there).
    restore_always: bool,
    /// The table last written (`None`: nothing to put back yet), to tell
    /// when someone else changes it.
    last_written: Option<Vec<u32>>,
    /// Someone else's table last reported (each is reported once).
    foreign: Option<Vec<u32>>,
    /// The NIC's receive queues, as last seen.
    rx_queues: u32,
    /// Per-flow overrides as the NIC's ntuple rules, when it has them.
    rules: Option<Box<RuleSide>>,
}

/// The hardware path's side of per-flow overrides: each overridden flow's
/// ntuple rules (a TCP and a UDP rule for a flow with ports: its hash input
/// names no protocol) at locations of the NIC's table taken from the top,
/// and its slot, which counts its packets.
struct RuleSide {
    slots: FlowSlots,
    /// Per slot: its flow's rules.
    rules: Vec<Vec<FlowRule>>,
    /// Free locations of the NIC's rule table, lowest first (taken from
    /// the end).
    locations: Vec<u32>,
    /// Flows the NIC refused rules for: reported idle until the override
    /// controller frees them.
    refused: Vec<FlowInput>,
    /// The NIC refused a rule as unsupported: no more are tried.
    unsupported: bool,
    /// A full rule table was said.
    full_said: bool,
    /// Where the locations in use are saved (for `rsspp detach` after a
    /// SIGKILL): the interface, and its saved table.
    saved: Option<(String, SavedTable)>,
}

impl RuleSide {
    /// The locations of every rule in place, ascending.
    fn in_use(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.rules.iter().flatten().map(|r| r.location).collect();
        all.sort_unstable();
        all
    }

    /// Saves the locations in use with the table, if asked to.
    fn save(&mut self) {
        let in_use = self.in_use();
        let Some((iface, saved)) = &mut self.saved else {
            return;
        };
        if saved.rules == in_use {
            return;
        }
        saved.rules = in_use;
        if let Err(e) = saved.write(iface) {
            tracing::warn!(iface = %iface, "saving the ntuple rules' locations: {e} (`rsspp detach` after a crash would not delete them)");
        }
    }
}

impl<N: RssDevice> HardwarePath<N> {
    /// Drives the NIC `nic` (whose table the daemon will spread over
    /// `queues`) with the counting program `xdp`; remembers the NIC's table
    /// to put it back.
    pub fn new(xdp: Xdp, mut nic: N, queues: Vec<u32>) -> Result<Self, HardwareError> {
        let original = nic.rss()?.indirection;
        Self::with_original(xdp, nic, queues, original)
    }

    /// As [`HardwarePath::new`], putting back `original` rather than the
    /// table the NIC has now (which a daemon that did not put its table
    /// back left there: see [`crate::lifecycle::SavedTable`]).
    pub fn with_original(
        xdp: Xdp,
        mut nic: N,
        queues: Vec<u32>,
        original: Vec<u32>,
    ) -> Result<Self, HardwareError> {
        Self::check_queues(&mut nic, &queues)?;
        let rx_queues = nic.rx_queues()?;
        let per_cpu = vec![0; xdp.possible_cpus()];
        let mut path = Self {
            xdp,
            nic,
            cpus: queues.clone(),
            queues,
            original,
            per_cpu,
            settled: false,
            restore_always: false,
            last_written: None,
            foreign: None,
            rx_queues,
            rules: None,
        };
        path.read_serving_cpus();
        Ok(path)
    }

    /// Steers flows on their own too, with the NIC's ntuple rules at the
    /// free locations of `table` (its rule table, read at start), each
    /// flow's packets counted in a slot of the program (loaded with some,
    /// [`Xdp::override_slots`]); `key` is the RSS key, to find a counted
    /// flow's bucket. A rule takes effect at once: no handoff keeps a moved
    /// flow's order, as none keeps a moved bucket's in hardware mode.
    pub fn with_rules(mut self, key: RssKey, table: &RuleTable) -> Self {
        let slots = self.xdp.override_slots();
        if slots == 0 {
            return self;
        }
        let mut locations = table.free();
        locations.reverse();
        self.rules = Some(Box::new(RuleSide {
            slots: FlowSlots::new(key, slots, self.xdp.reta_size()),
            rules: vec![Vec::new(); slots],
            locations,
            refused: Vec::new(),
            unsupported: false,
            full_said: false,
            saved: None,
        }));
        self
    }

    /// Saves the locations of the rules in place with `saved` (the NIC's
    /// original table, under `/run/rsspp/IFACE/`) whenever they change, so
    /// that a run after a crash, or `rsspp detach`, deletes them.
    pub fn save_rules(&mut self, iface: &str, saved: SavedTable) {
        if let Some(side) = &mut self.rules {
            side.saved = Some((iface.to_string(), saved));
        }
    }

    /// The ntuple rules in place, by slot.
    pub fn rules(&self) -> Vec<FlowRule> {
        self.rules
            .as_ref()
            .map_or(Vec::new(), |s| s.rules.iter().flatten().copied().collect())
    }

    /// Deletes every rule in place (each one tried: errors are logged).
    fn delete_rules(&mut self) {
        let Some(side) = &mut self.rules else { return };
        for rules in &mut side.rules {
            for r in rules.drain(..) {
                if let Err(e) = self.nic.delete_rule(r.location) {
                    tracing::warn!("deleting the ntuple rule at {}: {e}", r.location);
                }
                side.locations.push(r.location);
            }
        }
        side.save();
    }

    /// Writes `flow`'s rules steering it to `queue`: new ones at free
    /// locations, or its rules `at` rewritten in place. On a refusal the
    /// rules written are deleted, and the flow follows its bucket.
    fn write_flow_rules(
        nic: &mut N,
        side: &mut RuleSide,
        flow: &FlowInput,
        at: Vec<FlowRule>,
        queue: u32,
    ) -> Result<Option<Vec<FlowRule>>, EthtoolError> {
        let at_empty = at.is_empty();
        let rules: Vec<FlowRule> = if at_empty {
            let (src, dst, ports) = flow.endpoints();
            let matches = RuleMatch::for_flow(src, dst, ports);
            if side.locations.len() < matches.len() {
                // Said once a run: the controller tries again and again.
                if side.full_said {
                    tracing::debug!(%flow, "the NIC's ntuple rule table is full: the flow stays with its bucket");
                } else {
                    tracing::warn!(%flow, "the NIC's ntuple rule table is full: the flow stays with its bucket (said once)");
                    side.full_said = true;
                }
                return Ok(None);
            }
            matches
                .into_iter()
                .map(|matches| FlowRule {
                    matches,
                    queue,
                    location: side.locations.pop().expect("checked above"),
                })
                .collect()
        } else {
            at.into_iter().map(|r| FlowRule { queue, ..r }).collect()
        };
        // A refused rewrite in place deletes all the flow's rules: those
        // not rewritten yet would steer it to its old queue.
        let undo_all = !at_empty;
        for (i, rule) in rules.iter().enumerate() {
            let i = if undo_all { rules.len() } else { i };
            match nic.insert_rule(rule) {
                Ok(()) => {}
                Err(EthtoolError::RuleRefused { errno, .. }) if errno.0 == libc::EOPNOTSUPP => {
                    tracing::warn!(iface = %nic.name(), "the NIC refuses ntuple rules ({rule}: {errno}): per-flow overrides off from now on, balancing buckets only");
                    side.unsupported = true;
                    Self::undo(nic, side, &rules, i);
                    return Ok(None);
                }
                Err(e @ EthtoolError::RuleRefused { .. }) => {
                    tracing::warn!("{e}: the flow stays with its bucket");
                    Self::undo(nic, side, &rules, i);
                    return Ok(None);
                }
                Err(e) => {
                    // The device is gone or refuses us: the round fails. A
                    // new flow's rules written so far are deleted as far as
                    // they can be; a flow's rules rewritten in place stay
                    // its own, deleted with the rest when the path ends.
                    if !undo_all {
                        Self::undo(nic, side, &rules, i);
                    }
                    return Err(e);
                }
            }
        }
        Ok(Some(rules))
    }

    /// Deletes the first `written` of `rules`, and frees all their
    /// locations.
    fn undo(nic: &mut N, side: &mut RuleSide, rules: &[FlowRule], written: usize) {
        for (i, r) in rules.iter().enumerate() {
            if i < written {
                if let Err(e) = nic.delete_rule(r.location) {
                    tracing::warn!("deleting the ntuple rule at {}: {e}", r.location);
                }
            }
            side.locations.push(r.location);
        }
    }

    /// Reads which CPU serves each queue from the queues' interrupts
    /// ([`crate::queues`]; CPU = queue number where that is not known),
    /// and says so in one line.
    fn read_serving_cpus(&mut self) {
        let served = crate::queues::queue_cpus(self.nic.name(), self.rx_queues);
        let mut pairs = Vec::with_capacity(self.queues.len());
        self.cpus.clear();
        for &q in &self.queues {
            let queue = served.get(q as usize);
            let cpu = queue.map_or(q, |s| s.cpu());
            let assumed = queue.is_none_or(|s| s.assumed());
            self.cpus.push(cpu);
            pairs.push(format!(
                "{q}->{cpu}{}",
                if assumed { " (assumed)" } else { "" }
            ));
        }
        tracing::info!(iface = %self.nic.name(), "receive queue -> serving CPU: {} (from the queues' interrupts; `rsspp nic show` tells more)", pairs.join(", "));
        let mut shared: Vec<u32> = self.cpus.clone();
        shared.sort_unstable();
        shared.dedup();
        if shared.len() < self.cpus.len() {
            tracing::warn!(iface = %self.nic.name(), "some of these queues are served by the same CPU: each of them shows that CPU's whole load, and moving buckets between them balances nothing (set their interrupts' affinity, /proc/irq/N/smp_affinity_list, to distinct CPUs)");
        }
    }

    /// Checks that the NIC has every queue of `queues` (before anything
    /// is attached to it).
    pub fn check_queues(nic: &mut N, queues: &[u32]) -> Result<(), HardwareError> {
        let rx = nic.rx_queues()?;
        match queues.iter().find(|&&q| q >= rx) {
            Some(&queue) => Err(HardwareError::NoQueue {
                iface: nic.name().to_string(),
                queue,
                queues: rx,
            }),
            None => Ok(()),
        }
    }

    /// The NIC's table before the daemon started.
    pub fn original_table(&self) -> &[u32] {
        &self.original
    }

    /// The XDP programs.
    pub fn xdp(&mut self) -> &mut Xdp {
        &mut self.xdp
    }

    /// Puts the NIC's original table back (nothing to do if the daemon
    /// never wrote one). An original that is the driver's default (entry
    /// `i` → queue `i mod n`) is put back by a reset, as `ethtool -X IF
    /// default` does, so that the kernel no longer counts the table as the
    /// user's and `ethtool -L` may change the queues again.
    pub fn restore(&mut self) -> Result<(), EthtoolError> {
        self.settled = true;
        self.delete_rules();
        match &self.last_written {
            None if !self.restore_always => return Ok(()),
            Some(ours) if self.nic.rss()?.indirection != *ours => {
                // Someone else set the table last: theirs stays.
                tracing::warn!(iface = %self.nic.name(), "left the table as someone else set it");
                return Ok(());
            }
            _ => {}
        }
        crate::ethtool::put_back(&mut self.nic, &self.original)
    }

    /// Sets the CPU serving each queue, in the order of the queues, in
    /// place of what the queues' interrupts said; read from them again
    /// when the number of queues changes.
    pub fn set_serving_cpus(&mut self, cpus: Vec<u32>) {
        assert_eq!(cpus.len(), self.queues.len(), "one CPU a queue");
        self.cpus = cpus;
    }

    /// Puts the original back when the path ends even if the daemon never
    /// writes a table: the NIC's table now is not the original.
    pub fn restore_always(&mut self) {
        self.restore_always = true;
    }

    /// Leaves the table as it is when the path ends.
    pub fn keep(&mut self) {
        self.settled = true;
    }

    /// The device.
    pub fn nic(&mut self) -> &mut N {
        &mut self.nic
    }
}

impl<N: RssDevice> Drop for HardwarePath<N> {
    fn drop(&mut self) {
        if !self.settled {
            if let Err(e) = self.restore() {
                tracing::warn!("putting the NIC's table back: {e}");
            }
        }
    }
}

impl<N: RssDevice> DataPath for HardwarePath<N> {
    type Error = HardwareError;

    fn bucket_packets(&mut self, out: &mut [u64]) -> Result<(), HardwareError> {
        Ok(self.xdp.bucket_packets(out)?)
    }

    fn target_packets(&mut self, out: &mut [u64]) -> Result<(), HardwareError> {
        self.xdp.cpu_packets(&mut self.per_cpu)?;
        pick(&self.per_cpu, &self.cpus, out);
        Ok(())
    }

    fn write_table(&mut self, table: &[u32], _changed: &[usize]) -> Result<(), HardwareError> {
        // The ioctl replaces the whole table at once.
        self.nic.set_indirection(table)?;
        self.last_written = Some(table.to_vec());
        self.foreign = None;
        Ok(())
    }

    fn serving_cpus(&self) -> Option<&[u32]> {
        Some(&self.cpus)
    }

    fn settle(&mut self, _now: std::time::Duration) -> Result<Settlement, HardwareError> {
        // A channel change (`ethtool -L`): the queues and their interrupts
        // are new, so are the CPUs serving them.
        let rx = self.nic.rx_queues()?;
        if rx != self.rx_queues {
            tracing::info!(iface = %self.nic.name(), before = self.rx_queues, now = rx, "the number of receive queues changed: reading which CPU serves each again");
            self.rx_queues = rx;
            Self::check_queues(&mut self.nic, &self.queues)?;
            self.read_serving_cpus();
        }
        // Re-read each round: a table that is not the one written is
        // someone else's.
        let Some(ours) = &self.last_written else {
            return Ok(Settlement::default());
        };
        let now = self.nic.rss()?.indirection;
        if now == *ours || self.foreign.as_ref() == Some(&now) {
            return Ok(Settlement::default());
        }
        self.foreign = Some(now.clone());
        Ok(Settlement {
            foreign_table: Some(now),
            ..Settlement::default()
        })
    }

    fn current_table(&mut self) -> Result<Option<Vec<u32>>, HardwareError> {
        Ok(Some(self.nic.rss()?.indirection))
    }

    fn flow_counts(
        &mut self,
        _now: Duration,
        counted: &mut Vec<FlowCount<FlowInput>>,
        overridden: &mut Vec<OverrideCount<FlowInput>>,
    ) -> Result<bool, HardwareError> {
        let Some(side) = &mut self.rules else {
            return Ok(false);
        };
        // A rule takes effect at once: every override is settled.
        side.slots.count(&self.xdp, counted, overridden, |_| true)?;
        overridden.extend(side.refused.iter().map(|&key| OverrideCount {
            key,
            packets: 0,
            settled: true,
        }));
        Ok(true)
    }

    fn write_overrides(
        &mut self,
        hot: &[usize],
        moves: &[FlowTarget],
        free: &[FlowInput],
    ) -> Result<(), HardwareError> {
        let Some(side) = &mut self.rules else {
            return Ok(());
        };
        for flow in free {
            side.refused.retain(|f| f != flow);
            let Some(slot) = side.slots.release(&self.xdp, flow)? else {
                continue;
            };
            for r in std::mem::take(&mut side.rules[slot]) {
                self.nic.delete_rule(r.location)?;
                side.locations.push(r.location);
            }
        }
        if moves.iter().any(|m| m.new) {
            side.slots.refresh(&self.xdp)?;
        }
        for m in moves {
            let slot = side.slots.slot(&m.flow);
            let at = slot.map_or(Vec::new(), |s| side.rules[s].clone());
            let written = if side.unsupported {
                // Rules no longer written: an existing one goes too.
                Self::undo(&mut self.nic, side, &at, at.len());
                None
            } else {
                Self::write_flow_rules(&mut self.nic, side, &m.flow, at, m.to)?
            };
            match (slot, written) {
                (Some(s), Some(rules)) => side.rules[s] = rules,
                (None, Some(rules)) => match side.slots.give(m.flow, m.bucket) {
                    Some(s) => {
                        self.xdp.count_override(&m.flow, s)?;
                        side.rules[s] = rules;
                    }
                    None => {
                        tracing::warn!(flow = %m.flow, "no override slot left");
                        Self::undo(&mut self.nic, side, &rules, rules.len());
                        side.refused.push(m.flow);
                    }
                },
                // Refused a move: the old rules were deleted with it, the
                // flow is the bucket's again.
                (Some(s), None) => {
                    side.rules[s].clear();
                    side.slots.release(&self.xdp, &m.flow)?;
                    side.refused.push(m.flow);
                }
                (None, None) => side.refused.push(m.flow),
            }
        }
        side.save();
        Ok(side.slots.write_flags(&self.xdp, hot)?)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rsspp_core::ControlConfig;

    use super::*;
    use crate::cpu::{BusyClock, CpuError};
    use crate::daemon::{Daemon, DaemonConfig, DaemonError, LoadModel};
    use crate::ethtool::{EthtoolError, FakeNic};
    use crate::xdp::{Program, XdpOptions};

    /// The counting program, loaded for `lo` (never attached: loading
    /// needs no network configuration); `None` without root.
    fn counter() -> Option<Xdp> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping: loading XDP programs needs root (CI runs as root)");
            return None;
        }
        let mut opts = XdpOptions::new("lo");
        opts.reta_size = N;
        Some(Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap())
    }

    /// Table size (the smallest the core crate takes).
    const N: usize = 64;

    /// `pattern` repeated over the table.
    fn table(pattern: &[u32]) -> Vec<u32> {
        pattern.iter().copied().cycle().take(N).collect()
    }

    struct Idle;

    impl BusyClock for Idle {
        fn busy_ns(&mut self, _cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
            out.fill(0);
            Ok(())
        }
    }

    fn daemon(
        path: HardwarePath<FakeNic>,
        targets: Vec<u32>,
        balance: bool,
    ) -> Result<Daemon<HardwarePath<FakeNic>, Idle>, DaemonError<HardwareError>> {
        let config = DaemonConfig {
            targets,
            reta_size: N,
            control: ControlConfig::default(),
            balance,
            load: LoadModel::ByPackets,
            churn: 0,
            churn_seed: 1,
            elephants: None,
        };
        Daemon::start(config, path, Idle, Duration::ZERO)
    }

    #[test]
    fn a_default_table_is_put_back_by_a_reset() {
        let Some(xdp) = counter() else { return };
        let nic = FakeNic::new("fake0", N, 4);
        let d = daemon(
            HardwarePath::new(xdp, nic, vec![0, 1]).unwrap(),
            vec![0, 1],
            true,
        )
        .unwrap();
        let mut path = d.into_datapath();
        assert_eq!(path.nic().table(), table(&[0, 1]));
        assert!(path.nic().user_set());
        path.restore().unwrap();
        assert_eq!(path.nic().table(), table(&[0, 1, 2, 3]));
        assert!(!path.nic().user_set(), "reset, as ethtool -X default");
    }

    #[test]
    fn a_table_of_the_users_is_written_back() {
        let Some(xdp) = counter() else { return };
        let mut nic = FakeNic::new("fake0", N, 4);
        nic.set_indirection(&table(&[3, 3, 2, 2, 1, 1, 0, 0]))
            .unwrap();
        let d = daemon(
            HardwarePath::new(xdp, nic, vec![0, 1]).unwrap(),
            vec![0, 1],
            true,
        )
        .unwrap();
        let mut path = d.into_datapath();
        path.restore().unwrap();
        assert_eq!(path.nic().table(), table(&[3, 3, 2, 2, 1, 1, 0, 0]));
    }

    /// A NIC the test still sees after the path that drove it is gone.
    struct Shared(std::rc::Rc<std::cell::RefCell<FakeNic>>);

    impl RssDevice for Shared {
        fn name(&self) -> &str {
            "fake-shared"
        }
        fn rss(&mut self) -> Result<crate::ethtool::RssConfig, EthtoolError> {
            self.0.borrow_mut().rss()
        }
        fn set_indirection(&mut self, table: &[u32]) -> Result<(), EthtoolError> {
            self.0.borrow_mut().set_indirection(table)
        }
        fn reset_indirection(&mut self) -> Result<(), EthtoolError> {
            self.0.borrow_mut().reset_indirection()
        }
        fn rx_queues(&mut self) -> Result<u32, EthtoolError> {
            self.0.borrow_mut().rx_queues()
        }
    }

    #[test]
    fn dropping_the_path_puts_the_table_back_unless_kept() {
        for keep in [false, true] {
            let Some(xdp) = counter() else { return };
            let nic = std::rc::Rc::new(std::cell::RefCell::new(FakeNic::new("fake0", N, 4)));
            let mut path = HardwarePath::new(xdp, Shared(nic.clone()), vec![1, 2]).unwrap();
            path.write_table(&table(&[1, 2]), &[]).unwrap();
            if keep {
                path.keep();
            }
            // Dropped as on an error or a panic, with no restore called.
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _path = path;
                panic!("a round went wrong");
            }));
            assert!(unwound.is_err());
            let expected = if keep {
                table(&[1, 2])
            } else {
                table(&[0, 1, 2, 3])
            };
            assert_eq!(nic.borrow().table(), expected, "keep: {keep}");
        }
    }

    #[test]
    fn a_table_left_by_a_killed_run_gives_way_to_the_saved_original() {
        let Some(xdp) = counter() else { return };
        // The NIC holds a dead daemon's table; the original was saved.
        let mut nic = FakeNic::new("fake0", N, 4);
        nic.set_indirection(&table(&[1, 1, 0])).unwrap();
        let original = table(&[0, 1, 2, 3]);
        let mut path = HardwarePath::with_original(xdp, nic, vec![0, 1], original.clone()).unwrap();
        path.restore_always();
        // Even with nothing written (counting only), the original goes back,
        // by a reset: it is the driver's default.
        path.restore().unwrap();
        assert_eq!(path.nic().table(), original);
        assert!(!path.nic().user_set());
    }

    #[test]
    fn a_table_someone_else_writes_is_followed_not_fought() {
        let Some(xdp) = counter() else { return };
        let nic = std::rc::Rc::new(std::cell::RefCell::new(FakeNic::new("fake0", N, 4)));
        let path = HardwarePath::new(xdp, Shared(nic.clone()), vec![0, 1]).unwrap();
        let config = DaemonConfig {
            targets: vec![0, 1],
            reta_size: N,
            control: ControlConfig::default(),
            balance: false,
            load: LoadModel::ByPackets,
            // Moves every round, so that a pause shows.
            churn: 4,
            churn_seed: 1,
            elephants: None,
        };
        let mut d = Daemon::start(config, path, Idle, Duration::ZERO).unwrap();
        let ms = Duration::from_millis;
        d.round(ms(100)).unwrap();
        let writes = nic.borrow().writes().len();
        assert_eq!(writes, 2, "the first table, then the churn");
        // `ethtool -X` from someone else, over our queues.
        let theirs = table(&[1, 1, 1, 0]);
        nic.borrow_mut().set_indirection(&theirs).unwrap();
        let writes = nic.borrow().writes().len();
        for t in 2..10 {
            d.round(ms(100 * t)).unwrap();
        }
        assert_eq!(nic.borrow().writes().len(), writes, "not fought");
        assert_eq!(d.table(), theirs, "followed");
        // After the pause (30 s), rounds write again, from their table.
        d.round(Duration::from_secs(31)).unwrap();
        assert_eq!(nic.borrow().writes().len(), writes + 1);
        let ours = nic.borrow().table().to_vec();
        let differ = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 4, "the churn's four moves on their table");

        // Someone else again, now naming queues we were not given: left
        // alone, longer, and not put back on exit.
        let other = table(&[2, 3]);
        nic.borrow_mut().set_indirection(&other).unwrap();
        let writes = nic.borrow().writes().len();
        d.round(Duration::from_secs(32)).unwrap();
        d.round(Duration::from_secs(62)).unwrap();
        assert_eq!(nic.borrow().writes().len(), writes, "a doubled pause: 60 s");
        let mut path = d.into_datapath();
        path.restore().unwrap();
        assert_eq!(nic.borrow().table(), other, "theirs stays");
    }

    /// Records the CPUs it is asked about.
    struct Asked(std::rc::Rc<std::cell::RefCell<Vec<u32>>>);

    impl BusyClock for Asked {
        fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
            *self.0.borrow_mut() = cpus.to_vec();
            out.fill(0);
            Ok(())
        }
    }

    #[test]
    fn a_queues_load_is_its_serving_cpus_and_follows_a_channel_change() {
        let Some(xdp) = counter() else { return };
        let nic = std::rc::Rc::new(std::cell::RefCell::new(FakeNic::new("fake0", N, 4)));
        let mut path = HardwarePath::new(xdp, Shared(nic.clone()), vec![2, 3]).unwrap();
        path.set_serving_cpus(vec![1, 0]);
        let asked = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let config = DaemonConfig {
            targets: vec![2, 3],
            reta_size: N,
            control: ControlConfig::default(),
            balance: true,
            load: LoadModel::ByPackets,
            churn: 0,
            churn_seed: 1,
            elephants: None,
        };
        let mut d = Daemon::start(config, path, Asked(asked.clone()), Duration::ZERO).unwrap();
        assert_eq!(*asked.borrow(), vec![1, 0], "queue 2 on CPU 1, 3 on CPU 0");
        d.round(Duration::from_millis(100)).unwrap();
        assert_eq!(*asked.borrow(), vec![1, 0]);
        // `ethtool -L`: eight queues now; the fake NIC has no interrupts,
        // so each queue is taken to be on the CPU of its number.
        nic.borrow_mut().set_rx_queues(8);
        d.round(Duration::from_millis(200)).unwrap();
        // Seen by that round; its busy time was read before.
        d.round(Duration::from_millis(250)).unwrap();
        assert_eq!(*asked.borrow(), vec![2, 3]);
        // Down to two: the queues balanced over are gone, and the round
        // says so.
        nic.borrow_mut().set_rx_queues(2);
        let e = d.round(Duration::from_millis(350)).unwrap_err();
        assert!(
            matches!(
                e,
                DaemonError::DataPath(HardwareError::NoQueue { queue: 2, .. })
            ),
            "{e}"
        );
    }

    /// Ethernet, IPv4 10.0.0.1 -> 10.0.0.2, UDP `sport` -> 53.
    fn udp_frame(sport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f
    }

    #[test]
    fn handoffs_that_never_drain_are_completed_after_the_timeout() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping: loading XDP programs needs root (CI runs as root)");
            return;
        }
        let online = crate::cpu::CpuList::online().unwrap();
        if online.len() < 2 {
            eprintln!("skipping: a move needs two CPUs");
            return;
        }
        let cpus = online.cpus()[..2].to_vec();
        let mut opts = XdpOptions::new("lo");
        opts.reta_size = N;
        opts.default_cpu = cpus[0];
        let xdp = Xdp::load(
            &opts,
            Program::Steer {
                cpus: cpus.clone(),
                cpumap_queue: 16,
                ordered_moves: true,
            },
        )
        .unwrap();
        // Loaded, not attached: nothing is ever dequeued here.
        let path = SoftwarePath::new(xdp, cpus.clone(), Some(Duration::from_millis(500)));
        let config = DaemonConfig {
            targets: cpus,
            reta_size: N,
            control: ControlConfig::default(),
            balance: false,
            load: LoadModel::ByPackets,
            churn: 3,
            churn_seed: 7,
            elephants: None,
        };
        let mut d = Daemon::start(config, path, Idle, Duration::ZERO).unwrap();
        let ms = Duration::from_millis;
        let first: Vec<usize> = d
            .round(ms(100))
            .unwrap()
            .moves
            .iter()
            .map(|m| m.bucket)
            .collect();
        assert_eq!(first.len(), 3);
        let entries = d.datapath_mut().xdp().entries(&first).unwrap();
        assert!(entries.iter().all(|e| e.next.is_some()), "{entries:?}");
        // A frame of the first moved bucket goes to its old CPU, stamped,
        // and is never dequeued.
        let toeplitz = rsspp_core::Toeplitz::default();
        let sport = (1024u16..)
            .find(|&p| {
                let h = toeplitz.hash_ipv4([10, 0, 0, 1], [10, 0, 0, 2], p, 53);
                rsspp_core::bucket_of(h, N) == first[0]
            })
            .unwrap();
        d.datapath_mut()
            .xdp()
            .test_run(&udp_frame(sport), 1)
            .unwrap();
        let state = d.datapath_mut().xdp().handoff_state(first[0]).unwrap();
        assert_eq!((state.sent, state.dequeued), (1, 0));
        // Still in handoff: held, so the churn leaves them alone.
        let second: Vec<usize> = d
            .round(ms(200))
            .unwrap()
            .moves
            .iter()
            .map(|m| m.bucket)
            .collect();
        assert_eq!(d.settlement().held, {
            let mut f = first.clone();
            f.sort_unstable();
            f
        });
        assert!(
            second.iter().all(|b| !first.contains(b)),
            "{first:?} {second:?}"
        );
        // Past the timeout: the first three are completed, two with nothing
        // left to drain, one with its stamped frame unaccounted for.
        let r = d.round(ms(650)).unwrap();
        assert_eq!(r.handoffs_pending, 3, "the second round's, not yet expired");
        let totals = d.settlement().totals;
        assert_eq!((totals.drained, totals.idle, totals.forced), (0, 2, 1));
        // Settled, unless that round's churn moved them again.
        let again: Vec<usize> = r.moves.iter().map(|m| m.bucket).collect();
        let settled: Vec<usize> = first
            .iter()
            .copied()
            .filter(|b| !again.contains(b))
            .collect();
        let entries = d.datapath_mut().xdp().entries(&settled).unwrap();
        assert!(entries.iter().all(|e| e.next.is_none()), "{entries:?}");
    }

    #[test]
    fn counting_only_keeps_the_nics_table_and_writes_nothing() {
        let Some(xdp) = counter() else { return };
        let mut nic = FakeNic::new("fake0", N, 4);
        nic.set_indirection(&table(&[0, 1, 0, 1, 1, 1, 1, 1]))
            .unwrap();
        let d = daemon(
            HardwarePath::new(xdp, nic, vec![0, 1]).unwrap(),
            vec![0, 1],
            false,
        )
        .unwrap();
        assert_eq!(
            d.table(),
            table(&[0, 1, 0, 1, 1, 1, 1, 1]),
            "the NIC's table, kept"
        );
        let mut path = d.into_datapath();
        assert_eq!(path.nic().writes().len(), 1, "only the test's own write");
        path.restore().unwrap();
        assert_eq!(path.nic().writes().len(), 1, "nothing to put back");

        // A table naming a queue it was not given: said, nothing written.
        let Some(xdp) = counter() else { return };
        let nic = FakeNic::new("fake0", N, 4);
        let e = daemon(
            HardwarePath::new(xdp, nic, vec![0, 1]).unwrap(),
            vec![0, 1],
            false,
        )
        .err()
        .unwrap();
        assert!(
            matches!(
                e,
                DaemonError::TableOutsideTargets {
                    bucket: 2,
                    target: 2,
                    ..
                }
            ),
            "{e}"
        );
    }

    /// The counting program with `slots` override slots, for `lo`.
    fn counter_with_slots(slots: usize) -> Option<(Xdp, RssKey)> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping: loading XDP programs needs root (CI runs as root)");
            return None;
        }
        let mut opts = XdpOptions::new("lo");
        opts.reta_size = N;
        opts.override_slots = slots;
        let xdp = Xdp::load(&opts, Program::Count { rx_hash: false }).unwrap();
        Some((xdp, opts.key))
    }

    fn flow(sport: u16) -> FlowInput {
        FlowInput::of(
            &rsspp_core::FlowKey::new(
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                sport,
                53,
                17,
            )
            .unwrap(),
        )
    }

    fn bucket(key: &RssKey, f: &FlowInput) -> usize {
        rsspp_core::bucket_of(
            rsspp_core::Toeplitz::new(key.clone()).hash(f.hash_input()),
            N,
        )
    }

    /// The rules' (location, queue, protocol), by location.
    fn rules_of(nic: &FakeNic) -> Vec<(u32, u32, crate::ethtool::RuleProto)> {
        nic.rules()
            .iter()
            .map(|r| (r.location, r.queue, r.matches.proto))
            .collect()
    }

    fn counts(
        path: &mut HardwarePath<FakeNic>,
    ) -> (Vec<FlowCount<FlowInput>>, Vec<OverrideCount<FlowInput>>) {
        let (mut counted, mut overridden) = (Vec::new(), Vec::new());
        assert!(path
            .flow_counts(Duration::ZERO, &mut counted, &mut overridden)
            .unwrap());
        (counted, overridden)
    }

    #[test]
    fn an_elephant_gets_ntuple_rules_that_move_with_it_and_go_when_it_is_freed() {
        use crate::ethtool::RuleProto::{Tcp, Udp};
        let Some((xdp, key)) = counter_with_slots(4) else {
            return;
        };
        let mut nic = FakeNic::new("fake0", N, 4).with_rules(16);
        // Someone else's rule at the top: ours go below it.
        let theirs = FlowRule {
            matches: RuleMatch::for_flow(
                "10.9.9.9".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                None,
            )[0],
            queue: 3,
            location: 15,
        };
        nic.insert_rule(&theirs).unwrap();
        let rule_table = nic.rule_table().unwrap();
        let mut path = HardwarePath::new(xdp, nic, vec![0, 1])
            .unwrap()
            .with_rules(key.clone(), &rule_table);
        let (elephant, b) = (flow(1000), bucket(&key, &flow(1000)));

        // A hot bucket's flows are counted one by one.
        path.write_overrides(&[b], &[], &[]).unwrap();
        path.xdp().test_run(&udp_frame(1000), 5).unwrap();
        let (counted, overridden) = counts(&mut path);
        assert_eq!(
            counted
                .iter()
                .map(|c| (c.key, c.bucket, c.packets))
                .collect::<Vec<_>>(),
            vec![(elephant, b, 5)]
        );
        assert!(overridden.is_empty());

        // Given an override: a TCP and a UDP rule to its queue, below
        // theirs; its packets are the override's, not counted as the
        // bucket's flows.
        let give = FlowTarget {
            flow: elephant,
            bucket: b,
            from: 0,
            to: 1,
            new: true,
        };
        path.write_overrides(&[b], &[give], &[]).unwrap();
        assert_eq!(
            rules_of(path.nic()),
            vec![
                (13, 1, Udp),
                (14, 1, Tcp),
                (15, 3, crate::ethtool::RuleProto::Ip)
            ]
        );
        let udp = path.nic().rules()[0];
        assert_eq!(
            udp.to_string(),
            "flow-type udp4 src-ip 10.0.0.1 dst-ip 10.0.0.2 src-port 1000 dst-port 53 action 1 loc 13"
        );
        path.xdp().test_run(&udp_frame(1000), 3).unwrap();
        let (counted, overridden) = counts(&mut path);
        assert!(counted.is_empty(), "{counted:?}");
        assert_eq!(
            overridden
                .iter()
                .map(|o| (o.key, o.packets, o.settled))
                .collect::<Vec<_>>(),
            vec![(elephant, 3, true)]
        );

        // Moved: the same rules, rewritten in place to the new queue.
        let back = FlowTarget {
            from: 1,
            to: 0,
            new: false,
            ..give
        };
        path.write_overrides(&[b], &[back], &[]).unwrap();
        assert_eq!(
            rules_of(path.nic()),
            vec![
                (13, 0, Udp),
                (14, 0, Tcp),
                (15, 3, crate::ethtool::RuleProto::Ip)
            ]
        );

        // Freed: its rules are deleted, its locations taken again next.
        path.write_overrides(&[], &[], &[elephant]).unwrap();
        assert_eq!(
            rules_of(path.nic()),
            vec![(15, 3, crate::ethtool::RuleProto::Ip)]
        );
        let (_, overridden) = counts(&mut path);
        assert!(overridden.is_empty());
        let other = FlowTarget {
            flow: flow(2000),
            bucket: bucket(&key, &flow(2000)),
            from: 0,
            to: 1,
            new: true,
        };
        path.write_overrides(&[], &[other], &[]).unwrap();
        assert_eq!(path.rules().len(), 2);
        assert_eq!(
            rules_of(path.nic()).iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![13, 14, 15]
        );

        // However the path ends, its rules go; theirs stay.
        path.restore().unwrap();
        assert_eq!(path.nic().rules(), vec![theirs]);
    }

    #[test]
    fn a_refused_rule_leaves_the_flow_to_its_bucket_until_the_controller_frees_it() {
        let Some((xdp, key)) = counter_with_slots(4) else {
            return;
        };
        // Room for one rule: a flow with ports needs two.
        let nic = FakeNic::new("fake0", N, 4).with_rules(1);
        let rule_table = RuleTable {
            size: 1,
            used: Vec::new(),
        };
        let mut path = HardwarePath::new(xdp, nic, vec![0, 1])
            .unwrap()
            .with_rules(key.clone(), &rule_table);
        let elephant = flow(1000);
        let give = FlowTarget {
            flow: elephant,
            bucket: bucket(&key, &elephant),
            from: 0,
            to: 1,
            new: true,
        };
        path.write_overrides(&[], &[give], &[]).unwrap();
        assert!(path.nic().rules().is_empty());
        // Reported as an idle override (the controller gave it one), so
        // that the controller frees it.
        let (_, overridden) = counts(&mut path);
        assert_eq!(
            overridden
                .iter()
                .map(|o| (o.key, o.packets))
                .collect::<Vec<_>>(),
            vec![(elephant, 0)]
        );
        path.write_overrides(&[], &[], &[elephant]).unwrap();
        let (_, overridden) = counts(&mut path);
        assert!(overridden.is_empty());

        // A NIC that refuses the rules as unsupported: none tried again.
        let Some((xdp, key)) = counter_with_slots(4) else {
            return;
        };
        let mut nic = FakeNic::new("fake0", N, 4).with_rules(16);
        let table = nic.rule_table().unwrap();
        let mut path = HardwarePath::new(xdp, nic, vec![0, 1])
            .unwrap()
            .with_rules(key.clone(), &table);
        path.write_overrides(&[], &[give], &[]).unwrap();
        assert_eq!(path.nic().rules().len(), 2);
        path.nic().fail_next(EthtoolError::RuleRefused {
            iface: "fake0".into(),
            rule: "flow-type tcp4 …".into(),
            errno: crate::ethtool::Errno(libc::EOPNOTSUPP),
        });
        let other = FlowTarget {
            flow: flow(2000),
            bucket: bucket(&key, &flow(2000)),
            ..give
        };
        path.write_overrides(&[], &[other], &[]).unwrap();
        assert_eq!(path.nic().rules().len(), 2, "the first flow's stay");
        // Moving the first: no rule is written any more, so its go too.
        let back = FlowTarget {
            from: 1,
            to: 0,
            new: false,
            ..give
        };
        path.write_overrides(&[], &[back], &[]).unwrap();
        assert!(path.nic().rules().is_empty());
        assert!(path.rules().is_empty());
        let (_, overridden) = counts(&mut path);
        let mut idle: Vec<_> = overridden.iter().map(|o| (o.key, o.packets)).collect();
        idle.sort();
        let mut both = vec![(elephant, 0), (other.flow, 0)];
        both.sort();
        assert_eq!(idle, both);
        path.write_overrides(&[], &[], &[elephant, other.flow])
            .unwrap();
        path.write_overrides(&[], &[give], &[]).unwrap();
        assert!(path.nic().rules().is_empty(), "not tried again");
    }

    #[test]
    fn a_nic_without_rules_has_no_overrides() {
        let Some(xdp) = counter() else { return };
        let mut path = HardwarePath::new(xdp, FakeNic::new("fake0", N, 4), vec![0, 1]).unwrap();
        let (mut counted, mut overridden) = (Vec::new(), Vec::new());
        assert!(!path
            .flow_counts(Duration::ZERO, &mut counted, &mut overridden)
            .unwrap());
        assert!(matches!(
            path.nic().rule_table(),
            Err(EthtoolError::NoRules { .. })
        ));
    }

    /// The daemon's rounds over the hardware path: two elephants sharing a
    /// bucket, every frame counted on queue 0's CPU (the test's, pinned),
    /// queue 1 idle. The override controller gives one of them an ntuple
    /// rule to the queue its bucket is not on, and the run's end deletes it.
    #[test]
    fn the_daemon_gives_an_elephant_of_a_shared_bucket_a_rule_to_the_other_queue() {
        let Some(mut e) = Elephants::start(2, 0) else {
            return;
        };
        let mut given = None;
        for round in 1..=20u64 {
            let rules = e.round(round);
            if !rules.is_empty() {
                given = Some(rules);
                break;
            }
        }
        let rules = given.expect("no elephant was given a rule in 20 rounds");
        let d = &mut e.daemon;
        assert_eq!(d.overrides_in_use(), Some(1));
        assert!(d.elephants_moved() >= 1);
        // One elephant, its TCP and UDP rules, to the queue its bucket is
        // not on: the two are apart.
        assert_eq!(rules.len(), 2, "{rules:?}");
        let bucket_queue = d.table()[e.bucket];
        assert!(
            rules.iter().all(|r| r.queue != bucket_queue),
            "{rules:?}, bucket on {bucket_queue}"
        );
        let endpoints = [flow(1000).endpoints(), flow(e.twin).endpoints()];
        assert!(rules.iter().all(|r| endpoints.contains(&(
            r.matches.src,
            r.matches.dst,
            r.matches.ports
        ))));
        let mut path = e.daemon.into_datapath();
        path.restore().unwrap();
        assert!(path.nic().rules().is_empty());
    }

    /// `--churn` in hardware mode: an overridden flow's rules are rewritten
    /// in place to another queue, whatever the load (three queues: on the
    /// one its bucket is on, the override would be freed as redundant).
    #[test]
    fn churn_moves_an_elephants_rules_between_the_queues() {
        let Some(mut e) = Elephants::start(3, 1) else {
            return;
        };
        // Per rule location, the queues it steered to.
        let mut seen: std::collections::BTreeMap<u32, std::collections::BTreeSet<u32>> =
            std::collections::BTreeMap::new();
        for round in 1..=25u64 {
            for r in e.round(round) {
                seen.entry(r.location).or_default().insert(r.queue);
            }
            if seen.values().any(|queues| queues.len() == 2) {
                break;
            }
        }
        assert!(
            seen.values().any(|queues| queues.len() == 2),
            "a rule rewritten to the other queue: {seen:?}"
        );
    }

    /// A daemon over the hardware path with overrides: a fake NIC with a
    /// rule table, its queues served by CPUs 0, 1, ..., the counting
    /// program fed from CPU 0 (this thread, pinned) two elephants of one
    /// bucket and two mice.
    struct Elephants {
        daemon: Daemon<HardwarePath<FakeNic>, Idle>,
        bucket: usize,
        /// The second elephant's source port (the first's is 1000).
        twin: u16,
    }

    impl Elephants {
        /// `None` without root.
        fn start(queues: u32, churn: usize) -> Option<Self> {
            let (xdp, key) = counter_with_slots(8)?;
            pin_to_cpu_0();
            let mut nic = FakeNic::new("fake0", N, queues).with_rules(64);
            let rule_table = nic.rule_table().unwrap();
            let targets: Vec<u32> = (0..queues).collect();
            let mut path = HardwarePath::new(xdp, nic, targets.clone())
                .unwrap()
                .with_rules(key.clone(), &rule_table);
            path.set_serving_cpus(targets.clone());
            let config = DaemonConfig {
                targets,
                reta_size: N,
                control: ControlConfig::default(),
                balance: true,
                load: LoadModel::ByPackets,
                churn,
                churn_seed: 3,
                elephants: Some(rsspp_core::orss::OverrideConfig::default()),
            };
            let daemon = Daemon::start(config, path, Idle, Duration::ZERO).unwrap();
            let b = bucket(&key, &flow(1000));
            let twin = (1001u16..).find(|&p| bucket(&key, &flow(p)) == b).unwrap();
            Some(Self {
                daemon,
                bucket: b,
                twin,
            })
        }

        /// A round's frames, then the round; the rules in place after it.
        fn round(&mut self, round: u64) -> Vec<FlowRule> {
            // (Few runs: each test run flips a static key of the kernel,
            // slow under nested virtualisation.)
            for (sport, repeat) in [(1000, 2000), (self.twin, 2000), (20000, 400), (20001, 400)] {
                self.daemon
                    .datapath_mut()
                    .xdp()
                    .test_run(&udp_frame(sport), repeat)
                    .unwrap();
            }
            self.daemon
                .round(Duration::from_millis(100 * round))
                .unwrap();
            self.daemon.datapath_mut().rules()
        }
    }

    /// The calling thread runs on CPU 0 from now on: the frames it feeds
    /// the program are counted there.
    fn pin_to_cpu_0() {
        // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
    }
}
