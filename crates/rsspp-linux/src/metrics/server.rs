//! A minimal HTTP/1.1 server for `GET /metrics`.
//!
//! Prometheus scrapes every few seconds and `rsspp top` twice a second. One
//! thread accepts; each connection is answered on a thread of its own, so an
//! idle or slow client (a half-open scraper, a port scanner, a terminal left
//! connected) never delays anyone else's scrape. Every request is bounded in
//! size and time ([`ServerLimits`]), and at most
//! [`ServerLimits::max_connections`] are served at once: beyond that a
//! connection is answered `503` at once and closed, so a flood of idle
//! connections costs a bounded number of threads and fails fast instead of
//! queueing. Each response closes its connection (`Connection: close`), so
//! there is no keep-alive state to manage.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{render, SharedMetrics, CONTENT_TYPE};

/// Why the metrics server could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Another process listens on the address.
    #[error(
        "cannot serve metrics on {addr}: the address is already in use (another rsspp daemon \
         or exporter?); choose another with --metrics-addr"
    )]
    AddrInUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The port is privileged, or a security policy forbids binding.
    #[error(
        "cannot serve metrics on {addr}: permission denied (ports below 1024 need root or \
         CAP_NET_BIND_SERVICE)"
    )]
    PermissionDenied {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The IP address is not one of this machine's.
    #[error("cannot serve metrics on {addr}: no interface of this machine has that address")]
    AddrNotAvailable {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Any other failure to bind or listen.
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The server thread could not be started.
    #[error("cannot start the metrics server thread: {0}")]
    Spawn(io::Error),
}

/// Bounds on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time a client has to send its whole request head, from accept.
    pub read_timeout: Duration,
    /// Time a client has to take the response before it is dropped.
    pub write_timeout: Duration,
    /// Largest request head (request line and headers) accepted.
    pub max_request_bytes: usize,
    /// Connections served at the same time; more are refused with `503`.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        // A scrape's request is one small packet; 2 s covers any real client
        // and bounds how long one silent connection delays the next scrape.
        Self {
            read_timeout: Duration::from_secs(2),
            write_timeout: Duration::from_secs(2),
            max_request_bytes: 8192,
            max_connections: 64,
        }
    }
}

/// The running server. Stops when [`MetricsServer::stop`] is called or it is
/// dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see
    /// [`MetricsServer::local_addr`]) and serves `shared` at `/metrics`.
    pub fn start(addr: SocketAddr, shared: SharedMetrics) -> Result<Self, MetricsError> {
        Self::start_with_limits(addr, shared, ServerLimits::default())
    }

    /// As [`MetricsServer::start`], with explicit request bounds.
    pub fn start_with_limits(
        addr: SocketAddr,
        shared: SharedMetrics,
        limits: ServerLimits,
    ) -> Result<Self, MetricsError> {
        let listener = TcpListener::bind(addr).map_err(|source| bind_error(addr, source))?;
        let local = listener
            .local_addr()
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("rsspp-metrics".into())
            .spawn({
                let stop = Arc::clone(&stop);
                move || accept_loop(listener, shared, limits, stop)
            })
            .map_err(MetricsError::Spawn)?;
        tracing::info!(addr = %local, "serving metrics at http://{local}/metrics");
        Ok(Self {
            addr: local,
            stop,
            thread: Some(thread),
        })
    }

    /// The address actually listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and joins the accepting thread (requests in progress
    /// finish on their own threads, within their limits).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        // The thread sleeps in accept(): a connection of our own wakes it to
        // see the flag. Std has no portable way to interrupt accept.
        let wake = wake_addr(self.addr);
        match TcpStream::connect_timeout(&wake, Duration::from_secs(1)) {
            Ok(_) => {
                if thread.join().is_err() {
                    tracing::warn!("the metrics server thread panicked");
                }
            }
            Err(e) => {
                // Joining would wait forever: leave the thread, which exits
                // at its next connection, rather than hang the daemon's exit.
                tracing::warn!(addr = %wake, "cannot wake the metrics server to stop it: {e}");
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn bind_error(addr: SocketAddr, source: io::Error) -> MetricsError {
    match source.kind() {
        io::ErrorKind::AddrInUse => MetricsError::AddrInUse { addr },
        io::ErrorKind::PermissionDenied => MetricsError::PermissionDenied { addr },
        io::ErrorKind::AddrNotAvailable => MetricsError::AddrNotAvailable { addr },
        _ => MetricsError::Bind { addr, source },
    }
}

/// Where to connect to reach a listener bound to `addr` (a wildcard address
/// is reached through loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

fn accept_loop(
    listener: TcpListener,
    shared: SharedMetrics,
    limits: ServerLimits,
    stop: Arc<AtomicBool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        match conn {
            Ok(stream) => {
                if open.load(Ordering::Acquire) >= limits.max_connections {
                    refuse_busy(stream, &limits);
                    continue;
                }
                let guard = Open::new(&open);
                let shared = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("rsspp-metrics-conn".into())
                    .spawn(move || {
                        let _guard = guard;
                        let peer = stream.peer_addr().ok();
                        if let Err(e) = serve(stream, &shared, &limits) {
                            tracing::debug!(?peer, "metrics request failed: {e}");
                        }
                    });
                if let Err(e) = spawned {
                    // The closure (stream and guard) was dropped with the
                    // error: the connection is closed and uncounted.
                    tracing::warn!("metrics server cannot start a connection thread: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Err(e) => {
                // E.g. out of file descriptors: retrying at once would spin.
                tracing::warn!("metrics server cannot accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// One connection being served; uncounted when dropped.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(open))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers `503` on the accepting thread without reading the request: the
/// write is one small segment into an empty socket buffer, so it does not
/// block.
fn refuse_busy(mut stream: TcpStream, limits: &ServerLimits) {
    tracing::debug!(
        max = limits.max_connections,
        "metrics server busy: connection refused"
    );
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = respond(
        &mut stream,
        "503 Service Unavailable",
        &[("Retry-After", "1")],
        b"too many connections\n",
        false,
    );
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Get { path: String, head_only: bool },
    OtherMethod,
    Malformed,
}

/// Parses the request line of a complete request head.
fn parse_request(head: &[u8]) -> Request {
    let Ok(head) = std::str::from_utf8(head) else {
        return Request::Malformed;
    };
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Malformed;
    }
    // Prometheus adds no query string, but a browser or curl user might.
    let path = target.split('?').next().unwrap_or(target).to_string();
    match method {
        "GET" => Request::Get {
            path,
            head_only: false,
        },
        "HEAD" => Request::Get {
            path,
            head_only: true,
        },
        _ => Request::OtherMethod,
    }
}

/// Why reading a request head stopped.
enum Head {
    Complete(Vec<u8>),
    TooLarge,
    TimedOut,
    Closed,
}

/// Reads up to the blank line ending the head, within the limits.
fn read_head(stream: &mut TcpStream, limits: &ServerLimits) -> io::Result<Head> {
    let deadline = Instant::now() + limits.read_timeout;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&buf) {
            buf.truncate(end);
            return Ok(Head::Complete(buf));
        }
        if buf.len() >= limits.max_request_bytes {
            return Ok(Head::TooLarge);
        }
        // The deadline is for the whole head: a client trickling one byte at
        // a time must not reset it with every read.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Head::TimedOut);
        }
        stream.set_read_timeout(Some(left))?;
        let want = chunk.len().min(limits.max_request_bytes - buf.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Ok(Head::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Head::TimedOut)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Length of the head including its terminating blank line, if complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    // RFC 9112 lets a server accept bare LF line ends; curl and Prometheus
    // send CRLF.
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn serve(mut stream: TcpStream, shared: &SharedMetrics, limits: &ServerLimits) -> io::Result<()> {
    stream.set_write_timeout(Some(limits.write_timeout))?;
    let result = answer(&mut stream, shared, limits);
    // Closing with unread input (a request body, the rest of an oversized or
    // trickled head) makes the kernel send a reset, which can destroy the
    // response before the client reads it: drain a little first.
    drain(&mut stream);
    result
}

fn answer(stream: &mut TcpStream, shared: &SharedMetrics, limits: &ServerLimits) -> io::Result<()> {
    let head = match read_head(stream, limits)? {
        Head::Complete(head) => head,
        Head::Closed => return Ok(()),
        Head::TimedOut => {
            return respond(
                stream,
                "408 Request Timeout",
                &[],
                b"request timeout\n",
                false,
            )
        }
        Head::TooLarge => {
            return respond(
                stream,
                "431 Request Header Fields Too Large",
                &[],
                b"request too large\n",
                false,
            )
        }
    };
    match parse_request(&head) {
        Request::Get { path, head_only } if path == "/metrics" => {
            let body = render(&shared.snapshot());
            respond(
                stream,
                "200 OK",
                &[("Content-Type", CONTENT_TYPE)],
                body.as_bytes(),
                head_only,
            )
        }
        Request::Get { head_only, .. } => respond(
            stream,
            "404 Not Found",
            &[],
            b"not found: metrics are at /metrics\n",
            head_only,
        ),
        Request::OtherMethod => respond(
            stream,
            "405 Method Not Allowed",
            &[("Allow", "GET, HEAD")],
            b"method not allowed: use GET\n",
            false,
        ),
        Request::Malformed => respond(stream, "400 Bad Request", &[], b"bad request\n", false),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    let default_type = [("Content-Type", "text/plain; charset=utf-8")];
    let has_type = headers.iter().any(|(k, _)| *k == "Content-Type");
    for (k, v) in headers
        .iter()
        .chain(default_type.iter().filter(|_| !has_type))
    {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    // One write: a small head sent alone would make Nagle's algorithm hold
    // the body's last segment until the client acknowledges the head.
    let mut response = out.into_bytes();
    if !head_only {
        response.extend_from_slice(body);
    }
    stream.write_all(&response)?;
    stream.flush()?;
    stream.shutdown(Shutdown::Write)
}

/// Reads and discards what the client still sends, briefly and boundedly.
fn drain(stream: &mut TcpStream) {
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut sink = [0u8; 4096];
    let mut total = 0usize;
    while total < 1 << 20 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => total += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_classified() {
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Request::Get {
                path: "/metrics".into(),
                head_only: false
            }
        );
        assert_eq!(
            parse_request(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Request::Get {
                path: "/metrics".into(),
                head_only: true
            }
        );
        assert_eq!(
            parse_request(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Request::OtherMethod
        );
        assert_eq!(parse_request(b"GET /metrics\r\n\r\n"), Request::Malformed);
        assert_eq!(
            parse_request(b"GET metrics HTTP/1.1\r\n\r\n"),
            Request::Malformed
        );
        assert_eq!(parse_request(b"GET / SPDY/3\r\n\r\n"), Request::Malformed);
        assert_eq!(parse_request(b"\xff\xfe\r\n\r\n"), Request::Malformed);
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
    }

    #[test]
    fn a_wildcard_listener_is_woken_through_loopback() {
        let v4: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        let v6: SocketAddr = "[::]:9464".parse().unwrap();
        let own: SocketAddr = "10.1.2.3:9464".parse().unwrap();
        assert_eq!(wake_addr(v4), "127.0.0.1:9464".parse().unwrap());
        assert_eq!(wake_addr(v6), "[::1]:9464".parse().unwrap());
        assert_eq!(wake_addr(own), own);
    }
}
