//! `short-connections`: many short TCP connections to one web server, as
//! the server's NIC receives them (client → server packets only).
//!
//! Each connection opens with a SYN, completes the handshake with an ACK
//! one round trip later, sends one to three requests (each followed, once
//! the response came back, by the client's ACK of it) and closes with a
//! FIN: 3 + 2 × requests packets, 7 on average. Connections arrive as a
//! Poisson process at the configured rate; round-trip times are
//! log-uniform between 20 µs and 2 ms, so a connection lasts from about a
//! hundred microseconds to a few milliseconds. The trace starts empty: every
//! connection in it opens with its SYN.
//!
//! The service time a server spends on a connection is not in the trace:
//! the simulator's cost model skews it per flow (`--work-skew`).

use rsspp_core::rand::SplitMix64;

use super::GenPacket;
use crate::record::tcp_flags::{ACK, FIN, PSH, SYN};

/// New connections per second at speed 1 unless configured.
pub(crate) const DEFAULT_RATE: f64 = 100_000.0;
/// Packets per connection on average: SYN, handshake ACK, two per request
/// (one to three requests, uniform), FIN.
pub(crate) const MEAN_PACKETS: f64 = 7.0;
/// The most new connections per second a trace may ask for.
pub(crate) const MAX_RATE: f64 = 100_000_000.0;

const NS: f64 = 1e9;
/// The server: 198.18.0.1:80 (the benchmarking range).
const SERVER: u32 = 0xc612_0001;
const SERVER_PORT: u16 = 80;
/// Headers of a TCP frame without options (Ethernet, IPv4, TCP).
const TCP_HEADERS: u16 = 54;

#[derive(Debug, Clone)]
struct Connection {
    rng: SplitMix64,
    src: u32,
    sport: u16,
    /// Trace time of the next packet, ns.
    next_ns: f64,
    /// Packets sent so far, and in all.
    sent: u8,
    total: u8,
    rtt_ns: f64,
    seq: u32,
}

/// Connections arriving and running, window by window.
#[derive(Debug)]
pub(crate) struct Connections {
    /// New connections per second of trace time.
    rate: f64,
    seed: u64,
    rng: SplitMix64,
    next_arrival_ns: f64,
    spawned: u64,
    live: Vec<Connection>,
}

/// A uniform value in `[lo, hi)`.
fn uniform(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.next_f64()
}

impl Connections {
    /// `rate` new connections per second (positive, at most [`MAX_RATE`]).
    pub fn new(rate: f64, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let first = -(1.0 - rng.next_f64()).ln() * NS / rate;
        Self {
            rate,
            seed,
            rng,
            next_arrival_ns: first,
            spawned: 0,
            live: Vec::new(),
        }
    }

    fn spawn(&mut self, t_ns: f64) -> Connection {
        self.spawned += 1;
        // Each connection draws from its own stream: its packets do not
        // depend on how the trace is cut into windows.
        let mut rng = SplitMix64::new(self.seed ^ self.spawned.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let r = rng.next_u64();
        let requests = 1 + (r % 3) as u8;
        Connection {
            src: (10 << 24) | ((r >> 8) as u32 & 0x00ff_ffff),
            sport: 1024 + ((r >> 32) % 64_512) as u16,
            next_ns: t_ns,
            sent: 0,
            total: 3 + 2 * requests,
            // Log-uniform over two decades.
            rtt_ns: 20_000.0 * 100f64.powf(rng.next_f64()),
            seq: (r >> 40) as u32 ^ rng.next_u64() as u32,
            rng,
        }
    }

    /// Emits `c`'s packets before `until_ns` into `out`.
    fn emit(c: &mut Connection, until_ns: f64, out: &mut Vec<GenPacket>) {
        while c.sent < c.total && c.next_ns < until_ns {
            let i = c.sent;
            let last = i + 1 == c.total;
            // Packet i: 0 SYN, 1 handshake ACK, then request / ACK of its
            // response pairs, and the FIN last.
            let (flags, wire) = if i == 0 {
                (SYN, 60)
            } else if last {
                (FIN | ACK, 60)
            } else if i % 2 == 0 {
                (PSH | ACK, 100 + (c.rng.next_u64() % 600) as u16)
            } else {
                (ACK, 60)
            };
            out.push(GenPacket {
                timestamp_ns: c.next_ns as u64,
                src: c.src,
                dst: SERVER,
                sport: c.sport,
                dport: SERVER_PORT,
                protocol: 6,
                tcp_flags: flags,
                wire_len: wire,
                seq: c.seq,
            });
            c.seq = c.seq.wrapping_add(if flags & (SYN | FIN) != 0 {
                1
            } else {
                u32::from(wire.saturating_sub(TCP_HEADERS))
            });
            c.sent += 1;
            // The gap before the next packet: the SYN-ACK's round trip, the
            // client's think time before a request or the FIN, or a round
            // trip plus the server's response time before the ACK of a
            // response.
            let next = i + 1;
            let gap = if i == 0 {
                c.rtt_ns
            } else if next % 2 == 0 {
                // A request, or the FIN (the last packet has an even index).
                uniform(&mut c.rng, 5_000.0, 50_000.0)
            } else {
                c.rtt_ns + uniform(&mut c.rng, 20_000.0, 500_000.0)
            };
            c.next_ns += gap;
        }
    }

    /// Produces the packets up to `until_ns` (trace time), unsorted.
    pub fn window(&mut self, until_ns: f64, out: &mut Vec<GenPacket>) {
        while self.next_arrival_ns < until_ns {
            let t = self.next_arrival_ns;
            let c = self.spawn(t);
            self.live.push(c);
            self.next_arrival_ns = t - (1.0 - self.rng.next_f64()).ln() * NS / self.rate;
        }
        let mut i = 0;
        while i < self.live.len() {
            let c = &mut self.live[i];
            Self::emit(c, until_ns, out);
            if c.sent == c.total {
                self.live.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Connections open now.
    pub fn live_flows(&self) -> usize {
        self.live.len()
    }
}
