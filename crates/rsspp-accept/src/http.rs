//! The small HTTP/1.1 service of `rsspp serve`: any method, any path,
//! keep-alive (HTTP/1.1's default, HTTP/1.0 with `Connection: keep-alive`),
//! a body skipped by its `Content-Length`, and a configurable CPU cost per
//! request (spun, not slept, so that a loaded core is busy). The answer
//! names the CPU that served it.

use std::time::{Duration, Instant};

/// Longest request head accepted; a longer one is answered 400.
const MAX_HEAD: usize = 16 * 1024;

/// What the connection does after the responses written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait for more requests.
    KeepOpen,
    /// Close once the output is written.
    Close,
}

/// What one call to [`Http::serve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Requests answered.
    pub answered: usize,
    /// Of those, malformed (answered 400).
    pub bad: usize,
    /// What next.
    pub next: Next,
}

/// The service: a fixed CPU cost per request, and optionally more on one
/// CPU (a slowed core, for tests and demonstrations).
#[derive(Debug, Clone, Copy, Default)]
pub struct Http {
    /// CPU time spent per request.
    pub work: Duration,
    /// Extra CPU time per request on one CPU.
    pub slow: Option<(usize, Duration)>,
}

fn spin(d: Duration) {
    if d.is_zero() {
        return;
    }
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

struct Head {
    len: usize,
    body: usize,
    close: bool,
}

/// Parses the head at the start of `input`: `Ok(None)` while incomplete.
fn head(input: &[u8]) -> Result<Option<Head>, ()> {
    let Some(end) = find(input, b"\r\n\r\n") else {
        return if input.len() > MAX_HEAD {
            Err(())
        } else {
            Ok(None)
        };
    };
    let text = std::str::from_utf8(&input[..end]).map_err(|_| ())?;
    let mut lines = text.split("\r\n");
    let request = lines.next().ok_or(())?;
    let mut parts = request.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    if method.is_none_or(str::is_empty) || target.is_none() || parts.next().is_some() {
        return Err(());
    }
    let mut close = match version {
        Some("HTTP/1.1") => false,
        Some("HTTP/1.0") => true,
        _ => return Err(()),
    };
    let mut body = 0;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(())?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case("close") {
                close = true;
            } else if value.eq_ignore_ascii_case("keep-alive") {
                close = false;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            body = value.parse().map_err(|_| ())?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked bodies are not read: refuse rather than misparse.
            return Err(());
        }
    }
    Ok(Some(Head {
        len: end + 4,
        body,
        close,
    }))
}

impl Http {
    /// Answers the complete requests at the front of `input` (removing
    /// them) into `output`, on CPU `cpu`.
    pub fn serve(&self, cpu: usize, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Served {
        let mut served = Served {
            answered: 0,
            bad: 0,
            next: Next::KeepOpen,
        };
        let mut used = 0;
        while used < input.len() {
            match head(&input[used..]) {
                Ok(None) => break,
                Ok(Some(h)) => {
                    if input.len() - used < h.len + h.body {
                        break;
                    }
                    used += h.len + h.body;
                    spin(self.work);
                    if let Some((slow_cpu, extra)) = self.slow {
                        if slow_cpu == cpu {
                            spin(extra);
                        }
                    }
                    let body = format!("served on cpu {cpu}\n");
                    output.extend_from_slice(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
                            body.len(),
                            if h.close { "Connection: close\r\n" } else { "" }
                        )
                        .as_bytes(),
                    );
                    served.answered += 1;
                    if h.close {
                        served.next = Next::Close;
                        used = input.len();
                        break;
                    }
                }
                Err(()) => {
                    output.extend_from_slice(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    served.answered += 1;
                    served.bad += 1;
                    served.next = Next::Close;
                    used = input.len();
                    break;
                }
            }
        }
        input.drain(..used);
        served
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelined_keep_alive_then_close() {
        let http = Http::default();
        let mut input = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nConnection: close\r\n\r\nGET".to_vec();
        let mut out = Vec::new();
        let s = http.serve(3, &mut input, &mut out);
        assert_eq!((s.answered, s.bad, s.next), (3, 0, Next::Close));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 3);
        assert!(text.contains("served on cpu 3"));
        assert!(text.ends_with("Connection: close\r\n\r\nserved on cpu 3\n"));
    }

    #[test]
    fn incomplete_waits_and_garbage_is_refused() {
        let http = Http::default();
        let mut input = b"GET / HTTP/1.1\r\nHost".to_vec();
        let mut out = Vec::new();
        let s = http.serve(0, &mut input, &mut out);
        assert_eq!((s.answered, s.next), (0, Next::KeepOpen));
        assert_eq!(input.len(), 20);
        let mut input = b"nonsense\r\n\r\n".to_vec();
        let s = http.serve(0, &mut input, &mut out);
        assert_eq!((s.answered, s.bad, s.next), (1, 1, Next::Close));
        assert!(String::from_utf8(out).unwrap().starts_with("HTTP/1.1 400"));
        // HTTP/1.0 closes by default.
        let mut input = b"GET / HTTP/1.0\r\n\r\n".to_vec();
        let s = http.serve(0, &mut input, &mut Vec::new());
        assert_eq!(s.next, Next::Close);
    }
}
