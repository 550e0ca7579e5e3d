//! The Toeplitz hash that NICs use for receive-side scaling.
//!
//! For every set bit `p` (most significant bit of the first byte first) of the
//! input, the 32 key bits starting at bit `p` are XORed into the result. The
//! input is `src ‖ dst [‖ sport ‖ dport]` in network byte order (see
//! [`FlowKey::hash_input`]). [`Toeplitz`] precomputes, for every input byte
//! position and value, the XOR of the key windows its set bits select, so a
//! hash costs one table lookup per input byte; [`hash_reference`] is the
//! plain bit-by-bit definition, kept for tests and benchmarks.

use std::fmt;
use std::str::FromStr;

use crate::flow::{FlowKey, MAX_HASH_INPUT};

/// Length of the keys NICs use (enough for two IPv6 addresses and two ports).
pub const KEY_LEN: usize = 40;

/// The key from Microsoft's RSS specification, the default of most NICs.
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// `6d5a` repeated: the key is periodic with a 16-bit period, so swapping the
/// source and destination (addresses and ports) leaves the hash unchanged and
/// both directions of a connection land in the same bucket.
pub const SYMMETRIC_KEY: [u8; KEY_LEN] = {
    let mut k = [0u8; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// An RSS hash key of at least [`KEY_LEN`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct RssKey(Vec<u8>);

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Fewer bytes than the 40 a 36-byte IPv6 input needs.
    #[error("RSS key is {0} bytes long; it must be at least {KEY_LEN} bytes")]
    TooShort(usize),
    /// Not `microsoft`, `symmetric` or hexadecimal bytes.
    #[error("RSS key {0:?} is not 'microsoft', 'symmetric' or hexadecimal bytes (e.g. 6d5a56da… or 6d:5a:56:da:…)")]
    NotHex(String),
}

impl RssKey {
    /// A key from raw bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, KeyError> {
        let bytes = bytes.into();
        if bytes.len() < KEY_LEN {
            return Err(KeyError::TooShort(bytes.len()));
        }
        Ok(Self(bytes))
    }

    /// Microsoft's key ([`MICROSOFT_KEY`]).
    pub fn microsoft() -> Self {
        Self(MICROSOFT_KEY.to_vec())
    }

    /// The symmetric key ([`SYMMETRIC_KEY`]).
    pub fn symmetric() -> Self {
        Self(SYMMETRIC_KEY.to_vec())
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The 32 key bits starting at bit `bit` (bits past the end read as 0).
    fn window(&self, bit: usize) -> u32 {
        let byte = bit / 8;
        let mut v: u64 = 0;
        for i in 0..5 {
            v = (v << 8) | u64::from(*self.0.get(byte + i).unwrap_or(&0));
        }
        // `v` holds 40 bits; drop the leading `bit % 8` bits and keep 32.
        ((v >> (8 - bit % 8)) & 0xffff_ffff) as u32
    }
}

impl Default for RssKey {
    fn default() -> Self {
        Self::microsoft()
    }
}

impl fmt::Debug for RssKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RssKey({self})")
    }
}

impl fmt::Display for RssKey {
    /// Lower-case hex, as `ethtool -x` would print it without colons.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl FromStr for RssKey {
    type Err = KeyError;

    /// `microsoft`, `symmetric`, or hex bytes with optional `:` separators
    /// and an optional `0x` prefix.
    fn from_str(s: &str) -> Result<Self, KeyError> {
        match s.to_ascii_lowercase().as_str() {
            "microsoft" | "ms" => return Ok(Self::microsoft()),
            "symmetric" | "sym" => return Ok(Self::symmetric()),
            _ => {}
        }
        let hex: String = s
            .trim()
            .trim_start_matches("0x")
            .chars()
            .filter(|c| *c != ':')
            .collect();
        if hex.is_empty() || hex.len() % 2 != 0 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(KeyError::NotHex(s.to_string()));
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| KeyError::NotHex(s.into())))
            .collect::<Result<Vec<u8>, _>>()?;
        Self::new(bytes)
    }
}

/// Bitwise Toeplitz hash: the definition, one key window per set input bit.
///
/// `data` may be at most `key.len() - 4` bytes long; longer input is hashed
/// as if the key were padded with zero bits.
pub fn hash_reference(key: &RssKey, data: &[u8]) -> u32 {
    let mut result = 0u32;
    for (i, byte) in data.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= key.window(i * 8 + bit);
            }
        }
    }
    result
}

/// Table-driven Toeplitz hasher for one key.
///
/// Holds `36 × 256` precomputed words (36 KiB): entry `[i][v]` is the hash
/// contribution of value `v` at input byte `i`, so an IPv4 4-tuple costs 12
/// lookups and XORs.
#[derive(Clone)]
pub struct Toeplitz {
    key: RssKey,
    table: Box<[[u32; 256]; MAX_HASH_INPUT]>,
}

impl Toeplitz {
    /// Precomputes the tables for `key`.
    pub fn new(key: RssKey) -> Self {
        let mut table = Box::new([[0u32; 256]; MAX_HASH_INPUT]);
        for (i, row) in table.iter_mut().enumerate() {
            let windows: [u32; 8] = std::array::from_fn(|bit| key.window(i * 8 + bit));
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|bit| v & (0x80 >> bit) != 0)
                    .fold(0, |acc, bit| acc ^ windows[bit]);
            }
        }
        Self { key, table }
    }

    /// The key this hasher was built for.
    pub fn key(&self) -> &RssKey {
        &self.key
    }

    /// The precomputed table as native-endian bytes, row by row: entry
    /// `(pos, v)` is the hash of byte `v` preceded by `pos` zero bytes (by
    /// linearity, a hash is the XOR of its bytes' entries). The BPF programs
    /// hash with this table (their `struct key_table`).
    pub fn table_ne_bytes(&self) -> Vec<u8> {
        self.table
            .iter()
            .flat_map(|row| row.iter().flat_map(|w| w.to_ne_bytes()))
            .collect()
    }

    /// Hash of raw input bytes (at most 36).
    ///
    /// # Panics
    /// If `data` is longer than [`MAX_HASH_INPUT`] bytes.
    #[inline]
    pub fn hash(&self, data: &[u8]) -> u32 {
        assert!(
            data.len() <= MAX_HASH_INPUT,
            "Toeplitz input longer than 36 bytes"
        );
        data.iter()
            .zip(self.table.iter())
            .fold(0, |acc, (&b, row)| acc ^ row[usize::from(b)])
    }

    /// Hash of an IPv4 4-tuple, the common fast path (fields in host order).
    #[inline]
    pub fn hash_ipv4(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> u32 {
        let t = &self.table;
        let [s0, s1, s2, s3] = src;
        let [d0, d1, d2, d3] = dst;
        let [p0, p1] = sport.to_be_bytes();
        let [q0, q1] = dport.to_be_bytes();
        t[0][usize::from(s0)]
            ^ t[1][usize::from(s1)]
            ^ t[2][usize::from(s2)]
            ^ t[3][usize::from(s3)]
            ^ t[4][usize::from(d0)]
            ^ t[5][usize::from(d1)]
            ^ t[6][usize::from(d2)]
            ^ t[7][usize::from(d3)]
            ^ t[8][usize::from(p0)]
            ^ t[9][usize::from(p1)]
            ^ t[10][usize::from(q0)]
            ^ t[11][usize::from(q1)]
    }

    /// Hash of a flow, as a NIC computes it.
    #[inline]
    pub fn hash_flow(&self, flow: &FlowKey) -> u32 {
        let mut buf = [0u8; MAX_HASH_INPUT];
        let n = flow.hash_input(&mut buf);
        self.hash(&buf[..n])
    }
}

impl Default for Toeplitz {
    fn default() -> Self {
        Self::new(RssKey::microsoft())
    }
}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toeplitz").field("key", &self.key).finish()
    }
}

/// The indirection-table bucket a hash selects: NICs index the table with the
/// low bits of the hash, so `table_size` must be a power of two.
#[inline]
pub fn bucket_of(hash: u32, table_size: usize) -> usize {
    debug_assert!(table_size.is_power_of_two());
    hash as usize & (table_size - 1)
}

/// Microsoft's "Verifying the RSS hash calculation" vectors, for the
/// Microsoft key: (source, source port, destination, destination port, hash
/// of the addresses only, hash with the ports). Any port of the hash (the
/// XDP programs' included) is checked against them.
pub const MICROSOFT_VECTORS: &[(&str, u16, &str, u16, u32, u32)] = &[
    (
        "66.9.149.187",
        2794,
        "161.142.100.80",
        1766,
        0x323e8fc2,
        0x51ccc178,
    ),
    (
        "199.92.111.2",
        14230,
        "65.69.140.83",
        4739,
        0xd718262a,
        0xc626b0ea,
    ),
    (
        "24.19.198.95",
        12898,
        "12.22.207.184",
        38024,
        0xd2d0a5de,
        0x5c2b394a,
    ),
    (
        "38.27.205.30",
        48228,
        "209.142.163.6",
        2217,
        0x82989176,
        0xafc7327f,
    ),
    (
        "153.39.163.191",
        44251,
        "202.188.127.2",
        1303,
        0x5d1809c5,
        0x10e828a2,
    ),
    (
        "3ffe:2501:200:1fff::7",
        2794,
        "3ffe:2501:200:3::1",
        1766,
        0x2cc18cd5,
        0x40207d3d,
    ),
    (
        "3ffe:501:8::260:97ff:fe40:efab",
        14230,
        "ff02::1",
        4739,
        0x0f0c461c,
        0xdde51bbf,
    ),
    (
        "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
        44251,
        "fe80::200:f8ff:fe21:67cf",
        38024,
        0x4b61e985,
        0x02d1feef,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn flow(src: &str, dst: &str, ports: Option<(u16, u16)>) -> FlowKey {
        let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        match ports {
            Some((sp, dp)) => FlowKey::new(s, d, sp, dp, 6).unwrap(),
            None => FlowKey::addresses_only(s, d, 6).unwrap(),
        }
    }

    #[test]
    fn microsoft_verification_vectors() {
        let t = Toeplitz::default();
        let key = RssKey::microsoft();
        for &(src, sport, dst, dport, addr_hash, port_hash) in MICROSOFT_VECTORS {
            let with_ports = flow(src, dst, Some((sport, dport)));
            let without = flow(src, dst, None);
            assert_eq!(t.hash_flow(&with_ports), port_hash, "{with_ports}");
            assert_eq!(t.hash_flow(&without), addr_hash, "{without}");
            let mut buf = [0; MAX_HASH_INPUT];
            let n = with_ports.hash_input(&mut buf);
            assert_eq!(
                hash_reference(&key, &buf[..n]),
                port_hash,
                "reference {with_ports}"
            );
            let n = without.hash_input(&mut buf);
            assert_eq!(
                hash_reference(&key, &buf[..n]),
                addr_hash,
                "reference {without}"
            );
        }
    }

    #[test]
    fn ipv4_fast_path_matches_generic() {
        let t = Toeplitz::default();
        let h = t.hash_ipv4([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
        assert_eq!(h, 0x51ccc178);
    }

    #[test]
    fn key_parsing() {
        assert_eq!("microsoft".parse::<RssKey>().unwrap(), RssKey::microsoft());
        assert_eq!("symmetric".parse::<RssKey>().unwrap(), RssKey::symmetric());
        let hex = RssKey::microsoft().to_string();
        assert_eq!(hex.parse::<RssKey>().unwrap(), RssKey::microsoft());
        assert_eq!(&hex[..8], "6d5a56da");
        let colons: String = RssKey::symmetric()
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(colons.parse::<RssKey>().unwrap(), RssKey::symmetric());
        assert_eq!("6d5a".parse::<RssKey>(), Err(KeyError::TooShort(2)));
        assert!(matches!(
            "zz".repeat(40).parse::<RssKey>(),
            Err(KeyError::NotHex(_))
        ));
        assert!(matches!("abc".parse::<RssKey>(), Err(KeyError::NotHex(_))));
        // A longer key (52 bytes, as some NICs use) is accepted.
        assert!(RssKey::new(vec![0xab; 52]).is_ok());
    }

    #[test]
    fn bucket_uses_low_bits() {
        assert_eq!(bucket_of(0x51ccc178, 128), 0x78);
        assert_eq!(bucket_of(0x51ccc178, 512), 0x178);
        assert_eq!(bucket_of(0xffff_ffff, 65536), 0xffff);
    }

    fn any_flow() -> impl Strategy<Value = FlowKey> {
        let v4 = (any::<[u8; 4]>(), any::<[u8; 4]>())
            .prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
        let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
            .prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
        (
            prop_oneof![v4, v6],
            proptest::option::of(any::<(u16, u16)>()),
        )
            .prop_map(|((s, d), ports)| match ports {
                Some((sp, dp)) => FlowKey::new(s, d, sp, dp, 17).unwrap(),
                None => FlowKey::addresses_only(s, d, 17).unwrap(),
            })
    }

    proptest! {
        #[test]
        fn table_equals_reference(f in any_flow(), key in proptest::collection::vec(any::<u8>(), 40..60)) {
            let key = RssKey::new(key).unwrap();
            let t = Toeplitz::new(key.clone());
            let mut buf = [0; MAX_HASH_INPUT];
            let n = f.hash_input(&mut buf);
            prop_assert_eq!(t.hash(&buf[..n]), hash_reference(&key, &buf[..n]));
        }

        #[test]
        fn symmetric_key_hashes_both_directions_alike(f in any_flow()) {
            let t = Toeplitz::new(RssKey::symmetric());
            prop_assert_eq!(t.hash_flow(&f), t.hash_flow(&f.reversed()));
        }
    }

    #[test]
    fn microsoft_key_is_not_symmetric() {
        let t = Toeplitz::default();
        let f = flow("66.9.149.187", "161.142.100.80", Some((2794, 1766)));
        assert_ne!(t.hash_flow(&f), t.hash_flow(&f.reversed()));
    }

    #[test]
    fn the_byte_table_holds_each_byte_contribution() {
        for key in [
            RssKey::microsoft(),
            RssKey::new((0..40u32).map(|i| (i * 37 + 11) as u8).collect::<Vec<u8>>()).unwrap(),
        ] {
            let table = Toeplitz::new(key.clone()).table_ne_bytes();
            assert_eq!(table.len(), MAX_HASH_INPUT * 256 * 4);
            let word = |pos: usize, v: usize| {
                let i = (pos * 256 + v) * 4;
                u32::from_ne_bytes(table[i..i + 4].try_into().unwrap())
            };
            for pos in [0, 1, 7, 8, 31, 35] {
                for v in [0usize, 1, 0x80, 0xa5, 0xff] {
                    let mut input = vec![0u8; pos + 1];
                    input[pos] = v as u8;
                    assert_eq!(word(pos, v), hash_reference(&key, &input), "{pos} {v}");
                }
            }
        }
    }
}
