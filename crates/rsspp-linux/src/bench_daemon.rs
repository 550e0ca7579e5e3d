//! `rsspp bench daemon`: what the daemon's rounds cost in CPU time, by
//! table size, without an interface to attach to.
//!
//! The steering program is loaded for `lo` and never attached (loading
//! takes no network configuration); between two rounds, the per-bucket and
//! per-CPU counters are advanced as traffic would advance them (skewed
//! bucket rates, each bucket's packets on the CPU the table gives it;
//! `BPF_PROG_TEST_RUN` would cost two RCU grace periods a call). Each
//! round is then
//! what `rsspp run` does every interval — read the counters (batched map
//! reads), the CPUMAP threads' busy time, run the control loop, write the
//! moved buckets, fill the metrics snapshot — timed in this thread's CPU
//! time (`RUSAGE_THREAD`), the traffic's own time left out. A scrape
//! (rendering `/metrics`) is timed apart: its cost is per scrape, not per
//! round.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use rsspp_core::handoff::DEFAULT_HANDOFF_TIMEOUT;
use rsspp_core::ControlConfig;

use crate::cpu::{BusyClock, CpuError, CpuList, CpumapThreads};
use crate::daemon::{Daemon, DaemonConfig, DaemonError, LoadModel};
use crate::datapath::SoftwarePath;
use crate::metrics::{render, MetricsSnapshot, SharedMetrics};
use crate::service;
use crate::xdp::{Program, Xdp, XdpError, XdpOptions, DEFAULT_CPUMAP_QUEUE};

/// What one table size cost.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonCost {
    /// Buckets in the table.
    pub reta_size: usize,
    /// Rounds timed.
    pub rounds: usize,
    /// Buckets moved over those rounds.
    pub moves: u64,
    /// Median CPU time of a round: the steady state, once balanced.
    pub per_round: Duration,
    /// The most expensive round (the first, which moves the most).
    pub worst_round: Duration,
    /// Mean CPU time of a round over the run, the first rounds included.
    pub mean_round: Duration,
    /// Median time of the control loop (rebalancer) in a round, wall time.
    pub per_solve: Duration,
    /// The daemon's share of one CPU at 10 rounds a second in the steady
    /// state (median round), percent.
    pub percent_at_10hz: f64,
    /// Bytes of one `/metrics` answer, per-bucket series included or not.
    pub scrape_bytes: usize,
    /// Mean CPU time of rendering one answer.
    pub per_scrape: Duration,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchDaemonError {
    /// Loading or running the program failed.
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The daemon refused to start or a round failed.
    #[error(transparent)]
    Daemon(#[from] DaemonError<XdpError>),
    /// The CPUs could not be read.
    #[error(transparent)]
    Cpus(#[from] CpuError),
}

/// This thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`: nanoseconds,
/// where `getrusage` counts in scheduler ticks).
fn thread_cpu() -> Duration {
    // SAFETY: zeroed is a valid timespec, which the call fills.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Each packet costs its CPU this long (the busy time the daemon reads).
const NS_PER_PACKET: u64 = 400;

/// The CPUMAP threads' busy time as the daemon reads it (the real read,
/// timed with the round), plus what the made-up traffic would have cost.
struct TrafficClock {
    threads: CpumapThreads,
    busy: Rc<RefCell<Vec<u64>>>,
}

impl BusyClock for TrafficClock {
    fn busy_ns(&mut self, cpus: &[u32], out: &mut [u64]) -> Result<(), CpuError> {
        self.threads.busy_ns(cpus, out)?;
        for (o, &b) in out.iter_mut().zip(self.busy.borrow().iter()) {
            *o += b;
        }
        Ok(())
    }
}

/// Runs `rounds` daemon rounds over a `reta_size`-bucket table with
/// `pps` packets a second of traffic between rounds (bucket `b` getting a
/// share in proportion to 1 / (1 + b mod 16), a few elephants among mice,
/// plus noise), the per-bucket series exported as `bucket_metrics` says
/// (`None`: as `rsspp run` does by default).
pub fn measure(
    reta_size: usize,
    rounds: usize,
    pps: u64,
    bucket_metrics: Option<bool>,
) -> Result<DaemonCost, BenchDaemonError> {
    let cpus: Vec<u32> = CpuList::online()?.cpus().iter().copied().take(2).collect();
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = reta_size;
    opts.default_cpu = cpus[0];
    let xdp = Xdp::load(
        &opts,
        Program::Steer {
            cpus: cpus.clone(),
            cpumap_queue: DEFAULT_CPUMAP_QUEUE,
            ordered_moves: true,
        },
    )?;
    let busy = Rc::new(RefCell::new(vec![0u64; cpus.len()]));
    let clock = TrafficClock {
        threads: CpumapThreads::new(xdp.cpumap_id()?.unwrap_or(0)),
        busy: Rc::clone(&busy),
    };
    let weights: Vec<f64> = (0..reta_size).map(|b| 1.0 / (1 + b % 16) as f64).collect();
    let total_weight: f64 = weights.iter().sum();
    let path = SoftwarePath::new(xdp, cpus.clone(), Some(DEFAULT_HANDOFF_TIMEOUT));
    let possible = path.possible_cpus();
    let config = DaemonConfig {
        targets: cpus.clone(),
        reta_size,
        control: ControlConfig::default(),
        balance: true,
        load: LoadModel::ByPackets,
        churn: 0,
        churn_seed: 1,
        elephants: None,
    };
    let interval = config.control.interval;
    let mut daemon = Daemon::start(config, path, clock, Duration::ZERO)?;
    let shared = SharedMetrics::new(MetricsSnapshot::new("lo", "software"));
    let mut now = Duration::ZERO;
    let (mut round_cpu, mut solve, mut scrape_cpu, mut scrape_bytes, mut moves) =
        (Vec::new(), Vec::new(), Duration::ZERO, 0, 0);
    let mut rng = rsspp_core::rand::SplitMix64::new(7);
    let mut buckets = vec![0u64; reta_size];
    let mut per_cpu = vec![0u64; possible];
    for _ in 0..rounds {
        // One interval of traffic, each bucket's packets on its CPU.
        let packets = pps as f64 * interval.as_secs_f64();
        for (b, w) in weights.iter().enumerate() {
            let noise = 0.9 + 0.2 * (rng.next_u64() % 1000) as f64 / 1000.0;
            let n = (packets * w / total_weight * noise).round() as u64;
            buckets[b] += n;
            let cpu = daemon.table()[b];
            per_cpu[cpu as usize] += n;
            let target = cpus.iter().position(|&c| c == cpu).unwrap_or(0);
            busy.borrow_mut()[target] += n * NS_PER_PACKET;
        }
        daemon.datapath_mut().xdp().set_counts(&buckets, &per_cpu)?;
        now += interval;
        let t0 = thread_cpu();
        let round = daemon.round(now)?;
        service::publish_other_counts(&shared, daemon.datapath_mut().xdp());
        service::publish_round(
            &shared,
            &daemon,
            Some(&round),
            Duration::ZERO,
            bucket_metrics,
        );
        round_cpu.push(thread_cpu() - t0);
        moves += round.moves.len() as u64;
        solve.push(round.solve);
        let t1 = thread_cpu();
        let text = render(&shared.snapshot());
        scrape_cpu += thread_cpu() - t1;
        scrape_bytes = text.len();
    }
    let mean_round = round_cpu.iter().sum::<Duration>() / rounds.max(1) as u32;
    let worst_round = round_cpu.iter().copied().max().unwrap_or_default();
    let median = |mut v: Vec<Duration>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let per_round = median(round_cpu);
    Ok(DaemonCost {
        reta_size,
        rounds,
        moves,
        per_round,
        worst_round,
        mean_round,
        per_solve: median(solve),
        percent_at_10hz: per_round.as_secs_f64() * 10.0 * 100.0,
        scrape_bytes,
        per_scrape: scrape_cpu / rounds.max(1) as u32,
    })
}
