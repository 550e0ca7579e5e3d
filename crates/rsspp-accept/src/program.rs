//! The sk_reuseport program (`src/bpf/select.bpf.c`): loaded through its
//! skeleton with either a table of its own (written here) or the table and
//! key maps of the `rsspp run` daemon steering the interface in software
//! mode, found through the XDP program attached to it.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{libbpf_sys, MapCore, MapFlags, MapHandle};
use rsspp_core::{IndirectionTable, RssKey, Toeplitz};

use crate::error::AcceptError;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/select.skel.rs"));
}
use skel::SelectSkelBuilder;

/// Most buckets a table of the library's own may have.
pub const MAX_BUCKETS: usize = 1 << 16;

/// Where the program's bucket → CPU table comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableSource {
    /// A table the library owns and writes: `size` buckets (a power of
    /// two) with Toeplitz `key`, spread equally over the workers' CPUs at
    /// the start and moved by the library's controller.
    Own {
        /// Buckets.
        size: usize,
        /// The Toeplitz key.
        key: RssKey,
    },
    /// The table and key of the `rsspp run` daemon steering this interface
    /// in software mode (its `rsspp_reta` and `rsspp_key` maps, shared:
    /// every entry the daemon writes is the one this program reads).
    Daemon {
        /// The interface `rsspp run --iface` steers.
        iface: String,
    },
}

/// How the program placed connections so far, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SelectCounts {
    /// Put on the listener of their bucket's CPU.
    pub table: u64,
    /// Not IPv4 TCP: left to the kernel's hash.
    pub not_ipv4: u64,
    /// Their bucket's CPU has no worker: left to the kernel's hash.
    pub no_worker: u64,
    /// The selection failed: left to the kernel's hash.
    pub failed: u64,
}

/// The loaded program and the maps the library reads and writes.
pub struct Selector {
    prog: OwnedFd,
    table: MapHandle,
    counters: MapHandle,
    buckets: usize,
    owned: bool,
    key: Option<Toeplitz>,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Selector")
            .field("buckets", &self.buckets)
            .field("owned", &self.owned)
            .finish_non_exhaustive()
    }
}

fn bpf(what: &'static str) -> impl FnOnce(libbpf_rs::Error) -> AcceptError {
    move |source| AcceptError::Bpf { what, source }
}

/// The daemon's table and key maps on `iface`: (table, key, table size).
fn daemon_maps(iface: &str) -> Result<(OwnedFd, OwnedFd, usize), AcceptError> {
    let missing = |detail: String| AcceptError::NoDaemon {
        iface: iface.to_string(),
        detail,
    };
    let index =
        crate::sys::ifindex(iface).ok_or_else(|| missing(format!("no interface {iface}")))?;
    let mut prog_id = 0u32;
    // SAFETY: a u32 out-parameter; flags 0: the program of whichever mode.
    let ret = unsafe { libbpf_sys::bpf_xdp_query_id(index as i32, 0, &mut prog_id) };
    if ret < 0 || prog_id == 0 {
        return Err(missing("no XDP program attached".into()));
    }
    // SAFETY: plain lookup by id; the result is checked.
    let prog = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(prog_id) };
    if prog < 0 {
        return Err(AcceptError::last_os(format!(
            "opening XDP program {prog_id} of {iface}"
        )));
    }
    // SAFETY: a fresh fd we own.
    let prog = unsafe { OwnedFd::from_raw_fd(prog) };
    let mut ids = [0u32; 64];
    // SAFETY: zeroed is a valid bpf_prog_info.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    info.nr_map_ids = ids.len() as u32;
    info.map_ids = ids.as_mut_ptr() as u64;
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: the info struct and its length; map_ids points at `ids`,
    // of nr_map_ids entries.
    if unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) } < 0 {
        return Err(AcceptError::last_os(format!(
            "reading XDP program {prog_id} of {iface}"
        )));
    }
    let (mut table, mut key) = (None, None);
    for &id in &ids[..(info.nr_map_ids as usize).min(ids.len())] {
        // SAFETY: plain lookup by id; checked.
        let fd = unsafe { libbpf_sys::bpf_map_get_fd_by_id(id) };
        if fd < 0 {
            continue;
        }
        // SAFETY: a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: zeroed is a valid bpf_map_info.
        let mut m: libbpf_sys::bpf_map_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_map_info>() as u32;
        // SAFETY: the info struct and its length.
        if unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut m, &mut len) } < 0 {
            continue;
        }
        let name: Vec<u8> = m
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        match name.as_slice() {
            b"rsspp_reta" => table = Some((fd, m.max_entries as usize)),
            b"rsspp_key" => key = Some(fd),
            _ => {}
        }
    }
    match (table, key) {
        (Some((table, size)), Some(key)) if size.is_power_of_two() && size > 1 => {
            Ok((table, key, size))
        }
        _ => Err(missing(format!(
            "XDP program {prog_id} has no rsspp_reta/rsspp_key maps: not rsspp's steering program (software mode)"
        ))),
    }
}

impl Selector {
    /// Loads the program for listeners `socks` (in worker order; worker
    /// `i` runs on `cpus[i]`), with the table from `source`. An own table
    /// starts equal over `cpus`.
    pub fn load(
        source: &TableSource,
        cpus: &[usize],
        socks: &[RawFd],
    ) -> Result<Self, AcceptError> {
        route_libbpf_logs();
        let possible = libbpf_rs::num_possible_cpus().map_err(bpf("counting the CPUs"))?;
        let daemon = match source {
            TableSource::Daemon { iface } => Some(daemon_maps(iface)?),
            TableSource::Own { size, .. } => {
                if !size.is_power_of_two() || *size < 2 || *size > MAX_BUCKETS {
                    return Err(AcceptError::Config(format!(
                        "the table size must be a power of two from 2 to {MAX_BUCKETS}, not {size}"
                    )));
                }
                None
            }
        };
        let buckets = match (source, &daemon) {
            (_, Some((_, _, size))) => *size,
            (TableSource::Own { size, .. }, None) => *size,
            (TableSource::Daemon { .. }, None) => unreachable!("daemon maps found above"),
        };
        // The skeleton lives only through this function: the program's fd
        // and the map handles kept below hold the program and its maps.
        let mut storage = MaybeUninit::uninit();
        let mut open = SelectSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("opening the sk_reuseport program"))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| AcceptError::Config("the program has no .rodata".into()))?;
        rodata.bucket_mask = (buckets - 1) as u32;
        open.maps
            .rsspp_reta
            .set_max_entries(buckets as u32)
            .map_err(bpf("sizing the table"))?;
        open.maps
            .accept_workers
            .set_max_entries(possible as u32)
            .map_err(bpf("sizing the CPU map"))?;
        open.maps
            .accept_socks
            .set_max_entries(socks.len().max(1) as u32)
            .map_err(bpf("sizing the socket array"))?;
        if let Some((table, key, _)) = &daemon {
            open.maps
                .rsspp_reta
                .reuse_fd(table.as_fd())
                .map_err(bpf("sharing the daemon's table map"))?;
            open.maps
                .rsspp_key
                .reuse_fd(key.as_fd())
                .map_err(bpf("sharing the daemon's key map"))?;
        }
        let skel = open.load().map_err(|source| {
            if source.kind() == libbpf_rs::ErrorKind::PermissionDenied {
                AcceptError::NoPrivileges
            } else {
                AcceptError::Bpf {
                    what: "loading the sk_reuseport program",
                    source,
                }
            }
        })?;
        let mut key_hasher = None;
        if let TableSource::Own { key, .. } = source {
            let t = Toeplitz::new(key.clone());
            skel.maps
                .rsspp_key
                .update(&0u32.to_ne_bytes(), &t.table_ne_bytes(), MapFlags::ANY)
                .map_err(bpf("writing the key table"))?;
            key_hasher = Some(t);
        }
        for (i, &cpu) in cpus.iter().enumerate() {
            if cpu >= possible {
                return Err(AcceptError::Config(format!(
                    "CPU {cpu} is not a possible CPU (0-{})",
                    possible - 1
                )));
            }
            skel.maps
                .accept_workers
                .update(
                    &(cpu as u32).to_ne_bytes(),
                    &(i as u32 + 1).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .map_err(bpf("writing the CPU map"))?;
        }
        for (i, &fd) in socks.iter().enumerate() {
            skel.maps
                .accept_socks
                .update(
                    &(i as u32).to_ne_bytes(),
                    &(fd as u64).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .map_err(bpf("adding a listener to the socket array"))?;
        }
        let prog = skel
            .progs
            .rsspp_select
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| AcceptError::Os {
                what: "duplicating the program fd".into(),
                source,
            })?;
        let table = MapHandle::try_from(&skel.maps.rsspp_reta).map_err(bpf("taking the table"))?;
        let counters =
            MapHandle::try_from(&skel.maps.accept_counters).map_err(bpf("taking the counters"))?;
        let selector = Selector {
            prog,
            table,
            counters,
            buckets,
            owned: daemon.is_none(),
            key: key_hasher,
        };
        drop(skel);
        if selector.owned {
            let cores: Vec<usize> = cpus.to_vec();
            let equal = IndirectionTable::equal_over(buckets, &cores).map_err(|e| {
                AcceptError::Config(format!("an equal table over the workers' CPUs: {e}"))
            })?;
            selector.write_entries(
                &equal
                    .entries()
                    .iter()
                    .enumerate()
                    .map(|(b, &c)| (b, c))
                    .collect::<Vec<_>>(),
            )?;
        }
        Ok(selector)
    }

    /// The program, for `SO_ATTACH_REUSEPORT_EBPF`.
    pub fn prog_fd(&self) -> RawFd {
        self.prog.as_raw_fd()
    }

    /// Buckets in the table.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// Whether the table is the library's own (false: the daemon's).
    pub fn owns_table(&self) -> bool {
        self.owned
    }

    /// The Toeplitz hash of an own table's key (None with the daemon's).
    pub fn hasher(&self) -> Option<&Toeplitz> {
        self.key.as_ref()
    }

    /// The table as the program reads it now: bucket → CPU.
    pub fn table(&self) -> Result<Vec<usize>, AcceptError> {
        (0..self.buckets)
            .map(|b| {
                let v = self
                    .table
                    .lookup(&(b as u32).to_ne_bytes(), MapFlags::ANY)
                    .map_err(bpf("reading the table"))?
                    .unwrap_or_default();
                let raw = u32::from_ne_bytes(v[..4].try_into().unwrap_or([0; 4]));
                Ok((raw & 0xffff) as usize)
            })
            .collect()
    }

    /// Sets `(bucket, cpu)` entries of an own table.
    pub fn write_entries(&self, entries: &[(usize, usize)]) -> Result<(), AcceptError> {
        if !self.owned {
            return Err(AcceptError::Config(
                "the table is the daemon's: its rebalancer moves buckets".into(),
            ));
        }
        for &(b, cpu) in entries {
            self.table
                .update(
                    &(b as u32).to_ne_bytes(),
                    &(cpu as u32).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .map_err(bpf("writing the table"))?;
        }
        Ok(())
    }

    /// How the program placed connections so far.
    pub fn counts(&self) -> Result<SelectCounts, AcceptError> {
        let read = |i: u32| -> Result<u64, AcceptError> {
            let per_cpu = self
                .counters
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .map_err(bpf("reading the counters"))?
                .unwrap_or_default();
            Ok(per_cpu
                .iter()
                .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8])))
                .sum())
        };
        Ok(SelectCounts {
            table: read(0)?,
            not_ipv4: read(1)?,
            no_worker: read(2)?,
            failed: read(3)?,
        })
    }
}

/// libbpf's own lines go to the log (debug): the errors that matter come
/// back as [`AcceptError`]s, which say it in one line.
fn route_libbpf_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        fn log(level: libbpf_rs::PrintLevel, message: String) {
            tracing::debug!(target: "libbpf", ?level, "{}", message.trim_end());
        }
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, log)));
    });
}
