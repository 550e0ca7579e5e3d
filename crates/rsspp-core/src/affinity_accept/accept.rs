//! Per-core accept queues, the busy status Affinity-Accept derives from
//! their length (§3.3.1), and each core's record of whom it stole from.
//! `P` is the caller's packet type (a connection is queued with its SYN).

use std::collections::VecDeque;

/// Share of the queue above which a core turns busy (the paper's 75%).
const HIGH_WATERMARK: f64 = 0.75;
/// Share of the queue the running average must fall under for a busy core
/// to turn non-busy again (the paper's 10%).
const LOW_WATERMARK: f64 = 0.10;
/// Local connections a non-busy core accepts per remote one it steals.
pub const LOCAL_PER_REMOTE: u32 = 5;

/// A connection waiting to be accepted: its SYN, the core that received
/// it, and the incarnation of its flow number it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Waiting<P> {
    /// The connection's SYN.
    pub syn: P,
    /// The core whose receive path got the SYN.
    pub rx_core: u8,
    /// The incarnation of the flow number the connection is (an entry of
    /// an earlier one is stale).
    pub generation: u32,
}

/// What adding a connection did to the core's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// No change.
    Same,
    /// The queue went past the high watermark.
    BecameBusy,
    /// The running average fell under the low watermark.
    BecameNonBusy,
}

/// The busy status of one accept queue (§3.3.1), from its length: busy as
/// soon as the length exceeds the high watermark (75% of the capacity),
/// non-busy once an EWMA of the length falls under the low one (10%). The
/// simulator's [`AcceptQueue`] observes its length at each addition, as the
/// paper does; a data path whose queues live in the kernel observes them
/// when it samples them.
#[derive(Debug, Clone)]
pub struct BusyMeter {
    high: f64,
    low: f64,
    /// EWMA weight: one over twice the queue's capacity, so the average
    /// follows the long-term length rather than accept()'s bursts.
    alpha: f64,
    average: f64,
    busy: bool,
}

impl BusyMeter {
    /// For a queue of `capacity` (≥ 1) connections, non-busy.
    pub fn new(capacity: usize) -> Self {
        Self {
            high: HIGH_WATERMARK * capacity as f64,
            low: LOW_WATERMARK * capacity as f64,
            alpha: 1.0 / (2.0 * capacity as f64),
            average: 0.0,
            busy: false,
        }
    }

    /// Whether the queue is marked busy.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// The running average of the observed lengths.
    pub fn average(&self) -> f64 {
        self.average
    }

    /// Takes one observation of the queue's length and updates the status.
    pub fn observe(&mut self, len: usize) -> Status {
        let len = len as f64;
        self.average += self.alpha * (len - self.average);
        if !self.busy && len > self.high {
            self.busy = true;
            Status::BecameBusy
        } else if self.busy && self.average < self.low {
            self.busy = false;
            Status::BecameNonBusy
        } else {
            Status::Same
        }
    }
}

/// What a stealing core needs to know of another core's accept queue.
pub trait QueueView {
    /// Whether the core is marked busy.
    fn busy(&self) -> bool;
    /// Whether a connection waits.
    fn waiting(&self) -> bool;
}

/// One core's accept queue.
#[derive(Debug, Clone)]
pub struct AcceptQueue<P> {
    waiting: VecDeque<Waiting<P>>,
    capacity: usize,
    meter: BusyMeter,
}

impl<P> QueueView for AcceptQueue<P> {
    fn busy(&self) -> bool {
        self.meter.busy()
    }

    fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }
}

impl<P> AcceptQueue<P> {
    /// An empty queue of `capacity` (≥ 1) connections.
    pub fn new(capacity: usize) -> Self {
        Self {
            waiting: VecDeque::with_capacity(capacity),
            capacity,
            meter: BusyMeter::new(capacity),
        }
    }

    /// Whether no connection waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether another connection would overflow the queue.
    pub fn is_full(&self) -> bool {
        self.waiting.len() >= self.capacity
    }

    /// Whether the core is marked busy.
    pub fn busy(&self) -> bool {
        self.meter.busy()
    }

    /// Queues a connection (the caller checked [`Self::is_full`]) and
    /// updates the status: busy as soon as the length exceeds the high
    /// watermark, non-busy once the average, updated at each addition as
    /// the paper does, is under the low one.
    pub fn push(&mut self, w: Waiting<P>) -> Status {
        debug_assert!(!self.is_full());
        self.waiting.push_back(w);
        self.meter.observe(self.waiting.len())
    }

    /// The oldest waiting connection.
    pub fn pop(&mut self) -> Option<Waiting<P>> {
        self.waiting.pop_front()
    }
}

/// Whom a core steals from: round-robin over the busy cores, at most one
/// remote connection per [`LOCAL_PER_REMOTE`] local ones while local ones
/// wait, and per victim the steals since the last flow-group round.
#[derive(Debug, Clone)]
pub struct Stealer {
    last_victim: usize,
    /// Local connections accepted since the last steal.
    pub local_run: u32,
    stolen_from: Vec<u32>,
}

impl Stealer {
    /// For a core among `cores`.
    pub fn new(core: usize, cores: usize) -> Self {
        Self {
            last_victim: core,
            local_run: 0,
            stolen_from: vec![0; cores],
        }
    }

    /// The next busy core after the last victim (in core order, wrapping)
    /// with a connection waiting, other than `me`.
    pub fn next_victim<Q: QueueView>(&self, me: usize, queues: &[Q]) -> Option<usize> {
        let n = queues.len();
        (1..=n)
            .map(|i| (self.last_victim + i) % n)
            .find(|&v| v != me && queues[v].busy() && queues[v].waiting())
    }

    /// Where an idle core looks: a busy core first, then any other core
    /// with a connection waiting (the paper's polling rule).
    pub fn next_victim_when_idle<Q: QueueView>(&self, me: usize, queues: &[Q]) -> Option<usize> {
        let n = queues.len();
        self.next_victim(me, queues).or_else(|| {
            (1..=n)
                .map(|i| (self.last_victim + i) % n)
                .find(|&v| v != me && queues[v].waiting())
        })
    }

    /// Records a local accept; true when the next connection should be a
    /// remote one if a busy core has one waiting ([`LOCAL_PER_REMOTE`]
    /// local ones since the last steal).
    pub fn accepted_local(&mut self) -> bool {
        self.local_run = self.local_run.saturating_add(1);
        self.local_run >= LOCAL_PER_REMOTE
    }

    /// Records a steal from `victim`.
    pub fn stole(&mut self, victim: usize) {
        self.last_victim = victim;
        self.local_run = 0;
        self.stolen_from[victim] += 1;
    }

    /// The core stolen from most since the last call (the lowest on a
    /// tie), if any; starts a new count.
    pub fn take_top_victim(&mut self) -> Option<usize> {
        let (victim, &count) = self
            .stolen_from
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?;
        let top = (count > 0).then_some(victim);
        self.stolen_from.iter_mut().for_each(|c| *c = 0);
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> Waiting<()> {
        Waiting {
            syn: (),
            rx_core: 0,
            generation: 0,
        }
    }

    #[test]
    fn busy_above_the_high_watermark_non_busy_when_the_average_falls() {
        let mut q = AcceptQueue::new(64);
        // 75% of 64 is 48: the 49th connection makes the core busy.
        for i in 1..=49 {
            let s = q.push(waiting());
            assert_eq!(s == Status::BecameBusy, i == 49, "after {i}");
        }
        assert!(q.busy());
        // Accepting everything does not clear it: the average must fall
        // under 6.4, which takes many additions to a short queue.
        let mut additions = 0;
        loop {
            while q.pop().is_some() {}
            additions += 1;
            if q.push(waiting()) == Status::BecameNonBusy {
                break;
            }
            assert!(additions < 1_000, "never non-busy");
        }
        assert!(!q.busy());
        assert!(additions > 10, "non-busy after {additions} additions");
    }

    #[test]
    fn victims_are_busy_cores_in_round_robin() {
        let mut queues = vec![AcceptQueue::new(4); 4];
        for core in [1, 3] {
            for _ in 0..4 {
                queues[core].push(waiting());
            }
        }
        // Core 2 waits but is not busy (3 of 4 is not above 75%).
        for _ in 0..3 {
            queues[2].push(waiting());
        }
        let mut s = Stealer::new(0, 4);
        let v = s.next_victim(0, &queues).unwrap();
        assert_eq!(v, 1);
        s.stole(v);
        let v = s.next_victim(0, &queues).unwrap();
        assert_eq!(v, 3);
        s.stole(v);
        s.stole(3);
        assert_eq!(s.next_victim(3, &queues), Some(1));
        assert_eq!(s.take_top_victim(), Some(3));
        assert_eq!(s.take_top_victim(), None);
    }
}
