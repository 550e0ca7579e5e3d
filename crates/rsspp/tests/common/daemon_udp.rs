//! What the daemon's root tests with UDP traffic on veth share
//! (`under_load.rs`, `elephants.rs`): a namespace whose veth1 receives for
//! 10.0.0.2, frames that carry their flow's number and sequence number, a
//! paced sender on veth0, a receiver that counts reordering per flow, and
//! `rsspp run` on veth1 started and stopped; the flows and frames are also
//! `nf_elephants.rs`'s.

use std::collections::BTreeMap;

use rsspp_core::{bucket_of, Toeplitz};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::netns::Netns;

pub const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");
/// The interface the daemon steers.
pub const DUT: &str = "veth1";
/// The receiver's UDP port.
pub const PORT: u16 = 9_000;

/// Whether the test can run here: root and two CPUs (else why, on
/// standard error). `what` names the test in the message.
pub fn ready(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: {what} needs root (CI runs as root)");
        return false;
    }
    if rsspp_linux::cpu::CpuList::online().unwrap().len() < 2 {
        eprintln!("skipping: {what} needs two CPUs, this machine has one");
        return false;
    }
    true
}

/// A namespace with the veth pair, veth1 holding 10.0.0.2/24 (no reverse
/// path filter), and the MAC addresses of veth1 (the frames' destination)
/// and veth0 (their source).
pub fn receiving_pair(tag: &str) -> (Netns, [u8; 6], [u8; 6]) {
    let ns = Netns::with_veth(tag);
    ns.ip(&["link", "set", "lo", "up"]);
    ns.ip(&["addr", "add", "10.0.0.2/24", "dev", DUT]);
    for key in ["all", "default", DUT] {
        ns.exec(&["sysctl", "-qw", &format!("net.ipv4.conf.{key}.rp_filter=0")]);
    }
    let (dst, src) = (mac_of(&ns, DUT), mac_of(&ns, "veth0"));
    (ns, dst, src)
}

fn mac_of(ns: &Netns, dev: &str) -> [u8; 6] {
    let text = ns.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
    let bytes: Vec<u8> = text
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    bytes.try_into().unwrap()
}

fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Flow `flow`'s source address and port: 10.1.(flow / 256).(flow % 256),
/// 20000 + flow.
pub fn source(flow: u32) -> ([u8; 4], u16) {
    ([10, 1, (flow >> 8) as u8, flow as u8], 20_000 + flow as u16)
}

/// Flow `flow`'s bucket in a table of `buckets` (the default key).
pub fn bucket(flow: u32, buckets: usize) -> usize {
    let (src, sport) = source(flow);
    let h = Toeplitz::default().hash_ipv4(src, [10, 0, 0, 2], sport, PORT);
    bucket_of(h, buckets)
}

/// Two flows numbered from 1000 up whose bucket is the same.
pub fn elephant_flows(buckets: usize) -> [u32; 2] {
    let mut first_of: BTreeMap<usize, u32> = BTreeMap::new();
    for flow in 1000.. {
        if let Some(&other) = first_of.get(&bucket(flow, buckets)) {
            return [other, flow];
        }
        first_of.insert(bucket(flow, buckets), flow);
    }
    unreachable!()
}

/// Frame `n`'s flow: of every 20 frames, 7 of each elephant and 6 of the
/// `mice` in turn (`mouse`: the last one).
pub fn elephants_and_mice(n: u64, big: [u32; 2], mice: u32, mouse: &mut u32) -> u32 {
    match n % 20 {
        0..=6 => big[0],
        7..=13 => big[1],
        _ => {
            *mouse = (*mouse + 1) % mice;
            *mouse
        }
    }
}

/// Ethernet, IPv4 (source of `flow`, IP id the low bits of `seq`) ->
/// 10.0.0.2, UDP -> [`PORT`], payload: flow and sequence number.
pub fn frame(dst: [u8; 6], src: [u8; 6], flow: u32, seq: u32) -> [u8; 60] {
    let (saddr, sport) = source(flow);
    let mut f = [0u8; 60];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 8).to_be_bytes());
    ip[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&saddr);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let sum = ip_checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&16u16.to_be_bytes());
    f[42..46].copy_from_slice(&flow.to_be_bytes());
    f[46..50].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Sends `pps × seconds` frames out of veth0 (the calling thread must be in
/// the namespace), never ahead of the schedule; frame `n` belongs to flow
/// `flow_of(n)`, each flow's frames numbered from 0. Returns how many were
/// sent.
pub fn send_paced(
    dst: [u8; 6],
    src: [u8; 6],
    pps: u64,
    seconds: u64,
    mut flow_of: impl FnMut(u64) -> u32,
) -> u64 {
    // SAFETY: plain socket creation; protocol 0 receives nothing.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new("veth0").unwrap();
    // SAFETY: a valid NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(ifindex, 0);
    // SAFETY: zeroed is a valid sockaddr_ll.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&dst);
    let start = Instant::now();
    let total = pps * seconds;
    let mut seqs: BTreeMap<u32, u32> = BTreeMap::new();
    let mut sent = 0u64;
    while sent < total {
        // Pace: never ahead of the schedule.
        let due = Duration::from_nanos(sent * 1_000_000_000 / pps);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        for _ in 0..32 {
            let flow = flow_of(sent);
            let seq = seqs.entry(flow).or_insert(0);
            let f = frame(dst, src, flow, *seq);
            *seq += 1;
            // SAFETY: the frame and the address outlive the call.
            let n = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&addr as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(n, 60, "sendto: {}", std::io::Error::last_os_error());
            sent += 1;
        }
    }
    sent
}

/// A UDP socket on [`PORT`] with a 64 MB receive buffer (the calling
/// thread must be in the namespace).
pub fn udp_receiver() -> std::net::UdpSocket {
    let socket = std::net::UdpSocket::bind(("0.0.0.0", PORT)).unwrap();
    let size: libc::c_int = 64 << 20;
    // SAFETY: a valid socket and option value.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    socket
}

/// What the receiver saw.
#[derive(Debug, Default)]
pub struct Received {
    pub packets: u64,
    /// Packets that arrived after a later one of their flow.
    pub reordered: u64,
}

/// Receives on `socket` until `stop`, checking each flow's order.
pub fn receive(socket: &std::net::UdpSocket, stop: &AtomicBool) -> Received {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut highest: BTreeMap<u32, u32> = BTreeMap::new();
    let mut r = Received::default();
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        if n < 8 {
            continue;
        }
        let flow = u32::from_be_bytes(buf[0..4].try_into().unwrap());
        let seq = u32::from_be_bytes(buf[4..8].try_into().unwrap());
        r.packets += 1;
        match highest.get(&flow) {
            Some(&h) if seq < h => r.reordered += 1,
            _ => {
                highest.insert(flow, seq);
            }
        }
    }
    r
}

/// `rsspp -v run --iface veth1 --cpus 0,1 ARGS` in the namespace, its
/// metrics on `port`, for `seconds`; its log kept in a file.
pub struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts it and waits (10 s at most) for its metrics and its program.
    pub fn start(ns: &Netns, tag: &str, args: &[&str], port: u16, seconds: u64) -> Self {
        let log = std::env::temp_dir().join(format!("rsspp-{tag}-{}.log", std::process::id()));
        let child = Command::new("ip")
            .args([
                "netns", "exec", &ns.name, RSSPP, "-v", "run", "--iface", DUT,
            ])
            .args(["--cpus", "0,1"])
            .args(args)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--duration", &seconds.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ns.scrape_metrics(port).is_none() || ns.xdp_of(DUT).is_none() {
            assert!(Instant::now() < deadline, "the daemon never started");
            std::thread::sleep(Duration::from_millis(100));
        }
        Self { child, log }
    }

    /// Stops it (SIGTERM) and returns its log.
    pub fn stop(mut self) -> String {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        log
    }
}
