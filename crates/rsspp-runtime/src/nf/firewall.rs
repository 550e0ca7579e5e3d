//! `firewall`: a stateful TCP/UDP firewall. Packets of tracked
//! connections pass ([`conntrack`](super::conntrack)); a packet that opens
//! a connection (a TCP SYN, any UDP or other packet) passes if an allow
//! rule matches it, and the connection is tracked from then on; an ICMPv4
//! error passes if the packet it quotes belongs to a tracked connection.
//! Everything else is dropped, counted under `firewall`.
//!
//! Rules, one a line (`#` starts a comment):
//!
//! ```text
//! allow PROTO [src CIDR] [dst CIDR] [sport PORT[-PORT]] [dport PORT[-PORT]]
//! ```
//!
//! `PROTO` is `tcp`, `udp`, `icmp`, `icmpv6`, `any` or a protocol number;
//! ports only with `tcp` or `udp`; a CIDR is an IPv4 or IPv6 address with
//! an optional `/LEN`.

use std::net::IpAddr;

use rsspp_core::flow::proto;
use rsspp_core::{FlowKey, Toeplitz};

use super::conntrack::{self, opens, Connection, Dir, Link, Linked, Timeouts};
use super::headers::{icmp_error_quote, Ip};
use super::{Flows, Packet, Verdict};

/// The reason the firewall drops under.
pub const DROP: &str = "firewall";

/// A malformed rule: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}: {message}")]
pub struct RuleError {
    /// The file (or other origin) of the rules.
    pub origin: String,
    /// Its line, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// An address prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    fn parse(s: &str) -> Result<Self, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{l:?} is not a prefix length (0-{max})")),
            },
        };
        Ok(Self { addr, len })
    }

    /// True when `a` is in the prefix.
    pub fn contains(&self, a: IpAddr) -> bool {
        let bits = |x: u128, len: u32, width: u32| {
            if len == 0 {
                0
            } else {
                x >> (width - len)
            }
        };
        match (self.addr, a) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let l = u32::from(self.len);
                bits(u128::from(u32::from(p)), l, 32) == bits(u128::from(u32::from(a)), l, 32)
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let l = u32::from(self.len);
                bits(u128::from(p), l, 128) == bits(u128::from(a), l, 128)
            }
            _ => false,
        }
    }
}

/// One allow rule; a field left out matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    /// IP protocol.
    pub protocol: Option<u8>,
    /// Source prefix.
    pub src: Option<Cidr>,
    /// Destination prefix.
    pub dst: Option<Cidr>,
    /// Source port range (inclusive).
    pub sport: Option<(u16, u16)>,
    /// Destination port range (inclusive).
    pub dport: Option<(u16, u16)>,
}

impl Rule {
    /// True when the rule allows a connection opened by flow `key`.
    pub fn matches(&self, key: &FlowKey) -> bool {
        let port = |range: Option<(u16, u16)>, p: Option<u16>| match (range, p) {
            (None, _) => true,
            (Some((lo, hi)), Some(p)) => (lo..=hi).contains(&p),
            (Some(_), None) => false,
        };
        self.protocol.is_none_or(|p| p == key.protocol)
            && self.src.is_none_or(|c| c.contains(key.src))
            && self.dst.is_none_or(|c| c.contains(key.dst))
            && port(self.sport, key.ports.map(|p| p.0))
            && port(self.dport, key.ports.map(|p| p.1))
    }
}

fn parse_ports(s: &str) -> Result<(u16, u16), String> {
    let num = |x: &str| {
        x.parse::<u16>()
            .map_err(|_| format!("{x:?} is not a port (0-65535)"))
    };
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                return Err(format!("port range {s} runs backwards"));
            }
            Ok((a, b))
        }
        None => num(s).map(|p| (p, p)),
    }
}

fn parse_rule(line: &str) -> Result<Rule, String> {
    let mut words = line.split_whitespace();
    match words.next() {
        Some("allow") => {}
        Some(w) => return Err(format!("{w:?}: a rule starts with \"allow\"")),
        None => unreachable!("blank lines are skipped"),
    }
    let mut rule = Rule::default();
    let protocol = words
        .next()
        .ok_or("\"allow\" needs a protocol (tcp, udp, icmp, icmpv6, any or a number)")?;
    rule.protocol = match protocol {
        "tcp" => Some(proto::TCP),
        "udp" => Some(proto::UDP),
        "icmp" => Some(proto::ICMP),
        "icmpv6" => Some(proto::ICMPV6),
        "any" => None,
        n => Some(n.parse::<u8>().map_err(|_| {
            format!("{n:?} is not a protocol (tcp, udp, icmp, icmpv6, any or 0-255)")
        })?),
    };
    while let Some(field) = words.next() {
        let value = words
            .next()
            .ok_or_else(|| format!("{field:?} needs a value"))?;
        let repeated = || format!("{field:?} given twice");
        match field {
            "src" | "dst" => {
                let c = Cidr::parse(value)?;
                let slot = if field == "src" {
                    &mut rule.src
                } else {
                    &mut rule.dst
                };
                if slot.replace(c).is_some() {
                    return Err(repeated());
                }
            }
            "sport" | "dport" => {
                if !matches!(rule.protocol, Some(proto::TCP | proto::UDP)) {
                    return Err(format!("{field} needs protocol tcp or udp"));
                }
                let r = parse_ports(value)?;
                let slot = if field == "sport" {
                    &mut rule.sport
                } else {
                    &mut rule.dport
                };
                if slot.replace(r).is_some() {
                    return Err(repeated());
                }
            }
            other => {
                return Err(format!(
                    "unknown field {other:?} (known: src, dst, sport, dport)"
                ))
            }
        }
    }
    if let (Some(s), Some(d)) = (rule.src, rule.dst) {
        if s.addr.is_ipv4() != d.addr.is_ipv4() {
            return Err("src and dst are of different IP families".into());
        }
    }
    Ok(rule)
}

/// The allow rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Parses a rules file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, RuleError> {
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            rules.push(parse_rule(line).map_err(|message| RuleError {
                origin: origin.to_string(),
                line: i + 1,
                message,
            })?);
        }
        Ok(Self { rules })
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// True when a rule allows a connection opened by flow `key`.
    pub fn allows(&self, key: &FlowKey) -> bool {
        self.rules.iter().any(|r| r.matches(key))
    }
}

/// The firewall; see the module docs.
#[derive(Debug, Clone)]
pub struct Firewall {
    /// Its rules.
    pub rules: Rules,
    /// Its connections' timeouts.
    pub timeouts: Timeouts,
}

impl Firewall {
    /// Decides a packet; `found` is the packet's connection if the chain
    /// has already looked it up (`None` inside: it has none), and is set
    /// to the connection the packet opens. `init` makes the state of a new
    /// flow-table entry.
    pub fn process<S: Linked, F: Flows<S>>(
        &self,
        packet: &Packet<'_>,
        ip: Option<&Ip>,
        flows: &mut F,
        toeplitz: &Toeplitz,
        found: &mut Option<conntrack::Found>,
        init: impl FnOnce() -> S,
    ) -> Verdict {
        let now = packet.timestamp_ns;
        let flags = ip.and_then(|ip| ip.tcp_flags(packet.data));
        if let Some(f) = *found {
            conntrack::with_connection(flows, &f.origin, f.hash, now, |c| {
                c.update(f.dir, flags, now)
            });
            return Verdict::Forward;
        }
        // An ICMP error passes with the connection of the packet it quotes.
        if let Some(quoted) = ip.and_then(|ip| icmp_error_quote(packet.data, ip)) {
            let qh = toeplitz.hash_flow(&quoted);
            return match conntrack::find(flows, toeplitz, &quoted, qh, now, &self.timeouts) {
                Some(_) => Verdict::Forward,
                None => Verdict::Drop(DROP),
            };
        }
        let key = packet.key;
        if !opens(key.protocol, flags) || !self.rules.allows(&key) {
            return Verdict::Drop(DROP);
        }
        let conn = Connection::open(key.protocol, flags, now);
        let stored = flows
            .with_table(packet.hash, |table| {
                table
                    .get_or_insert_with(&key, packet.hash, now, init)
                    .state()
                    .map(|s| *s.link_mut() = Link::Origin(conn))
                    .is_some()
            })
            .unwrap_or(false);
        if !stored {
            // No room to track it: it could not be answered.
            return Verdict::Drop(DROP);
        }
        *found = Some(conntrack::Found {
            origin: key,
            hash: packet.hash,
            dir: Dir::Origin,
            conn,
        });
        Verdict::Forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: u8, src: &str, dst: &str, sport: u16, dport: u16) -> FlowKey {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), sport, dport, p).unwrap()
    }

    #[test]
    fn rules_parse_and_match() {
        let r = Rules::parse(
            "# web and DNS\nallow tcp dport 80\n\n  allow udp src 10.0.0.0/8 dport 53 # resolvers\nallow tcp dst 2001:db8::/32 sport 1000-2000\nallow 47\n",
            "rules",
        )
        .unwrap();
        assert_eq!(r.rules().len(), 4);
        assert!(r.allows(&key(6, "1.2.3.4", "5.6.7.8", 999, 80)));
        assert!(!r.allows(&key(17, "1.2.3.4", "5.6.7.8", 999, 80)));
        assert!(r.allows(&key(17, "10.9.8.7", "5.6.7.8", 999, 53)));
        assert!(!r.allows(&key(17, "11.9.8.7", "5.6.7.8", 999, 53)));
        assert!(r.allows(&key(6, "2001:db8::1", "2001:db8::2", 1500, 22)));
        assert!(!r.allows(&key(6, "2001:db8::1", "2001:db9::2", 1500, 22)));
        assert!(!r.allows(&key(6, "2001:db8::1", "2001:db8::2", 2001, 22)));
        let gre =
            FlowKey::addresses_only("1.1.1.1".parse().unwrap(), "2.2.2.2".parse().unwrap(), 47)
                .unwrap();
        assert!(r.allows(&gre));
        let any = Rules::parse("allow any src 0.0.0.0/0", "x").unwrap();
        assert!(any.allows(&key(6, "1.2.3.4", "5.6.7.8", 1, 2)));
        assert!(!any.allows(&key(6, "::1", "::2", 1, 2)));
        assert!(!Rules::parse("", "x")
            .unwrap()
            .allows(&key(6, "1.2.3.4", "5.6.7.8", 1, 2)));
    }

    #[test]
    fn a_malformed_rule_names_its_line() {
        let cases = [
            (
                "allow tcp dport 80\ndeny tcp\n",
                2,
                "\"deny\": a rule starts with \"allow\"",
            ),
            ("allow\n", 1, "\"allow\" needs a protocol"),
            ("allow tcp dport\n", 1, "\"dport\" needs a value"),
            ("allow tcp dport 70000\n", 1, "\"70000\" is not a port"),
            (
                "allow tcp dport 90-80\n",
                1,
                "port range 90-80 runs backwards",
            ),
            (
                "#\nallow udp src 10.0.0.0/33\n",
                2,
                "\"33\" is not a prefix length",
            ),
            ("allow icmp dport 1\n", 1, "dport needs protocol tcp or udp"),
            (
                "allow tcp src 1.2.3.4 src 1.2.3.5\n",
                1,
                "\"src\" given twice",
            ),
            ("allow tcp port 1\n", 1, "unknown field \"port\""),
            ("allow sctp\n", 1, "\"sctp\" is not a protocol"),
            (
                "allow tcp src ::1 dst 1.2.3.4\n",
                1,
                "different IP families",
            ),
            ("allow tcp src foo\n", 1, "\"foo\" is not an IP address"),
        ];
        for (text, line, message) in cases {
            let e = Rules::parse(text, "fw.rules").unwrap_err();
            assert_eq!(e.line, line, "{text}");
            assert!(e.message.contains(message), "{text}: {}", e.message);
            assert!(e.to_string().starts_with(&format!("fw.rules:{line}: ")));
        }
    }
}
