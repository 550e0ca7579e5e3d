//! Model check of the bucket handoff: every order in which the messages of
//! the protocol (packets on each receive queue, commands on each control
//! queue, handoffs, completions) can be delivered is explored, for small
//! scenarios exhaustively and for larger ones by random schedules.
//!
//! loom does not fit here: the protocol shares no memory (tables move by
//! value, the queues are channels), so its interleavings are message
//! delivery orders, which this explores directly on the sans-I/O workers.
//!
//! In every final state: no packet processed out of order, each flow has one
//! state counting every packet sent for it, every move completed, every
//! worker settled. In every intermediate state: each bucket's table exists
//! exactly once (held by one core or in one handoff). A state with nothing
//! left to deliver but work unfinished is a deadlock and fails.

use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rsspp_core::state::check::{audit, SequenceCheck, SequenceState, SequencedPacket};
use rsspp_core::state::{
    BucketWorker, Completed, CoreCommand, Handoff, MigrationCoordinator, Outbox, TableConfig,
    Worker,
};
use rsspp_core::{bucket_of, BucketMove, FlowKey, IndirectionTable, MigrationPlan, Toeplitz};

const SIZE: usize = 64;

#[derive(Clone, Debug)]
enum Step {
    Packet(usize),
    Plan(Vec<(usize, usize)>), // (bucket, to)
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Dispatch,
    Receive(usize),
    Command(usize),
    Handoff(usize),
    Complete,
}

#[derive(Clone)]
struct Sim {
    flows: Rc<Vec<(FlowKey, u32)>>,
    script: Rc<Vec<Step>>,
    at: usize,
    coordinator: MigrationCoordinator,
    workers: Vec<BucketWorker<SequenceCheck>>,
    rx: Vec<VecDeque<SequencedPacket>>,
    control: Vec<VecDeque<CoreCommand>>,
    handoffs: Vec<VecDeque<Handoff<SequenceState>>>,
    completions: VecDeque<Completed>,
    queued: Vec<u64>,
    sent: Vec<u64>,
}

/// One flow in each of `buckets`.
fn flows_in(buckets: &[usize]) -> Vec<(FlowKey, u32)> {
    let t = Toeplitz::default();
    buckets
        .iter()
        .map(|&b| {
            (0u32..)
                .map(|i| {
                    let key = FlowKey::new(
                        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
                        IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
                        5000,
                        53,
                        17,
                    )
                    .unwrap();
                    (key, t.hash_flow(&key))
                })
                .find(|(_, h)| bucket_of(*h, SIZE) == b)
                .unwrap()
        })
        .collect()
}

impl Sim {
    fn new(cores: usize, flows: Vec<(FlowKey, u32)>, script: Vec<Step>) -> Self {
        let reta = IndirectionTable::equal(SIZE, cores).unwrap();
        Sim {
            sent: vec![0; flows.len()],
            flows: Rc::new(flows),
            script: Rc::new(script),
            at: 0,
            coordinator: MigrationCoordinator::new(reta.clone(), cores).unwrap(),
            workers: (0..cores)
                .map(|c| {
                    BucketWorker::new(c, &reta, TableConfig::default(), SequenceCheck::default())
                })
                .collect(),
            rx: vec![VecDeque::new(); cores],
            control: vec![VecDeque::new(); cores],
            handoffs: (0..cores).map(|_| VecDeque::new()).collect(),
            completions: VecDeque::new(),
            queued: vec![0; cores],
        }
    }

    fn enabled(&self) -> Vec<Event> {
        let mut events = Vec::new();
        if let Some(step) = self.script.get(self.at) {
            let ready = match step {
                Step::Packet(_) => true,
                // The coordinator refuses to move a migrating bucket: the
                // dispatcher waits for the completion.
                Step::Plan(moves) => moves
                    .iter()
                    .all(|&(b, _)| !self.coordinator.is_migrating(b)),
            };
            if ready {
                events.push(Event::Dispatch);
            }
        }
        for c in 0..self.workers.len() {
            if !self.rx[c].is_empty() {
                events.push(Event::Receive(c));
            }
            if !self.control[c].is_empty() {
                events.push(Event::Command(c));
            }
            if !self.handoffs[c].is_empty() {
                events.push(Event::Handoff(c));
            }
        }
        if !self.completions.is_empty() {
            events.push(Event::Complete);
        }
        events
    }

    fn route(&mut self, out: &mut Outbox<SequenceState>) {
        for h in out.handoffs.drain(..) {
            self.handoffs[h.to].push_back(h);
        }
        self.completions.extend(out.completed.drain(..));
    }

    /// A hash of everything that decides the future: states reached by
    /// different schedules are explored once.
    fn fingerprint(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.at.hash(&mut h);
        self.workers.hash(&mut h);
        self.rx.hash(&mut h);
        self.control.hash(&mut h);
        self.handoffs.hash(&mut h);
        self.completions.hash(&mut h);
        self.queued.hash(&mut h);
        self.sent.hash(&mut h);
        // The coordinator: its table and moves in flight (the generation of
        // a move in flight follows from the script position).
        self.coordinator.table().entries().hash(&mut h);
        for b in 0..SIZE {
            self.coordinator.is_migrating(b).hash(&mut h);
        }
        h.finish()
    }

    fn step(&mut self, event: Event) {
        // Time stands still (nothing expires), so that equal states reached
        // at different steps are recognised.
        let now = 0;
        let mut out = Outbox::default();
        match event {
            Event::Dispatch => {
                match &self.script[self.at] {
                    Step::Packet(f) => {
                        let (key, hash) = self.flows[*f];
                        let packet = SequencedPacket {
                            key,
                            hash,
                            flow: *f as u32,
                            seq: self.sent[*f] as u32,
                        };
                        self.sent[*f] += 1;
                        let core = self.coordinator.table().core_of(bucket_of(hash, SIZE));
                        self.queued[core] += 1;
                        self.rx[core].push_back(packet);
                    }
                    Step::Plan(moves) => {
                        let plan = MigrationPlan {
                            moves: moves
                                .iter()
                                .map(|&(bucket, to)| {
                                    // A move to the bucket's own core (the
                                    // script is written before the table is
                                    // known) goes to the next core instead.
                                    let from = self.coordinator.table().core_of(bucket);
                                    let to = if to == from {
                                        (to + 1) % self.workers.len()
                                    } else {
                                        to
                                    };
                                    BucketMove { bucket, from, to }
                                })
                                .collect(),
                        };
                        for c in self.coordinator.apply(&plan, &self.queued).unwrap() {
                            self.control[c.core].push_back(c);
                        }
                    }
                }
                self.at += 1;
            }
            Event::Receive(c) => {
                let p = self.rx[c].pop_front().unwrap();
                self.workers[c].receive([p], now, &mut out);
            }
            Event::Command(c) => {
                let cmd = self.control[c].pop_front().unwrap();
                self.workers[c].command(cmd, now, &mut out).unwrap();
            }
            Event::Handoff(c) => {
                let h = self.handoffs[c].pop_front().unwrap();
                self.workers[c].accept(h, now, &mut out).unwrap();
            }
            Event::Complete => {
                let done = self.completions.pop_front().unwrap();
                self.coordinator.complete(done).unwrap();
            }
        }
        self.route(&mut out);
        self.check_tables_unique();
    }

    /// Each bucket's table is held by exactly one core or travels in exactly
    /// one handoff.
    fn check_tables_unique(&self) {
        let mut copies = [0u8; SIZE];
        for w in &self.workers {
            for b in w.owned_buckets() {
                copies[b] += 1;
            }
        }
        for h in self.handoffs.iter().flatten() {
            copies[h.bucket] += 1;
        }
        assert!(copies.iter().all(|&n| n == 1), "table copies {copies:?}");
    }

    fn check_final(&self) {
        assert_eq!(self.at, self.script.len(), "deadlock: script not finished");
        assert!(
            self.rx.iter().all(VecDeque::is_empty)
                && self.control.iter().all(VecDeque::is_empty)
                && self.handoffs.iter().all(VecDeque::is_empty)
                && self.completions.is_empty(),
            "deadlock: messages left"
        );
        assert_eq!(self.coordinator.migrating(), 0, "moves not completed");
        let mut check = SequenceCheck::default();
        let mut states = Vec::new();
        for w in &self.workers {
            assert!(w.is_settled(), "core {} unsettled", w.core());
            check.add(w.handler());
            for (_, t) in w.tables() {
                states.extend(t.iter().map(|(_, s)| *s));
            }
        }
        assert_eq!(check.reordered, 0, "reordered");
        assert_eq!(check.gaps, 0, "gaps");
        let a = audit(&self.sent, &states);
        assert!(a.is_clean(), "{a:?}");
    }
}

/// Explores every schedule from `sim`, each distinct state once; returns
/// the number of distinct states and of end states where some packet had to
/// wait in a pending queue (the case the protocol exists for).
fn explore(sim: Sim) -> (usize, usize) {
    let mut parked = 0;
    let mut seen = HashSet::new();
    // Depth-first, with the schedule that led to each state for reports.
    let mut stack = vec![(sim, Vec::<Event>::new())];
    while let Some((sim, trail)) = stack.pop() {
        if !seen.insert(sim.fingerprint()) {
            continue;
        }
        let events = sim.enabled();
        if events.is_empty() {
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.check_final()));
            if let Err(e) = result {
                eprintln!("failing schedule: {trail:?}");
                std::panic::resume_unwind(e);
            }
            if sim.workers.iter().any(|w| w.stats().parked > 0) {
                parked += 1;
            }
            continue;
        }
        for e in events {
            let mut next = sim.clone();
            let mut trail = trail.clone();
            trail.push(e);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| next.step(e)));
            if let Err(panic) = result {
                eprintln!("failing schedule: {trail:?}");
                std::panic::resume_unwind(panic);
            }
            stack.push((next, trail));
        }
    }
    (seen.len(), parked)
}

fn random_schedule(mut sim: Sim, rng: &mut SmallRng) {
    loop {
        let events = sim.enabled();
        if events.is_empty() {
            sim.check_final();
            return;
        }
        let e = events[rng.random_range(0..events.len())];
        sim.step(e);
    }
}

#[test]
fn swap_of_two_buckets_every_schedule() {
    // Bucket 2 is on core 0, bucket 3 on core 1; they swap cores while
    // packets of both are queued on each side of the rewrite.
    let flows = flows_in(&[2, 3]);
    let script = vec![
        Step::Packet(0),
        Step::Packet(1),
        Step::Packet(0),
        Step::Packet(1),
        Step::Plan(vec![(2, 1), (3, 0)]),
        Step::Packet(0),
        Step::Packet(1),
        Step::Packet(0),
        Step::Packet(1),
    ];
    let (states, parked) = explore(Sim::new(2, flows, script));
    eprintln!("{states} states, {parked} end states with parked packets");
    assert!(states > 1_000 && parked > 0);
}

#[test]
fn bucket_moving_away_and_back_every_schedule() {
    let flows = flows_in(&[2, 4]);
    let script = vec![
        Step::Packet(0),
        Step::Packet(1),
        Step::Plan(vec![(2, 1)]),
        Step::Packet(0),
        Step::Packet(1),
        Step::Plan(vec![(2, 0), (4, 1)]),
        Step::Packet(0),
        Step::Packet(1),
        Step::Packet(0),
    ];
    let (states, parked) = explore(Sim::new(2, flows, script));
    eprintln!("{states} states, {parked} end states with parked packets");
    assert!(states > 1_000 && parked > 0);
}

#[test]
fn rotation_over_three_cores_every_schedule() {
    // Buckets 0, 1, 2 start on cores 0, 1, 2 and rotate twice.
    let flows = flows_in(&[0, 1, 2]);
    let script = vec![
        Step::Packet(0),
        Step::Packet(1),
        Step::Packet(2),
        Step::Plan(vec![(0, 1), (1, 2), (2, 0)]),
        Step::Packet(0),
        Step::Packet(2),
        Step::Plan(vec![(0, 2), (1, 0), (2, 1)]),
        Step::Packet(0),
    ];
    let (states, parked) = explore(Sim::new(3, flows, script));
    eprintln!("{states} states, {parked} end states with parked packets");
    assert!(states > 1_000 && parked > 0);
}

#[test]
fn three_cores_many_moves_random_schedules() {
    let flows = flows_in(&[0, 1, 2, 5, 7]);
    let mut rng = SmallRng::seed_from_u64(11);
    for round in 0..1_000 {
        let mut script = Vec::new();
        for _ in 0..30 {
            if rng.random_range(0..6) == 0 {
                let mut buckets: Vec<usize> = vec![0, 1, 2, 5, 7];
                let n = rng.random_range(1..=3);
                let moves = (0..n)
                    .map(|_| {
                        let b = buckets.swap_remove(rng.random_range(0..buckets.len()));
                        (b, rng.random_range(0..3))
                    })
                    .collect::<Vec<_>>();
                script.push(Step::Plan(moves));
            } else {
                script.push(Step::Packet(rng.random_range(0..flows.len())));
            }
        }
        let sim = Sim::new(3, flows.clone(), script);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            random_schedule(sim, &mut SmallRng::seed_from_u64(round))
        }));
        if let Err(e) = result {
            eprintln!("round {round} failed (schedule seed {round})");
            std::panic::resume_unwind(e);
        }
    }
}
