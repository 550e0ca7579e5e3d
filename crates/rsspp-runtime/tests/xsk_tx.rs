//! The afxdp backend's transmit socket (`XskTx`) on a veth pair in a
//! namespace made for the test (root; CI is root): what a flush returns
//! from has left the ring, and the peer receives every frame once, in the
//! order pushed, also when more frames are pushed than the socket's UMEM
//! holds (its chunks come back through the completion ring).

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use netns::Netns;
use rsspp_runtime::afxdp::XskTx;

/// An EtherType for local experiments (IEEE 802): nothing else sends it.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: AF_XDP sockets on veth need root (CI runs as root)");
    }
    root
}

fn ifindex(dev: &str) -> u32 {
    let name = CString::new(dev).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(i, 0, "no interface {dev}");
    i
}

/// Frame `seq`: 60 bytes, its number after the EtherType.
fn frame(seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

/// An AF_PACKET socket receiving everything on `dev`, with room for
/// thousands of frames.
fn receiver(dev: &str) -> OwnedFd {
    let all = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket creation; checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(all)) };
    assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just created.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size: libc::c_int = 16 << 20;
    // SAFETY: an int option of its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            4,
        )
    };
    // SAFETY: zeroed is a valid sockaddr_ll.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = all;
    addr.sll_ifindex = ifindex(dev) as i32;
    // SAFETY: a valid address of the size passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    fd
}

/// The numbers of the test's frames `fd` receives until `count` have
/// come or a second passed without one.
fn received(fd: &OwnedFd, count: usize) -> Vec<u32> {
    let mut seqs = Vec::new();
    let mut buf = [0u8; 2048];
    let mut last = Instant::now();
    while seqs.len() < count && last.elapsed() < Duration::from_secs(1) {
        // SAFETY: a buffer of the length passed.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 18 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if buf[12..14] == ETHERTYPE {
            seqs.push(u32::from_be_bytes(buf[14..18].try_into().unwrap()));
            last = Instant::now();
        }
    }
    seqs
}

/// Pushes `count` frames (flushing only when `every` have been pushed,
/// and at the end) and checks what the peer got.
fn send_and_receive(tag: &str, count: u32, every: u32) {
    let ns = Netns::with_veth(tag);
    ns.run(|| {
        let rx = receiver("veth1");
        let mut tx = XskTx::new(ifindex("veth0"), 0).expect("an AF_XDP socket on veth0");
        for seq in 0..count {
            assert!(tx.push(&frame(seq)), "frame {seq} refused");
            if (seq + 1) % every == 0 {
                let f = tx.flush();
                assert_eq!((f.refused, f.stuck), (0, 0), "{f:?}");
                assert_eq!(tx.queued(), 0, "a flush leaves nothing on the ring");
            }
        }
        let f = tx.flush();
        assert_eq!((f.refused, f.stuck), (0, 0), "{f:?}");
        assert_eq!(tx.queued(), 0, "a flush leaves nothing on the ring");
        let got = received(&rx, count as usize);
        assert_eq!(got.len(), count as usize, "every frame arrived");
        assert!(
            got.iter().copied().eq(0..count),
            "in the order pushed: first out of order at {:?}",
            got.iter().zip(0..).find(|(s, i)| *s != i)
        );
    });
}

#[test]
fn a_flush_sends_every_frame_in_order() {
    if !root() {
        return;
    }
    // One flush for 1 000 frames: far more than one kick sends.
    send_and_receive("xsk-tx", 1_000, u32::MAX);
}

#[test]
fn more_frames_than_the_umem_holds_go_out_in_order() {
    if !root() {
        return;
    }
    // 5 000 frames, 2 048 chunks: pushes flush and take chunks back.
    send_and_receive("xsk-tx-many", 5_000, 700);
}

#[test]
fn a_frame_longer_than_a_chunk_is_refused() {
    if !root() {
        return;
    }
    let ns = Netns::with_veth("xsk-tx-long");
    ns.run(|| {
        let mut tx = XskTx::new(ifindex("veth0"), 0).expect("an AF_XDP socket on veth0");
        assert!(!tx.push(&vec![0u8; 4096]));
        assert!(tx.push(&frame(0)));
        assert_eq!(tx.flush(), Default::default());
    });
}
