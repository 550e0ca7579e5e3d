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

    /// Rewrites some entries (steering only): `(bucket, cpu)` pairs. All
    /// are checked before any is written. Each entry changes atomically;
    /// packets already redirected keep their CPU.
    pub fn write_entries(&self, entries: &[(usize, u32)]) -> Result<(), XdpError> {
        let reta = self
            .maps
            .reta
            .as_ref()
            .ok_or_else(|| self.error(XdpErrorKind::NoTable))?;
        for &(bucket, cpu) in entries {
            if bucket >= self.reta_size {
                return Err(self.error(XdpErrorKind::BucketOutOfRange {
                    bucket,
                    size: self.reta_size,
                }));
            }
            if self.targets.binary_search(&cpu).is_err() {
                return Err(self.error(XdpErrorKind::CpuNotSteered {
                    cpu,
                    targets: CpuList::from_cpus(self.targets.clone()).to_string(),
                }));
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        let mut keys = Vec::with_capacity(entries.len() * 4);
        let mut values = Vec::with_capacity(entries.len() * 4);
        for &(bucket, cpu) in entries {
            keys.extend_from_slice(&(bucket as u32).to_ne_bytes());
            values.extend_from_slice(&cpu.to_ne_bytes());
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
    /// [`Xdp::reta_size`] slots.
    pub fn bucket_packets(&self, out: &mut [u64]) -> Result<(), XdpError> {
        self.percpu_sums(&self.maps.buckets, out, "per-bucket packets")
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
        })
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
            },
        )
        .unwrap();
        let reta = x.maps.reta.as_ref().unwrap();
        for bucket in 0..4u32 {
            reta.update(&bucket.to_ne_bytes(), &4095u32.to_ne_bytes(), MapFlags::ANY)
                .unwrap();
        }
        // Ethernet, IPv4 (10.0.0.1 -> 10.0.0.2, UDP), UDP 1 -> 2.
        let mut frame = vec![0u8; 42];
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame[14] = 0x45;
        frame[23] = 17;
        frame[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        frame[34..38].copy_from_slice(&[0, 1, 0, 2]);
        let run = x.test_run(&frame, 5).unwrap();
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
}
