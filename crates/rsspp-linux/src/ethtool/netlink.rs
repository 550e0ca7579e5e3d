//! ethtool's netlink RSS messages: `ETHTOOL_MSG_RSS_GET` (Linux 6.2) and
//! `ETHTOOL_MSG_RSS_SET` (6.17), which address the device by ifindex and
//! reset a table to the driver's default with an empty indirection
//! attribute. [`super::Ethtool`] uses them where this kernel has them and
//! the ioctls elsewhere.

use crate::genl::{self, Family, Genl, Message, Refused};

/// `ETHTOOL_MSG_RSS_GET`.
pub const RSS_GET: u8 = 38;
/// `ETHTOOL_MSG_RSS_SET`.
pub const RSS_SET: u8 = 48;

const HEADER: u16 = 1; // ETHTOOL_A_RSS_HEADER
const CONTEXT: u16 = 2; // ETHTOOL_A_RSS_CONTEXT
const HFUNC: u16 = 3; // ETHTOOL_A_RSS_HFUNC
const INDIR: u16 = 4; // ETHTOOL_A_RSS_INDIR
const HKEY: u16 = 5; // ETHTOOL_A_RSS_HKEY
const HEADER_DEV_INDEX: u16 = 1; // ETHTOOL_A_HEADER_DEV_INDEX

/// The ethtool family of this kernel, and a socket to it.
#[derive(Debug)]
pub struct EthtoolNetlink {
    genl: Genl,
    family: Family,
}

/// What `ETHTOOL_MSG_RSS_GET` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssReply {
    /// The indirection table (empty when the driver has none).
    pub indirection: Vec<u32>,
    /// The hash key.
    pub key: Vec<u8>,
    /// The hash function's bit (`ETH_RSS_HASH_*`).
    pub hfunc: u32,
}

impl EthtoolNetlink {
    /// The ethtool family, or `None` where this kernel has none (or no
    /// netlink socket can be opened: the ioctls remain).
    pub fn open() -> Option<EthtoolNetlink> {
        let mut genl = Genl::open().ok()?;
        let family = genl.family("ethtool").ok()??;
        Some(EthtoolNetlink { genl, family })
    }

    /// Whether this kernel implements `cmd`.
    pub fn supports(&self, cmd: u8) -> bool {
        self.family.supports(cmd)
    }

    fn message(&self, cmd: u8, ifindex: u32, context: u32) -> Message {
        let mut m = Message::new(self.family.id, cmd, 1);
        m.nest(HEADER, |h| {
            h.u32(HEADER_DEV_INDEX, ifindex);
        });
        if context != 0 {
            m.u32(CONTEXT, context);
        }
        m
    }

    /// The RSS configuration of context `context` (0: the main table) of
    /// the interface `ifindex`.
    pub fn rss_get(&mut self, ifindex: u32, context: u32) -> Result<RssReply, Refused> {
        let m = self.message(RSS_GET, ifindex, context);
        let replies = self.genl.request(m, false)?;
        let reply = replies.first().ok_or(Refused {
            errno: crate::ethtool::Errno(libc::EPROTO),
            message: Some("no reply to ETHTOOL_MSG_RSS_GET".into()),
        })?;
        Ok(parse_rss(reply))
    }

    /// Writes `table` (empty: the driver's default) into context `context`.
    pub fn rss_set(&mut self, ifindex: u32, context: u32, table: &[u32]) -> Result<(), Refused> {
        let mut m = self.message(RSS_SET, ifindex, context);
        m.bytes(INDIR, &encode_table(table));
        self.genl.request(m, false).map(|_| ())
    }
}

/// The table as the kernel reads it: native-endian `u32`s.
fn encode_table(table: &[u32]) -> Vec<u8> {
    table.iter().flat_map(|e| e.to_ne_bytes()).collect()
}

fn parse_rss(reply: &[u8]) -> RssReply {
    let indirection = genl::attr(reply, INDIR)
        .map(|b| {
            b.chunks_exact(4)
                .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    RssReply {
        indirection,
        key: genl::attr(reply, HKEY)
            .map(<[u8]>::to_vec)
            .unwrap_or_default(),
        hfunc: genl::attr(reply, HFUNC).and_then(genl::u32_of).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_read_back() {
        // What the kernel sends: the header nest, hfunc, indir, hkey.
        let mut m = Message::new(0x15, RSS_GET, 1);
        m.nest(HEADER, |h| {
            h.u32(HEADER_DEV_INDEX, 3);
        })
        .u32(HFUNC, 1)
        .bytes(INDIR, &encode_table(&[0, 1, 1, 0]))
        .bytes(HKEY, &[0x6d, 0x5a]);
        let reply = parse_rss(m.attributes());
        assert_eq!(reply.indirection, vec![0, 1, 1, 0]);
        assert_eq!(reply.key, vec![0x6d, 0x5a]);
        assert_eq!(reply.hfunc, 1);
    }

    #[test]
    fn this_kernel_answers_for_a_device_without_a_table() {
        // The loopback has no RSS: RSS_GET, where the kernel has it, is
        // refused with EOPNOTSUPP (not a malformed request).
        let Some(mut nl) = EthtoolNetlink::open() else {
            eprintln!("skipped: this kernel has no ethtool netlink family");
            return;
        };
        if !nl.supports(RSS_GET) {
            eprintln!("skipped: this kernel has no ETHTOOL_MSG_RSS_GET");
            return;
        }
        let e = nl.rss_get(1, 0).unwrap_err();
        assert!(e.is(libc::EOPNOTSUPP), "{e}");
        // An ifindex nobody has.
        let e = nl.rss_get(0x7fff_fff0, 0).unwrap_err();
        assert!(e.is(libc::ENODEV), "{e}");
    }
}
