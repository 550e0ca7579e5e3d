//! The kernel side of the `afxdp` backend, through libc: AF_XDP sockets
//! (XSKs), their UMEM and rings, and the XDP program that steers each frame
//! into its bucket's worker's socket.
//!
//! Every worker has one socket on every receive queue of the interface (two
//! with per-flow overrides: the second takes the frames an override
//! steered, as the fanout group's second member per worker does); the
//! sockets of a queue share one UMEM (`XDP_SHARED_UMEM`), so that the XDP
//! program may redirect a frame of that queue into any of them. The UMEM's
//! fill ring is then shared by the queue's workers too (a mutex around its
//! producer side); each socket's RX ring is its worker's own. The program
//! (`src/bpf/xsk.bpf.c`) uses the fanout program's per-bucket words and
//! overrides (`src/bpf/words.h`), so the controller's counted-mark handoff
//! is the same for both backends.
//!
//! A socket binds in zero-copy mode where the driver allows it, in copy mode
//! otherwise (veth: copy). The program is attached through a BPF link
//! (`BPF_LINK_CREATE`): the kernel detaches it when the link's last fd
//! closes, the process's exit or crash included, so nothing stays attached.
//! Frames go out through an AF_XDP socket per worker on a queue of the
//! output interface of its own ([`XskTx`]), or where that interface has
//! too few queues, through the `afpacket` backend's transmit sockets.
//!
//! The kernel ABI used (`<linux/if_xdp.h>`): `XDP_UMEM_REG`, the ring-size
//! options, `XDP_MMAP_OFFSETS` and the rings' mmap offsets, `bind` with
//! `struct sockaddr_xdp`, `XDP_STATISTICS`.

use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use rsspp_core::RssKey;

use crate::afpacket::{os, setsockopt, Frame};
use crate::error::{Os, RuntimeError};
use crate::steer::{
    load_error, owned_prog_fd, route_libbpf_logs, size_words, word_maps, write_key, MappedArray,
    Steering, MAX_BUCKETS,
};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/xsk.skel.rs"));
}
mod nic_skel {
    include!(concat!(env!("OUT_DIR"), "/xsk_nic.skel.rs"));
}
use nic_skel::XskNicSkelBuilder;
use skel::XskSkelBuilder;

// <linux/if_xdp.h>.
const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_SHARED_UMEM: u16 = 1;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;
// <linux/bpf.h>.
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_XDP: u32 = 37;
const BPF_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;

/// Bytes per UMEM frame (chunk): room for a 1500-byte MTU frame and the
/// kernel's headroom.
const FRAME_SIZE: u32 = 2048;
/// Frames of each queue's UMEM, and the size of its fill ring (all of them
/// fit in it, so the fill ring never overflows).
const QUEUE_FRAMES: u32 = 4096;
/// Descriptors in each socket's RX ring.
const RX_RING: u32 = 2048;
/// The completion ring the kernel demands of a receive queue's UMEM (the
/// transmit sockets have UMEMs of their own: it stays empty).
const COMPLETION_RING: u32 = 64;
/// The word after the NIC's hash in a frame's metadata
/// (`src/bpf/xsk_nic.bpf.c`).
const RX_HASH_MAGIC: u32 = 0x5253_5348;
/// Frames taken from one socket in one batch.
const BATCH: u32 = 256;
/// Frames of a transmit socket's own UMEM, and the size of its TX and
/// completion rings (all of them fit in either).
const TX_FRAMES: u32 = 2048;
/// How long a flush waits for an interface that takes no frame (a queue
/// stopped for longer, or the interface down, keeps them for later).
pub const TX_STALL: std::time::Duration = std::time::Duration::from_millis(100);
/// The fill ring the kernel demands of a transmit socket's UMEM (nothing
/// is received there: it stays empty).
const TX_FILL_RING: u32 = 64;

// Ring sizes are powers of two (the kernel's rule, and the masks'); a
// frame holds the kernel's XDP headroom (256) and a 1518-byte frame.
const _: () = assert!(QUEUE_FRAMES.is_power_of_two() && RX_RING.is_power_of_two());
const _: () = assert!(COMPLETION_RING.is_power_of_two() && FRAME_SIZE.is_power_of_two());
const _: () = assert!(TX_FRAMES.is_power_of_two() && TX_FILL_RING.is_power_of_two());
const _: () = assert!(FRAME_SIZE >= 256 + 1518);

/// `struct xdp_umem_reg` (the kernel accepts this size and the shorter,
/// older one).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct xdp_statistics`.
#[repr(C)]
#[derive(Default)]
struct XdpStatistics {
    rx_dropped: u64,
    rx_invalid_descs: u64,
    tx_invalid_descs: u64,
    rx_ring_full: u64,
    rx_fill_ring_empty_descs: u64,
    tx_ring_empty_descs: u64,
}

/// `struct xdp_desc`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    options: u32,
}

fn getsockopt<T: Default>(fd: RawFd, name: libc::c_int) -> Option<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: an out-parameter of the length passed.
    let r = unsafe { libc::getsockopt(fd, SOL_XDP, name, (&mut value as *mut T).cast(), &mut len) };
    (r == 0).then_some(value)
}

fn xsk_socket() -> Result<OwnedFd, RuntimeError> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let source = std::io::Error::last_os_error();
        return Err(match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => RuntimeError::NoPrivileges,
            Some(libc::EAFNOSUPPORT) => RuntimeError::Config(
                "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)".into(),
            ),
            _ => RuntimeError::Os(Os {
                what: "creating an AF_XDP socket",
                source,
            }),
        });
    }
    // SAFETY: a descriptor just created and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An anonymous, page-aligned area the kernel maps, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory; who touches it when is the rings' protocol.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(
        fd: Option<RawFd>,
        len: usize,
        offset: libc::off_t,
        what: &'static str,
    ) -> Result<Self, RuntimeError> {
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        // SAFETY: a fresh mapping of the size asked; checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os(what));
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One mapped ring of `size` entries of `T`: the kernel's producer and
/// consumer indices, and the descriptors.
#[derive(Debug)]
struct Ring {
    map: Mapping,
    producer: usize,
    consumer: usize,
    desc: usize,
    size: u32,
}

impl Ring {
    fn map<T>(
        fd: RawFd,
        off: RingOffset,
        size: u32,
        pgoff: libc::off_t,
        what: &'static str,
    ) -> Result<Self, RuntimeError> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        Ok(Self {
            map: Mapping::new(Some(fd), len, pgoff, what)?,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            desc: off.desc as usize,
            size,
        })
    }

    fn index(&self, at: usize) -> &AtomicU32 {
        // SAFETY: an aligned u32 index inside the mapping, shared with the
        // kernel: accessed atomically.
        unsafe { AtomicU32::from_ptr(self.map.ptr.add(at).cast()) }
    }

    fn slot<T>(&self, i: u32) -> *mut T {
        // SAFETY: masked into the ring's descriptors, inside the mapping.
        unsafe {
            self.map
                .ptr
                .add(self.desc)
                .cast::<T>()
                .add((i & (self.size - 1)) as usize)
        }
    }
}

/// A queue's UMEM and its fill ring, shared by the queue's sockets.
#[derive(Debug)]
struct Umem {
    area: Mapping,
    /// The fill ring (producer: us, under the lock).
    fill: Mutex<Ring>,
    /// Kept mapped as the kernel wants it; never used.
    _completion: Ring,
}

impl Umem {
    /// Gives frames back to the kernel (their addresses, any offset
    /// inside their chunk).
    fn refill(&self, addrs: &[u64]) {
        if addrs.is_empty() {
            return;
        }
        let fill = self.fill.lock().unwrap_or_else(PoisonError::into_inner);
        let prod = fill.index(fill.producer).load(Ordering::Relaxed);
        // The queue's frames number the ring's size: there is always room.
        for (i, &a) in addrs.iter().enumerate() {
            // SAFETY: a slot of the fill ring the kernel has consumed.
            unsafe {
                *fill.slot::<u64>(prod.wrapping_add(i as u32)) = a & !u64::from(FRAME_SIZE - 1)
            };
        }
        fill.index(fill.producer)
            .store(prod.wrapping_add(addrs.len() as u32), Ordering::Release);
    }
}

/// A UMEM of this process's own, registered on a socket, with its fill and
/// completion rings mapped, and the socket's ring offsets (for its RX or
/// TX ring, sized before).
struct OwnUmem {
    area: Mapping,
    fill: Ring,
    completion: Ring,
    off: MmapOffsets,
}

impl OwnUmem {
    /// `frames` chunks of [`FRAME_SIZE`] registered on `fd`, with a fill
    /// ring of `fill` entries and a completion ring of `completion`.
    fn register(fd: RawFd, frames: u32, fill: u32, completion: u32) -> Result<Self, RuntimeError> {
        let len = (frames * FRAME_SIZE) as usize;
        let area = Mapping::new(None, len, 0, "allocating a UMEM")?;
        let reg = UmemReg {
            addr: area.ptr as u64,
            len: len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd, SOL_XDP, XDP_UMEM_REG, &reg, "registering a UMEM")?;
        setsockopt(fd, SOL_XDP, XDP_UMEM_FILL_RING, &fill, "sizing a fill ring")?;
        setsockopt(
            fd,
            SOL_XDP,
            XDP_UMEM_COMPLETION_RING,
            &completion,
            "sizing a completion ring",
        )?;
        let off: MmapOffsets = getsockopt(fd, XDP_MMAP_OFFSETS)
            .ok_or_else(|| os("reading the AF_XDP ring offsets"))?;
        Ok(Self {
            fill: Ring::map::<u64>(
                fd,
                off.fr,
                fill,
                XDP_UMEM_PGOFF_FILL_RING,
                "mapping a fill ring",
            )?,
            completion: Ring::map::<u64>(
                fd,
                off.cr,
                completion,
                XDP_UMEM_PGOFF_COMPLETION_RING,
                "mapping a completion ring",
            )?,
            area,
            off,
        })
    }
}

/// One AF_XDP socket, bound to a queue, with its RX ring.
#[derive(Debug)]
pub struct XskSocket {
    fd: OwnedFd,
    rx: Ring,
    umem: Arc<Umem>,
    /// Drops the kernel counted so far (its counts are cumulative).
    drops_seen: u64,
    /// Addresses to give back, reused.
    done: Vec<u64>,
    /// Frames may carry the NIC's hash in their metadata (hardware mode).
    rx_hash_meta: bool,
}

/// How a queue's sockets bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Zero-copy: the driver DMAs into the UMEM.
    ZeroCopy,
    /// Copy: the kernel copies each frame into the UMEM (veth, generic
    /// XDP).
    Copy,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
        })
    }
}

impl XskSocket {
    /// A socket with an RX ring, not bound.
    fn unbound() -> Result<OwnedFd, RuntimeError> {
        let fd = xsk_socket()?;
        setsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            XDP_RX_RING,
            &RX_RING,
            "sizing an AF_XDP RX ring",
        )?;
        Ok(fd)
    }

    fn map_rx(fd: &OwnedFd) -> Result<Ring, RuntimeError> {
        let off: MmapOffsets = getsockopt(fd.as_raw_fd(), XDP_MMAP_OFFSETS)
            .ok_or_else(|| os("reading the AF_XDP ring offsets"))?;
        Ring::map::<Desc>(
            fd.as_raw_fd(),
            off.rx,
            RX_RING,
            XDP_PGOFF_RX_RING,
            "mapping an AF_XDP RX ring",
        )
    }

    /// The first socket of `queue`, owner of its UMEM, bound with `flags`
    /// (zero-copy or copy).
    fn first(ifindex: u32, queue: u32, flags: u16) -> Result<Self, RuntimeError> {
        let fd = Self::unbound()?;
        let OwnUmem {
            area,
            fill,
            completion,
            off,
        } = OwnUmem::register(fd.as_raw_fd(), QUEUE_FRAMES, QUEUE_FRAMES, COMPLETION_RING)?;
        let rx = Ring::map::<Desc>(
            fd.as_raw_fd(),
            off.rx,
            RX_RING,
            XDP_PGOFF_RX_RING,
            "mapping an AF_XDP RX ring",
        )?;
        let umem = Arc::new(Umem {
            area,
            fill: Mutex::new(fill),
            _completion: completion,
        });
        let all: Vec<u64> = (0..u64::from(QUEUE_FRAMES))
            .map(|i| i * u64::from(FRAME_SIZE))
            .collect();
        umem.refill(&all);
        bind(fd.as_raw_fd(), ifindex, queue, flags, 0)?;
        Ok(Self {
            fd,
            rx,
            umem,
            drops_seen: 0,
            done: Vec::with_capacity(BATCH as usize),
            rx_hash_meta: false,
        })
    }

    /// Another socket of `first`'s queue, sharing its UMEM.
    fn sharing(first: &XskSocket, ifindex: u32, queue: u32) -> Result<Self, RuntimeError> {
        let fd = Self::unbound()?;
        let rx = Self::map_rx(&fd)?;
        bind(
            fd.as_raw_fd(),
            ifindex,
            queue,
            XDP_SHARED_UMEM,
            first.fd.as_raw_fd() as u32,
        )?;
        Ok(Self {
            fd,
            rx,
            umem: Arc::clone(&first.umem),
            drops_seen: 0,
            done: Vec::with_capacity(BATCH as usize),
            rx_hash_meta: false,
        })
    }

    /// Calls `f` on up to [`BATCH`] frames of the RX ring, in order, then
    /// gives their frames back to the fill ring; returns how many.
    fn batch(&mut self, f: &mut impl FnMut(Frame<'_>)) -> usize {
        let cons = self.rx.index(self.rx.consumer).load(Ordering::Relaxed);
        let prod = self.rx.index(self.rx.producer).load(Ordering::Acquire);
        let n = prod.wrapping_sub(cons).min(BATCH);
        if n == 0 {
            return 0;
        }
        let timestamp_ns = realtime_ns();
        self.done.clear();
        for i in 0..n {
            // SAFETY: a descriptor the kernel produced (acquired above).
            let d = unsafe { *self.rx.slot::<Desc>(cons.wrapping_add(i)) };
            let at = d.addr as usize;
            let len = d.len as usize;
            if at + len > self.umem.area.len {
                continue;
            }
            let nic_hash = if self.rx_hash_meta {
                self.take_rx_hash(at)
            } else {
                None
            };
            // SAFETY: the frame's bytes inside the UMEM, ours until their
            // chunk goes back to the fill ring below.
            let data = unsafe { std::slice::from_raw_parts_mut(self.umem.area.ptr.add(at), len) };
            f(Frame {
                data,
                wire_len: d.len,
                timestamp_ns,
                nic_hash,
            });
            self.done.push(d.addr);
        }
        self.rx
            .index(self.rx.consumer)
            .store(cons.wrapping_add(n), Ordering::Release);
        self.umem.refill(&self.done);
        n as usize
    }

    /// The NIC's hash the program put in the metadata before the frame at
    /// `at`, if it did: the hash, then [`RX_HASH_MAGIC`]. Wiped once read,
    /// so that a later frame in the same chunk without metadata (whose
    /// bytes there are left as they were) is not taken for one with it.
    fn take_rx_hash(&mut self, at: usize) -> Option<u32> {
        if at < 8 || at % 4 != 0 {
            return None;
        }
        // SAFETY: the 8 bytes before the frame, inside its chunk (the
        // kernel's headroom), ours with the frame; u32-aligned (checked).
        let meta = unsafe { &mut *self.umem.area.ptr.add(at - 8).cast::<[u32; 2]>() };
        let found = (meta[1] == RX_HASH_MAGIC).then_some(meta[0]);
        *meta = [0, 0];
        found
    }

    /// Frames the kernel dropped for this socket (RX ring full, or no
    /// free frame in the fill ring) since the last call.
    fn drops(&mut self) -> u64 {
        let Some(s) = getsockopt::<XdpStatistics>(self.fd.as_raw_fd(), XDP_STATISTICS) else {
            return 0;
        };
        let total = s.rx_dropped + s.rx_ring_full;
        let new = total.saturating_sub(self.drops_seen);
        self.drops_seen = total;
        new
    }
}

fn bind(fd: RawFd, ifindex: u32, queue: u32, flags: u16, shared: u32) -> Result<(), RuntimeError> {
    let addr = SockaddrXdp {
        family: AF_XDP as u16,
        flags,
        ifindex,
        queue_id: queue,
        shared_umem_fd: shared,
    };
    // SAFETY: a valid address of the size passed.
    let r = unsafe {
        libc::bind(
            fd,
            (&addr as *const SockaddrXdp).cast(),
            std::mem::size_of::<SockaddrXdp>() as u32,
        )
    };
    if r != 0 {
        return Err(os("binding an AF_XDP socket to the interface's queue"));
    }
    Ok(())
}

/// An AF_XDP socket that transmits on one queue of an interface, with a
/// UMEM of its own: a frame is copied into one of its chunks and its
/// descriptor put on the TX ring; the kernel sends what the ring holds
/// when kicked (`sendto`) and gives the chunk back on the completion ring.
/// One per worker, each on its own queue (the kernel binds one UMEM to a
/// queue).
#[derive(Debug)]
pub struct XskTx {
    fd: OwnedFd,
    area: Mapping,
    tx: Ring,
    completion: Ring,
    _fill: Ring,
    /// Chunks neither on the TX ring nor waiting for their completion.
    free: Vec<u64>,
    /// Our TX producer index (published at each push).
    produced: u32,
    /// How the socket bound.
    pub mode: Mode,
}

/// What a [`XskTx::flush`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Frames the interface refused (consumed from the ring, not sent).
    pub refused: u64,
    /// Frames left on the ring: the interface took none for
    /// [`TX_STALL`].
    pub stuck: u64,
}

impl XskTx {
    /// A socket transmitting on `queue` of interface `ifindex`, zero-copy
    /// where the driver allows it, copy mode otherwise.
    pub fn new(ifindex: u32, queue: u32) -> Result<Self, RuntimeError> {
        match Self::bound(ifindex, queue, XDP_ZEROCOPY) {
            Ok(s) => Ok(s),
            Err(RuntimeError::Os(_)) => Self::bound(ifindex, queue, XDP_COPY),
            Err(e) => Err(e),
        }
    }

    fn bound(ifindex: u32, queue: u32, flags: u16) -> Result<Self, RuntimeError> {
        let fd = xsk_socket()?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_XDP, XDP_TX_RING, &TX_FRAMES, "sizing a TX ring")?;
        let OwnUmem {
            area,
            fill,
            completion,
            off,
        } = OwnUmem::register(raw, TX_FRAMES, TX_FILL_RING, TX_FRAMES)?;
        let tx = Ring::map::<Desc>(
            raw,
            off.tx,
            TX_FRAMES,
            XDP_PGOFF_TX_RING,
            "mapping an AF_XDP TX ring",
        )?;
        bind(raw, ifindex, queue, flags, 0)?;
        let produced = tx.index(tx.producer).load(Ordering::Relaxed);
        Ok(Self {
            fd,
            area,
            tx,
            completion,
            _fill: fill,
            free: (0..u64::from(TX_FRAMES))
                .rev()
                .map(|i| i * u64::from(FRAME_SIZE))
                .collect(),
            produced,
            mode: if flags & XDP_ZEROCOPY != 0 {
                Mode::ZeroCopy
            } else {
                Mode::Copy
            },
        })
    }

    /// Puts a copy of `frame` on the TX ring (sent at the next
    /// [`flush`](Self::flush) at the latest); false when it cannot: longer
    /// than a chunk, or no chunk free even after the kernel sent what it
    /// holds.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if frame.len() > FRAME_SIZE as usize {
            return false;
        }
        if self.free.is_empty() {
            self.reap();
        }
        if self.free.is_empty() {
            // Every chunk on the ring or in flight: send them first.
            self.flush();
        }
        let Some(addr) = self.free.pop() else {
            return false;
        };
        // SAFETY: a free chunk of our UMEM (neither on the ring nor in
        // flight), as long as the frame (checked above); the slot is past
        // the kernel's consumer (the ring holds every chunk).
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.area.ptr.add(addr as usize),
                frame.len(),
            );
            *self.tx.slot::<Desc>(self.produced) = Desc {
                addr,
                len: frame.len() as u32,
                options: 0,
            };
        }
        self.produced = self.produced.wrapping_add(1);
        self.tx
            .index(self.tx.producer)
            .store(self.produced, Ordering::Release);
        true
    }

    /// Frames on the TX ring the kernel has not taken yet.
    pub fn queued(&self) -> u32 {
        self.produced
            .wrapping_sub(self.tx.index(self.tx.consumer).load(Ordering::Acquire))
    }

    /// Takes back the chunks the kernel has completed.
    fn reap(&mut self) {
        let cons = self
            .completion
            .index(self.completion.consumer)
            .load(Ordering::Relaxed);
        let prod = self
            .completion
            .index(self.completion.producer)
            .load(Ordering::Acquire);
        for i in 0..prod.wrapping_sub(cons) {
            // SAFETY: an entry the kernel produced (acquired above).
            let addr = unsafe { *self.completion.slot::<u64>(cons.wrapping_add(i)) };
            self.free.push(addr & !u64::from(FRAME_SIZE - 1));
        }
        self.completion
            .index(self.completion.consumer)
            .store(prod, Ordering::Release);
    }

    /// Kicks the kernel until it has taken every frame on the TX ring (in
    /// copy mode each is then handed to the interface; veth's peer has
    /// received it when the kick returns), taking back the chunks it
    /// completed. Gives up after [`TX_STALL`] without progress (an
    /// interface that is down keeps its ring).
    pub fn flush(&mut self) -> Flushed {
        let mut flushed = Flushed::default();
        let mut last = self.queued();
        let mut stalled_since = None;
        while last > 0 {
            // SAFETY: a kick: no buffer, no address.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
                // The interface dropped one frame: taken, not sent.
                flushed.refused += 1;
            }
            self.reap();
            let now = self.queued();
            if now < last {
                stalled_since = None;
            } else {
                let since = *stalled_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > TX_STALL {
                    flushed.stuck = u64::from(now);
                    break;
                }
                std::thread::yield_now();
            }
            last = now;
        }
        self.reap();
        flushed
    }
}

/// A worker's sockets, one per queue.
#[derive(Debug)]
pub struct XskRx {
    sockets: Vec<XskSocket>,
}

impl XskRx {
    /// Calls `f` on the frames ready, a batch from each socket, in each
    /// socket's order; returns how many.
    pub fn next_batch(&mut self, mut f: impl FnMut(Frame<'_>)) -> usize {
        self.sockets.iter_mut().map(|s| s.batch(&mut f)).sum()
    }

    /// Waits at most `timeout_ms` for a frame on any socket of these and
    /// of `other`'s.
    pub fn wait_with(&self, other: Option<&XskRx>, timeout_ms: i32) {
        let mut fds: Vec<libc::pollfd> = self
            .sockets
            .iter()
            .chain(other.into_iter().flat_map(|o| &o.sockets))
            .map(|s| libc::pollfd {
                fd: s.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: valid pollfds, as many as passed.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    }

    /// Frames the kernel dropped for these sockets since the last call.
    pub fn drops(&mut self) -> u64 {
        self.sockets.iter_mut().map(XskSocket::drops).sum()
    }
}

/// The backend set up on an interface: the steering, each worker's
/// sockets, and the attached program.
#[derive(Debug)]
pub struct XdpSetup {
    /// The per-bucket words, as the fanout program's.
    pub steering: Steering,
    /// Worker `w`'s sockets, one per queue: those of the frames steered by
    /// their bucket, and with override slots those steered by an override.
    pub rx: Vec<(XskRx, Option<XskRx>)>,
    /// The queues.
    pub queues: u32,
    /// How the sockets bound.
    pub mode: Mode,
    /// What keeps the program attached (dropped: detached).
    pub attached: Attached,
}

/// Hardware mode's maps, shared with its program: per bucket, the frames
/// that came on the queue the NIC names before its word did (`early`), and
/// that queue (`nic_queue`, written with the NIC's table); per queue, every
/// frame the program saw (`queue_frames`); frames that came after their
/// fence (`late`, one entry); frames bucketed by the NIC's hash and by
/// the program's Toeplitz (`hashes`).
#[derive(Debug)]
pub struct NicCounts {
    pub(crate) early: MappedArray,
    pub(crate) queue_frames: MappedArray,
    pub(crate) nic_queue: MappedArray,
    pub(crate) late: MappedArray,
    pub(crate) hashes: MappedArray,
    /// The program reads the NIC's hash (it loaded bound to the device).
    pub(crate) rx_hash: bool,
}

/// The program's link and maps, kept for as long as it runs.
#[derive(Debug)]
pub struct Attached {
    _link: OwnedFd,
    _xsks: MapHandle,
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// An ethtool `SIOCETHTOOL` request on `iface` with `data` (a request
/// struct of `<linux/ethtool.h>`, its command first), through a socket of
/// the calling thread's network namespace; false if refused.
pub(crate) fn ethtool_request<T>(iface: &str, data: &mut T) -> bool {
    // SAFETY: plain socket creation; checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: a descriptor just created and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: zeroed is a valid ifreq.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    if iface.len() >= ifr.ifr_name.len() {
        return false;
    }
    for (d, b) in ifr.ifr_name.iter_mut().zip(iface.bytes()) {
        *d = b as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (data as *mut T).cast();
    // SAFETY: SIOCETHTOOL with an ifreq pointing at a live request struct
    // of the command's type (the caller's).
    unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) == 0 }
}

/// The receive queues (rx plus combined channels) ethtool reports; `None`
/// when the driver does not say.
fn ethtool_rx_queues(iface: &str) -> Option<u32> {
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let ok = ethtool_request(iface, &mut channels);
    let n = channels.rx_count + channels.combined_count;
    (ok && n > 0).then_some(n)
}

/// The number of receive queues of `iface` (index `ifindex`): ethtool's
/// channels, else sysfs — only when its entry is the same interface (a
/// thread that entered another network namespace still sees the sysfs of
/// the one it was mounted for).
pub fn rx_queues(iface: &str, ifindex: u32) -> Result<u32, RuntimeError> {
    if let Some(n) = ethtool_rx_queues(iface) {
        return Ok(n);
    }
    let unknown = || {
        RuntimeError::Config(format!(
            "cannot tell how many receive queues {iface} has (no ethtool channels, no sysfs entry)"
        ))
    };
    let dir = format!("/sys/class/net/{iface}");
    let same = std::fs::read_to_string(format!("{dir}/ifindex"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        == Some(ifindex);
    if !same {
        return Err(unknown());
    }
    let entries = std::fs::read_dir(format!("{dir}/queues")).map_err(|_| unknown())?;
    let n = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count() as u32;
    Ok(n.max(1))
}

/// The sizes of hardware mode's maps.
#[derive(Debug, Clone, Copy)]
struct NicSizes {
    buckets: usize,
    workers: usize,
    queues: u32,
}

/// Opens and loads hardware mode's program in `storage`: bound to device
/// `bound` (the RX-hash program), or not (the Toeplitz one).
fn load_nic(
    storage: &mut MaybeUninit<libbpf_rs::OpenObject>,
    sizes: NicSizes,
    bound: Option<u32>,
) -> Result<nic_skel::XskNicSkel<'_>, RuntimeError> {
    let bpf = |what| move |source| RuntimeError::Bpf { what, source };
    let mut open = XskNicSkelBuilder::default()
        .open(storage)
        .map_err(bpf("opening the XDP program"))?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or_else(|| RuntimeError::Config("the XDP program has no .rodata".into()))?;
    rodata.bucket_mask = (sizes.buckets - 1) as u32;
    size_words(
        &mut open.maps.rsspp_words,
        &mut open.maps.rsspp_flagged,
        &mut open.maps.rsspp_overrides,
        sizes.buckets,
        0,
    )?;
    for (map, entries, what) in [
        (
            &mut open.maps.rsspp_xsks,
            sizes.workers as u32,
            "sizing the socket map",
        ),
        (
            &mut open.maps.rsspp_early,
            sizes.buckets as u32,
            "sizing the early counts",
        ),
        (
            &mut open.maps.rsspp_queue_frames,
            sizes.queues,
            "sizing the queue counts",
        ),
        (
            &mut open.maps.rsspp_nic_queue,
            sizes.buckets as u32,
            "sizing the table's mirror",
        ),
    ] {
        map.set_max_entries(entries).map_err(bpf(what))?;
    }
    open.progs.rsspp_xsk_nic.set_autoload(bound.is_none());
    open.progs.rsspp_xsk_nic_rxh.set_autoload(bound.is_some());
    if let Some(ifindex) = bound {
        // The kfunc's driver implementation is resolved at load, for this
        // device only.
        open.progs.rsspp_xsk_nic_rxh.set_ifindex(ifindex);
        open.progs
            .rsspp_xsk_nic_rxh
            .set_flags(BPF_F_XDP_DEV_BOUND_ONLY);
    }
    open.load().map_err(load_error("loading the XDP program"))
}

/// `per_queue` sockets on each of queues `0..queues` of `iface`, those of
/// a queue sharing its UMEM, and how they bound: zero-copy where the
/// driver has it (for every queue, or for none: the first refusal
/// decides), copy mode otherwise.
fn open_queues(
    iface: &str,
    ifindex: u32,
    queues: u32,
    per_queue: usize,
) -> Result<(Vec<Vec<XskSocket>>, Mode), RuntimeError> {
    let mut mode = Mode::ZeroCopy;
    let mut all: Vec<Vec<XskSocket>> = Vec::with_capacity(queues as usize);
    for q in 0..queues {
        let copy = || {
            XskSocket::first(ifindex, q, XDP_COPY).map_err(|e| match e {
                RuntimeError::Os(o) => RuntimeError::Config(format!(
                    "{iface} queue {q}: no AF_XDP socket, not even in copy mode ({})",
                    o.source
                )),
                e => e,
            })
        };
        let first = if mode == Mode::ZeroCopy {
            match XskSocket::first(ifindex, q, XDP_ZEROCOPY) {
                Ok(s) => s,
                Err(RuntimeError::Os(o)) => {
                    tracing::debug!("{iface} queue {q}: no zero-copy ({o}); copy mode");
                    mode = Mode::Copy;
                    copy()?
                }
                Err(e) => return Err(e),
            }
        } else {
            copy()?
        };
        let mut sockets = Vec::with_capacity(per_queue);
        for _ in 1..per_queue {
            sockets.push(XskSocket::sharing(&first, ifindex, q)?);
        }
        sockets.insert(0, first);
        all.push(sockets);
    }
    Ok((all, mode))
}

/// Puts each queue's sockets into the programs' socket map, queue-major:
/// socket `i` of queue `q` at `q * sockets per queue + i`.
fn fill_xsks(
    map: &libbpf_rs::MapMut<'_>,
    per_queue: &[Vec<XskSocket>],
) -> Result<(), RuntimeError> {
    for (q, sockets) in per_queue.iter().enumerate() {
        for (i, s) in sockets.iter().enumerate() {
            let slot = (q * sockets.len() + i) as u32;
            map.update(
                &slot.to_ne_bytes(),
                &(s.fd.as_raw_fd() as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|source| RuntimeError::Bpf {
                what: "adding a socket to the socket map",
                source,
            })?;
        }
    }
    Ok(())
}

/// Attaches `prog` to `iface` (index `ifindex`) through a BPF link, the
/// refusal said in one line.
fn attach_to(prog: RawFd, iface: &str, ifindex: u32) -> Result<OwnedFd, RuntimeError> {
    attach(prog, ifindex).map_err(|source| {
        let why = match source.raw_os_error() {
            Some(libc::ERANGE) => " (its MTU is too large for XDP)",
            Some(libc::EEXIST) | Some(libc::EBUSY) => " (another XDP program is attached)",
            Some(libc::EOPNOTSUPP) => " (no XDP on this interface)",
            _ => "",
        };
        RuntimeError::Config(format!(
            "cannot attach an XDP program to {iface}: {source}{why}"
        ))
    })
}

impl XdpSetup {
    /// Loads the program for `buckets` buckets hashed with `key` and
    /// `slots` override slots (0: none), opens `workers` sockets on each of
    /// the interface's receive queues (twice as many with slots), and
    /// attaches the program last: every bucket starts on nobody (passed to
    /// the stack), as the fanout program's member 0.
    pub fn new(
        iface: &str,
        ifindex: u32,
        workers: usize,
        buckets: usize,
        slots: usize,
        key: &RssKey,
    ) -> Result<Self, RuntimeError> {
        if !buckets.is_power_of_two() || buckets > MAX_BUCKETS {
            return Err(RuntimeError::Config(format!(
                "the table size must be a power of two up to {MAX_BUCKETS}, not {buckets}"
            )));
        }
        let queues = rx_queues(iface, ifindex)?;
        let queue_sockets = if slots > 0 { 2 * workers } else { workers };
        // Sockets first: no privileges (or no AF_XDP) is said before any
        // program is loaded.
        let (per_queue, mode) = open_queues(iface, ifindex, queues, queue_sockets)?;

        route_libbpf_logs();
        let bpf = |what| move |source| RuntimeError::Bpf { what, source };
        let mut storage = MaybeUninit::uninit();
        let mut open = XskSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("opening the XDP program"))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| RuntimeError::Config("the XDP program has no .rodata".into()))?;
        rodata.bucket_mask = (buckets - 1) as u32;
        rodata.workers = workers as u32;
        rodata.queue_sockets = queue_sockets as u32;
        size_words(
            &mut open.maps.rsspp_words,
            &mut open.maps.rsspp_flagged,
            &mut open.maps.rsspp_overrides,
            buckets,
            slots,
        )?;
        open.maps
            .rsspp_xsks
            .set_max_entries(queues * queue_sockets as u32)
            .map_err(bpf("sizing the socket map"))?;
        let skel = open.load().map_err(load_error("loading the XDP program"))?;
        write_key(&skel.maps.rsspp_key, key)?;
        fill_xsks(&skel.maps.rsspp_xsks, &per_queue)?;
        let prog = owned_prog_fd(&skel.progs.rsspp_xsk)?;
        let xsks =
            MapHandle::try_from(&skel.maps.rsspp_xsks).map_err(bpf("taking the socket map"))?;
        let steering = Steering::with_words(prog, word_maps!(skel.maps), buckets, slots)?;
        let link = attach_to(steering.prog_fd(), iface, ifindex)?;
        // Socket `w` of a queue is worker w's, `workers + w` its
        // override-steered one.
        let mut rx: Vec<(XskRx, Option<XskRx>)> = (0..workers)
            .map(|_| {
                let empty = || XskRx {
                    sockets: Vec::new(),
                };
                (empty(), (slots > 0).then(empty))
            })
            .collect();
        for sockets in per_queue {
            for (i, s) in sockets.into_iter().enumerate() {
                let (bucket_steered, override_steered) = &mut rx[i % workers];
                match override_steered {
                    Some(o) if i >= workers => o.sockets.push(s),
                    _ => bucket_steered.sockets.push(s),
                }
            }
        }
        Ok(Self {
            steering,
            rx,
            queues,
            mode,
            attached: Attached {
                _link: link,
                _xsks: xsks,
            },
        })
    }

    /// Hardware mode: loads the counting program for the NIC's table of
    /// `buckets` buckets and its `key`, opens one socket on each of the
    /// queues `0..workers` (worker w's on queue w), and attaches the
    /// program last; every bucket starts on nobody. The NIC's table is the
    /// caller's to write. Also returns the maps the controller's fences
    /// and marks read.
    pub fn nic(
        iface: &str,
        ifindex: u32,
        workers: usize,
        buckets: usize,
        key: &RssKey,
    ) -> Result<(Self, NicCounts), RuntimeError> {
        if !buckets.is_power_of_two() || buckets > MAX_BUCKETS {
            return Err(RuntimeError::Config(format!(
                "{iface}'s indirection table has {buckets} entries: hardware mode needs a power of two up to {MAX_BUCKETS}"
            )));
        }
        // A queue per worker: `Nic::open` said so if there are fewer.
        let queues = rx_queues(iface, ifindex)?.max(workers as u32);
        let (per_queue, mode) = open_queues(iface, ifindex, workers as u32, 1)?;

        route_libbpf_logs();
        let bpf = |what| move |source| RuntimeError::Bpf { what, source };
        // The program that reads the NIC's hash, bound to the device;
        // where the kernel or driver refuses it, the one that hashes here.
        let (mut first, mut second) = (MaybeUninit::uninit(), MaybeUninit::uninit());
        let sizes = NicSizes {
            buckets,
            workers,
            queues,
        };
        let (skel, rx_hash) = match load_nic(&mut first, sizes, Some(ifindex)) {
            Ok(skel) => (skel, true),
            Err(e) => {
                tracing::info!("{iface}: no RX-hash program ({e}); hashing with Toeplitz in XDP");
                (load_nic(&mut second, sizes, None)?, false)
            }
        };
        write_key(&skel.maps.rsspp_key, key)?;
        fill_xsks(&skel.maps.rsspp_xsks, &per_queue)?;
        let prog = if rx_hash {
            owned_prog_fd(&skel.progs.rsspp_xsk_nic_rxh)?
        } else {
            owned_prog_fd(&skel.progs.rsspp_xsk_nic)?
        };
        let xsks =
            MapHandle::try_from(&skel.maps.rsspp_xsks).map_err(bpf("taking the socket map"))?;
        let map = |m: &libbpf_rs::MapMut<'_>, len: usize, what: &'static str| {
            MappedArray::new(MapHandle::try_from(m).map_err(bpf(what))?, len, what)
        };
        let counts = NicCounts {
            early: map(&skel.maps.rsspp_early, buckets, "mapping the early counts")?,
            queue_frames: map(
                &skel.maps.rsspp_queue_frames,
                queues as usize,
                "mapping the queue counts",
            )?,
            nic_queue: map(
                &skel.maps.rsspp_nic_queue,
                buckets,
                "mapping the table's mirror",
            )?,
            late: map(&skel.maps.rsspp_late, 1, "mapping the late count")?,
            hashes: map(&skel.maps.rsspp_hashes, 2, "mapping the hash counts")?,
            rx_hash,
        };
        let steering = Steering::with_words(prog, word_maps!(skel.maps), buckets, 0)?;
        let link = attach_to(steering.prog_fd(), iface, ifindex)?;
        let rx = per_queue
            .into_iter()
            .map(|mut sockets| {
                for s in &mut sockets {
                    s.rx_hash_meta = rx_hash;
                }
                (XskRx { sockets }, None)
            })
            .collect();
        Ok((
            Self {
                steering,
                rx,
                queues,
                mode,
                attached: Attached {
                    _link: link,
                    _xsks: xsks,
                },
            },
            counts,
        ))
    }
}

/// `struct bpf_attr`'s `link_create` part, padded to the union's size.
#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    rest: [u64; 16],
}

/// Attaches an XDP program through a BPF link: native mode where the
/// driver has it, generic otherwise (the kernel's choice with no mode
/// flag); detached when the returned fd closes.
fn attach(prog: RawFd, ifindex: u32) -> std::io::Result<OwnedFd> {
    let attr = LinkCreate {
        prog_fd: prog as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: 0,
        rest: [0; 16],
    };
    // SAFETY: the bpf syscall with an attribute of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &attr as *const LinkCreate,
            std::mem::size_of::<LinkCreate>() as u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a link fd just created, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Nanoseconds since the Unix epoch (AF_XDP frames carry no timestamp).
fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_structs_have_the_kernels_sizes() {
        // <linux/if_xdp.h>, <linux/bpf.h>, <linux/ethtool.h> on x86_64 and
        // aarch64.
        assert_eq!(std::mem::size_of::<UmemReg>(), 32);
        assert_eq!(std::mem::size_of::<RingOffset>(), 32);
        assert_eq!(std::mem::size_of::<MmapOffsets>(), 128);
        assert_eq!(std::mem::size_of::<SockaddrXdp>(), 16);
        assert_eq!(std::mem::size_of::<XdpStatistics>(), 48);
        assert_eq!(std::mem::size_of::<Desc>(), 16);
        assert_eq!(std::mem::size_of::<LinkCreate>(), 144);
        assert_eq!(std::mem::size_of::<EthtoolChannels>(), 36);
    }

    #[test]
    fn modes_are_named_as_the_log_says() {
        assert_eq!(Mode::Copy.to_string(), "copy");
        assert_eq!(Mode::ZeroCopy.to_string(), "zero-copy");
    }
}
