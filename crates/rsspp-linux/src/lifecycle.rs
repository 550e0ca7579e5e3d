//! What `rsspp run` leaves on an interface, and how to find and remove it:
//! the pins of a kept program, the state file, the programs attached now
//! (`rsspp status`, `rsspp detach`), and the interface watch that ends a
//! run whose interface was deleted or went down.
//!
//! Where things are, per interface `IF`:
//!
//! - `/sys/fs/bpf/rsspp/IF/link`: the BPF link of a program kept with
//!   `rsspp run --keep` (and `table`, its indirection table, in software
//!   mode). Unpinned, a link lives as long as the process holding it: the
//!   kernel detaches the program when `rsspp run` dies, however it dies.
//! - `/run/rsspp/IF/state`: what the daemon attached, one `key=value` per
//!   line (mode, table size, since when, its pid); written at start,
//!   removed at an orderly exit unless kept.
//!
//! Outside the host's network namespace, both sit one level down, in
//! `netns-NAME/` (a namespace `ip netns` named) or `netns-INODE/`, so that
//! interfaces of the same name in two namespaces do not share them.
//!
//! An rsspp program is recognised by its name: `xdp_rsspp_*`.

use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libbpf_rs::libbpf_sys;

use crate::xdp::AttachMode;

/// Where the BPF filesystem is mounted.
pub const BPFFS: &str = "/sys/fs/bpf";

/// rsspp's pins, under [`BPFFS`].
pub const PIN_ROOT: &str = "/sys/fs/bpf/rsspp";

/// rsspp's state files.
pub const STATE_ROOT: &str = "/run/rsspp";

/// The prefix of the names of rsspp's XDP programs.
pub const PROGRAM_PREFIX: &str = "xdp_rsspp_";

/// Why a look at, or a removal of, rsspp's programs failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// No interface of that name in this network namespace (and no pin).
    #[error("{0}: no such interface in this network namespace")]
    UnknownInterface(String),
    /// The program attached to the interface is not rsspp's.
    #[error(
        "{iface}: the attached XDP program (id {prog_id}, {name:?}) is not rsspp's: left as it is"
    )]
    NotOurs {
        /// The interface.
        iface: String,
        /// Its program id.
        prog_id: u32,
        /// Its name.
        name: String,
    },
    /// A running process holds the program (a daemon still running).
    #[error("{iface}: rsspp's program (id {prog_id}) is held by running process {pids}: stop it (SIGTERM detaches)")]
    InUse {
        /// The interface.
        iface: String,
        /// The program id.
        prog_id: u32,
        /// The holders' pids, comma-separated.
        pids: String,
    },
    /// The NIC's saved table could not be put back.
    #[error("putting back the NIC's saved table: {0}")]
    Nic(#[from] crate::ethtool::EthtoolError),
    /// A system call failed.
    #[error("{iface}: {what}: {source}")]
    Os {
        /// The interface.
        iface: String,
        /// What failed.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

fn os(iface: &str, what: &'static str, source: io::Error) -> LifecycleError {
    LifecycleError::Os {
        iface: iface.to_string(),
        what,
        source,
    }
}

// ---------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------

/// The inode of a network namespace file.
fn netns_inode(path: &str) -> Option<u64> {
    fs::metadata(path).ok().map(|m| m.ino())
}

/// The calling thread's network namespace (setns changes only the
/// thread's), as its inode.
pub fn netns_id() -> Option<u64> {
    netns_inode("/proc/thread-self/ns/net")
}

/// `""` in the host's network namespace; `netns-NAME` in one that
/// `ip netns` named NAME (`/run/netns/NAME`); `netns-INODE` in another one
/// (when pid 1's can be read to tell).
fn scope() -> PathBuf {
    let Some(own) = netns_id() else {
        return PathBuf::new();
    };
    let named = fs::read_dir("/run/netns").ok().and_then(|dir| {
        dir.flatten()
            .find(|e| e.metadata().is_ok_and(|m| m.ino() == own))
            .and_then(|e| e.file_name().into_string().ok())
    });
    if let Some(name) = named {
        return PathBuf::from(format!("netns-{name}"));
    }
    match netns_inode("/proc/1/ns/net") {
        Some(host) if host != own => PathBuf::from(format!("netns-{own}")),
        _ => PathBuf::new(),
    }
}

/// The directory of `iface`'s pins (in the calling thread's network
/// namespace).
pub fn pin_dir(iface: &str) -> PathBuf {
    Path::new(PIN_ROOT).join(scope()).join(iface)
}

/// The state file of `iface` (in the calling thread's network namespace).
pub fn state_path(iface: &str) -> PathBuf {
    Path::new(STATE_ROOT)
        .join(scope())
        .join(iface)
        .join("state")
}

/// Whether [`BPFFS`] is a BPF filesystem.
fn bpffs_mounted() -> bool {
    let path = CString::new(BPFFS).expect("no NUL");
    // SAFETY: zeroed is a valid statfs; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let ret = unsafe { libc::statfs(path.as_ptr(), &mut st) };
    ret == 0 && st.f_type == libc::BPF_FS_MAGIC
}

/// Mounts the BPF filesystem at [`BPFFS`] unless it is there. Returns
/// whether it mounted it.
pub fn ensure_bpffs() -> io::Result<bool> {
    if bpffs_mounted() {
        return Ok(false);
    }
    fs::create_dir_all(BPFFS)?;
    let c = |s: &str| CString::new(s).expect("no NUL");
    let (src, target, fstype, data) = (c("bpf"), c(BPFFS), c("bpf"), c("mode=0700"));
    // SAFETY: NUL-terminated strings that outlive the call.
    let ret = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// Pins `fd` (a link or a map) at `path`.
pub(crate) fn pin(fd: i32, path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    // SAFETY: a valid fd and a NUL-terminated path.
    let ret = unsafe { libbpf_sys::bpf_obj_pin(fd, c.as_ptr()) };
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret));
    }
    Ok(())
}

/// Opens the object pinned at `path`.
fn open_pinned(path: &Path) -> Option<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; a non-negative result is ours.
    let fd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Removes `iface`'s pins and their directory (and the namespace's
/// directory once empty). Missing ones are fine.
pub(crate) fn unpin(iface: &str) -> io::Result<bool> {
    let dir = pin_dir(iface);
    let mut removed = false;
    for name in ["link", "table"] {
        match fs::remove_file(dir.join(name)) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let _ = fs::remove_dir(&dir);
    if let Some(parent) = dir.parent().filter(|p| *p != Path::new(PIN_ROOT)) {
        let _ = fs::remove_dir(parent);
    }
    Ok(removed)
}

// ---------------------------------------------------------------------
// The kernel's view: programs, links, holders
// ---------------------------------------------------------------------

/// The XDP program attached to `ifindex` and its mode (`None`: hardware
/// offload). `Err(errno)` when the query fails.
pub(crate) fn query_xdp(ifindex: u32) -> Result<Option<(u32, Option<AttachMode>)>, i32> {
    // SAFETY: zeroed is a valid value of this plain C struct.
    let mut q: libbpf_sys::bpf_xdp_query_opts = unsafe { std::mem::zeroed() };
    q.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _;
    // SAFETY: `q` is a valid, sized options struct the call fills.
    let ret = unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut q) };
    if ret < 0 {
        return Err(-ret);
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

/// Opens the program `id`.
pub(crate) fn prog_fd(id: u32) -> Result<OwnedFd, i32> {
    // SAFETY: plain system call; a non-negative result is a new fd we own.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return Err(-fd);
    }
    // SAFETY: just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A program's name and when it was loaded.
struct ProgInfo {
    name: String,
    loaded: Option<SystemTime>,
}

fn prog_info(id: u32) -> Option<ProgInfo> {
    let fd = prog_fd(id).ok()?;
    // SAFETY: zeroed is a valid bpf_prog_info; the call fills at most `len`.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    let ret = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if ret < 0 {
        return None;
    }
    // SAFETY: the kernel NUL-terminates the name within its 16 bytes.
    let name = unsafe { CStr::from_ptr(info.name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Some(ProgInfo {
        name,
        loaded: boot_time().map(|boot| boot + Duration::from_nanos(info.load_time)),
    })
}

/// The wall-clock time of boot (`load_time` counts from it).
fn boot_time() -> Option<SystemTime> {
    // SAFETY: clock_gettime writes the timespec it is given.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let since_boot = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
    SystemTime::now().checked_sub(since_boot)
}

/// The name of program `id` (empty if it cannot be read).
pub(crate) fn prog_name(id: u32) -> String {
    prog_info(id).map(|i| i.name).unwrap_or_default()
}

/// A link's program and XDP interface (0 once the interface is gone).
fn link_info(fd: i32) -> Option<(u32, u32, u32)> {
    // SAFETY: zeroed is a valid bpf_link_info; the call fills at most `len`.
    let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_link_info>() as u32;
    let ret = unsafe { libbpf_sys::bpf_link_get_info_by_fd(fd, &mut info, &mut len) };
    if ret < 0 {
        return None;
    }
    // SAFETY: the xdp member is the one an XDP link fills.
    let ifindex = unsafe { info.__bindgen_anon_1.xdp.ifindex };
    Some((info.type_, info.prog_id, ifindex))
}

/// The id of the XDP link that attaches `prog_id` to `ifindex`, if it is
/// attached through one (and not through netlink).
pub(crate) fn xdp_link_of(ifindex: u32, prog_id: u32) -> Option<u32> {
    let mut id = 0;
    loop {
        let mut next = 0;
        // SAFETY: plain system call writing `next`.
        if unsafe { libbpf_sys::bpf_link_get_next_id(id, &mut next) } != 0 {
            return None;
        }
        id = next;
        // SAFETY: plain system call; a non-negative result is ours.
        let fd = unsafe { libbpf_sys::bpf_link_get_fd_by_id(id) };
        if fd < 0 {
            continue;
        }
        // SAFETY: just returned to us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if link_info(fd.as_raw_fd()) == Some((libbpf_sys::BPF_LINK_TYPE_XDP, prog_id, ifindex)) {
            return Some(id);
        }
    }
}

/// The processes holding a file descriptor on program `prog_id` (the
/// program itself or a link to it), from `/proc/*/fdinfo`; sorted.
pub fn holders(prog_id: u32) -> Vec<u32> {
    let wanted = format!("prog_id:\t{prog_id}");
    let mut pids = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return pids;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let held = fds.flatten().any(|fd| {
            let target = fs::read_link(fd.path()).unwrap_or_default();
            if !target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(b"anon_inode:bpf")
            {
                return false;
            }
            let info = entry.path().join("fdinfo").join(fd.file_name());
            fs::read_to_string(info).is_ok_and(|s| s.lines().any(|l| l == wanted))
        });
        if held {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// Whether process `pid` exists.
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let ret = unsafe { libc::kill(pid as i32, 0) };
    ret == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `bpf_xdp_attach`: `fd` -1 detaches; `old` makes it conditional on that
/// program being the one attached. Returns 0 or -errno.
pub(crate) fn xdp_attach(ifindex: u32, fd: i32, flags: u32, old: Option<i32>) -> i32 {
    // SAFETY: zeroed is a valid value of this plain C struct.
    let mut opts: libbpf_sys::bpf_xdp_attach_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _;
    if let Some(old) = old {
        opts.old_prog_fd = old;
    }
    // SAFETY: the caller's fds are open and `opts` is a valid, sized struct.
    unsafe { libbpf_sys::bpf_xdp_attach(ifindex as i32, fd, flags, &opts) }
}

/// The netlink flag of a mode (`None`: hardware offload).
fn mode_flags(mode: Option<AttachMode>) -> u32 {
    match mode {
        Some(AttachMode::Native) => libbpf_sys::XDP_FLAGS_DRV_MODE,
        Some(AttachMode::Skb) => libbpf_sys::XDP_FLAGS_SKB_MODE,
        None => libbpf_sys::XDP_FLAGS_HW_MODE,
    }
}

/// Detaches the netlink-attached program `prog_id` from `ifindex` in
/// `mode`, only if it is still the one attached. Returns 0 or -errno.
pub(crate) fn netlink_detach(ifindex: u32, prog_id: u32, mode: Option<AttachMode>) -> i32 {
    match prog_fd(prog_id) {
        Ok(fd) => xdp_attach(ifindex, -1, mode_flags(mode), Some(fd.as_raw_fd())),
        Err(errno) => -errno,
    }
}

// ---------------------------------------------------------------------
// The state file
// ---------------------------------------------------------------------

/// What a daemon attached, as its state file records it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// The interface.
    pub iface: String,
    /// Its index.
    pub ifindex: u32,
    /// The program's id.
    pub prog_id: u32,
    /// The program's name.
    pub program: String,
    /// `software` or `hardware`.
    pub steering: String,
    /// `native` or `skb`.
    pub attach: String,
    /// The indirection table's size.
    pub reta_size: usize,
    /// Attached at, seconds since the epoch.
    pub since: u64,
    /// The daemon's pid.
    pub pid: u32,
    /// Where the link is pinned (kept), if it is.
    pub pinned: Option<PathBuf>,
}

impl State {
    fn to_text(&self) -> String {
        let mut s = String::from("# rsspp run: what it attached (read by `rsspp status`)\n");
        let mut kv = |k: &str, v: &dyn std::fmt::Display| s.push_str(&format!("{k}={v}\n"));
        kv("iface", &self.iface);
        kv("ifindex", &self.ifindex);
        kv("prog_id", &self.prog_id);
        kv("program", &self.program);
        kv("steering", &self.steering);
        kv("attach", &self.attach);
        kv("reta_size", &self.reta_size);
        kv("since", &self.since);
        kv("pid", &self.pid);
        if let Some(p) = &self.pinned {
            kv("pinned", &p.display());
        }
        s
    }

    fn parse(text: &str) -> State {
        let mut st = State::default();
        for (k, v) in text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
        {
            match k {
                "iface" => st.iface = v.to_string(),
                "ifindex" => st.ifindex = v.parse().unwrap_or(0),
                "prog_id" => st.prog_id = v.parse().unwrap_or(0),
                "program" => st.program = v.to_string(),
                "steering" => st.steering = v.to_string(),
                "attach" => st.attach = v.to_string(),
                "reta_size" => st.reta_size = v.parse().unwrap_or(0),
                "since" => st.since = v.parse().unwrap_or(0),
                "pid" => st.pid = v.parse().unwrap_or(0),
                "pinned" => st.pinned = Some(PathBuf::from(v)),
                _ => {}
            }
        }
        st
    }

    /// Reads `iface`'s state file, if any.
    pub fn read(iface: &str) -> Option<State> {
        fs::read_to_string(state_path(iface))
            .ok()
            .map(|t| State::parse(&t))
    }

    /// Writes it to its interface's state file.
    pub fn write(&self) -> io::Result<()> {
        let path = state_path(&self.iface);
        fs::create_dir_all(path.parent().expect("a directory"))?;
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, self.to_text())?;
        fs::rename(tmp, path)
    }

    /// Removes `iface`'s state file and its directory.
    pub fn remove(iface: &str) {
        let path = state_path(iface);
        let _ = fs::remove_file(&path);
        if let Some(dir) = path.parent() {
            let _ = fs::remove_dir(dir);
            if let Some(parent) = dir.parent().filter(|p| *p != Path::new(STATE_ROOT)) {
                let _ = fs::remove_dir(parent);
            }
        }
    }
}

/// The NIC table a hardware-mode daemon found when it started (the one to
/// put back), saved next to its state file while its own table is in the
/// NIC: a run that ends without putting it back (SIGKILL, `--keep`) leaves
/// it there, so that the next run, or `rsspp detach`, puts back the real
/// original rather than the table the dead daemon left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedTable {
    /// The daemon that saved it.
    pub pid: u32,
    /// The RSS context the table is (0: the main table).
    pub context: u32,
    /// The table.
    pub table: Vec<u32>,
    /// The locations of the ntuple rules the daemon put in the NIC's rule
    /// table (per-flow overrides), to delete.
    pub rules: Vec<u32>,
}

impl SavedTable {
    /// Where `iface`'s saved table is (in the calling thread's network
    /// namespace).
    pub fn path(iface: &str) -> PathBuf {
        state_path(iface).with_file_name("original-table")
    }

    /// Reads `iface`'s saved table, if any (a file that does not parse is
    /// none).
    pub fn read(iface: &str) -> Option<SavedTable> {
        let text = fs::read_to_string(Self::path(iface)).ok()?;
        let (mut pid, mut table, mut context, mut rules) = (None, None, Some(0), Some(Vec::new()));
        for (k, v) in text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
        {
            match k {
                "pid" => pid = v.parse().ok(),
                "context" => context = v.parse().ok(),
                "table" => {
                    table = v
                        .split(',')
                        .map(|q| q.parse().ok())
                        .collect::<Option<Vec<u32>>>()
                }
                "rules" => {
                    rules = v
                        .split(',')
                        .filter(|l| !l.is_empty())
                        .map(|l| l.parse().ok())
                        .collect::<Option<Vec<u32>>>()
                }
                _ => {}
            }
        }
        Some(SavedTable {
            pid: pid?,
            context: context?,
            table: table.filter(|t| !t.is_empty())?,
            rules: rules?,
        })
    }

    /// Saves it as `iface`'s (atomically: written aside, then renamed).
    pub fn write(&self, iface: &str) -> io::Result<()> {
        let path = Self::path(iface);
        fs::create_dir_all(path.parent().expect("a directory"))?;
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let text = format!(
            "# rsspp run --mode hardware: the NIC's table before it wrote its own, and the locations of its ntuple rules\npid={}\ncontext={}\ntable={}\nrules={}\n",
            self.pid,
            self.context,
            list(&self.table),
            list(&self.rules)
        );
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, text)?;
        fs::rename(tmp, path)
    }

    /// Removes `iface`'s saved table.
    pub fn remove(iface: &str) {
        let _ = fs::remove_file(Self::path(iface));
        if let Some(dir) = Self::path(iface).parent() {
            let _ = fs::remove_dir(dir);
        }
    }

    /// The table to put back in RSS context `context` of `iface`, whose
    /// table is `current`: a saved one of the same context and size whose
    /// daemon is gone (it never put it back), else `current`. Returns the
    /// pid of that daemon too.
    pub fn original(iface: &str, context: u32, current: Vec<u32>) -> (Vec<u32>, Option<u32>) {
        Self::chosen(Self::left(iface), context, current)
    }

    /// What a hardware-mode run finds of one before it on `nic`: the ntuple
    /// rules a run that is gone left are deleted (their locations free
    /// again), and the table to put back is returned as
    /// [`SavedTable::original`] does.
    pub fn recover<N: crate::ethtool::RssDevice + ?Sized>(
        nic: &mut N,
        iface: &str,
        context: u32,
        current: Vec<u32>,
    ) -> (Vec<u32>, Option<u32>) {
        let left = Self::left(iface);
        if let Some(saved) = &left {
            delete_left_rules(nic, saved);
        }
        Self::chosen(left, context, current)
    }

    /// `iface`'s saved table, if its daemon is gone.
    fn left(iface: &str) -> Option<SavedTable> {
        Self::read(iface).filter(|saved| !alive(saved.pid))
    }

    fn chosen(
        left: Option<SavedTable>,
        context: u32,
        current: Vec<u32>,
    ) -> (Vec<u32>, Option<u32>) {
        match left {
            Some(saved) if saved.context == context && saved.table.len() == current.len() => {
                (saved.table, Some(saved.pid))
            }
            _ => (current, None),
        }
    }
}

/// Puts back the NIC table a hardware-mode daemon saved on `iface` and
/// did not put back (killed, or `--keep`), and forgets it; returns that
/// daemon's pid, or `None` when there is nothing to put back (no saved
/// table, or its daemon still runs: it will).
pub fn restore_saved_table(iface: &str) -> Result<Option<u32>, LifecycleError> {
    let Some(saved) = SavedTable::read(iface) else {
        return Ok(None);
    };
    if alive(saved.pid) {
        return Ok(None);
    }
    let mut nic = crate::ethtool::Ethtool::open(iface)?.context(saved.context)?;
    delete_left_rules(&mut nic, &saved);
    crate::ethtool::put_back(&mut nic, &saved.table)?;
    SavedTable::remove(iface);
    tracing::info!(
        iface,
        pid = saved.pid,
        context = saved.context,
        "put back the NIC's original table"
    );
    Ok(Some(saved.pid))
}

/// Deletes the ntuple rules `saved` lists (a daemon that did not delete
/// them: killed, or `--keep`); a rule already gone is no error.
pub fn delete_left_rules<N: crate::ethtool::RssDevice + ?Sized>(nic: &mut N, saved: &SavedTable) {
    for &location in &saved.rules {
        match nic.delete_rule(location) {
            Ok(()) => {
                tracing::info!(iface = %nic.name(), location, pid = saved.pid, "deleted an ntuple rule left by an rsspp run")
            }
            Err(crate::ethtool::EthtoolError::Ioctl { errno, .. }) if errno.0 == libc::ENOENT => {}
            Err(e) => tracing::warn!("deleting the ntuple rule at {location}: {e}"),
        }
    }
}

/// Seconds since the epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// ---------------------------------------------------------------------
// Status and detach
// ---------------------------------------------------------------------

/// An rsspp program attached to an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// The interface.
    pub iface: String,
    /// Its index.
    pub ifindex: u32,
    /// The attach mode (`None`: hardware offload).
    pub mode: Option<AttachMode>,
    /// The program's id.
    pub prog_id: u32,
    /// The program's name (`xdp_rsspp_steer`, ...).
    pub program: String,
    /// The BPF link attaching it; `None`: attached through netlink (it
    /// stays until detached).
    pub link_id: Option<u32>,
    /// Where its link is pinned, if it is.
    pub pinned: Option<PathBuf>,
    /// Processes holding it (a running daemon).
    pub holders: Vec<u32>,
    /// Loaded at, seconds since the epoch.
    pub since: Option<u64>,
    /// The state file, when it describes this program.
    pub state: Option<State>,
}

impl Attached {
    /// The pid of the daemon that attached it, while it runs.
    pub fn daemon(&self) -> Option<u32> {
        self.state
            .as_ref()
            .map(|s| s.pid)
            .filter(|&pid| pid != 0 && alive(pid) && self.holders.contains(&pid))
    }
}

/// A pin left by a kept program that is no longer attached (its
/// interface was deleted, or someone detached it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalePin {
    /// The interface it was kept on.
    pub iface: String,
    /// The pin.
    pub path: PathBuf,
}

/// A NIC table a hardware-mode daemon wrote and never put back (it was
/// killed, or kept it): the original it saved is still under `/run/rsspp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftTable {
    /// The interface.
    pub iface: String,
    /// The daemon that left it (no longer running).
    pub pid: u32,
    /// The RSS context (0: the main table).
    pub context: u32,
    /// Ntuple rules it left (per-flow overrides), by location.
    pub rules: Vec<u32>,
}

/// What rsspp has attached in this network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// The attached programs, by interface index.
    pub attached: Vec<Attached>,
    /// Pins that no longer attach anything.
    pub stale: Vec<StalePin>,
    /// NIC tables left by daemons that did not put the original back.
    pub left_tables: Vec<LeftTable>,
}

/// The interfaces of this network namespace: (index, name).
fn interfaces() -> Vec<(u32, String)> {
    // SAFETY: if_nameindex returns an array ending with a zero entry, or
    // NULL; freed below.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut p = list;
    loop {
        // SAFETY: within the array, up to its zero entry.
        let entry = unsafe { &*p };
        if entry.if_index == 0 || entry.if_name.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(entry.if_name) };
        out.push((entry.if_index, name.to_string_lossy().into_owned()));
        p = unsafe { p.add(1) };
    }
    // SAFETY: the list if_nameindex returned.
    unsafe { libc::if_freenameindex(list) };
    out
}

/// The index of `iface` in the calling thread's network namespace.
pub fn ifindex_of(iface: &str) -> Option<u32> {
    let name = CString::new(iface).ok()?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => None,
        index => Some(index),
    }
}

/// The link pinned for `iface` and its program id, if any.
fn pinned_link(iface: &str) -> Option<(PathBuf, OwnedFd, u32, u32)> {
    let path = pin_dir(iface).join("link");
    let fd = open_pinned(&path)?;
    let (_, prog_id, ifindex) = link_info(fd.as_raw_fd())?;
    Some((path, fd, prog_id, ifindex))
}

/// What is attached to `iface` (index `ifindex`), if it is rsspp's.
fn describe(iface: &str, ifindex: u32) -> Option<Attached> {
    let (prog_id, mode) = query_xdp(ifindex).ok()??;
    let info = prog_info(prog_id)?;
    if !info.name.starts_with(PROGRAM_PREFIX) {
        return None;
    }
    let pinned = pinned_link(iface)
        .filter(|(_, _, id, _)| *id == prog_id)
        .map(|(path, ..)| path);
    let state = State::read(iface).filter(|s| s.prog_id == prog_id);
    Some(Attached {
        iface: iface.to_string(),
        ifindex,
        mode,
        prog_id,
        program: info.name,
        link_id: xdp_link_of(ifindex, prog_id),
        pinned,
        holders: holders(prog_id),
        since: state.as_ref().map(|s| s.since).or_else(|| {
            info.loaded
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
        }),
        state,
    })
}

/// `iface` alone, or else the interfaces that have a directory under
/// `root` for this network namespace (pins, state).
fn iface_dirs(root: &str, iface: Option<&str>) -> Vec<String> {
    if let Some(name) = iface {
        return vec![name.to_string()];
    }
    fs::read_dir(Path::new(root).join(scope()))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with("netns-"))
                .collect()
        })
        .unwrap_or_default()
}

/// What rsspp has attached in the calling thread's network namespace, on
/// `iface` only if given: the interfaces with an `xdp_rsspp_*` program,
/// and the pins that no longer attach anything.
pub fn status(iface: Option<&str>) -> Result<Status, LifecycleError> {
    let ifaces = match iface {
        Some(name) => match ifindex_of(name) {
            Some(index) => vec![(index, name.to_string())],
            None if pin_dir(name).exists() => Vec::new(),
            None => return Err(LifecycleError::UnknownInterface(name.to_string())),
        },
        None => interfaces(),
    };
    let mut status = Status::default();
    for (index, name) in &ifaces {
        if let Some(a) = describe(name, *index) {
            status.attached.push(a);
        }
    }
    let dirs = iface_dirs(PIN_ROOT, iface);
    for name in dirs {
        let path = pin_dir(&name).join("link");
        if !path.exists() {
            continue;
        }
        let live = status
            .attached
            .iter()
            .any(|a| a.iface == name && a.pinned.is_some());
        if !live {
            status.stale.push(StalePin { iface: name, path });
        }
    }
    for name in iface_dirs(STATE_ROOT, iface) {
        if let Some(t) = SavedTable::read(&name).filter(|t| !alive(t.pid)) {
            status.left_tables.push(LeftTable {
                iface: name,
                pid: t.pid,
                context: t.context,
                rules: t.rules,
            });
        }
    }
    Ok(status)
}

/// What [`detach`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detached {
    /// Nothing was attached (stale pins and state were removed, if any).
    Nothing {
        /// Stale pins were removed.
        stale_pins: bool,
    },
    /// rsspp's program was detached.
    Removed {
        /// Its id.
        prog_id: u32,
        /// Its name.
        program: String,
        /// Its link was pinned (and is unpinned now).
        pinned: bool,
    },
}

/// Removes rsspp's program from `iface` (in the calling thread's network
/// namespace): detaches its link (pinned or not) or, if it is attached
/// through netlink, the program itself; then removes the pins and the
/// state file. Refuses a program that is not rsspp's, and one a running
/// process holds (a daemon: SIGTERM detaches). Nothing attached is not an
/// error.
pub fn detach(iface: &str) -> Result<Detached, LifecycleError> {
    let Some(ifindex) = ifindex_of(iface) else {
        // The interface is gone: only its pins can be left.
        let stale = unpin(iface).map_err(|e| os(iface, "removing the pins", e))?;
        State::remove(iface);
        if stale {
            return Ok(Detached::Nothing { stale_pins: true });
        }
        return Err(LifecycleError::UnknownInterface(iface.to_string()));
    };
    let attached =
        query_xdp(ifindex).map_err(|e| os(iface, "querying the attached XDP program", errno(e)))?;
    let Some((prog_id, mode)) = attached else {
        let stale = unpin(iface).map_err(|e| os(iface, "removing the pins", e))?;
        State::remove(iface);
        return Ok(Detached::Nothing { stale_pins: stale });
    };
    let Some(found) = describe(iface, ifindex) else {
        return Err(LifecycleError::NotOurs {
            iface: iface.to_string(),
            prog_id,
            name: prog_name(prog_id),
        });
    };
    // A pinned link's pin holds it in no process; anything else is a
    // running process (our own pid included: a library user).
    if !found.holders.is_empty() {
        return Err(LifecycleError::InUse {
            iface: iface.to_string(),
            prog_id,
            pids: found
                .holders
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    if let Some(link_id) = found.link_id {
        // SAFETY: plain system call; a non-negative result is ours.
        let fd = unsafe { libbpf_sys::bpf_link_get_fd_by_id(link_id) };
        if fd < 0 {
            return Err(os(iface, "opening the XDP link", errno(-fd)));
        }
        // SAFETY: just returned to us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a link fd.
        let ret = unsafe { libbpf_sys::bpf_link_detach(fd.as_raw_fd()) };
        if ret < 0 {
            return Err(os(iface, "detaching the XDP link", errno(-ret)));
        }
    } else {
        let ret = netlink_detach(ifindex, prog_id, mode);
        if ret < 0 && -ret != libc::ENODEV {
            return Err(os(iface, "detaching the XDP program", errno(-ret)));
        }
    }
    unpin(iface).map_err(|e| os(iface, "removing the pins", e))?;
    State::remove(iface);
    tracing::info!(iface, prog_id, program = %found.program, "detached rsspp's XDP program");
    Ok(Detached::Removed {
        prog_id,
        program: found.program,
        pinned: found.pinned.is_some(),
    })
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

// ---------------------------------------------------------------------
// The interface watch
// ---------------------------------------------------------------------

/// How a running daemon lost its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// No interface has its index any more.
    Deleted,
    /// It is administratively down.
    Down,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Loss::Deleted => "was deleted",
            Loss::Down => "went down",
        })
    }
}

/// Watches one interface by its index: two ioctls per look
/// (`SIOCGIFNAME`, `SIOCGIFFLAGS`), cheap enough for every 50 ms.
#[derive(Debug)]
pub struct Watch {
    ifindex: u32,
    sock: OwnedFd,
}

impl Watch {
    /// Watches the interface of index `ifindex` (in the calling thread's
    /// network namespace).
    pub fn new(ifindex: u32) -> io::Result<Watch> {
        // SAFETY: plain socket creation; the fd is ours.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Watch { ifindex, sock })
    }

    /// `None` while the interface exists and is up.
    ///
    /// Deleting an interface first takes it down, then unlists it, so a
    /// look in between sees it down: a `Down` is looked at again for up to
    /// [`Watch::SETTLE`], and reported as `Deleted` if it goes away.
    pub fn check(&self) -> Option<Loss> {
        let loss = self.look()?;
        if loss == Loss::Down {
            let until = std::time::Instant::now() + Self::SETTLE;
            while std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(5));
                if self.look() == Some(Loss::Deleted) {
                    return Some(Loss::Deleted);
                }
            }
        }
        Some(loss)
    }

    /// How long a `Down` is watched for a deletion in progress.
    pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

    fn look(&self) -> Option<Loss> {
        // SAFETY: zeroed is a valid ifreq.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        req.ifr_ifru.ifru_ifindex = self.ifindex as i32;
        // SAFETY: the ioctl fills the name of the index in `req`.
        if unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::SIOCGIFNAME, &mut req) } != 0 {
            return match io::Error::last_os_error().raw_os_error() {
                Some(libc::ENODEV) => Some(Loss::Deleted),
                _ => None,
            };
        }
        // SAFETY: `req` names the interface; the ioctl fills its flags.
        if unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } != 0 {
            return match io::Error::last_os_error().raw_os_error() {
                Some(libc::ENODEV) => Some(Loss::Deleted),
                _ => None,
            };
        }
        // SAFETY: SIOCGIFFLAGS filled the flags member.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        (flags & libc::IFF_UP as i16 == 0).then_some(Loss::Down)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_a_killed_run_left_are_deleted_and_no_others() {
        use crate::ethtool::{FakeNic, FlowRule, RssDevice, RuleMatch};
        let mut nic = FakeNic::new("fake0", 64, 2).with_rules(16);
        let matches = RuleMatch::for_flow(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            Some((1000, 53)),
        );
        for (location, m) in [(15, matches[0]), (14, matches[1]), (3, matches[0])] {
            let rule = FlowRule {
                matches: m,
                queue: 1,
                location,
            };
            nic.insert_rule(&rule).unwrap();
        }
        let iface = format!("rsspp-rules-{}", std::process::id());
        let saved = SavedTable {
            pid: dead_pid(),
            context: 0,
            table: vec![1; 64],
            // 13: gone already, no error.
            rules: vec![13, 14, 15],
        };
        saved.write(&iface).unwrap();
        // The next hardware-mode run: the killed run's rules deleted, its
        // saved original the table to put back.
        let (original, by) = SavedTable::recover(&mut nic, &iface, 0, vec![0; 64]);
        SavedTable::remove(&iface);
        assert_eq!((original, by), (vec![1; 64], Some(saved.pid)));
        let left: Vec<u32> = nic.rules().iter().map(|r| r.location).collect();
        assert_eq!(left, vec![3], "someone else's rule stays");
    }

    /// A pid no process has any more.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_saved_table_is_the_original_once_its_daemon_is_gone() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping: /run/rsspp is root's (CI runs as root)");
            return;
        }
        let iface = format!("rsspp-saved-{}", std::process::id());
        let current = vec![0, 1, 0, 1];
        assert_eq!(SavedTable::read(&iface), None);
        assert_eq!(
            SavedTable::original(&iface, 0, current.clone()),
            (current.clone(), None)
        );
        // A run that was killed with its own table in the NIC.
        let pid = dead_pid();
        let saved = SavedTable {
            pid,
            context: 0,
            table: vec![3, 2, 1, 0],
            rules: vec![1022, 1023],
        };
        saved.write(&iface).unwrap();
        assert_eq!(SavedTable::read(&iface), Some(saved.clone()));
        assert_eq!(
            SavedTable::original(&iface, 0, current.clone()),
            (vec![3, 2, 1, 0], Some(pid))
        );
        // A table of another size is not this NIC's any more.
        assert_eq!(
            SavedTable::original(&iface, 0, vec![0; 8]),
            (vec![0; 8], None)
        );
        // Another RSS context's table is not this one's.
        assert_eq!(
            SavedTable::original(&iface, 2, current.clone()),
            (current.clone(), None)
        );
        let context = SavedTable {
            pid,
            context: 2,
            table: vec![1, 1, 0, 0],
            rules: Vec::new(),
        };
        context.write(&iface).unwrap();
        assert_eq!(SavedTable::read(&iface), Some(context));
        assert_eq!(
            SavedTable::original(&iface, 2, current.clone()),
            (vec![1, 1, 0, 0], Some(pid))
        );
        // A daemon still running will put its own back.
        SavedTable {
            pid: std::process::id(),
            context: 0,
            table: vec![3, 2, 1, 0],
            rules: Vec::new(),
        }
        .write(&iface)
        .unwrap();
        assert_eq!(
            SavedTable::original(&iface, 0, current.clone()),
            (current.clone(), None)
        );
        // A file of an rsspp before ntuple rules: none to delete.
        std::fs::write(SavedTable::path(&iface), "pid=12\ntable=1,0\n").unwrap();
        assert_eq!(SavedTable::read(&iface).map(|s| s.rules), Some(Vec::new()));
        // A file that does not parse is no table.
        std::fs::write(SavedTable::path(&iface), "pid=12\ntable=1,x\n").unwrap();
        assert_eq!(SavedTable::read(&iface), None);
        std::fs::write(SavedTable::path(&iface), "pid=12\ntable=1,0\nrules=4,y\n").unwrap();
        assert_eq!(SavedTable::read(&iface), None);
        SavedTable::remove(&iface);
        assert!(!SavedTable::path(&iface).exists());
    }

    #[test]
    fn the_state_file_reads_back() {
        let st = State {
            iface: "eth0".into(),
            ifindex: 3,
            prog_id: 42,
            program: "xdp_rsspp_steer".into(),
            steering: "software".into(),
            attach: "native".into(),
            reta_size: 128,
            since: 1_700_000_000,
            pid: 1234,
            pinned: Some(PathBuf::from("/sys/fs/bpf/rsspp/eth0/link")),
        };
        assert_eq!(State::parse(&st.to_text()), st);
        let unpinned = State { pinned: None, ..st };
        assert_eq!(State::parse(&unpinned.to_text()), unpinned);
    }

    #[test]
    fn a_missing_interface_is_seen_as_deleted() {
        let w = Watch::new(u32::MAX - 7).unwrap();
        assert_eq!(w.check(), Some(Loss::Deleted));
        assert_eq!(Loss::Down.to_string(), "went down");
    }

    #[test]
    fn the_loopback_is_up() {
        let w = Watch::new(ifindex_of("lo").unwrap()).unwrap();
        assert_eq!(w.check(), None);
    }
}
