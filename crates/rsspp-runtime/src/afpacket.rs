//! The kernel side of the `afpacket` backend, through libc: AF_PACKET
//! sockets with a TPACKET_V3 receive ring each, joined in one
//! `PACKET_FANOUT_EBPF` group, a transmit socket per worker, pinning a
//! thread to a CPU.
//!
//! TPACKET_V3 hands frames over a block at a time: the kernel fills a block
//! (or closes it after the retire timeout) and flips its status to
//! `TP_STATUS_USER`; the worker walks the block's frames in the order the
//! kernel wrote them and gives the block back. A socket's ring is FIFO,
//! which is what the order-preserving moves rely on.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Os, RuntimeError};

// <linux/if_packet.h>, a stable ABI (not all of it is in the libc crate).
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V3: libc::c_int = 2;
const PACKET_FANOUT_EBPF: u32 = 7;
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const SO_ATTACH_FILTER: libc::c_int = 26;
const SO_DETACH_FILTER: libc::c_int = 27;

/// `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// `struct tpacket_stats_v3`.
#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

/// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then
/// `struct tpacket_hdr_v1`).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST: usize = 16;
/// Offsets in `struct tpacket3_hdr`.
const FRAME_NEXT: usize = 0;
const FRAME_SEC: usize = 4;
const FRAME_NSEC: usize = 8;
const FRAME_SNAPLEN: usize = 12;
const FRAME_LEN: usize = 16;
const FRAME_MAC: usize = 24;

/// Ring geometry of one worker.
#[derive(Debug, Clone, Copy)]
pub struct RingConfig {
    /// Bytes per block (a multiple of the page size, a power of two).
    pub block_size: u32,
    /// Blocks in the ring.
    pub blocks: u32,
    /// Milliseconds after which the kernel hands over a block that is not
    /// full.
    pub retire_ms: u32,
}

impl Default for RingConfig {
    /// 128 blocks of 128 KiB (about 1 000 small frames each), handed over
    /// after at most 2 ms: 16 MiB, and at low rates (a block closed by its
    /// timeout) 256 ms of traffic before the ring overflows.
    fn default() -> Self {
        Self {
            block_size: 128 << 10,
            blocks: 128,
            retire_ms: 2,
        }
    }
}

/// The calling thread's last OS error, for `what`.
pub(crate) fn os(what: &'static str) -> RuntimeError {
    RuntimeError::Os(Os {
        what,
        source: std::io::Error::last_os_error(),
    })
}

fn socket(protocol: u16) -> Result<OwnedFd, RuntimeError> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        let source = std::io::Error::last_os_error();
        if source.raw_os_error() == Some(libc::EPERM) {
            return Err(RuntimeError::NoPrivileges);
        }
        return Err(RuntimeError::Os(Os {
            what: "creating an AF_PACKET socket",
            source,
        }));
    }
    // SAFETY: a descriptor just created and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, name, value)`; the error says `what`.
pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    what: &'static str,
) -> Result<(), RuntimeError> {
    // SAFETY: `value` is a live, initialised T of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os(what));
    }
    Ok(())
}

/// The interface's index, or `RuntimeError::NoInterface`.
pub fn ifindex(iface: &str) -> Result<u32, RuntimeError> {
    let unknown = || RuntimeError::NoInterface(iface.to_string());
    let name = CString::new(iface).map_err(|_| unknown())?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(unknown()),
        i => Ok(i),
    }
}

fn bind(fd: RawFd, ifindex: u32, protocol: u16) -> Result<(), RuntimeError> {
    // SAFETY: zeroed is a valid sockaddr_ll.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: a valid address of the size passed.
    let r = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r != 0 {
        return Err(os("binding an AF_PACKET socket to the interface"));
    }
    Ok(())
}

/// A classic BPF filter that accepts nothing (`ret #0`).
fn drop_all(fd: RawFd) -> Result<(), RuntimeError> {
    let mut code = [libc::sock_filter {
        code: 0x06, // BPF_RET | BPF_K
        jt: 0,
        jf: 0,
        k: 0,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: code.as_mut_ptr(),
    };
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        SO_ATTACH_FILTER,
        &prog,
        "attaching a drop-all filter",
    )
}

/// The members of one `PACKET_FANOUT_EBPF` group on an interface.
///
/// Member 0 is a *parking* socket that keeps a drop-all filter: frames of
/// buckets that no worker owns yet (or any more) go there and are dropped
/// without being queued. Members `1..` are the workers' receive sockets, in
/// order. Every socket first gets a drop-all filter, so that nothing reaches
/// it outside the group (a bound socket receives everything until it joins);
/// the workers' filters are removed once all have joined.
#[derive(Debug)]
pub struct FanoutGroup {
    /// The parking socket (member 0), to keep open for the group's lifetime.
    pub parking: OwnedFd,
    /// The workers' receive rings.
    pub rings: Vec<RxRing>,
    /// The group id the kernel chose.
    pub id: u16,
}

impl FanoutGroup {
    /// Creates the group on `ifindex` with `workers` ring sockets and
    /// `prog` (a loaded socket-filter program) as its steering program.
    pub fn new(
        ifindex: u32,
        workers: usize,
        ring: RingConfig,
        prog: RawFd,
    ) -> Result<Self, RuntimeError> {
        let protocol = libc::ETH_P_ALL as u16;
        let parking = socket(protocol)?;
        drop_all(parking.as_raw_fd())?;
        bind(parking.as_raw_fd(), ifindex, protocol)?;
        let mode = PACKET_FANOUT_EBPF << 16 | PACKET_FANOUT_FLAG_UNIQUEID;
        // Outgoing frames of the interface (the host's own) are not ours
        // to process; kernels before 6.6 lack the flag.
        let ignore_outgoing = setsockopt(
            parking.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_FANOUT,
            &(mode | PACKET_FANOUT_FLAG_IGNORE_OUTGOING),
            "joining the fanout group",
        )
        .is_ok();
        if !ignore_outgoing {
            setsockopt(
                parking.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_FANOUT,
                &mode,
                "creating the fanout group",
            )?;
        }
        let mut value: u32 = 0;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: a u32 out-parameter of the length passed.
        let r = unsafe {
            libc::getsockopt(
                parking.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_FANOUT,
                (&mut value as *mut u32).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(os("reading the fanout group id"));
        }
        let id = (value & 0xffff) as u16;
        setsockopt(
            parking.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_FANOUT_DATA,
            &prog,
            "setting the fanout group's program",
        )?;
        let join = PACKET_FANOUT_EBPF << 16
            | u32::from(id)
            | if ignore_outgoing {
                PACKET_FANOUT_FLAG_IGNORE_OUTGOING
            } else {
                0
            };
        let mut rings = Vec::with_capacity(workers);
        for _ in 0..workers {
            let fd = socket(protocol)?;
            drop_all(fd.as_raw_fd())?;
            let r = RxRing::new(fd, ring)?;
            bind(r.fd.as_raw_fd(), ifindex, protocol)?;
            setsockopt(
                r.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_FANOUT,
                &join,
                "joining the fanout group",
            )?;
            rings.push(r);
        }
        for r in &mut rings {
            // Frames of the interface's own host are not ours either way.
            let _ = setsockopt(
                r.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                &1i32,
                "ignoring outgoing frames",
            );
            setsockopt(
                r.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_DETACH_FILTER,
                &0i32,
                "removing the drop-all filter",
            )?;
        }
        Ok(Self { parking, rings, id })
    }
}

/// One socket's TPACKET_V3 receive ring, mapped.
#[derive(Debug)]
pub struct RxRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    blocks: usize,
    next: usize,
}

// SAFETY: the mapping belongs to the ring, which one thread uses at a time.
unsafe impl Send for RxRing {}

/// One received frame.
#[derive(Debug)]
pub struct Frame<'a> {
    /// The frame from its Ethernet header (as far as captured).
    pub data: &'a mut [u8],
    /// Its length on the wire.
    pub wire_len: u32,
    /// The kernel's receive timestamp, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// The NIC's RSS hash, when the program handed it over (the afxdp
    /// backend's hardware mode): the frame's bucket is its low bits.
    pub nic_hash: Option<u32>,
}

impl RxRing {
    /// A ring socket of its own on `ifindex`, in no fanout group: every
    /// frame the interface receives (the host's own outgoing ones left
    /// out). The plain kernel receive path `rsspp bench nf` compares with.
    pub fn plain(ifindex: u32, config: RingConfig) -> Result<Self, RuntimeError> {
        let protocol = libc::ETH_P_ALL as u16;
        let fd = socket(protocol)?;
        let ring = RxRing::new(fd, config)?;
        let _ = setsockopt(
            ring.fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            &1i32,
            "ignoring outgoing frames",
        );
        bind(ring.fd.as_raw_fd(), ifindex, protocol)?;
        Ok(ring)
    }

    fn new(fd: OwnedFd, config: RingConfig) -> Result<Self, RuntimeError> {
        setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_VERSION,
            &TPACKET_V3,
            "selecting TPACKET_V3",
        )?;
        let frame_size = 2048u32;
        let req = TpacketReq3 {
            block_size: config.block_size,
            block_nr: config.blocks,
            frame_size,
            frame_nr: config.block_size / frame_size * config.blocks,
            retire_blk_tov: config.retire_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_RX_RING,
            &req,
            "setting up the receive ring",
        )?;
        let map_len = config.block_size as usize * config.blocks as usize;
        // SAFETY: maps the ring just configured, of its size; checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd.as_raw_fd(),
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED needs RLIMIT_MEMLOCK room; the ring works without.
            // SAFETY: as above.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(os("mapping the receive ring"));
            }
            map
        } else {
            map
        };
        Ok(Self {
            fd,
            map: map.cast(),
            map_len,
            block_size: config.block_size as usize,
            blocks: config.blocks as usize,
            next: 0,
        })
    }

    fn block(&self, i: usize) -> *mut u8 {
        // SAFETY: i < blocks, inside the mapping.
        unsafe { self.map.add(i * self.block_size) }
    }

    fn status(&self, block: *mut u8) -> &AtomicU32 {
        // SAFETY: the status word of a block header inside the mapping,
        // aligned, shared with the kernel: accessed atomically.
        unsafe { AtomicU32::from_ptr(block.add(BLOCK_STATUS).cast()) }
    }

    /// Calls `f` on every frame of the next block the kernel has handed
    /// over, in order, then gives the block back; returns the number of
    /// frames (0: no block ready).
    pub fn next_block(&mut self, mut f: impl FnMut(Frame<'_>)) -> usize {
        let block = self.block(self.next);
        if self.status(block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return 0;
        }
        let read = |at: usize| -> u32 {
            // SAFETY: inside the block, written by the kernel before it set
            // TP_STATUS_USER (acquired above).
            unsafe { std::ptr::read_unaligned(block.add(at).cast::<u32>()) }
        };
        let count = read(BLOCK_NUM_PKTS) as usize;
        let mut at = read(BLOCK_FIRST) as usize;
        for _ in 0..count {
            let next = read(at + FRAME_NEXT) as usize;
            let sec = read(at + FRAME_SEC);
            let nsec = read(at + FRAME_NSEC);
            let snaplen = read(at + FRAME_SNAPLEN) as usize;
            let len = read(at + FRAME_LEN);
            // SAFETY: a u16 inside the frame header.
            let mac = usize::from(unsafe {
                std::ptr::read_unaligned(block.add(at + FRAME_MAC).cast::<u16>())
            });
            debug_assert!(at + mac + snaplen <= self.block_size);
            // SAFETY: the frame's bytes, inside the block, ours until the
            // block goes back to the kernel below.
            let data = unsafe { std::slice::from_raw_parts_mut(block.add(at + mac), snaplen) };
            f(Frame {
                data,
                wire_len: len,
                timestamp_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
                nic_hash: None,
            });
            at += next;
        }
        self.status(block)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.blocks;
        count
    }

    /// The socket, for a poll over several rings.
    pub(crate) fn poll_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Waits at most `timeout_ms` for a block.
    pub fn wait(&self, timeout_ms: i32) {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    }

    /// Frames the kernel dropped because the ring was full, since the last
    /// call.
    pub fn drops(&self) -> u64 {
        let mut stats = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: an out-parameter of the length passed.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut stats as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return 0;
        }
        u64::from(stats.drops)
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// A socket that sends frames out of one interface as they are.
#[derive(Debug)]
pub struct TxSocket {
    fd: OwnedFd,
    addr: libc::sockaddr_ll,
}

// SAFETY: sockaddr_ll is plain data.
unsafe impl Send for TxSocket {}

impl TxSocket {
    /// A socket on `ifindex` that receives nothing (protocol 0).
    pub fn new(ifindex: u32) -> Result<Self, RuntimeError> {
        let fd = socket(0)?;
        // SAFETY: zeroed is a valid sockaddr_ll.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        addr.sll_halen = 6;
        Ok(Self { fd, addr })
    }

    /// Sends one frame; false if the kernel refused it.
    pub fn send(&mut self, frame: &[u8]) -> bool {
        if frame.len() >= 6 {
            self.addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        }
        // SAFETY: the frame and the address outlive the call.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&self.addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        sent == frame.len() as isize
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: u32) -> Result<(), RuntimeError> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET in range.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(RuntimeError::Pin {
            cpu,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
