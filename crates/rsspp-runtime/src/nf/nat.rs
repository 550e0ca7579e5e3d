//! `nat`: source NAT of IPv4 TCP and UDP to an address pool, RSS++ style.
//!
//! A packet that is not addressed to the pool is translated: its source
//! becomes a pool address and port (the connection's [`Mapping`], chosen on
//! its first packet). A packet addressed to the pool is a reply: it is
//! translated back if it belongs to a mapping, dropped otherwise (reason
//! `nat`), as is any packet the NAT cannot translate (IPv6, protocols other
//! than TCP and UDP, fragments).
//!
//! The reply of a translated connection is another flow (`S:s → P:p`
//! instead of `S:s → A:a`), with another Toeplitz hash, so in general
//! another RSS bucket than the connection's origin — and with per-bucket
//! flow tables the reply would look for its mapping in a table the origin's
//! worker never wrote. The NAT therefore chooses the port `p` so that the
//! reply's hash falls in the origin's bucket ([`PortChoice::SameBucket`]):
//! both directions meet the same per-bucket table, which holds the
//! connection (in the origin's entry) and the reply's link to it (in the
//! reply's entry), and both move together with the bucket. Toeplitz is
//! linear over GF(2), so `hash(S,P,s,p) = hash(S,P,s,0) ^ hash(0,0,0,p)`:
//! one table of the 65 536 port terms makes each candidate a XOR. The same
//! table tells whether a port is in use: a candidate's reply flow belongs
//! to the origin's bucket, so its entry, if any, is in the same table.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use rsspp_core::flow::proto;
use rsspp_core::{bucket_of, FlowKey, Toeplitz};

use super::conntrack::{self, Connection, Dir, Found, Link, Linked, Timeouts};
use super::headers::{rewrite_v4, End, Ip};
use super::{Flows, Packet, Verdict};

/// The reason the NAT drops under.
pub const DROP: &str = "nat";

/// Lowest translated port.
pub const FIRST_PORT: u16 = 1024;

/// A connection's translated source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Pool address.
    pub addr: Ipv4Addr,
    /// Port.
    pub port: u16,
}

/// How the NAT chooses translated ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortChoice {
    /// So that the reply lands in the origin's bucket (RSS++).
    SameBucket,
    /// The first free port from a per-connection start, whatever bucket
    /// its reply lands in: what a NAT unaware of the steering does; with
    /// per-bucket tables most replies then miss their mapping (to show what
    /// the choice is for).
    Any,
}

/// The addresses of `--nat-pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    first: u32,
    len: u32,
}

impl Pool {
    /// Parses `A.B.C.D[/LEN]` (LEN 16 to 32): every address of the prefix.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, l) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
        let len: u32 = match l.parse() {
            Ok(n) if (16..=32).contains(&n) => n,
            _ => return Err(format!("{l:?} is not a prefix length from 16 to 32")),
        };
        let size = 1u32 << (32 - len);
        Ok(Self {
            first: u32::from(addr) & !(size - 1),
            len: size,
        })
    }

    /// True when `a` is a pool address.
    pub fn contains(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(a) => u32::from(a).wrapping_sub(self.first) < self.len,
            IpAddr::V6(_) => false,
        }
    }

    /// Number of addresses.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Never empty; for clippy.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn get(&self, i: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.first + i % self.len)
    }
}

/// The NAT; see the module docs.
#[derive(Debug, Clone)]
pub struct Nat {
    pool: Pool,
    choice: PortChoice,
    buckets: usize,
    /// `hash(0.0.0.0, 0.0.0.0, 0, p)` for every port `p`.
    port_terms: Arc<[u32]>,
    /// The connections' timeouts.
    pub timeouts: Timeouts,
}

/// What a candidate port's reply entry says.
enum Claim {
    Taken,
    Busy,
    Unreachable,
}

impl Nat {
    /// A NAT to `pool`, for a runtime of `buckets` buckets hashing with
    /// `toeplitz`.
    pub fn new(pool: Pool, choice: PortChoice, buckets: usize, toeplitz: &Toeplitz) -> Self {
        let port_terms = (0..=u16::MAX)
            .map(|p| toeplitz.hash_ipv4([0; 4], [0; 4], 0, p))
            .collect();
        Self {
            pool,
            choice,
            buckets,
            port_terms,
            timeouts: Timeouts::default(),
        }
    }

    /// Its pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The Toeplitz hash of the reply to a connection of `origin` (IPv4,
    /// with ports) translated to `m`.
    pub fn reply_hash(&self, toeplitz: &Toeplitz, origin: &FlowKey, m: Mapping) -> u32 {
        let (_, dport) = origin.ports.unwrap_or((0, 0));
        let server = match origin.dst {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => [0; 4],
        };
        toeplitz.hash_ipv4(server, m.addr.octets(), dport, 0) ^ self.port_terms[usize::from(m.port)]
    }

    /// Chooses the mapping of a new connection opened by `origin` (hash
    /// `hash`) and stores the reply's link to it; `None` when every port
    /// is taken.
    fn allocate<S: Linked, F: Flows<S>>(
        &self,
        flows: &mut F,
        toeplitz: &Toeplitz,
        origin: &FlowKey,
        hash: u32,
        now: u64,
        init: &impl Fn() -> S,
    ) -> Option<Mapping> {
        let (IpAddr::V4(client), IpAddr::V4(server), Some((_, dport))) =
            (origin.src, origin.dst, origin.ports)
        else {
            return None;
        };
        let target = bucket_of(hash, self.buckets);
        let span = u32::from(u16::MAX - FIRST_PORT) + 1;
        // A start of its own for each connection (the hash mixed: the
        // symmetric key's hashes repeat their halves).
        let start = (hash.wrapping_mul(0x9e37_79b1) >> 8) % span;
        let first_addr = u32::from(client);
        for a in 0..self.pool.len() {
            let addr = self.pool.get(first_addr.wrapping_add(a));
            let base = toeplitz.hash_ipv4(server.octets(), addr.octets(), dport, 0);
            for i in 0..span {
                let port = FIRST_PORT + ((start + i) % span) as u16;
                let rh = base ^ self.port_terms[usize::from(port)];
                if self.choice == PortChoice::SameBucket && bucket_of(rh, self.buckets) != target {
                    continue;
                }
                let m = Mapping { addr, port };
                let reply = FlowKey {
                    src: origin.dst,
                    dst: IpAddr::V4(addr),
                    ports: Some((dport, port)),
                    protocol: origin.protocol,
                };
                match self.claim(flows, &reply, rh, origin, hash, m, now, init) {
                    Claim::Taken => return Some(m),
                    // Only with PortChoice::Any: the reply's entry belongs
                    // to another bucket's table, which this worker cannot
                    // reach; the mapping goes unrecorded there.
                    Claim::Unreachable => return Some(m),
                    Claim::Busy => {}
                }
            }
        }
        None
    }

    /// Takes the reply flow `reply` for the connection of `origin` if no
    /// live connection uses it.
    #[allow(clippy::too_many_arguments)]
    fn claim<S: Linked, F: Flows<S>>(
        &self,
        flows: &mut F,
        reply: &FlowKey,
        rh: u32,
        origin: &FlowKey,
        oh: u32,
        m: Mapping,
        now: u64,
        init: &impl Fn() -> S,
    ) -> Claim {
        let Some(seen) = flows.with_table(rh, |t| t.get(reply, rh).map(|s| *s.link())) else {
            return Claim::Unreachable;
        };
        let free = match seen {
            None | Some(Link::None) => true,
            Some(Link::Origin(c)) => c.expired(now, &self.timeouts),
            Some(Link::Reply { origin: o, hash: h }) => {
                // Free unless its connection is alive and still mapped here.
                let mut live = false;
                flows.with_table(h, |t| {
                    if let Some(Link::Origin(c)) = t.get(&o, h).map(|s| *s.link()) {
                        live = !c.expired(now, &self.timeouts) && c.nat == Some(m);
                    }
                });
                !live
            }
        };
        if !free {
            return Claim::Busy;
        }
        let link = Link::Reply {
            origin: *origin,
            hash: oh,
        };
        // Taken only if nobody changed the entry meanwhile (other workers
        // share the table under --table shared).
        let taken = flows.with_table(rh, |t| {
            if t.get(reply, rh).map(|s| *s.link()) != seen {
                return false;
            }
            match t.get_mut(reply, rh, now) {
                Some(s) => *s.link_mut() = link,
                None => {
                    let mut s = init();
                    *s.link_mut() = link;
                    t.insert(*reply, rh, now, s);
                }
            }
            true
        });
        if taken == Some(true) {
            Claim::Taken
        } else {
            Claim::Busy
        }
    }

    /// Translates a packet. `found` is its connection as the chain found
    /// it (or as the firewall opened it), `tracked` whether the firewall
    /// already advanced the connection's state for this packet.
    #[allow(clippy::too_many_arguments)]
    pub fn process<S: Linked, F: Flows<S>>(
        &self,
        packet: &mut Packet<'_>,
        ip: Option<&Ip>,
        flows: &mut F,
        toeplitz: &Toeplitz,
        found: &mut Option<Found>,
        tracked: bool,
        init: impl Fn() -> S,
    ) -> Verdict {
        let key = packet.key;
        let now = packet.timestamp_ns;
        let Some(ip) = ip.filter(|ip| {
            !ip.v6
                && matches!(ip.proto, proto::TCP | proto::UDP)
                && key.ports.is_some()
                && ip.l4_checksum_at().is_some()
        }) else {
            return Verdict::Drop(DROP);
        };
        let flags = ip.tcp_flags(packet.data);
        if self.pool.contains(key.dst) {
            // A reply: translated back if it is its mapping's.
            let Some(f) = *found else {
                return Verdict::Drop(DROP);
            };
            let (Some(m), Dir::Reply, IpAddr::V4(client), Some((cport, _))) =
                (f.conn.nat, f.dir, f.origin.src, f.origin.ports)
            else {
                return Verdict::Drop(DROP);
            };
            if key.dst != IpAddr::V4(m.addr) || key.ports.map(|p| p.1) != Some(m.port) {
                return Verdict::Drop(DROP);
            }
            if !tracked {
                conntrack::with_connection(flows, &f.origin, f.hash, now, |c| {
                    c.update(Dir::Reply, flags, now)
                });
            }
            rewrite_v4(packet.data, ip, End::Destination, client, cport);
            return Verdict::Forward;
        }
        let f = match *found {
            Some(f) if f.dir == Dir::Origin => f,
            // The reply direction of a connection that is not translated.
            Some(_) => return Verdict::Drop(DROP),
            None => {
                // No firewall before: the NAT tracks the connection.
                let conn = Connection::open(key.protocol, flags, now);
                let stored = flows
                    .with_table(packet.hash, |t| {
                        t.get_or_insert_with(&key, packet.hash, now, &init)
                            .state()
                            .map(|s| *s.link_mut() = Link::Origin(conn))
                            .is_some()
                    })
                    .unwrap_or(false);
                if !stored {
                    return Verdict::Drop(DROP);
                }
                let f = Found {
                    origin: key,
                    hash: packet.hash,
                    dir: Dir::Origin,
                    conn,
                };
                *found = Some(f);
                f
            }
        };
        let m = match f.conn.nat {
            Some(m) => m,
            None => {
                let Some(m) = self.allocate(flows, toeplitz, &f.origin, f.hash, now, &init) else {
                    return Verdict::Drop(DROP);
                };
                conntrack::with_connection(flows, &f.origin, f.hash, now, |c| c.nat = Some(m));
                if let Some(f) = found.as_mut() {
                    f.conn.nat = Some(m);
                }
                m
            }
        };
        if !tracked {
            conntrack::with_connection(flows, &f.origin, f.hash, now, |c| {
                c.update(Dir::Origin, flags, now)
            });
        }
        rewrite_v4(packet.data, ip, End::Source, m.addr, m.port);
        Verdict::Forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsspp_core::RssKey;

    #[test]
    fn the_pool_parses_prefixes() {
        let p = Pool::parse("192.0.2.1/30").unwrap();
        assert_eq!(p.len(), 4);
        assert!(p.contains("192.0.2.0".parse().unwrap()));
        assert!(p.contains("192.0.2.3".parse().unwrap()));
        assert!(!p.contains("192.0.2.4".parse().unwrap()));
        assert!(!p.contains("::1".parse().unwrap()));
        assert_eq!(Pool::parse("10.0.0.1").unwrap().len(), 1);
        assert!(Pool::parse("10.0.0.0/8").is_err());
        assert!(Pool::parse("10.0.0/24").is_err());
        assert!(Pool::parse("2001:db8::/64").is_err());
    }

    #[test]
    fn port_terms_make_the_reply_hash_by_linearity() {
        for key in [RssKey::microsoft(), RssKey::symmetric()] {
            let t = Toeplitz::new(key);
            let nat = Nat::new(
                Pool::parse("192.0.2.0/30").unwrap(),
                PortChoice::SameBucket,
                128,
                &t,
            );
            let mut rng = rsspp_core::rand::SplitMix64::new(3);
            for _ in 0..1000 {
                let r = rng.next_u64();
                let origin = FlowKey::new(
                    IpAddr::V4(Ipv4Addr::from(r as u32)),
                    IpAddr::V4(Ipv4Addr::from((r >> 32) as u32)),
                    (r >> 3) as u16,
                    (r >> 17) as u16,
                    6,
                )
                .unwrap();
                let m = Mapping {
                    addr: nat.pool.get(r as u32 >> 5),
                    port: (r >> 40) as u16,
                };
                let reply = FlowKey::new(
                    origin.dst,
                    IpAddr::V4(m.addr),
                    origin.ports.unwrap().1,
                    m.port,
                    6,
                )
                .unwrap();
                assert_eq!(nat.reply_hash(&t, &origin, m), t.hash_flow(&reply));
            }
        }
    }
}
