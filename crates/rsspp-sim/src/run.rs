//! Running policies over one workload: the workload is read (and
//! generated) once, in windows, and the policies simulate each window on a
//! few threads ([`Pool`]), each policy's windows in order.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;

use crate::engine::{Engine, EngineConfig};
use crate::packet::SimPacket;
use crate::policy::{self, Policy, PolicyConfig};
use crate::reframer::{ReframerConfig, ReframerStage};
use crate::result::PolicyResult;
use crate::workload::{RateProfile, Workload, WorkloadConfig, WorkloadCounts};
use crate::SimError;

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The packets.
    pub workload: WorkloadConfig,
    /// Engine and cost model.
    pub engine: EngineConfig,
    /// Settings shared by the policies.
    pub policy: PolicyConfig,
    /// Policy names, in report order.
    pub policies: Vec<String>,
    /// A Reframer stage in front of the NIC, for every policy (their names
    /// get `+reframer`, their `mechanisms` the stage's counters).
    pub reframer: Option<ReframerConfig>,
}

/// What the run read besides the results.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    /// One result per policy, in the order asked.
    pub results: Vec<PolicyResult>,
    /// The workload's counters.
    pub workload: WorkloadCounts,
}

impl RunConfig {
    /// `policies` over `workload` on `cores` processing cores, with the
    /// default engine, cost model and policy settings and no Reframer.
    pub fn new(workload: WorkloadConfig, cores: usize, policies: &[&str]) -> Self {
        Self {
            workload,
            engine: EngineConfig::default(),
            policy: PolicyConfig {
                cores,
                ..PolicyConfig::default()
            },
            policies: policies.iter().map(|s| s.to_string()).collect(),
            reframer: None,
        }
    }

    /// Checks the cost model and builds every policy once, so that a bad
    /// name or setting is refused before anything runs.
    pub fn validate(&self) -> Result<Vec<Box<dyn Policy>>, SimError> {
        self.engine
            .cost
            .validate()
            .map_err(SimError::InvalidOption)?;
        if self.policies.is_empty() {
            return Err(SimError::InvalidOption("no policy to run".into()));
        }
        self.policies
            .iter()
            .map(|name| policy::build(name, &self.policy))
            .collect()
    }
}

/// Windows of packets kept in flight between the reader and the slowest
/// policy.
const IN_FLIGHT: usize = 4;

/// Runs every policy of `config` over the workload. `progress` is called
/// with the simulated seconds read so far.
pub fn run(config: &RunConfig, mut progress: impl FnMut(f64)) -> Result<RunOutput, SimError> {
    let policies = config.validate()?;
    // The stage runs once, in the reading thread: every policy sees the
    // same reframed stream, as behind one Reframer server.
    let mut stage = config.reframer.map(ReframerStage::new).transpose()?;
    let mut workload = Workload::open(&config.workload)?;
    let engines: Vec<Engine> = policies
        .into_iter()
        .map(|policy| Engine::new(policy, config.engine.clone()))
        .collect();
    let (engines, read_result) = simulate_all(engines, |offer| -> Result<(), SimError> {
        loop {
            let mut batch = Vec::new();
            let more = workload.next_batch(&mut batch)?;
            if let Some(last) = batch.last() {
                progress(last.arrival_ns as f64 / 1e9);
            }
            if let Some(stage) = stage.as_mut() {
                // What the stage still holds at the window's end waits for the
                // next window.
                let mut out = stage.window(&batch);
                if !more {
                    out.extend(stage.finish());
                }
                batch = out;
            }
            if !batch.is_empty() && !offer(batch) {
                // A simulating thread panicked; its join reports it.
                return Ok(());
            }
            if !more {
                return Ok(());
            }
        }
    });
    read_result?;
    let counts = workload.counts();
    if counts.packets == 0 {
        return Err(SimError::EmptyWorkload);
    }
    let mut results: Vec<PolicyResult> = engines.into_iter().map(Engine::finish).collect();
    if let Some(stage) = &stage {
        let mechanisms = crate::reframer::mechanisms(&stage.counts());
        for r in &mut results {
            r.name.push_str("+reframer");
            r.summary.mechanisms.reframer = Some(mechanisms);
        }
    }
    Ok(RunOutput {
        results,
        workload: counts,
    })
}

/// Runs `engines` over the windows `read` hands to its argument (which
/// returns false once a simulating thread has panicked: `read` should stop
/// then), each engine's windows in order, on one thread per CPU at most
/// while `read` runs on this one. Returns the engines and what `read`
/// returned; panics if a simulating thread did.
fn simulate_all<E>(
    engines: Vec<Engine>,
    read: impl FnOnce(&mut dyn FnMut(Vec<SimPacket>) -> bool) -> Result<(), E>,
) -> (Vec<Engine>, Result<(), E>) {
    // A thread runs one policy over a whole window before it takes the
    // next, so the policies' tables stay in the CPU's cache longer than when
    // the operating system slices a thread per policy.
    let threads = thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(engines.len())
        .max(1);
    let pool = Pool::new(engines, threads);
    let read_result = thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let pool = &pool;
                scope.spawn(move || pool.simulate(thread))
            })
            .collect();
        let read_result = read(&mut |window| pool.offer(window));
        pool.close();
        for h in handles {
            h.join().expect("a policy simulation panicked");
        }
        read_result
    });
    (pool.into_engines(), read_result)
}

/// The policies' engines and the windows of packets they have not all
/// simulated yet, shared by the reader and the simulating threads.
struct Pool {
    state: Mutex<PoolState>,
    /// Signalled when a window comes or goes, an engine is put back, the
    /// input ends or a thread fails.
    changed: Condvar,
}

struct PoolState {
    /// Windows some engine has still to simulate; `windows[0]` is window
    /// number `first`.
    windows: VecDeque<Arc<Vec<SimPacket>>>,
    first: usize,
    /// Per policy: its engine (`None` while a thread runs it), the windows
    /// it has simulated and the thread that ran it last.
    engines: Vec<Option<Engine>>,
    fed: Vec<usize>,
    ran_on: Vec<usize>,
    /// No window comes after those offered.
    closed: bool,
    /// A simulating thread panicked: everyone stops.
    failed: bool,
}

impl PoolState {
    /// What thread `thread` runs next: the idle engine furthest behind
    /// among those with a window to run, one it ran last if it can (its
    /// tables are in that CPU's cache), and that window.
    fn next_job(&self, thread: usize) -> Option<(usize, Arc<Vec<SimPacket>>)> {
        let offered = self.first + self.windows.len();
        (0..self.engines.len())
            .filter(|&i| self.engines[i].is_some() && self.fed[i] < offered)
            .min_by_key(|&i| (self.ran_on[i] != thread, self.fed[i]))
            .map(|i| (i, Arc::clone(&self.windows[self.fed[i] - self.first])))
    }

    /// Whether every engine has simulated every window and no more come.
    fn all_done(&self) -> bool {
        let offered = self.first + self.windows.len();
        self.closed && self.fed.iter().all(|&f| f == offered)
    }
}

impl Pool {
    fn new(engines: Vec<Engine>, threads: usize) -> Self {
        let n = engines.len();
        Self {
            state: Mutex::new(PoolState {
                windows: VecDeque::new(),
                first: 0,
                engines: engines.into_iter().map(Some).collect(),
                fed: vec![0; n],
                // Dealt round the threads to begin with.
                ran_on: (0..n).map(|i| i % threads).collect(),
                closed: false,
                failed: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Nothing panics while holding the lock; a simulating thread that
        // panics outside it sets `failed`.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, PoolState>) -> MutexGuard<'a, PoolState> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands the engines a window, once fewer than [`IN_FLIGHT`] are
    /// waiting; false when a simulating thread failed.
    fn offer(&self, window: Vec<SimPacket>) -> bool {
        let mut st = self.lock();
        while !st.failed && st.windows.len() >= IN_FLIGHT {
            st = self.wait(st);
        }
        if st.failed {
            return false;
        }
        st.windows.push_back(Arc::new(window));
        self.changed.notify_all();
        true
    }

    /// No more windows.
    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// A simulating thread: runs engines over windows until every engine
    /// has run every window.
    fn simulate(&self, thread: usize) {
        let mut st = self.lock();
        loop {
            if st.failed || st.all_done() {
                return;
            }
            let Some((i, window)) = st.next_job(thread) else {
                st = self.wait(st);
                continue;
            };
            let mut engine = st.engines[i].take().expect("an idle engine");
            drop(st);
            let failing = FailOnPanic(self);
            engine.feed(&window);
            drop(failing);
            drop(window);
            st = self.lock();
            st.engines[i] = Some(engine);
            st.fed[i] += 1;
            st.ran_on[i] = thread;
            while !st.windows.is_empty() && st.fed.iter().all(|&f| f > st.first) {
                st.windows.pop_front();
                st.first += 1;
            }
            self.changed.notify_all();
        }
    }

    fn into_engines(self) -> Vec<Engine> {
        let st = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        st.engines
            .into_iter()
            .map(|e| e.expect("every engine back"))
            .collect()
    }
}

/// Stops the pool when a simulating thread panics, so that nobody waits for
/// the engine it held.
struct FailOnPanic<'a>(&'a Pool);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.lock().failed = true;
            self.0.changed.notify_all();
        }
    }
}

/// The replay speed at which `config`'s workload keeps the processing cores
/// at `target_load` on average: a one-second pilot at speed 1 under static
/// RSS (without any Reframer) measures the packet rate and the cycles per
/// packet.
pub fn speed_for_load(config: &RunConfig, target_load: f64) -> Result<f64, SimError> {
    if !(target_load.is_finite() && target_load > 0.0 && target_load <= 1.5) {
        return Err(SimError::InvalidOption(format!(
            "load must be in (0, 1.5], got {target_load}"
        )));
    }
    config.validate()?;
    let mut pilot = config.clone();
    pilot.workload.duration_s = config.workload.duration_s.min(1.0);
    pilot.workload.rate = RateProfile::constant(1.0)?;
    pilot.policies = vec!["rss".into()];
    pilot.policy.autoscale = false;
    // The load is the offered traffic's, measured without a Reframer: a
    // run with one then faces the same packets, at the same speed.
    pilot.reframer = None;
    let out = run(&pilot, |_| {})?;
    let r = &out.results[0];
    let offered = out.workload.packets as f64;
    let seconds = match out.workload.ran_out_at_ns {
        // A capture shorter than the pilot: its packets span less than the
        // pilot's duration (n packets over t: n - 1 gaps).
        Some(t) if out.workload.packets >= 2 && t > 0 => t as f64 / 1e9 * offered / (offered - 1.0),
        Some(_) => return Err(SimError::NoPeriod),
        None => pilot.workload.duration_s,
    };
    let pps = offered / seconds;
    let cycles = r.summary.cycles_per_packet.max(1.0);
    let capacity = config.policy.cores as f64 * config.engine.cost.clock_ghz * 1e9;
    Ok(target_load * capacity / (pps * cycles))
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::cost::StateTable;
    use crate::packet::Ns;
    use crate::system::{Cpu, Topology};

    /// Windows of `per_window` packets of 64 flows, 1 µs apart.
    fn windows(count: usize, per_window: usize) -> Vec<Vec<SimPacket>> {
        let mut seqs = [0u32; 64];
        (0..count * per_window)
            .map(|i| {
                let flow = (i * 7 % 64) as u32;
                let seq = seqs[flow as usize];
                seqs[flow as usize] += 1;
                let t = 1_000 * (i as Ns + 1);
                SimPacket {
                    arrival_ns: t,
                    ready_ns: t,
                    flow,
                    seq,
                    hash: flow.wrapping_mul(0x9e37_79b9),
                    class_key: flow,
                    salt: flow,
                    wire_len: 64,
                    tcp_flags: 0,
                    proto: 17,
                }
            })
            .collect::<Vec<_>>()
            .chunks(per_window)
            .map(<[SimPacket]>::to_vec)
            .collect()
    }

    fn engine(name: &str) -> Engine {
        let config = PolicyConfig {
            cores: 4,
            ..PolicyConfig::default()
        };
        Engine::new(
            policy::build(name, &config).unwrap(),
            EngineConfig::default(),
        )
    }

    #[test]
    fn every_engine_runs_every_window_in_order() {
        let names = ["rss", "rsspp", "sprayer", "sw-rr", "metron"];
        let input = windows(12, 500);
        let (engines, read) = simulate_all(names.map(engine).into(), |offer| {
            for w in &input {
                assert!(offer(w.clone()));
            }
            Ok::<(), ()>(())
        });
        read.unwrap();
        for (name, pooled) in names.iter().zip(engines) {
            let mut alone = engine(name);
            for w in &input {
                alone.feed(w);
            }
            let (a, b) = (pooled.finish(), alone.finish());
            assert_eq!(a.summary.processed, 6_000, "{name}");
            assert_eq!(
                serde_json::to_string(&a).unwrap(),
                serde_json::to_string(&b).unwrap(),
                "{name}"
            );
        }
    }

    /// Panics at its 1000th packet.
    struct Faulty(u32);

    impl Policy for Faulty {
        fn name(&self) -> String {
            "faulty".into()
        }
        fn topology(&self) -> Topology {
            Topology::hardware(1, 64)
        }
        fn state_table(&self) -> StateTable {
            StateTable::Sharded
        }
        fn steer(&mut self, _: &SimPacket, _: Ns) -> Option<usize> {
            self.0 += 1;
            assert!(self.0 < 1_000, "the faulty policy fails");
            Some(0)
        }
        fn process(&mut self, batch: &mut Vec<SimPacket>, cpu: &mut Cpu<'_>) {
            for p in batch.iter() {
                cpu.process(p);
            }
        }
    }

    /// A policy that panics stops the run with that panic: the reader and
    /// the other engines' threads do not wait for its engine forever.
    #[test]
    fn a_policy_that_panics_stops_the_run() {
        let (done, finished) = mpsc::channel();
        thread::spawn(move || {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut engines = vec![engine("rss"), engine("sw-rr")];
                engines.insert(1, Engine::new(Box::new(Faulty(0)), EngineConfig::default()));
                let mut offered = 0;
                let (_, read) = simulate_all(engines, |offer| {
                    for w in windows(50, 100) {
                        if !offer(w) {
                            break;
                        }
                        offered += 1;
                    }
                    Ok::<(), ()>(())
                });
                (read, offered)
            }));
            let _ = done.send(outcome.is_err());
        });
        let panicked = finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the run stopped");
        assert!(panicked, "the panic reaches the caller");
    }
}
