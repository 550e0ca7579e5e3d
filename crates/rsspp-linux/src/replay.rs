//! A capture's frames sent out of an interface (`rsspp trace replay`):
//! a traffic source in the box, to watch the daemon balance a veth pair
//! without a NIC or a traffic generator.
//!
//! Frames leave through an `AF_PACKET` raw socket bound to the interface,
//! as captured (Ethernet), or behind a made-up Ethernet header (cooked
//! `tcpdump -i any` and raw-IP captures). They go at the capture's own
//! pace or at a fixed rate, once or looped, up to a count; the capture is
//! read as it is sent, so memory does not grow with it. A frame the
//! interface refuses (larger than its MTU) is skipped and counted.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rsspp_trace::{TraceError, TraceReader};

/// The highest fixed rate asked for, frames a second (far above what one
/// sending thread reaches: the rate is then simply as fast as it goes).
pub const MAX_PPS: f64 = 100e6;

/// How fast frames go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// At the capture's own timing (gaps between timestamps kept).
    Capture,
    /// At this many frames a second.
    Pps(f64),
}

/// What to send, where, how fast, how much.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The interface the frames leave through.
    pub iface: String,
    /// How fast.
    pub pace: Pace,
    /// Start again at the end of the capture (until `count` or a stop).
    pub repeat: bool,
    /// Stop after this many frames sent.
    pub count: Option<u64>,
}

/// What was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Frames sent.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Times the capture was started (1 without `repeat`).
    pub passes: u64,
    /// Frames skipped: not Ethernet and not convertible (another link
    /// type), or too short for their header.
    pub not_ethernet: u64,
    /// Frames skipped: the interface refused them as too long (its MTU).
    pub too_long: u64,
    /// Wall time from the first frame to the last, microseconds.
    pub elapsed_us: u64,
    /// Stopped by the caller's flag (a signal) before the end.
    pub interrupted: bool,
}

/// Why frames could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// No interface of that name.
    #[error("{0}: no such interface in this network namespace")]
    NoInterface(String),
    /// Raw sockets need privileges.
    #[error("{0}: sending raw frames needs root (CAP_NET_RAW)")]
    Permission(String),
    /// The interface is down (or has no carrier to send on).
    #[error("{0} is down: bring it up first (ip link set {0} up)")]
    Down(String),
    /// A rate that is not a positive number in range.
    #[error("a rate of {0} frames a second is not more than 0 and at most {MAX_PPS}")]
    BadRate(f64),
    /// A pass over the capture sent nothing: looping would spin.
    #[error("the capture has no frame that can be sent as Ethernet ({skipped} skipped)")]
    NothingToSend {
        /// Frames skipped in the pass.
        skipped: u64,
    },
    /// The capture could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The capture could not be opened (again, for a pass).
    #[error("cannot open the capture: {0}")]
    Open(#[source] io::Error),
    /// Another system error.
    #[error("{iface}: {what}: {source}")]
    Os {
        /// The interface.
        iface: String,
        /// What was being done.
        what: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
}

/// An `AF_PACKET` socket that sends raw frames out of one interface.
pub struct FrameSender {
    fd: OwnedFd,
    iface: String,
    addr: libc::sockaddr_ll,
}

impl FrameSender {
    /// A socket bound to `iface` (protocol 0: it receives nothing).
    pub fn open(iface: &str) -> Result<Self, ReplayError> {
        let name = std::ffi::CString::new(iface)
            .map_err(|_| ReplayError::NoInterface(iface.to_string()))?;
        // SAFETY: a valid NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(ReplayError::NoInterface(iface.to_string()));
        }
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => ReplayError::Permission(iface.into()),
                _ => ReplayError::Os {
                    iface: iface.into(),
                    what: "AF_PACKET socket",
                    source: e,
                },
            });
        }
        // SAFETY: a descriptor just made, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed is a valid sockaddr_ll.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        addr.sll_halen = 6;
        // SAFETY: a valid address of the right length for this socket.
        let bound = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if bound < 0 {
            return Err(ReplayError::Os {
                iface: iface.into(),
                what: "binding the AF_PACKET socket",
                source: io::Error::last_os_error(),
            });
        }
        Ok(Self {
            fd,
            iface: iface.to_string(),
            addr,
        })
    }

    /// Sends one Ethernet frame: `Ok(true)` sent, `Ok(false)` refused as
    /// too long for the interface. A full queue is waited out.
    pub fn send(&mut self, frame: &[u8]) -> Result<bool, ReplayError> {
        // A raw socket sends the frame as it is; the address names its
        // destination as the frame does.
        self.addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        loop {
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
            if sent >= 0 {
                return Ok(true);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EMSGSIZE) => return Ok(false),
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) => {
                    std::thread::sleep(Duration::from_micros(50))
                }
                Some(libc::EINTR) => {}
                Some(libc::ENETDOWN) | Some(libc::ENXIO) => {
                    return Err(ReplayError::Down(self.iface.clone()))
                }
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    return Err(ReplayError::Permission(self.iface.clone()))
                }
                _ => {
                    return Err(ReplayError::Os {
                        iface: self.iface.clone(),
                        what: "sending a frame",
                        source: e,
                    })
                }
            }
        }
    }
}

/// When the next frame is due.
struct Schedule {
    pace: Pace,
    started: Instant,
    /// Capture pace: the pass's first timestamp and when the pass began.
    pass_base: Option<(u64, Instant)>,
}

impl Schedule {
    fn due(&mut self, sent: u64, timestamp_ns: u64) -> Instant {
        match self.pace {
            Pace::Pps(pps) => self.started + Duration::from_secs_f64(sent as f64 / pps),
            Pace::Capture => {
                let (base_ts, base_at) = *self
                    .pass_base
                    .get_or_insert_with(|| (timestamp_ns, Instant::now()));
                // Timestamps going backwards are sent at once.
                base_at + Duration::from_nanos(timestamp_ns.saturating_sub(base_ts))
            }
        }
    }

    fn new_pass(&mut self) {
        self.pass_base = None;
    }
}

/// Sends the frames of the captures `open` gives (a fresh reader for each
/// pass) out of `config.iface` until the capture ends (without `repeat`),
/// `count` frames are sent, or `stop` is raised.
pub fn replay<'a>(
    config: &ReplayConfig,
    mut open: impl FnMut() -> Result<TraceReader<'a>, ReplayError>,
    stop: &AtomicBool,
) -> Result<ReplayReport, ReplayError> {
    if let Pace::Pps(pps) = config.pace {
        if !(pps > 0.0 && pps <= MAX_PPS) {
            return Err(ReplayError::BadRate(pps));
        }
    }
    let mut sender = FrameSender::open(&config.iface)?;
    let mut report = ReplayReport::default();
    let mut schedule = Schedule {
        pace: config.pace,
        started: Instant::now(),
        pass_base: None,
    };
    let mut first: Option<Instant> = None;
    let limit = config.count.unwrap_or(u64::MAX);
    'passes: loop {
        let mut reader = open()?;
        report.passes += 1;
        schedule.new_pass();
        let (sent_before, skipped_before) = (report.sent, report.not_ethernet + report.too_long);
        while let Some(raw) = reader.next_raw()? {
            if report.sent >= limit {
                break 'passes;
            }
            if stop.load(Ordering::Relaxed) {
                report.interrupted = true;
                break 'passes;
            }
            let Some(frame) = raw.to_ethernet() else {
                report.not_ethernet += 1;
                continue;
            };
            let due = schedule.due(report.sent, raw.timestamp_ns);
            let now = Instant::now();
            if due > now {
                // Sleep in slices: a stop is seen within 100 ms.
                std::thread::sleep((due - now).min(Duration::from_millis(100)));
                while Instant::now() < due {
                    if stop.load(Ordering::Relaxed) {
                        report.interrupted = true;
                        break 'passes;
                    }
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(100)));
                }
            }
            if sender.send(&frame)? {
                first.get_or_insert_with(Instant::now);
                report.sent += 1;
                report.bytes += frame.len() as u64;
            } else {
                report.too_long += 1;
            }
        }
        if report.sent >= limit {
            break;
        }
        if report.sent == sent_before {
            return Err(ReplayError::NothingToSend {
                skipped: report.not_ethernet + report.too_long - skipped_before,
            });
        }
        if !config.repeat {
            break;
        }
    }
    report.elapsed_us = first.map_or(0, |t| t.elapsed().as_micros() as u64);
    Ok(report)
}
