//! The maps the daemon reads and writes while the program runs: the
//! indirection table (written in one `BPF_MAP_UPDATE_BATCH`) and the
//! per-CPU counters (read in one `BPF_MAP_LOOKUP_BATCH` and summed over
//! CPUs).

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::{Xdp, XdpError, XdpErrorKind};
use crate::cpu::CpuList;
// The keys of the per-CPU `rsspp_counters` map, from the C code's BTF.
use crate::skel::types::rsspp_counter as Counter;

/// Slots of `rsspp_counters`.
const COUNTERS: usize = Counter::COUNTER_MAX.0 as usize;

/// Packets kept out of the per-bucket counters, summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OtherCounts {
    /// Neither IPv4 nor IPv6 (ARP, LLDP, more than two VLAN tags).
    pub not_ip: u64,
    /// Headers cut short or invalid (IP version, IHL).
    pub malformed: u64,
    /// Steering to a CPU without a CPUMAP entry: passed up on the
    /// receiving CPU instead.
    pub redirect_failed: u64,
    /// Frames whose bucket came from the NIC's RX hash.
    pub rx_hash: u64,
    /// Frames for which the driver gave no RX hash (Toeplitz instead).
    pub rx_hash_missing: u64,
    /// Buckets the steering program switched to their new CPU once the
    /// old one had drained them.
    pub handoff_switched: u64,
    /// Frames sent to a bucket's old CPU while it drained.
    pub handoff_held: u64,
    /// Frames of a bucket in handoff that found no room for the stamp in
    /// the XDP metadata area (not tracked: the handoff waits for the next).
    pub handoff_no_meta: u64,
    /// Frames steered by their flow's override rather than the table.
    pub overridden: u64,
}

/// How far a bucket's handoff has drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandoffState {
    /// Frames sent to the old CPU since the handoff began.
    pub sent: u64,
    /// The last of those the old CPU dequeued (`sent` when drained).
    pub dequeued: u64,
}

impl HandoffState {
    /// Nothing of the bucket waits on the old CPU (nothing was sent, or
    /// the last frame sent was dequeued).
    pub fn drained(&self) -> bool {
        self.sent == self.dequeued
    }
}

/// A BPF array map of u64 made with `BPF_F_MMAPABLE`, mapped into this
/// process: its values read (and, for benchmarks, written) in place.
#[derive(Debug)]
pub(super) struct Mapped {
    ptr: std::ptr::NonNull<u64>,
    entries: usize,
    bytes: usize,
}

// SAFETY: the mapping is plain shared memory of u64 counters, read and
// written only with volatile accesses; it lives until drop.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps the `entries` u64 values of `map`.
    pub(super) fn new(map: &MapHandle, entries: usize) -> std::io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let bytes = (entries * 8).div_ceil(page) * page;
        // SAFETY: a shared mapping of the map's fd at offset 0, of a length
        // the kernel checks against the map; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            ptr: std::ptr::NonNull::new(ptr.cast::<u64>()).expect("mmap returned non-null"),
            entries,
            bytes,
        })
    }

    /// Value `i`, as the programs last wrote it.
    pub(super) fn get(&self, i: usize) -> u64 {
        assert!(i < self.entries, "index {i} past {}", self.entries);
        // SAFETY: in bounds of the mapping; aligned (page-aligned base).
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(i)) }
    }

    /// Sets value `i`.
    pub(super) fn set(&self, i: usize, v: u64) {
        assert!(i < self.entries, "index {i} past {}", self.entries);
        // SAFETY: as in `get`.
        unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(i), v) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

/// Bits of a table entry: the CPU, and the CPU a bucket in handoff goes to
/// (plus one; 0 for none). As in the C code's `RETA_CPU_MASK` and
/// `RETA_NEXT_SHIFT`.
const ENTRY_CPU_MASK: u32 = 0xffff;
const ENTRY_NEXT_SHIFT: u32 = 16;

/// One entry of the steering table, as the program sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The CPU the bucket's frames go to now.
    pub cpu: u32,
    /// The CPU it moves to once drained, if it is in handoff.
    pub next: Option<u32>,
}

impl Entry {
    pub(super) fn decode(raw: u32) -> Self {
        let next = raw >> ENTRY_NEXT_SHIFT;
        Entry {
            cpu: raw & ENTRY_CPU_MASK,
            next: (next != 0).then(|| next - 1),
        }
    }

    pub(super) fn encode(self) -> u32 {
        self.cpu | self.next.map_or(0, |n| (n + 1) << ENTRY_NEXT_SHIFT)
    }
}

impl Xdp {
    /// Writes the whole indirection table (steering only): `table[b]` is
    /// the CPU of bucket `b`.
    pub fn write_table(&self, table: &[u32]) -> Result<(), XdpError> {
        if table.len() != self.reta_size {
            return Err(self.error(XdpErrorKind::TableLength {
                expected: self.reta_size,
                got: table.len(),
            }));
        }
        let entries: Vec<(usize, u32)> = table.iter().copied().enumerate().collect();
        self.write_entries(&entries)
    }

    /// Rewrites some entries (steering only): `(bucket, cpu)` pairs, each
    /// taking effect at once (a bucket in handoff is switched, drained or
    /// not). All are checked before any is written. Each entry changes
    /// atomically; packets already redirected keep their CPU.
    pub fn write_entries(&self, entries: &[(usize, u32)]) -> Result<(), XdpError> {
        let entries: Vec<(usize, Entry)> = entries
            .iter()
            .map(|&(b, cpu)| (b, Entry { cpu, next: None }))
            .collect();
        self.check(&entries)?;
        self.write_raw(&entries)
    }

    /// Moves buckets without reordering (steering with
    /// [`Xdp::ordered_moves`]): `(bucket, from, to)`, where `from` is the
    /// CPU the bucket's frames go to now. Each stays on `from` until `from`
    /// has dequeued every frame of it sent so far; the first frame after
    /// that switches it to `to` ([`Xdp::entries`] then shows it settled).
    /// With `fresh`, the handoffs start over (the bucket was settled);
    /// without, they go on towards a new `to` (the bucket was still in
    /// handoff from `from`).
    pub fn begin_handoffs(&self, moves: &[(usize, u32, u32)], fresh: bool) -> Result<(), XdpError> {
        if !self.ordered_moves {
            return Err(self.error(XdpErrorKind::NoHandoffs));
        }
        let handoff = self
            .maps
            .handoff
            .as_ref()
            .ok_or_else(|| self.error(XdpErrorKind::NoTable))?;
        let entries: Vec<(usize, Entry)> = moves
            .iter()
            .map(|&(b, from, to)| {
                (
                    b,
                    Entry {
                        cpu: from,
                        next: Some(to),
                    },
                )
            })
            .collect();
        self.check(&entries)?;
        if fresh && !moves.is_empty() {
            let state = [0u8; std::mem::size_of::<crate::skel::types::handoff>()];
            let mut keys = Vec::with_capacity(moves.len() * 4);
            let mut values = Vec::with_capacity(moves.len() * state.len());
            for &(bucket, _, _) in moves {
                keys.extend_from_slice(&(bucket as u32).to_ne_bytes());
                values.extend_from_slice(&state);
            }
            handoff
                .update_batch(
                    &keys,
                    &values,
                    moves.len() as u32,
                    MapFlags::ANY,
                    MapFlags::ANY,
                )
                .map_err(|source| self.bpf_error("resetting the handoffs", source))?;
        }
        self.write_raw(&entries)
    }

    /// The entries of `buckets`, as the program sees them now.
    pub fn entries(&self, buckets: &[usize]) -> Result<Vec<Entry>, XdpError> {
        let reta = self
            .maps
            .reta
            .as_ref()
            .ok_or_else(|| self.error(XdpErrorKind::NoTable))?;
        buckets
            .iter()
            .map(|&b| {
                let raw = reta
                    .lookup(&(b as u32).to_ne_bytes(), MapFlags::ANY)
                    .map_err(|source| self.bpf_error("reading the indirection table", source))?
                    .and_then(|v| Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?)))
                    .unwrap_or(0);
                Ok(Entry::decode(raw))
            })
            .collect()
    }

    /// How far the handoff of `bucket` has drained.
    pub fn handoff_state(&self, bucket: usize) -> Result<HandoffState, XdpError> {
        let handoff = self
            .maps
            .handoff
            .as_ref()
            .ok_or_else(|| self.error(XdpErrorKind::NoHandoffs))?;
        let value = handoff
            .lookup(&(bucket as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| self.bpf_error("reading a handoff", source))?
            .unwrap_or_default();
        let word = |i: usize| {
            value
                .get(i * 8..i * 8 + 8)
                .map_or(0, |w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
        };
        // struct handoff { enq_seq, deq_seq, deq_ns }
        Ok(HandoffState {
            sent: word(0),
            dequeued: word(1),
        })
    }

    /// Frames the CPUMAP dropped because a CPU's queue was full, per CPU
    /// since load (steering; zeros otherwise); `out` has
    /// [`Xdp::possible_cpus`] slots.
    pub fn cpumap_drops(&self, out: &mut [u64]) -> Result<(), XdpError> {
        match &self.maps.cpumap_drops {
            Some(map) => self.percpu_sums(map, out, "CPUMAP drops"),
            None => {
                out.fill(0);
                Ok(())
            }
        }
    }

    /// Checks that there is a table, and entries against it and the
    /// steering CPUs.
    fn check(&self, entries: &[(usize, Entry)]) -> Result<(), XdpError> {
        if self.maps.reta.is_none() {
            return Err(self.error(XdpErrorKind::NoTable));
        }
        for &(bucket, e) in entries {
            if bucket >= self.reta_size {
                return Err(self.error(XdpErrorKind::BucketOutOfRange {
                    bucket,
                    size: self.reta_size,
                }));
            }
            self.check_cpus(e)?;
        }
        Ok(())
    }

    /// Checks that an entry names only steering CPUs.
    pub(super) fn check_cpus(&self, e: Entry) -> Result<(), XdpError> {
        for cpu in [Some(e.cpu), e.next].into_iter().flatten() {
            if self.targets.binary_search(&cpu).is_err() {
                return Err(self.error(XdpErrorKind::CpuNotSteered {
                    cpu,
                    targets: CpuList::from_cpus(self.targets.clone()).to_string(),
                }));
            }
        }
        Ok(())
    }

    /// Writes entries the caller has checked, in one batch.
    fn write_raw(&self, entries: &[(usize, Entry)]) -> Result<(), XdpError> {
        let reta = self
            .maps
            .reta
            .as_ref()
            .ok_or_else(|| self.error(XdpErrorKind::NoTable))?;
        if entries.is_empty() {
            return Ok(());
        }
        let mut keys = Vec::with_capacity(entries.len() * 4);
        let mut values = Vec::with_capacity(entries.len() * 4);
        for &(bucket, e) in entries {
            keys.extend_from_slice(&(bucket as u32).to_ne_bytes());
            values.extend_from_slice(&e.encode().to_ne_bytes());
        }
        reta.update_batch(
            &keys,
            &values,
            entries.len() as u32,
            MapFlags::ANY,
            MapFlags::ANY,
        )
        .map_err(|source| self.bpf_error("writing the indirection table", source))
    }

    /// Packets per bucket since load, summed over CPUs; `out` has
    /// [`Xdp::reta_size`] slots. Read through the map's memory mapping: no
    /// system call.
    pub fn bucket_packets(&self, out: &mut [u64]) -> Result<(), XdpError> {
        if out.len() != self.reta_size {
            return Err(self.error(XdpErrorKind::BufferLength {
                what: "per-bucket packets",
                expected: self.reta_size,
                got: out.len(),
            }));
        }
        let rows = &self.maps.buckets.1;
        out.fill(0);
        for cpu in 0..self.possible_cpus {
            let base = cpu * self.reta_size;
            for (b, o) in out.iter_mut().enumerate() {
                *o += rows.get(base + b);
            }
        }
        Ok(())
    }

    /// Packets per CPU since load: steered to it (steering) or counted on
    /// it (counting); `out` has [`Xdp::possible_cpus`] slots.
    pub fn cpu_packets(&self, out: &mut [u64]) -> Result<(), XdpError> {
        self.percpu_sums(&self.maps.cpus, out, "per-CPU packets")
    }

    /// The packets kept out of the buckets, since load.
    pub fn other_counts(&self) -> Result<OtherCounts, XdpError> {
        let mut c = [0u64; COUNTERS];
        self.percpu_sums(&self.maps.counters, &mut c, "other counters")?;
        let at = |counter: Counter| c[counter.0 as usize];
        Ok(OtherCounts {
            not_ip: at(Counter::COUNTER_NOT_IP),
            malformed: at(Counter::COUNTER_MALFORMED),
            redirect_failed: at(Counter::COUNTER_REDIRECT_FAILED),
            rx_hash: at(Counter::COUNTER_RX_HASH),
            rx_hash_missing: at(Counter::COUNTER_RX_HASH_MISSING),
            handoff_switched: at(Counter::COUNTER_HANDOFF_SWITCHED),
            handoff_held: at(Counter::COUNTER_HANDOFF_HELD),
            handoff_no_meta: at(Counter::COUNTER_HANDOFF_NO_META),
            overridden: at(Counter::COUNTER_OVERRIDDEN),
        })
    }

    /// Sets the packet counters as if traffic had made them (`rsspp bench
    /// daemon`, which has no interface to receive on): `buckets[b]` and
    /// `cpus[c]` packets since load, all on the first CPU's slot.
    pub(crate) fn set_counts(&self, buckets: &[u64], cpus: &[u64]) -> Result<(), XdpError> {
        let rows = &self.maps.buckets.1;
        for (b, &n) in buckets.iter().enumerate().take(self.reta_size) {
            rows.set(b, n);
            for cpu in 1..self.possible_cpus {
                rows.set(cpu * self.reta_size + b, 0);
            }
        }
        // The per-CPU counts of packets, through a batch update
        // (libbpf-rs sizes batch values for plain maps only).
        let mut keys = Vec::with_capacity(cpus.len() * 4);
        let mut values = vec![0u8; cpus.len() * self.possible_cpus * 8];
        for (i, &n) in cpus.iter().enumerate() {
            keys.extend_from_slice(&(i as u32).to_ne_bytes());
            let at = i * self.possible_cpus * 8;
            values[at..at + 8].copy_from_slice(&n.to_ne_bytes());
        }
        let opts = libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        let mut count = cpus.len() as u32;
        // SAFETY: `keys` holds `count` 4-byte keys and `values` `count`
        // per-CPU values of `possible_cpus` 8-byte slots.
        let ret = unsafe {
            libbpf_sys::bpf_map_update_batch(
                self.maps.cpus.as_fd().as_raw_fd(),
                keys.as_ptr().cast::<c_void>(),
                values.as_ptr().cast::<c_void>(),
                &mut count,
                &opts,
            )
        };
        if ret < 0 {
            return Err(self.os_error("setting the counters", -ret));
        }
        Ok(())
    }

    /// Writes one entry of a map with 4-byte keys.
    pub(super) fn update(
        &self,
        map: &MapHandle,
        key: u32,
        value: &[u8],
        what: &'static str,
    ) -> Result<(), XdpError> {
        map.update(&key.to_ne_bytes(), value, MapFlags::ANY)
            .map_err(|source| self.bpf_error(what, source))
    }

    /// Sums a per-CPU array of u64 over CPUs, reading the whole map in one
    /// `BPF_MAP_LOOKUP_BATCH` (libbpf-rs's batch iterator sizes values for
    /// plain maps only).
    fn percpu_sums(
        &self,
        map: &MapHandle,
        out: &mut [u64],
        what: &'static str,
    ) -> Result<(), XdpError> {
        let n = map.max_entries() as usize;
        if out.len() != n {
            return Err(self.error(XdpErrorKind::BufferLength {
                what,
                expected: n,
                got: out.len(),
            }));
        }
        let cpus = self.possible_cpus;
        let mut keys = vec![0u32; n];
        let mut values = vec![0u64; n * cpus];
        let mut done = 0;
        let mut batch: Option<u32> = None;
        while done < n {
            let mut next = 0u32;
            let mut count = (n - done) as u32;
            let opts = libbpf_sys::bpf_map_batch_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
                ..Default::default()
            };
            let in_batch = batch
                .as_mut()
                .map_or(std::ptr::null_mut(), |b| b as *mut u32);
            // SAFETY: `keys` and `values` have room for `count` more keys
            // and `count * cpus` more values (per-CPU values of 8 bytes are
            // not padded); the batch cursors are 4-byte keys.
            let ret = unsafe {
                libbpf_sys::bpf_map_lookup_batch(
                    map.as_fd().as_raw_fd(),
                    in_batch.cast::<c_void>(),
                    (&mut next as *mut u32).cast::<c_void>(),
                    keys[done..].as_mut_ptr().cast::<c_void>(),
                    values[done * cpus..].as_mut_ptr().cast::<c_void>(),
                    &mut count,
                    &opts,
                )
            };
            if ret < 0 && -ret != libc::ENOENT {
                return Err(self.os_error("reading the counters", -ret));
            }
            done += count as usize;
            // ENOENT: the end of the map was reached.
            if ret < 0 || count == 0 {
                break;
            }
            batch = Some(next);
        }
        out.fill(0);
        for (i, &key) in keys[..done].iter().enumerate() {
            out[key as usize] = values[i * cpus..(i + 1) * cpus].iter().sum();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{udp_frame as frame, write_handoff};
    use super::super::{Program, XdpAction, XdpOptions};
    use super::*;

    /// A redirect to a CPU without a CPUMAP entry cannot be asked for
    /// through the API; write one straight into the map to check that the
    /// program passes the frame and counts the failure.
    #[test]
    fn failed_redirect_passes_and_is_counted() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "skipping failed redirect test: loading XDP programs needs root (CI runs as root)"
            );
            return;
        }
        let mut opts = XdpOptions::new("lo");
        opts.reta_size = 4;
        let x = Xdp::load(
            &opts,
            Program::Steer {
                cpus: vec![0],
                cpumap_queue: 16,
                ordered_moves: true,
            },
        )
        .unwrap();
        let reta = x.maps.reta.as_ref().unwrap();
        for bucket in 0..4u32 {
            reta.update(&bucket.to_ne_bytes(), &4095u32.to_ne_bytes(), MapFlags::ANY)
                .unwrap();
        }
        let run = x.test_run(&frame(), 5).unwrap();
        assert_eq!(run.action, XdpAction::Pass);
        let other = x.other_counts().unwrap();
        assert_eq!(
            (other.redirect_failed, other.not_ip, other.malformed),
            (5, 0, 0)
        );
        let mut buckets = vec![0; 4];
        x.bucket_packets(&mut buckets).unwrap();
        assert_eq!(buckets.iter().sum::<u64>(), 5);
        // Counted on the CPU that ran it, not the one the table named.
        let mut cpus = vec![0; x.possible_cpus()];
        x.cpu_packets(&mut cpus).unwrap();
        assert_eq!(cpus.iter().sum::<u64>(), 5);
    }

    /// The program's side of a handoff, step by step: a moved bucket stays
    /// on its old CPU, each frame sent there stamped, until the old CPU has
    /// dequeued the last stamped one (written here as the CPUMAP program
    /// would); the next frame switches it.
    #[test]
    fn a_bucket_switches_only_once_its_old_cpu_has_dequeued_its_last_frame() {
        let test = "bucket handoff test";
        let Some((x, a, b)) = super::super::testing::ordered_steering(test, 0) else {
            return;
        };
        x.begin_handoffs(&[(0, a, b)], true).unwrap();
        assert_eq!(
            x.entries(&[0]).unwrap(),
            vec![Entry {
                cpu: a,
                next: Some(b)
            }]
        );
        let run = x.test_run(&frame(), 3).unwrap();
        assert_eq!(run.action, XdpAction::Redirect);
        // Three frames sent to the old CPU, stamped 1 to 3; none dequeued.
        assert_eq!(
            x.handoff_state(0).unwrap(),
            HandoffState {
                sent: 3,
                dequeued: 0
            }
        );
        assert_eq!(x.entries(&[0]).unwrap()[0].next, Some(b), "still held");
        // The old CPU dequeued stamp 2 of 3: still held.
        write_handoff(&x, 0, 3, 2);
        x.test_run(&frame(), 1).unwrap();
        assert_eq!(x.handoff_state(0).unwrap().sent, 4);
        assert_eq!(x.entries(&[0]).unwrap()[0].next, Some(b), "still held");
        // Now the last one it was sent: the next frame switches the bucket.
        write_handoff(&x, 0, 4, 4);
        x.test_run(&frame(), 1).unwrap();
        assert_eq!(x.entries(&[0]).unwrap(), vec![Entry { cpu: b, next: None }]);
        let other = x.other_counts().unwrap();
        assert_eq!((other.handoff_held, other.handoff_switched), (4, 1));
        let mut cpus = vec![0; x.possible_cpus()];
        x.cpu_packets(&mut cpus).unwrap();
        assert_eq!((cpus[a as usize], cpus[b as usize]), (4, 1));
    }

    #[test]
    fn handoffs_need_the_program_loaded_with_them() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping handoff test: loading XDP programs needs root (CI runs as root)");
            return;
        }
        let mut opts = XdpOptions::new("lo");
        opts.reta_size = 4;
        let x = Xdp::load(
            &opts,
            Program::Steer {
                cpus: vec![0],
                cpumap_queue: 16,
                ordered_moves: false,
            },
        )
        .unwrap();
        let e = x.begin_handoffs(&[(0, 0, 0)], true).unwrap_err();
        assert!(matches!(e.kind(), XdpErrorKind::NoHandoffs), "{e}");
        opts.attach = super::super::AttachMode::Skb;
        let e = Xdp::load(
            &opts,
            Program::Steer {
                cpus: vec![0],
                cpumap_queue: 16,
                ordered_moves: true,
            },
        )
        .unwrap_err();
        assert!(
            matches!(e.kind(), XdpErrorKind::OrderedMovesNeedNative),
            "{e}"
        );
    }
}
