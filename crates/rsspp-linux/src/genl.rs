//! Generic netlink, as far as rsspp needs it: a family found by name (with
//! the commands this kernel implements), one request, its replies as
//! attribute lists, and the kernel's refusal with its extended-ack message.
//! ethtool's RSS messages (`ethtool/`) and netdev's queues and NAPI
//! instances (`queues`) go through it.
//!
//! Written here rather than taken from a crate: the rust-netlink crates
//! know neither the ethtool RSS nor the netdev messages, and what is needed
//! (a header, flat and nested attributes, acks) fits in this file.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::ethtool::Errno;

const NLMSG_HDRLEN: usize = 16;
const GENL_HDRLEN: usize = 4;
const NLA_HDRLEN: usize = 4;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));

const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
/// On an error message: extended-ack attributes follow.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// On an error message: the request's payload is not echoed.
const NLM_F_CAPPED: u16 = 0x100;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSGERR_ATTR_MSG: u16 = 1;

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_OPS: u16 = 6;
const CTRL_ATTR_OP_ID: u16 = 1;

/// The kernel's (or the socket's) refusal of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The error number.
    pub errno: Errno,
    /// The kernel's extended-ack message, when it gave one (e.g. "no RSS
    /// context with given ID").
    pub message: Option<String>,
}

impl Refused {
    fn os() -> Self {
        Refused {
            errno: Errno::last(),
            message: None,
        }
    }

    fn malformed(what: &str) -> Self {
        Refused {
            errno: Errno(libc::EPROTO),
            message: Some(format!("malformed netlink reply: {what}")),
        }
    }

    /// Whether it is this error number.
    pub fn is(&self, errno: i32) -> bool {
        self.errno.0 == errno
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => write!(f, "{}: {m}", self.errno),
            None => write!(f, "{}", self.errno),
        }
    }
}

/// A generic netlink family of this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// Its message type.
    pub id: u16,
    /// The commands it implements.
    pub ops: Vec<u32>,
}

impl Family {
    /// Whether this kernel implements command `cmd` of the family.
    pub fn supports(&self, cmd: u8) -> bool {
        self.ops.contains(&u32::from(cmd))
    }
}

/// A generic netlink socket, in the network namespace of the thread that
/// opened it.
#[derive(Debug)]
pub struct Genl {
    fd: OwnedFd,
    seq: u32,
}

impl Genl {
    /// Opens a socket, with extended acks on (the kernel then says why it
    /// refused a request).
    pub fn open() -> Result<Genl, Refused> {
        // SAFETY: plain socket(2); a non-negative result is a new fd we own.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(Refused::os());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            let on: libc::c_int = 1;
            // SAFETY: an int option of the right size; failure only loses
            // the extended messages (kernels before 4.12).
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    SOL_NETLINK,
                    opt,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        Ok(Genl { fd, seq: 1 })
    }

    /// The family called `name`, or `None` when this kernel has none.
    pub fn family(&mut self, name: &str) -> Result<Option<Family>, Refused> {
        let mut msg = Message::new(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1);
        msg.string(CTRL_ATTR_FAMILY_NAME, name);
        let replies = match self.request(msg, false) {
            Ok(r) => r,
            Err(r) if r.is(libc::ENOENT) => return Ok(None),
            Err(r) => return Err(r),
        };
        let reply = replies
            .first()
            .ok_or_else(|| Refused::malformed("no family in the controller's reply"))?;
        let mut id = None;
        let mut ops = Vec::new();
        for (ty, payload) in attrs(reply) {
            match ty {
                CTRL_ATTR_FAMILY_ID => id = u16_of(payload),
                CTRL_ATTR_OPS => {
                    for (_, op) in attrs(payload) {
                        if let Some(cmd) = attrs(op)
                            .find(|&(t, _)| t == CTRL_ATTR_OP_ID)
                            .and_then(|(_, v)| u32_of(v))
                        {
                            ops.push(cmd);
                        }
                    }
                }
                _ => {}
            }
        }
        let id = id.ok_or_else(|| Refused::malformed("the family has no id"))?;
        Ok(Some(Family { id, ops }))
    }

    /// Sends `msg` and returns the attributes of each reply (after the
    /// generic header), once the kernel has acknowledged it or, for a dump,
    /// said it is done.
    pub fn request(&mut self, mut msg: Message, dump: bool) -> Result<Vec<Vec<u8>>, Refused> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
        let bytes = msg.finish(flags, seq);
        // SAFETY: `bytes` is a complete netlink message; the kernel is the
        // destination (a zeroed sockaddr_nl).
        let sent = unsafe {
            let mut to: libc::sockaddr_nl = std::mem::zeroed();
            to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
            libc::sendto(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(Refused::os());
        }
        let mut replies = Vec::new();
        loop {
            let datagram = self.receive()?;
            for (kind, flags, msg_seq, payload) in messages(&datagram) {
                if msg_seq != seq {
                    continue; // a late reply to an earlier request
                }
                match kind {
                    NLMSG_ERROR => {
                        let error = payload
                            .get(..4)
                            .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
                            .ok_or_else(|| Refused::malformed("short error message"))?;
                        if error == 0 {
                            return Ok(replies);
                        }
                        return Err(Refused {
                            errno: Errno(-error),
                            message: ack_message(payload, flags),
                        });
                    }
                    NLMSG_DONE => {
                        // A dump that failed part-way says so here.
                        let error = payload
                            .get(..4)
                            .map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap()));
                        if error < 0 {
                            return Err(Refused {
                                errno: Errno(-error),
                                message: ack_message(payload, flags),
                            });
                        }
                        return Ok(replies);
                    }
                    _ => {
                        let attrs = payload
                            .get(GENL_HDRLEN..)
                            .ok_or_else(|| Refused::malformed("short generic header"))?;
                        replies.push(attrs.to_vec());
                    }
                }
            }
        }
    }

    /// One datagram, whatever its size (an RSS table of 65,536 entries is
    /// a 256 KiB reply).
    fn receive(&self) -> Result<Vec<u8>, Refused> {
        let fd = self.fd.as_raw_fd();
        loop {
            // SAFETY: a zero-length peek that reports the datagram's size.
            let size = unsafe {
                libc::recv(
                    fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_PEEK | libc::MSG_TRUNC,
                )
            };
            if size < 0 {
                let e = Refused::os();
                if e.is(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            let mut buf = vec![0u8; (size as usize).max(NLMSG_HDRLEN)];
            // SAFETY: `buf` is writable for its length.
            let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if got < 0 {
                let e = Refused::os();
                if e.is(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            buf.truncate(got as usize);
            return Ok(buf);
        }
    }
}

/// The kernel's message in an error reply's extended-ack attributes.
fn ack_message(payload: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // struct nlmsgerr: the error, then the request's header (and, unless
    // capped, its payload).
    let echoed = payload.get(4..4 + NLMSG_HDRLEN)?;
    let echoed_len = u32::from_ne_bytes(echoed[..4].try_into().ok()?) as usize;
    let skip = if flags & NLM_F_CAPPED != 0 {
        4 + NLMSG_HDRLEN
    } else {
        4 + align(echoed_len)
    };
    attrs(payload.get(skip..)?)
        .find(|&(t, _)| t == NLMSGERR_ATTR_MSG)
        .map(|(_, m)| {
            String::from_utf8_lossy(m.split(|&b| b == 0).next().unwrap_or(m)).into_owned()
        })
}

/// The netlink messages of a datagram: type, flags, sequence, payload.
fn messages(datagram: &[u8]) -> impl Iterator<Item = (u16, u16, u32, &[u8])> {
    let mut rest = datagram;
    std::iter::from_fn(move || {
        let header = rest.get(..NLMSG_HDRLEN)?;
        let len = u32::from_ne_bytes(header[..4].try_into().ok()?) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return None;
        }
        let kind = u16::from_ne_bytes(header[4..6].try_into().ok()?);
        let flags = u16::from_ne_bytes(header[6..8].try_into().ok()?);
        let seq = u32::from_ne_bytes(header[8..12].try_into().ok()?);
        let payload = &rest[NLMSG_HDRLEN..len];
        rest = rest.get(align(len)..).unwrap_or(&[]);
        Some((kind, flags, seq, payload))
    })
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// A request being built: the netlink and generic headers, then
/// attributes.
#[derive(Debug, Clone)]
pub struct Message {
    buf: Vec<u8>,
}

impl Message {
    /// A request for command `cmd` (version `version`) of family `family`.
    pub fn new(family: u16, cmd: u8, version: u8) -> Message {
        let mut buf = vec![0u8; NLMSG_HDRLEN];
        buf[4..6].copy_from_slice(&family.to_ne_bytes());
        buf.extend_from_slice(&[cmd, version, 0, 0]);
        Message { buf }
    }

    /// A `u32` attribute.
    pub fn u32(&mut self, ty: u16, value: u32) -> &mut Self {
        self.bytes(ty, &value.to_ne_bytes())
    }

    /// A NUL-terminated string attribute.
    pub fn string(&mut self, ty: u16, value: &str) -> &mut Self {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.bytes(ty, &bytes)
    }

    /// A binary attribute (may be empty).
    pub fn bytes(&mut self, ty: u16, value: &[u8]) -> &mut Self {
        let len = u16::try_from(NLA_HDRLEN + value.len()).expect("attribute under 64 KiB");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.pad();
        self
    }

    /// A nested attribute holding what `fill` adds.
    pub fn nest(&mut self, ty: u16, fill: impl FnOnce(&mut Message)) -> &mut Self {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        fill(self);
        let len = u16::try_from(self.buf.len() - start).expect("nest under 64 KiB");
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    fn pad(&mut self) {
        self.buf.resize(align(self.buf.len()), 0);
    }

    /// The message with its length, flags and sequence number set.
    fn finish(&mut self, flags: u16, seq: u32) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[6..8].copy_from_slice(&flags.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        &self.buf
    }

    /// The attributes added so far (tests).
    #[cfg(test)]
    pub(crate) fn attributes(&self) -> &[u8] {
        &self.buf[NLMSG_HDRLEN + GENL_HDRLEN..]
    }
}

/// The attributes of `buf`: type (without the nested and byte-order
/// flags) and payload; stops at the first malformed one.
pub fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let header = rest.get(..NLA_HDRLEN)?;
        let len = u16::from_ne_bytes([header[0], header[1]]) as usize;
        let ty = u16::from_ne_bytes([header[2], header[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > rest.len() {
            return None;
        }
        let payload = &rest[NLA_HDRLEN..len];
        rest = rest.get(align(len)..).unwrap_or(&[]);
        Some((ty, payload))
    })
}

/// The first attribute of type `ty` in `buf`.
pub fn attr(buf: &[u8], ty: u16) -> Option<&[u8]> {
    attrs(buf).find(|&(t, _)| t == ty).map(|(_, p)| p)
}

/// A `u32` payload.
pub fn u32_of(payload: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(payload.get(..4)?.try_into().ok()?))
}

fn u16_of(payload: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(payload.get(..2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_nests_flagged() {
        let mut m = Message::new(0x15, 38, 1);
        m.nest(1, |h| {
            h.u32(1, 7);
        })
        .bytes(4, &[1, 2, 3])
        .bytes(4, &[]);
        let a = m.attributes();
        // nest: len 12, type 1|NESTED, then u32 attr (len 8, type 1, 7)
        assert_eq!(&a[..4], &[12, 0, 1, 0x80]);
        assert_eq!(&a[4..12], &[8, 0, 1, 0, 7, 0, 0, 0]);
        // 3 bytes padded to 4
        assert_eq!(&a[12..20], &[7, 0, 4, 0, 1, 2, 3, 0]);
        // an empty attribute is its header alone
        assert_eq!(&a[20..], &[4, 0, 4, 0]);
        let parsed: Vec<_> = attrs(a).collect();
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[0].0, 1);
        assert_eq!(attr(parsed[0].1, 1).and_then(u32_of), Some(7));
        assert_eq!(parsed[1], (4, &[1u8, 2, 3][..]));
        assert_eq!(parsed[2], (4, &[][..]));
    }

    #[test]
    fn a_truncated_attribute_ends_the_walk() {
        let buf = [8u8, 0, 1, 0, 7, 0, 0, 0, 12, 0, 2, 0, 1];
        assert_eq!(attrs(&buf).count(), 1);
        assert_eq!(attrs(&[3u8, 0, 1, 0]).count(), 0);
    }

    #[test]
    fn the_kernel_message_is_read_from_an_extended_ack() {
        // nlmsgerr: error -22, the capped request header, then
        // NLMSGERR_ATTR_MSG "bad table\0".
        let mut payload = (-22i32).to_ne_bytes().to_vec();
        payload.extend_from_slice(&[0u8; NLMSG_HDRLEN]);
        payload.extend_from_slice(&[14, 0, 1, 0]);
        payload.extend_from_slice(b"bad table\0");
        payload.extend_from_slice(&[0, 0]);
        assert_eq!(
            ack_message(&payload, NLM_F_ACK_TLVS | NLM_F_CAPPED).as_deref(),
            Some("bad table")
        );
        assert_eq!(ack_message(&payload, NLM_F_CAPPED), None);
    }

    #[test]
    fn the_controller_and_a_missing_family() {
        let mut genl = Genl::open().expect("a generic netlink socket");
        let ctrl = genl.family("nlctrl").unwrap().expect("nlctrl");
        assert_eq!(ctrl.id, GENL_ID_CTRL);
        assert!(ctrl.supports(CTRL_CMD_GETFAMILY));
        assert_eq!(genl.family("rsspp-nofam").unwrap(), None);
        // A refusal carries the kernel's own words (names are at most 15
        // bytes).
        let e = genl.family("rsspp-name-too-long").unwrap_err();
        assert!(e.is(libc::EINVAL), "{e}");
        assert!(e.message.is_some(), "{e}");
    }
}
