//! Connection tracking, shared by `firewall` and `nat`: one [`Connection`]
//! per connection, kept in the flow-table entry of the direction that
//! opened it (its *origin*); the entry of the reply direction's flow, when
//! it is not simply the origin reversed (a NAT's translated reply), holds a
//! [`Link::Reply`] pointing back to the origin.
//!
//! Both directions of a connection must meet the same per-bucket table:
//! the origin reversed has the same Toeplitz hash under a symmetric key
//! (what `rsspp nf` uses when the chain tracks connections), and the NAT
//! chooses its translated ports so that the reply's hash falls in the
//! origin's bucket.

use rsspp_core::flow::proto;
use rsspp_core::{FlowKey, Toeplitz};

use super::headers::tcp;
use super::nat::Mapping;
use super::Flows;

const SECOND: u64 = 1_000_000_000;

/// How long a connection may stay idle in each state, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP: the origin's SYN seen, no answer yet.
    pub tcp_syn_sent: u64,
    /// TCP: the reply's SYN-ACK seen.
    pub tcp_syn_recv: u64,
    /// TCP: the handshake done.
    pub tcp_established: u64,
    /// TCP: a FIN seen in one direction or both.
    pub tcp_closing: u64,
    /// TCP: reset.
    pub tcp_closed: u64,
    /// UDP and other protocols: only the origin's direction seen.
    pub unreplied: u64,
    /// UDP and other protocols: both directions seen.
    pub replied: u64,
}

impl Default for Timeouts {
    /// Linux conntrack's defaults: 120 s, 60 s, 5 days, 120 s, 10 s; UDP
    /// 30 s unreplied, 120 s replied.
    fn default() -> Self {
        Self {
            tcp_syn_sent: 120 * SECOND,
            tcp_syn_recv: 60 * SECOND,
            tcp_established: 5 * 24 * 3600 * SECOND,
            tcp_closing: 120 * SECOND,
            tcp_closed: 10 * SECOND,
            unreplied: 30 * SECOND,
            replied: 120 * SECOND,
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// TCP: SYN from the origin.
    SynSent,
    /// TCP: SYN-ACK from the reply side.
    SynRecv,
    /// TCP: the origin's ACK after the SYN-ACK (or a connection picked up
    /// mid-stream by a `nat` without a firewall).
    Established,
    /// TCP: FIN seen; `origin`/`reply`: from which side(s).
    Closing {
        /// The origin sent a FIN.
        origin: bool,
        /// The reply side sent a FIN.
        reply: bool,
    },
    /// TCP: reset.
    Closed,
    /// UDP and others: the origin's direction only.
    Unreplied,
    /// UDP and others: both directions seen.
    Replied,
}

/// Which direction of its connection a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// As the packet that opened the connection.
    Origin,
    /// The other way.
    Reply,
}

/// One tracked connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// Its state.
    pub state: State,
    /// Its last packet's timestamp.
    pub last_ns: u64,
    /// Its NAT mapping (with `nat` in the chain).
    pub nat: Option<Mapping>,
}

/// True when a packet of protocol `protocol` with TCP flags `flags` may
/// open a connection: a TCP SYN without ACK, anything of another protocol.
pub fn opens(protocol: u8, flags: Option<u8>) -> bool {
    match (protocol, flags) {
        (proto::TCP, Some(f)) => f & (tcp::SYN | tcp::ACK | tcp::RST | tcp::FIN) == tcp::SYN,
        (proto::TCP, None) => false,
        _ => true,
    }
}

impl Connection {
    /// The connection a packet opens at `now`: a TCP SYN starts the
    /// handshake, another TCP packet is taken as mid-stream (established),
    /// other protocols start unreplied.
    pub fn open(protocol: u8, flags: Option<u8>, now: u64) -> Self {
        let state = match (protocol, flags) {
            (proto::TCP, Some(f)) if f & (tcp::SYN | tcp::ACK) == tcp::SYN => State::SynSent,
            (proto::TCP, _) => State::Established,
            _ => State::Unreplied,
        };
        Self {
            state,
            last_ns: now,
            nat: None,
        }
    }

    /// How long it may stay idle in its state.
    pub fn timeout(&self, t: &Timeouts) -> u64 {
        match self.state {
            State::SynSent => t.tcp_syn_sent,
            State::SynRecv => t.tcp_syn_recv,
            State::Established => t.tcp_established,
            State::Closing { .. } => t.tcp_closing,
            State::Closed => t.tcp_closed,
            State::Unreplied => t.unreplied,
            State::Replied => t.replied,
        }
    }

    /// True when idle past its state's timeout at `now`: it is over, and
    /// its NAT mapping free.
    pub fn expired(&self, now: u64, t: &Timeouts) -> bool {
        now.saturating_sub(self.last_ns) > self.timeout(t)
    }

    /// Advances the state with a packet going `dir` with TCP flags `flags`
    /// (`None`: not TCP) at `now`.
    pub fn update(&mut self, dir: Dir, flags: Option<u8>, now: u64) {
        self.last_ns = self.last_ns.max(now);
        let Some(f) = flags else {
            if dir == Dir::Reply && self.state == State::Unreplied {
                self.state = State::Replied;
            }
            return;
        };
        if f & tcp::RST != 0 {
            self.state = State::Closed;
            return;
        }
        let syn = f & tcp::SYN != 0;
        let ack = f & tcp::ACK != 0;
        let fin = f & tcp::FIN != 0;
        self.state = match (self.state, dir) {
            // A new SYN from the origin after the end: the connection again.
            (State::Closed | State::Closing { .. }, Dir::Origin) if syn && !ack => State::SynSent,
            (State::SynSent, Dir::Reply) if syn && ack => State::SynRecv,
            (State::SynRecv, Dir::Origin) if ack && !syn => State::Established,
            (s, _) if fin => {
                let (mut o, mut r) = match s {
                    State::Closing { origin, reply } => (origin, reply),
                    _ => (false, false),
                };
                match dir {
                    Dir::Origin => o = true,
                    Dir::Reply => r = true,
                }
                State::Closing {
                    origin: o,
                    reply: r,
                }
            }
            (s, _) => s,
        };
    }
}

/// What an entry says about connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Link {
    /// Nothing: the flow opened no connection (or the chain tracks none).
    #[default]
    None,
    /// The flow opened this connection.
    Origin(Connection),
    /// The flow is the reply direction of the connection `origin` opened
    /// (stored by the NAT for the translated reply).
    Reply {
        /// The origin's flow.
        origin: FlowKey,
        /// Its Toeplitz hash.
        hash: u32,
    },
}

/// A live connection found for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The origin's flow, where the connection is stored.
    pub origin: FlowKey,
    /// Its hash.
    pub hash: u32,
    /// The packet's direction.
    pub dir: Dir,
    /// The connection as it was found.
    pub conn: Connection,
}

/// A flow state that can carry a [`Link`].
pub trait Linked {
    /// Its link.
    fn link(&self) -> &Link;
    /// Its link, to change.
    fn link_mut(&mut self) -> &mut Link;
}

/// The live connection stored in the entry of `key`, if that entry is the
/// connection's origin.
fn origin_at<S: Linked, F: Flows<S>>(
    flows: &mut F,
    key: &FlowKey,
    hash: u32,
    now: u64,
    t: &Timeouts,
) -> Option<Connection> {
    flows
        .with_table(hash, |table| {
            match table.get_mut(key, hash, now).map(|s| *s.link()) {
                Some(Link::Origin(c)) if !c.expired(now, t) => Some(c),
                _ => None,
            }
        })
        .flatten()
}

/// The live connection a packet of flow `key` (hash `hash`) belongs to:
/// the flow is its origin, or links to it, or is its origin reversed (the
/// reversed flow's hash from `toeplitz`, equal to `hash` under a symmetric
/// key), or is the origin's translated flow whose reply links to it. A
/// reply is not recognised on the origin reversed when the connection is
/// translated: its replies go to the NAT's address.
pub fn find<S: Linked, F: Flows<S>>(
    flows: &mut F,
    toeplitz: &Toeplitz,
    key: &FlowKey,
    hash: u32,
    now: u64,
    t: &Timeouts,
) -> Option<Found> {
    let own = flows
        .with_table(hash, |table| {
            table.get_mut(key, hash, now).map(|s| *s.link())
        })
        .flatten();
    match own {
        Some(Link::Origin(conn)) if !conn.expired(now, t) => {
            return Some(Found {
                origin: *key,
                hash,
                dir: Dir::Origin,
                conn,
            })
        }
        Some(Link::Reply { origin, hash: oh }) => {
            if let Some(conn) = origin_at(flows, &origin, oh, now, t) {
                return Some(Found {
                    origin,
                    hash: oh,
                    dir: Dir::Reply,
                    conn,
                });
            }
        }
        _ => {}
    }
    let rev = key.reversed();
    let rh = toeplitz.hash_flow(&rev);
    let other = flows
        .with_table(rh, |table| table.get_mut(&rev, rh, now).map(|s| *s.link()))
        .flatten();
    match other {
        Some(Link::Origin(conn)) if !conn.expired(now, t) && conn.nat.is_none() => Some(Found {
            origin: rev,
            hash: rh,
            dir: Dir::Reply,
            conn,
        }),
        Some(Link::Reply { origin, hash: oh }) => {
            origin_at(flows, &origin, oh, now, t).map(|conn| Found {
                origin,
                hash: oh,
                dir: Dir::Origin,
                conn,
            })
        }
        _ => None,
    }
}

/// Applies `f` to the connection stored at its origin `key`; false when it
/// is no longer there.
pub fn with_connection<S: Linked, F: Flows<S>>(
    flows: &mut F,
    key: &FlowKey,
    hash: u32,
    now: u64,
    f: impl FnOnce(&mut Connection),
) -> bool {
    flows
        .with_table(hash, |table| {
            match table.get_mut(key, hash, now).map(|s| s.link_mut()) {
                Some(Link::Origin(c)) => {
                    f(c);
                    true
                }
                _ => false,
            }
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = SECOND;

    #[test]
    fn tcp_goes_through_the_handshake_and_closes() {
        let t = Timeouts::default();
        assert!(opens(proto::TCP, Some(tcp::SYN)));
        assert!(!opens(proto::TCP, Some(tcp::SYN | tcp::ACK)));
        assert!(!opens(proto::TCP, Some(tcp::ACK)));
        assert!(!opens(proto::TCP, None));
        assert!(opens(proto::UDP, None));
        let mut c = Connection::open(proto::TCP, Some(tcp::SYN), 0);
        assert_eq!(c.state, State::SynSent);
        // An ACK from the reply side before the SYN-ACK changes nothing.
        c.update(Dir::Reply, Some(tcp::ACK), S);
        assert_eq!(c.state, State::SynSent);
        c.update(Dir::Reply, Some(tcp::SYN | tcp::ACK), S);
        assert_eq!(c.state, State::SynRecv);
        c.update(Dir::Origin, Some(tcp::ACK), 2 * S);
        assert_eq!(c.state, State::Established);
        assert_eq!(c.timeout(&t), t.tcp_established);
        c.update(Dir::Reply, Some(tcp::FIN | tcp::ACK), 3 * S);
        assert_eq!(
            c.state,
            State::Closing {
                origin: false,
                reply: true
            }
        );
        c.update(Dir::Origin, Some(tcp::FIN | tcp::ACK), 4 * S);
        assert_eq!(
            c.state,
            State::Closing {
                origin: true,
                reply: true
            }
        );
        assert!(!c.expired(4 * S + t.tcp_closing, &t));
        assert!(c.expired(4 * S + t.tcp_closing + 1, &t));
        // A RST closes from any state; a new SYN reopens.
        c.update(Dir::Reply, Some(tcp::RST), 5 * S);
        assert_eq!(c.state, State::Closed);
        assert!(c.expired(5 * S + t.tcp_closed + 1, &t));
        c.update(Dir::Origin, Some(tcp::SYN), 6 * S);
        assert_eq!(c.state, State::SynSent);
    }

    #[test]
    fn udp_is_replied_once_the_reply_direction_is_seen() {
        let t = Timeouts::default();
        let mut c = Connection::open(proto::UDP, None, 0);
        assert_eq!(c.state, State::Unreplied);
        c.update(Dir::Origin, None, S);
        assert_eq!(c.state, State::Unreplied);
        assert!(c.expired(S + t.unreplied + 1, &t));
        c.update(Dir::Reply, None, 2 * S);
        assert_eq!(c.state, State::Replied);
        assert!(!c.expired(2 * S + t.unreplied + 1, &t));
        assert!(c.expired(2 * S + t.replied + 1, &t));
    }
}
