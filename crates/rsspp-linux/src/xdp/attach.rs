//! Attaching and detaching, as xdp-tools does (`xdp-loader load --mode
//! native|skb`): a netlink attachment with `XDP_FLAGS_DRV_MODE` or
//! `XDP_FLAGS_SKB_MODE`, plus `XDP_FLAGS_UPDATE_IF_NOEXIST` unless forced,
//! so that the kernel itself refuses a program attached between our check
//! and our attach. Detaching names our program (`XDP_FLAGS_REPLACE`), so it
//! never removes a program someone else attached meanwhile.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

use super::{AttachMode, Xdp, XdpError, XdpErrorKind};

/// Our program is attached; `replaced` is the program `force` replaced,
/// to put back on detach.
#[derive(Debug)]
pub(super) struct Attachment {
    replaced: Option<OwnedFd>,
}

/// The name of an attached program's mode (`None`: hardware offload).
fn mode_name(mode: Option<AttachMode>) -> &'static str {
    mode.map_or("hw", AttachMode::name)
}

impl Xdp {
    /// Attaches the program. Refuses if another XDP program is attached,
    /// unless `force` was set (then it is replaced, atomically, and put
    /// back by [`Xdp::detach`]). Attaching twice is a no-op.
    pub fn attach(&mut self) -> Result<(), XdpError> {
        if self.attached.is_some() {
            return Ok(());
        }
        let mut replaced = None;
        if let Some((prog_id, mode)) = self.query()? {
            if !self.force {
                return Err(self.error(XdpErrorKind::AlreadyAttached {
                    prog_id,
                    mode: mode_name(mode),
                }));
            }
            if mode != Some(self.mode) {
                return Err(self.error(XdpErrorKind::ModeConflict {
                    prog_id,
                    mode: mode_name(mode),
                    wanted: self.mode,
                }));
            }
            // SAFETY: plain system call; a non-negative result is a new fd
            // that we own.
            let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(prog_id) };
            if fd < 0 {
                return Err(self.os_error("opening the attached program", -fd));
            }
            // SAFETY: `fd` was just returned to us and is owned by nobody else.
            replaced = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let mut flags = self.mode.flags();
        if replaced.is_none() {
            flags |= libbpf_sys::XDP_FLAGS_UPDATE_IF_NOEXIST;
        }
        // With `old_prog_fd` set, libbpf adds XDP_FLAGS_REPLACE: the kernel
        // replaces that program only if it is still the one attached.
        let old = replaced.as_ref().map(|fd| fd.as_raw_fd());
        let ret = self.xdp_attach(self.prog.as_raw_fd(), flags, old);
        if ret < 0 {
            return Err(match -ret {
                libc::EBUSY | libc::EEXIST => match self.query() {
                    Ok(Some((prog_id, mode))) => self.error(XdpErrorKind::AlreadyAttached {
                        prog_id,
                        mode: mode_name(mode),
                    }),
                    _ => self.os_error("attaching the XDP program", -ret),
                },
                libc::EOPNOTSUPP if self.mode == AttachMode::Native => self.error(
                    XdpErrorKind::NativeUnsupported(io::Error::from_raw_os_error(-ret)),
                ),
                errno => self.os_error("attaching the XDP program", errno),
            });
        }
        tracing::info!(iface = %self.iface, mode = %self.mode, replaced = replaced.is_some(), "XDP program attached");
        self.attached = Some(Attachment { replaced });
        Ok(())
    }

    /// Detaches the program, putting back the one `force` replaced. A
    /// no-op when not attached; an interface that vanished counts as
    /// detached. If someone replaced our program meanwhile, theirs is left
    /// in place ([`XdpErrorKind::NotOurs`]).
    pub fn detach(&mut self) -> Result<(), XdpError> {
        let Some(attachment) = self.attached.take() else {
            return Ok(());
        };
        let new = attachment.replaced.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let ret = self.xdp_attach(new, self.mode.flags(), Some(self.prog.as_raw_fd()));
        match -ret {
            0 => {
                tracing::info!(iface = %self.iface, restored = attachment.replaced.is_some(), "XDP program detached");
                Ok(())
            }
            libc::ENODEV => Ok(()),
            libc::EEXIST => Err(self.error(XdpErrorKind::NotOurs)),
            errno => {
                self.attached = Some(attachment);
                Err(self.os_error("detaching the XDP program", errno))
            }
        }
    }

    /// Forgets the attachment without detaching: the program stays on the
    /// interface (netlink attachments outlive the process) and keeps
    /// steering with the last table, as `rsspp run --keep` promises.
    pub fn leave_attached(mut self) {
        self.attached = None;
    }

    /// The program attached to the interface now, if any, and its mode
    /// (`None` for hardware offload).
    fn query(&self) -> Result<Option<(u32, Option<AttachMode>)>, XdpError> {
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut q: libbpf_sys::bpf_xdp_query_opts = unsafe { std::mem::zeroed() };
        q.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _;
        // SAFETY: `q` is a valid, sized options struct the call fills.
        let ret = unsafe { libbpf_sys::bpf_xdp_query(self.ifindex as i32, 0, &mut q) };
        if ret < 0 {
            return Err(self.os_error("querying the attached XDP program", -ret));
        }
        Ok(if q.drv_prog_id != 0 {
            Some((q.drv_prog_id, Some(AttachMode::Native)))
        } else if q.skb_prog_id != 0 {
            Some((q.skb_prog_id, Some(AttachMode::Skb)))
        } else if q.hw_prog_id != 0 {
            Some((q.hw_prog_id, None))
        } else {
            None
        })
    }

    /// `bpf_xdp_attach`: `fd` -1 detaches; `old` makes it conditional on
    /// that program being the one attached. Returns 0 or -errno.
    fn xdp_attach(&self, fd: i32, flags: u32, old: Option<i32>) -> i32 {
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut opts: libbpf_sys::bpf_xdp_attach_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _;
        if let Some(old) = old {
            opts.old_prog_fd = old;
        }
        // SAFETY: the fds are open (owned by `self` or the attachment) and
        // `opts` is a valid, sized options struct.
        unsafe { libbpf_sys::bpf_xdp_attach(self.ifindex as i32, fd, flags, &opts) }
    }
}

impl Drop for Xdp {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::warn!("{e}");
        }
    }
}
