//! What to load and how to attach it: the attach modes (named as in
//! xdp-tools), the loading options and the program variants.

use std::fmt;
use std::str::FromStr;

use libbpf_rs::libbpf_sys;
use rsspp_core::RssKey;

/// Largest indirection table the programs take (the loader sizes the
/// table and bucket maps, whose C definitions hold placeholders).
pub const MAX_RETA_SIZE: usize = 65_536;

/// Most per-flow override slots ([`XdpOptions::override_slots`]).
pub const MAX_OVERRIDE_SLOTS: usize = 65_536;

/// Flows of the hot buckets counted one by one between two reads of the
/// daemon (an LRU map: past this, the least recently seen are dropped).
pub const FLOW_COUNT_ENTRIES: u32 = 4096;

/// Default length of a CPUMAP entry's queue, in frames (what xdp-tools'
/// `xdp-bench redirect-cpu` uses).
pub const DEFAULT_CPUMAP_QUEUE: u32 = 2048;

/// Longest CPUMAP queue the kernel accepts.
pub const MAX_CPUMAP_QUEUE: u32 = 16_384;

/// Highest CPU number a steering table may name (entries keep the CPU in
/// 16 bits, and the CPU a bucket is moving to in the other 16).
pub const MAX_STEERING_CPU: u32 = 0xfffe;

/// How long after the old CPU dequeued a bucket's last frame a handoff
/// switches the bucket to its new CPU: the time that CPU's thread takes to
/// pass the rest of its batch (at most 8 frames) up the stack, with room.
pub const HANDOFF_GUARD: std::time::Duration = std::time::Duration::from_micros(50);

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

    /// The netlink attach flag of the mode.
    pub(super) fn flags(self) -> u32 {
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

/// Not the name of an attach mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("attach mode {0:?} is not 'native' or 'skb'")]
pub struct BadAttachMode(pub String);

impl FromStr for AttachMode {
    type Err = BadAttachMode;

    /// `native` (or `drv`) and `skb` (or `generic`).
    fn from_str(s: &str) -> Result<Self, BadAttachMode> {
        match s {
            "native" | "drv" => Ok(AttachMode::Native),
            "skb" | "generic" => Ok(AttachMode::Skb),
            _ => Err(BadAttachMode(s.to_string())),
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
    /// Steering: per-flow overrides the program can hold (0: none; the
    /// maps are then of one entry, and no bucket is ever flagged), at most
    /// [`MAX_OVERRIDE_SLOTS`].
    pub override_slots: usize,
}

impl XdpOptions {
    /// Native mode, a 128-bucket table, Microsoft's key, default CPU 0,
    /// no force, no override slots.
    pub fn new(iface: impl Into<String>) -> Self {
        Self {
            iface: iface.into(),
            attach: AttachMode::Native,
            reta_size: 128,
            key: RssKey::microsoft(),
            default_cpu: 0,
            force: false,
            override_slots: 0,
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
        /// Order-preserving moves: a CPUMAP program on each steering CPU
        /// notes what it dequeued, so that [`Xdp::begin_handoffs`] can keep
        /// a moved bucket on its old CPU until that CPU has drained it.
        /// Native mode only: in skb mode the kernel passes no XDP metadata
        /// to the CPUMAP program, and the handoffs would never drain.
        ///
        /// [`Xdp::begin_handoffs`]: super::Xdp::begin_handoffs
        ordered_moves: bool,
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

/// The program variants in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Steer,
    Count,
    CountRxHash,
}
