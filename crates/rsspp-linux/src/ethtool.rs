//! The NIC's RSS indirection table (the main one, or an additional RSS
//! context), read and written through ethtool.
//!
//! The daemon talks to an [`RssDevice`]: [`Ethtool`] is the real one, and
//! [`FakeNic`] stands in for it in unit tests. [`Ethtool`] uses ethtool's
//! netlink messages where the kernel has them (`ETHTOOL_MSG_RSS_GET` from
//! Linux 6.2, `ETHTOOL_MSG_RSS_SET` from 6.17: the interface addressed by
//! its index, the kernel's own message on a refusal) and the ioctls
//! elsewhere (`ETHTOOL_GRSSH`/`ETHTOOL_SRSSH`, falling back to
//! `ETHTOOL_GRXFHINDIR`/`ETHTOOL_SRXFHINDIR` for drivers without them).
//! Both refuse the same tables ([`check_table`]) before anything reaches
//! the device, so that a refused write names the problem instead of a bare
//! `EINVAL`.

mod device;
mod fake;
mod netlink;
mod rules;
mod wire;

use std::fmt;

pub use device::{Ethtool, Interface};
pub use fake::FakeNic;
pub use rules::{FlowRule, RuleMatch, RuleProto, RuleTable};

/// A device whose RSS indirection table can be read and written.
pub trait RssDevice {
    /// The interface name, for messages.
    fn name(&self) -> &str;
    /// The current RSS configuration: indirection table, key, hash function.
    fn rss(&mut self) -> Result<RssConfig, EthtoolError>;
    /// Replaces the indirection table; `table` must have the device's table
    /// size and name existing RX queues only. The write is one ioctl: on
    /// error the device keeps its previous table.
    fn set_indirection(&mut self, table: &[u32]) -> Result<(), EthtoolError>;
    /// Puts the driver's default table back (entry `i` → queue `i mod n`)
    /// the way `ethtool -X IF default` does: the kernel then no longer
    /// counts the table as set by the user, and lets `ethtool -L` change
    /// the number of queues again.
    fn reset_indirection(&mut self) -> Result<(), EthtoolError>;
    /// The number of RX queues the table may name (entries `0..n`).
    fn rx_queues(&mut self) -> Result<u32, EthtoolError>;
    /// The NIC's ntuple rule table: its size and the locations in use;
    /// [`EthtoolError::NoRules`] where the driver has none (the default).
    fn rule_table(&mut self) -> Result<RuleTable, EthtoolError> {
        Err(no_rules(self.name()))
    }
    /// Inserts `rule` at its location, replacing the rule there if any.
    fn insert_rule(&mut self, _rule: &FlowRule) -> Result<(), EthtoolError> {
        Err(no_rules(self.name()))
    }
    /// Deletes the rule at `location`.
    fn delete_rule(&mut self, _location: u32) -> Result<(), EthtoolError> {
        Err(no_rules(self.name()))
    }
}

/// A device without ntuple rules, as the kernel says it
/// (`ETHTOOL_GRXCLSRLCNT`: `EOPNOTSUPP`).
fn no_rules(iface: &str) -> EthtoolError {
    EthtoolError::NoRules {
        iface: iface.to_string(),
        op: "ETHTOOL_GRXCLSRLCNT",
        errno: Errno(libc::EOPNOTSUPP),
    }
}

/// The table a driver starts with, and `ethtool -X IF default` puts back:
/// entry `i` → queue `i mod queues` (the kernel's
/// `ethtool_rxfh_indir_default`).
pub fn default_table(size: usize, queues: u32) -> Vec<u32> {
    (0..size)
        .map(|i| (i % queues.max(1) as usize) as u32)
        .collect()
}

/// Puts `original` back in `nic`: by a reset when it is the driver's
/// default for the queues the NIC has now (the kernel then no longer holds
/// the table as the user's, and `ethtool -L` may change the queues again),
/// else written as it is.
pub fn put_back<N: RssDevice + ?Sized>(nic: &mut N, original: &[u32]) -> Result<(), EthtoolError> {
    let queues = nic.rx_queues()?;
    if original == default_table(original.len(), queues).as_slice() {
        nic.reset_indirection()
    } else {
        nic.set_indirection(original)
    }
}

/// A device's RSS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssConfig {
    /// Bucket → RX queue.
    pub indirection: Vec<u32>,
    /// The hash key (empty when the driver does not report it, e.g. through
    /// the legacy `ETHTOOL_GRXFHINDIR`).
    pub key: Vec<u8>,
    /// The hash function.
    pub hfunc: HashFunction,
}

/// The RSS hash function a device uses (`ETH_RSS_HASH_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashFunction {
    /// Toeplitz (`ETH_RSS_HASH_TOP`), what RSS++ models.
    Toeplitz,
    /// XOR (`ETH_RSS_HASH_XOR`).
    Xor,
    /// CRC32 (`ETH_RSS_HASH_CRC32`).
    Crc32,
    /// A function this code does not know, as the driver's bit mask.
    Other(u8),
    /// The driver did not say.
    Unknown,
}

impl HashFunction {
    /// From the `hfunc` bit mask the kernel reports.
    pub fn from_bits(bits: u8) -> Self {
        match bits {
            0 => Self::Unknown,
            1 => Self::Toeplitz,
            2 => Self::Xor,
            4 => Self::Crc32,
            other => Self::Other(other),
        }
    }

    /// Names as `ethtool -x` prints them.
    pub const KNOWN: [(HashFunction, &'static str); 3] = [
        (Self::Toeplitz, "toeplitz"),
        (Self::Xor, "xor"),
        (Self::Crc32, "crc32"),
    ];
}

impl fmt::Display for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Toeplitz => f.write_str("toeplitz"),
            Self::Xor => f.write_str("xor"),
            Self::Crc32 => f.write_str("crc32"),
            Self::Other(bits) => write!(f, "0x{bits:02x}"),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

/// An errno value, shown as its name and description, e.g.
/// `EOPNOTSUPP (Operation not supported)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's last OS error.
    pub fn last() -> Self {
        Self(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The symbolic name, e.g. `EPERM`, for the values ethtool ioctls return.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EIO => "EIO",
            libc::ENXIO => "ENXIO",
            libc::E2BIG => "E2BIG",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EFAULT => "EFAULT",
            libc::EBUSY => "EBUSY",
            libc::ENODEV => "ENODEV",
            libc::EINVAL => "EINVAL",
            libc::ENOSPC => "ENOSPC",
            libc::ENOTTY => "ENOTTY",
            libc::ERANGE => "ERANGE",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::EAFNOSUPPORT => "EAFNOSUPPORT",
            libc::ETIMEDOUT => "ETIMEDOUT",
            libc::EPROTO => "EPROTO",
            libc::EINTR => "EINTR",
            _ => return None,
        })
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)"; the name already identifies the value.
        let suffix = format!(" (os error {})", self.0);
        let description = text.strip_suffix(&suffix).unwrap_or(&text);
        match self.name() {
            Some(name) => write!(f, "{name} ({description})"),
            None => write!(f, "errno {} ({description})", self.0),
        }
    }
}

/// Why the RSS configuration could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EthtoolError {
    /// A name the kernel cannot hold in `ifr_name`.
    #[error(
        "{name:?} is not a valid interface name (1 to 15 bytes, no '/', ':', whitespace or NUL)"
    )]
    BadName {
        /// What was given.
        name: String,
    },
    /// No interface of that name in this network namespace.
    #[error("{iface}: no such interface in this network namespace")]
    NoSuchInterface {
        /// The interface.
        iface: String,
    },
    /// The socket the ioctls go through could not be created.
    #[error("cannot open a socket for the ethtool ioctls: {errno}")]
    Socket {
        /// Why.
        errno: Errno,
    },
    /// The driver cannot report an indirection table.
    #[error("{iface}: the driver has no indirection table ({op}: {errno})")]
    NoTable {
        /// The interface.
        iface: String,
        /// The ioctl that was refused.
        op: &'static str,
        /// What it returned.
        errno: Errno,
    },
    /// The driver has no ntuple rules (`ethtool -N`), or keeps them off
    /// (the `ntuple-filters` feature).
    #[error("{iface}: the driver has no ntuple rules ({op}: {errno})")]
    NoRules {
        /// The interface.
        iface: String,
        /// The ioctl that was refused.
        op: &'static str,
        /// What it returned.
        errno: Errno,
    },
    /// The driver refused an ntuple rule.
    #[error("{iface}: the driver refused the ntuple rule `{rule}` ({errno})")]
    RuleRefused {
        /// The interface.
        iface: String,
        /// The rule, as `ethtool -N` takes it.
        rule: String,
        /// What the ioctl returned.
        errno: Errno,
    },
    /// The driver has no indirection table it lets userspace write.
    #[error("{iface}: the driver has no writable indirection table ({op}: {errno})")]
    NotWritable {
        /// The interface.
        iface: String,
        /// The ioctl that was refused.
        op: &'static str,
        /// What it returned.
        errno: Errno,
    },
    /// The driver reports no RX queue count, so no table can be checked.
    #[error("{iface}: the driver does not report its number of RX queues ({detail})")]
    NoQueueCount {
        /// The interface.
        iface: String,
        /// What each ioctl answered.
        detail: String,
    },
    /// The caller lacks `CAP_NET_ADMIN` in the interface's network namespace.
    #[error("{iface}: {op} needs CAP_NET_ADMIN ({errno}): run as root")]
    PermissionDenied {
        /// The interface.
        iface: String,
        /// The ioctl that was refused.
        op: &'static str,
        /// What it returned.
        errno: Errno,
    },
    /// A table of the wrong size (the kernel would answer `EINVAL`).
    #[error("{iface}: the device's indirection table has {expected} entries, the new table has {actual}")]
    WrongSize {
        /// The interface.
        iface: String,
        /// The device's table size.
        expected: usize,
        /// The size given.
        actual: usize,
    },
    /// A table entry naming a queue the device does not have (the kernel
    /// would answer `EINVAL`).
    #[error("{iface}: table entry {index} names RX queue {queue}, but the device has {queues} RX queue(s){}", valid_queues(*queues))]
    QueueOutOfRange {
        /// The interface.
        iface: String,
        /// The offending entry.
        index: usize,
        /// The queue it names.
        queue: u32,
        /// The device's RX queues.
        queues: u32,
    },
    /// A size reported by the driver too large to be a real table or key.
    #[error("{iface}: the driver reports a {what} of {size}, more than the {limit} rsspp accepts")]
    Implausible {
        /// The interface.
        iface: String,
        /// Which size.
        what: &'static str,
        /// The reported size.
        size: u64,
        /// The largest accepted.
        limit: u64,
    },
    /// The interface has no RSS context of that number.
    #[error("{iface}: no RSS context {context} (`ethtool -x {iface} context {context}` shows one; `ethtool -X {iface} context new …` makes one)")]
    NoContext {
        /// The interface.
        iface: String,
        /// The context asked for.
        context: u32,
    },
    /// The driver has no RSS contexts besides the main table.
    #[error("{iface}: the driver has no additional RSS contexts (asked for context {context})")]
    NoContexts {
        /// The interface.
        iface: String,
        /// The context asked for.
        context: u32,
    },
    /// A netlink request refused, with the kernel's message when it gave
    /// one.
    #[error("{iface}: {op} failed: {errno}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Netlink {
        /// The interface.
        iface: String,
        /// The request.
        op: &'static str,
        /// What it returned.
        errno: Errno,
        /// The kernel's extended-ack message (may be empty).
        message: String,
    },
    /// Any other refusal.
    #[error("{iface}: {op} failed: {errno}")]
    Ioctl {
        /// The interface.
        iface: String,
        /// The ioctl.
        op: &'static str,
        /// What it returned.
        errno: Errno,
    },
}

fn valid_queues(queues: u32) -> String {
    match queues {
        0 => String::new(),
        1 => " (only queue 0)".to_string(),
        n => format!(" (0 to {})", n - 1),
    }
}

/// Checks that `table` can replace a `size`-entry table of a device with
/// `queues` RX queues: the checks the kernel makes (`EINVAL` otherwise),
/// made first so that the error says which entry is wrong.
pub fn check_table(
    iface: &str,
    table: &[u32],
    size: usize,
    queues: u32,
) -> Result<(), EthtoolError> {
    if table.len() != size {
        return Err(EthtoolError::WrongSize {
            iface: iface.to_string(),
            expected: size,
            actual: table.len(),
        });
    }
    if let Some((index, &queue)) = table.iter().enumerate().find(|&(_, &q)| q >= queues) {
        return Err(EthtoolError::QueueOutOfRange {
            iface: iface.to_string(),
            index,
            queue,
            queues,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_table_accepts_a_table_of_the_right_shape() {
        assert_eq!(check_table("eth0", &[0, 1, 2, 3], 4, 4), Ok(()));
    }

    #[test]
    fn check_table_names_the_wrong_size() {
        let e = check_table("eth0", &[0, 1], 4, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "eth0: the device's indirection table has 4 entries, the new table has 2"
        );
    }

    #[test]
    fn check_table_names_the_entry_out_of_range() {
        let e = check_table("eth0", &[0, 1, 4, 7], 4, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "eth0: table entry 2 names RX queue 4, but the device has 4 RX queue(s) (0 to 3)"
        );
        let e = check_table("eth1", &[0, 1], 2, 1).unwrap_err();
        assert!(
            e.to_string().ends_with("has 1 RX queue(s) (only queue 0)"),
            "{e}"
        );
    }

    #[test]
    fn errno_shows_name_and_description() {
        assert_eq!(
            Errno(libc::EOPNOTSUPP).to_string(),
            "EOPNOTSUPP (Operation not supported)"
        );
        assert_eq!(
            Errno(libc::EPERM).to_string(),
            "EPERM (Operation not permitted)"
        );
        assert!(Errno(4095).to_string().starts_with("errno 4095 ("));
    }

    #[test]
    fn hash_function_bits() {
        assert_eq!(HashFunction::from_bits(1), HashFunction::Toeplitz);
        assert_eq!(HashFunction::from_bits(4).to_string(), "crc32");
        assert_eq!(HashFunction::from_bits(0), HashFunction::Unknown);
        assert_eq!(HashFunction::from_bits(8).to_string(), "0x08");
    }
}
