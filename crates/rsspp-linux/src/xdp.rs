//! The XDP programs of `src/bpf/rsspp.bpf.c`: loading, attaching, the
//! indirection table and the counters. This module is the crate's only
//! caller of libbpf.
//!
//! Life cycle: [`Xdp::load`] loads one program and fills its maps (the
//! Toeplitz key table, the configuration, the CPUMAP, an `equal`
//! indirection table) without touching the interface; [`Xdp::attach`]
//! attaches it; the daemon reads [`Xdp::bucket_packets`] and rewrites
//! entries with [`Xdp::write_entries`]; [`Xdp::detach`], or dropping the
//! [`Xdp`], puts the interface back as it was, including the program that
//! `force` replaced.
//!
//! Attaching follows xdp-tools (`xdp-loader load --mode native|skb`): a
//! netlink attachment with `XDP_FLAGS_DRV_MODE` or `XDP_FLAGS_SKB_MODE`,
//! plus `XDP_FLAGS_UPDATE_IF_NOEXIST` unless forced, so that the kernel
//! itself refuses a program attached between our check and our attach.
//! Detaching names our program (`XDP_FLAGS_REPLACE`), so it never removes
//! a program someone else attached meanwhile.
//!
//! The interface index is resolved, and the netlink calls made, in the
//! network namespace of the calling thread: load, attach and detach from
//! the same namespace.

use std::ffi::{c_void, CString};
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::str::FromStr;
use std::time::Duration;

use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{ErrorKind, MapCore, MapFlags, MapHandle, MapType, ProgramType};
use rsspp_core::flow::MAX_HASH_INPUT;
use rsspp_core::{RssKey, Toeplitz};

use crate::cpu::{CpuError, CpuList};
use crate::skel::RssppSkelBuilder;

/// Largest indirection table the programs take (`RETA_MAX` in the C code).
pub const MAX_RETA_SIZE: usize = 65_536;

/// Default length of a CPUMAP entry's queue, in frames (what xdp-tools'
/// `xdp-bench redirect-cpu` uses).
pub const DEFAULT_CPUMAP_QUEUE: u32 = 2048;

/// Longest CPUMAP queue the kernel accepts.
pub const MAX_CPUMAP_QUEUE: u32 = 16_384;

// Indices of the per-CPU `rsspp_counters` map (`enum rsspp_counter`).
const COUNTER_NOT_IP: usize = 0;
const COUNTER_MALFORMED: usize = 1;
const COUNTER_REDIRECT_FAILED: usize = 2;
const COUNTER_RX_HASH: usize = 3;
const COUNTER_RX_HASH_MISSING: usize = 4;
const COUNTERS: usize = 5;

/// How the program is attached, named as in xdp-tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`): before any socket buffer is
    /// allocated; needs driver support (veth, virtio-net, most 10G+ NICs).
    #[default]
    Native,
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`): after the socket buffer is
    /// built; works on every interface, slower.
    Skb,
}

impl AttachMode {
    /// The xdp-tools name: `native` or `skb`.
    pub fn name(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Skb => "skb",
        }
    }

    fn flags(self) -> u32 {
        match self {
            AttachMode::Native => libbpf_sys::XDP_FLAGS_DRV_MODE,
            AttachMode::Skb => libbpf_sys::XDP_FLAGS_SKB_MODE,
        }
    }
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AttachMode {
    type Err = XdpError;

    /// `native` (or `drv`) and `skb` (or `generic`).
    fn from_str(s: &str) -> Result<Self, XdpError> {
        match s {
            "native" | "drv" => Ok(AttachMode::Native),
            "skb" | "generic" => Ok(AttachMode::Skb),
            _ => Err(XdpError::BadMode(s.to_string())),
        }
    }
}

/// Where and how to load the programs.
#[derive(Debug, Clone)]
pub struct XdpOptions {
    /// Interface name.
    pub iface: String,
    /// Attach mode.
    pub attach: AttachMode,
    /// Indirection-table size: a power of two, at most [`MAX_RETA_SIZE`].
    pub reta_size: usize,
    /// The RSS key (software mode: ours; hardware mode: the NIC's).
    pub key: RssKey,
    /// Steering: the CPU that receives the frames without a hash (non-IP,
    /// malformed).
    pub default_cpu: u32,
    /// Replace another XDP program attached in the same mode (it is put
    /// back on detach).
    pub force: bool,
}

impl XdpOptions {
    /// Native mode, a 128-bucket table, Microsoft's key, default CPU 0,
    /// no force.
    pub fn new(iface: impl Into<String>) -> Self {
        Self {
            iface: iface.into(),
            attach: AttachMode::Native,
            reta_size: 128,
            key: RssKey::microsoft(),
            default_cpu: 0,
            force: false,
        }
    }
}

/// Which program to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// Software RSS (`xdp_rsspp_steer`): hash, count, redirect each bucket
    /// to its CPU through a CPUMAP.
    Steer {
        /// The CPUs the table may name (the initial table spreads the
        /// buckets over them in turn).
        cpus: Vec<u32>,
        /// Frames queued per CPU before the CPUMAP drops
        /// ([`DEFAULT_CPUMAP_QUEUE`]).
        cpumap_queue: u32,
    },
    /// Hardware RSS: count only. With `rx_hash`, `xdp_rsspp_rxh` takes the
    /// NIC's hash through the `bpf_xdp_metadata_rx_hash` kfunc (a program
    /// bound to the device, native mode only) and falls back to the
    /// Toeplitz hash per packet when the driver has none; without it,
    /// `xdp_rsspp_count` computes the Toeplitz hash with the NIC's key.
    Count {
        /// Read the NIC's RX hash.
        rx_hash: bool,
    },
}

/// Packets kept out of the per-bucket counters, summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OtherCounts {
    /// Neither IPv4 nor IPv6 (ARP, LLDP, more than two VLAN tags).
    pub not_ip: u64,
    /// Headers cut short or invalid (IP version, IHL).
    pub malformed: u64,
    /// Steering to a CPU without a CPUMAP entry: passed up on the
    /// receiving CPU instead.
    pub redirect_failed: u64,
    /// Frames whose bucket came from the NIC's RX hash.
    pub rx_hash: u64,
    /// Frames for which the driver gave no RX hash (Toeplitz instead).
    pub rx_hash_missing: u64,
}

/// An XDP verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAction {
    /// `XDP_ABORTED`.
    Aborted,
    /// `XDP_DROP`.
    Drop,
    /// `XDP_PASS`: up the kernel's stack on this CPU.
    Pass,
    /// `XDP_TX`.
    Tx,
    /// `XDP_REDIRECT`: to the CPU the table names.
    Redirect,
    /// Anything else.
    Other(u32),
}

impl From<u32> for XdpAction {
    fn from(v: u32) -> Self {
        match v {
            libbpf_sys::XDP_ABORTED => XdpAction::Aborted,
            libbpf_sys::XDP_DROP => XdpAction::Drop,
            libbpf_sys::XDP_PASS => XdpAction::Pass,
            libbpf_sys::XDP_TX => XdpAction::Tx,
            libbpf_sys::XDP_REDIRECT => XdpAction::Redirect,
            other => XdpAction::Other(other),
        }
    }
}

/// The result of [`Xdp::test_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// The program's verdict.
    pub action: XdpAction,
    /// Mean time per run, as the kernel measured it (whole nanoseconds).
    pub duration_per_run: Duration,
}

/// What went wrong with the XDP programs.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// No interface of that name in this network namespace.
    #[error("interface {iface:?} does not exist")]
    UnknownInterface {
        /// The name.
        iface: String,
    },
    /// Missing privileges.
    #[error("{what} on {iface}: {source}: run as root (needs CAP_BPF and CAP_NET_ADMIN)")]
    Permission {
        /// The interface.
        iface: String,
        /// What was refused.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The kernel lacks a feature.
    #[error("this kernel does not support {feature}, needed on {iface}")]
    Unsupported {
        /// The interface.
        iface: String,
        /// `XDP`, `CPUMAP`, ...
        feature: &'static str,
    },
    /// The driver has no native XDP.
    #[error("{iface}: native XDP attach refused ({source}); the driver may lack XDP support: try skb mode")]
    NativeUnsupported {
        /// The interface.
        iface: String,
        /// The OS error.
        source: io::Error,
    },
    /// The RX-hash program could not be bound to the device.
    #[error("{iface}: loading the RX-hash program bound to the device failed ({source}); it needs a driver with native XDP and Linux 6.3 or later: count with the Toeplitz hash instead")]
    RxHashUnsupported {
        /// The interface.
        iface: String,
        /// libbpf's error.
        source: libbpf_rs::Error,
    },
    /// Device-bound programs cannot run in generic mode.
    #[error("{iface}: the NIC's RX hash is only readable in native mode, not skb mode")]
    RxHashNeedsNative {
        /// The interface.
        iface: String,
    },
    /// The kernel does not test-run device-bound programs.
    #[error("{iface}: BPF_PROG_TEST_RUN refused (EINVAL): the kernel does not test-run the RX-hash program, which is bound to the device")]
    TestRunDeviceBound {
        /// The interface.
        iface: String,
    },
    /// Not an attach mode name.
    #[error("attach mode {0:?} is not 'native' or 'skb'")]
    BadMode(String),
    /// A table size that is not a power of two in range.
    #[error("indirection table size {0} is not a power of two between 1 and {MAX_RETA_SIZE}")]
    TableSize(usize),
    /// Steering without CPUs.
    #[error("steering needs at least one CPU")]
    NoCpus,
    /// A CPUMAP queue length out of range.
    #[error("CPUMAP queue length {0} is not between 1 and {MAX_CPUMAP_QUEUE}")]
    QueueSize(u32),
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
        "another XDP program (id {prog_id}, {mode} mode) is attached to {iface}; force replaces it"
    )]
    AlreadyAttached {
        /// The interface.
        iface: String,
        /// Its program id.
        prog_id: u32,
        /// Its mode.
        mode: &'static str,
    },
    /// Another program is attached in the other mode: the kernel allows
    /// only one of native and skb at a time.
    #[error("another XDP program (id {prog_id}) is attached to {iface} in {mode} mode; it cannot be replaced from {wanted} mode")]
    ModeConflict {
        /// The interface.
        iface: String,
        /// Its program id.
        prog_id: u32,
        /// Its mode.
        mode: &'static str,
        /// Ours.
        wanted: AttachMode,
    },
    /// Our program was replaced by someone else; it was left alone.
    #[error(
        "{iface}: the attached XDP program is no longer ours (replaced meanwhile); left as it is"
    )]
    NotOurs {
        /// The interface.
        iface: String,
    },
    /// The counting programs have no indirection table.
    #[error(
        "{iface}: the counting program has no indirection table (hardware mode writes the NIC's)"
    )]
    NoTable {
        /// The interface.
        iface: String,
    },
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
    /// A libbpf call failed.
    #[error("{what} on {iface}: {source}")]
    Bpf {
        /// The interface.
        iface: String,
        /// What failed.
        what: &'static str,
        /// libbpf's error (with the errno).
        source: libbpf_rs::Error,
    },
    /// A system call failed.
    #[error("{what} on {iface}: {source}")]
    Os {
        /// The interface.
        iface: String,
        /// What failed.
        what: &'static str,
        /// The OS error (with the errno).
        source: io::Error,
    },
}

/// The program variants in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Steer,
    Count,
    CountRxHash,
}

/// Handles on the maps a loaded program uses (each holds its own fd, so
/// the maps live as long as the [`Xdp`], independent of libbpf's object).
#[derive(Debug)]
struct Maps {
    config: MapHandle,
    key: MapHandle,
    /// Steering only.
    reta: Option<MapHandle>,
    /// Steering only.
    cpumap: Option<MapHandle>,
    buckets: MapHandle,
    cpus: MapHandle,
    counters: MapHandle,
}

/// Our program is attached; `replaced` is the program `force` replaced,
/// to put back on detach.
#[derive(Debug)]
struct Attachment {
    replaced: Option<OwnedFd>,
}

/// A loaded rsspp XDP program with its maps.
#[derive(Debug)]
pub struct Xdp {
    iface: String,
    ifindex: u32,
    mode: AttachMode,
    force: bool,
    kind: Kind,
    reta_size: usize,
    possible_cpus: usize,
    /// CPUs with a CPUMAP entry, sorted: the only ones a table may name.
    targets: Vec<u32>,
    prog: OwnedFd,
    maps: Maps,
    attached: Option<Attachment>,
}

impl Xdp {
    /// Loads `program` for `opts.iface` and fills its maps; attaches
    /// nothing (see [`Xdp::attach`]).
    pub fn load(opts: &XdpOptions, program: Program) -> Result<Xdp, XdpError> {
        route_libbpf_logs();
        let iface = opts.iface.clone();
        if !opts.reta_size.is_power_of_two() || opts.reta_size > MAX_RETA_SIZE {
            return Err(XdpError::TableSize(opts.reta_size));
        }
        let (kind, steer) = match program {
            Program::Steer { cpus, cpumap_queue } => {
                if cpus.is_empty() {
                    return Err(XdpError::NoCpus);
                }
                if cpumap_queue == 0 || cpumap_queue > MAX_CPUMAP_QUEUE {
                    return Err(XdpError::QueueSize(cpumap_queue));
                }
                let online = CpuList::online()?;
                for &cpu in cpus.iter().chain([&opts.default_cpu]) {
                    if online.cpus().binary_search(&cpu).is_err() {
                        return Err(XdpError::CpuOffline {
                            cpu,
                            online: online.to_string(),
                        });
                    }
                }
                (Kind::Steer, Some((cpus, cpumap_queue)))
            }
            Program::Count { rx_hash: false } => (Kind::Count, None),
            Program::Count { rx_hash: true } => {
                if opts.attach == AttachMode::Skb {
                    return Err(XdpError::RxHashNeedsNative { iface });
                }
                (Kind::CountRxHash, None)
            }
        };
        let ifindex = ifindex_of(&iface)?;
        let possible_cpus = libbpf_rs::num_possible_cpus().map_err(|source| XdpError::Bpf {
            iface: iface.clone(),
            what: "counting the possible CPUs",
            source,
        })?;
        let (prog, maps) = load_object(&iface, ifindex, kind, opts.reta_size, possible_cpus)?;

        let mut targets: Vec<u32> = steer.as_ref().map_or(Vec::new(), |(c, _)| c.clone());
        if kind == Kind::Steer {
            targets.push(opts.default_cpu);
        }
        targets.sort_unstable();
        targets.dedup();
        let xdp = Xdp {
            iface,
            ifindex,
            mode: opts.attach,
            force: opts.force,
            kind,
            reta_size: opts.reta_size,
            possible_cpus,
            targets,
            prog,
            maps,
            attached: None,
        };
        xdp.update(
            &xdp.maps.key,
            0,
            &key_table(&opts.key),
            "writing the key table",
        )?;
        let mut config = Vec::with_capacity(16);
        for word in [
            opts.reta_size as u32,
            opts.default_cpu,
            u32::from(kind == Kind::CountRxHash),
            0,
        ] {
            config.extend_from_slice(&word.to_ne_bytes());
        }
        xdp.update(&xdp.maps.config, 0, &config, "writing the configuration")?;
        if let Some((cpus, queue)) = steer {
            if let Some(cpumap) = &xdp.maps.cpumap {
                xdp.fill_cpumap(cpumap, queue)?;
            }
            let table: Vec<u32> = (0..opts.reta_size).map(|i| cpus[i % cpus.len()]).collect();
            xdp.write_table(&table)?;
        }
        Ok(xdp)
    }

    /// Attaches the program. Refuses if another XDP program is attached,
    /// unless `force` was set (then it is replaced, atomically, and put
    /// back by [`Xdp::detach`]). Attaching twice is a no-op.
    pub fn attach(&mut self) -> Result<(), XdpError> {
        if self.attached.is_some() {
            return Ok(());
        }
        let current = self.query()?;
        let mut replaced = None;
        if let Some((prog_id, mode)) = current {
            if !self.force {
                return Err(XdpError::AlreadyAttached {
                    iface: self.iface.clone(),
                    prog_id,
                    mode: mode.map_or("hw", AttachMode::name),
                });
            }
            if mode != Some(self.mode) {
                return Err(XdpError::ModeConflict {
                    iface: self.iface.clone(),
                    prog_id,
                    mode: mode.map_or("hw", AttachMode::name),
                    wanted: self.mode,
                });
            }
            // SAFETY: plain system call; a non-negative result is a new fd
            // that we own.
            let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(prog_id) };
            if fd < 0 {
                return Err(self.os_error("opening the attached program", -fd));
            }
            // SAFETY: `fd` was just returned to us and is owned by nobody else.
            replaced = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let mut flags = self.mode.flags();
        if replaced.is_none() {
            flags |= libbpf_sys::XDP_FLAGS_UPDATE_IF_NOEXIST;
        }
        // With `old_prog_fd` set, libbpf adds XDP_FLAGS_REPLACE: the kernel
        // replaces that program only if it is still the one attached.
        let old = replaced.as_ref().map(|fd| fd.as_raw_fd());
        let ret = self.xdp_attach(self.prog.as_raw_fd(), flags, old);
        if ret < 0 {
            return Err(match -ret {
                libc::EBUSY | libc::EEXIST => match self.query() {
                    Ok(Some((prog_id, mode))) => XdpError::AlreadyAttached {
                        iface: self.iface.clone(),
                        prog_id,
                        mode: mode.map_or("hw", AttachMode::name),
                    },
                    _ => self.os_error("attaching the XDP program", -ret),
                },
                libc::EOPNOTSUPP if self.mode == AttachMode::Native => {
                    XdpError::NativeUnsupported {
                        iface: self.iface.clone(),
                        source: io::Error::from_raw_os_error(-ret),
                    }
                }
                errno => self.os_error("attaching the XDP program", errno),
            });
        }
        tracing::info!(iface = %self.iface, mode = %self.mode, replaced = replaced.is_some(), "XDP program attached");
        self.attached = Some(Attachment { replaced });
        Ok(())
    }

    /// Detaches the program, putting back the one `force` replaced. A
    /// no-op when not attached; an interface that vanished counts as
    /// detached. If someone replaced our program meanwhile, theirs is left
    /// in place ([`XdpError::NotOurs`]).
    pub fn detach(&mut self) -> Result<(), XdpError> {
        let Some(attachment) = self.attached.take() else {
            return Ok(());
        };
        let new = attachment.replaced.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let ret = self.xdp_attach(new, self.mode.flags(), Some(self.prog.as_raw_fd()));
        match -ret {
            0 => {
                tracing::info!(iface = %self.iface, restored = attachment.replaced.is_some(), "XDP program detached");
                Ok(())
            }
            libc::ENODEV => Ok(()),
            libc::EEXIST => Err(XdpError::NotOurs {
                iface: self.iface.clone(),
            }),
            errno => {
                self.attached = Some(attachment);
                Err(self.os_error("detaching the XDP program", errno))
            }
        }
    }

    /// Forgets the attachment without detaching: the program stays on the
    /// interface (netlink attachments outlive the process) and keeps
    /// steering with the last table, as `rsspp run --keep` promises.
    pub fn leave_attached(mut self) {
        self.attached = None;
    }

    /// The kernel's id of the steering program's CPUMAP, whose threads
    /// are named `cpumap/<cpu>/map:<id>`; `None` for the counting programs.
    pub fn cpumap_id(&self) -> Result<Option<u32>, XdpError> {
        let Some(map) = &self.maps.cpumap else {
            return Ok(None);
        };
        map.info()
            .map(|info| Some(info.info.id))
            .map_err(|source| XdpError::Bpf {
                iface: self.iface.clone(),
                what: "reading the CPUMAP's id",
                source,
            })
    }

    /// The kernel's id of the loaded program (as `bpftool prog` and
    /// `ip link` show it).
    pub fn program_id(&self) -> u32 {
        libbpf_rs::Program::id_from_fd(self.prog.as_fd()).unwrap_or(0)
    }

    /// Whether the program is attached (by this [`Xdp`]).
    pub fn is_attached(&self) -> bool {
        self.attached.is_some()
    }

    /// The interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface index (in the namespace it was loaded from).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The attach mode.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The indirection-table size.
    pub fn reta_size(&self) -> usize {
        self.reta_size
    }

    /// Number of possible CPUs: the length [`Xdp::cpu_packets`] wants.
    pub fn possible_cpus(&self) -> usize {
        self.possible_cpus
    }

    /// The CPUs a table may name (the steering CPUs and the default CPU);
    /// empty for the counting programs.
    pub fn steering_cpus(&self) -> &[u32] {
        &self.targets
    }

    /// Writes the whole indirection table (steering only): `table[b]` is
    /// the CPU of bucket `b`.
    pub fn write_table(&self, table: &[u32]) -> Result<(), XdpError> {
        if table.len() != self.reta_size {
            return Err(XdpError::TableLength {
                expected: self.reta_size,
                got: table.len(),
            });
        }
        let entries: Vec<(usize, u32)> = table.iter().copied().enumerate().collect();
        self.write_entries(&entries)
    }

    /// Rewrites some entries (steering only): `(bucket, cpu)` pairs. All
    /// are checked before any is written. Each entry changes atomically;
    /// packets already redirected keep their CPU.
    pub fn write_entries(&self, entries: &[(usize, u32)]) -> Result<(), XdpError> {
        let reta = self.maps.reta.as_ref().ok_or_else(|| XdpError::NoTable {
            iface: self.iface.clone(),
        })?;
        for &(bucket, cpu) in entries {
            if bucket >= self.reta_size {
                return Err(XdpError::BucketOutOfRange {
                    bucket,
                    size: self.reta_size,
                });
            }
            if self.targets.binary_search(&cpu).is_err() {
                return Err(XdpError::CpuNotSteered {
                    cpu,
                    targets: CpuList::from_cpus(self.targets.clone()).to_string(),
                });
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        let mut keys = Vec::with_capacity(entries.len() * 4);
        let mut values = Vec::with_capacity(entries.len() * 4);
        for &(bucket, cpu) in entries {
            keys.extend_from_slice(&(bucket as u32).to_ne_bytes());
            values.extend_from_slice(&cpu.to_ne_bytes());
        }
        reta.update_batch(
            &keys,
            &values,
            entries.len() as u32,
            MapFlags::ANY,
            MapFlags::ANY,
        )
        .map_err(|source| self.bpf_error("writing the indirection table", source))
    }

    /// Packets per bucket since load, summed over CPUs; `out` has
    /// [`Xdp::reta_size`] slots.
    pub fn bucket_packets(&self, out: &mut [u64]) -> Result<(), XdpError> {
        self.percpu_sums(&self.maps.buckets, out, "per-bucket packets")
    }

    /// Packets per CPU since load: steered to it (steering) or counted on
    /// it (counting); `out` has [`Xdp::possible_cpus`] slots.
    pub fn cpu_packets(&self, out: &mut [u64]) -> Result<(), XdpError> {
        self.percpu_sums(&self.maps.cpus, out, "per-CPU packets")
    }

    /// The packets kept out of the buckets, since load.
    pub fn other_counts(&self) -> Result<OtherCounts, XdpError> {
        let mut c = [0u64; COUNTERS];
        self.percpu_sums(&self.maps.counters, &mut c, "other counters")?;
        Ok(OtherCounts {
            not_ip: c[COUNTER_NOT_IP],
            malformed: c[COUNTER_MALFORMED],
            redirect_failed: c[COUNTER_REDIRECT_FAILED],
            rx_hash: c[COUNTER_RX_HASH],
            rx_hash_missing: c[COUNTER_RX_HASH_MISSING],
        })
    }

    /// Runs the program `repeat` times on `frame` in the kernel
    /// (`BPF_PROG_TEST_RUN`; 0 runs once), counters included. The frame
    /// needs at least an Ethernet header's 14 bytes. The kernel refuses
    /// this for the RX-hash program, which is bound to its device.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRun, XdpError> {
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
        opts.data_in = frame.as_ptr().cast();
        opts.data_size_in = frame.len() as u32;
        opts.repeat = repeat as i32;
        // SAFETY: `opts` points to `frame`, which outlives the call; the
        // kernel only reads it (no data_out given).
        let ret = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) };
        if ret == -libc::EINVAL && self.kind == Kind::CountRxHash {
            return Err(XdpError::TestRunDeviceBound {
                iface: self.iface.clone(),
            });
        }
        if ret < 0 {
            return Err(self.os_error("BPF_PROG_TEST_RUN", -ret));
        }
        Ok(TestRun {
            action: XdpAction::from(opts.retval),
            duration_per_run: Duration::from_nanos(u64::from(opts.duration)),
        })
    }

    /// The program attached to the interface now, if any, and its mode
    /// (`None` for hardware offload).
    fn query(&self) -> Result<Option<(u32, Option<AttachMode>)>, XdpError> {
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut q: libbpf_sys::bpf_xdp_query_opts = unsafe { std::mem::zeroed() };
        q.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _;
        // SAFETY: `q` is a valid, sized options struct the call fills.
        let ret = unsafe { libbpf_sys::bpf_xdp_query(self.ifindex as i32, 0, &mut q) };
        if ret < 0 {
            return Err(self.os_error("querying the attached XDP program", -ret));
        }
        Ok(if q.drv_prog_id != 0 {
            Some((q.drv_prog_id, Some(AttachMode::Native)))
        } else if q.skb_prog_id != 0 {
            Some((q.skb_prog_id, Some(AttachMode::Skb)))
        } else if q.hw_prog_id != 0 {
            Some((q.hw_prog_id, None))
        } else {
            None
        })
    }

    /// `bpf_xdp_attach`: `fd` -1 detaches; `old` makes it conditional on
    /// that program being the one attached. Returns 0 or -errno.
    fn xdp_attach(&self, fd: i32, flags: u32, old: Option<i32>) -> i32 {
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut opts: libbpf_sys::bpf_xdp_attach_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _;
        if let Some(old) = old {
            opts.old_prog_fd = old;
        }
        // SAFETY: the fds are open (owned by `self` or the attachment) and
        // `opts` is a valid, sized options struct.
        unsafe { libbpf_sys::bpf_xdp_attach(self.ifindex as i32, fd, flags, &opts) }
    }

    /// One CPUMAP entry per steering CPU; no program runs on the remote
    /// CPU (the bpf_prog fd of `struct bpf_cpumap_val` stays 0).
    fn fill_cpumap(&self, cpumap: &MapHandle, queue: u32) -> Result<(), XdpError> {
        let mut value = [0u8; 8];
        value[..4].copy_from_slice(&queue.to_ne_bytes());
        for &cpu in &self.targets {
            self.update(cpumap, cpu, &value, "adding a CPU to the CPUMAP")?;
        }
        Ok(())
    }

    fn update(
        &self,
        map: &MapHandle,
        key: u32,
        value: &[u8],
        what: &'static str,
    ) -> Result<(), XdpError> {
        map.update(&key.to_ne_bytes(), value, MapFlags::ANY)
            .map_err(|source| self.bpf_error(what, source))
    }

    /// Sums a per-CPU array of u64 over CPUs, reading the whole map in one
    /// `BPF_MAP_LOOKUP_BATCH` (libbpf-rs's batch iterator sizes values for
    /// plain maps only).
    fn percpu_sums(
        &self,
        map: &MapHandle,
        out: &mut [u64],
        what: &'static str,
    ) -> Result<(), XdpError> {
        let n = map.max_entries() as usize;
        if out.len() != n {
            return Err(XdpError::BufferLength {
                what,
                expected: n,
                got: out.len(),
            });
        }
        let cpus = self.possible_cpus;
        let mut keys = vec![0u32; n];
        let mut values = vec![0u64; n * cpus];
        let mut done = 0;
        let mut batch: Option<u32> = None;
        while done < n {
            let mut next = 0u32;
            let mut count = (n - done) as u32;
            let opts = libbpf_sys::bpf_map_batch_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
                ..Default::default()
            };
            let in_batch = batch
                .as_mut()
                .map_or(std::ptr::null_mut(), |b| b as *mut u32);
            // SAFETY: `keys` and `values` have room for `count` more keys
            // and `count * cpus` more values (per-CPU values of 8 bytes are
            // not padded); the batch cursors are 4-byte keys.
            let ret = unsafe {
                libbpf_sys::bpf_map_lookup_batch(
                    map.as_fd().as_raw_fd(),
                    in_batch.cast::<c_void>(),
                    (&mut next as *mut u32).cast::<c_void>(),
                    keys[done..].as_mut_ptr().cast::<c_void>(),
                    values[done * cpus..].as_mut_ptr().cast::<c_void>(),
                    &mut count,
                    &opts,
                )
            };
            if ret < 0 && -ret != libc::ENOENT {
                return Err(self.os_error("reading the counters", -ret));
            }
            done += count as usize;
            // ENOENT: the end of the map was reached.
            if ret < 0 || count == 0 {
                break;
            }
            batch = Some(next);
        }
        out.fill(0);
        for (i, &key) in keys[..done].iter().enumerate() {
            out[key as usize] = values[i * cpus..(i + 1) * cpus].iter().sum();
        }
        Ok(())
    }

    fn os_error(&self, what: &'static str, errno: i32) -> XdpError {
        let source = io::Error::from_raw_os_error(errno);
        if errno == libc::EPERM || errno == libc::EACCES {
            XdpError::Permission {
                iface: self.iface.clone(),
                what,
                source,
            }
        } else {
            XdpError::Os {
                iface: self.iface.clone(),
                what,
                source,
            }
        }
    }

    fn bpf_error(&self, what: &'static str, source: libbpf_rs::Error) -> XdpError {
        XdpError::Bpf {
            iface: self.iface.clone(),
            what,
            source,
        }
    }
}

impl Drop for Xdp {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::warn!("{e}");
        }
    }
}

/// Sends libbpf's own messages to the `tracing` logs (debug level): the
/// errors that matter come back as [`XdpError`]s, which say what to do; its
/// raw lines on stderr would only repeat them in libbpf's words.
fn route_libbpf_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        fn log(level: libbpf_rs::PrintLevel, message: String) {
            tracing::debug!(target: "libbpf", ?level, "{}", message.trim_end());
        }
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, log)));
    });
}

/// The interface's index in the calling thread's network namespace.
fn ifindex_of(iface: &str) -> Result<u32, XdpError> {
    let unknown = || XdpError::UnknownInterface {
        iface: iface.to_string(),
    };
    let name = CString::new(iface).map_err(|_| unknown())?;
    // SAFETY: `name` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(unknown()),
        index => Ok(index),
    }
}

/// The Toeplitz contribution of every byte value at every input position
/// (the BPF `struct key_table`): by linearity, the hash of `v` preceded by
/// `i` zero bytes.
fn key_table(key: &RssKey) -> Vec<u8> {
    let t = Toeplitz::new(key.clone());
    let mut input = [0u8; MAX_HASH_INPUT];
    let mut out = Vec::with_capacity(MAX_HASH_INPUT * 256 * 4);
    for pos in 0..MAX_HASH_INPUT {
        for v in 0..=255u8 {
            input[pos] = v;
            out.extend_from_slice(&t.hash(&input[..=pos]).to_ne_bytes());
        }
        input[pos] = 0;
    }
    out
}

/// Opens the object, loads the one program `kind` needs, and returns its
/// fd and map handles; libbpf's object is closed on return.
fn load_object(
    iface: &str,
    ifindex: u32,
    kind: Kind,
    reta_size: usize,
    possible_cpus: usize,
) -> Result<(OwnedFd, Maps), XdpError> {
    let bpf = |what: &'static str| {
        move |source: libbpf_rs::Error| XdpError::Bpf {
            iface: iface.to_string(),
            what,
            source,
        }
    };
    let mut storage = MaybeUninit::uninit();
    let mut open = RssppSkelBuilder::default()
        .open(&mut storage)
        .map_err(bpf("opening the BPF object"))?;
    let sizing = bpf("sizing the maps");
    open.maps
        .rsspp_reta
        .set_max_entries(reta_size as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_buckets
        .set_max_entries(reta_size as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_cpumap
        .set_max_entries(possible_cpus as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_cpus
        .set_max_entries(possible_cpus as u32)
        .map_err(&sizing)?;
    if kind != Kind::Steer {
        // Only the steering program uses them.
        open.maps
            .rsspp_reta
            .set_autocreate(false)
            .map_err(&sizing)?;
        open.maps
            .rsspp_cpumap
            .set_autocreate(false)
            .map_err(&sizing)?;
    }
    open.progs.xdp_rsspp_steer.set_autoload(kind == Kind::Steer);
    open.progs.xdp_rsspp_count.set_autoload(kind == Kind::Count);
    open.progs
        .xdp_rsspp_rxh
        .set_autoload(kind == Kind::CountRxHash);
    if kind == Kind::CountRxHash {
        // The kfunc's driver implementation is resolved at load time, for
        // this device only.
        open.progs.xdp_rsspp_rxh.set_ifindex(ifindex);
        open.progs
            .xdp_rsspp_rxh
            .set_flags(libbpf_sys::BPF_F_XDP_DEV_BOUND_ONLY);
    }
    let skel = open
        .load()
        .map_err(|source| load_error(iface, kind, source))?;

    let handle = bpf("taking a map handle");
    let prog = match kind {
        Kind::Steer => &skel.progs.xdp_rsspp_steer,
        Kind::Count => &skel.progs.xdp_rsspp_count,
        Kind::CountRxHash => &skel.progs.xdp_rsspp_rxh,
    };
    let prog = prog
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| XdpError::Os {
            iface: iface.to_string(),
            what: "duplicating the program fd",
            source,
        })?;
    let maps = Maps {
        config: MapHandle::try_from(&skel.maps.rsspp_config).map_err(&handle)?,
        key: MapHandle::try_from(&skel.maps.rsspp_key).map_err(&handle)?,
        reta: match kind {
            Kind::Steer => Some(MapHandle::try_from(&skel.maps.rsspp_reta).map_err(&handle)?),
            _ => None,
        },
        cpumap: match kind {
            Kind::Steer => Some(MapHandle::try_from(&skel.maps.rsspp_cpumap).map_err(&handle)?),
            _ => None,
        },
        buckets: MapHandle::try_from(&skel.maps.rsspp_buckets).map_err(&handle)?,
        cpus: MapHandle::try_from(&skel.maps.rsspp_cpus).map_err(&handle)?,
        counters: MapHandle::try_from(&skel.maps.rsspp_counters).map_err(&handle)?,
    };
    Ok((prog, maps))
}

/// Names the cause of a failed load: privileges, a kernel without XDP or
/// CPUMAP, a device that cannot take a bound program.
fn load_error(iface: &str, kind: Kind, source: libbpf_rs::Error) -> XdpError {
    let iface = iface.to_string();
    if source.kind() == ErrorKind::PermissionDenied {
        return XdpError::Permission {
            iface,
            what: "loading the XDP program",
            source: io::Error::new(io::ErrorKind::PermissionDenied, source.to_string()),
        };
    }
    if !ProgramType::Xdp.is_supported().unwrap_or(true) {
        return XdpError::Unsupported {
            iface,
            feature: "XDP",
        };
    }
    if kind == Kind::Steer && !MapType::Cpumap.is_supported().unwrap_or(true) {
        return XdpError::Unsupported {
            iface,
            feature: "CPUMAP",
        };
    }
    if kind == Kind::CountRxHash {
        return XdpError::RxHashUnsupported { iface, source };
    }
    XdpError::Bpf {
        iface,
        what: "loading the XDP program",
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsspp_core::toeplitz::hash_reference;

    #[test]
    fn xdp_moves_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Xdp>();
    }

    #[test]
    fn key_table_holds_each_byte_contribution() {
        for key in [
            RssKey::microsoft(),
            RssKey::new((0..40u32).map(|i| (i * 37 + 11) as u8).collect::<Vec<u8>>()).unwrap(),
        ] {
            let table = key_table(&key);
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

    /// A redirect to a CPU without a CPUMAP entry cannot be asked for
    /// through the API; write one straight into the map to check that the
    /// program passes the frame and counts the failure.
    #[test]
    fn failed_redirect_passes_and_is_counted() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "skipping failed redirect test: loading XDP programs needs root (CI runs as root)"
            );
            return;
        }
        let mut opts = XdpOptions::new("lo");
        opts.reta_size = 4;
        let x = Xdp::load(
            &opts,
            Program::Steer {
                cpus: vec![0],
                cpumap_queue: 16,
            },
        )
        .unwrap();
        let reta = x.maps.reta.as_ref().unwrap();
        for bucket in 0..4u32 {
            reta.update(&bucket.to_ne_bytes(), &4095u32.to_ne_bytes(), MapFlags::ANY)
                .unwrap();
        }
        // Ethernet, IPv4 (10.0.0.1 -> 10.0.0.2, UDP), UDP 1 -> 2.
        let mut frame = vec![0u8; 42];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame[23] = 17;
        frame[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        frame[34..38].copy_from_slice(&[0, 1, 0, 2]);
        let run = x.test_run(&frame, 5).unwrap();
        assert_eq!(run.action, XdpAction::Pass);
        let other = x.other_counts().unwrap();
        assert_eq!(
            (other.redirect_failed, other.not_ip, other.malformed),
            (5, 0, 0)
        );
        let mut buckets = vec![0; 4];
        x.bucket_packets(&mut buckets).unwrap();
        assert_eq!(buckets.iter().sum::<u64>(), 5);
        // Counted on the CPU that ran it, not the one the table named.
        let mut cpus = vec![0; x.possible_cpus()];
        x.cpu_packets(&mut cpus).unwrap();
        assert_eq!(cpus.iter().sum::<u64>(), 5);
    }
}
