//! Running a loaded program in the kernel on a crafted frame
//! (`BPF_PROG_TEST_RUN`), for the tests and `rsspp bench xdp`.

use std::os::fd::AsRawFd;
use std::time::Duration;

use libbpf_rs::libbpf_sys;

use super::{Kind, Xdp, XdpError, XdpErrorKind};

/// An XDP verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAction {
    /// `XDP_ABORTED`.
    Aborted,
    /// `XDP_DROP`.
    Drop,
    /// `XDP_PASS`: up the kernel's stack on this CPU.
    Pass,
    /// `XDP_TX`.
    Tx,
    /// `XDP_REDIRECT`: to the CPU the table names.
    Redirect,
    /// Anything else.
    Other(u32),
}

impl From<u32> for XdpAction {
    fn from(v: u32) -> Self {
        match v {
            libbpf_sys::XDP_ABORTED => XdpAction::Aborted,
            libbpf_sys::XDP_DROP => XdpAction::Drop,
            libbpf_sys::XDP_PASS => XdpAction::Pass,
            libbpf_sys::XDP_TX => XdpAction::Tx,
            libbpf_sys::XDP_REDIRECT => XdpAction::Redirect,
            other => XdpAction::Other(other),
        }
    }
}

/// The result of [`Xdp::test_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// The program's verdict.
    pub action: XdpAction,
    /// Mean time per run, as the kernel measured it (whole nanoseconds).
    pub duration_per_run: Duration,
}

impl Xdp {
    /// Runs the program `repeat` times on `frame` in the kernel
    /// (`BPF_PROG_TEST_RUN`; 0 runs once), counters included. The frame
    /// needs at least an Ethernet header's 14 bytes. The kernel refuses
    /// this for the RX-hash program, which is bound to its device.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRun, XdpError> {
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
        opts.data_in = frame.as_ptr().cast();
        opts.data_size_in = frame.len() as u32;
        opts.repeat = repeat as i32;
        // SAFETY: `opts` points to `frame`, which outlives the call; the
        // kernel only reads it (no data_out given).
        let ret = unsafe { libbpf_sys::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) };
        if ret == -libc::EINVAL && self.kind == Kind::CountRxHash {
            return Err(self.error(XdpErrorKind::TestRunDeviceBound));
        }
        if ret < 0 {
            return Err(self.os_error("BPF_PROG_TEST_RUN", -ret));
        }
        Ok(TestRun {
            action: XdpAction::from(opts.retval),
            duration_per_run: Duration::from_nanos(u64::from(opts.duration)),
        })
    }
}
