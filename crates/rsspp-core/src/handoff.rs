//! Order-preserving bucket moves (RSS++ §3.3): a moved bucket keeps its
//! old core until that core has drained it, so that no packet of a flow
//! overtakes an earlier one because its bucket moved.
//!
//! The data path does the waiting (the XDP program holds a bucket on its
//! old CPU until the CPU's queue holds none of its frames; a userspace
//! runtime would queue the new core's packets); this module is the policy
//! around it, the same for every data path: which buckets are in handoff,
//! which may not move again meanwhile ([`Handoffs::held`], for the control
//! loop and `--churn`), and when to stop waiting for a handoff that never
//! drains ([`Handoffs::expired`]: the old core dropped the bucket's last
//! frame, or the bucket went quiet), and what a completion was.

use std::time::Duration;

/// How long a handoff may wait for its bucket to drain before the data
/// path completes it anyway: ten rounds at RSS++'s 100 ms (a bucket whose
/// frames still wait in a queue after that is stuck behind a stalled core).
pub const DEFAULT_HANDOFF_TIMEOUT: Duration = Duration::from_millis(1000);

/// A bucket on its way from one target to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handoff {
    /// The target still receiving the bucket.
    pub from: u32,
    /// The target it goes to once drained.
    pub to: u32,
    /// When the move was asked for.
    pub since: Duration,
}

/// What a move asked for while the bucket may be in handoff becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// The bucket was settled on `from`: a new handoff from it.
    Start {
        /// Where the bucket is.
        from: u32,
    },
    /// The bucket was still in handoff from `from`: the same handoff,
    /// towards the new target.
    Retarget {
        /// Where the bucket still is.
        from: u32,
    },
    /// The bucket was still in handoff and goes back to where it still is:
    /// the handoff is cancelled, nothing moves.
    Cancel {
        /// Where the bucket still is (and stays).
        at: u32,
    },
}

/// How a handoff ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The data path switched the bucket once its old target had drained
    /// it: order kept.
    Drained,
    /// The timeout passed with nothing of the bucket waiting on the old
    /// target (the bucket went quiet): completed, order kept.
    Idle,
    /// The timeout passed with frames of the bucket unaccounted for (the
    /// old target dropped them, or is stalled): completed anyway; order
    /// may not have been kept.
    Forced,
}

/// Handoffs completed so far, by how they ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandoffTotals {
    /// [`Completion::Drained`].
    pub drained: u64,
    /// [`Completion::Idle`].
    pub idle: u64,
    /// [`Completion::Forced`].
    pub forced: u64,
}

impl HandoffTotals {
    /// Counts one completion.
    pub fn add(&mut self, completion: Completion) {
        match completion {
            Completion::Drained => self.drained += 1,
            Completion::Idle => self.idle += 1,
            Completion::Forced => self.forced += 1,
        }
    }
}

/// The buckets of one table that are in handoff.
#[derive(Debug, Clone)]
pub struct Handoffs {
    pending: Vec<Option<Handoff>>,
    count: usize,
    timeout: Duration,
    totals: HandoffTotals,
}

impl Handoffs {
    /// No bucket of a `buckets`-entry table in handoff; a handoff waits at
    /// most `timeout` for its bucket to drain.
    pub fn new(buckets: usize, timeout: Duration) -> Self {
        Self {
            pending: vec![None; buckets],
            count: 0,
            timeout,
            totals: HandoffTotals::default(),
        }
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Records a move of `bucket`, which the data path has on `settled`
    /// unless it is in handoff, to `to` at `now`, and says what it is.
    pub fn begin(&mut self, bucket: usize, settled: u32, to: u32, now: Duration) -> Begin {
        match self.pending[bucket] {
            Some(h) if h.from == to => {
                self.pending[bucket] = None;
                self.count -= 1;
                Begin::Cancel { at: h.from }
            }
            Some(h) => {
                self.pending[bucket] = Some(Handoff { to, ..h });
                Begin::Retarget { from: h.from }
            }
            None => {
                self.pending[bucket] = Some(Handoff {
                    from: settled,
                    to,
                    since: now,
                });
                self.count += 1;
                Begin::Start { from: settled }
            }
        }
    }

    /// The handoff of `bucket` ended; returns it (`None` if there was
    /// none).
    pub fn complete(&mut self, bucket: usize, how: Completion) -> Option<Handoff> {
        let h = self.pending[bucket].take()?;
        self.count -= 1;
        self.totals.add(how);
        Some(h)
    }

    /// The handoff of `bucket`, if any.
    pub fn get(&self, bucket: usize) -> Option<Handoff> {
        self.pending[bucket]
    }

    /// Buckets in handoff.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no bucket is in handoff.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The buckets in handoff, in order: they must not move again until
    /// settled (the control loop pins them, `--churn` skips them).
    pub fn held(&self) -> Vec<usize> {
        self.iter().map(|(b, _)| b).collect()
    }

    /// The handoffs, by bucket.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Handoff)> + '_ {
        self.pending
            .iter()
            .enumerate()
            .filter_map(|(b, h)| h.map(|h| (b, h)))
    }

    /// The buckets whose handoff has waited `timeout` or longer at `now`:
    /// the data path completes them ([`Completion::Idle`] or
    /// [`Completion::Forced`]).
    pub fn expired(&self, now: Duration) -> Vec<usize> {
        self.iter()
            .filter(|(_, h)| now.saturating_sub(h.since) >= self.timeout)
            .map(|(b, _)| b)
            .collect()
    }

    /// Handoffs completed so far.
    pub fn totals(&self) -> HandoffTotals {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_move_waits_until_completed() {
        let mut h = Handoffs::new(8, 100 * MS);
        assert_eq!(h.begin(3, 0, 1, 10 * MS), Begin::Start { from: 0 });
        assert_eq!(h.len(), 1);
        assert_eq!(h.held(), vec![3]);
        assert!(h.expired(50 * MS).is_empty());
        let done = h.complete(3, Completion::Drained).unwrap();
        assert_eq!((done.from, done.to), (0, 1));
        assert!(h.is_empty());
        assert_eq!(h.complete(3, Completion::Drained), None);
        assert_eq!(h.totals().drained, 1);
    }

    #[test]
    fn a_second_move_retargets_or_cancels() {
        let mut h = Handoffs::new(8, 100 * MS);
        h.begin(2, 0, 1, Duration::ZERO);
        // Still draining from 0: the bucket is on 0 until then.
        assert_eq!(h.begin(2, 1, 2, MS), Begin::Retarget { from: 0 });
        assert_eq!(h.get(2).unwrap().to, 2);
        assert_eq!(h.get(2).unwrap().since, Duration::ZERO, "the wait goes on");
        assert_eq!(h.begin(2, 2, 0, 2 * MS), Begin::Cancel { at: 0 });
        assert!(h.is_empty());
        assert_eq!(
            h.totals(),
            HandoffTotals::default(),
            "cancelled, not completed"
        );
    }

    #[test]
    fn handoffs_expire_after_the_timeout() {
        let mut h = Handoffs::new(8, 100 * MS);
        h.begin(1, 0, 1, Duration::ZERO);
        h.begin(5, 1, 0, 60 * MS);
        assert_eq!(h.expired(99 * MS), Vec::<usize>::new());
        assert_eq!(h.expired(100 * MS), vec![1]);
        assert_eq!(h.expired(200 * MS), vec![1, 5]);
        h.complete(1, Completion::Idle);
        h.complete(5, Completion::Forced);
        assert_eq!(
            h.totals(),
            HandoffTotals {
                drained: 0,
                idle: 1,
                forced: 1
            }
        );
    }
}
