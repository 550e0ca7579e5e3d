//! Loading: the BPF object opened through its skeleton, its settings
//! written to its read-only globals (`.rodata`, frozen at load: the
//! verifier and the JIT see constants), its maps sized, the one program
//! asked for loaded, and its maps filled (the Toeplitz key table, the
//! CPUMAP, an `equal` indirection table).

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{ErrorKind, MapHandle, MapType, ProgramType};
use rsspp_core::flow::MAX_HASH_INPUT;
use rsspp_core::Toeplitz;

use super::{
    AttachMode, Kind, Maps, Program, Xdp, XdpError, XdpErrorKind, XdpOptions, FLOW_COUNT_ENTRIES,
    HANDOFF_GUARD, MAX_CPUMAP_QUEUE, MAX_OVERRIDE_SLOTS, MAX_RETA_SIZE, MAX_STEERING_CPU,
};
use crate::cpu::CpuList;
use crate::skel::{types, RssppSkelBuilder};

// The key table's layout comes from the C code (`struct key_table`): one
// row of 256 words per input byte, as many rows as the core crate's
// longest hash input.
const _: () = assert!(std::mem::size_of::<types::key_table>() == MAX_HASH_INPUT * 256 * 4);

impl Xdp {
    /// Loads `program` for `opts.iface` and fills its maps; attaches
    /// nothing (see [`Xdp::attach`]).
    pub fn load(opts: &XdpOptions, program: Program) -> Result<Xdp, XdpError> {
        route_libbpf_logs();
        let iface = opts.iface.clone();
        let refuse = |kind| Err(XdpError::new(&iface, kind));
        if !opts.reta_size.is_power_of_two() || opts.reta_size > MAX_RETA_SIZE {
            return refuse(XdpErrorKind::TableSize(opts.reta_size));
        }
        if opts.override_slots > MAX_OVERRIDE_SLOTS {
            return refuse(XdpErrorKind::OverrideSlots(opts.override_slots));
        }
        let (kind, steer) = match program {
            Program::Steer {
                cpus,
                cpumap_queue,
                ordered_moves,
            } => {
                if cpus.is_empty() {
                    return refuse(XdpErrorKind::NoCpus);
                }
                if cpumap_queue == 0 || cpumap_queue > MAX_CPUMAP_QUEUE {
                    return refuse(XdpErrorKind::QueueSize(cpumap_queue));
                }
                let online = CpuList::online().map_err(|e| XdpError::new(&iface, e.into()))?;
                if ordered_moves && opts.attach == AttachMode::Skb {
                    return refuse(XdpErrorKind::OrderedMovesNeedNative);
                }
                for &cpu in cpus.iter().chain([&opts.default_cpu]) {
                    if cpu > MAX_STEERING_CPU {
                        return refuse(XdpErrorKind::CpuTooHigh(cpu));
                    }
                    if online.cpus().binary_search(&cpu).is_err() {
                        return refuse(XdpErrorKind::CpuOffline {
                            cpu,
                            online: online.to_string(),
                        });
                    }
                }
                (Kind::Steer, Some((cpus, cpumap_queue, ordered_moves)))
            }
            Program::Count { rx_hash: false } => (Kind::Count, None),
            Program::Count { rx_hash: true } => {
                if opts.attach == AttachMode::Skb {
                    return refuse(XdpErrorKind::RxHashNeedsNative);
                }
                (Kind::CountRxHash, None)
            }
        };
        let ifindex = ifindex_of(&iface)?;
        let possible_cpus = libbpf_rs::num_possible_cpus()
            .map_err(|source| XdpError::bpf(&iface, "counting the possible CPUs", source))?;
        let settings = types::rodata {
            bucket_mask: opts.reta_size as u32 - 1,
            default_cpu: opts.default_cpu,
            use_rx_hash: u32::from(kind == Kind::CountRxHash),
            handoff_guard_ns: HANDOFF_GUARD.as_nanos() as u32,
            override_slots: opts.override_slots.max(1) as u32,
        };
        // Counting programs count overridden flows too (hardware mode's
        // ntuple rules steer them).
        let override_slots = opts.override_slots;
        let (prog, dequeue, maps) = load_object(
            &iface,
            ifindex,
            kind,
            settings,
            opts.reta_size,
            possible_cpus,
        )?;

        let mut targets: Vec<u32> = steer.as_ref().map_or(Vec::new(), |(c, _, _)| c.clone());
        if kind == Kind::Steer {
            targets.push(opts.default_cpu);
        }
        targets.sort_unstable();
        targets.dedup();
        let mut xdp = Xdp {
            iface,
            ifindex,
            mode: opts.attach,
            force: opts.force,
            kind,
            reta_size: opts.reta_size,
            possible_cpus,
            override_slots,
            targets,
            prog,
            ordered_moves: steer.as_ref().is_some_and(|&(_, _, o)| o),
            maps,
            drops_link: None,
            attached: None,
        };
        xdp.update(
            &xdp.maps.key,
            0,
            &Toeplitz::new(opts.key.clone()).table_ne_bytes(),
            "writing the key table",
        )?;
        if let Some((cpus, queue, ordered)) = steer {
            if let Some(cpumap) = &xdp.maps.cpumap {
                let dequeue = dequeue.as_ref().filter(|_| ordered);
                xdp.fill_cpumap(cpumap, queue, dequeue)?;
            }
            xdp.count_cpumap_drops()?;
            let table: Vec<u32> = (0..opts.reta_size).map(|i| cpus[i % cpus.len()]).collect();
            xdp.write_table(&table)?;
        }
        Ok(xdp)
    }

    /// One CPUMAP entry per steering CPU, with `dequeue` (the handoffs'
    /// CPUMAP program) run on the remote CPU as it dequeues, or none (the
    /// bpf_prog fd of `struct bpf_cpumap_val` stays 0).
    fn fill_cpumap(
        &self,
        cpumap: &MapHandle,
        queue: u32,
        dequeue: Option<&OwnedFd>,
    ) -> Result<(), XdpError> {
        let mut value = [0u8; 8];
        value[..4].copy_from_slice(&queue.to_ne_bytes());
        if let Some(fd) = dequeue {
            value[4..].copy_from_slice(&fd.as_raw_fd().to_ne_bytes());
        }
        for &cpu in &self.targets {
            self.update(cpumap, cpu, &value, "adding a CPU to the CPUMAP")?;
        }
        Ok(())
    }

    /// Attaches the drop counter to the `xdp:xdp_cpumap_enqueue`
    /// tracepoint, told the id of our CPUMAP (the tracepoint fires for
    /// every CPUMAP on the machine).
    fn count_cpumap_drops(&mut self) -> Result<(), XdpError> {
        let (Some(id_map), Some(prog)) = (&self.maps.cpumap_id, &self.maps.drops_prog) else {
            return Ok(());
        };
        let id = self.cpumap_id()?.unwrap_or(0);
        self.update(id_map, 0, &id.to_ne_bytes(), "writing the CPUMAP's id")?;
        let name = CString::new("xdp_cpumap_enqueue").expect("no NUL");
        // SAFETY: a valid program fd and NUL-terminated name; a
        // non-negative result is a new link fd that we own.
        let fd = unsafe { libbpf_sys::bpf_raw_tracepoint_open(name.as_ptr(), prog.as_raw_fd()) };
        if fd < 0 {
            return Err(self.os_error(
                "attaching the CPUMAP drop counter to xdp:xdp_cpumap_enqueue",
                -fd,
            ));
        }
        // SAFETY: `fd` was just returned to us and is owned by nobody else.
        self.drops_link = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(())
    }
}

/// Sends libbpf's own messages to the `tracing` logs (debug level): the
/// errors that matter come back as [`XdpError`]s, which say what to do; its
/// raw lines on stderr would only repeat them in libbpf's words.
fn route_libbpf_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        fn log(level: libbpf_rs::PrintLevel, message: String) {
            tracing::debug!(target: "libbpf", ?level, "{}", message.trim_end());
        }
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, log)));
    });
}

/// The interface's index in the calling thread's network namespace.
fn ifindex_of(iface: &str) -> Result<u32, XdpError> {
    let unknown = || XdpError::new(iface, XdpErrorKind::UnknownInterface);
    let name = CString::new(iface).map_err(|_| unknown())?;
    // SAFETY: `name` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(unknown()),
        index => Ok(index),
    }
}

/// Opens the object, sets its read-only globals to `settings`, loads the
/// program `kind` needs (steering: with the handoffs' CPUMAP program and
/// the drop counter), and returns its fd, the CPUMAP program's and the map
/// handles; libbpf's object is closed on return.
fn load_object(
    iface: &str,
    ifindex: u32,
    kind: Kind,
    settings: types::rodata,
    reta_size: usize,
    possible_cpus: usize,
) -> Result<(OwnedFd, Option<OwnedFd>, Maps), XdpError> {
    let bpf = |what: &'static str| move |source| XdpError::bpf(iface, what, source);
    let mut storage = MaybeUninit::uninit();
    let mut open = RssppSkelBuilder::default()
        .open(&mut storage)
        .map_err(bpf("opening the BPF object"))?;
    // libbpf maps a skeleton's .rodata before load; it is frozen by load.
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .ok_or_else(|| XdpError::new(iface, XdpErrorKind::NoRodata))?;
    *rodata = settings;
    let sizing = bpf("sizing the maps");
    open.maps
        .rsspp_reta
        .set_max_entries(reta_size as u32)
        .map_err(&sizing)?;
    // One row of the table's size per CPU (see the C code).
    open.maps
        .rsspp_buckets
        .set_max_entries((reta_size * possible_cpus) as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_cpumap
        .set_max_entries(possible_cpus as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_cpus
        .set_max_entries(possible_cpus as u32)
        .map_err(&sizing)?;
    // The buckets' handoffs, then the override slots'.
    let slots = settings.override_slots as usize;
    open.maps
        .rsspp_handoff
        .set_max_entries((reta_size + slots) as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_bucket_flags
        .set_max_entries(reta_size as u32)
        .map_err(&sizing)?;
    // Twice the slots, and at least a few per CPU: an LRU map takes free
    // entries from per-CPU lists, and may evict before it is full.
    open.maps
        .rsspp_overrides
        .set_max_entries((2 * slots).max(64 * possible_cpus) as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_override_packets
        .set_max_entries((slots * possible_cpus) as u32)
        .map_err(&sizing)?;
    open.maps
        .rsspp_flow_packets
        .set_max_entries(FLOW_COUNT_ENTRIES)
        .map_err(&sizing)?;
    open.maps
        .rsspp_cpumap_drops
        .set_max_entries(possible_cpus as u32)
        .map_err(&sizing)?;
    if kind != Kind::Steer {
        // Only the steering programs use them.
        for map in [
            &mut open.maps.rsspp_reta,
            &mut open.maps.rsspp_cpumap,
            &mut open.maps.rsspp_handoff,
            &mut open.maps.rsspp_cpumap_drops,
            &mut open.maps.rsspp_cpumap_id,
        ] {
            map.set_autocreate(false).map_err(&sizing)?;
        }
    }
    open.progs.xdp_rsspp_steer.set_autoload(kind == Kind::Steer);
    open.progs
        .xdp_rsspp_dequeue
        .set_autoload(kind == Kind::Steer);
    open.progs
        .rsspp_cpumap_drops_tp
        .set_autoload(kind == Kind::Steer);
    open.progs.xdp_rsspp_count.set_autoload(kind == Kind::Count);
    open.progs
        .xdp_rsspp_rxh
        .set_autoload(kind == Kind::CountRxHash);
    if kind == Kind::CountRxHash {
        // The kfunc's driver implementation is resolved at load time, for
        // this device only.
        open.progs.xdp_rsspp_rxh.set_ifindex(ifindex);
        open.progs
            .xdp_rsspp_rxh
            .set_flags(libbpf_sys::BPF_F_XDP_DEV_BOUND_ONLY);
    }
    let skel = open
        .load()
        .map_err(|source| load_error(iface, kind, source))?;

    let handle = bpf("taking a map handle");
    let prog = match kind {
        Kind::Steer => &skel.progs.xdp_rsspp_steer,
        Kind::Count => &skel.progs.xdp_rsspp_count,
        Kind::CountRxHash => &skel.progs.xdp_rsspp_rxh,
    };
    let dup = |prog: &libbpf_rs::Program| {
        prog.as_fd().try_clone_to_owned().map_err(|source| {
            XdpError::new(
                iface,
                XdpErrorKind::Os {
                    what: "duplicating the program fd",
                    source,
                },
            )
        })
    };
    let prog = dup(prog)?;
    let steering = kind == Kind::Steer;
    let dequeue = steering
        .then(|| dup(&skel.progs.xdp_rsspp_dequeue))
        .transpose()?;
    let drops_prog = steering
        .then(|| dup(&skel.progs.rsspp_cpumap_drops_tp))
        .transpose()?;
    let steering_map = |map: &libbpf_rs::Map| -> Result<Option<MapHandle>, XdpError> {
        if steering {
            Ok(Some(MapHandle::try_from(map).map_err(&handle)?))
        } else {
            Ok(None)
        }
    };
    let maps = Maps {
        key: MapHandle::try_from(&skel.maps.rsspp_key).map_err(&handle)?,
        reta: steering_map(&skel.maps.rsspp_reta)?,
        cpumap: steering_map(&skel.maps.rsspp_cpumap)?,
        handoff: steering_map(&skel.maps.rsspp_handoff)?,
        cpumap_drops: steering_map(&skel.maps.rsspp_cpumap_drops)?,
        cpumap_id: steering_map(&skel.maps.rsspp_cpumap_id)?,
        bucket_flags: MapHandle::try_from(&skel.maps.rsspp_bucket_flags).map_err(&handle)?,
        overrides: MapHandle::try_from(&skel.maps.rsspp_overrides).map_err(&handle)?,
        override_packets: {
            let map = MapHandle::try_from(&skel.maps.rsspp_override_packets).map_err(&handle)?;
            let len = slots * possible_cpus;
            let rows = super::maps::Mapped::new(&map, len).map_err(|source| {
                XdpError::new(
                    iface,
                    XdpErrorKind::Os {
                        what: "mapping the override counters",
                        source,
                    },
                )
            })?;
            (map, rows)
        },
        flow_packets: MapHandle::try_from(&skel.maps.rsspp_flow_packets).map_err(&handle)?,
        drops_prog,
        buckets: {
            let map = MapHandle::try_from(&skel.maps.rsspp_buckets).map_err(&handle)?;
            let len = reta_size * possible_cpus;
            let rows = super::maps::Mapped::new(&map, len).map_err(|source| {
                XdpError::new(
                    iface,
                    XdpErrorKind::Os {
                        what: "mapping the bucket counters",
                        source,
                    },
                )
            })?;
            (map, rows)
        },
        cpus: MapHandle::try_from(&skel.maps.rsspp_cpus).map_err(&handle)?,
        counters: MapHandle::try_from(&skel.maps.rsspp_counters).map_err(&handle)?,
    };
    Ok((prog, dequeue, maps))
}

/// Names the cause of a failed load: privileges, a kernel without XDP or
/// CPUMAP, a device that cannot take a bound program.
fn load_error(iface: &str, kind: Kind, source: libbpf_rs::Error) -> XdpError {
    let what = "loading the XDP program";
    let kind = if source.kind() == ErrorKind::PermissionDenied {
        XdpErrorKind::Permission {
            what,
            source: io::Error::new(io::ErrorKind::PermissionDenied, source),
        }
    } else if !ProgramType::Xdp.is_supported().unwrap_or(true) {
        XdpErrorKind::Unsupported { feature: "XDP" }
    } else if kind == Kind::Steer && !MapType::Cpumap.is_supported().unwrap_or(true) {
        XdpErrorKind::Unsupported { feature: "CPUMAP" }
    } else if kind == Kind::CountRxHash {
        XdpErrorKind::RxHashUnsupported(source)
    } else {
        XdpErrorKind::Bpf { what, source }
    };
    XdpError::new(iface, kind)
}
