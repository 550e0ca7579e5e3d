//! Thin, checked wrappers of the system calls the listeners and workers
//! make (libc): the reuseport group, accept4, the socket options read per
//! connection and per listener, epoll, pinning, a thread's CPU time.

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::AcceptError;

/// `SO_INCOMING_CPU` (asm-generic/socket.h; the same on x86 and arm64).
const SO_INCOMING_CPU: libc::c_int = 49;
/// `SO_ATTACH_REUSEPORT_EBPF` (asm-generic/socket.h).
const SO_ATTACH_REUSEPORT_EBPF: libc::c_int = 52;

fn check(ret: libc::c_int, what: impl FnOnce() -> String) -> Result<libc::c_int, AcceptError> {
    if ret < 0 {
        Err(AcceptError::last_os(what()))
    } else {
        Ok(ret)
    }
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: a valid int of the size passed.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr(sa: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    )
}

/// A non-blocking TCP listener on `addr` in a SO_REUSEPORT group, with an
/// accept queue of `backlog` connections.
pub fn reuseport_listener(addr: SocketAddrV4, backlog: u32) -> Result<OwnedFd, AcceptError> {
    // SAFETY: plain socket(2).
    let fd = check(
        unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        },
        || "socket".into(),
    )?;
    // SAFETY: a fresh fd we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    for (name, what) in [
        (libc::SO_REUSEADDR, "SO_REUSEADDR"),
        (libc::SO_REUSEPORT, "SO_REUSEPORT"),
    ] {
        setsockopt_int(fd, libc::SOL_SOCKET, name, 1).map_err(|source| AcceptError::Os {
            what: format!("setting {what}"),
            source,
        })?;
    }
    let sa = sockaddr(addr);
    // SAFETY: a valid sockaddr_in of the size passed.
    check(
        unsafe {
            libc::bind(
                fd,
                (&sa as *const libc::sockaddr_in).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        },
        || format!("binding {addr}"),
    )?;
    // SAFETY: listen on our socket.
    check(unsafe { libc::listen(fd, backlog as i32) }, || {
        format!("listening on {addr}")
    })?;
    Ok(sock)
}

/// Attaches an sk_reuseport program to the listener's group.
pub fn attach_reuseport_prog(listener: RawFd, prog: RawFd) -> Result<(), AcceptError> {
    setsockopt_int(listener, libc::SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, prog).map_err(|source| {
        AcceptError::Os {
            what: "attaching the sk_reuseport program (SO_ATTACH_REUSEPORT_EBPF)".into(),
            source,
        }
    })
}

/// An accepted connection: its socket, the peer, and the local address.
pub struct Accepted {
    /// The connection's socket (non-blocking).
    pub fd: OwnedFd,
    /// The client.
    pub peer: SocketAddrV4,
}

/// accept4 on a non-blocking listener: `Ok(None)` when none waits.
pub fn accept(listener: RawFd) -> io::Result<Option<Accepted>> {
    // SAFETY: zeroed is a valid sockaddr_in.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a sockaddr_in buffer and its length.
    let fd = unsafe {
        libc::accept4(
            listener,
            (&mut sa as *mut libc::sockaddr_in).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ECONNABORTED) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = setsockopt_int(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
    Ok(Some(Accepted {
        fd,
        peer: from_sockaddr(&sa),
    }))
}

/// The local address of a socket.
pub fn local_addr(fd: RawFd) -> io::Result<SocketAddrV4> {
    // SAFETY: zeroed is a valid sockaddr_in.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a sockaddr_in buffer and its length.
    let ret =
        unsafe { libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in).cast(), &mut len) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(from_sockaddr(&sa))
}

/// The CPU that last processed a packet of the socket (`SO_INCOMING_CPU`);
/// `None` when the kernel has not recorded one.
pub fn incoming_cpu(fd: RawFd) -> Option<usize> {
    let mut cpu: i32 = -1;
    let mut len = size_of::<i32>() as libc::socklen_t;
    // SAFETY: an int buffer and its length.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_INCOMING_CPU,
            (&mut cpu as *mut i32).cast(),
            &mut len,
        )
    };
    (ret == 0 && cpu >= 0).then_some(cpu as usize)
}

/// A listener's accept queue: connections waiting, and its capacity
/// (`TCP_INFO` of a listening socket: `tcpi_unacked` is the queue's
/// length, `tcpi_sacked` its limit).
pub fn accept_queue(listener: RawFd) -> io::Result<(usize, usize)> {
    // SAFETY: zeroed is a valid tcp_info.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a tcp_info buffer and its length.
    let ret = unsafe {
        libc::getsockopt(
            listener,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.tcpi_unacked as usize, info.tcpi_sacked as usize))
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), AcceptError> {
    // SAFETY: zeroed is an empty cpu_set_t; CPU_SET stays in bounds for
    // cpu < CPU_SETSIZE, checked first.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(AcceptError::Config(format!("CPU {cpu} is out of range")));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        check(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            || format!("pinning a worker to CPU {cpu}"),
        )?;
    }
    Ok(())
}

/// An epoll instance.
pub struct Epoll(OwnedFd);

/// Readable (level-triggered).
pub const IN: u32 = libc::EPOLLIN as u32;
/// Writable.
pub const OUT: u32 = libc::EPOLLOUT as u32;
/// Hang-up or error.
pub const HUP: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;

impl Epoll {
    /// A new instance.
    pub fn new() -> Result<Self, AcceptError> {
        // SAFETY: plain epoll_create1.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }, || {
            "epoll_create1".into()
        })?;
        // SAFETY: a fresh fd we own.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: a valid event for the call.
        let ret = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Watches `fd` for `events`, reported with `token`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes what `fd` is watched for.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Waits up to `timeout_ms` for events; returns how many were written.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
        // SAFETY: the buffer and its length.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(n as usize)
    }
}

/// The index of interface `name` in this network namespace.
pub fn ifindex(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (index != 0).then_some(index)
}
