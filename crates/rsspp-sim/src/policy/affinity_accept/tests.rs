//! The policy driven by the engine: ownership, order, mechanisms.

use super::*;
use crate::engine::{Engine, EngineConfig};
use crate::result::PolicyResult;
use crate::workload::{TraceSource, Workload, WorkloadConfig};
use rsspp_trace::Preset;

/// Which core processed each connection's packets, recorded where the
/// policy processes them and independently of its owner bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Audit {
    /// Per flow: the core that processed the open connection's first
    /// packet (`u8::MAX`: none yet).
    core: Vec<u8>,
    /// Packets of connections processed.
    pub packets: u64,
    /// Of them, processed on another core than the connection's first.
    pub elsewhere: u64,
}

impl Audit {
    pub fn opened(&mut self, flow: u32) {
        let i = flow as usize;
        if i >= self.core.len() {
            self.core.resize(i + 1, u8::MAX);
        }
        self.core[i] = u8::MAX;
    }

    pub fn processed(&mut self, flow: u32, core: usize) {
        let c = &mut self.core[flow as usize];
        if *c == u8::MAX {
            *c = core as u8;
        }
        self.packets += 1;
        if usize::from(*c) != core {
            self.elsewhere += 1;
        }
    }
}

fn packets(speed: f64, seconds: f64, seed: u64) -> Vec<SimPacket> {
    let source = TraceSource::preset(Preset::ShortConnections);
    let mut config = WorkloadConfig::new(source, seconds, speed).unwrap();
    config.seed = seed;
    let mut w = Workload::open(&config).unwrap();
    let mut all = Vec::new();
    while w.next_batch(&mut all).unwrap() {}
    all
}

fn engine_config(skew: f64) -> EngineConfig {
    let mut e = EngineConfig::default();
    e.cost.work_skew = skew;
    e
}

fn run(policy: AffinityAccept, packets: &[SimPacket], skew: f64) -> PolicyResult {
    let mut engine = Engine::new(Box::new(policy), engine_config(skew));
    engine.feed(packets);
    engine.finish()
}

fn config(cores: usize) -> PolicyConfig {
    PolicyConfig {
        cores,
        ..PolicyConfig::default()
    }
}

/// Four cores about 75% busy (1.7 Mpps of ~7-packet connections) with a
/// wide per-connection service-time spread: expensive connections overload
/// one core or another for milliseconds at a time.
const HIGH: (f64, f64) = (2.4, 2.0);

#[test]
fn one_owner_per_connection_and_no_reordering_under_stealing() {
    // Beyond HIGH: cores turn busy, and some accept queues overflow.
    let pkts = packets(2.6, 0.4, 3);
    let policy = AffinityAccept::new(&config(4)).unwrap();
    let audit = policy.audit();
    let r = run(policy, &pkts, 1.5);
    let m = r
        .summary
        .mechanisms
        .affinity_accept()
        .expect("its counters");
    // Every path ran: stealing from busy and non-busy cores, forwarding,
    // group moves, refused connections.
    assert!(m.steals > 100, "{m:?}");
    assert!(m.busy_transitions > 0, "{m:?}");
    assert!(m.flow_group_migrations > 0, "{m:?}");
    assert!(m.forwarded_packets > 0, "{m:?}");
    assert!(m.accept_queue_drops > 0, "{m:?}");
    let a = audit.lock().unwrap();
    assert!(
        a.packets > pkts.len() as u64 / 2,
        "{} packets audited",
        a.packets
    );
    assert_eq!(a.elsewhere, 0, "packets processed away from their owner");
    assert_eq!(r.summary.reordered, 0);
    assert_eq!(
        r.summary.processed + r.summary.drops,
        r.summary.packets,
        "every packet is processed or dropped"
    );
}

/// A packet of connection `flow` (group 2 of the table).
fn conn_packet(flow: u32, seq: u32, at: Ns) -> SimPacket {
    SimPacket {
        arrival_ns: at,
        ready_ns: at,
        flow,
        seq,
        hash: 2,
        salt: flow,
        wire_len: 60,
        tcp_flags: if seq == 0 { 0x02 } else { 0x10 },
        proto: 6,
        ..SimPacket::default()
    }
}

#[test]
fn a_migrated_group_keeps_its_packets_in_order() {
    // Two cores; every connection is in group 2, on core 0. Connections
    // arrive faster than core 0 can serve them (70 µs a packet): core 1
    // steals, and at the first round (1 ms) takes group 2 while core 0,
    // deep in a batch, still has packets of it queued.
    let config = PolicyConfig {
        cores: 2,
        reta_size: 64,
        interval_ns: 1_000_000,
        table_update_ns: 0,
        ..PolicyConfig::default()
    };
    let mut pkts: Vec<SimPacket> = (0..600u32)
        .flat_map(|c| {
            (0..5).map(move |s| conn_packet(c, s, u64::from(c) * 5_000 + u64::from(s) * 20_000))
        })
        .collect();
    pkts.sort_by_key(|p| (p.arrival_ns, p.flow, p.seq));
    let policy = AffinityAccept::new(&config).unwrap();
    let audit = policy.audit();
    let mut engine_config = EngineConfig::default();
    engine_config.cost.work = 20_000;
    let mut engine = Engine::new(Box::new(policy), engine_config);
    engine.feed(&pkts);
    let r = engine.finish();
    let m = r
        .summary
        .mechanisms
        .affinity_accept()
        .expect("its counters");
    assert!(m.flow_group_migrations >= 1, "{m:?}");
    assert_eq!(r.summary.reordered, 0, "{m:?}");
    assert!(m.fence_held_packets > 0, "{m:?}");
    assert_eq!(audit.lock().unwrap().elsewhere, 0);
    assert_eq!(r.summary.processed + r.summary.drops, r.summary.packets);
}

#[test]
fn stealing_and_migration_are_what_helps() {
    let (speed, skew) = HIGH;
    let pkts = packets(speed, 0.4, 4);
    let full = run(AffinityAccept::new(&config(4)).unwrap(), &pkts, skew);
    let alone = AffinityOptions {
        stealing: false,
        flow_group_migration: false,
        ..AffinityOptions::default()
    };
    let alone = run(
        AffinityAccept::with_options(&config(4), alone).unwrap(),
        &pkts,
        skew,
    );
    assert_eq!(
        alone.summary.mechanisms.affinity_accept().unwrap().steals,
        0
    );
    assert_eq!(alone.summary.migrations, 0);
    let (a, b) = (&full.summary, &alone.summary);
    assert!(
        a.drops <= b.drops && a.latency_p99_us < 0.6 * b.latency_p99_us,
        "with the balancer: {} drops, p99 {:.0} µs; without: {} drops, p99 {:.0} µs",
        a.drops,
        a.latency_p99_us,
        b.drops,
        b.latency_p99_us
    );
}

#[test]
fn bad_settings_are_errors() {
    let options = AffinityOptions {
        accept_queue: 0,
        ..AffinityOptions::default()
    };
    assert!(AffinityAccept::with_options(&config(4), options).is_err());
    assert!(AffinityAccept::new(&config(0)).is_err());
    assert!(AffinityAccept::new(&PolicyConfig {
        reta_size: 100,
        ..config(4)
    })
    .is_err());
}
