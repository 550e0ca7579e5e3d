//! What the root `rsspp nf`/`rsspp reframe` tests on veth share: the
//! checks that they may run, flows read from captures, reordering counted
//! at the receiver, a scratch directory and children stopped on drop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A flow as the receiver and the monitor name it.
pub type Flow = (u8, String, String, u16, u16);

/// Per flow, its frames in order: (IP id, TCP sequence number), from a
/// classic pcap of Ethernet + IPv4 frames (what `rsspp trace gen` writes
/// and tcpdump records).
pub fn frames_by_flow(path: &Path) -> HashMap<Flow, Vec<(u16, u32)>> {
    let bytes = std::fs::read(path).unwrap();
    let le = match bytes[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("{}: not a classic pcap", path.display()),
    };
    let u32_at = |at: usize| {
        let b = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let mut flows: HashMap<Flow, Vec<(u16, u32)>> = HashMap::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32_at(at + 8) as usize;
        let f = &bytes[at + 16..at + 16 + caplen];
        at += 16 + caplen;
        if f.len() < 42 || f[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &f[14..];
        let proto = ip[9];
        let be16 = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        let src = format!("{}.{}.{}.{}", ip[12], ip[13], ip[14], ip[15]);
        let dst = format!("{}.{}.{}.{}", ip[16], ip[17], ip[18], ip[19]);
        let l4 = &ip[20..];
        let seq = if proto == 6 && l4.len() >= 8 {
            u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]])
        } else {
            0
        };
        let key = (proto, src, dst, be16(&l4[0..]), be16(&l4[2..]));
        flows.entry(key).or_default().push((be16(&ip[4..]), seq));
    }
    flows
}

/// Frames of each flow that came out before one sent earlier.
pub fn reordered(
    sent: &HashMap<Flow, Vec<(u16, u32)>>,
    got: &HashMap<Flow, Vec<(u16, u32)>>,
) -> u64 {
    let mut late = 0;
    for (flow, frames) in got {
        // Position of each frame in the flow as sent (frames that repeat
        // exactly are indistinguishable: the first unused one).
        let mut positions: HashMap<(u16, u32), Vec<usize>> = HashMap::new();
        for (i, f) in sent[flow].iter().enumerate().rev() {
            positions.entry(*f).or_default().push(i);
        }
        let mut highest = None;
        for f in frames {
            let Some(i) = positions.get_mut(f).and_then(Vec::pop) else {
                continue;
            };
            if highest.is_some_and(|h| i < h) {
                late += 1;
            }
            highest = highest.max(Some(i));
        }
    }
    late
}

pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `rsspp-TAG-PID` under the temporary directory, made.
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rsspp-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed (SIGINT: tcpdump writes its counts) and waited for on
/// drop.
pub struct Reaped(pub Option<Child>);

impl Reaped {
    /// SIGINT, then its output.
    pub fn stop(&mut self) -> Option<std::process::Output> {
        let child = self.0.take()?;
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        child.wait_with_output().ok()
    }

    /// Waits up to `limit` for it to end by itself (its `--duration`); its
    /// output, which must say it succeeded (`what` names it).
    pub fn finish(&mut self, what: &str, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let out = loop {
            let child = self.0.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() {
                break self.0.take().unwrap().wait_with_output().unwrap();
            }
            assert!(Instant::now() < deadline, "{what} did not stop");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Stops a tcpdump capture after a moment for the last frames; its
    /// output, whose report must say its socket dropped nothing.
    pub fn stop_capture(&mut self) -> Output {
        std::thread::sleep(Duration::from_millis(300));
        let out = self.stop().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines()
                .any(|l| l.trim() == "0 packets dropped by kernel"),
            "the receiver lost frames itself: {err}"
        );
        out
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the nf test needs root (CI runs as root)");
        return false;
    }
    if rsspp_linux::cpu::CpuList::online().unwrap().len() < 2 {
        eprintln!("skipping: two workers need two CPUs");
        return false;
    }
    true
}

/// `tcpreplay -q ARGS -i DEV TRACE` in network namespace `ns`; with
/// `pinned`, on CPU 0 only, so that the kernel delivers its frames to the
/// peer in the order sent.
pub fn tcpreplay(ns: &str, dev: &str, pinned: bool, args: &[&str], trace: &Path) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]);
    if pinned {
        cmd.args(["taskset", "-c", "0"]);
    }
    cmd.args(["tcpreplay", "-q"])
        .args(args)
        .args(["-i", dev])
        .arg(trace);
    cmd
}

/// Runs [`tcpreplay`] to its end, which must be a success; its report.
pub fn replay(ns: &str, dev: &str, pinned: bool, args: &[&str], trace: &Path) -> String {
    let out = tcpreplay(ns, dev, pinned, args, trace)
        .output()
        .expect("tcpreplay (scripts/test-deps installs it)");
    assert!(
        out.status.success(),
        "tcpreplay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts [`tcpreplay`] (its output kept for [`Reaped::stop`]).
pub fn start_replay(ns: &str, dev: &str, pinned: bool, args: &[&str], trace: &Path) -> Reaped {
    Reaped(Some(
        tcpreplay(ns, dev, pinned, args, trace)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpreplay (scripts/test-deps installs it)"),
    ))
}
