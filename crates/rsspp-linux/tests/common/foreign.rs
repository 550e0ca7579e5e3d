//! A program that is not rsspp's, attached through netlink as another
//! tool (`ip link set dev IF xdp ...`, xdp-loader) would: two
//! instructions, `XDP_PASS`, named `xdp_pass_other`. Shared by the tests
//! of `rsspp-linux` and, through `#[path]`, of the `rsspp` binary.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

/// The foreign program's name.
pub const NAME: &str = "xdp_pass_other";

/// Loads the program; its fd.
pub fn load() -> OwnedFd {
    // mov64 r0, XDP_PASS (2); exit
    let insns: [u64; 2] = [0x0000_0002_0000_00b7, 0x95];
    let name = CString::new(NAME).unwrap();
    let license = CString::new("GPL").unwrap();
    // SAFETY: eight-byte instructions, as struct bpf_insn; strings and
    // instructions outlive the call.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            name.as_ptr(),
            license.as_ptr(),
            insns.as_ptr().cast(),
            insns.len() as _,
            std::ptr::null_mut(),
        )
    };
    assert!(fd >= 0, "loading the foreign program: errno {}", -fd);
    // SAFETY: just returned to us.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Loads the program and attaches it to `iface` (in the calling thread's
/// network namespace) through netlink, native or skb mode; its id. It
/// stays attached after its fd is closed.
pub fn attach(iface: &str, skb: bool) -> u32 {
    let fd = load();
    let ifindex = ifindex(iface);
    let flags = if skb {
        libbpf_sys::XDP_FLAGS_SKB_MODE
    } else {
        libbpf_sys::XDP_FLAGS_DRV_MODE
    };
    // SAFETY: an open program fd; no options.
    let ret = unsafe {
        libbpf_sys::bpf_xdp_attach(ifindex as i32, fd.as_raw_fd(), flags, std::ptr::null())
    };
    assert_eq!(ret, 0, "netlink attach of the foreign program");
    prog_id(fd.as_raw_fd())
}

/// Attaches the program `fd` to `iface` through netlink (skb mode);
/// returns 0 or -errno.
pub fn try_attach_fd(iface: &str, fd: i32, skb: bool) -> i32 {
    let flags = if skb {
        libbpf_sys::XDP_FLAGS_SKB_MODE
    } else {
        libbpf_sys::XDP_FLAGS_DRV_MODE
    };
    // SAFETY: an open program fd; no options.
    unsafe { libbpf_sys::bpf_xdp_attach(ifindex(iface) as i32, fd, flags, std::ptr::null()) }
}

/// Detaches whatever netlink program `iface` has in that mode.
pub fn detach(iface: &str, skb: bool) {
    try_attach_fd(iface, -1, skb);
}

/// The id of the program `fd`.
pub fn prog_id(fd: i32) -> u32 {
    // SAFETY: zeroed is a valid bpf_prog_info; the call fills at most `len`.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    let ret = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    assert_eq!(ret, 0);
    info.id
}

fn ifindex(iface: &str) -> u32 {
    let name = CString::new(iface).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(index, 0, "no interface {iface}");
    index
}

/// Opens the program `id` (any program, rsspp's too).
pub fn fd_of(id: u32) -> OwnedFd {
    // SAFETY: plain system call; a non-negative result is ours.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    assert!(fd >= 0, "opening program {id}: errno {}", -fd);
    // SAFETY: just returned to us.
    unsafe { OwnedFd::from_raw_fd(fd) }
}
