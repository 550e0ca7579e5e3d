//! Running policies over one workload: the workload is read (and
//! generated) once, and every policy simulates it on its own thread.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
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

/// Windows of packets kept in flight between the reader and each policy.
const IN_FLIGHT: usize = 4;

/// Runs every policy of `config` over the workload. `progress` is called
/// with the simulated seconds read so far.
pub fn run(config: &RunConfig, mut progress: impl FnMut(f64)) -> Result<RunOutput, SimError> {
    let policies = config.validate()?;
    // The stage runs once, in the reading thread: every policy sees the
    // same reframed stream, as behind one Reframer server.
    let mut stage = config.reframer.map(ReframerStage::new).transpose()?;
    let mut workload = Workload::open(&config.workload)?;
    let (mut results, counts) = thread::scope(|scope| {
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for policy in policies {
            let (tx, rx) = sync_channel::<Arc<Vec<SimPacket>>>(IN_FLIGHT);
            senders.push(tx);
            let engine_config = config.engine.clone();
            handles.push(scope.spawn(move || simulate(policy, engine_config, rx)));
        }
        let mut read = || -> Result<(), SimError> {
            loop {
                let mut batch = Vec::new();
                let more = workload.next_batch(&mut batch)?;
                if let Some(last) = batch.last() {
                    progress(last.arrival_ns as f64 / 1e9);
                }
                if let Some(stage) = stage.as_mut() {
                    // What the stage still holds at the window's end waits
                    // for the next window.
                    let mut out = stage.window(&batch);
                    if !more {
                        out.extend(stage.finish());
                    }
                    batch = out;
                }
                if !batch.is_empty() {
                    let batch = Arc::new(batch);
                    for tx in &senders {
                        // A policy thread that panicked has hung up; its join
                        // below reports it.
                        let _ = tx.send(Arc::clone(&batch));
                    }
                }
                if !more {
                    return Ok(());
                }
            }
        };
        let read_result = read();
        drop(senders);
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("a policy thread panicked"))
            .collect();
        read_result.map(|()| (results, workload.counts()))
    })?;
    if counts.packets == 0 {
        return Err(SimError::EmptyWorkload);
    }
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

fn simulate(
    policy: Box<dyn Policy>,
    config: EngineConfig,
    batches: Receiver<Arc<Vec<SimPacket>>>,
) -> PolicyResult {
    let mut engine = Engine::new(policy, config);
    for batch in batches {
        engine.feed(&batch);
    }
    engine.finish()
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
