//! What went wrong with the XDP programs: an [`XdpError`] names the
//! interface once and says what went wrong there ([`XdpErrorKind`]), with
//! the OS or libbpf error as its source.

use std::fmt;
use std::io;

use super::options::{
    AttachMode, MAX_CPUMAP_QUEUE, MAX_OVERRIDE_SLOTS, MAX_RETA_SIZE, MAX_STEERING_CPU,
};
use crate::cpu::CpuError;

/// What went wrong with the XDP programs of one interface.
#[derive(Debug)]
pub struct XdpError {
    iface: String,
    kind: XdpErrorKind,
}

impl XdpError {
    /// `kind` on `iface`.
    pub fn new(iface: impl Into<String>, kind: XdpErrorKind) -> Self {
        Self {
            iface: iface.into(),
            kind,
        }
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// What went wrong.
    pub fn kind(&self) -> &XdpErrorKind {
        &self.kind
    }

    /// A failed system call (`errno` positive): [`XdpErrorKind::Permission`]
    /// for EPERM and EACCES, else [`XdpErrorKind::Os`].
    pub(super) fn os(iface: &str, what: &'static str, errno: i32) -> Self {
        let source = io::Error::from_raw_os_error(errno);
        let kind = if errno == libc::EPERM || errno == libc::EACCES {
            XdpErrorKind::Permission { what, source }
        } else {
            XdpErrorKind::Os { what, source }
        };
        Self::new(iface, kind)
    }

    /// A failed libbpf call.
    pub(super) fn bpf(iface: &str, what: &'static str, source: libbpf_rs::Error) -> Self {
        Self::new(iface, XdpErrorKind::Bpf { what, source })
    }
}

impl fmt::Display for XdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.iface, self.kind)
    }
}

impl std::error::Error for XdpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The interface is this error's only addition: the kind's source
        // is the cause.
        std::error::Error::source(&self.kind)
    }
}

/// What went wrong, on the interface of the [`XdpError`].
#[derive(Debug, thiserror::Error)]
pub enum XdpErrorKind {
    /// No interface of that name in this network namespace.
    #[error("no such interface in this network namespace")]
    UnknownInterface,
    /// Missing privileges.
    #[error("{what}: {source}: run as root (needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN)")]
    Permission {
        /// What was refused.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The kernel lacks a feature.
    #[error("this kernel does not support {feature}")]
    Unsupported {
        /// `XDP`, `CPUMAP`, ...
        feature: &'static str,
    },
    /// The driver has no native XDP.
    #[error(
        "native XDP attach refused ({0}); the driver may lack XDP support: try --xdp-mode skb"
    )]
    NativeUnsupported(#[source] io::Error),
    /// The RX-hash program could not be bound to the device.
    #[error("loading the RX-hash program bound to the device failed ({0}); it needs a driver with native XDP and Linux 6.3 or later: count with the Toeplitz hash instead")]
    RxHashUnsupported(#[source] libbpf_rs::Error),
    /// Device-bound programs cannot run in generic mode.
    #[error("the NIC's RX hash is only readable in native mode, not skb mode")]
    RxHashNeedsNative,
    /// The kernel does not test-run device-bound programs.
    #[error("BPF_PROG_TEST_RUN refused (EINVAL): the kernel does not test-run the RX-hash program, which is bound to the device")]
    TestRunDeviceBound,
    /// A table size that is not a power of two in range.
    #[error("indirection table size {0} is not a power of two between 1 and {MAX_RETA_SIZE}")]
    TableSize(usize),
    /// Steering without CPUs.
    #[error("steering needs at least one CPU")]
    NoCpus,
    /// A CPUMAP queue length out of range.
    #[error("CPUMAP queue length {0} is not between 1 and {MAX_CPUMAP_QUEUE}")]
    QueueSize(u32),
    /// Order-preserving moves asked for in skb mode.
    #[error("order-preserving moves need native mode: in skb mode the kernel passes no XDP metadata to the CPUMAP program")]
    OrderedMovesNeedNative,
    /// More override slots than the programs take.
    #[error("{0} per-flow overrides: at most {MAX_OVERRIDE_SLOTS}")]
    OverrideSlots(usize),
    /// An override slot past the ones loaded.
    #[error("override slot {slot} is outside the {slots} loaded")]
    SlotOutOfRange {
        /// The slot.
        slot: usize,
        /// Slots loaded.
        slots: usize,
    },
    /// A CPU number too high for the table's entries.
    #[error("CPU {0} is above {MAX_STEERING_CPU}, the highest a steering table can name")]
    CpuTooHigh(u32),
    /// Ordered moves were not loaded.
    #[error("this program was loaded without order-preserving moves")]
    NoHandoffs,
    /// A CPU that is not online.
    #[error("CPU {cpu} is offline or does not exist (online: {online})")]
    CpuOffline {
        /// The CPU.
        cpu: u32,
        /// The online CPUs, in list format.
        online: String,
    },
    /// The online CPUs cannot be read.
    #[error(transparent)]
    Cpus(#[from] CpuError),
    /// Another program is attached and `force` is off.
    #[error(
        "another XDP program (id {prog_id}, {name:?}, {mode} mode) is attached; --force replaces it"
    )]
    AlreadyAttached {
        /// Its program id.
        prog_id: u32,
        /// Its name.
        name: String,
        /// Its mode.
        mode: &'static str,
    },
    /// Another program is attached through a BPF link, which no one but
    /// its owner can replace (forced or not).
    #[error("another XDP program (id {prog_id}, {name:?}, {mode} mode) is attached through a BPF link, which cannot be replaced, even forced: detach it with the tool that attached it")]
    LinkAttached {
        /// Its program id.
        prog_id: u32,
        /// Its name.
        name: String,
        /// Its mode.
        mode: &'static str,
    },
    /// rsspp's own program is attached: kept (pinned) by an earlier
    /// `rsspp run --keep`, or held by a daemon still running.
    #[error("rsspp's own XDP program (id {prog_id}, {mode} mode) is already attached: {how}")]
    OwnAttached {
        /// Its program id.
        prog_id: u32,
        /// Its mode.
        mode: &'static str,
        /// Kept or held by whom, and what to do.
        how: String,
    },
    /// The link could not be pinned (`keep`).
    #[error("pinning the XDP link at {}: {source}", path.display())]
    Pin {
        /// Where.
        path: std::path::PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Another program is attached in the other mode: the kernel allows
    /// only one of native and skb at a time.
    #[error("another XDP program (id {prog_id}) is attached in {mode} mode; it cannot be replaced from {wanted} mode")]
    ModeConflict {
        /// Its program id.
        prog_id: u32,
        /// Its mode.
        mode: &'static str,
        /// Ours.
        wanted: AttachMode,
    },
    /// Our program was replaced by someone else; it was left alone.
    #[error("the attached XDP program is no longer ours (replaced meanwhile); left as it is")]
    NotOurs,
    /// The counting programs have no indirection table.
    #[error("the counting program has no indirection table (hardware mode writes the NIC's)")]
    NoTable,
    /// A table of the wrong length.
    #[error("indirection table has {got} entries, expected {expected}")]
    TableLength {
        /// The table size.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// A bucket past the table.
    #[error("bucket {bucket} is outside the {size}-entry indirection table")]
    BucketOutOfRange {
        /// The bucket.
        bucket: usize,
        /// The table size.
        size: usize,
    },
    /// A table entry naming a CPU the program cannot steer to.
    #[error("CPU {cpu} has no CPUMAP entry (steering CPUs: {targets})")]
    CpuNotSteered {
        /// The CPU.
        cpu: u32,
        /// The CPUs with an entry, in list format.
        targets: String,
    },
    /// An output buffer of the wrong length.
    #[error("{what}: buffer has {got} slots, expected {expected}")]
    BufferLength {
        /// Which counters.
        what: &'static str,
        /// Needed length.
        expected: usize,
        /// Given length.
        got: usize,
    },
    /// libbpf did not map the object's read-only globals, so the
    /// programs' settings cannot be written.
    #[error("the BPF object's .rodata is not memory-mapped: the programs' settings cannot be set")]
    NoRodata,
    /// A libbpf call failed.
    #[error("{what}: {source}")]
    Bpf {
        /// What failed.
        what: &'static str,
        /// libbpf's error (with the errno).
        source: libbpf_rs::Error,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What failed.
        what: &'static str,
        /// The OS error (with the errno).
        source: io::Error,
    },
}
