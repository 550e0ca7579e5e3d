//! The chain of built-in functions `rsspp nf --chain` builds: `firewall`,
//! `nat`, `monitor`, `dpi`, in the order given, on each packet until one
//! drops it. One flow-table entry per flow (addresses and ports as
//! received) holds every function's state of that flow ([`ChainState`]);
//! `firewall` and `nat` share one connection per connection, in the entry
//! of its origin ([`conntrack`]).

use rsspp_core::{FlowKey, RssKey, Toeplitz};

use super::conntrack::{self, Link, Linked, Timeouts};
use super::dpi::{self, Dpi, DpiState};
use super::firewall::{Firewall, Rules};
use super::headers::{self, Ip};
use super::monitor::{Monitor, MonitorState};
use super::nat::{self, Nat, PortChoice};
use super::{FlowRecord, Flows, NetworkFunction, Packet, Verdict};
use crate::error::RuntimeError;

/// The network functions `--chain` knows, by name.
pub const KNOWN: &[&str] = &["firewall", "nat", "monitor", "dpi"];

/// What the functions of a chain need besides their names.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    /// The Toeplitz key the runtime steers with (the NAT chooses its ports
    /// by it, the firewall finds reply directions by it).
    pub key: RssKey,
    /// Buckets of the runtime's table.
    pub buckets: usize,
    /// The firewall's rules (`--rules`).
    pub rules: Option<Rules>,
    /// The NAT's pool (`--nat-pool`).
    pub nat_pool: Option<nat::Pool>,
    /// How the NAT chooses its ports.
    pub nat_ports: PortChoice,
    /// DPI's patterns (`--patterns`), and their file's name.
    pub patterns: Option<(Vec<Vec<u8>>, String)>,
    /// What a DPI match does.
    pub dpi_action: dpi::Action,
    /// Connection timeouts.
    pub timeouts: Timeouts,
}

impl Default for ChainConfig {
    /// The runtime's defaults: the Microsoft key, 128 buckets; no rules,
    /// pool or patterns.
    fn default() -> Self {
        Self {
            key: RssKey::microsoft(),
            buckets: 128,
            rules: None,
            nat_pool: None,
            nat_ports: PortChoice::SameBucket,
            patterns: None,
            dpi_action: dpi::Action::Count,
            timeouts: Timeouts::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Firewall,
    Nat,
    Monitor,
    Dpi,
}

/// A chain of built-in functions; see the module docs.
#[derive(Debug, Clone)]
pub struct Chain {
    steps: Vec<Step>,
    names: Vec<&'static str>,
    monitor: Option<Monitor>,
    firewall: Option<Firewall>,
    nat: Option<Nat>,
    dpi: Option<Dpi>,
    toeplitz: Toeplitz,
    timeouts: Timeouts,
}

/// The states of a flow in a [`Chain`], one per function that keeps one.
#[derive(Debug, Clone, Default)]
pub struct ChainState {
    /// The monitor's.
    pub monitor: Option<MonitorState>,
    /// DPI's.
    pub dpi: Option<DpiState>,
    /// The connection the flow opened, or a link to it.
    pub link: Link,
}

impl Linked for ChainState {
    fn link(&self) -> &Link {
        &self.link
    }
    fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }
}

impl Chain {
    /// Parses `NF[,…]` with the default [`ChainConfig`] (enough for
    /// `monitor`).
    pub fn parse(list: &str) -> Result<Self, RuntimeError> {
        Self::with_config(list, &ChainConfig::default())
    }

    /// Parses `NF[,…]`: an unknown name, a repeated one, an empty list, a
    /// function without what it needs (`firewall` its rules, `nat` its
    /// pool, `dpi` its patterns), or `nat` before `firewall` (which must see
    /// packets as received) are refused.
    pub fn with_config(list: &str, config: &ChainConfig) -> Result<Self, RuntimeError> {
        let toeplitz = Toeplitz::new(config.key.clone());
        let mut chain = Chain {
            steps: Vec::new(),
            names: Vec::new(),
            monitor: None,
            firewall: None,
            nat: None,
            dpi: None,
            toeplitz,
            timeouts: config.timeouts,
        };
        for name in list.split(',').map(str::trim) {
            let (step, known) = match KNOWN.iter().find(|&&k| k == name) {
                Some(&k) => (
                    match k {
                        "firewall" => Step::Firewall,
                        "nat" => Step::Nat,
                        "monitor" => Step::Monitor,
                        _ => Step::Dpi,
                    },
                    k,
                ),
                None => {
                    return Err(RuntimeError::UnknownNf {
                        name: name.to_string(),
                        known: KNOWN.join(", "),
                    })
                }
            };
            if chain.steps.contains(&step) {
                return Err(RuntimeError::Config(format!("--chain names {name} twice")));
            }
            let missing = |what: &str| RuntimeError::Config(format!("{name} needs {what}"));
            match step {
                Step::Monitor => chain.monitor = Some(Monitor),
                Step::Firewall => {
                    let rules = config
                        .rules
                        .clone()
                        .ok_or_else(|| missing("--rules FILE"))?;
                    chain.firewall = Some(Firewall {
                        rules,
                        timeouts: config.timeouts,
                    });
                }
                Step::Nat => {
                    let pool = config
                        .nat_pool
                        .clone()
                        .ok_or_else(|| missing("--nat-pool PREFIX"))?;
                    let mut nat = Nat::new(pool, config.nat_ports, config.buckets, &chain.toeplitz);
                    nat.timeouts = config.timeouts;
                    chain.nat = Some(nat);
                }
                Step::Dpi => {
                    let (patterns, origin) = config
                        .patterns
                        .as_ref()
                        .ok_or_else(|| missing("--patterns FILE"))?;
                    chain.dpi = Some(Dpi::new(patterns, config.dpi_action, origin)?);
                }
            }
            chain.steps.push(step);
            chain.names.push(known);
        }
        if let (Some(f), Some(n)) = (
            chain.steps.iter().position(|&s| s == Step::Firewall),
            chain.steps.iter().position(|&s| s == Step::Nat),
        ) {
            if n < f {
                return Err(RuntimeError::Config(
                    "--chain: nat must come after firewall (the firewall sees packets as received)"
                        .into(),
                ));
            }
        }
        Ok(chain)
    }

    /// The functions, in order.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// True when the chain tracks connections (`firewall` or `nat`): both
    /// directions of a connection must then reach the same bucket, which
    /// for untranslated connections takes a symmetric Toeplitz key.
    pub fn tracks_connections(&self) -> bool {
        self.firewall.is_some() || self.nat.is_some()
    }

    fn blank(&self) -> ChainState {
        ChainState {
            monitor: self.monitor.as_ref().map(|_| MonitorState::default()),
            dpi: self.dpi.as_ref().map(|_| DpiState::default()),
            link: Link::None,
        }
    }

    /// Runs `f` on the packet's own flow state (created if new).
    fn own<F: Flows<ChainState>>(
        &self,
        packet: &Packet<'_>,
        flows: &mut F,
        f: impl FnOnce(Option<&mut ChainState>) -> Verdict,
    ) -> Verdict {
        let (key, hash, now) = (packet.key, packet.hash, packet.timestamp_ns);
        let mut f = Some(f);
        let v = flows.with_table(hash, |t| {
            let s = t
                .get_or_insert_with(&key, hash, now, || self.blank())
                .state();
            (f.take().expect("called once"))(s)
        });
        match v {
            Some(v) => v,
            None => (f.take().expect("not called"))(None),
        }
    }
}

impl NetworkFunction for Chain {
    type State = ChainState;

    fn new_flow(&mut self, packet: &Packet<'_>) -> ChainState {
        let mut s = self.blank();
        if let Some(m) = &mut s.monitor {
            m.first_ns = packet.timestamp_ns;
        }
        s
    }

    /// Without the flow tables (a packet whose bucket left before it was
    /// processed): `monitor` and `dpi` use the state given, `firewall` and
    /// `nat`, unable to find the connection, drop.
    fn process(&mut self, packet: &mut Packet<'_>, mut state: Option<&mut ChainState>) -> Verdict {
        let ip = headers::parse_ip(packet.data);
        for step in &self.steps {
            let v = match step {
                Step::Firewall => Verdict::Drop(super::firewall::DROP),
                Step::Nat => Verdict::Drop(nat::DROP),
                Step::Monitor => Monitor.process(
                    packet,
                    state.as_deref_mut().and_then(|s| s.monitor.as_mut()),
                ),
                Step::Dpi => self.dpi.as_ref().expect("dpi").process(
                    packet,
                    ip.as_ref(),
                    state.as_deref_mut().and_then(|s| s.dpi.as_mut()),
                ),
            };
            if v != Verdict::Forward {
                return v;
            }
        }
        Verdict::Forward
    }

    fn process_flows<F: Flows<ChainState>>(
        &mut self,
        packet: &mut Packet<'_>,
        flows: &mut F,
    ) -> Verdict {
        let ip: Option<Ip> = headers::parse_ip(packet.data);
        let now = packet.timestamp_ns;
        let mut found = None;
        if self.tracks_connections() {
            found = conntrack::find(
                flows,
                &self.toeplitz,
                &packet.key,
                packet.hash,
                now,
                &self.timeouts,
            );
        }
        for i in 0..self.steps.len() {
            let v = match self.steps[i] {
                Step::Firewall => {
                    let fw = self.firewall.as_ref().expect("firewall");
                    fw.process(
                        packet,
                        ip.as_ref(),
                        flows,
                        &self.toeplitz,
                        &mut found,
                        || self.blank(),
                    )
                }
                Step::Nat => {
                    let nat = self.nat.as_ref().expect("nat");
                    nat.process(
                        packet,
                        ip.as_ref(),
                        flows,
                        &self.toeplitz,
                        &mut found,
                        self.firewall.is_some(),
                        || self.blank(),
                    )
                }
                Step::Monitor => {
                    let (len, ts) = (packet.wire_len, packet.timestamp_ns);
                    self.own(packet, flows, |s| {
                        if let Some(m) = s.and_then(|s| s.monitor.as_mut()) {
                            m.count(len, ts);
                        }
                        Verdict::Forward
                    })
                }
                Step::Dpi => {
                    let dpi = self.dpi.as_ref().expect("dpi");
                    let view = &*packet;
                    self.own(view, flows, |s| {
                        dpi.process(view, ip.as_ref(), s.and_then(|s| s.dpi.as_mut()))
                    })
                }
            };
            if v != Verdict::Forward {
                return v;
            }
        }
        Verdict::Forward
    }

    fn record(&self, key: &FlowKey, state: &ChainState) -> Option<FlowRecord> {
        let m = self.monitor.as_ref()?;
        let mut r = m.record(key, state.monitor.as_ref()?)?;
        r.dpi_matches = state.dpi.map(|d| d.matches);
        Some(r)
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
