//! [`Ethtool`]: a real interface's RSS table, through ethtool's netlink
//! messages where this kernel has them, else the `SIOCETHTOOL` ioctls.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::netlink::{EthtoolNetlink, RSS_GET, RSS_SET};
use super::wire;
use super::{
    check_table, Errno, EthtoolError, FlowRule, HashFunction, RssConfig, RssDevice, RuleTable,
};
use crate::genl::Refused;

/// Largest indirection table accepted from a driver (hardware tables have
/// 64 to 2048 entries; the core crate's limit is 65536).
const MAX_TABLE: u32 = 1 << 16;
/// Largest hash key accepted from a driver (hardware keys are 40 or 52 bytes).
const MAX_KEY: u32 = 1 << 12;

/// An interface's RSS configuration: its main table, or one additional RSS
/// context ([`Ethtool::context`]).
///
/// The interface is held by its index, so a rename is followed and an
/// interface deleted and made again under the same name is not mistaken
/// for it. Netlink (`ETHTOOL_MSG_RSS_GET`, Linux 6.2; `ETHTOOL_MSG_RSS_SET`,
/// 6.17) addresses it by that index; the ioctls, which need a name, look
/// the name up again for each call. Both go through sockets of the network
/// namespace of the thread that opened them.
#[derive(Debug)]
pub struct Ethtool {
    iface: String,
    ifindex: u32,
    context: u32,
    socket: OwnedFd,
    netlink: Option<EthtoolNetlink>,
}

/// How the table is read and written on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    /// `ETHTOOL_MSG_RSS_GET` and `ETHTOOL_MSG_RSS_SET`.
    Netlink,
    /// `ETHTOOL_MSG_RSS_GET`, and the ioctls to write (Linux 6.2 to 6.16).
    NetlinkReadIoctlWrite,
    /// The `SIOCETHTOOL` ioctls.
    Ioctl,
}

impl std::fmt::Display for Interface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Interface::Netlink => "ethtool netlink (ETHTOOL_MSG_RSS_GET/RSS_SET)",
            Interface::NetlinkReadIoctlWrite => {
                "ethtool netlink to read, the ioctls to write (no ETHTOOL_MSG_RSS_SET before Linux 6.17)"
            }
            Interface::Ioctl => "the ethtool ioctls (no ethtool netlink RSS messages here)",
        })
    }
}

/// The errno of an ioctl, with its name for messages.
struct Refusal {
    op: &'static str,
    errno: Errno,
}

impl Refusal {
    fn is(&self, errno: i32) -> bool {
        self.errno.0 == errno
    }
}

fn op_name(cmd: u32) -> &'static str {
    match cmd {
        wire::GRXRINGS => "ETHTOOL_GRXRINGS",
        wire::GRXFHINDIR => "ETHTOOL_GRXFHINDIR",
        wire::SRXFHINDIR => "ETHTOOL_SRXFHINDIR",
        wire::GCHANNELS => "ETHTOOL_GCHANNELS",
        wire::GRSSH => "ETHTOOL_GRSSH",
        wire::SRSSH => "ETHTOOL_SRSSH",
        wire::GRXCLSRLCNT => "ETHTOOL_GRXCLSRLCNT",
        wire::GRXCLSRLALL => "ETHTOOL_GRXCLSRLALL",
        wire::SRXCLSRLDEL => "ETHTOOL_SRXCLSRLDEL",
        wire::SRXCLSRLINS => "ETHTOOL_SRXCLSRLINS",
        _ => "SIOCETHTOOL",
    }
}

/// Checks a name against what `ifr_name` can hold and what the kernel
/// accepts as an interface name (`dev_valid_name`).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
}

impl Ethtool {
    /// Opens `iface` in the calling thread's network namespace.
    pub fn open(iface: &str) -> Result<Self, EthtoolError> {
        if !valid_name(iface) {
            return Err(EthtoolError::BadName {
                name: iface.to_string(),
            });
        }
        let socket = open_socket()?;
        let c_name = CString::new(iface).map_err(|_| EthtoolError::BadName {
            name: iface.to_string(),
        })?;
        // SAFETY: `c_name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
        if ifindex == 0 {
            return Err(EthtoolError::NoSuchInterface {
                iface: iface.to_string(),
            });
        }
        Ok(Self {
            iface: iface.to_string(),
            ifindex,
            context: 0,
            socket,
            netlink: EthtoolNetlink::open(),
        })
    }

    /// The same interface's RSS context `context` (0: the main table),
    /// checked to exist: what [`RssDevice`] reads and writes from then on.
    /// Contexts are made by `ethtool -X IF context new`.
    pub fn context(mut self, context: u32) -> Result<Self, EthtoolError> {
        self.context = context;
        if context != 0 {
            self.rss()?;
        }
        Ok(self)
    }

    /// The RSS context this handle reads and writes (0: the main table).
    pub fn rss_context(&self) -> u32 {
        self.context
    }

    /// How this kernel lets the table be read and written.
    pub fn interface(&self) -> Interface {
        match &self.netlink {
            Some(nl) if nl.supports(RSS_SET) => Interface::Netlink,
            Some(nl) if nl.supports(RSS_GET) => Interface::NetlinkReadIoctlWrite,
            _ => Interface::Ioctl,
        }
    }

    /// The netlink socket, when this kernel has command `cmd`.
    fn netlink_for(&mut self, cmd: u8) -> Option<&mut EthtoolNetlink> {
        self.netlink.as_mut().filter(|nl| nl.supports(cmd))
    }

    /// The interface's name now (it may have been renamed since it was
    /// opened); `ENODEV` once it is gone.
    fn current_name(&self) -> Result<[libc::c_char; libc::IFNAMSIZ], Errno> {
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        // SAFETY: `name` has room for IFNAMSIZ bytes, as if_indextoname needs.
        let found = unsafe { libc::if_indextoname(self.ifindex, name.as_mut_ptr()) };
        if found.is_null() {
            return Err(Errno(libc::ENODEV));
        }
        Ok(name)
    }

    /// The error for a netlink refusal of `op`.
    fn netlink_error(&self, op: &'static str, r: Refused) -> EthtoolError {
        let iface = self.iface.clone();
        match r.errno.0 {
            libc::ENODEV => EthtoolError::NoSuchInterface { iface },
            libc::EPERM | libc::EACCES => EthtoolError::PermissionDenied {
                iface,
                op,
                errno: r.errno,
            },
            libc::ENOENT if self.context != 0 => EthtoolError::NoContext {
                iface,
                context: self.context,
            },
            _ => EthtoolError::Netlink {
                iface,
                op,
                errno: r.errno,
                message: r.message.unwrap_or_default(),
            },
        }
    }

    /// The refusal of an ioctl on a context, where the driver has none or
    /// not that one.
    fn context_refusal(&self, r: &Refusal) -> Option<EthtoolError> {
        if self.context == 0 {
            return None;
        }
        let iface = self.iface.clone();
        match r.errno.0 {
            libc::ENOENT => Some(EthtoolError::NoContext {
                iface,
                context: self.context,
            }),
            libc::EOPNOTSUPP => Some(EthtoolError::NoContexts {
                iface,
                context: self.context,
            }),
            _ => None,
        }
    }

    /// One `SIOCETHTOOL` call on a request buffer built by `wire` for
    /// command `cmd` (named in errors): the buffer is as large as the
    /// kernel's structure for that command and the sizes written in it.
    fn ioctl<T>(&self, cmd: u32, buf: &mut [T]) -> Result<(), Refusal> {
        let name = self.current_name().map_err(|errno| Refusal {
            op: op_name(cmd),
            errno,
        })?;
        // SAFETY: all-zero is a valid `ifreq` (a name and a union of
        // integers and pointers).
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        req.ifr_name = name;
        req.ifr_ifru.ifru_data = buf.as_mut_ptr().cast();
        // SAFETY: `req` names the interface and points `ifr_data` at a buffer
        // of the size the kernel reads and writes for this command (`wire`).
        let rc = unsafe {
            libc::ioctl(
                self.socket.as_raw_fd(),
                libc::SIOCETHTOOL as _,
                &mut req as *mut libc::ifreq,
            )
        };
        if rc < 0 {
            Err(Refusal {
                op: op_name(cmd),
                errno: Errno::last(),
            })
        } else {
            Ok(())
        }
    }

    /// The error for a refusal that has no more specific meaning.
    fn error(&self, r: Refusal) -> EthtoolError {
        let iface = self.iface.clone();
        match r.errno.0 {
            libc::ENODEV => EthtoolError::NoSuchInterface { iface },
            libc::EPERM | libc::EACCES => EthtoolError::PermissionDenied {
                iface,
                op: r.op,
                errno: r.errno,
            },
            _ => EthtoolError::Ioctl {
                iface,
                op: r.op,
                errno: r.errno,
            },
        }
    }

    fn no_table(&self, r: Refusal) -> EthtoolError {
        EthtoolError::NoTable {
            iface: self.iface.clone(),
            op: r.op,
            errno: r.errno,
        }
    }

    fn check_size(&self, what: &'static str, size: u32, limit: u32) -> Result<(), EthtoolError> {
        if size > limit {
            return Err(EthtoolError::Implausible {
                iface: self.iface.clone(),
                what,
                size: size.into(),
                limit: limit.into(),
            });
        }
        Ok(())
    }

    /// The `ETHTOOL_GRSSH` header alone: table and key sizes, hash function,
    /// input transformation.
    fn rssh_sizes(&self) -> Result<wire::RxfhHeader, Refusal> {
        let mut buf = wire::rxfh_size_query(self.context);
        self.ioctl(wire::GRSSH, &mut buf)?;
        Ok(wire::rxfh_header(&buf))
    }

    /// The legacy table size (`ETHTOOL_GRXFHINDIR` with size 0).
    fn legacy_size(&self) -> Result<u32, Refusal> {
        let mut buf = wire::rxfh_indir_get(0);
        self.ioctl(wire::GRXFHINDIR, &mut buf)?;
        Ok(wire::rxfh_indir_size(&buf))
    }

    fn legacy_rss(&self, rssh: Refusal) -> Result<RssConfig, EthtoolError> {
        let size = match self.legacy_size() {
            Ok(size) => size,
            // Report the modern ioctl's refusal: the legacy one is a fallback.
            Err(r) if r.is(libc::EOPNOTSUPP) => return Err(self.no_table(rssh)),
            Err(r) => return Err(self.error(r)),
        };
        if size == 0 {
            return Err(self.no_table(rssh));
        }
        self.check_size("indirection table size", size, MAX_TABLE)?;
        let mut buf = wire::rxfh_indir_get(size);
        self.ioctl(wire::GRXFHINDIR, &mut buf)
            .map_err(|r| self.error(r))?;
        Ok(RssConfig {
            indirection: wire::rxfh_indir_entries(&buf),
            key: Vec::new(),
            hfunc: HashFunction::Unknown,
        })
    }

    /// `table` through `ETHTOOL_SRXFHINDIR`, for drivers without
    /// `ETHTOOL_SRSSH`; `rssh` is the modern ioctl's refusal, reported if the
    /// legacy one is refused as well.
    fn legacy_set(&mut self, table: &[u32], rssh: Refusal) -> Result<(), EthtoolError> {
        let size = match self.legacy_size() {
            Ok(0) => return Err(self.not_writable(rssh)),
            Ok(size) => size,
            Err(r) if r.is(libc::EOPNOTSUPP) => return Err(self.not_writable(rssh)),
            Err(r) => return Err(self.error(r)),
        };
        let queues = self.rx_queues()?;
        check_table(&self.iface, table, size as usize, queues)?;
        let mut buf = wire::rxfh_indir_set(table);
        match self.ioctl(wire::SRXFHINDIR, &mut buf) {
            Ok(()) => Ok(()),
            // Name the modern ioctl's refusal: the legacy one is a fallback.
            Err(r) if r.is(libc::EOPNOTSUPP) => Err(self.not_writable(rssh)),
            Err(r) => Err(self.error(r)),
        }
    }

    fn not_writable(&self, r: Refusal) -> EthtoolError {
        EthtoolError::NotWritable {
            iface: self.iface.clone(),
            op: r.op,
            errno: r.errno,
        }
    }

    /// [`RssDevice::rss`] through `ETHTOOL_GRSSH` (`ETHTOOL_GRXFHINDIR` for
    /// drivers without it): two steps, the sizes, then a buffer of exactly
    /// those sizes (the kernel refuses any other with EINVAL).
    fn ioctl_rss(&mut self) -> Result<RssConfig, EthtoolError> {
        let header = match self.rssh_sizes() {
            Ok(h) => h,
            Err(r) => {
                if let Some(e) = self.context_refusal(&r) {
                    return Err(e);
                }
                if r.is(libc::EOPNOTSUPP) {
                    return self.legacy_rss(r);
                }
                return Err(self.error(r));
            }
        };
        if header.indir_size == 0 {
            // A driver with a key but no table.
            return self.legacy_rss(Refusal {
                op: "ETHTOOL_GRSSH",
                errno: Errno(libc::EOPNOTSUPP),
            });
        }
        self.check_size("indirection table size", header.indir_size, MAX_TABLE)?;
        self.check_size("hash key size", header.key_size, MAX_KEY)?;
        let mut buf = wire::rxfh_get(self.context, header.indir_size, header.key_size);
        self.ioctl(wire::GRSSH, &mut buf)
            .map_err(|r| self.error(r))?;
        let reply = wire::rxfh_header(&buf);
        let (indirection, key) = wire::rxfh_contents(&buf, header.indir_size, header.key_size);
        Ok(RssConfig {
            indirection,
            key,
            hfunc: HashFunction::from_bits(reply.hfunc),
        })
    }

    /// [`RssDevice::set_indirection`] through `ETHTOOL_SRSSH`
    /// (`ETHTOOL_SRXFHINDIR` for drivers without it).
    fn ioctl_set(&mut self, table: &[u32]) -> Result<(), EthtoolError> {
        // The table first: on a device without one, that is the news, not
        // a missing queue count.
        let header = match self.rssh_sizes() {
            Ok(h) if h.indir_size > 0 => h,
            Ok(_) => {
                let no_table = Refusal {
                    op: "ETHTOOL_GRSSH",
                    errno: Errno(libc::EOPNOTSUPP),
                };
                return self.legacy_set(table, no_table);
            }
            Err(r) => {
                if let Some(e) = self.context_refusal(&r) {
                    return Err(e);
                }
                if r.is(libc::EOPNOTSUPP) {
                    return self.legacy_set(table, r);
                }
                return Err(self.error(r));
            }
        };
        let queues = self.rx_queues()?;
        check_table(&self.iface, table, header.indir_size as usize, queues)?;
        let mut buf = wire::rxfh_set_indirection(self.context, table, header.input_xfrm);
        match self.ioctl(wire::SRSSH, &mut buf) {
            Ok(()) => Ok(()),
            Err(r) if r.is(libc::EOPNOTSUPP) && self.context == 0 => self.legacy_set(table, r),
            Err(r) => Err(self.error(r)),
        }
    }

    /// [`RssDevice::reset_indirection`] through the ioctls: a table of size
    /// 0, through `ETHTOOL_SRXFHINDIR` for the main table (which every
    /// driver with a writable table takes) and `ETHTOOL_SRSSH` for a
    /// context (the legacy ioctl has none).
    fn ioctl_reset(&mut self) -> Result<(), EthtoolError> {
        let result = if self.context == 0 {
            let mut buf = wire::rxfh_indir_set(&[]);
            self.ioctl(wire::SRXFHINDIR, &mut buf)
        } else {
            let input_xfrm = self
                .rssh_sizes()
                .map(|h| h.input_xfrm)
                .map_err(|r| self.context_refusal(&r).unwrap_or_else(|| self.error(r)))?;
            let mut buf = wire::rxfh_set_indirection(self.context, &[], input_xfrm);
            self.ioctl(wire::SRSSH, &mut buf)
        };
        result.map_err(|r| {
            if r.is(libc::EOPNOTSUPP) {
                self.not_writable(r)
            } else {
                self.error(r)
            }
        })
    }
}

fn open_socket() -> Result<OwnedFd, EthtoolError> {
    // SAFETY: plain socket(2) calls; a non-negative result is a new fd we own.
    unsafe {
        let mut fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            // A kernel without IPv4: ethtool(8) falls back to a netlink
            // socket, which carries SIOCETHTOOL as well.
            fd = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            );
        }
        if fd < 0 {
            return Err(EthtoolError::Socket {
                errno: Errno::last(),
            });
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

impl RssDevice for Ethtool {
    fn name(&self) -> &str {
        &self.iface
    }

    fn rss(&mut self) -> Result<RssConfig, EthtoolError> {
        let (ifindex, context) = (self.ifindex, self.context);
        if let Some(nl) = self.netlink_for(RSS_GET) {
            match nl.rss_get(ifindex, context) {
                Ok(reply) if !reply.indirection.is_empty() => {
                    return Ok(RssConfig {
                        indirection: reply.indirection,
                        key: reply.key,
                        hfunc: HashFunction::from_bits(reply.hfunc as u8),
                    })
                }
                // No table, or no RSS at all: the ioctls say which, as before.
                Ok(_) => {}
                Err(r) if r.is(libc::EOPNOTSUPP) => {}
                Err(r) => return Err(self.netlink_error("ETHTOOL_MSG_RSS_GET", r)),
            }
        }
        self.ioctl_rss()
    }

    fn set_indirection(&mut self, table: &[u32]) -> Result<(), EthtoolError> {
        if self.netlink_for(RSS_SET).is_none() {
            return self.ioctl_set(table);
        }
        // Checked first, so that the error names the entry. A device
        // without a table: the ioctls' answer says it is not writable.
        let size = match self.rss() {
            Ok(rss) => rss.indirection.len(),
            Err(EthtoolError::NoTable { .. }) => return self.ioctl_set(table),
            Err(e) => return Err(e),
        };
        let queues = self.rx_queues()?;
        check_table(&self.iface, table, size, queues)?;
        let (ifindex, context) = (self.ifindex, self.context);
        let nl = self.netlink_for(RSS_SET).expect("checked above");
        match nl.rss_set(ifindex, context, table) {
            Ok(()) => Ok(()),
            Err(r) if r.is(libc::EOPNOTSUPP) => self.ioctl_set(table),
            Err(r) => Err(self.netlink_error("ETHTOOL_MSG_RSS_SET", r)),
        }
    }

    fn reset_indirection(&mut self) -> Result<(), EthtoolError> {
        // An empty table asks the kernel for the driver's default, and
        // clears its "set by the user" mark, so that `ethtool -L` may change
        // the queues again.
        let (ifindex, context) = (self.ifindex, self.context);
        if let Some(nl) = self.netlink_for(RSS_SET) {
            match nl.rss_set(ifindex, context, &[]) {
                Ok(()) => return Ok(()),
                Err(r) if r.is(libc::EOPNOTSUPP) => {}
                Err(r) => return Err(self.netlink_error("ETHTOOL_MSG_RSS_SET", r)),
            }
        }
        self.ioctl_reset()
    }

    fn rx_queues(&mut self) -> Result<u32, EthtoolError> {
        // ETHTOOL_GRXRINGS is the count the kernel checks table entries
        // against; ETHTOOL_GCHANNELS is what drivers without it offer.
        let mut rings = wire::rxnfc_rings();
        let rings_answer = match self.ioctl(wire::GRXRINGS, &mut rings) {
            Ok(()) => match wire::rxnfc_data(&rings) {
                0 => "ETHTOOL_GRXRINGS: 0 rings".to_string(),
                n => return Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            },
            Err(r) if r.is(libc::EOPNOTSUPP) => format!("{}: {}", r.op, r.errno),
            Err(r) => return Err(self.error(r)),
        };
        let mut channels = wire::channels_get();
        let channels_answer = match self.ioctl(wire::GCHANNELS, &mut channels) {
            Ok(()) => match wire::channels_rx(&channels) {
                0 => "ETHTOOL_GCHANNELS: 0 RX channels".to_string(),
                n => return Ok(n),
            },
            Err(r) if r.is(libc::EOPNOTSUPP) => format!("{}: {}", r.op, r.errno),
            Err(r) => return Err(self.error(r)),
        };
        Err(EthtoolError::NoQueueCount {
            iface: self.iface.clone(),
            detail: format!("{rings_answer}; {channels_answer}"),
        })
    }

    fn rule_table(&mut self) -> Result<RuleTable, EthtoolError> {
        let no_rules = |r: Refusal| EthtoolError::NoRules {
            iface: self.iface.clone(),
            op: r.op,
            errno: r.errno,
        };
        let mut count = wire::rxnfc_rule_count_get();
        match self.ioctl(wire::GRXCLSRLCNT, &mut count) {
            Ok(()) => {}
            // No get_rxnfc, or none for rules (virtio-net, veth), or the
            // ntuple-filters feature off (EINVAL in some drivers).
            Err(r) if r.is(libc::EOPNOTSUPP) || r.is(libc::EINVAL) => return Err(no_rules(r)),
            Err(r) => return Err(self.error(r)),
        }
        // The top bit says the driver can also pick a location itself.
        let size = (wire::rxnfc_data(&count) & 0x7fff_ffff) as u32;
        let in_use = wire::rxnfc_rule_count(&count);
        self.check_size("ntuple rule table", size, MAX_RULES)?;
        self.check_size("ntuple rules in use", in_use, size)?;
        if size == 0 {
            return Err(no_rules(Refusal {
                op: op_name(wire::GRXCLSRLCNT),
                errno: Errno(libc::EOPNOTSUPP),
            }));
        }
        let mut used = Vec::new();
        if in_use > 0 {
            let mut all = wire::rxnfc_rule_all_get(in_use);
            self.ioctl(wire::GRXCLSRLALL, &mut all)
                .map_err(|r| self.error(r))?;
            used = wire::rxnfc_rule_locations(&all, in_use);
            used.sort_unstable();
        }
        Ok(RuleTable { size, used })
    }

    fn insert_rule(&mut self, rule: &FlowRule) -> Result<(), EthtoolError> {
        let mut buf = wire::rxnfc_rule_insert(rule);
        self.ioctl(wire::SRXCLSRLINS, &mut buf)
            .map_err(|r| match r.errno.0 {
                libc::EPERM | libc::EACCES | libc::ENODEV => self.error(r),
                _ => EthtoolError::RuleRefused {
                    iface: self.iface.clone(),
                    rule: rule.to_string(),
                    errno: r.errno,
                },
            })
    }

    fn delete_rule(&mut self, location: u32) -> Result<(), EthtoolError> {
        let mut buf = wire::rxnfc_rule_delete(location);
        self.ioctl(wire::SRXCLSRLDEL, &mut buf)
            .map_err(|r| self.error(r))
    }
}

/// The largest ntuple rule table believed: NICs have some thousands.
const MAX_RULES: u32 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernel_would_refuse_are_refused() {
        for bad in ["", "a/b", "a:b", "a b", ".", "..", "sixteen-chars-xx"] {
            assert!(
                matches!(Ethtool::open(bad), Err(EthtoolError::BadName { .. })),
                "{bad:?}"
            );
        }
        assert!(valid_name("fifteen-chars-x"));
    }
}
