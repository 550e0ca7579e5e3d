//! The Reframer stage in front of the simulated NIC (seed 002 §4). The
//! batching itself — per-flow batches, the flush list, `T_buff`, the maximum
//! burst, the SYN bypass — is [`rsspp_core::reframer`]'s; this module feeds
//! it the simulator's packets window by window and reports its counters.
//!
//! In the paper's §5.1 the Reframer runs on its own server, so its CPU is
//! not simulated: the stage only changes *when* and *in which order* packets
//! reach the NIC. Packets keep their `arrival_ns` (latency counts the time
//! spent buffered) and get `ready_ns` = the instant they leave the stage.

pub use rsspp_core::reframer::{
    ReframedPacket, Reframer, ReframerConfig, ReframerCounts, ReframerError, BUFFER_US_RANGE,
    MAX_BURST_RANGE,
};

use crate::mechanisms::ReframerMechanisms;
use crate::packet::{Ns, SimPacket};
use crate::SimError;

impl ReframedPacket for SimPacket {
    fn flow(&self) -> u32 {
        self.flow
    }

    fn ready_ns(&self) -> Ns {
        self.ready_ns
    }

    fn set_ready_ns(&mut self, at: Ns) {
        self.ready_ns = at;
    }

    fn is_syn(&self) -> bool {
        SimPacket::is_syn(self)
    }
}

/// The counters as a result's mechanisms (ratios × 1000, as integers).
pub fn mechanisms(counts: &ReframerCounts) -> ReframerMechanisms {
    let x1000 = |v: f64| (v * 1000.0).round() as u64;
    ReframerMechanisms {
        reframer_buffered: counts.buffered,
        reframer_bypassed: counts.bypassed,
        reframer_flush_timeout: counts.flush_timeout,
        reframer_flush_burst: counts.flush_burst,
        reframer_flush_bypass: counts.flush_bypass,
        reframer_mean_batch_x1000: x1000(counts.mean_batch()),
        reframer_slf_in_x1000: x1000(counts.slf_in()),
        reframer_slf_out_x1000: x1000(counts.slf_out()),
    }
}

/// Streams windows of packets through a [`Reframer`]: what a window lets
/// out is handed on, what it still holds waits for the next window.
#[derive(Debug, Clone)]
pub struct ReframerStage {
    reframer: Reframer<SimPacket>,
}

impl ReframerStage {
    /// A stage with `config`.
    pub fn new(config: ReframerConfig) -> Result<Self, SimError> {
        Ok(Self {
            reframer: Reframer::new(config)?,
        })
    }

    /// The packets of `window` (in time order, after the previous windows)
    /// that leave up to its last packet's time, in time order.
    pub fn window(&mut self, window: &[SimPacket]) -> Vec<SimPacket> {
        let mut out = Vec::with_capacity(window.len());
        for p in window {
            self.reframer.push(p, &mut out);
        }
        out
    }

    /// Everything still held, at the end of the input.
    pub fn finish(&mut self) -> Vec<SimPacket> {
        let mut out = Vec::with_capacity(self.reframer.held() as usize);
        self.reframer.finish(&mut out);
        out
    }

    /// What the stage did.
    pub fn counts(&self) -> ReframerCounts {
        self.reframer.counts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Ns = 1000;

    fn udp(flow: u32, seq: u32, t: Ns) -> SimPacket {
        SimPacket {
            arrival_ns: t,
            ready_ns: t,
            flow,
            seq,
            proto: 17,
            ..SimPacket::default()
        }
    }

    #[test]
    fn windows_carry_held_packets_over() {
        let mut s = ReframerStage::new(ReframerConfig::new(10).unwrap()).unwrap();
        let first = s.window(&[udp(0, 0, 0), udp(1, 0, 5 * US)]);
        assert!(first.is_empty());
        let second = s.window(&[udp(0, 1, 12 * US)]);
        assert_eq!(second.len(), 1);
        assert_eq!((second[0].flow, second[0].ready_ns), (0, 10 * US));
        let last = s.finish();
        let got: Vec<(u32, Ns)> = last.iter().map(|p| (p.flow, p.ready_ns)).collect();
        assert_eq!(got, [(1, 15 * US), (0, 22 * US)]);
        assert_eq!(s.counts().packets_out, 3);
    }

    #[test]
    fn a_syn_with_ack_is_buffered_a_bare_syn_is_not() {
        let mut s = ReframerStage::new(ReframerConfig::new(10).unwrap()).unwrap();
        let syn = SimPacket {
            proto: 6,
            tcp_flags: 0x02,
            ..udp(0, 0, 0)
        };
        let syn_ack = SimPacket {
            tcp_flags: 0x12,
            ..syn
        };
        assert_eq!(s.window(&[syn]).len(), 1);
        assert!(s.window(&[SimPacket { flow: 1, ..syn_ack }]).is_empty());
        let c = s.counts();
        assert_eq!((c.bypassed, c.buffered), (1, 1));
    }

    #[test]
    fn a_bad_setting_is_wrapped_with_its_message() {
        let e = SimError::from(ReframerConfig::new(0).unwrap_err());
        assert!(matches!(e, SimError::Reframer(_)), "{e:?}");
        assert!(e.to_string().contains("between 1 and 10000 µs"), "{e}");
    }
}
