//! Flow identifiers: the fields a NIC feeds to its RSS hash.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// IP protocol number of a flow (6 = TCP, 17 = UDP, …).
pub type IpProtocol = u8;

/// Protocol numbers used by the RSS field selection.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// A directional flow: source and destination address of one IP family, and
/// optionally the L4 ports.
///
/// The RSS hash input is `src ‖ dst [‖ sport ‖ dport]` in network byte order,
/// source before destination, exactly as NICs build it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address (same family as `src`).
    pub dst: IpAddr,
    /// `(source port, destination port)` when the hash covers L4 ports.
    pub ports: Option<(u16, u16)>,
    /// IP protocol number (not part of the Toeplitz input; kept so that a TCP
    /// and a UDP flow between the same endpoints are distinct flows).
    pub protocol: IpProtocol,
}

/// Longest hash input: two IPv6 addresses and two ports.
pub const MAX_HASH_INPUT: usize = 36;

/// Error building a [`FlowKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowKeyError {
    /// The two addresses are of different IP families.
    #[error("source {src} and destination {dst} are not of the same IP family")]
    MixedFamilies {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
    },
}

impl FlowKey {
    /// A flow hashed with its L4 ports.
    pub fn new(
        src: IpAddr,
        dst: IpAddr,
        sport: u16,
        dport: u16,
        protocol: IpProtocol,
    ) -> Result<Self, FlowKeyError> {
        Self::build(src, dst, Some((sport, dport)), protocol)
    }

    /// A flow hashed on its addresses only (fragments, ICMP, or NICs
    /// configured for 2-tuple hashing).
    pub fn addresses_only(
        src: IpAddr,
        dst: IpAddr,
        protocol: IpProtocol,
    ) -> Result<Self, FlowKeyError> {
        Self::build(src, dst, None, protocol)
    }

    fn build(
        src: IpAddr,
        dst: IpAddr,
        ports: Option<(u16, u16)>,
        protocol: IpProtocol,
    ) -> Result<Self, FlowKeyError> {
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(FlowKeyError::MixedFamilies { src, dst });
        }
        Ok(Self {
            src,
            dst,
            ports,
            protocol,
        })
    }

    /// The same flow seen in the other direction.
    pub fn reversed(&self) -> Self {
        Self {
            src: self.dst,
            dst: self.src,
            ports: self.ports.map(|(s, d)| (d, s)),
            protocol: self.protocol,
        }
    }

    /// Writes the Toeplitz input bytes into `buf` and returns how many were
    /// written (8, 12, 32 or 36).
    pub fn hash_input(&self, buf: &mut [u8; MAX_HASH_INPUT]) -> usize {
        let mut n = 0;
        for addr in [self.src, self.dst] {
            match addr {
                IpAddr::V4(a) => {
                    buf[n..n + 4].copy_from_slice(&a.octets());
                    n += 4;
                }
                IpAddr::V6(a) => {
                    buf[n..n + 16].copy_from_slice(&a.octets());
                    n += 16;
                }
            }
        }
        if let Some((s, d)) = self.ports {
            buf[n..n + 2].copy_from_slice(&s.to_be_bytes());
            buf[n + 2..n + 4].copy_from_slice(&d.to_be_bytes());
            n += 4;
        }
        n
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sock = |f: &mut fmt::Formatter<'_>, a: IpAddr, p: Option<u16>| match (a, p) {
            (IpAddr::V6(a), Some(p)) => write!(f, "[{a}]:{p}"),
            (a, Some(p)) => write!(f, "{a}:{p}"),
            (a, None) => write!(f, "{a}"),
        };
        sock(f, self.src, self.ports.map(|p| p.0))?;
        f.write_str(" -> ")?;
        sock(f, self.dst, self.ports.map(|p| p.1))?;
        write!(f, " proto {}", self.protocol)
    }
}
