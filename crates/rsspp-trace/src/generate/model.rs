//! The traffic model behind every preset: a population of "body" flows that
//! arrive as a Poisson process with sizes drawn from an empirical flow-size
//! distribution, plus a fixed set of long-lived heavy flows that carry the
//! rest of the packet rate. Each flow keeps its own random stream and
//! schedule, so a window of traffic is produced from the live flows only.
//!
//! A flow sends its packets in trains ([`Trains`]): a few packets whose
//! gaps spread over decades, from frames back to back on a fast link to the
//! spacing of a slow bottleneck or a pacer, then a longer pause that gives
//! the flow its rate. How many packets of one flow a receiver sees back to
//! back (Reframer's spatial locality factor) follows from these gaps and
//! from the rate of the traffic the flow is mixed with.

use rsspp_core::rand::SplitMix64;

use super::dist::EmpiricalCdf;
use super::GenPacket;
use crate::record::tcp_flags::{ACK, FIN, PSH, SYN};

const NS: f64 = 1e9;

/// How packet sizes are chosen.
#[derive(Debug, Clone)]
pub(crate) enum FrameModel {
    /// From an empirical CDF; flows are either "small-frame" flows (ACK
    /// streams, the part of the CDF below `small_quantile`) or "data" flows
    /// (the rest), and `small_share` of the packets come from the former.
    Empirical {
        cdf: EmpiricalCdf,
        small_quantile: f64,
    },
    /// Every frame the same size.
    Fixed(u16),
}

/// Timing of the heavy flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum HeavyTiming {
    /// TCP-like: trains (the model's [`Trains`]) spaced to give the flow's
    /// rate, the rate redrawn each second within ±`wobble`.
    Trains { wobble: f64 },
    /// Constant spacing (UDP test traffic).
    Constant,
}

/// How a flow's packets group into trains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trains {
    /// Mean packets in a train (geometric) of a heavy flow; a body flow of
    /// n packets has trains of n / 8, between 1 and this.
    pub packets: f64,
    /// Gap between two packets of a train, ns: log-uniform between these
    /// two, the upper bound lowered to the flow's mean spacing.
    pub gap_ns: (f64, f64),
}

impl Trains {
    /// The gap range of a flow whose packets are `spacing_ns` apart on
    /// average (a train cannot be slower than its flow).
    fn gaps_for(&self, spacing_ns: f64) -> (f64, f64) {
        let (lo, hi) = self.gap_ns;
        (lo, hi.min(spacing_ns).max(lo))
    }
}

/// Mean of the log-uniform distribution on `[lo, hi]`.
fn log_uniform_mean((lo, hi): (f64, f64)) -> f64 {
    if hi <= lo {
        lo
    } else {
        (hi - lo) / (hi / lo).ln()
    }
}

fn log_uniform(rng: &mut SplitMix64, (lo, hi): (f64, f64)) -> f64 {
    (lo.ln() + rng.next_f64() * (hi / lo).ln()).exp()
}

/// Everything that defines one traffic source.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    /// Body-flow arrival rate, flows per second.
    pub arrivals: f64,
    /// Body flow sizes in packets.
    pub body_sizes: EmpiricalCdf,
    /// Share of multi-packet body flows that are TCP (the rest UDP).
    pub tcp_share: f64,
    /// Share of single-packet body flows that are TCP (SYNs of scans and
    /// unanswered connections; the rest UDP).
    pub single_tcp_share: f64,
    /// Body-flow duration: `duration_median_s` × sqrt(size) seconds, times
    /// a log-normal factor of spread `duration_sigma`, at most `duration_max_s`.
    pub duration_median_s: f64,
    pub duration_sigma: f64,
    pub duration_max_s: f64,
    /// Target packet rate of the whole source.
    pub pps: f64,
    /// Heavy flows: count and the rate of the largest (the others follow a
    /// Zipf law fitted so the heavy flows carry what the body does not).
    pub heavy_count: usize,
    pub heavy_top_pps: Option<f64>,
    pub heavy_protocol_udp_every: Option<usize>,
    pub heavy_timing: HeavyTiming,
    /// Trains of the heavy (when `HeavyTiming::Trains`) and body flows.
    pub trains: Trains,
    pub frames: FrameModel,
    /// Share of frames from the small part of the frame CDF.
    pub small_frame_share: f64,
    /// Address space index: sources built with different indices never
    /// share an address (campus4's rewritten windows).
    pub address_space: u8,
}

#[derive(Debug, Clone, Copy)]
struct Endpoints {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    protocol: u8,
}

#[derive(Debug, Clone)]
struct Flow {
    rng: SplitMix64,
    ends: Endpoints,
    /// Next packet time, ns of trace time.
    next_ns: f64,
    /// Packets still to send (`u64::MAX`: runs past the end of the trace).
    remaining: u64,
    sent: u64,
    burst_left: u32,
    burst_mean: f64,
    /// Range of the gaps within a train (log-uniform), ns.
    intra_gap_ns: (f64, f64),
    inter_gap_ns: f64,
    /// Heavy flows: rate multiplier and the second it applies to.
    wobble: f64,
    wobble_second: i64,
    heavy_timing: Option<HeavyTiming>,
    small_frames: bool,
    tcp: bool,
    seq: u32,
}

/// One traffic source producing packets window by window.
#[derive(Debug)]
pub(crate) struct Engine {
    model: Model,
    rng: SplitMix64,
    seed: u64,
    next_arrival_ns: f64,
    flows_spawned: u64,
    live: Vec<Flow>,
    heavy_rates: Vec<f64>,
    small_share_body: f64,
}

fn exp_sample(rng: &mut SplitMix64, mean: f64) -> f64 {
    -mean * (1.0 - rng.next_f64()).ln()
}

fn geometric(rng: &mut SplitMix64, mean: f64) -> u32 {
    if mean <= 1.0 {
        return 1;
    }
    let p = 1.0 / mean;
    let u = 1.0 - rng.next_f64();
    (1.0 + (u.ln() / (1.0 - p).ln()).floor()).min(1e6) as u32
}

fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = 1.0 - rng.next_f64();
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Zipf exponent `s` with `top * sum_{i=1..n} i^-s = total` (bisection).
fn zipf_exponent(n: usize, top: f64, total: f64) -> f64 {
    let sum = |s: f64| (1..=n).map(|i| (i as f64).powf(-s)).sum::<f64>() * top;
    let (mut lo, mut hi) = (0.0f64, 8.0f64);
    if sum(lo) <= total {
        return 0.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if sum(mid) > total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

impl Engine {
    pub fn new(model: Model, seed: u64) -> Self {
        let body_mean = model.body_sizes.mean();
        let mean_arrivals = model.arrivals;
        let heavy_total = (model.pps - mean_arrivals * body_mean).max(0.0);
        let n = model.heavy_count;
        let heavy_rates: Vec<f64> = match model.heavy_top_pps {
            Some(top) if n > 0 => {
                let s = zipf_exponent(n, top.min(heavy_total), heavy_total);
                let raw: Vec<f64> = (1..=n).map(|i| (i as f64).powf(-s)).collect();
                let sum: f64 = raw.iter().sum();
                raw.iter().map(|r| r / sum * heavy_total).collect()
            }
            _ if n > 0 => vec![heavy_total / n as f64; n],
            _ => Vec::new(),
        };
        // Frame classes: every fourth heavy flow (the 2nd, 6th, …) is an
        // ACK stream; body flows are small-frame flows with the probability
        // that brings the packet-weighted share to the target. TCP control
        // packets (SYN, FIN) are small too and count towards it.
        let heavy_small: f64 = heavy_rates
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 4 == 1)
            .map(|(_, r)| r)
            .sum();
        let body_pps = mean_arrivals * body_mean;
        let single = model.body_sizes.cdf(1);
        let control_pps = mean_arrivals
            * (single * model.single_tcp_share + (1.0 - single) * model.tcp_share * 2.0);
        let small_share_body = if body_pps > control_pps {
            ((model.small_frame_share * model.pps - heavy_small - control_pps)
                / (body_pps - control_pps))
                .clamp(0.0, 1.0)
        } else {
            0.0
        };
        let mut engine = Self {
            rng: SplitMix64::new(seed),
            seed,
            next_arrival_ns: 0.0,
            flows_spawned: 0,
            live: Vec::new(),
            heavy_rates,
            small_share_body,
            model,
        };
        engine.spawn_heavy();
        engine.warm_up();
        engine
    }

    fn flow_rng(&mut self) -> SplitMix64 {
        self.flows_spawned += 1;
        SplitMix64::new(self.seed ^ self.flows_spawned.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    fn endpoints(&self, rng: &mut SplitMix64, tcp: bool, server_to_client: bool) -> Endpoints {
        let space = u32::from(self.model.address_space);
        let r = rng.next_u64();
        let campus =
            (10 << 24) | ((space << 6 | (r as u32 & 63)) << 16) | ((r >> 8) as u32 & 0xffff);
        let r2 = rng.next_u64();
        let first = 11 + 50 * space + (r2 % 50) as u32;
        let external = (first << 24) | ((r2 >> 8) as u32 & 0x00ff_ffff);
        let pick = (r2 >> 40) % 100;
        let server_port = if tcp {
            match pick {
                0..=69 => 443,
                70..=89 => 80,
                _ => 1024 + ((r2 >> 48) % 9000) as u16,
            }
        } else {
            match pick {
                0..=49 => 443,
                50..=79 => 53,
                80..=84 => 123,
                _ => 1024 + ((r2 >> 48) % 9000) as u16,
            }
        };
        let client_port = 32768 + ((r >> 32) % 28232) as u16;
        let protocol = if tcp { 6 } else { 17 };
        if server_to_client {
            Endpoints {
                src: external,
                dst: campus,
                sport: server_port,
                dport: client_port,
                protocol,
            }
        } else {
            Endpoints {
                src: campus,
                dst: external,
                sport: client_port,
                dport: server_port,
                protocol,
            }
        }
    }

    fn spawn_heavy(&mut self) {
        let timing = self.model.heavy_timing;
        for i in 0..self.heavy_rates.len() {
            let rate = self.heavy_rates[i];
            let mut rng = self.flow_rng();
            let udp = self
                .model
                .heavy_protocol_udp_every
                .is_some_and(|k| i % k == k - 1);
            let small = i % 4 == 1 && matches!(self.model.frames, FrameModel::Empirical { .. });
            let ends = self.endpoints(&mut rng, !udp, !small);
            let (burst_mean, intra, inter) = match timing {
                HeavyTiming::Trains { .. } => {
                    let train = self.model.trains.packets;
                    let intra = self.model.trains.gaps_for(NS / rate);
                    let mean = log_uniform_mean(intra);
                    (
                        train,
                        intra,
                        (train / rate * NS - (train - 1.0) * mean).max(mean),
                    )
                }
                HeavyTiming::Constant => (1.0, (0.0, 0.0), NS / rate),
            };
            // Start at a random phase of the flow's period: it was already
            // running when the trace starts (no SYN).
            let phase = match timing {
                // Constant-rate flows are evenly staggered.
                HeavyTiming::Constant => inter * i as f64 / self.heavy_rates.len() as f64,
                HeavyTiming::Trains { .. } => rng.next_f64() * inter,
            };
            self.live.push(Flow {
                ends,
                next_ns: phase,
                remaining: u64::MAX,
                sent: 1,
                burst_left: 0,
                burst_mean,
                intra_gap_ns: intra,
                inter_gap_ns: inter,
                wobble: 1.0,
                wobble_second: -1,
                heavy_timing: Some(timing),
                small_frames: small,
                tcp: !udp,
                seq: rng.next_u64() as u32,
                rng,
            });
        }
    }

    /// Starts the body population in its steady state: flows that began
    /// before time 0 are advanced to it (their earlier packets dropped).
    fn warm_up(&mut self) {
        if self.model.arrivals <= 0.0 {
            self.next_arrival_ns = f64::INFINITY;
            return;
        }
        let warm_ns = self.model.duration_max_s * NS;
        let mut t = -warm_ns;
        let mut scratch = Vec::new();
        loop {
            t += exp_sample(&mut self.rng, NS / self.model.arrivals);
            if t >= 0.0 {
                break;
            }
            if let Some(mut flow) = self.spawn_body(t) {
                scratch.clear();
                Self::emit(&self.model, &mut flow, 0.0, &mut scratch, false);
                if flow.remaining > 0 {
                    self.live.push(flow);
                }
            }
        }
        self.next_arrival_ns = t;
    }

    fn spawn_body(&mut self, t_ns: f64) -> Option<Flow> {
        let mut rng = self.flow_rng();
        let size = self.model.body_sizes.quantile(rng.next_f64()).max(1);
        let tcp_share = if size == 1 {
            self.model.single_tcp_share
        } else {
            self.model.tcp_share
        };
        let tcp = rng.next_f64() < tcp_share;
        let small = rng.next_f64() < self.small_share_body;
        let ends = self.endpoints(&mut rng, tcp, !small);
        let m = &self.model;
        let (burst_mean, intra, inter, duration_ns) = if size >= 2 {
            let median = m.duration_median_s * (size as f64).sqrt();
            let duration =
                (median * (m.duration_sigma * normal(&mut rng)).exp()).min(m.duration_max_s);
            let burst_mean = (size as f64 / 8.0).clamp(1.0, m.trains.packets.max(1.0));
            let bursts = (size as f64 / burst_mean).max(1.0);
            let intra = m.trains.gaps_for(duration * NS / size as f64);
            let inter = (duration * NS / bursts).max(log_uniform_mean(intra));
            (burst_mean, intra, inter, duration * NS)
        } else {
            (1.0, (0.0, 0.0), 0.0, 0.0)
        };
        // A flow that ended long before the trace starts is not kept.
        if t_ns + 3.0 * duration_ns < 0.0 {
            return None;
        }
        Some(Flow {
            ends,
            next_ns: t_ns,
            remaining: size,
            sent: 0,
            burst_left: 0,
            burst_mean,
            intra_gap_ns: intra,
            inter_gap_ns: inter,
            wobble: 1.0,
            wobble_second: -1,
            heavy_timing: None,
            small_frames: small,
            tcp,
            seq: rng.next_u64() as u32,
            rng,
        })
    }

    fn frame_size(model: &Model, rng: &mut SplitMix64, small: bool) -> u16 {
        match &model.frames {
            FrameModel::Fixed(size) => *size,
            FrameModel::Empirical {
                cdf,
                small_quantile,
            } => {
                let u = rng.next_f64();
                let q = if small {
                    u * small_quantile
                } else {
                    small_quantile + u * (1.0 - small_quantile)
                };
                cdf.quantile(q) as u16
            }
        }
    }

    /// Emits the flow's packets before `until_ns` into `out` (when `keep`),
    /// advancing its schedule.
    fn emit(model: &Model, flow: &mut Flow, until_ns: f64, out: &mut Vec<GenPacket>, keep: bool) {
        while flow.remaining > 0 && flow.next_ns < until_ns {
            let first = flow.sent == 0;
            let last = flow.remaining == 1;
            let control = flow.tcp && (first || (last && flow.sent > 0));
            let mut wire = Self::frame_size(model, &mut flow.rng, flow.small_frames || control);
            let header = if flow.tcp { 54 } else { 42 };
            wire = wire.max(header).max(60);
            let flags = if !flow.tcp {
                0
            } else if first {
                if flow.small_frames {
                    SYN
                } else {
                    SYN | ACK
                }
            } else if last {
                FIN | ACK
            } else if flow.burst_left == 0 {
                PSH | ACK
            } else {
                ACK
            };
            if keep && flow.next_ns >= 0.0 {
                out.push(GenPacket {
                    timestamp_ns: flow.next_ns as u64,
                    src: flow.ends.src,
                    dst: flow.ends.dst,
                    sport: flow.ends.sport,
                    dport: flow.ends.dport,
                    protocol: flow.ends.protocol,
                    tcp_flags: flags,
                    wire_len: wire,
                    seq: flow.seq,
                });
            }
            if flow.tcp {
                let advance = if flags & (SYN | FIN) != 0 {
                    1
                } else if flow.small_frames {
                    0
                } else {
                    u32::from(wire - header)
                };
                flow.seq = flow.seq.wrapping_add(advance);
            }
            flow.sent += 1;
            if flow.remaining != u64::MAX {
                flow.remaining -= 1;
            }
            // Schedule the next packet.
            let gap = if flow.burst_left > 0 {
                flow.burst_left -= 1;
                log_uniform(&mut flow.rng, flow.intra_gap_ns)
            } else {
                flow.burst_left = geometric(&mut flow.rng, flow.burst_mean) - 1;
                match flow.heavy_timing {
                    Some(HeavyTiming::Constant) => flow.inter_gap_ns,
                    Some(HeavyTiming::Trains { wobble }) => {
                        let second = (flow.next_ns / NS).floor() as i64;
                        if second != flow.wobble_second {
                            flow.wobble_second = second;
                            flow.wobble = 1.0 + wobble * (2.0 * flow.rng.next_f64() - 1.0);
                        }
                        exp_sample(&mut flow.rng, flow.inter_gap_ns) / flow.wobble
                    }
                    None => exp_sample(&mut flow.rng, flow.inter_gap_ns),
                }
            };
            flow.next_ns += gap.max(1.0);
        }
    }

    /// Produces the packets of `[from_ns, until_ns)` (trace time), unsorted.
    pub fn window(&mut self, until_ns: f64, out: &mut Vec<GenPacket>) {
        while self.next_arrival_ns < until_ns {
            let t = self.next_arrival_ns;
            if let Some(flow) = self.spawn_body(t) {
                self.live.push(flow);
            }
            self.next_arrival_ns = t + exp_sample(&mut self.rng, NS / self.model.arrivals);
        }
        let mut i = 0;
        while i < self.live.len() {
            let flow = &mut self.live[i];
            Self::emit(&self.model, flow, until_ns, out, true);
            if flow.remaining == 0 {
                self.live.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Flows currently live (body and heavy).
    pub fn live_flows(&self) -> usize {
        self.live.len()
    }
}
