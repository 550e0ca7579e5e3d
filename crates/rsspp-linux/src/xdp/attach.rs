//! Attaching and detaching. The steering and counting programs are
//! attached through a BPF link (`BPF_LINK_CREATE` with `BPF_XDP`, in the
//! mode's `XDP_FLAGS_DRV_MODE` or `XDP_FLAGS_SKB_MODE`): the link belongs
//! to the process, and the kernel detaches the program when the last file
//! descriptor on it closes, so a daemon killed with SIGKILL, or one that
//! aborts, leaves nothing steering. `rsspp run --keep` pins the link in
//! the BPF filesystem ([`crate::lifecycle`]), which keeps it attached.
//!
//! The RX-hash program (`xdp_rsspp_rxh`, bound to the device) stays on the
//! netlink attachment of xdp-tools (`xdp-loader load`): on Linux 6.18,
//! deleting the network namespace of a device-bound program attached
//! through a link crashed the kernel's namespace cleanup. A netlink
//! attachment outlives the process: after a SIGKILL it stays until
//! `rsspp detach` (or `ip link set dev IF xdp off`) removes it. Netlink
//! attachments use `XDP_FLAGS_UPDATE_IF_NOEXIST` unless forced, and
//! `XDP_FLAGS_REPLACE` to detach, so neither ever removes a program
//! someone else attached meanwhile.
//!
//! Another program on the interface is refused, named, unless `force` is
//! set. A link cannot replace a netlink-attached program in one step:
//! forced, the other program is detached (on the condition that it is
//! still the one attached), ours is attached through a link right after,
//! and theirs is put back when ours goes; between the two calls, a few
//! microseconds, no program runs. Forced or not, a program attached
//! through a link (another tool's, or rsspp's own kept one) is refused: the
//! kernel lets no one replace it. rsspp's own leftover on netlink from an
//! older rsspp or a killed hardware-mode daemon (an `xdp_rsspp_*` program
//! no process holds) is replaced without asking.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

use super::{AttachMode, Kind, Xdp, XdpError, XdpErrorKind};
use crate::lifecycle;

/// How our program is attached.
#[derive(Debug)]
pub(super) enum Attachment {
    /// Through a BPF link (the steering and counting programs); `replaced`
    /// is the netlink-attached program `force` detached, to put back.
    Link {
        link: OwnedFd,
        replaced: Option<OwnedFd>,
    },
    /// Through netlink (the RX-hash program); `replaced` is the program
    /// `force` replaced, to put back.
    Netlink { replaced: Option<OwnedFd> },
}

/// The name of an attached program's mode (`None`: hardware offload).
fn mode_name(mode: Option<AttachMode>) -> &'static str {
    mode.map_or("hw", AttachMode::name)
}

impl Xdp {
    /// The program's name, as the kernel shows it (`xdp_rsspp_steer`,
    /// `xdp_rsspp_count`, `xdp_rsspp_rxh`).
    pub fn program_name(&self) -> &'static str {
        match self.kind {
            Kind::Steer => "xdp_rsspp_steer",
            Kind::Count => "xdp_rsspp_count",
            Kind::CountRxHash => "xdp_rsspp_rxh",
        }
    }

    /// Whether the program is attached through a BPF link (and so goes
    /// with the process); false for the RX-hash program.
    pub fn uses_link(&self) -> bool {
        self.kind != Kind::CountRxHash
    }

    /// Attaches the program. Refuses if another XDP program is attached,
    /// unless `force` was set (then it is replaced, and put back by
    /// [`Xdp::detach`]); a program attached through a BPF link is refused
    /// even then. rsspp's own netlink leftover that no process holds is
    /// replaced. Attaching twice is a no-op.
    pub fn attach(&mut self) -> Result<(), XdpError> {
        if self.attached.is_some() {
            return Ok(());
        }
        let mut replaced = None;
        if let Some((prog_id, mode)) = self.query()? {
            replaced = self.take_over(prog_id, mode)?;
        }
        let attachment = if self.uses_link() {
            self.attach_link(replaced)?
        } else {
            self.attach_netlink(replaced)?
        };
        let restore = matches!(
            &attachment,
            Attachment::Link {
                replaced: Some(_),
                ..
            } | Attachment::Netlink { replaced: Some(_) }
        );
        if self.uses_link() {
            tracing::info!(iface = %self.iface, mode = %self.mode, replaced = restore, "XDP program attached (BPF link: detached when rsspp exits, even killed)");
        } else {
            tracing::info!(iface = %self.iface, mode = %self.mode, replaced = restore, "XDP program attached (netlink: if rsspp is killed with SIGKILL it stays attached; `rsspp detach --iface {}` removes it)", self.iface);
        }
        self.attached = Some(attachment);
        Ok(())
    }

    /// Decides about the program `prog_id` attached now: an error if it
    /// stays, `Ok(Some(fd))` for one `force` replaces (to put back),
    /// `Ok(None)` once rsspp's orphaned leftover is detached.
    fn take_over(
        &self,
        prog_id: u32,
        mode: Option<AttachMode>,
    ) -> Result<Option<OwnedFd>, XdpError> {
        let name = lifecycle::prog_name(prog_id);
        let link = lifecycle::xdp_link_of(self.ifindex, prog_id);
        if name.starts_with(lifecycle::PROGRAM_PREFIX) {
            let holders = lifecycle::holders(prog_id);
            if link.is_none() && holders.is_empty() {
                let ret = lifecycle::netlink_detach(self.ifindex, prog_id, mode);
                if ret < 0 {
                    return Err(self.os_error("detaching rsspp's leftover program", -ret));
                }
                tracing::warn!(iface = %self.iface, prog_id, program = %name, "replaced rsspp's leftover program (attached through netlink by an older rsspp or a killed daemon)");
                return Ok(None);
            }
            let how = if holders.is_empty() {
                format!(
                    "kept (pinned under {}); `rsspp detach --iface {}` removes it",
                    lifecycle::pin_dir(&self.iface).display(),
                    self.iface
                )
            } else {
                let pids: Vec<String> = holders.iter().map(u32::to_string).collect();
                format!(
                    "held by running process {} (another `rsspp run`?): stop it first",
                    pids.join(",")
                )
            };
            return Err(self.error(XdpErrorKind::OwnAttached {
                prog_id,
                mode: mode_name(mode),
                how,
            }));
        }
        if link.is_some() {
            return Err(self.error(XdpErrorKind::LinkAttached {
                prog_id,
                name,
                mode: mode_name(mode),
            }));
        }
        if !self.force {
            return Err(self.error(XdpErrorKind::AlreadyAttached {
                prog_id,
                name,
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
        lifecycle::prog_fd(prog_id)
            .map(Some)
            .map_err(|errno| self.os_error("opening the attached program", errno))
    }

    /// Attaches through a BPF link, after detaching `replaced` (put back
    /// if the link fails).
    fn attach_link(&self, replaced: Option<OwnedFd>) -> Result<Attachment, XdpError> {
        if let Some(old) = &replaced {
            let ret =
                lifecycle::xdp_attach(self.ifindex, -1, self.mode.flags(), Some(old.as_raw_fd()));
            if ret < 0 {
                return Err(self.attach_error("detaching the replaced program", -ret));
            }
        }
        // SAFETY: zeroed is a valid value of this plain C struct.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _;
        opts.flags = self.mode.flags();
        // SAFETY: our program fd is open and `opts` is a valid, sized struct.
        let fd = unsafe {
            libbpf_sys::bpf_link_create(
                self.prog.as_raw_fd(),
                self.ifindex as i32,
                libbpf_sys::BPF_XDP,
                &opts,
            )
        };
        if fd < 0 {
            if let Some(old) = &replaced {
                let flags = self.mode.flags() | libbpf_sys::XDP_FLAGS_UPDATE_IF_NOEXIST;
                if lifecycle::xdp_attach(self.ifindex, old.as_raw_fd(), flags, None) < 0 {
                    tracing::warn!(iface = %self.iface, "the replaced XDP program could not be put back");
                }
            }
            return Err(self.attach_error("attaching the XDP program", -fd));
        }
        // SAFETY: just returned to us.
        let link = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Attachment::Link { link, replaced })
    }

    /// Attaches through netlink, replacing `replaced` atomically.
    fn attach_netlink(&self, replaced: Option<OwnedFd>) -> Result<Attachment, XdpError> {
        let mut flags = self.mode.flags();
        if replaced.is_none() {
            flags |= libbpf_sys::XDP_FLAGS_UPDATE_IF_NOEXIST;
        }
        // With `old_prog_fd` set, libbpf adds XDP_FLAGS_REPLACE: the kernel
        // replaces that program only if it is still the one attached.
        let old = replaced.as_ref().map(|fd| fd.as_raw_fd());
        let ret = lifecycle::xdp_attach(self.ifindex, self.prog.as_raw_fd(), flags, old);
        if ret < 0 {
            return Err(self.attach_error("attaching the XDP program", -ret));
        }
        Ok(Attachment::Netlink { replaced })
    }

    /// A failed attach, named: someone else's program (attached between
    /// our look and our attach), no native XDP in the driver, or errno.
    fn attach_error(&self, what: &'static str, errno: i32) -> XdpError {
        match errno {
            libc::EBUSY | libc::EEXIST => match self.query() {
                Ok(Some((prog_id, mode))) => self.error(XdpErrorKind::AlreadyAttached {
                    prog_id,
                    name: lifecycle::prog_name(prog_id),
                    mode: mode_name(mode),
                }),
                _ => self.os_error(what, errno),
            },
            libc::EOPNOTSUPP if self.mode == AttachMode::Native => self.error(
                XdpErrorKind::NativeUnsupported(io::Error::from_raw_os_error(errno)),
            ),
            errno => self.os_error(what, errno),
        }
    }

    /// Detaches the program, putting back the one `force` replaced. A
    /// no-op when not attached; an interface that vanished counts as
    /// detached. If someone replaced our netlink-attached program
    /// meanwhile, theirs is left in place ([`XdpErrorKind::NotOurs`]).
    pub fn detach(&mut self) -> Result<(), XdpError> {
        let Some(attachment) = self.attached.take() else {
            return Ok(());
        };
        match attachment {
            Attachment::Link { link, replaced } => {
                // Explicit, rather than by closing: the link may have
                // another holder (a pin).
                // SAFETY: a link fd we own.
                let ret = unsafe { libbpf_sys::bpf_link_detach(link.as_raw_fd()) };
                drop(link);
                // ENOLINK: already detached (the interface went away).
                if ret < 0 && -ret != libc::ENOLINK && -ret != libc::ENODEV {
                    return Err(self.os_error("detaching the XDP link", -ret));
                }
                if let Some(old) = &replaced {
                    let flags = self.mode.flags() | libbpf_sys::XDP_FLAGS_UPDATE_IF_NOEXIST;
                    let ret = lifecycle::xdp_attach(self.ifindex, old.as_raw_fd(), flags, None);
                    match -ret {
                        0 | libc::ENODEV => {}
                        libc::EBUSY | libc::EEXIST => return Err(self.error(XdpErrorKind::NotOurs)),
                        errno => {
                            return Err(self.os_error("putting back the replaced program", errno))
                        }
                    }
                }
                tracing::info!(iface = %self.iface, restored = replaced.is_some(), "XDP program detached");
                Ok(())
            }
            Attachment::Netlink { replaced } => {
                let new = replaced.as_ref().map_or(-1, |fd| fd.as_raw_fd());
                let ret = lifecycle::xdp_attach(
                    self.ifindex,
                    new,
                    self.mode.flags(),
                    Some(self.prog.as_raw_fd()),
                );
                match -ret {
                    0 => {
                        tracing::info!(iface = %self.iface, restored = replaced.is_some(), "XDP program detached");
                        Ok(())
                    }
                    libc::ENODEV => Ok(()),
                    libc::EEXIST => Err(self.error(XdpErrorKind::NotOurs)),
                    errno => {
                        self.attached = Some(Attachment::Netlink { replaced });
                        Err(self.os_error("detaching the XDP program", errno))
                    }
                }
            }
        }
    }

    /// Leaves the program attached after this [`Xdp`] is gone, as
    /// `rsspp run --keep` promises: a link is pinned at
    /// `/sys/fs/bpf/rsspp/IF/link` (the BPF filesystem mounted there if it
    /// is not), with the steering program's table next to it at `table`;
    /// a netlink attachment outlives the process by itself. Returns where
    /// the link is pinned. On error the program is detached.
    pub fn keep(mut self) -> Result<Option<std::path::PathBuf>, XdpError> {
        let link = match &self.attached {
            Some(Attachment::Link { link, .. }) => link.as_raw_fd(),
            Some(Attachment::Netlink { .. }) => {
                self.attached = None;
                return Ok(None);
            }
            None => return Ok(None),
        };
        let pin_error = |path: std::path::PathBuf, source| {
            XdpError::new(&self.iface, XdpErrorKind::Pin { path, source })
        };
        let dir = lifecycle::pin_dir(&self.iface);
        match lifecycle::ensure_bpffs() {
            Ok(true) => tracing::info!(
                "mounted the BPF filesystem at {} (in a private mount namespace, such as `ip netns exec`'s, the pin goes with it)",
                lifecycle::BPFFS
            ),
            Ok(false) => {}
            Err(e) => return Err(pin_error(lifecycle::BPFFS.into(), e)),
        }
        std::fs::create_dir_all(&dir).map_err(|e| pin_error(dir.clone(), e))?;
        let path = dir.join("link");
        if let Err(e) = lifecycle::pin(link, &path) {
            let _ = lifecycle::unpin(&self.iface);
            return Err(pin_error(path, e));
        }
        if let Some(reta) = &self.maps.reta {
            use std::os::fd::AsFd;
            let table = dir.join("table");
            if let Err(e) = lifecycle::pin(reta.as_fd().as_raw_fd(), &table) {
                tracing::warn!("{}: {e}", table.display());
            }
        }
        // The pin holds the link now; the replaced program, if any, is
        // not put back.
        self.attached = None;
        Ok(Some(path))
    }

    /// The program attached to the interface now, if any, and its mode
    /// (`None` for hardware offload).
    fn query(&self) -> Result<Option<(u32, Option<AttachMode>)>, XdpError> {
        lifecycle::query_xdp(self.ifindex)
            .map_err(|errno| self.os_error("querying the attached XDP program", errno))
    }
}

impl Drop for Xdp {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::warn!("{e}");
        }
    }
}
