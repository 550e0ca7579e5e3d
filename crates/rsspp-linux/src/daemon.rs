//! The balancing daemon's rounds: read the per-bucket counters and the CPUs'
//! busy time, run the core crate's [`ControlLoop`] (the RSS++ rebalancer,
//! CPU scaling, back-off), and write the moved buckets to the data path.
//!
//! No clock is read here and nothing is attached: the caller passes the
//! time, and the data path and the busy clock are traits, so that the same
//! rounds run against the XDP maps or a NIC in `rsspp run`, and against
//! fakes in the tests.

use std::time::{Duration, Instant};

use rsspp_core::control::ControlError;
use rsspp_core::handoff::HandoffTotals;
use rsspp_core::measure::{imbalance_ratio, load_from_busy};
use rsspp_core::orss::{FlowCount, OverrideConfig, OverrideCount, Overrides, RoundInput};
use rsspp_core::rand::SplitMix64;
use rsspp_core::reta::RetaError;
use rsspp_core::{ControlConfig, ControlLoop, IndirectionTable, MigrationPlan, ScalingAction};
use tracing::{debug, info};

use crate::cpu::{BusyClock, CpuError};
use crate::xdp::FlowInput;

/// Where packets are counted and steered: the XDP program's maps (software
/// mode) or the XDP counters plus the NIC's table (hardware mode).
pub trait DataPath {
    /// What reading the counters or writing the table fails with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Packets counted per bucket since the start, summed over CPUs.
    fn bucket_packets(&mut self, out: &mut [u64]) -> Result<(), Self::Error>;

    /// Packets since the start per target (the `targets` of the daemon, in
    /// that order): steered to it, or received on it.
    fn target_packets(&mut self, out: &mut [u64]) -> Result<(), Self::Error>;

    /// Makes the data path use `table` (one target per bucket); `changed`
    /// lists the buckets that differ from the table written before. A data
    /// path with order-preserving moves may keep a moved bucket on its old
    /// target until that target has drained it ([`DataPath::settle`]).
    fn write_table(&mut self, table: &[u32], changed: &[usize]) -> Result<(), Self::Error>;

    /// Called at the start of every round, at `now`: finishes the moves
    /// whose buckets have drained (or waited too long), and says which are
    /// still under way. A data path whose moves take effect at once has
    /// none (the default).
    fn settle(&mut self, _now: Duration) -> Result<Settlement, Self::Error> {
        Ok(Settlement::default())
    }

    /// The table the data path uses now, in target numbers, if it has one
    /// of its own to keep (a NIC's); `None` (the default): the daemon's
    /// first table is written.
    fn current_table(&mut self) -> Result<Option<Vec<u32>>, Self::Error> {
        Ok(None)
    }

    /// The CPU whose busy time is each target's load, in the order of the
    /// targets (hardware mode: the CPU serving each receive queue, which may
    /// change with the queues); `None` (the default): the targets are CPUs.
    fn serving_cpus(&self) -> Option<&[u32]> {
        None
    }

    /// Frames dropped per target since the start because its queue was
    /// full (the targets of the daemon, in that order). None by default.
    fn target_drops(&mut self, out: &mut [u64]) -> Result<(), Self::Error> {
        out.fill(0);
        Ok(())
    }

    /// Per-flow overrides: the flows of the hot buckets counted since the
    /// last call (`counted`, with their buckets), and every overridden
    /// flow's packets since then and whether its override is settled
    /// (`overridden`: moves of overrides that drained, or waited too long,
    /// are completed first, at `now`). `false` (the default): the data path
    /// has no per-flow overrides.
    fn flow_counts(
        &mut self,
        _now: Duration,
        _counted: &mut Vec<FlowCount<FlowInput>>,
        _overridden: &mut Vec<OverrideCount<FlowInput>>,
    ) -> Result<bool, Self::Error> {
        Ok(false)
    }

    /// Applies a round of the override controller: counts per flow in the
    /// `hot` buckets only, steers each flow of `moves` from its `from`
    /// target to its `to` (in order, as buckets move), deletes the
    /// overrides of `free`.
    fn write_overrides(
        &mut self,
        _hot: &[usize],
        _moves: &[FlowTarget],
        _free: &[FlowInput],
    ) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A flow to steer on its own, in targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowTarget {
    /// The flow.
    pub flow: FlowInput,
    /// Its bucket.
    pub bucket: usize,
    /// The target it is on now.
    pub from: u32,
    /// The target it goes to.
    pub to: u32,
    /// It has no override yet.
    pub new: bool,
}

/// The moves of a data path still under way, and how the others ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settlement {
    /// Buckets still in handoff: they must not move again yet.
    pub held: Vec<usize>,
    /// Handoffs completed since the start, by how they ended.
    pub totals: HandoffTotals,
    /// The table in use, in target numbers, when someone else changed it
    /// since the daemon's last write (`ethtool -X`, another tool).
    pub foreign_table: Option<Vec<u32>>,
}

/// How long the daemon first leaves the table alone after someone else
/// changed it; doubled each time it happens again, up to
/// [`MAX_FOREIGN_BACKOFF`].
pub const FOREIGN_BACKOFF: Duration = Duration::from_secs(30);

/// The longest the daemon leaves a table someone else keeps changing.
pub const MAX_FOREIGN_BACKOFF: Duration = Duration::from_secs(600);

/// Why the daemon could not start or a round failed; `E` is the data
/// path's error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError<E> {
    /// The counters could not be read.
    #[error("reading the packet counters: {0}")]
    Counters(#[source] E),
    /// The table could not be written; the previous one is still in use.
    #[error("writing the indirection table: {0}")]
    Table(#[source] E),
    /// The data path cannot go on (the queues it balances over are gone,
    /// its maps cannot be read).
    #[error("{0}")]
    DataPath(#[source] E),
    /// The CPUs' busy time could not be read.
    #[error(transparent)]
    Busy(#[from] CpuError),
    /// No target to spread the buckets over.
    #[error("no CPU to balance over")]
    NoTargets,
    /// The first table cannot be built (a size that is not a power of two).
    #[error(transparent)]
    Reta(#[from] RetaError),
    /// Counting only (`--no-balance`) keeps the device's table, which
    /// names a target the daemon was not given.
    #[error("--no-balance keeps the table in use, which names {target} (bucket {bucket}), not one of {targets:?}: list every queue the table names")]
    TableOutsideTargets {
        /// The bucket.
        bucket: usize,
        /// What it names.
        target: u32,
        /// The targets given.
        targets: Vec<u32>,
    },
    /// The rebalancer refused the round's measurements.
    #[error("rebalancer: {0}")]
    Rebalance(#[source] ControlError),
    /// A commit or abandon the control loop refused: the daemon drives it
    /// wrongly.
    #[error("control loop: {0}")]
    Control(#[source] ControlError),
}

/// The daemon's settings.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The CPUs (software mode) or receive queues (hardware mode) the table
    /// spreads over; target `i` is core `i` of the control loop. In
    /// hardware mode queue `q` is taken to be served by CPU `q`.
    pub targets: Vec<u32>,
    /// Buckets in the table.
    pub reta_size: usize,
    /// Interval, back-off, rebalancer and scaling settings.
    pub control: ControlConfig,
    /// False: count and report, never move a bucket (`--no-balance`).
    pub balance: bool,
    /// How a target's load is derived from the busy clock.
    pub load: LoadModel,
    /// Buckets moved at random every round, whatever the load (`--churn`;
    /// with overrides, one override too): a test of what migration does
    /// to the traffic. 0: none.
    pub churn: usize,
    /// Seed of the churn's random choices.
    pub churn_seed: u64,
    /// Per-flow overrides of the table (elephants inside buckets), where the
    /// data path has them; `None`: buckets only.
    pub elephants: Option<OverrideConfig>,
}

/// How the daemon turns busy time into each target's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadModel {
    /// Each target's own busy time over the interval.
    Measured,
    /// The targets' busy time added up, then shared in proportion to the
    /// packets each target got: balancing the load then balances packet
    /// rates, whatever else the CPUs do and however unevenly their threads
    /// batch.
    ByPackets,
}

/// One bucket moved by a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The bucket.
    pub bucket: usize,
    /// Target it left.
    pub from: u32,
    /// Target it went to.
    pub to: u32,
}

/// What a round measured and did.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    /// When it ran.
    pub at: Duration,
    /// Length of the interval it measured.
    pub interval: Duration,
    /// Load of each target over the interval, in `[0, 1]`.
    pub load: Vec<f64>,
    /// Packets per second per target over the interval.
    pub pps: Vec<f64>,
    /// Packets per bucket over the interval.
    pub bucket_packets: Vec<u64>,
    /// Frames dropped per target over the interval (queue full).
    pub drops: Vec<u64>,
    /// Buckets still in handoff when the round began.
    pub handoffs_pending: usize,
    /// (max − min) / min of the per-target packet rates (infinite when a
    /// target got nothing while others did; 0 when nothing arrived).
    pub imbalance: f64,
    /// Buckets moved, in the order of the plan.
    pub moves: Vec<Move>,
    /// Flows given an override or moved by it this round.
    pub flows_moved: Vec<FlowTarget>,
    /// Scaling decision.
    pub scaling: ScalingAction,
    /// Time the rebalancer took (0 with balancing off).
    pub solve: Duration,
    /// When the next round is due.
    pub next: Duration,
}

/// The rounds of the daemon over one data path.
pub struct Daemon<D: DataPath, B: BusyClock> {
    config: DaemonConfig,
    datapath: D,
    clock: B,
    control: ControlLoop,
    /// The table the data path uses, in control-loop core numbers (target
    /// `i` is core `i`): the one copy, changed only once the data path has
    /// taken a plan.
    table: IndirectionTable,
    /// The same table in target numbers, as last written (derived from
    /// `table`, for the metrics).
    written: Vec<u32>,
    last_buckets: Vec<u64>,
    last_targets: Vec<u64>,
    last_drops: Vec<u64>,
    last_busy: Vec<u64>,
    settlement: Settlement,
    /// Someone else changed the table: no writes until then, and the
    /// next pause if it happens again.
    paused_until: Option<Duration>,
    backoff: Duration,
    last_at: Duration,
    next: Duration,
    migrations: u64,
    rounds: u64,
    churn_rng: SplitMix64,
    /// The override controller, while the data path has overrides.
    overrides: Option<Box<Overrides<FlowInput>>>,
    counted: Vec<FlowCount<FlowInput>>,
    overridden: Vec<OverrideCount<FlowInput>>,
}

/// The moves grouped by CPU pair, most first: "0->1 x3, 2->1 x1".
fn cpu_pairs(moves: &[Move]) -> String {
    let mut pairs: Vec<((u32, u32), usize)> = Vec::new();
    for m in moves {
        match pairs.iter_mut().find(|(p, _)| *p == (m.from, m.to)) {
            Some((_, n)) => *n += 1,
            None => pairs.push(((m.from, m.to), 1)),
        }
    }
    pairs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown: Vec<String> = pairs
        .iter()
        .take(8)
        .map(|((from, to), n)| format!("cpu {from}->{to} x{n}"))
        .collect();
    let more = pairs.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{}, {more} more pairs", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// A ratio as a percentage for the log ("inf" when a CPU idles beside busy
/// ones).
fn percent(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{:.1}%", ratio * 100.0)
    } else {
        "inf".into()
    }
}

/// ", cpu N added" / ", cpu N removed" for the round's log line.
fn scaling_note(scaling: ScalingAction, targets: &[u32]) -> String {
    match scaling {
        ScalingAction::Add(c) => format!(", cpu {} added", targets[c]),
        ScalingAction::Remove(c) => format!(", cpu {} removed", targets[c]),
        ScalingAction::None | ScalingAction::NoSpareCore => String::new(),
    }
}

/// `table` with each core replaced by its target.
fn in_targets(table: &IndirectionTable, targets: &[u32]) -> Vec<u32> {
    table.entries().iter().map(|&c| targets[c]).collect()
}

/// `table` (target numbers) in control-loop core numbers; `Err((bucket,
/// target))` for the first bucket naming a target not in `targets`.
fn in_cores(table: &[u32], targets: &[u32]) -> Result<Vec<usize>, (usize, u32)> {
    table
        .iter()
        .enumerate()
        .map(|(bucket, &target)| {
            targets
                .iter()
                .position(|&t| t == target)
                .ok_or((bucket, target))
        })
        .collect()
}

/// Counter increase, tolerating a counter that restarted from zero.
fn delta(now: u64, before: u64) -> u64 {
    now.checked_sub(before).unwrap_or(now)
}

impl<D: DataPath, B: BusyClock> Daemon<D, B> {
    /// A daemon over `datapath`, whose table is the `equal` one over the
    /// targets (bucket i → targets[i mod n]), written now — except when it
    /// only counts (no balancing, no churn) on a data path with a table of
    /// its own (a NIC's), which it then keeps and writes nothing. The
    /// counters read now are the baseline of the first round, due one
    /// interval after `now`.
    pub fn start(
        config: DaemonConfig,
        mut datapath: D,
        mut clock: B,
        now: Duration,
    ) -> Result<Self, DaemonError<D::Error>> {
        let n = config.targets.len();
        if n == 0 {
            return Err(DaemonError::NoTargets);
        }
        let counting_only = !config.balance && config.churn == 0;
        let current = if counting_only {
            datapath.current_table().map_err(DaemonError::Counters)?
        } else {
            None
        };
        let table = match current {
            Some(current) => {
                let cores = in_cores(&current, &config.targets).map_err(|(bucket, target)| {
                    DaemonError::TableOutsideTargets {
                        bucket,
                        target,
                        targets: config.targets.clone(),
                    }
                })?;
                IndirectionTable::from_entries(cores, n)?
            }
            None => {
                let table = IndirectionTable::equal(config.reta_size, n)?;
                let all: Vec<usize> = (0..table.len()).collect();
                datapath
                    .write_table(&in_targets(&table, &config.targets), &all)
                    .map_err(DaemonError::Table)?;
                table
            }
        };
        let written = in_targets(&table, &config.targets);
        let mut last_buckets = vec![0; config.reta_size];
        datapath
            .bucket_packets(&mut last_buckets)
            .map_err(DaemonError::Counters)?;
        let mut last_targets = vec![0; n];
        datapath
            .target_packets(&mut last_targets)
            .map_err(DaemonError::Counters)?;
        let mut last_drops = vec![0; n];
        datapath
            .target_drops(&mut last_drops)
            .map_err(DaemonError::Counters)?;
        let mut last_busy = vec![0; n];
        let cpus = datapath.serving_cpus().unwrap_or(&config.targets);
        clock.busy_ns(cpus, &mut last_busy)?;
        let interval = config.control.interval;
        let config_seed = config.churn_seed;
        let mut counted = Vec::new();
        let mut overridden = Vec::new();
        let overrides = match config.elephants {
            Some(c) if config.balance => datapath
                .flow_counts(now, &mut counted, &mut overridden)
                .map_err(DaemonError::Counters)?
                .then(|| Box::new(Overrides::new(c))),
            _ => None,
        };
        Ok(Self {
            control: ControlLoop::new(config.control),
            config,
            datapath,
            clock,
            table,
            written,
            last_buckets,
            last_targets,
            last_drops,
            last_busy,
            settlement: Settlement::default(),
            paused_until: None,
            backoff: FOREIGN_BACKOFF,
            last_at: now,
            next: now + interval,
            migrations: 0,
            rounds: 0,
            churn_rng: SplitMix64::new(config_seed),
            overrides,
            counted,
            overridden,
        })
    }

    /// Per-flow overrides in use; `None` without overrides.
    pub fn overrides_in_use(&self) -> Option<usize> {
        self.overrides.as_deref().map(Overrides::in_use)
    }

    /// Flows given an override or moved since the start.
    pub fn elephants_moved(&self) -> u64 {
        self.overrides.as_deref().map_or(0, Overrides::moved_total)
    }

    /// When the next round is due.
    pub fn next_round(&self) -> Duration {
        self.next
    }

    /// The table in use, in target numbers.
    pub fn table(&self) -> &[u32] {
        &self.written
    }

    /// The targets, in control-loop order.
    pub fn targets(&self) -> &[u32] {
        &self.config.targets
    }

    /// Packets per bucket since the data path was loaded, as of the last
    /// round.
    pub fn bucket_totals(&self) -> &[u64] {
        &self.last_buckets
    }

    /// Packets per target since the data path was loaded, as of the last
    /// round.
    pub fn target_totals(&self) -> &[u64] {
        &self.last_targets
    }

    /// Frames dropped per target since the start (queue full), as of the
    /// last round.
    pub fn target_drops(&self) -> &[u64] {
        &self.last_drops
    }

    /// The data path's moves under way and completed, as of the last
    /// round.
    pub fn settlement(&self) -> &Settlement {
        &self.settlement
    }

    /// Buckets moved since the start.
    pub fn migrations(&self) -> u64 {
        self.migrations
    }

    /// Rounds run since the start.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// The data path.
    pub fn datapath_mut(&mut self) -> &mut D {
        &mut self.datapath
    }

    /// Gives the data path back (to detach it).
    pub fn into_datapath(self) -> D {
        self.datapath
    }

    /// Writes `table` (control-loop core numbers), reached from the table
    /// in use by `plan`, to the data path; on success it is the table in use.
    fn write(&mut self, table: &IndirectionTable, plan: &MigrationPlan) -> Result<(), D::Error> {
        let written = in_targets(table, &self.config.targets);
        let changed: Vec<usize> = plan.moves.iter().map(|m| m.bucket).collect();
        self.datapath.write_table(&written, &changed)?;
        self.table = table.clone();
        self.written = written;
        Ok(())
    }

    /// `plan`'s moves in target numbers; each logged at debug level.
    fn moves_of(&self, plan: &MigrationPlan) -> Vec<Move> {
        let targets = &self.config.targets;
        plan.moves
            .iter()
            .map(|m| {
                let mv = Move {
                    bucket: m.bucket,
                    from: targets[m.from],
                    to: targets[m.to],
                };
                debug!(
                    bucket = mv.bucket,
                    from = mv.from,
                    to = mv.to,
                    "moved bucket"
                );
                mv
            })
            .collect()
    }

    /// Someone else wrote the table: adopt it as the table in use when it
    /// names only our targets, and leave it alone for a while (longer each
    /// time), saying so once.
    fn follow_foreign_table(&mut self, now: Duration, table: &[u32]) {
        let targets = &self.config.targets;
        let adopted = in_cores(table, targets)
            .ok()
            .filter(|c| c.len() == self.table.len())
            .and_then(|c| IndirectionTable::from_entries(c, targets.len()).ok());
        let again = self.paused_until.is_some();
        if again {
            self.backoff = (self.backoff * 2).min(MAX_FOREIGN_BACKOFF);
        }
        let pause = self.backoff;
        if !again {
            tracing::warn!(
                "someone else changed the indirection table (ethtool -X, another tool): not writing it for {} s{}",
                pause.as_secs(),
                if adopted.is_some() { ", balancing from their table after" } else { "; their table names other queues than --cpus" }
            );
        } else {
            debug!(
                pause = pause.as_secs(),
                "the table was changed again by someone else"
            );
        }
        if let Some(t) = adopted {
            self.written = in_targets(&t, targets);
            self.table = t;
        }
        self.paused_until = Some(now + pause);
    }

    /// Runs the round due at `now`: measures the interval since the last
    /// round, rebalances, and writes the moved buckets.
    pub fn round(&mut self, now: Duration) -> Result<Round, DaemonError<D::Error>> {
        let n = self.config.targets.len();
        let interval = now
            .saturating_sub(self.last_at)
            .max(Duration::from_micros(1));
        let seconds = interval.as_secs_f64();

        let mut buckets = vec![0; self.config.reta_size];
        self.datapath
            .bucket_packets(&mut buckets)
            .map_err(DaemonError::Counters)?;
        let mut targets = vec![0; n];
        self.datapath
            .target_packets(&mut targets)
            .map_err(DaemonError::Counters)?;
        let mut drops = vec![0; n];
        self.datapath
            .target_drops(&mut drops)
            .map_err(DaemonError::Counters)?;
        let mut busy = vec![0; n];
        let cpus = self.datapath.serving_cpus().unwrap_or(&self.config.targets);
        self.clock.busy_ns(cpus, &mut busy)?;
        self.settlement = self.datapath.settle(now).map_err(DaemonError::DataPath)?;
        self.counted.clear();
        self.overridden.clear();
        if self.overrides.is_some() {
            self.datapath
                .flow_counts(now, &mut self.counted, &mut self.overridden)
                .map_err(DaemonError::Counters)?;
        }
        if let Some(table) = self.settlement.foreign_table.take() {
            self.follow_foreign_table(now, &table);
        }
        let paused = self.paused_until.is_some_and(|until| now < until);

        let bucket_packets: Vec<u64> = buckets
            .iter()
            .zip(&self.last_buckets)
            .map(|(&a, &b)| delta(a, b))
            .collect();
        let targets_delta: Vec<u64> = targets
            .iter()
            .zip(&self.last_targets)
            .map(|(&a, &b)| delta(a, b))
            .collect();
        let pps: Vec<f64> = targets_delta.iter().map(|&d| d as f64 / seconds).collect();
        let busy_load: Vec<f64> = busy
            .iter()
            .zip(&self.last_busy)
            .map(|(&a, &b)| load_from_busy(delta(a, b), interval.as_nanos() as u64))
            .collect();
        let dropped: Vec<u64> = drops
            .iter()
            .zip(&self.last_drops)
            .map(|(&a, &b)| delta(a, b))
            .collect();
        let mut load: Vec<f64> = match self.config.load {
            LoadModel::Measured => busy_load,
            LoadModel::ByPackets => rsspp_core::measure::loads_by_packets(&busy_load, &pps),
        };
        // A target whose queue overflowed had more to do than it had time
        // for: saturated, whatever its busy time says. The rebalancer then
        // takes its demand from its packets, which were counted before the
        // queue, dropped ones included.
        for (l, &d) in load.iter_mut().zip(&dropped) {
            if d > 0 {
                *l = 1.0;
            }
        }
        self.last_buckets = buckets;
        self.last_targets = targets;
        self.last_drops = drops;
        self.last_busy = busy;
        self.last_at = now;
        self.rounds += 1;

        let imbalance = imbalance_ratio(&pps);
        let mut moves = Vec::new();
        let mut scaling = ScalingAction::None;
        let mut solve = Duration::ZERO;
        let mut churned = 0;
        let mut flows_moved = Vec::new();
        if self.config.balance && !paused {
            let started = Instant::now();
            self.control.hold(&self.settlement.held);
            // Overridden flows are no bucket's: their packets are load fixed
            // to their targets.
            let split = self
                .overrides
                .as_ref()
                .map(|o| o.split(&bucket_packets, &self.overridden, n));
            if let Some(split) = &split {
                self.control.fix_packets(&split.fixed_packets);
            }
            let counts = split
                .as_ref()
                .map_or(&bucket_packets, |s| &s.bucket_packets);
            let tick = self
                .control
                .tick(now, &self.table, counts, &load)
                .map_err(DaemonError::Rebalance)?;
            scaling = tick.outcome.scaling;
            self.next = now + tick.next_interval;
            let plan = &tick.outcome.plan;
            if !plan.is_empty() {
                if let Err(e) = self.write(&tick.outcome.table, plan) {
                    // The data path kept the old table, which is still in
                    // use: the loop forgets the plan and tries again next
                    // round.
                    self.control.abandon(now).map_err(DaemonError::Control)?;
                    self.next = self.control.next_deadline();
                    return Err(DaemonError::Table(e));
                }
                self.control.commit().map_err(DaemonError::Control)?;
                moves = self.moves_of(plan);
                let after: Vec<f64> = tick
                    .outcome
                    .active_cores
                    .iter()
                    .map(|&c| tick.outcome.load_after[c])
                    .collect();
                info!(
                    "round {}: moved {} bucket{} ({}); load imbalance {} -> {} predicted{}",
                    self.rounds,
                    moves.len(),
                    if moves.len() == 1 { "" } else { "s" },
                    cpu_pairs(&moves),
                    percent(tick.imbalance),
                    percent(imbalance_ratio(&after)),
                    scaling_note(scaling, &self.config.targets),
                );
            } else if let Some(d) = tick.dropped {
                debug!(
                    moves = d.moves,
                    imbalance = tick.imbalance,
                    predicted = d.predicted_imbalance,
                    "plan dropped: predicted improvement below --min-improvement"
                );
            }
            flows_moved = self.elephants(&targets_delta, &bucket_packets, &moves)?;
            solve = started.elapsed();
        } else {
            self.next = now + self.config.control.interval;
        }
        if self.config.churn > 0 && !paused {
            let n = self.config.targets.len();
            // Buckets still in handoff, or moved by the rebalancer just now,
            // stay where they are going.
            let mut held = self.settlement.held.clone();
            held.extend(moves.iter().map(|m| m.bucket));
            let plan = self
                .table
                .random_plan(self.config.churn, n, &held, &mut self.churn_rng);
            let mut table = self.table.clone();
            table.apply(&plan, n).map_err(DaemonError::Reta)?;
            self.write(&table, &plan).map_err(DaemonError::Table)?;
            let churn = self.moves_of(&plan);
            churned = churn.len();
            info!(
                "round {}: churn moved {} bucket{} at random ({})",
                self.rounds,
                churned,
                if churned == 1 { "" } else { "s" },
                cpu_pairs(&churn)
            );
            moves.extend(churn);
        }
        self.migrations += moves.len() as u64;
        debug!(
            ?load,
            ?pps,
            imbalance,
            moved = moves.len(),
            churned,
            "round"
        );
        Ok(Round {
            at: now,
            interval,
            load,
            pps,
            bucket_packets,
            drops: dropped,
            handoffs_pending: self.settlement.held.len(),
            imbalance,
            moves,
            flows_moved,
            scaling,
            solve,
            next: self.next,
        })
    }

    /// The override controller's round, after the bucket rebalancer's
    /// (`moved`: its moves, whose buckets' flows are not settled): counts
    /// per flow in the hot buckets, overrides given, moved and freed, and
    /// written to the data path. Returns the flows moved.
    fn elephants(
        &mut self,
        target_packets: &[u64],
        bucket_packets: &[u64],
        moved: &[Move],
    ) -> Result<Vec<FlowTarget>, DaemonError<D::Error>> {
        let Some(overrides) = &mut self.overrides else {
            return Ok(Vec::new());
        };
        let mut held = self.settlement.held.clone();
        held.extend(moved.iter().map(|m| m.bucket));
        held.sort_unstable();
        held.dedup();
        let mut plan = overrides.round(&RoundInput {
            table: self.table.entries(),
            held: &held,
            bucket_packets,
            core_packets: target_packets,
            counted: &self.counted,
            overridden: &self.overridden,
        });
        // --churn: one settled override moved too, whatever the load.
        if self.config.churn > 0 {
            let unsettled: Vec<FlowInput> = self
                .overridden
                .iter()
                .filter(|o| !o.settled)
                .map(|o| o.key)
                .collect();
            let churned = overrides.churn(
                &mut self.churn_rng,
                self.table.entries(),
                &held,
                &mut plan,
                |key| !unsettled.contains(key),
            );
            if let Some(m) = churned {
                info!(
                    "round {}: churn: elephant {} (bucket {}) moved",
                    self.rounds, m.key, m.bucket
                );
            }
        }
        let targets = &self.config.targets;
        let flows: Vec<FlowTarget> = plan
            .add
            .iter()
            .map(|m| (m, true))
            .chain(plan.moves.iter().map(|m| (m, false)))
            .map(|(m, new)| FlowTarget {
                flow: m.key,
                bucket: m.bucket,
                from: targets[m.from],
                to: targets[m.to],
                new,
            })
            .collect();
        let free: Vec<FlowInput> = plan.free.iter().map(|&(f, _)| f).collect();
        self.datapath
            .write_overrides(&plan.hot, &flows, &free)
            .map_err(DaemonError::Table)?;
        for f in &flows {
            info!(
                "round {}: elephant {} (bucket {}) {} cpu {} -> {}",
                self.rounds,
                f.flow,
                f.bucket,
                if f.new {
                    "given an override,"
                } else {
                    "moved,"
                },
                f.from,
                f.to
            );
        }
        for (flow, why) in &plan.free {
            debug!(%flow, ?why, "override freed");
        }
        Ok(flows)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// A data path and CPUs in one: each bucket has a packet rate, each
    /// packet costs a target 1 µs; time advances with the rounds.
    struct FakeMachine {
        table: Vec<u32>,
        targets: Vec<u32>,
        pps: Vec<f64>,
        buckets: Vec<f64>,
        per_target: Vec<f64>,
        busy_ns: Vec<f64>,
        at: f64,
        writes: usize,
        refuse: bool,
        /// Nanoseconds a packet costs each target.
        ns_per_packet: Vec<f64>,
        /// Packets each target had no time for (its queue overflowed).
        dropped: Vec<f64>,
    }

    impl FakeMachine {
        fn new(targets: &[u32], pps: Vec<f64>) -> Rc<RefCell<Self>> {
            Rc::new(RefCell::new(Self {
                table: vec![u32::MAX; pps.len()],
                targets: targets.to_vec(),
                buckets: vec![0.0; pps.len()],
                per_target: vec![0.0; targets.len()],
                busy_ns: vec![0.0; targets.len()],
                pps,
                at: 0.0,
                writes: 0,
                refuse: false,
                ns_per_packet: vec![1_000.0; targets.len()],
                dropped: vec![0.0; targets.len()],
            }))
        }

        /// Runs the traffic until `t` seconds; a target saturates when its
        /// packets take all its time.
        fn advance(&mut self, t: f64) {
            let dt = t - self.at;
            self.at = t;
            let mut demand = vec![0.0; self.targets.len()];
            for (b, &rate) in self.pps.iter().enumerate() {
                let i = self
                    .targets
                    .iter()
                    .position(|&c| c == self.table[b])
                    .unwrap();
                demand[i] += rate * dt;
                self.buckets[b] += rate * dt;
            }
            for (i, d) in demand.into_iter().enumerate() {
                let cost = self.ns_per_packet[i];
                self.per_target[i] += d;
                let capacity = dt * 1e9 / cost;
                self.busy_ns[i] += d.min(capacity) * cost;
                self.dropped[i] += (d - capacity).max(0.0);
            }
        }
    }

    /// The daemon's handle on the machine (its data path and its clock).
    struct Handle(Rc<RefCell<FakeMachine>>);

    /// The machine refused a table.
    #[derive(Debug, PartialEq, thiserror::Error)]
    #[error("device busy")]
    struct Busy;

    impl DataPath for Handle {
        type Error = Busy;

        fn bucket_packets(&mut self, out: &mut [u64]) -> Result<(), Busy> {
            for (o, &b) in out.iter_mut().zip(&self.0.borrow().buckets) {
                *o = b as u64;
            }
            Ok(())
        }

        fn target_packets(&mut self, out: &mut [u64]) -> Result<(), Busy> {
            for (o, &t) in out.iter_mut().zip(&self.0.borrow().per_target) {
                *o = t as u64;
            }
            Ok(())
        }

        fn target_drops(&mut self, out: &mut [u64]) -> Result<(), Busy> {
            for (o, &d) in out.iter_mut().zip(&self.0.borrow().dropped) {
                *o = d as u64;
            }
            Ok(())
        }

        fn write_table(&mut self, table: &[u32], changed: &[usize]) -> Result<(), Busy> {
            let mut m = self.0.borrow_mut();
            if m.refuse {
                return Err(Busy);
            }
            for &b in changed {
                m.table[b] = table[b];
            }
            assert_eq!(m.table, table, "`changed` lists every difference");
            m.writes += 1;
            Ok(())
        }
    }

    impl BusyClock for Handle {
        fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
            let m = self.0.borrow();
            assert_eq!(cpus, m.targets.as_slice());
            for (o, &b) in out.iter_mut().zip(&m.busy_ns) {
                *o = b as u64;
            }
            Ok(())
        }
    }

    type FakeDaemon = Daemon<Handle, Handle>;

    fn start(
        machine: &Rc<RefCell<FakeMachine>>,
        balance: bool,
    ) -> Result<FakeDaemon, DaemonError<Busy>> {
        start_with(machine, balance, LoadModel::Measured)
    }

    fn start_with(
        machine: &Rc<RefCell<FakeMachine>>,
        balance: bool,
        load: LoadModel,
    ) -> Result<FakeDaemon, DaemonError<Busy>> {
        start_churning(machine, balance, load, 0)
    }

    fn start_churning(
        machine: &Rc<RefCell<FakeMachine>>,
        balance: bool,
        load: LoadModel,
        churn: usize,
    ) -> Result<FakeDaemon, DaemonError<Busy>> {
        let config = DaemonConfig {
            targets: machine.borrow().targets.clone(),
            reta_size: 128,
            control: ControlConfig::default(),
            balance,
            load,
            churn,
            churn_seed: 1,
            elephants: None,
        };
        Daemon::start(
            config,
            Handle(Rc::clone(machine)),
            Handle(Rc::clone(machine)),
            Duration::ZERO,
        )
    }

    /// Advances the machine to the next round and runs it.
    fn step(
        d: &mut FakeDaemon,
        machine: &Rc<RefCell<FakeMachine>>,
    ) -> Result<Round, DaemonError<Busy>> {
        let t = d.next_round();
        machine.borrow_mut().advance(t.as_secs_f64());
        d.round(t)
    }

    /// Mice everywhere, and two elephants on buckets the equal table puts
    /// on the same target.
    fn skewed() -> Vec<f64> {
        let mut pps = vec![1_000.0; 128];
        pps[0] = 150_000.0;
        pps[2] = 150_000.0;
        pps
    }

    #[test]
    fn starts_with_the_equal_table_over_the_targets() {
        let m = FakeMachine::new(&[4, 6], vec![0.0; 128]);
        let d = start(&m, false).unwrap();
        assert_eq!(&d.table()[..4], &[4, 6, 4, 6]);
        assert_eq!(m.borrow().table, d.table());
        assert_eq!(m.borrow().writes, 1);
    }

    #[test]
    fn balancing_evens_out_the_packet_rates() {
        let m = FakeMachine::new(&[0, 1], skewed());
        let mut d = start(&m, true).unwrap();
        let rounds: Vec<Round> = (0..6).map(|_| step(&mut d, &m).unwrap()).collect();
        let first = &rounds[0];
        assert!(first.imbalance > 1.0, "static table: {:?}", first.pps);
        assert!(
            first.load[0] > 0.25 && first.load[1] < 0.1,
            "{:?}",
            first.load
        );
        let last = rounds.last().unwrap();
        assert!(last.imbalance < 0.10, "{:?}", last.pps);
        assert!(d.migrations() > 0);
        assert_ne!(d.table()[0], d.table()[2], "the elephants are apart");
        assert_eq!(m.borrow().table, d.table());
        let moved: Vec<usize> = rounds.iter().map(|r| r.moves.len()).collect();
        assert!(rounds[3..].iter().all(|r| r.moves.is_empty()), "{moved:?}");
    }

    #[test]
    fn a_target_whose_queue_overflows_counts_as_saturated() {
        // 600 kpps on each target; target 0's packets cost 2 µs (room for
        // 500 kpps: it drops), target 1's 0.5 µs. Shared by packets, the
        // busy time (1.0 + 0.3) gives each 0.65: target 0 would look fine.
        // Its drops say it is saturated.
        let pps = vec![600_000.0 / 64.0; 128];
        let m = FakeMachine::new(&[0, 1], pps.clone());
        m.borrow_mut().ns_per_packet = vec![2_000.0, 500.0];
        let mut d = start_with(&m, false, LoadModel::ByPackets).unwrap();
        let r = step(&mut d, &m).unwrap();
        assert!(r.drops[0] > 5_000 && r.drops[1] == 0, "{:?}", r.drops);
        assert_eq!(r.load[0], 1.0, "{:?}", r.load);
        assert!((r.load[1] - 0.65).abs() < 0.02, "{:?}", r.load);
        assert_eq!(d.target_drops()[0], r.drops[0]);

        // Within its capacity: no drops, the shared load as it is.
        let m = FakeMachine::new(&[0, 1], vec![400_000.0 / 64.0; 128]);
        m.borrow_mut().ns_per_packet = vec![2_000.0, 500.0];
        let mut d = start_with(&m, false, LoadModel::ByPackets).unwrap();
        let r = step(&mut d, &m).unwrap();
        assert_eq!(r.drops, vec![0, 0]);
        assert!((r.load[0] - 0.5).abs() < 0.02, "{:?}", r.load);
    }

    #[test]
    fn no_balance_counts_and_moves_nothing() {
        let m = FakeMachine::new(&[0, 1], skewed());
        let mut d = start(&m, false).unwrap();
        let rounds: Vec<Round> = (0..5).map(|_| step(&mut d, &m).unwrap()).collect();
        assert_eq!(d.migrations(), 0);
        assert_eq!(m.borrow().writes, 1);
        assert!(rounds
            .iter()
            .all(|r| r.imbalance > 1.0 && r.moves.is_empty()));
        assert_eq!(d.table()[0], d.table()[2]);
        let total: u64 = rounds[0].bucket_packets.iter().sum();
        let expected = 0.1 * (300_000.0 + 126_000.0);
        assert!((total as f64 - expected).abs() < 130.0, "{total}");
    }

    #[test]
    fn churn_moves_random_buckets_every_round_and_counts_them() {
        let m = FakeMachine::new(&[0, 1, 2], vec![1_000.0; 128]);
        let mut d = start_churning(&m, false, LoadModel::Measured, 5).unwrap();
        let mut moved = std::collections::BTreeSet::new();
        for round in 1..=4 {
            let before = d.table().to_vec();
            let r = step(&mut d, &m).unwrap();
            assert_eq!(r.moves.len(), 5);
            for mv in &r.moves {
                assert_eq!(before[mv.bucket], mv.from);
                assert_ne!(mv.from, mv.to);
                assert_eq!(d.table()[mv.bucket], mv.to);
                moved.insert(mv.bucket);
            }
            assert_eq!(d.migrations(), 5 * round);
            assert_eq!(m.borrow().table, d.table(), "written to the data path");
        }
        assert!(moved.len() > 5, "the same buckets every round: {moved:?}");
    }

    #[test]
    fn a_refused_write_keeps_the_table_and_is_retried() {
        let m = FakeMachine::new(&[0, 1], skewed());
        let mut d = start(&m, true).unwrap();
        m.borrow_mut().refuse = true;
        let before = d.table().to_vec();
        let e = step(&mut d, &m).unwrap_err();
        assert!(matches!(e, DaemonError::Table(Busy)), "{e}");
        assert_eq!(e.to_string(), "writing the indirection table: device busy");
        assert_eq!(d.table(), before.as_slice());
        assert_eq!(d.migrations(), 0);
        m.borrow_mut().refuse = false;
        let r = step(&mut d, &m).unwrap();
        assert!(!r.moves.is_empty());
        assert_ne!(d.table(), before.as_slice());
        assert_eq!(m.borrow().table, d.table());
    }

    #[test]
    fn load_by_packets_balances_packet_rates_where_costs_differ() {
        // Target 0's packets cost three times more (a CPU shared with other
        // work, a thread that batches badly): balancing the measured load
        // gives it fewer packets; balancing by packets evens the rates.
        let run = |model| {
            let m = FakeMachine::new(&[0, 1], vec![2_000.0; 128]);
            m.borrow_mut().ns_per_packet = vec![3_000.0, 1_000.0];
            let mut d = start_with(&m, true, model).unwrap();
            let rounds: Vec<Round> = (0..8).map(|_| step(&mut d, &m).unwrap()).collect();
            rounds.last().unwrap().pps.clone()
        };
        let measured = run(LoadModel::Measured);
        assert!(measured[1] > 2.0 * measured[0], "{measured:?}");
        let by_packets = run(LoadModel::ByPackets);
        assert!(imbalance_ratio(&by_packets) < 0.05, "{by_packets:?}");
    }

    #[test]
    fn bad_settings_are_refused() {
        let m = FakeMachine::new(&[], vec![0.0; 128]);
        assert!(matches!(start(&m, true), Err(DaemonError::NoTargets)));
        let m = FakeMachine::new(&[0], vec![0.0; 100]);
        let config = DaemonConfig {
            targets: vec![0],
            reta_size: 100,
            control: ControlConfig::default(),
            balance: true,
            load: LoadModel::Measured,
            churn: 0,
            churn_seed: 1,
            elephants: None,
        };
        let e = Daemon::start(config, Handle(Rc::clone(&m)), Handle(m), Duration::ZERO)
            .err()
            .unwrap();
        assert!(matches!(e, DaemonError::Reta(_)), "{e}");
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
