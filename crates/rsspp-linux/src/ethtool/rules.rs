//! The NIC's ntuple rules (`ethtool -N IF flow-type … action Q`): a rule
//! steers the packets of one flow to a receive queue whatever the
//! indirection table says. Hardware mode's per-flow overrides are rules.

use std::fmt;
use std::net::IpAddr;

/// The protocol a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleProto {
    /// TCP (`tcp4`, `tcp6`).
    Tcp,
    /// UDP (`udp4`, `udp6`).
    Udp,
    /// Any IP protocol, addresses only (`ip4`, `ip6`).
    Ip,
}

/// What a rule matches: the protocol, both addresses, and both ports
/// (TCP and UDP rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleMatch {
    /// The protocol.
    pub proto: RuleProto,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source and destination ports (TCP and UDP rules only).
    pub ports: Option<(u16, u16)>,
}

impl RuleMatch {
    /// The rules that together match every packet whose RSS hash input is
    /// `src`, `dst` and `ports`: that input names no protocol, so a flow
    /// with ports takes a TCP rule and a UDP rule (the NICs' ntuple filters
    /// match ports per protocol), a flow without takes one on its
    /// addresses.
    pub fn for_flow(src: IpAddr, dst: IpAddr, ports: Option<(u16, u16)>) -> Vec<RuleMatch> {
        let rule = |proto| RuleMatch {
            proto,
            src,
            dst,
            ports: ports.filter(|_| proto != RuleProto::Ip),
        };
        if ports.is_some() {
            vec![rule(RuleProto::Tcp), rule(RuleProto::Udp)]
        } else {
            vec![rule(RuleProto::Ip)]
        }
    }

    /// Whether its addresses are IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }
}

/// As `ethtool -N` takes it: `flow-type udp4 src-ip … dst-ip … src-port …
/// dst-port …`.
impl fmt::Display for RuleMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.proto {
            RuleProto::Tcp => "tcp",
            RuleProto::Udp => "udp",
            RuleProto::Ip => "ip",
        };
        let family = if self.is_ipv6() { 6 } else { 4 };
        write!(
            f,
            "flow-type {proto}{family} src-ip {} dst-ip {}",
            self.src, self.dst
        )?;
        if let Some((s, d)) = self.ports {
            write!(f, " src-port {s} dst-port {d}")?;
        }
        Ok(())
    }
}

/// A rule: what it matches, the queue it steers to, where it sits in the
/// NIC's table (the lowest location wins where rules overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRule {
    /// What it matches.
    pub matches: RuleMatch,
    /// The receive queue.
    pub queue: u32,
    /// Its location in the NIC's rule table.
    pub location: u32,
}

/// As `ethtool -N` takes it: `flow-type … action Q loc L`.
impl fmt::Display for FlowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} action {} loc {}",
            self.matches, self.queue, self.location
        )
    }
}

/// The NIC's rule table: its size and the locations in use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleTable {
    /// Locations `0..size`.
    pub size: u32,
    /// Locations in use, ascending.
    pub used: Vec<u32>,
}

impl RuleTable {
    /// The free locations, highest first: rules put there lose to every
    /// rule someone else put lower.
    pub fn free(&self) -> Vec<u32> {
        (0..self.size)
            .rev()
            .filter(|l| self.used.binary_search(l).is_err())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_with_ports_takes_a_tcp_and_a_udp_rule() {
        let src: IpAddr = "10.0.0.1".parse().unwrap();
        let dst: IpAddr = "10.0.0.2".parse().unwrap();
        let rules = RuleMatch::for_flow(src, dst, Some((1000, 53)));
        let text: Vec<String> = rules.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "flow-type tcp4 src-ip 10.0.0.1 dst-ip 10.0.0.2 src-port 1000 dst-port 53",
                "flow-type udp4 src-ip 10.0.0.1 dst-ip 10.0.0.2 src-port 1000 dst-port 53"
            ]
        );
        let v6 = RuleMatch::for_flow("::1".parse().unwrap(), "::2".parse().unwrap(), None);
        assert_eq!(v6.len(), 1);
        let rule = FlowRule {
            matches: v6[0],
            queue: 3,
            location: 1023,
        };
        assert_eq!(
            rule.to_string(),
            "flow-type ip6 src-ip ::1 dst-ip ::2 action 3 loc 1023"
        );
    }

    #[test]
    fn free_locations_come_from_the_top() {
        let table = RuleTable {
            size: 6,
            used: vec![0, 4],
        };
        assert_eq!(table.free(), vec![5, 3, 2, 1]);
        assert!(RuleTable::default().free().is_empty());
    }
}
