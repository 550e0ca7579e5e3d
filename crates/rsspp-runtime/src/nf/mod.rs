//! Network functions: the [`NetworkFunction`] trait users implement, the
//! built-in ones, and the chain `rsspp nf --chain` builds.
//!
//! A network function sees each packet with its flow's state: one instance
//! runs on each worker, and the runtime keeps the per-flow states in the
//! flow table of the packet's RSS bucket, which follows the bucket when it
//! moves to another worker. So a function never locks anything and never
//! sees a flow's packets out of order, whatever the rebalancer does.
//!
//! A function that needs more than its own flow's state — a connection
//! tracker that finds the other direction of a connection, a NAT that
//! stores the mapping its replies will look up — overrides
//! [`NetworkFunction::process_flows`] and reaches the tables through
//! [`Flows`]: with per-bucket tables only the table of the packet's own
//! bucket is reachable, so every entry a function stores must belong to a
//! flow of that bucket (the NAT chooses its ports so that it does;
//! `firewall` relies on a symmetric Toeplitz key).
//!
//! The built-in functions: [`Monitor`] (`monitor`), and in [`Chain`]
//! `firewall` ([`firewall`]), `nat` ([`nat`]), `dpi` ([`dpi`]), which share
//! connection tracking ([`conntrack`]).

use std::net::IpAddr;

use rsspp_core::state::{FlowTable, SharedFlowTable};
use rsspp_core::{bucket_of, FlowKey};
use serde::Serialize;

pub mod chain;
pub mod conntrack;
pub mod dpi;
pub mod firewall;
pub mod headers;
mod monitor;
pub mod nat;

pub use chain::{Chain, ChainConfig, ChainState, KNOWN};
pub use monitor::{Monitor, MonitorState};

/// A packet as a network function sees it.
#[derive(Debug)]
pub struct Packet<'a> {
    /// The frame from its Ethernet header; a function may rewrite it (the
    /// runtime transmits what is there).
    pub data: &'a mut [u8],
    /// Its length on the wire (the frame may have been captured shorter).
    pub wire_len: u32,
    /// Its flow, as received.
    pub key: FlowKey,
    /// The Toeplitz hash it was steered by: its flow's, except for an ICMP
    /// error, steered by the flow it quotes ([`headers::steering_key`]).
    pub hash: u32,
    /// The kernel's receive timestamp, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
}

/// What becomes of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On to the next function, then out.
    Forward,
    /// Dropped, for this reason (counted under it in the summary).
    Drop(&'static str),
}

/// One flow's line in `--flows-out`: addresses and ports as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowRecord {
    /// IP protocol number.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 without ports).
    pub sport: u16,
    /// Destination port (0 without ports).
    pub dport: u16,
    /// Packets seen.
    pub packets: u64,
    /// Bytes seen (on the wire).
    pub bytes: u64,
    /// First packet's timestamp, nanoseconds since the Unix epoch.
    pub first_ns: u64,
    /// Last packet's timestamp.
    pub last_ns: u64,
    /// Pattern matches `dpi` found in the flow's payloads (with `dpi` in
    /// the chain only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpi_matches: Option<u64>,
}

/// The flow tables a worker can reach while it processes a packet.
pub trait Flows<S> {
    /// Runs `f` on the table that holds the flows of Toeplitz hash `hash`;
    /// `None` when this worker cannot reach it (per-bucket tables: a hash
    /// of another bucket than the packet's). Calls do not nest: each takes
    /// the table (or, shared, its stripe's lock) for the length of `f`.
    fn with_table<R>(&mut self, hash: u32, f: impl FnOnce(&mut FlowTable<S>) -> R) -> Option<R>;
}

/// The table of one bucket, owned by the worker processing it.
#[derive(Debug)]
pub struct BucketFlows<'a, S> {
    table: &'a mut FlowTable<S>,
    bucket: usize,
    buckets: usize,
}

impl<'a, S> BucketFlows<'a, S> {
    /// `table` holds the flows of `bucket` out of `buckets`.
    pub fn new(table: &'a mut FlowTable<S>, bucket: usize, buckets: usize) -> Self {
        Self {
            table,
            bucket,
            buckets,
        }
    }
}

impl<S> Flows<S> for BucketFlows<'_, S> {
    fn with_table<R>(&mut self, hash: u32, f: impl FnOnce(&mut FlowTable<S>) -> R) -> Option<R> {
        (bucket_of(hash, self.buckets) == self.bucket).then(|| f(self.table))
    }
}

/// The lock-striped table all workers share (`--table shared`): every
/// hash is reachable, each call under its stripe's lock.
#[derive(Debug)]
pub struct SharedFlows<'a, S>(pub &'a SharedFlowTable<S>);

impl<S> Flows<S> for SharedFlows<'_, S> {
    fn with_table<R>(&mut self, hash: u32, f: impl FnOnce(&mut FlowTable<S>) -> R) -> Option<R> {
        Some(self.0.with_stripe(hash, f))
    }
}

/// A network function; see the module docs.
pub trait NetworkFunction: Send + 'static {
    /// Its state per flow.
    type State: Send + 'static;

    /// The state of a flow's first packet (before `process` sees it).
    fn new_flow(&mut self, packet: &Packet<'_>) -> Self::State;

    /// Processes a packet with its flow's state; `state` is `None` when the
    /// runtime has none to give (the flow table is full, or the packet
    /// reached a worker that no longer holds its bucket because a move did
    /// not wait for it: `--moves immediate`).
    fn process(&mut self, packet: &mut Packet<'_>, state: Option<&mut Self::State>) -> Verdict;

    /// Processes a packet with the flow tables this worker can reach. The
    /// runtime calls this for every packet whose bucket the worker holds;
    /// the default gives [`process`](Self::process) the state of the
    /// packet's flow, created by [`new_flow`](Self::new_flow) if new.
    fn process_flows<F: Flows<Self::State>>(
        &mut self,
        packet: &mut Packet<'_>,
        flows: &mut F,
    ) -> Verdict
    where
        Self: Sized,
    {
        let (key, hash, now) = (packet.key, packet.hash, packet.timestamp_ns);
        flows
            .with_table(hash, |table| {
                let state = table
                    .get_or_insert_with(&key, hash, now, || self.new_flow(packet))
                    .state();
                self.process(packet, state)
            })
            .unwrap_or_else(|| self.process(packet, None))
    }

    /// The flow's line for `--flows-out`, for functions that keep one.
    fn record(&self, _key: &FlowKey, _state: &Self::State) -> Option<FlowRecord> {
        None
    }
}
