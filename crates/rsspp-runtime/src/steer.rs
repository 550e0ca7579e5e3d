//! The fanout program (`src/bpf/fanout.bpf.c`): loaded through its
//! skeleton, its Toeplitz key table written, and its per-bucket words
//! mapped into this process, where the controller reads the counts and
//! switches owners with a compare-and-swap. With per-flow overrides, the
//! words of the override slots follow the buckets' (word `buckets + s`),
//! and the controller writes the flagged buckets and the flows' slots.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapMut, OpenMapMut};
use rsspp_core::{RssKey, Toeplitz};

use crate::error::{Os, RuntimeError};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/fanout.skel.rs"));
}
use skel::FanoutSkelBuilder;

/// Bits of a word: the owner's fanout index above, the count below.
const OWNER_SHIFT: u32 = 48;
const COUNT_MASK: u64 = (1 << OWNER_SHIFT) - 1;

/// Most buckets the program's table may have.
pub const MAX_BUCKETS: usize = 1 << 16;

/// The loaded program and its per-bucket words.
#[derive(Debug)]
pub struct Steering {
    prog: OwnedFd,
    words: MappedArray,
    buckets: usize,
    /// Override slots (words after the buckets').
    slots: usize,
    /// A map of maps, written to wait for the program's runs in progress.
    barrier: MapHandle,
    /// The map written into it.
    barrier_inner: MapHandle,
    /// The maps of the overrides, when there are slots.
    overrides: Option<OverrideMaps>,
}

/// The programs' maps of per-flow overrides.
#[derive(Debug)]
struct OverrideMaps {
    /// Per bucket: nonzero when some of its flows have an override.
    flagged: MapHandle,
    /// A flow's hash input → its slot.
    flows: MapHandle,
}

/// A memory-mappable BPF array of `u64`s mapped into this process, shared
/// with the program: read and written atomically only.
#[derive(Debug)]
pub(crate) struct MappedArray {
    _map: MapHandle,
    ptr: *mut u64,
    len: usize,
    map_len: usize,
}

// SAFETY: the mapping is shared memory accessed only atomically.
unsafe impl Send for MappedArray {}
// SAFETY: as above.
unsafe impl Sync for MappedArray {}

impl MappedArray {
    /// Maps `map` (an array with `BPF_F_MMAPABLE` of `len` u64s).
    pub(crate) fn new(
        map: MapHandle,
        len: usize,
        what: &'static str,
    ) -> Result<Self, RuntimeError> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let map_len = (len * 8).div_ceil(page) * page;
        // SAFETY: a shared mapping of an mmapable array map's fd, of its
        // size rounded to pages; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RuntimeError::Os(Os {
                what,
                source: std::io::Error::last_os_error(),
            }));
        }
        Ok(Self {
            _map: map,
            ptr: ptr.cast(),
            len,
            map_len,
        })
    }

    /// Entry `i`.
    ///
    /// # Panics
    /// If `i` is past the array.
    pub(crate) fn get(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "entry {i} past {}", self.len);
        // SAFETY: inside the mapping, 8-byte aligned (page-aligned base);
        // the program updates it atomically too.
        unsafe { AtomicU64::from_ptr(self.ptr.add(i)) }
    }
}

impl Drop for MappedArray {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.map_len) };
    }
}

/// The maps of `src/bpf/words.h` in a loaded program.
pub(crate) struct WordMaps<'a, 'obj> {
    pub words: &'a MapMut<'obj>,
    pub flagged: &'a MapMut<'obj>,
    pub flows: &'a MapMut<'obj>,
    pub barrier: &'a MapMut<'obj>,
    pub barrier_inner: &'a MapMut<'obj>,
}

/// The maps of `src/bpf/words.h` of a loaded skeleton's `maps`.
macro_rules! word_maps {
    ($maps:expr) => {
        $crate::steer::WordMaps {
            words: &$maps.rsspp_words,
            flagged: &$maps.rsspp_flagged,
            flows: &$maps.rsspp_overrides,
            barrier: &$maps.rsspp_barrier,
            barrier_inner: &$maps.rsspp_barrier_inner,
        }
    };
}
pub(crate) use word_maps;

/// Writes `key`'s table into a loaded program's `rsspp_key` map
/// (`src/bpf/classify.h`).
pub(crate) fn write_key(map: &MapMut<'_>, key: &RssKey) -> Result<(), RuntimeError> {
    map.update(
        &0u32.to_ne_bytes(),
        &Toeplitz::new(key.clone()).table_ne_bytes(),
        MapFlags::ANY,
    )
    .map_err(|source| RuntimeError::Bpf {
        what: "writing the key table",
        source,
    })
}

/// Loading a program: a refusal for want of privileges is said so.
pub(crate) fn load_error(what: &'static str) -> impl Fn(libbpf_rs::Error) -> RuntimeError {
    move |source| {
        if source.kind() == libbpf_rs::ErrorKind::PermissionDenied {
            RuntimeError::NoPrivileges
        } else {
            RuntimeError::Bpf { what, source }
        }
    }
}

/// An fd of a loaded program of this process's own.
pub(crate) fn owned_prog_fd(prog: &impl AsFd) -> Result<OwnedFd, RuntimeError> {
    prog.as_fd().try_clone_to_owned().map_err(|source| {
        RuntimeError::Os(Os {
            what: "duplicating the program fd",
            source,
        })
    })
}

/// Sizes the maps of `src/bpf/words.h` in an opened program, before its
/// load: a word per bucket and per override slot, a flag per bucket, and
/// the override table.
pub(crate) fn size_words(
    words: &mut OpenMapMut<'_>,
    flagged: &mut OpenMapMut<'_>,
    flows: &mut OpenMapMut<'_>,
    buckets: usize,
    slots: usize,
) -> Result<(), RuntimeError> {
    let bpf = |what| move |source| RuntimeError::Bpf { what, source };
    words
        .set_max_entries((buckets + slots) as u32)
        .map_err(bpf("sizing the bucket words"))?;
    flagged
        .set_max_entries(buckets as u32)
        .map_err(bpf("sizing the flagged buckets"))?;
    // Room for both directions of every overridden flow, and to spare: the
    // LRU never evicts a live override.
    flows
        .set_max_entries((4 * slots).max(1) as u32)
        .map_err(bpf("sizing the override table"))?;
    Ok(())
}

/// A flow's Toeplitz input as the programs key it: addresses, then ports,
/// zero-filled.
pub type HashInput = [u8; rsspp_core::flow::MAX_HASH_INPUT];

impl Steering {
    /// Loads the program for a table of `buckets` (a power of two) with the
    /// Toeplitz `key`, `workers` workers and `slots` override slots (0:
    /// none; with some, the group has a second member per worker for the
    /// frames steered by an override); every word starts on fanout member
    /// 0 with a count of 0.
    pub fn load(
        buckets: usize,
        key: &RssKey,
        workers: usize,
        slots: usize,
    ) -> Result<Self, RuntimeError> {
        if !buckets.is_power_of_two() || buckets > MAX_BUCKETS {
            return Err(RuntimeError::Config(format!(
                "the table size must be a power of two up to {MAX_BUCKETS}, not {buckets}"
            )));
        }
        route_libbpf_logs();
        let bpf = |what| move |source| RuntimeError::Bpf { what, source };
        let mut storage = MaybeUninit::uninit();
        let mut open = FanoutSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("opening the fanout program"))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| RuntimeError::Config("the fanout program has no .rodata".into()))?;
        rodata.bucket_mask = (buckets - 1) as u32;
        rodata.workers = workers as u32;
        size_words(
            &mut open.maps.rsspp_words,
            &mut open.maps.rsspp_flagged,
            &mut open.maps.rsspp_overrides,
            buckets,
            slots,
        )?;
        let skel = open
            .load()
            .map_err(load_error("loading the fanout program"))?;
        write_key(&skel.maps.rsspp_key, key)?;
        let prog = owned_prog_fd(&skel.progs.rsspp_fanout)?;
        Self::with_words(prog, word_maps!(skel.maps), buckets, slots)
    }

    /// The steering of a loaded program (the fanout program or the afxdp
    /// backend's XDP program: the same words, `src/bpf/words.h`) for
    /// `buckets` buckets and `slots` override slots, its words mapped here.
    pub(crate) fn with_words(
        prog: OwnedFd,
        maps: WordMaps<'_, '_>,
        buckets: usize,
        slots: usize,
    ) -> Result<Self, RuntimeError> {
        let bpf = |what| move |source| RuntimeError::Bpf { what, source };
        let words_map = MapHandle::try_from(maps.words).map_err(bpf("taking the words map"))?;
        let overrides = if slots > 0 {
            Some(OverrideMaps {
                flagged: MapHandle::try_from(maps.flagged)
                    .map_err(bpf("taking the flagged buckets map"))?,
                flows: MapHandle::try_from(maps.flows).map_err(bpf("taking the override table"))?,
            })
        } else {
            None
        };
        Ok(Self {
            prog,
            words: MappedArray::new(words_map, buckets + slots, "mapping the bucket words")?,
            buckets,
            slots,
            barrier: MapHandle::try_from(maps.barrier).map_err(bpf("taking the barrier map"))?,
            barrier_inner: MapHandle::try_from(maps.barrier_inner)
                .map_err(bpf("taking the barrier map"))?,
            overrides,
        })
    }

    /// The program's fd, for `PACKET_FANOUT_DATA` (or the XDP attach).
    pub fn prog_fd(&self) -> RawFd {
        self.prog.as_raw_fd()
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// Override slots (0: no overrides).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The word index of override slot `slot`.
    pub fn slot_word(&self, slot: usize) -> usize {
        assert!(slot < self.slots, "slot {slot} past {}", self.slots);
        self.buckets + slot
    }

    fn word(&self, bucket: usize) -> &AtomicU64 {
        self.words.get(bucket)
    }

    /// Flags `bucket` as having overrides (the program looks its flows up)
    /// or not.
    pub fn set_flagged(&self, bucket: usize, flagged: bool) -> Result<(), RuntimeError> {
        let maps = self.override_maps()?;
        maps.flagged
            .update(
                &(bucket as u32).to_ne_bytes(),
                &u32::from(flagged).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|source| RuntimeError::Bpf {
                what: "flagging a bucket",
                source,
            })
    }

    /// Steers the flow of hash input `input` by override slot `slot` from
    /// now on (in a flagged bucket).
    pub fn insert_override(&self, input: &HashInput, slot: usize) -> Result<(), RuntimeError> {
        let maps = self.override_maps()?;
        maps.flows
            .update(input, &(slot as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| RuntimeError::Bpf {
                what: "writing a flow's override",
                source,
            })
    }

    /// Steers the flow of hash input `input` by its bucket again.
    pub fn delete_override(&self, input: &HashInput) -> Result<(), RuntimeError> {
        let maps = self.override_maps()?;
        match maps.flows.delete(input) {
            Ok(()) => Ok(()),
            // Not there (cannot happen: the table never fills).
            Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(RuntimeError::Bpf {
                what: "deleting a flow's override",
                source,
            }),
        }
    }

    /// Returns once every run of the program that began before the call
    /// has ended (a map-of-maps write waits for an RCU grace period, and
    /// the program runs inside an RCU read-side section): what it looked up
    /// before, it has counted by now.
    pub fn wait_for_programs(&self) -> Result<(), RuntimeError> {
        let fd = self.barrier_inner.as_fd().as_raw_fd() as u32;
        self.barrier
            .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| RuntimeError::Bpf {
                what: "waiting for the program's runs in progress",
                source,
            })
    }

    fn override_maps(&self) -> Result<&OverrideMaps, RuntimeError> {
        self.overrides
            .as_ref()
            .ok_or_else(|| RuntimeError::Config("the steering has no override slots".into()))
    }

    /// Packets of `bucket` (or of an override slot's word) steered so far.
    pub fn count(&self, bucket: usize) -> u64 {
        self.word(bucket).load(Ordering::Relaxed) & COUNT_MASK
    }

    /// The fanout member `bucket` goes to.
    pub fn owner(&self, bucket: usize) -> u16 {
        (self.word(bucket).load(Ordering::Relaxed) >> OWNER_SHIFT) as u16
    }

    /// Sends `bucket` to fanout member `member` from now on; returns the
    /// mark: how many of its packets were steered before the switch (all
    /// of them to the previous member).
    pub fn switch(&self, bucket: usize, member: u16) -> u64 {
        let word = self.word(bucket);
        let mut current = word.load(Ordering::Acquire);
        loop {
            let new = (u64::from(member) << OWNER_SHIFT) | (current & COUNT_MASK);
            match word.compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return current & COUNT_MASK,
                Err(now) => current = now,
            }
        }
    }
}

/// libbpf's own lines go to the log (debug): the errors that matter come
/// back as [`RuntimeError`]s, which say it in one line.
pub(crate) fn route_libbpf_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        fn log(level: libbpf_rs::PrintLevel, message: String) {
            tracing::debug!(target: "libbpf", ?level, "{}", message.trim_end());
        }
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, log)));
    });
}
