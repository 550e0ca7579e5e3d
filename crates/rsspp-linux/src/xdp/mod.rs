//! The XDP programs of `src/bpf/rsspp.bpf.c`: loading, attaching, the
//! indirection table and the counters. This module is the crate's only
//! caller of libbpf.
//!
//! Life cycle: [`Xdp::load`] writes the program's settings to its
//! read-only globals, loads it and fills its maps (the Toeplitz key table,
//! the CPUMAP, an `equal` indirection table) without touching the
//! interface; [`Xdp::attach`] attaches it (through a BPF link, which the
//! kernel detaches when the process dies; the RX-hash program through
//! netlink); the daemon reads [`Xdp::bucket_packets`] and rewrites entries
//! with [`Xdp::write_entries`]; [`Xdp::detach`], or dropping the [`Xdp`],
//! puts the interface back as it was, including the program that `force`
//! replaced; [`Xdp::keep`] pins the link instead.
//!
//! One file per concern: `options` (attach modes, what to load), `error`,
//! `load` (the object, its settings and maps), `attach` (link and netlink
//! attach, detach, keep), `maps` (the table and the per-CPU counters, read
//! and written in batches), `flows` (per-flow overrides, hot buckets and
//! their flows' counts), `test_run` (`BPF_PROG_TEST_RUN`).
//!
//! The interface index is resolved, and the netlink calls made, in the
//! network namespace of the calling thread: load, attach and detach from
//! the same namespace.

mod attach;
mod error;
mod flows;
mod load;
mod maps;
mod options;
mod test_run;
#[cfg(test)]
mod testing;

use std::os::fd::{AsFd, OwnedFd};

use libbpf_rs::{MapCore, MapHandle};

pub use error::{XdpError, XdpErrorKind};
pub use flows::{FlowInput, BUCKET_HOT, BUCKET_OVERRIDES};
pub use maps::{Entry, HandoffState, OtherCounts};
pub use options::{
    AttachMode, BadAttachMode, Program, XdpOptions, DEFAULT_CPUMAP_QUEUE, FLOW_COUNT_ENTRIES,
    HANDOFF_GUARD, MAX_CPUMAP_QUEUE, MAX_OVERRIDE_SLOTS, MAX_RETA_SIZE, MAX_STEERING_CPU,
};
pub use test_run::{TestRun, XdpAction};

use attach::Attachment;
use options::Kind;

/// Handles on the maps a loaded program uses (each holds its own fd, so
/// the maps live as long as the [`Xdp`], independent of libbpf's object).
#[derive(Debug)]
struct Maps {
    key: MapHandle,
    /// Steering only.
    reta: Option<MapHandle>,
    /// Steering only.
    cpumap: Option<MapHandle>,
    /// Steering only: how far each bucket's handoff has drained.
    handoff: Option<MapHandle>,
    /// Steering only: frames the CPUMAP dropped, per target CPU.
    cpumap_drops: Option<MapHandle>,
    /// Steering only: our CPUMAP's id, for the drop counter.
    cpumap_id: Option<MapHandle>,
    /// Per bucket, hot and has overrides.
    bucket_flags: MapHandle,
    /// The per-flow overrides (counting programs: only their slots).
    overrides: MapHandle,
    /// Packets of each override slot, one row per CPU, and their memory
    /// mapping.
    override_packets: (MapHandle, maps::Mapped),
    /// Packets per flow of the hot buckets.
    flow_packets: MapHandle,
    /// Steering only: the drop counter, attached after load.
    drops_prog: Option<OwnedFd>,
    /// The per-bucket counters, one row per CPU, and their memory mapping.
    buckets: (MapHandle, maps::Mapped),
    cpus: MapHandle,
    counters: MapHandle,
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
    /// Per-flow override slots (steering).
    override_slots: usize,
    /// CPUs with a CPUMAP entry, sorted: the only ones a table may name.
    targets: Vec<u32>,
    prog: OwnedFd,
    /// The CPUMAP entries run the handoffs' dequeue program.
    ordered_moves: bool,
    maps: Maps,
    /// The drop counter's tracepoint link (steering only).
    drops_link: Option<OwnedFd>,
    attached: Option<Attachment>,
}

impl Xdp {
    /// The kernel's id of the steering program's CPUMAP, whose threads
    /// are named `cpumap/<cpu>/map:<id>`; `None` for the counting programs.
    pub fn cpumap_id(&self) -> Result<Option<u32>, XdpError> {
        let Some(map) = &self.maps.cpumap else {
            return Ok(None);
        };
        map.info()
            .map(|info| Some(info.info.id))
            .map_err(|source| self.bpf_error("reading the CPUMAP's id", source))
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

    /// Whether moves can keep order ([`Program::Steer`]'s `ordered_moves`):
    /// [`Xdp::begin_handoffs`] works.
    pub fn ordered_moves(&self) -> bool {
        self.ordered_moves
    }

    /// The CPUs a table may name (the steering CPUs and the default CPU);
    /// empty for the counting programs.
    pub fn steering_cpus(&self) -> &[u32] {
        &self.targets
    }

    fn error(&self, kind: XdpErrorKind) -> XdpError {
        XdpError::new(&self.iface, kind)
    }

    fn os_error(&self, what: &'static str, errno: i32) -> XdpError {
        XdpError::os(&self.iface, what, errno)
    }

    fn bpf_error(&self, what: &'static str, source: libbpf_rs::Error) -> XdpError {
        XdpError::bpf(&self.iface, what, source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdp_moves_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Xdp>();
    }
}
