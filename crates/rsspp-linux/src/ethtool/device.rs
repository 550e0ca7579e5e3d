//! [`Ethtool`]: the `SIOCETHTOOL` ioctls on a real interface.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::wire;
use super::{check_table, Errno, EthtoolError, HashFunction, RssConfig, RssDevice};

/// Largest indirection table accepted from a driver (hardware tables have
/// 64 to 2048 entries; the core crate's limit is 65536).
const MAX_TABLE: u32 = 1 << 16;
/// Largest hash key accepted from a driver (hardware keys are 40 or 52 bytes).
const MAX_KEY: u32 = 1 << 12;

/// An interface's RSS configuration through the ethtool ioctls.
///
/// The ioctls go through an `AF_INET` datagram socket, as ethtool(8) does;
/// the socket belongs to the network namespace of the thread that opened
/// it, so the interface is looked up there.
#[derive(Debug)]
pub struct Ethtool {
    iface: String,
    name: [libc::c_char; libc::IFNAMSIZ],
    socket: OwnedFd,
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
        if unsafe { libc::if_nametoindex(c_name.as_ptr()) } == 0 {
            return Err(EthtoolError::NoSuchInterface {
                iface: iface.to_string(),
            });
        }
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        for (dst, &src) in name.iter_mut().zip(iface.as_bytes()) {
            *dst = src as libc::c_char;
        }
        Ok(Self {
            iface: iface.to_string(),
            name,
            socket,
        })
    }

    /// One `SIOCETHTOOL` call on a request buffer built by `wire` for
    /// command `cmd` (named in errors): the buffer is as large as the
    /// kernel's structure for that command and the sizes written in it.
    fn ioctl<T>(&self, cmd: u32, buf: &mut [T]) -> Result<(), Refusal> {
        // SAFETY: all-zero is a valid `ifreq` (a name and a union of
        // integers and pointers).
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        req.ifr_name = self.name;
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
        let mut buf = wire::rxfh_size_query();
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
        // Two steps: the sizes, then a buffer of exactly those sizes (the
        // kernel refuses any other with EINVAL).
        let header = match self.rssh_sizes() {
            Ok(h) => h,
            Err(r) if r.is(libc::EOPNOTSUPP) => return self.legacy_rss(r),
            Err(r) => return Err(self.error(r)),
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
        let mut buf = wire::rxfh_get(header.indir_size, header.key_size);
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

    fn set_indirection(&mut self, table: &[u32]) -> Result<(), EthtoolError> {
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
            Err(r) if r.is(libc::EOPNOTSUPP) => return self.legacy_set(table, r),
            Err(r) => return Err(self.error(r)),
        };
        let queues = self.rx_queues()?;
        check_table(&self.iface, table, header.indir_size as usize, queues)?;
        let mut buf = wire::rxfh_set_indirection(table, header.input_xfrm);
        match self.ioctl(wire::SRSSH, &mut buf) {
            Ok(()) => Ok(()),
            Err(r) if r.is(libc::EOPNOTSUPP) => self.legacy_set(table, r),
            Err(r) => Err(self.error(r)),
        }
    }

    fn reset_indirection(&mut self) -> Result<(), EthtoolError> {
        // A table of size 0 asks the kernel for the driver's default, and
        // clears its "set by the user" mark (IFF_RXFH_CONFIGURED).
        let mut buf = wire::rxfh_indir_set(&[]);
        self.ioctl(wire::SRXFHINDIR, &mut buf).map_err(|r| {
            if r.is(libc::EOPNOTSUPP) {
                self.not_writable(r)
            } else {
                self.error(r)
            }
        })
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
}

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
