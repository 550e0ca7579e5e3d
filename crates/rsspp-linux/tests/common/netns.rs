//! Network namespaces with a veth pair for the attach tests, deleted on
//! drop (the pair goes with them), and raw frames sent through them.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A network namespace holding `veth0 <-> veth1`, both up, IPv6 off so
/// that the kernel sends nothing of its own through them. Shared by the
/// tests of `rsspp-linux` and, through `#[path]`, of the `rsspp` binary.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// One queue each way.
    pub fn with_veth(tag: &str) -> Netns {
        Self::with_veth_queues(tag, 1)
    }

    /// `queues` receive and transmit queues on each end.
    pub fn with_veth_queues(tag: &str, queues: u32) -> Netns {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "rsspp-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        // From here on, a failure deletes the namespace.
        let ns = Netns { name };
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        let q = queues.to_string();
        ns.ip(&[
            "link",
            "add",
            "veth0",
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            "veth1",
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
        ]);
        ns.ip(&["link", "set", "veth0", "up"]);
        ns.ip(&["link", "set", "veth1", "up"]);
        ns
    }

    /// `ip -n NS ARGS`; panics with its error output on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `ip netns exec NS ARGS`.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Runs `f` on a thread that entered the namespace (setns affects
    /// only the calling thread; the test's own thread stays outside).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            let handle = s.spawn(|| {
                let file = File::open(format!("/run/netns/{}", self.name)).expect("namespace file");
                // SAFETY: a valid namespace fd; affects this thread only.
                let ret = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(ret, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            });
            handle
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// A daemon's metrics on `127.0.0.1:port` inside the namespace, by
    /// sample name (with labels); `None` while nothing answers.
    pub fn scrape_metrics(&self, port: u16) -> Option<std::collections::BTreeMap<String, f64>> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                "curl",
                "-sf",
                "--max-time",
                "2",
            ])
            .arg(format!("http://127.0.0.1:{port}/metrics"))
            .output()
            .expect("curl");
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .filter_map(|l| {
                    let (name, value) = l.rsplit_once(' ')?;
                    Some((name.to_string(), value.parse().ok()?))
                })
                .collect()
        })
    }

    /// The XDP program attached to `dev`, as `ip -d link` reports it:
    /// the mode word of its first line (`xdp` native, `xdpgeneric` skb)
    /// and the id of its `prog/xdp id N` line.
    pub fn xdp_of(&self, dev: &str) -> Option<(String, u32)> {
        let out = self.ip(&["-d", "link", "show", "dev", dev]);
        let mode = out
            .lines()
            .next()?
            .split_whitespace()
            .find(|w| w.starts_with("xdp"))?;
        let words: Vec<&str> = out.split_whitespace().collect();
        let id = words
            .windows(3)
            .find(|w| w[0] == "prog/xdp" && w[1] == "id")
            .map(|w| w[2].parse().expect("program id"))?;
        Some((mode.to_string(), id))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} (iproute2) cannot run: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends raw Ethernet frames out of `dev` (in the calling thread's
/// namespace) through an AF_PACKET socket.
pub fn send_frames(dev: &str, frames: &[Vec<u8>]) {
    let name = CString::new(dev).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(ifindex, 0, "no interface {dev}");
    // SAFETY: plain socket creation; protocol 0 receives nothing.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(
        fd >= 0,
        "AF_PACKET socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: zeroed is a valid sockaddr_ll.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    for frame in frames {
        // A raw socket sends the frame as it is; the address names its
        // destination as the frame does.
        addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: the frame and address outlive the call.
        let sent = unsafe {
            libc::sendto(
                fd,
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(
            sent,
            frame.len() as isize,
            "sendto {dev}: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: we own fd.
    unsafe { libc::close(fd) };
}
