//! Attaching and detaching on a veth pair in a network namespace created
//! for each test (deleted afterwards, even on failure), in native and skb
//! modes; live frames through the pair. Needs root (CI runs as root).

mod common;

use std::time::{Duration, Instant};

use common::foreign;
use common::netns::{send_frames, Netns};
use common::*;
use rsspp_core::RssKey;
use rsspp_linux::xdp::{AttachMode, Program, Xdp, XdpErrorKind, XdpOptions, DEFAULT_CPUMAP_QUEUE};

const IFACE: &str = "veth1";

fn options(mode: AttachMode) -> XdpOptions {
    let mut o = XdpOptions::new(IFACE);
    o.attach = mode;
    o
}

/// Up to two online CPUs, the last first, so that the table's order is
/// not the sorted order.
fn cpus() -> Vec<u32> {
    let online = rsspp_linux::cpu::CpuList::online().unwrap().cpus().to_vec();
    online.into_iter().take(2).rev().collect()
}

fn steer() -> Program {
    Program::Steer {
        cpus: cpus(),
        cpumap_queue: DEFAULT_CPUMAP_QUEUE,
        // Loaded in both modes here; skb mode has no ordered moves.
        ordered_moves: false,
    }
}

/// `ip -d link`'s name for a mode.
fn ip_mode(mode: AttachMode) -> &'static str {
    match mode {
        AttachMode::Native => "xdp",
        AttachMode::Skb => "xdpgeneric",
    }
}

/// Polls `f` until it holds, for at most two seconds (the frames cross
/// the veth pair asynchronously).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn attaches_and_detaches_in_native_and_skb_modes() {
    if !bpf_ready("attach test") {
        return;
    }
    for mode in [AttachMode::Native, AttachMode::Skb] {
        let ns = Netns::with_veth("attach");
        ns.run(|| {
            let mut x = Xdp::load(&options(mode), steer()).unwrap();
            assert!(!x.is_attached());
            assert_eq!(ns.xdp_of(IFACE), None, "loading attaches nothing");
            x.attach().unwrap();
            assert!(x.is_attached());
            assert_eq!(
                ns.xdp_of(IFACE),
                Some((ip_mode(mode).to_string(), x.program_id()))
            );
            // Attaching again is a no-op.
            x.attach().unwrap();
            x.detach().unwrap();
            assert!(!x.is_attached());
            assert_eq!(ns.xdp_of(IFACE), None);
            x.detach().unwrap();
        });
    }
}

#[test]
fn another_program_is_refused_unless_forced_and_put_back_after() {
    if !bpf_ready("force test") {
        return;
    }
    let ns = Netns::with_veth("force");
    ns.run(|| {
        // Another tool's program, attached through netlink.
        let first_id = foreign::attach(IFACE, false);
        let native = options(AttachMode::Native);
        let mut second = Xdp::load(&native, steer()).unwrap();
        let e = second.attach().unwrap_err();
        assert!(
            matches!(e.kind(), XdpErrorKind::AlreadyAttached { prog_id, mode: "native", name } if *prog_id == first_id && name == foreign::NAME),
            "{e}"
        );
        assert!(e.to_string().contains(IFACE), "{e}");
        assert!(!second.is_attached());
        assert_eq!(ns.xdp_of(IFACE), Some(("xdp".into(), first_id)));

        // Forced from the other mode: the kernel allows one mode at a time.
        let mut skb = options(AttachMode::Skb);
        skb.force = true;
        let mut third = Xdp::load(&skb, steer()).unwrap();
        let e = third.attach().unwrap_err();
        assert!(matches!(e.kind(), XdpErrorKind::ModeConflict { .. }), "{e}");
        assert_eq!(ns.xdp_of(IFACE), Some(("xdp".into(), first_id)));

        let mut forced = native.clone();
        forced.force = true;
        let mut second = Xdp::load(&forced, steer()).unwrap();
        second.attach().unwrap();
        assert_eq!(ns.xdp_of(IFACE), Some(("xdp".into(), second.program_id())));
        // Detaching puts the replaced program back.
        second.detach().unwrap();
        assert_eq!(ns.xdp_of(IFACE), Some(("xdp".into(), first_id)));
        foreign::detach(IFACE, false);
        assert_eq!(ns.xdp_of(IFACE), None);
    });
}

#[test]
fn a_program_attached_through_a_link_is_never_replaced() {
    if !bpf_ready("link test") {
        return;
    }
    let ns = Netns::with_veth("link");
    ns.run(|| {
        let mut ours = Xdp::load(&options(AttachMode::Skb), steer()).unwrap();
        ours.attach().unwrap();
        assert!(ours.uses_link());
        // Another rsspp, forced: refused, naming the holder (this process).
        let mut o = options(AttachMode::Skb);
        o.force = true;
        let mut theirs = Xdp::load(&o, Program::Count { rx_hash: false }).unwrap();
        let e = theirs.attach().unwrap_err();
        assert!(matches!(e.kind(), XdpErrorKind::OwnAttached { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("held by running process {}", std::process::id())),
            "{e}"
        );
        // Another tool through netlink: the kernel refuses to replace a
        // link.
        let other = foreign::load();
        use std::os::fd::AsRawFd;
        assert_eq!(
            foreign::try_attach_fd(IFACE, other.as_raw_fd(), true),
            -libc::EBUSY
        );
        assert_eq!(
            ns.xdp_of(IFACE),
            Some(("xdpgeneric".into(), ours.program_id()))
        );
        ours.detach().unwrap();
        assert_eq!(ns.xdp_of(IFACE), None);
    });
}

#[test]
fn an_orphaned_rsspp_program_on_netlink_is_replaced() {
    if !bpf_ready("leftover test") {
        return;
    }
    let ns = Netns::with_veth("leftover");
    ns.run(|| {
        // What an older rsspp, or a killed hardware-mode daemon, leaves:
        // an xdp_rsspp_* program attached through netlink, held by no one.
        let old = Xdp::load(
            &options(AttachMode::Native),
            Program::Count { rx_hash: false },
        )
        .unwrap();
        let fd = foreign::fd_of(old.program_id());
        use std::os::fd::AsRawFd;
        assert_eq!(foreign::try_attach_fd(IFACE, fd.as_raw_fd(), false), 0);
        let old_id = old.program_id();
        drop((old, fd));
        assert_eq!(ns.xdp_of(IFACE), Some(("xdp".into(), old_id)));

        let mut new = Xdp::load(&options(AttachMode::Native), steer()).unwrap();
        new.attach().unwrap();
        assert_eq!(ns.xdp_of(IFACE), Some(("xdp".into(), new.program_id())));
        // Not put back: it was a leftover.
        new.detach().unwrap();
        assert_eq!(ns.xdp_of(IFACE), None);
    });
}

#[test]
fn dropping_detaches() {
    if !bpf_ready("drop test") {
        return;
    }
    let ns = Netns::with_veth("drop");
    ns.run(|| {
        for mode in [AttachMode::Native, AttachMode::Skb] {
            let mut x = Xdp::load(&options(mode), steer()).unwrap();
            x.attach().unwrap();
            assert!(ns.xdp_of(IFACE).is_some());
            drop(x);
            assert_eq!(ns.xdp_of(IFACE), None, "{mode}");
        }
    });
}

/// Frames of `flows` flows, `per_flow` each, with their expected buckets.
fn traffic(key: &RssKey, size: usize, flows: usize, per_flow: usize) -> (Vec<Vec<u8>>, Vec<u64>) {
    let mut rng = Rng(42);
    let mut frames = Vec::new();
    let mut buckets = vec![0u64; size];
    for i in 0..flows {
        let (s, d) = (
            std::net::IpAddr::from(rng.bytes::<4>()),
            std::net::IpAddr::from(rng.bytes::<4>()),
        );
        let l4 = if i % 2 == 0 {
            L4::Udp(rng.next() as u16, 9)
        } else {
            L4::Tcp(rng.next() as u16, 80)
        };
        buckets[bucket(key, &flow_of(s, d, l4), size)] += per_flow as u64;
        for _ in 0..per_flow {
            frames.push(ip_frame(s, d, l4));
        }
    }
    (frames, buckets)
}

#[test]
fn steers_live_frames_through_a_veth_pair() {
    if !bpf_ready("live steering test") {
        return;
    }
    for mode in [AttachMode::Native, AttachMode::Skb] {
        let ns = Netns::with_veth("live");
        ns.run(|| {
            let opts = options(mode);
            let mut x = Xdp::load(&opts, steer()).unwrap();
            let cpus = cpus();
            x.attach().unwrap();
            let (frames, expected) = traffic(&opts.key, opts.reta_size, 40, 5);
            let mut per_cpu = vec![0u64; x.possible_cpus()];
            for (b, &n) in expected.iter().enumerate() {
                per_cpu[cpus[b % cpus.len()] as usize] += n;
            }
            let mut frames = frames;
            frames.push(arp_frame());
            per_cpu[opts.default_cpu as usize] += 1;
            send_frames("veth0", &frames);

            let mut buckets = vec![0; x.reta_size()];
            eventually("the bucket counts", || {
                x.bucket_packets(&mut buckets).unwrap();
                buckets == expected
            });
            let mut cpus_seen = vec![0; x.possible_cpus()];
            x.cpu_packets(&mut cpus_seen).unwrap();
            assert_eq!(cpus_seen, per_cpu, "{mode}");
            let other = x.other_counts().unwrap();
            assert_eq!(
                (other.not_ip, other.malformed, other.redirect_failed),
                (1, 0, 0)
            );
        });
    }
}

/// Runs only with `RSSPP_TEST_DEVICE_BOUND=1`. On Linux 6.18 (this
/// project's CI kernel), deleting the network namespace of a veth that a
/// device-bound XDP program was loaded for oopsed twice on the CI machine
/// (a use-after-free in `__bpf_prog_offload_destroy` from `cleanup_net`):
/// the crashed worker then holds the rtnl lock until reboot, and every
/// later network test hangs. The program's code path is the same as the
/// counting program's, which the other tests cover; this test adds the
/// kfunc.
#[test]
fn counts_with_the_nic_rx_hash_on_veth() {
    if !bpf_ready("RX hash test") {
        return;
    }
    if std::env::var_os("RSSPP_TEST_DEVICE_BOUND").is_none_or(|v| v != "1") {
        eprintln!(
            "skipping the RX hash test on veth: deleting a namespace whose veth had a \
             device-bound XDP program oopses Linux 6.18 (use-after-free in \
             __bpf_prog_offload_destroy); RSSPP_TEST_DEVICE_BOUND=1 runs it"
        );
        return;
    }
    let ns = Netns::with_veth("rxhash");
    ns.run(|| {
        let opts = options(AttachMode::Native);
        let mut x = Xdp::load(&opts, Program::Count { rx_hash: true }).unwrap();
        // The kernel runs no BPF_PROG_TEST_RUN on a device-bound program.
        let frame = ip_frame(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            L4::Icmp,
        );
        let e = x.test_run(&frame, 1).unwrap_err();
        assert!(matches!(e.kind(), XdpErrorKind::TestRunDeviceBound), "{e}");
        x.attach().unwrap();
        let per_flow = 7;
        let (frames, _) = traffic(&opts.key, opts.reta_size, 10, per_flow);
        send_frames("veth0", &frames);
        let mut buckets = vec![0; x.reta_size()];
        eventually("the RX-hash counts", || {
            x.other_counts().unwrap().rx_hash == frames.len() as u64
        });
        x.bucket_packets(&mut buckets).unwrap();
        assert_eq!(buckets.iter().sum::<u64>(), frames.len() as u64);
        // veth's RX hash is the kernel's flow hash: every packet of a flow
        // in one bucket, so every count is a multiple of the flow's size.
        assert!(
            buckets.iter().all(|&n| n % per_flow as u64 == 0),
            "{buckets:?}"
        );
        assert_eq!(x.other_counts().unwrap().rx_hash_missing, 0);
    });
}
