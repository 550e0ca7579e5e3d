//! The samples `rsspp top` has seen: per-CPU loads over time for the
//! heatmap, and the last two full samples for rates and moves.

use std::collections::VecDeque;
use std::time::Instant;

use super::scrape::{CpuSample, DaemonSample};

/// Per-CPU loads of one sample, in the daemon's CPU order.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// `(cpu, load)`.
    pub loads: Vec<(u32, f64)>,
}

impl Column {
    /// The load of `cpu` in this sample, if it was there.
    pub fn load(&self, cpu: u32) -> Option<f64> {
        self.loads.iter().find(|(c, _)| *c == cpu).map(|&(_, l)| l)
    }
}

/// What changed between the last two samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    /// Seconds between the samples.
    pub seconds: f64,
    /// Packets per second of each CPU, `None` where its counter went back
    /// (the daemon restarted) or the CPU is new.
    pub cpu_rates: Vec<(u32, Option<f64>)>,
    /// Frames dropped per second on their way to each CPU, `None` where
    /// unknown (not exported, a restart, a new CPU).
    pub drop_rates: Vec<(u32, Option<f64>)>,
    /// Buckets moved (by the daemon's count).
    pub migrations: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Mean duration of the rounds run, seconds.
    pub mean_round_seconds: Option<f64>,
    /// Buckets whose CPU changed.
    pub moved: Vec<bool>,
}

impl Delta {
    /// Packets per second of `cpu`.
    pub fn rate(&self, cpu: u32) -> Option<f64> {
        self.cpu_rates
            .iter()
            .find(|(c, _)| *c == cpu)
            .and_then(|&(_, r)| r)
    }

    /// Frames dropped per second on their way to `cpu`.
    pub fn drop_rate(&self, cpu: u32) -> Option<f64> {
        self.drop_rates
            .iter()
            .find(|(c, _)| *c == cpu)
            .and_then(|&(_, r)| r)
    }

    /// Packets per second over all CPUs whose rate is known.
    pub fn total_rate(&self) -> f64 {
        self.cpu_rates.iter().filter_map(|&(_, r)| r).sum()
    }
}

/// A bounded history of samples.
#[derive(Debug)]
pub struct History {
    columns: VecDeque<Column>,
    capacity: usize,
    latest: Option<(Instant, DaemonSample)>,
    delta: Option<Delta>,
}

impl History {
    /// Keeps the loads of the last `capacity` samples (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            columns: VecDeque::with_capacity(capacity.max(1)),
            capacity: capacity.max(1),
            latest: None,
            delta: None,
        }
    }

    /// Adds a sample taken at `at`. The daemon publishes its counters once
    /// a round, and its rounds back off to one a second when balanced: a
    /// sample from the same round as the last one adds its column but keeps
    /// the rates (they would read 0, then twice the truth), which are taken
    /// between the first samples of successive rounds.
    pub fn push(&mut self, at: Instant, sample: DaemonSample) {
        if self.columns.len() == self.capacity {
            self.columns.pop_front();
        }
        self.columns.push_back(Column {
            loads: sample.cpus.iter().map(|c| (c.cpu, c.load)).collect(),
        });
        if self
            .latest
            .as_ref()
            .is_some_and(|(_, before)| before.rounds == sample.rounds && sample.rounds > 0)
        {
            return;
        }
        self.delta = self
            .latest
            .as_ref()
            .map(|(then, before)| delta(at.duration_since(*then).as_secs_f64(), before, &sample));
        self.latest = Some((at, sample));
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<&DaemonSample> {
        self.latest.as_ref().map(|(_, s)| s)
    }

    /// What changed between the last two samples.
    pub fn delta(&self) -> Option<&Delta> {
        self.delta.as_ref()
    }

    /// The loads, oldest first.
    pub fn columns(&self) -> impl DoubleEndedIterator<Item = &Column> + ExactSizeIterator {
        self.columns.iter()
    }
}

/// `now − before` for a counter, `None` if it went back (a restart).
fn grew(before: u64, now: u64) -> Option<u64> {
    now.checked_sub(before)
}

/// Per second of a per-CPU counter (`counter` of a CPU's sample) between
/// two samples; `None` where it is unknown, went back or the CPU is new.
fn per_cpu_rates(
    seconds: f64,
    before: &DaemonSample,
    now: &DaemonSample,
    counter: impl Fn(&CpuSample) -> Option<u64>,
) -> Vec<(u32, Option<f64>)> {
    now.cpus
        .iter()
        .map(|c| {
            let rate = before
                .cpus
                .iter()
                .find(|b| b.cpu == c.cpu)
                .and_then(|b| grew(counter(b)?, counter(c)?))
                .filter(|_| seconds > 0.0)
                .map(|d| d as f64 / seconds);
            (c.cpu, rate)
        })
        .collect()
}

fn delta(seconds: f64, before: &DaemonSample, now: &DaemonSample) -> Delta {
    let cpu_rates = per_cpu_rates(seconds, before, now, |c| Some(c.packets_total));
    let drop_rates = per_cpu_rates(seconds, before, now, |c| c.dropped_total);
    let rounds = grew(before.rounds, now.rounds).unwrap_or(0);
    let timed = grew(before.rebalance_seconds_count, now.rebalance_seconds_count).unwrap_or(0);
    let mean_round_seconds = (timed > 0)
        .then(|| (now.rebalance_seconds_sum - before.rebalance_seconds_sum) / timed as f64)
        .filter(|m| *m >= 0.0);
    let moved = now
        .table
        .iter()
        .enumerate()
        .map(|(i, cpu)| before.table.get(i).is_some_and(|b| b != cpu))
        .collect();
    Delta {
        seconds,
        cpu_rates,
        drop_rates,
        migrations: grew(before.migrations, now.migrations).unwrap_or(0),
        rounds,
        mean_round_seconds,
        moved,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::scrape::CpuSample;
    use super::*;

    fn sample(packets: &[(u32, u64)], table: &[u32], migrations: u64) -> DaemonSample {
        DaemonSample {
            iface: None,
            mode: None,
            cpus: packets
                .iter()
                .map(|&(cpu, packets_total)| CpuSample {
                    cpu,
                    load: packets_total as f64 / 1000.0,
                    packets_total,
                    dropped_total: None,
                })
                .collect(),
            table: table.to_vec(),
            bucket_packets: vec![0; table.len()],
            imbalance: 0.0,
            migrations,
            rounds: migrations * 2,
            interval_seconds: None,
            rebalance_seconds_sum: migrations as f64 * 1e-5,
            rebalance_seconds_count: migrations,
        }
    }

    #[test]
    fn rates_moves_and_means_come_from_the_last_two_samples() {
        let t0 = Instant::now();
        let mut h = History::new(10);
        h.push(t0, sample(&[(0, 100), (1, 500)], &[0, 1, 0, 1], 1));
        assert!(h.delta().is_none());
        h.push(
            t0 + Duration::from_millis(500),
            sample(&[(0, 600), (1, 500), (2, 50)], &[0, 0, 0, 1], 4),
        );
        let d = h.delta().unwrap();
        assert_eq!(d.rate(0), Some(1000.0));
        assert_eq!(d.rate(1), Some(0.0));
        assert_eq!(d.rate(2), None, "a CPU without a previous sample");
        assert_eq!(d.total_rate(), 1000.0);
        assert_eq!(d.migrations, 3);
        assert_eq!(d.rounds, 6);
        assert!((d.mean_round_seconds.unwrap() - 1e-5).abs() < 1e-12);
        assert_eq!(d.moved, vec![false, true, false, false]);
    }

    #[test]
    fn samples_within_one_round_keep_the_rates_of_the_last_rounds() {
        // Rounds one second apart (backed off), samples every 250 ms: the
        // rate stays 1000/s instead of flickering 0, 4000, 0, 0.
        let t0 = Instant::now();
        let mut h = History::new(10);
        let at = |ms| t0 + Duration::from_millis(ms);
        let round = |packets: u64, rounds: u64| {
            let mut s = sample(&[(0, packets)], &[0], 1);
            s.rounds = rounds;
            s
        };
        h.push(at(0), round(0, 5));
        h.push(at(1000), round(1000, 6));
        assert_eq!(h.delta().unwrap().rate(0), Some(1000.0));
        for ms in [1250, 1500, 1750] {
            h.push(at(ms), round(1000, 6));
            assert_eq!(h.delta().unwrap().rate(0), Some(1000.0), "at {ms} ms");
        }
        h.push(at(2000), round(2000, 7));
        assert_eq!(h.delta().unwrap().rate(0), Some(1000.0));
        assert_eq!(h.columns().count(), 6, "every sample has its column");
    }

    #[test]
    fn a_restarted_daemon_gives_no_rate_rather_than_a_huge_one() {
        let t0 = Instant::now();
        let mut h = History::new(10);
        h.push(t0, sample(&[(0, 1_000_000)], &[0], 9));
        h.push(t0 + Duration::from_secs(1), sample(&[(0, 10)], &[0], 0));
        let d = h.delta().unwrap();
        assert_eq!(d.rate(0), None);
        assert_eq!(d.migrations, 0);
    }

    #[test]
    fn only_the_last_capacity_columns_are_kept() {
        let t0 = Instant::now();
        let mut h = History::new(3);
        for i in 0..5u64 {
            h.push(
                t0 + Duration::from_secs(i),
                sample(&[(7, i * 100)], &[7], 0),
            );
        }
        let loads: Vec<Option<f64>> = h.columns().map(|c| c.load(7)).collect();
        assert_eq!(loads, vec![Some(0.2), Some(0.3), Some(0.4)]);
        assert_eq!(h.columns().next().unwrap().load(8), None);
    }
}
