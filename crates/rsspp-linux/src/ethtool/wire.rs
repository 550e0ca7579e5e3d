//! The byte layout of the `SIOCETHTOOL` requests rsspp uses, as
//! `<linux/ethtool.h>` defines them, packed and unpacked without a kernel so
//! that the layout is unit-tested.
//!
//! Buffers are vectors of `u32` (or `u64`) words: the kernel reads the
//! structures through `copy_from_user`, which does not need alignment, but
//! Rust may only view the words as the C fields if they are aligned.

/// `ETHTOOL_GRXRINGS`: number of RX rings, in `ethtool_rxnfc.data`.
pub(crate) const GRXRINGS: u32 = 0x2d;
/// `ETHTOOL_GRXFHINDIR`: read the indirection table (legacy, no key).
pub(crate) const GRXFHINDIR: u32 = 0x38;
/// `ETHTOOL_SRXFHINDIR`: write the indirection table (legacy).
pub(crate) const SRXFHINDIR: u32 = 0x39;
/// `ETHTOOL_GCHANNELS`: channel counts.
pub(crate) const GCHANNELS: u32 = 0x3c;
/// `ETHTOOL_GRSSH`: read the RSS configuration (table, key, hash function).
pub(crate) const GRSSH: u32 = 0x46;
/// `ETHTOOL_SRSSH`: write the RSS configuration.
pub(crate) const SRSSH: u32 = 0x47;

/// `ETH_RSS_HASH_NO_CHANGE`: leave the hash function as it is.
const HASH_NO_CHANGE: u8 = 0;

/// `struct ethtool_rxfh` without its flexible array: `cmd`, `rss_context`,
/// `indir_size`, `key_size` (4 × u32), `hfunc`, `input_xfrm` (called
/// `rsvd8[0]` before Linux 6.8), two reserved bytes, `rsvd32`: 24 bytes.
const RXFH_HEADER_WORDS: usize = 6;
/// `struct ethtool_rxfh_indir` without its flexible array: `cmd`, `size`.
const RXFH_INDIR_HEADER_WORDS: usize = 2;
/// `sizeof(struct ethtool_rxnfc)` on 64-bit Linux: the kernel copies that
/// many bytes in and out for `ETHTOOL_GRXRINGS`, whatever the command uses.
const RXNFC_BYTES: usize = 192;
/// `struct ethtool_channels`: `cmd` and eight counts.
const CHANNELS_WORDS: usize = 9;

/// The fixed part of `struct ethtool_rxfh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RxfhHeader {
    /// `ETHTOOL_GRSSH` or `ETHTOOL_SRSSH`.
    pub cmd: u32,
    /// RSS context: 0 for the device's main table.
    pub rss_context: u32,
    /// Entries in the indirection table.
    pub indir_size: u32,
    /// Bytes in the hash key.
    pub key_size: u32,
    /// `ETH_RSS_HASH_*` bit of the hash function (0: not reported / no change).
    pub hfunc: u8,
    /// `RXH_XFRM_*` input transformation (always 0 before Linux 6.8).
    pub input_xfrm: u8,
}

impl RxfhHeader {
    fn write(&self, words: &mut [u32]) {
        words[0] = self.cmd;
        words[1] = self.rss_context;
        words[2] = self.indir_size;
        words[3] = self.key_size;
        words[4] = u32::from_ne_bytes([self.hfunc, self.input_xfrm, 0, 0]);
        words[5] = 0;
    }

    fn read(words: &[u32]) -> Self {
        let bytes = words[4].to_ne_bytes();
        Self {
            cmd: words[0],
            rss_context: words[1],
            indir_size: words[2],
            key_size: words[3],
            hfunc: bytes[0],
            input_xfrm: bytes[1],
        }
    }
}

/// Words needed for an `ethtool_rxfh` with `indir` entries and `key` bytes.
fn rxfh_words(indir: usize, key: usize) -> usize {
    RXFH_HEADER_WORDS + indir + key.div_ceil(4)
}

/// `ETHTOOL_GRSSH` of RSS context `context` with both sizes 0: the kernel
/// answers with the sizes (first step of the two-step read).
pub(crate) fn rxfh_size_query(context: u32) -> Vec<u32> {
    rxfh_get(context, 0, 0)
}

/// `ETHTOOL_GRSSH` asking for `indir` table entries and `key` key bytes,
/// the sizes the kernel reported (second step).
pub(crate) fn rxfh_get(context: u32, indir: u32, key: u32) -> Vec<u32> {
    let mut words = vec![0; rxfh_words(indir as usize, key as usize)];
    RxfhHeader {
        cmd: GRSSH,
        rss_context: context,
        indir_size: indir,
        key_size: key,
        hfunc: 0,
        input_xfrm: 0,
    }
    .write(&mut words);
    words
}

/// `ETHTOOL_SRSSH` writing `table` only: key size 0 and hash function
/// `ETH_RSS_HASH_NO_CHANGE` leave the key and function alone. `input_xfrm`
/// must be what `ETHTOOL_GRSSH` reported: kernels before 6.8 reject any
/// non-zero value of that (then reserved) byte, later ones apply it, so
/// echoing the current value is the one "no change" both accept. An empty
/// table (size 0) puts the driver's default back.
pub(crate) fn rxfh_set_indirection(context: u32, table: &[u32], input_xfrm: u8) -> Vec<u32> {
    let mut words = vec![0; rxfh_words(table.len(), 0)];
    RxfhHeader {
        cmd: SRSSH,
        rss_context: context,
        indir_size: table.len() as u32,
        key_size: 0,
        hfunc: HASH_NO_CHANGE,
        input_xfrm,
    }
    .write(&mut words);
    words[RXFH_HEADER_WORDS..].copy_from_slice(table);
    words
}

/// The header of a buffer the kernel filled.
pub(crate) fn rxfh_header(words: &[u32]) -> RxfhHeader {
    RxfhHeader::read(words)
}

/// Table and key of a buffer built by [`rxfh_get`] and filled by the kernel.
/// The sizes are the ones the buffer was built with: the kernel refuses
/// (EINVAL) any other, so a buffer cannot be read past its end.
pub(crate) fn rxfh_contents(words: &[u32], indir: u32, key: u32) -> (Vec<u32>, Vec<u8>) {
    let (indir, key) = (indir as usize, key as usize);
    let table = words[RXFH_HEADER_WORDS..RXFH_HEADER_WORDS + indir].to_vec();
    let key_bytes: Vec<u8> = words[RXFH_HEADER_WORDS + indir..]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(key)
        .collect();
    (table, key_bytes)
}

/// `ETHTOOL_GRXFHINDIR` for `size` entries (0: ask for the size).
pub(crate) fn rxfh_indir_get(size: u32) -> Vec<u32> {
    let mut words = vec![0; RXFH_INDIR_HEADER_WORDS + size as usize];
    words[0] = GRXFHINDIR;
    words[1] = size;
    words
}

/// `ETHTOOL_SRXFHINDIR` writing `table`.
pub(crate) fn rxfh_indir_set(table: &[u32]) -> Vec<u32> {
    let mut words = Vec::with_capacity(RXFH_INDIR_HEADER_WORDS + table.len());
    words.extend_from_slice(&[SRXFHINDIR, table.len() as u32]);
    words.extend_from_slice(table);
    words
}

/// The `size` field of an `ethtool_rxfh_indir` the kernel filled.
pub(crate) fn rxfh_indir_size(words: &[u32]) -> u32 {
    words[1]
}

/// The entries of an `ethtool_rxfh_indir` built by [`rxfh_indir_get`].
pub(crate) fn rxfh_indir_entries(words: &[u32]) -> Vec<u32> {
    words[RXFH_INDIR_HEADER_WORDS..].to_vec()
}

/// `ETHTOOL_GRXRINGS` in a zeroed `struct ethtool_rxnfc` (`cmd` at offset 0,
/// the answer in the u64 `data` at offset 8).
pub(crate) fn rxnfc_rings() -> Vec<u64> {
    let mut words = vec![0u64; RXNFC_BYTES / 8];
    // `cmd` is the first u32 of the first u64 word, whatever the endianness.
    let mut first = [0u8; 8];
    first[..4].copy_from_slice(&GRXRINGS.to_ne_bytes());
    words[0] = u64::from_ne_bytes(first);
    words
}

/// The `data` field of an `ethtool_rxnfc`.
pub(crate) fn rxnfc_data(words: &[u64]) -> u64 {
    words[1]
}

/// `ETHTOOL_GCHANNELS` in a zeroed `struct ethtool_channels`.
pub(crate) fn channels_get() -> Vec<u32> {
    let mut words = vec![0u32; CHANNELS_WORDS];
    words[0] = GCHANNELS;
    words
}

/// RX queues in an `ethtool_channels` the kernel filled: dedicated RX
/// channels plus combined ones (`rx_count` and `combined_count`).
pub(crate) fn channels_rx(words: &[u32]) -> u32 {
    words[5].saturating_add(words[8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes32(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    fn ne(v: u32) -> [u8; 4] {
        v.to_ne_bytes()
    }

    #[test]
    fn size_query_is_a_bare_24_byte_header() {
        let words = rxfh_size_query(0);
        let mut expected = Vec::new();
        expected.extend(ne(0x46));
        expected.extend([0u8; 20]);
        assert_eq!(bytes32(&words), expected);
    }

    #[test]
    fn get_request_has_room_for_table_and_key() {
        // 128 entries and a 40-byte key: 24 + 512 + 40 bytes.
        let words = rxfh_get(0, 128, 40);
        assert_eq!(words.len() * 4, 24 + 128 * 4 + 40);
        let h = rxfh_header(&words);
        assert_eq!((h.cmd, h.indir_size, h.key_size), (GRSSH, 128, 40));
        // An odd key size rounds the buffer up to whole words.
        assert_eq!(rxfh_get(0, 4, 13).len() * 4, 24 + 16 + 16);
        // A context is the second word.
        assert_eq!(rxfh_get(3, 4, 0)[1], 3);
    }

    #[test]
    fn set_request_layout_matches_the_c_struct() {
        let words = rxfh_set_indirection(2, &[1, 3, 1, 3], 0x80);
        let mut expected = Vec::new();
        expected.extend(ne(0x47)); // cmd
        expected.extend(ne(2)); // rss_context
        expected.extend(ne(4)); // indir_size
        expected.extend(ne(0)); // key_size: keep the key
        expected.extend([0, 0x80, 0, 0]); // hfunc (no change), input_xfrm, rsvd8[2]
        expected.extend(ne(0)); // rsvd32
        for e in [1, 3, 1, 3] {
            expected.extend(ne(e)); // rss_config[]: the table
        }
        assert_eq!(bytes32(&words), expected);
    }

    #[test]
    fn reply_unpacks_table_key_and_function() {
        // What the kernel writes back for a 4-entry table and a 6-byte key.
        let mut bytes = Vec::new();
        bytes.extend(ne(0x46));
        bytes.extend(ne(0));
        bytes.extend(ne(4));
        bytes.extend(ne(6));
        bytes.extend([1, 0, 0, 0]); // hfunc: ETH_RSS_HASH_TOP
        bytes.extend(ne(0));
        for e in [0, 1, 2, 3] {
            bytes.extend(ne(e));
        }
        bytes.extend([0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0, 0]);
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let h = rxfh_header(&words);
        assert_eq!(
            (h.indir_size, h.key_size, h.hfunc, h.input_xfrm),
            (4, 6, 1, 0)
        );
        let (table, key) = rxfh_contents(&words, 4, 6);
        assert_eq!(table, vec![0, 1, 2, 3]);
        assert_eq!(key, vec![0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b]);
    }

    #[test]
    fn legacy_table_requests() {
        assert_eq!(rxfh_indir_get(0), vec![GRXFHINDIR, 0]);
        let mut reply = rxfh_indir_get(3);
        reply[2..].copy_from_slice(&[2, 0, 1]);
        assert_eq!(rxfh_indir_size(&reply), 3);
        assert_eq!(rxfh_indir_entries(&reply), vec![2, 0, 1]);
        assert_eq!(rxfh_indir_set(&[5, 6]), vec![SRXFHINDIR, 2, 5, 6]);
    }

    #[test]
    fn ring_count_request_and_reply() {
        let mut words = rxnfc_rings();
        assert_eq!(words.len() * 8, 192);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[..4], &ne(0x2d));
        assert!(bytes[4..].iter().all(|&b| b == 0));
        words[1] = 6; // `data` at byte offset 8
        assert_eq!(rxnfc_data(&words), 6);
    }

    #[test]
    fn channel_counts_add_rx_and_combined() {
        let mut words = channels_get();
        assert_eq!(words, vec![0x3c, 0, 0, 0, 0, 0, 0, 0, 0]);
        // max_rx, max_tx, max_other, max_combined, rx, tx, other, combined
        words[1..].copy_from_slice(&[0, 0, 1, 8, 2, 0, 1, 4]);
        assert_eq!(channels_rx(&words), 6);
    }
}
