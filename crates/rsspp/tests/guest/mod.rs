//! A QEMU guest with a multi-queue virtio-net NIC whose RSS indirection
//! table is writable (`-device virtio-net-pci,mq=on,rss=on`), for the tests
//! that need such a NIC: shell commands run in the guest, their output comes
//! back from the serial console.
//!
//! ```ignore
//! mod guest;
//! let Some(env) = guest::GuestEnv::find_or_skip() else { return };
//! let out = guest::run(&env, &guest::GuestSpec::new("step table ethtool -x eth0\n")).unwrap();
//! assert_eq!(out.step("table").status, 0);
//! ```
//!
//! The guest boots a Debian kernel (fetched once by `scripts/guest-kernel`
//! into `target/guest-kernel`) with an initramfs built here: busybox, the
//! virtio modules, ethtool, and `rsspp` (plus any binary the spec adds, each
//! with the shared libraries `ldd` lists). `/init` loads the modules, brings
//! `eth0` up with `queues` combined channels, runs the script, and powers
//! off. In the script, `step NAME CMD ARGS…` runs a command between console
//! markers so that [`GuestOutput::step`] returns its output and exit status;
//! `$QUEUES` is the channel count.
//!
//! The NIC's backend is a multi-queue tap device that QEMU creates in a
//! network namespace made for the guest (deleted afterwards), which needs
//! root. [`Guest::netns`] and [`Guest::tap`] name them, so that a test can
//! inject traffic from the host side while the guest runs
//! ([`Guest::boot`], [`Guest::wait_for`], [`Guest::host_tap_up`]).
//!
//! KVM is used where it can run a stock kernel (a CPU with VMX or SVM); where
//! it cannot (no /dev/kvm, or this machine class's nested "PVM" KVM, which
//! only runs guest kernels built for it), QEMU emulates the CPU (TCG): the
//! same virtio-net device, a slower boot (about 15 s instead of 2).

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

mod cpio;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cpio::Cpio;

const BEGIN: &str = "@@rsspp-begin ";
const END: &str = "@@rsspp-end ";
/// Printed by `/init` once `eth0` is up, before the script.
pub const READY: &str = "@@rsspp-ready@@";
const DONE: &str = "@@rsspp-done@@";
const SETUP_FAILED: &str = "@@rsspp-setup-failed: ";
/// The tap device's name inside the guest's network namespace.
const TAP: &str = "rsspp-tap0";
/// The second NIC's tap ([`GuestSpec::out_nic`]).
const TAP_OUT: &str = "rsspp-tap1";
/// The NICs' MAC addresses (`eth0`, `eth1`).
pub const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const MAC_OUT: &str = "52:54:00:12:34:57";

/// Why a guest run failed.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The initramfs or the namespace could not be prepared.
    #[error("preparing the guest: {0}")]
    Prepare(String),
    /// QEMU did not start.
    #[error("starting {qemu}: {source}")]
    Spawn {
        /// The QEMU binary.
        qemu: String,
        /// Why.
        source: std::io::Error,
    },
    /// `/init` could not load the modules or set up `eth0`.
    #[error("guest setup failed: {reason}\n--- console ---\n{console}")]
    Setup {
        /// What `/init` reported.
        reason: String,
        /// The console output.
        console: String,
    },
    /// The guest did not finish (or show a marker) within the spec's timeout.
    #[error("guest still running after {after:?} (killed); waiting for {waiting_for:?}\n--- console ---\n{console}\n--- qemu stderr ---\n{stderr}")]
    Timeout {
        /// The timeout.
        after: Duration,
        /// The marker awaited.
        waiting_for: String,
        /// The console output.
        console: String,
        /// QEMU's own messages.
        stderr: String,
    },
    /// QEMU exited before the script's end marker.
    #[error("qemu exited ({status}) before {waiting_for:?}\n--- console ---\n{console}\n--- qemu stderr ---\n{stderr}")]
    Exited {
        /// QEMU's exit status.
        status: String,
        /// The marker awaited.
        waiting_for: String,
        /// The console output.
        console: String,
        /// QEMU's own messages.
        stderr: String,
    },
}

fn prepare<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> GuestError {
    move |e| GuestError::Prepare(format!("{what}: {e}"))
}

/// How QEMU runs the guest's CPUs.
#[derive(Debug, Clone)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// Emulation, and why KVM is not used.
    Tcg(String),
}

/// What booting a guest needs on this machine.
#[derive(Debug, Clone)]
pub struct GuestEnv {
    qemu: PathBuf,
    kernel: PathBuf,
    busybox: PathBuf,
    ethtool: PathBuf,
    /// How the CPUs run.
    pub accel: Accel,
}

/// `name` in PATH or the sbin directories (which a non-root PATH may lack).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn kvm_usable() -> Result<(), String> {
    if std::env::var("RSSPP_GUEST_ACCEL").as_deref() == Ok("tcg") {
        return Err("RSSPP_GUEST_ACCEL=tcg".into());
    }
    if let Err(e) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Err(format!("/dev/kvm: {e}"));
    }
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let hw = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
    if !hw {
        return Err(
            "/dev/kvm exists but the CPU has no VMX/SVM: this KVM (e.g. the nested \
                    PVM of this machine class) only runs guest kernels built for it"
                .into(),
        );
    }
    Ok(())
}

/// The directory the kernel is cached in: `<target>/guest-kernel`.
fn kernel_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .join("guest-kernel")
}

/// The guest kernel directory (vmlinuz, modules/, modules.load): the one
/// named by `RSSPP_GUEST_KERNEL`, or the cached one, fetched on first use.
fn guest_kernel() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("RSSPP_GUEST_KERNEL") {
        return Ok(PathBuf::from(dir));
    }
    static FETCH: Mutex<()> = Mutex::new(());
    let _one_at_a_time = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let cache = kernel_cache();
    let current = cache.join("current");
    if current.join("ready").exists() {
        return Ok(current);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/guest-kernel");
    let out = Command::new(&script)
        .arg(&cache)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "cannot fetch the guest kernel ({} {}): {}",
            script.display(),
            cache.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(current)
}

impl GuestEnv {
    /// What a guest needs, or why this machine cannot boot one (QEMU
    /// missing): the test should print that and return. Panics, failing the
    /// test, when it is not root (the tap device needs it; CI runs as root)
    /// or when the guest kernel cannot be fetched.
    pub fn find() -> Result<Self, String> {
        let qemu = find_program("qemu-system-x86_64")
            .ok_or("qemu-system-x86_64 is not installed (Debian package qemu-system-x86)")?;
        assert_eq!(
            effective_uid(),
            Some(0),
            "the QEMU guest tests need root: QEMU creates a multi-queue tap device in a network namespace"
        );
        let busybox =
            find_program("busybox").expect("busybox not installed (Debian package busybox-static)");
        let ethtool =
            find_program("ethtool").expect("ethtool not installed (Debian package ethtool)");
        let kernel = guest_kernel().unwrap_or_else(|e| panic!("{e}"));
        let accel = match kvm_usable() {
            Ok(()) => Accel::Kvm,
            Err(why) => Accel::Tcg(why),
        };
        Ok(Self {
            qemu,
            kernel,
            busybox,
            ethtool,
            accel,
        })
    }

    /// [`find`](Self::find), printing why and returning `None` when QEMU is
    /// missing, and noting when the CPU is emulated.
    pub fn find_or_skip() -> Option<Self> {
        match Self::find() {
            Ok(env) => {
                if let Accel::Tcg(why) = &env.accel {
                    eprintln!("note: guest CPUs emulated (TCG), not KVM: {why}");
                }
                Some(env)
            }
            Err(why) => {
                eprintln!("skipping: {why}");
                None
            }
        }
    }
}

/// The effective user id, from `/proc/self/status` ("Uid: real effective …").
fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// What to run in a guest.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    /// virtio-net queue pairs; `/init` sets `ethtool -L eth0 combined` to it.
    pub queues: u32,
    /// Guest CPUs.
    pub cpus: u32,
    /// Guest memory.
    pub memory_mib: u32,
    /// Limit for the whole run, boot included (QEMU is killed after it).
    pub timeout: Duration,
    /// Shell commands (busybox sh) run after `eth0` is up.
    pub script: String,
    /// A second virtio-net NIC, `eth1`, of one queue pair, up (its tap is
    /// [`Guest::tap_out`]): where a bump in the wire sends, so that the
    /// host sees the guest's transmissions in the order it sent them.
    pub out_nic: bool,
    /// (host path, guest path, is a binary: strip it and add its libraries).
    files: Vec<(PathBuf, String, bool)>,
}

impl GuestSpec {
    /// 4 queues, 4 CPUs, 256 MiB, 120 s, `rsspp` at `/usr/bin/rsspp`.
    pub fn new(script: impl Into<String>) -> Self {
        Self {
            queues: 4,
            cpus: 4,
            memory_mib: 256,
            timeout: Duration::from_secs(120),
            script: script.into(),
            out_nic: false,
            files: vec![(
                env!("CARGO_BIN_EXE_rsspp").into(),
                "/usr/bin/rsspp".into(),
                true,
            )],
        }
    }

    /// Adds an executable (stripped, with the libraries `ldd` lists).
    pub fn binary(mut self, host: impl Into<PathBuf>, guest: &str) -> Self {
        self.files.push((host.into(), guest.into(), true));
        self
    }

    /// Adds a file as it is.
    pub fn file(mut self, host: impl Into<PathBuf>, guest: &str) -> Self {
        self.files.push((host.into(), guest.into(), false));
        self
    }
}

/// One `step NAME CMD…` of the script.
#[derive(Debug, Clone)]
pub struct Step {
    /// Its name.
    pub name: String,
    /// Standard output and error, `\r` removed.
    pub output: String,
    /// Exit status.
    pub status: i32,
}

/// What a guest printed.
#[derive(Debug, Clone)]
pub struct GuestOutput {
    /// The whole console output, `\r` removed.
    pub console: String,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl GuestOutput {
    fn parse(console: String) -> Self {
        let mut steps = Vec::new();
        let mut current: Option<(String, String)> = None;
        for line in console.lines() {
            if let Some(at) = line.find(BEGIN) {
                let name = line[at + BEGIN.len()..].trim_end_matches("@@");
                current = Some((name.to_string(), String::new()));
            } else if let Some(at) = line.find(END) {
                let rest = line[at + END.len()..].trim_end_matches("@@");
                if let (Some((name, output)), Some((_, rc))) =
                    (current.take(), rest.split_once(" rc="))
                {
                    steps.push(Step {
                        name,
                        output,
                        status: rc.parse().unwrap_or(-1),
                    });
                }
            } else if let Some((_, output)) = current.as_mut() {
                output.push_str(line);
                output.push('\n');
            }
        }
        Self { console, steps }
    }

    /// The step named `name`; panics with the console when it did not run.
    pub fn step(&self, name: &str) -> &Step {
        self.steps
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no step {name:?} in the guest's output:\n{}", self.console))
    }
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A network namespace deleted on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Shared libraries of `binary` as `ldd` lists them (none when static).
fn libraries(binary: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(binary).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .map(PathBuf::from)
        .collect()
}

/// `binary`'s bytes without debug information (a debug `rsspp` is ~70 MB,
/// ~8 MB stripped), or as it is when strip(1) is missing.
fn stripped(binary: &Path, scratch: &Path) -> Result<Vec<u8>, GuestError> {
    let out = scratch.join("stripped");
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(binary)
        .status()
        .is_ok_and(|s| s.success());
    let bytes = fs::read(if ok { &out } else { binary }).map_err(prepare(binary.display()))?;
    let _ = fs::remove_file(&out);
    Ok(bytes)
}

fn init_script(queues: u32, out_nic: bool) -> String {
    let out_nic = if out_nic {
        r#"i=0
while [ ! -e /sys/class/net/eth1 ]; do
    i=$((i + 1))
    [ $i -gt 500 ] && fail "no eth1 10 s after loading virtio_net"
    usleep 20000
done
ip link set eth1 up || fail "ip link set eth1 up"
"#
    } else {
        ""
    };
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/bin:/usr/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
fail() {{ echo "{SETUP_FAILED}$*@@"; reboot -f; }}
for m in $(cat /lib/modules/modules.load); do
    insmod /lib/modules/$m || fail "insmod $m"
done
i=0
while [ ! -e /sys/class/net/eth0 ]; do
    i=$((i + 1))
    [ $i -gt 500 ] && fail "no eth0 10 s after loading virtio_net"
    usleep 20000
done
ip link set lo up
ip link set eth0 up || fail "ip link set eth0 up"
{out_nic}export QUEUES={queues}
if [ "$QUEUES" -gt 1 ]; then
    ethtool -L eth0 combined "$QUEUES" || fail "ethtool -L eth0 combined $QUEUES"
fi
echo "{READY}"
sh /rsspp/script.sh
echo "{DONE}"
reboot -f
"#
    )
}

fn step_function() -> String {
    format!(
        "step() {{\n    name=$1\n    shift\n    echo \"{BEGIN}$name@@\"\n    \"$@\" 2>&1\n    \
         echo \"{END}$name rc=$?@@\"\n}}\n"
    )
}

fn build_initramfs(
    env: &GuestEnv,
    spec: &GuestSpec,
    scratch: &Path,
) -> Result<Vec<u8>, GuestError> {
    let mut c = Cpio::default();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/etc",
        "/root",
        "/usr/bin",
        "/usr/sbin",
    ] {
        c.dir(d);
    }
    // The kernel opens /dev/console for init before devtmpfs is mounted.
    c.char_dev("/dev/console", 5, 1);
    c.file(
        "/etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
    );
    c.file("/etc/group", 0o644, b"root:x:0:\nnogroup:x:65534:\n");
    c.file(
        "/init",
        0o755,
        init_script(spec.queues, spec.out_nic).as_bytes(),
    );
    let script = format!("{}{}", step_function(), spec.script);
    c.file("/rsspp/script.sh", 0o644, script.as_bytes());

    let modules = env.kernel.join("modules");
    let order =
        fs::read_to_string(env.kernel.join("modules.load")).map_err(prepare("modules.load"))?;
    c.file("/lib/modules/modules.load", 0o644, order.as_bytes());
    for name in order.lines().filter(|l| !l.is_empty()) {
        let bytes = fs::read(modules.join(name)).map_err(prepare(name))?;
        c.file(&format!("/lib/modules/{name}"), 0o644, &bytes);
    }

    let mut binaries = vec![
        (env.busybox.clone(), "/bin/busybox".to_string(), true),
        (env.ethtool.clone(), "/usr/sbin/ethtool".to_string(), true),
    ];
    binaries.extend(spec.files.iter().cloned());
    let mut libs = std::collections::BTreeSet::new();
    for (host, guest, is_binary) in &binaries {
        if *is_binary {
            c.file(guest, 0o755, &stripped(host, scratch)?);
            libs.extend(libraries(host));
        } else {
            c.file(
                guest,
                0o644,
                &fs::read(host).map_err(prepare(host.display()))?,
            );
        }
    }
    for lib in libs {
        // Same path in the guest as on the host, where ld.so looks.
        let bytes = fs::read(&lib).map_err(prepare(lib.display()))?;
        c.file(&lib.to_string_lossy(), 0o755, &bytes);
    }
    Ok(c.finish())
}

fn ip(args: &[&str]) -> Result<(), GuestError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(prepare("ip"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(GuestError::Prepare(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn reader(mut from: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&buf[..n]).replace('\r', "");
            into.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&text);
        }
    })
}

/// A running guest.
pub struct Guest {
    child: Child,
    console: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
    timeout: Duration,
    netns: Netns,
    _scratch: TempDir,
}

impl Guest {
    /// Builds the initramfs and starts QEMU; the script runs as soon as the
    /// guest is up.
    pub fn boot(env: &GuestEnv, spec: &GuestSpec) -> Result<Self, GuestError> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let scratch = TempDir(Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("guest-{id}")));
        fs::create_dir_all(&scratch.0).map_err(prepare(scratch.0.display()))?;
        let initrd = scratch.0.join("initramfs.cpio");
        let image = build_initramfs(env, spec, &scratch.0)?;
        fs::write(&initrd, image).map_err(prepare(initrd.display()))?;

        let netns = Netns(format!("rsspp-guest-{id}"));
        ip(&["netns", "add", &netns.0])?;

        let (accel, cpu) = match env.accel {
            Accel::Kvm => ("kvm", "host"),
            Accel::Tcg(_) => ("tcg,thread=multi", "max"),
        };
        let q = spec.queues.max(1);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &netns.0])
            .arg(&env.qemu)
            .args(["-accel", accel, "-cpu", cpu])
            .args([
                "-m",
                &spec.memory_mib.to_string(),
                "-smp",
                &spec.cpus.to_string(),
            ])
            .args([
                "-nodefaults",
                "-display",
                "none",
                "-no-reboot",
                "-serial",
                "stdio",
            ])
            .arg("-kernel")
            .arg(env.kernel.join("vmlinuz"))
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", "console=ttyS0 quiet panic=-1"])
            .arg("-netdev")
            // vhost off: QEMU computes RSS itself when its eBPF steering
            // program cannot load, which vhost would bypass.
            .arg(format!(
                "tap,id=n0,ifname={TAP},script=no,downscript=no,queues={q},vhost=off"
            ))
            .arg("-device")
            // hash=on (the hash report): QEMU then steers in its own receive
            // path, into the virtqueues, rather than with an eBPF program in
            // the tap, whose queues would hold frames steered by an old
            // table for as long as QEMU takes to read them.
            .arg(format!(
                "virtio-net-pci,netdev=n0,mq=on,rss=on,hash=on,vectors={},mac={}",
                2 * q + 2,
                MAC.map(|b| format!("{b:02x}")).join(":")
            ));
        if spec.out_nic {
            cmd.arg("-netdev")
                .arg(format!(
                    "tap,id=n1,ifname={TAP_OUT},script=no,downscript=no,vhost=off"
                ))
                .arg("-device")
                .arg(format!("virtio-net-pci,netdev=n1,mac={MAC_OUT}"));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| GuestError::Spawn {
            qemu: env.qemu.display().to_string(),
            source,
        })?;
        let console = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            reader(child.stdout.take().expect("piped"), console.clone()),
            reader(child.stderr.take().expect("piped"), stderr.clone()),
        ];
        Ok(Self {
            child,
            console,
            stderr,
            readers,
            started: Instant::now(),
            timeout: spec.timeout,
            netns,
            _scratch: scratch,
        })
    }

    /// The network namespace holding the tap device.
    pub fn netns(&self) -> &str {
        &self.netns.0
    }

    /// The tap device (the host side of the guest's `eth0`).
    pub fn tap(&self) -> &str {
        TAP
    }

    /// The second NIC's tap (the host side of `eth1`; see
    /// [`GuestSpec::out_nic`]).
    pub fn tap_out(&self) -> &str {
        TAP_OUT
    }

    /// The console output so far.
    pub fn console(&self) -> String {
        self.console
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until the console shows `needle` (e.g. [`READY`] or a line the
    /// script prints), within the spec's timeout.
    pub fn wait_for(&mut self, needle: &str) -> Result<(), GuestError> {
        loop {
            let console = self.console();
            if console.contains(needle) {
                return Ok(());
            }
            if let Some(at) = console.find(SETUP_FAILED) {
                let reason = console[at + SETUP_FAILED.len()..]
                    .lines()
                    .next()
                    .unwrap_or("");
                return Err(GuestError::Setup {
                    reason: reason.trim_end_matches("@@").to_string(),
                    console,
                });
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.drain();
                if self.console().contains(needle) {
                    return Ok(());
                }
                return Err(GuestError::Exited {
                    status: status.to_string(),
                    waiting_for: needle.to_string(),
                    console: self.console(),
                    stderr: self.stderr(),
                });
            }
            if self.started.elapsed() > self.timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                self.drain();
                return Err(GuestError::Timeout {
                    after: self.timeout,
                    waiting_for: needle.to_string(),
                    console: self.console(),
                    stderr: self.stderr(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Brings the host side of the tap up (once QEMU has created it), to
    /// send traffic into the guest from the namespace.
    pub fn host_tap_up(&mut self) -> Result<(), GuestError> {
        self.tap_up(TAP)
    }

    /// The same for the second NIC's tap.
    pub fn host_tap_out_up(&mut self) -> Result<(), GuestError> {
        self.tap_up(TAP_OUT)
    }

    fn tap_up(&mut self, tap: &str) -> Result<(), GuestError> {
        for _ in 0..200 {
            if ip(&["-n", &self.netns.0, "link", "set", tap, "up"]).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ip(&["-n", &self.netns.0, "link", "set", tap, "up"])
    }

    /// Waits for the script to end and the guest to power off; the output.
    pub fn finish(mut self) -> Result<GuestOutput, GuestError> {
        self.wait_for(DONE)?;
        // The guest reboots right after the marker; QEMU exits (-no-reboot).
        while self.started.elapsed() <= self.timeout {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.drain();
        Ok(GuestOutput::parse(self.console()))
    }

    /// Joins the readers once QEMU is gone, so that all output is in.
    fn drain(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // QEMU first: the namespace (field drop) goes after it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Boots a guest, runs `spec.script`, and returns the console output.
pub fn run(env: &GuestEnv, spec: &GuestSpec) -> Result<GuestOutput, GuestError> {
    Guest::boot(env, spec)?.finish()
}
