//! The papers' experiments (`rsspp figures`): every result the README's
//! "The papers' results, reproduced" lists, each as the `rsspp compare`
//! runs it needs, run here and handed to [`crate::report::paper`] to draw.
//!
//! An experiment is a list of [`RunSpec`]s: one `rsspp compare` command
//! each (its [`RunSpec::command`] is what the captions print, and running
//! that command gives the same numbers). The policies of one run go in
//! parallel as in `compare`; the runs of an experiment whose runs have a
//! single policy go side by side, as many at once as the machine has
//! cores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Instant;

use rsspp_trace::Preset;

use crate::compare::{compare, CompareConfig};
use crate::cost::{StateAccess, StateTable};
use crate::reframer::ReframerConfig;
use crate::result::Comparison;
use crate::run::RunConfig;
use crate::workload::{TraceSource, WorkloadConfig};
use crate::SimError;

/// How long the runs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// The README's durations.
    Full,
    /// Short runs of the same experiments (for tests): the shapes, not the
    /// numbers.
    Quick,
}

/// A figure `rsspp figures` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FigureId {
    /// RSS++ Figure 10: drops and tail latency against load, RSS vs RSS++.
    Rsspp10,
    /// RSS++ Figure 11: cores in use along a ramp.
    Rsspp11,
    /// RSS++ Figure 12: load imbalance of every method.
    Rsspp12,
    /// RSS++ Figure 15: reordering and cycles against the number of flows.
    Rsspp15,
    /// RSS++ Figure 16: per-bucket against shared flow tables.
    Rsspp16,
    /// Reframer Figure 12's locality: SLF against the buffering time.
    ReframerLocality,
    /// Reframer Figure 12's cost: cycles per packet and latency against
    /// the buffering time.
    ReframerThroughput,
    /// Affinity-Accept's latency on short connections with skewed service.
    AffinityAccept,
    /// oRSS with elephants: drops and tail latency against RSS and RSS++.
    Orss,
}

impl FigureId {
    /// Every figure, in the order they are written and listed.
    pub const ALL: [FigureId; 9] = [
        FigureId::Rsspp10,
        FigureId::Rsspp11,
        FigureId::Rsspp12,
        FigureId::Rsspp15,
        FigureId::Rsspp16,
        FigureId::ReframerLocality,
        FigureId::ReframerThroughput,
        FigureId::AffinityAccept,
        FigureId::Orss,
    ];

    /// The name `--only` takes, and the files' stem.
    pub fn name(self) -> &'static str {
        match self {
            FigureId::Rsspp10 => "rsspp-fig10",
            FigureId::Rsspp11 => "rsspp-fig11",
            FigureId::Rsspp12 => "rsspp-fig12",
            FigureId::Rsspp15 => "rsspp-fig15",
            FigureId::Rsspp16 => "rsspp-fig16",
            FigureId::ReframerLocality => "reframer-locality",
            FigureId::ReframerThroughput => "reframer-throughput",
            FigureId::AffinityAccept => "affinity-accept",
            FigureId::Orss => "orss",
        }
    }

    /// The figure named `name` (as [`name`](Self::name) writes it).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The experiment whose runs draw it.
    pub fn experiment(self) -> ExperimentId {
        match self {
            FigureId::Rsspp10 => ExperimentId::HighLoad,
            FigureId::Rsspp11 => ExperimentId::Scaling,
            FigureId::Rsspp12 => ExperimentId::Fairness,
            FigureId::Rsspp15 => ExperimentId::FlowAwareness,
            FigureId::Rsspp16 => ExperimentId::State,
            FigureId::ReframerLocality | FigureId::ReframerThroughput => ExperimentId::Reframer,
            FigureId::AffinityAccept => ExperimentId::AffinityAccept,
            FigureId::Orss => ExperimentId::Orss,
        }
    }
}

/// A set of runs that one or more figures are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExperimentId {
    /// Campus #4 on 4 cores at three loads, RSS and RSS++ (RSS++ Fig. 10).
    HighLoad,
    /// A ramp, RSS against auto-scaling RSS++ and Metron (RSS++ Fig. 11).
    Scaling,
    /// Every method at W = 150, no state, load 0.5 (RSS++ Fig. 12).
    Fairness,
    /// N UDP flows, RSS, RSS++ and Sprayer (RSS++ Fig. 15).
    FlowAwareness,
    /// 1024 UDP flows on 1 to 16 cores, per-bucket or shared table (RSS++
    /// Fig. 16).
    State,
    /// RSS behind a Reframer of growing buffering time (Reframer Fig. 12).
    Reframer,
    /// Short connections with skewed service (Affinity-Accept).
    AffinityAccept,
    /// A few elephants on 4 cores (oRSS).
    Orss,
}

/// The loads of the high-load experiment (RSS++ Figure 10c's three).
pub const HIGH_LOADS: [f64; 3] = [0.79, 0.89, 0.93];
/// The numbers of flows of the flow-awareness experiment.
pub const FLOW_COUNTS: [usize; 5] = [4, 16, 64, 256, 1024];
/// The core counts of the state experiment.
pub const STATE_CORES: [usize; 5] = [1, 2, 4, 8, 16];
/// The buffering times of the Reframer experiment, µs (none first).
pub const REFRAMER_BUFFERS: [Option<u64>; 4] = [None, Some(16), Some(64), Some(128)];

/// How fast a run replays its workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// The speed at which the average core load is this (`--load`).
    Load(f64),
    /// A replay speed (`--speed`).
    Speed(f64),
}

/// One `rsspp compare` run: every setting that differs from the command's
/// defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// The built-in workload.
    pub preset: Preset,
    /// `--flows`.
    pub flows: Option<usize>,
    /// Processing cores.
    pub cores: usize,
    /// `--load` or `--speed`.
    pub rate: Rate,
    /// Simulated seconds.
    pub duration_s: f64,
    /// The policies, in report order.
    pub policies: Vec<&'static str>,
    /// `--work` (default 600).
    pub work: Option<u32>,
    /// `--work-skew` (default 0).
    pub work_skew: Option<f64>,
    /// `--state none` (default: write).
    pub no_state: bool,
    /// `--state-table shared` (default: per-bucket).
    pub shared_table: bool,
    /// `--cache-flows` (default 512).
    pub cache_flows: Option<u32>,
    /// `--reframer BUFFER_US`.
    pub reframer_us: Option<u64>,
    /// `--ramp`.
    pub ramp: bool,
    /// `--seed` (default 1).
    pub seed: Option<u64>,
}

/// `rsspp compare --preset`'s name of a preset.
fn preset_name(p: Preset) -> &'static str {
    match p {
        Preset::Campus => "campus",
        Preset::Campus4 => "campus4",
        Preset::UdpFlows => "udp-flows",
        Preset::Elephants => "elephants",
        Preset::ShortConnections => "short-connections",
    }
}

/// A number as a command line takes it: the shortest text that parses
/// back to the same value (so the command runs exactly this run).
fn arg(x: f64) -> String {
    format!("{x}")
}

impl RunSpec {
    /// A run of `policies` over `preset` on `cores` cores at `rate` for
    /// `duration_s`, every other setting at `rsspp compare`'s default.
    fn new(
        preset: Preset,
        cores: usize,
        rate: Rate,
        duration_s: f64,
        policies: &[&'static str],
    ) -> Self {
        Self {
            preset,
            flows: None,
            cores,
            rate,
            duration_s,
            policies: policies.to_vec(),
            work: None,
            work_skew: None,
            no_state: false,
            shared_table: false,
            cache_flows: None,
            reframer_us: None,
            ramp: false,
            seed: None,
        }
    }

    /// The `rsspp compare` command that runs this (the table on standard
    /// output; it writes no report).
    pub fn command(&self) -> String {
        let mut c = format!("rsspp compare --preset {}", preset_name(self.preset));
        if let Some(n) = self.flows {
            c += &format!(" --flows {n}");
        }
        c += &format!(" --cores {}", self.cores);
        match self.rate {
            Rate::Load(l) => c += &format!(" --load {}", arg(l)),
            Rate::Speed(s) => c += &format!(" --speed {}", arg(s)),
        }
        if self.ramp {
            c += " --ramp";
        }
        c += &format!(" --duration {}", arg(self.duration_s));
        if let Some(w) = self.work {
            c += &format!(" --work {w}");
        }
        if let Some(s) = self.work_skew {
            c += &format!(" --work-skew {}", arg(s));
        }
        if self.no_state {
            c += " --state none";
        }
        if self.shared_table {
            c += " --state-table shared";
        }
        if let Some(n) = self.cache_flows {
            c += &format!(" --cache-flows {n}");
        }
        if let Some(us) = self.reframer_us {
            c += &format!(" --reframer {us}");
        }
        if let Some(s) = self.seed {
            c += &format!(" --seed {s}");
        }
        c += &format!(" --policies {} --no-report", self.policies.join(","));
        c
    }

    /// The comparison this run is, as `rsspp compare` would configure it.
    pub fn config(&self) -> Result<CompareConfig, SimError> {
        let source = TraceSource::Preset {
            preset: self.preset,
            flows: self.flows,
            frame_size: None,
        };
        let speed = match self.rate {
            Rate::Speed(s) => Some(s),
            Rate::Load(_) => None,
        };
        let mut workload = WorkloadConfig::new(source, self.duration_s, speed.unwrap_or(1.0))?;
        let seed = self.seed.unwrap_or(1);
        workload.seed = seed;
        let mut run = RunConfig::new(workload, self.cores, &self.policies);
        run.policy.seed = seed;
        let cost = &mut run.engine.cost;
        if let Some(w) = self.work {
            cost.work = w;
        }
        if let Some(s) = self.work_skew {
            cost.work_skew = s;
        }
        if self.no_state {
            cost.state = StateAccess::None;
        }
        if let Some(n) = self.cache_flows {
            cost.cache_flows = n;
        }
        if self.shared_table {
            run.policy.state_table = StateTable::Shared;
        }
        run.reframer = self.reframer_us.map(ReframerConfig::new).transpose()?;
        Ok(CompareConfig {
            run,
            speed,
            load: match self.rate {
                Rate::Load(l) => l,
                // `rsspp compare`'s default --load, reported as the target.
                Rate::Speed(_) => 0.8,
            },
            ramp: self.ramp,
            sweep: false,
        })
    }
}

/// The runs of `experiment` at `scale`, in the order the figures use them.
pub fn runs(experiment: ExperimentId, scale: Scale) -> Vec<RunSpec> {
    // Full: the README's durations; quick: long enough for the shapes (the
    // imbalance needs one full second).
    let d = |full: f64, quick: f64| match scale {
        Scale::Full => full,
        Scale::Quick => quick,
    };
    match experiment {
        ExperimentId::HighLoad => HIGH_LOADS
            .iter()
            .map(|&l| {
                RunSpec::new(
                    Preset::Campus4,
                    4,
                    Rate::Load(l),
                    d(10.0, 1.0),
                    &["rss", "rsspp"],
                )
            })
            .collect(),
        ExperimentId::Scaling => {
            let mut r = RunSpec::new(
                Preset::Campus4,
                8,
                Rate::Load(0.5),
                d(20.0, 2.0),
                &["rss", "rsspp-autoscale", "metron-autoscale"],
            );
            r.ramp = true;
            vec![r]
        }
        ExperimentId::Fairness => {
            let mut r = RunSpec::new(
                Preset::Campus4,
                8,
                Rate::Load(0.5),
                d(10.0, 1.0),
                crate::policy::POLICY_NAMES,
            );
            r.work = Some(150);
            r.no_state = true;
            vec![r]
        }
        ExperimentId::FlowAwareness => FLOW_COUNTS
            .iter()
            .map(|&n| {
                let mut r = RunSpec::new(
                    Preset::UdpFlows,
                    8,
                    Rate::Load(0.8),
                    d(2.0, 0.3),
                    &["rss", "rsspp", "sprayer"],
                );
                r.flows = Some(n);
                r
            })
            .collect(),
        ExperimentId::State => STATE_CORES
            .iter()
            .flat_map(|&cores| {
                [false, true].map(|shared| {
                    let mut r = RunSpec::new(
                        Preset::UdpFlows,
                        cores,
                        Rate::Speed(0.6 * cores as f64),
                        d(10.0, 0.3),
                        &["rss"],
                    );
                    r.flows = Some(1024);
                    r.work = Some(100);
                    r.shared_table = shared;
                    r
                })
            })
            .collect(),
        ExperimentId::Reframer => REFRAMER_BUFFERS
            .iter()
            .map(|&us| {
                let mut r =
                    RunSpec::new(Preset::Campus4, 8, Rate::Speed(1.0), d(2.0, 0.3), &["rss"]);
                r.work = Some(50);
                r.cache_flows = Some(1);
                r.reframer_us = us;
                r
            })
            .collect(),
        ExperimentId::AffinityAccept => {
            let mut r = RunSpec::new(
                Preset::ShortConnections,
                8,
                Rate::Load(0.8),
                d(5.0, 1.0),
                &["rss", "affinity-accept"],
            );
            r.work_skew = Some(2.0);
            vec![r]
        }
        ExperimentId::Orss => {
            let mut r = RunSpec::new(
                Preset::Elephants,
                4,
                Rate::Speed(1.0),
                d(5.0, 1.0),
                &["rss", "rsspp", "orss"],
            );
            r.seed = Some(2);
            vec![r]
        }
    }
}

/// One run's results.
#[derive(Debug, Clone)]
pub struct Run {
    /// What ran.
    pub spec: RunSpec,
    /// Its comparison.
    pub comparison: Comparison,
    /// The replay speed it ran at (from the load, or asked).
    pub speed: f64,
}

/// An experiment's runs, in [`runs`]'s order.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Which.
    pub id: ExperimentId,
    /// Its runs.
    pub runs: Vec<Run>,
    /// Host seconds it took.
    pub wall_s: f64,
}

/// Where the experiments are.
#[derive(Debug, Clone, PartialEq)]
pub enum PaperProgress {
    /// A run starts.
    Started {
        /// Its experiment.
        experiment: ExperimentId,
        /// Its command.
        command: String,
    },
    /// An experiment is over.
    Done {
        /// Which.
        experiment: ExperimentId,
        /// Host seconds it took.
        wall_s: f64,
    },
}

/// The experiments the figures `only` need (all when empty), in the
/// figures' order.
pub fn experiments_for(only: &[FigureId]) -> Vec<ExperimentId> {
    let mut out: Vec<ExperimentId> = FigureId::ALL
        .into_iter()
        .filter(|f| only.is_empty() || only.contains(f))
        .map(FigureId::experiment)
        .collect();
    out.dedup();
    out
}

/// Runs `experiment` at `scale`. Runs with one policy go side by side (as
/// many at once as the host has cores); a run with several already runs
/// its policies in parallel, so those go one after the other.
pub fn run_experiment(
    experiment: ExperimentId,
    scale: Scale,
    progress: &(dyn Fn(PaperProgress) + Sync),
) -> Result<Experiment, SimError> {
    let started = Instant::now();
    let specs = runs(experiment, scale);
    let configs: Vec<CompareConfig> = specs
        .iter()
        .map(RunSpec::config)
        .collect::<Result<_, _>>()?;
    let widest = specs.iter().map(|s| s.policies.len()).max().unwrap_or(1);
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = (cores / widest).clamp(1, specs.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Run, SimError>>>> =
        Mutex::new(specs.iter().map(|_| None).collect());
    thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(spec) = specs.get(i) else { return };
                progress(PaperProgress::Started {
                    experiment,
                    command: spec.command(),
                });
                let out = compare(&configs[i], |_| {}).map(|o| Run {
                    spec: spec.clone(),
                    comparison: o.comparison,
                    speed: o.speed,
                });
                let failed = out.is_err();
                results.lock().expect("a run thread panicked")[i] = Some(out);
                if failed {
                    // The others still finish what they started.
                    next.store(specs.len(), Ordering::Relaxed);
                }
            });
        }
    });
    let runs = results
        .into_inner()
        .expect("a run thread panicked")
        .into_iter()
        .flatten()
        .collect::<Result<Vec<Run>, SimError>>()?;
    let wall_s = started.elapsed().as_secs_f64();
    progress(PaperProgress::Done { experiment, wall_s });
    Ok(Experiment {
        id: experiment,
        runs,
        wall_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_has_a_name_and_an_experiment_and_only_picks() {
        for f in FigureId::ALL {
            assert_eq!(FigureId::from_name(f.name()), Some(f));
        }
        assert_eq!(FigureId::from_name("rsspp-fig13"), None);
        assert_eq!(experiments_for(&[]).len(), 8);
        assert_eq!(
            experiments_for(&[FigureId::ReframerThroughput, FigureId::ReframerLocality]),
            vec![ExperimentId::Reframer]
        );
    }

    #[test]
    fn a_command_says_every_setting_that_is_not_a_default() {
        let state = runs(ExperimentId::State, Scale::Full);
        assert_eq!(state.len(), 10);
        assert_eq!(
            state[7].command(),
            "rsspp compare --preset udp-flows --flows 1024 --cores 8 --speed 4.8 --duration 10 \
             --work 100 --state-table shared --policies rss --no-report"
        );
        let orss = &runs(ExperimentId::Orss, Scale::Quick)[0];
        assert_eq!(
            orss.command(),
            "rsspp compare --preset elephants --cores 4 --speed 1 --duration 1 --seed 2 \
             --policies rss,rsspp,orss --no-report"
        );
        let c = orss.config().unwrap();
        assert_eq!(c.run.workload.seed, 2);
        assert_eq!(c.run.policy.seed, 2);
        assert_eq!(c.speed, Some(1.0));
        let reframer = runs(ExperimentId::Reframer, Scale::Full);
        let c = reframer[2].config().unwrap();
        assert_eq!(c.run.engine.cost.cache_flows, 1);
        assert!(c.run.reframer.is_some() && reframer[0].config().unwrap().run.reframer.is_none());
    }
}
