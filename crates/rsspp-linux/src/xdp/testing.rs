//! What the handoff tests of `maps` and `flows` share: the steering
//! program with ordered moves, loaded (not attached) for `lo` with a
//! one-bucket table on the first of two CPUs, a frame to run through it,
//! and the CPUMAP program's side of a handoff written by hand.

use libbpf_rs::{MapCore, MapFlags};

use super::{Program, Xdp, XdpOptions};
use crate::cpu::CpuList;

/// The steering program with ordered moves and `override_slots` override
/// slots, its one bucket on the first CPU; with the first two CPUs. `None`
/// (and why, on standard error) without root or a second CPU.
pub(super) fn ordered_steering(test: &str, override_slots: usize) -> Option<(Xdp, u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {test}: loading XDP programs needs root (CI runs as root)");
        return None;
    }
    let online = CpuList::online().unwrap();
    if online.len() < 2 {
        eprintln!("skipping {test}: a move needs two CPUs");
        return None;
    }
    let (a, b) = (online.cpus()[0], online.cpus()[1]);
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = 1; // every frame in bucket 0
    opts.override_slots = override_slots;
    let x = Xdp::load(
        &opts,
        Program::Steer {
            cpus: vec![a, b],
            cpumap_queue: 16,
            ordered_moves: true,
        },
    )
    .unwrap();
    x.write_entries(&[(0, a)]).unwrap();
    Some((x, a, b))
}

/// Ethernet, IPv4 (10.0.0.1 -> 10.0.0.2, UDP), UDP 1 -> 2.
pub(super) fn udp_frame() -> Vec<u8> {
    let mut frame = vec![0u8; 42];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    frame[23] = 17;
    frame[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    frame[34..38].copy_from_slice(&[0, 1, 0, 2]);
    frame
}

/// Writes handoff slot `index` as the CPUMAP program would: `sent` frames
/// stamped, the last stamp the old CPU dequeued, dequeued long ago.
pub(super) fn write_handoff(x: &Xdp, index: usize, sent: u64, dequeued: u64) {
    let mut v = Vec::new();
    for w in [sent, dequeued, 0] {
        v.extend_from_slice(&w.to_ne_bytes());
    }
    x.maps
        .handoff
        .as_ref()
        .unwrap()
        .update(&(index as u32).to_ne_bytes(), &v, MapFlags::ANY)
        .unwrap();
}
