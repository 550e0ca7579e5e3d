//! The policies side by side on one workload: the pilot that turns a
//! requested load into a replay speed, the main run, and the optional sweep
//! of requested loads (`rsspp compare`).
//!
//! Nothing is printed here: progress goes to a callback, the result is a
//! [`Comparison`] for the front end to print or write.

use crate::result::{Caveat, Comparison, SweepPoint};
use crate::run::{run, speed_for_load, RunConfig};
use crate::workload::{scan_capture, CaptureScan, RateProfile, WorkloadCounts};
use crate::SimError;

/// Requested loads of the sweep's curves: from comfortable to saturated,
/// denser where drops and latency take off.
pub const SWEEP_LOADS: [f64; 7] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0];

/// Lowest rate of the ramp, relative to its peak.
pub const RAMP_LOW: f64 = 0.15;

/// What to compare and how fast to replay it.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The policies, workload, engine and cost model; the workload's rate
    /// profile is replaced by the one [`speed`](Self::speed),
    /// [`load`](Self::load) and [`ramp`](Self::ramp) give.
    pub run: RunConfig,
    /// Replay speed (1 = the trace's own timing); `None`: the speed at which
    /// the average core load is [`load`](Self::load), found by a pilot run.
    pub speed: Option<f64>,
    /// Requested average core load (used when [`speed`](Self::speed) is
    /// `None`; reported as the comparison's target load either way).
    pub load: f64,
    /// Replay along the RSS++ paper's Figure 11 shape: from [`RAMP_LOW`] of
    /// the speed up to the full speed over the first quarter, held for a
    /// quarter, back down over the second half.
    pub ramp: bool,
    /// Also run every policy at each of [`SWEEP_LOADS`], a quarter of the
    /// duration each (at least 1 s).
    pub sweep: bool,
}

/// How far the comparison has gone, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Progress {
    /// The main run has simulated `simulated_s` of `duration_s` seconds.
    Main {
        /// Simulated seconds read so far (at most `duration_s`).
        simulated_s: f64,
        /// Simulated seconds in all.
        duration_s: f64,
    },
    /// The main run is over.
    MainDone,
    /// Sweep point `point` (1-based) of `points`, at requested load `load`,
    /// has simulated `simulated_s` of `duration_s` seconds.
    Sweep {
        /// 1-based index of the point.
        point: usize,
        /// Number of points.
        points: usize,
        /// Requested load of the point.
        load: f64,
        /// Simulated seconds read so far (at most `duration_s`).
        simulated_s: f64,
        /// Simulated seconds of the point.
        duration_s: f64,
    },
    /// The sweep is over (only sent when a sweep ran).
    SweepDone,
}

/// What a comparison produced.
#[derive(Debug, Clone)]
pub struct CompareOutput {
    /// Results of the main run (and the sweep), with the settings.
    pub comparison: Comparison,
    /// The replay speed of the main run (its peak with a ramp).
    pub speed: f64,
    /// Packets the workload offered in the main run.
    pub packets: u64,
}

/// Seconds of trace a run at `rate` for `duration_s` replays.
fn trace_needed_s(rate: &RateProfile, duration_s: f64) -> f64 {
    rate.trace_time(duration_s)
}

/// A capture (not repeated) must last the duration at the speed a load
/// needs; a little short (this share) still runs, the shortfall said.
const COVERAGE: f64 = 0.95;

/// Refuses a load the capture cannot give over `duration_s` at `speed`
/// (`rate`: the run's profile at that speed).
fn check_coverage(
    scan: Option<&CaptureScan>,
    repeat: bool,
    load: f64,
    speed: f64,
    rate: &RateProfile,
    duration_s: f64,
) -> Result<(), SimError> {
    let Some(scan) = scan.filter(|_| !repeat) else {
        return Ok(());
    };
    let trace_s = scan.period_ns() as f64 / 1e9;
    let needed_s = trace_needed_s(rate, duration_s);
    if trace_s < COVERAGE * needed_s {
        return Err(SimError::LoadUnreachable {
            load,
            speed,
            trace_s,
            covers_s: duration_s * trace_s / needed_s,
            duration_s,
        });
    }
    Ok(())
}

/// What the workload's counters say about the run, for the reader.
fn caveats(counts: &WorkloadCounts, duration_s: f64) -> Vec<Caveat> {
    let mut out = Vec::new();
    if let Some(at) = counts.ran_out_at_ns {
        out.push(Caveat::TraceRanOut {
            at_s: at as f64 / 1e9,
            duration_s,
        });
    }
    if counts.passes > 1 {
        out.push(Caveat::Repeated {
            passes: counts.passes,
        });
    }
    if let Some(c) = counts.reader.corrupt {
        out.push(Caveat::Partial {
            offset: c.offset,
            packets: c.after_packets,
            skipped_bytes: counts.reader.skipped_bytes,
        });
    } else if counts.reader.truncated_tail {
        out.push(Caveat::CutShort {
            skipped_bytes: counts.reader.skipped_bytes,
        });
    }
    out
}

/// Runs the comparison: a pilot if the speed comes from the load, the main
/// run, then the sweep if asked. `progress` is called from this thread.
///
/// A capture is read through first ([`scan_capture`]): a corrupt record, a
/// wild timestamp, or a load it cannot give over the duration (not
/// repeated) is refused before anything runs. A capture that runs out with
/// an explicit speed is run and said ([`Caveat::TraceRanOut`]).
pub fn compare(
    config: &CompareConfig,
    mut progress: impl FnMut(Progress),
) -> Result<CompareOutput, SimError> {
    let mut run_config = config.run.clone();
    let scan = scan_capture(&run_config.workload)?;
    let repeat = run_config.workload.repeat;
    if let Some(scan) = &scan {
        if scan.packets == 0 {
            return Err(SimError::EmptyWorkload);
        }
        if scan.period_ns() == 0 && (repeat || config.speed.is_none()) {
            return Err(SimError::NoPeriod);
        }
    }
    let speed = match config.speed {
        Some(s) => s,
        None => speed_for_load(&run_config, config.load)?,
    };
    let duration_s = run_config.workload.duration_s;
    run_config.workload.rate = if config.ramp {
        RateProfile::ramp(duration_s, speed * RAMP_LOW, speed)
    } else {
        RateProfile::constant(speed)
    }?;
    if config.speed.is_none() {
        check_coverage(
            scan.as_ref(),
            repeat,
            config.load,
            speed,
            &run_config.workload.rate,
            duration_s,
        )?;
    }
    // The replay speed is proportional to the requested load, so one
    // pilot (or the main run's) gives the speed of every sweep point.
    let full_speed = match (config.sweep, config.speed) {
        (false, _) => None,
        (true, Some(_)) => Some(speed_for_load(&run_config, 1.0)?),
        (true, None) => Some(speed / config.load),
    };
    if let Some(full) = full_speed {
        // The fastest point must find enough trace too.
        let point_s = sweep_duration(duration_s);
        let load = SWEEP_LOADS[SWEEP_LOADS.len() - 1];
        let rate = RateProfile::constant(full * load)?;
        check_coverage(scan.as_ref(), repeat, load, full * load, &rate, point_s)?;
    }
    let out = run(&run_config, |t| {
        progress(Progress::Main {
            simulated_s: t.min(duration_s),
            duration_s,
        })
    })?;
    progress(Progress::MainDone);
    let sweep = match full_speed {
        Some(full) => {
            let points = run_sweep(&run_config, full, &mut progress)?;
            progress(Progress::SweepDone);
            points
        }
        None => Vec::new(),
    };
    let comparison = Comparison {
        workload: run_config.workload.source.describe(),
        cores: run_config.policy.cores,
        duration_s,
        target_load: config.load,
        clock_ghz: run_config.engine.cost.clock_ghz,
        seed: run_config.workload.seed,
        policies: out.results,
        sweep,
        caveats: caveats(&out.workload, duration_s),
    };
    Ok(CompareOutput {
        comparison,
        speed,
        packets: out.workload.packets,
    })
}

/// Seconds of each sweep point: a quarter of the main run, at least 1 s
/// (at most the main run).
fn sweep_duration(duration_s: f64) -> f64 {
    (duration_s / 4.0).max(1.0).min(duration_s)
}

/// Every policy at each of [`SWEEP_LOADS`], `full_speed` being the replay
/// speed of load 1, each point a quarter of the main run (at least 1 s).
fn run_sweep(
    config: &RunConfig,
    full_speed: f64,
    progress: &mut impl FnMut(Progress),
) -> Result<Vec<SweepPoint>, SimError> {
    let mut point = config.clone();
    point.workload.duration_s = sweep_duration(config.workload.duration_s);
    let duration_s = point.workload.duration_s;
    let mut sweep = Vec::with_capacity(SWEEP_LOADS.len() * config.policies.len());
    for (k, &load) in SWEEP_LOADS.iter().enumerate() {
        point.workload.rate = RateProfile::constant(full_speed * load)?;
        let out = run(&point, |t| {
            progress(Progress::Sweep {
                point: k + 1,
                points: SWEEP_LOADS.len(),
                load,
                simulated_s: t.min(duration_s),
                duration_s,
            })
        })?;
        sweep.extend(out.results.into_iter().map(|r| SweepPoint {
            policy: r.name,
            offered_load: load,
            avg_load: r.summary.avg_load,
            packets: r.summary.packets,
            drops: r.summary.drops,
            latency_p95_us: r.summary.latency_p95_us,
        }));
    }
    Ok(sweep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{TraceSource, WorkloadConfig};
    use rsspp_trace::Preset;

    fn config(sweep: bool) -> CompareConfig {
        let source = TraceSource::Preset {
            preset: Preset::UdpFlows,
            flows: Some(64),
            frame_size: None,
        };
        let workload = WorkloadConfig::new(source, 1.0, 1.0).unwrap();
        CompareConfig {
            run: RunConfig::new(workload, 2, &["rss", "rsspp"]),
            speed: None,
            load: 0.7,
            ramp: false,
            sweep,
        }
    }

    #[test]
    fn the_load_sets_the_speed_and_the_settings_are_reported() {
        let mut events = Vec::new();
        let out = compare(&config(false), |p| events.push(p)).unwrap();
        let c = &out.comparison;
        assert_eq!(c.cores, 2);
        assert_eq!(c.target_load, 0.7);
        assert_eq!(c.policies.len(), 2);
        assert!(c.sweep.is_empty());
        assert!(out.speed > 0.0 && out.packets > 0);
        let rss = &c.policies[0].summary;
        assert!((0.5..0.9).contains(&rss.avg_load), "{}", rss.avg_load);
        assert_eq!(events.last(), Some(&Progress::MainDone));
        assert!(events
            .iter()
            .any(|p| matches!(p, Progress::Main { simulated_s, .. } if *simulated_s > 0.0)));
        assert!(!events.contains(&Progress::SweepDone));
    }

    #[test]
    fn the_sweep_runs_every_policy_at_every_load() {
        let mut config = config(true);
        config.speed = Some(2.0);
        let mut events = Vec::new();
        let out = compare(&config, |p| events.push(p)).unwrap();
        assert_eq!(out.speed, 2.0);
        let sweep = &out.comparison.sweep;
        assert_eq!(sweep.len(), SWEEP_LOADS.len() * 2);
        for load in SWEEP_LOADS {
            assert_eq!(sweep.iter().filter(|s| s.offered_load == load).count(), 2);
        }
        // Offered packets grow with the requested load.
        let rss: Vec<u64> = sweep
            .iter()
            .filter(|s| s.policy == "rss")
            .map(|s| s.packets)
            .collect();
        assert!(rss.windows(2).all(|w| w[0] <= w[1]), "{rss:?}");
        assert_eq!(events.last(), Some(&Progress::SweepDone));
        assert!(events.iter().any(|p| matches!(
            p,
            Progress::Sweep {
                point: 7,
                points: 7,
                ..
            }
        )));
    }

    #[test]
    fn a_bad_load_is_refused_before_anything_runs() {
        let mut config = config(false);
        config.load = 0.0;
        let mut called = false;
        assert!(matches!(
            compare(&config, |_| called = true),
            Err(SimError::InvalidOption(_))
        ));
        assert!(!called);
    }
}
