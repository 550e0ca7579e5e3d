//! `rsspp nf --backend afxdp --mode hardware` on a NIC whose RSS table is
//! writable: a QEMU guest's two-queue virtio-net `eth0` (see
//! `guest/mod.rs`), with a second, one-queue NIC `eth1` for the output.
//! Needs root (CI runs as root) and QEMU.
//!
//! The host sends UDP frames of 64 flows into `eth0`'s tap (tcpreplay,
//! each frame carrying its flow's sequence number); in the guest, the NIC's
//! RSS spreads them over queues 0 and 1, one AF_XDP socket and worker
//! each, and `--churn` moves buckets every round by rewriting the NIC's
//! indirection table, each move fenced and handed over in order. The
//! workers forward through `eth1` (one transmit queue: the host's tcpdump
//! sees the guest's sends in their order). Checked: every frame received
//! and forwarded once, every flow in order at the host, none processed
//! without its state, the monitor's per-flow counts equal what was sent
//! (no state lost across the moves), both queues carried frames, and the
//! NIC's table is as before once rsspp has exited. With one queue left
//! for two workers, `rsspp nf` says so in one line, exits 1 and attaches
//! nothing. Killed with SIGKILL, it leaves no XDP program, and `rsspp
//! detach` puts the NIC's table back.

mod guest;

#[path = "common/daemon_udp.rs"]
#[allow(dead_code)]
mod daemon_udp;
#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;
#[path = "common/nf.rs"]
#[allow(dead_code)]
mod nf_common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};

use nf_common::{Reaped, Scratch};

const FLOWS: u32 = 64;
const PER_FLOW: u32 = 300;
const PPS: u32 = 4000;

const SCRIPT: &str = "\
step table-before ethtool -x eth0
step rxhash ethtool -K eth0 rxhash $RXHASH
ip link set eth0 promisc on
rsspp nf --in eth0 --out eth1 --cpus 0,1 --backend afxdp --mode hardware --chain monitor \
    --churn 4 --duration 20 --json --no-metrics --flows-out /tmp/flows.jsonl >/tmp/nf.json 2>/tmp/nf.log &
nf=$!
i=0
while ! grep -q 'steered by the NIC' /tmp/nf.log; do
    kill -0 $nf 2>/dev/null || break
    i=$((i + 1))
    [ $i -gt 300 ] && break
    usleep 100000
done
# The workers start after the program is attached (frames before them go
# to the stack), as on veth.
sleep 1
echo @@nf-up@@
wait $nf
echo nf-exit=$?
step nf-json cat /tmp/nf.json
step nf-log cat /tmp/nf.log
step flows cat /tmp/flows.jsonl
step table-after ethtool -x eth0
step saved ls /run/rsspp/eth0
rsspp nf --in eth0 --cpus 0,1 --backend afxdp --mode hardware --churn 4 --duration 30 >/tmp/killed.log 2>&1 &
k=$!
i=0
while [ ! -e /run/rsspp/eth0/original-table ]; do
    i=$((i + 1))
    [ $i -gt 100 ] && break
    usleep 100000
done
sleep 1
kill -9 $k
wait $k
step link-killed ip link show eth0
step table-killed ethtool -x eth0
step detach-killed rsspp detach --iface eth0
step table-detached ethtool -x eth0
step saved-detached ls /run/rsspp/eth0/original-table
step channels-1 ethtool -L eth0 combined 1
step one-queue rsspp nf --in eth0 --cpus 0,1 --backend afxdp --mode hardware --duration 1
step link-after ip link show eth0
";

/// The trace: FLOWS flows in turn, PER_FLOW frames each, to the guest's
/// MAC.
fn write_trace(path: &Path) {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        if v == 0x0004_0002 {
            out.extend_from_slice(&2u16.to_le_bytes());
            out.extend_from_slice(&4u16.to_le_bytes());
        } else {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut i = 0u64;
    for seq in 0..PER_FLOW {
        for flow in 0..FLOWS {
            let f = daemon_udp::frame(guest::MAC, [0x02, 0, 0, 0, 0, 1], flow, seq);
            let us = i * 1_000_000 / u64::from(PPS);
            for v in [(us / 1_000_000) as u32, (us % 1_000_000) as u32, 60, 60] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&f);
            i += 1;
        }
    }
    std::fs::write(path, out).unwrap();
}

/// Per flow (the number in the payload), the sequence numbers captured, in
/// order.
fn captured(path: &Path) -> HashMap<u32, Vec<u32>> {
    let bytes = std::fs::read(path).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut flows: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32_at(at + 8) as usize;
        let f = &bytes[at + 16..at + 16 + caplen];
        at += 16 + caplen;
        if f.len() >= 50 && f[12..14] == [0x08, 0x00] && f[23] == 17 {
            let flow = u32::from_be_bytes(f[42..46].try_into().unwrap());
            let seq = u32::from_be_bytes(f[46..50].try_into().unwrap());
            flows.entry(flow).or_default().push(seq);
        }
    }
    flows
}

/// The indirection table of an `ethtool -x` listing.
fn table(listing: &str) -> Vec<u32> {
    listing
        .lines()
        .filter_map(|l| l.trim().split_once(':'))
        .filter(|(at, _)| at.trim().parse::<u32>().is_ok())
        .flat_map(|(_, rest)| {
            rest.split_whitespace()
                .map_while(|w| w.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn hardware_mode_moves_buckets_in_the_nic_in_order_with_their_state() {
    in_a_guest(true);
}

/// The same with the NIC's hash not given to XDP (`rxhash off`): the
/// program and the workers bucket with Toeplitz under the NIC's key.
#[test]
fn hardware_mode_without_the_nics_hash_buckets_with_toeplitz() {
    in_a_guest(false);
}

/// One guest at a time: two emulated guests on a 2-CPU host would stall
/// each other's CPUs (and so the fences' assumption) for the test's sake.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The run above, `rx_hash`: the NIC's rx-hashing feature on.
fn in_a_guest(rx_hash: bool) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: the guest's tap needs root (CI runs as root)");
        return;
    }
    let Some(env) = guest::GuestEnv::find_or_skip() else {
        return;
    };
    let dir = Scratch::new(&format!("nf-guest-{rx_hash}"));
    let trace = dir.0.join("trace.pcap");
    let capture = dir.0.join("out.pcap");
    write_trace(&trace);

    let onoff = if rx_hash { "on" } else { "off" };
    let mut spec = guest::GuestSpec::new(format!("RXHASH={onoff}\n{SCRIPT}"));
    spec.queues = 2;
    spec.cpus = 2;
    spec.out_nic = true;
    spec.timeout = std::time::Duration::from_secs(240);
    let out = match attempt(&env, &spec, &trace, &capture) {
        Ok(out) => out,
        // Once, a guest stopped before its script's end (its console was
        // not kept); should it happen again, this says what it printed.
        Err(e @ guest::GuestError::Exited { .. }) => {
            eprintln!("the guest stopped before its script ended; once more:\n{e}");
            attempt(&env, &spec, &trace, &capture).unwrap()
        }
        Err(e) => panic!("{e}"),
    };

    let log = &out.step("nf-log").output;
    assert!(
        out.console.contains("nf-exit=0"),
        "rsspp nf failed:\n{log}\n{}",
        out.console
    );
    let json = &out.step("nf-json").output;
    let s: serde_json::Value =
        serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("summary: {e}: {json}\n{log}"));
    eprintln!("hardware mode: {s}");
    assert_eq!(
        out.step("rxhash").status,
        0,
        "{}",
        out.step("rxhash").output
    );
    let sent = u64::from(FLOWS * PER_FLOW);
    let got = captured(&capture);
    let late: usize = (0..FLOWS)
        .map(|f| {
            let seqs = got.get(&f).cloned().unwrap_or_default();
            seqs.windows(2).filter(|w| w[1] < w[0]).count()
        })
        .sum();
    eprintln!("reordered at the host: {late}");
    assert_eq!(s["received"].as_u64(), Some(sent), "{s}\n{log}");
    assert_eq!(s["forwarded"].as_u64(), Some(sent), "{s}\n{log}");
    assert!(s["migrations"].as_u64().unwrap() >= 100, "{s}");
    assert_eq!(s["handoffs"]["early"], 0, "{s}\n{log}");
    assert_eq!(s["fences"]["late_frames"], 0, "{s}\n{log}");
    // With rx-hashing on, the guest's virtio-net hands the NIC's hash
    // over (hash=on; Linux 6.12's virtnet_xdp_rx_hash) and every frame is
    // bucketed by it; off, by Toeplitz in XDP and in the worker.
    let (nic, toeplitz) = if rx_hash { (sent, 0) } else { (0, sent) };
    assert_eq!(
        s["bucketed_by"]["nic_hash"].as_u64(),
        Some(nic),
        "{s}\n{log}"
    );
    assert_eq!(
        s["bucketed_by"]["toeplitz"].as_u64(),
        Some(toeplitz),
        "{s}\n{log}"
    );
    for w in s["workers"].as_array().unwrap() {
        assert_eq!(w["stateless"], 0, "a frame ran without its state: {s}");
        assert_eq!(w["overshot"], 0, "marks and counts agree: {s}");
        assert!(
            w["received"].as_u64().unwrap() > sent / 10,
            "both queues carry frames: {s}"
        );
    }
    // The monitor: one record per flow, all its frames.
    let mut monitor: BTreeMap<u16, Vec<u64>> = BTreeMap::new();
    for line in out.step("flows").output.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        monitor
            .entry(v["sport"].as_u64().unwrap() as u16)
            .or_default()
            .push(v["packets"].as_u64().unwrap());
    }
    for flow in 0..FLOWS {
        let (_, sport) = daemon_udp::source(flow);
        assert_eq!(
            monitor.get(&sport),
            Some(&vec![u64::from(PER_FLOW)]),
            "flow {flow}: one record of all its frames\n{s}"
        );
    }
    // At the host: every frame once, every flow in order.
    for flow in 0..FLOWS {
        let seqs = got.get(&flow).cloned().unwrap_or_default();
        assert!(
            seqs.iter().copied().eq(0..PER_FLOW),
            "flow {flow} came out as {seqs:?}\n{s}"
        );
    }
    // The NIC's table as before, nothing left saved.
    let before = table(&out.step("table-before").output);
    assert!(!before.is_empty(), "{}", out.step("table-before").output);
    assert_eq!(table(&out.step("table-after").output), before);
    assert_ne!(out.step("saved").status, 0, "{}", out.step("saved").output);

    // Killed with SIGKILL: the BPF link went with it (no XDP program
    // left), the table it had written stays, and `rsspp detach` puts the
    // saved original back.
    assert!(
        !out.step("link-killed").output.contains("xdp"),
        "{}",
        out.step("link-killed").output
    );
    assert_ne!(
        table(&out.step("table-killed").output),
        before,
        "the killed run had moved buckets"
    );
    assert_eq!(
        out.step("detach-killed").status,
        0,
        "{}",
        out.step("detach-killed").output
    );
    assert_eq!(table(&out.step("table-detached").output), before);
    assert_ne!(out.step("saved-detached").status, 0);

    // Fewer queues than workers: one line, exit 1, nothing attached.
    assert_eq!(
        out.step("channels-1").status,
        0,
        "{}",
        out.step("channels-1").output
    );
    let refused = out.step("one-queue");
    assert_eq!(refused.status, 1, "{}", refused.output);
    assert!(
        refused.output.trim_end().ends_with(
            "rsspp: error: eth0 has 1 receive queue: hardware mode needs one per worker (2)"
        ),
        "{}",
        refused.output
    );
    assert!(
        !out.step("link-after").output.contains("xdp"),
        "{}",
        out.step("link-after").output
    );
}

/// Boots the guest of `spec`, replays `trace` into it once its `rsspp nf`
/// is up, records `eth1`'s frames into `capture`, and waits for the end.
fn attempt(
    env: &guest::GuestEnv,
    spec: &guest::GuestSpec,
    trace: &Path,
    capture: &Path,
) -> Result<guest::GuestOutput, guest::GuestError> {
    let mut g = guest::Guest::boot(env, spec)?;
    g.wait_for(guest::READY)?;
    // Nothing but the test's frames: no IPv6 of the host's own on the taps.
    let sysctl = Command::new("ip")
        .args(["netns", "exec", g.netns(), "sysctl", "-qw"])
        .args([
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])
        .status()
        .unwrap();
    assert!(sysctl.success());
    g.host_tap_up()?;
    g.host_tap_out_up()?;
    let mut tcpdump = Reaped(Some(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                g.netns(),
                "tcpdump",
                "-i",
                g.tap_out(),
                "-n",
            ])
            .args(["-Q", "in", "-B", "65536", "-U", "-w"])
            .arg(capture)
            .arg("udp")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (scripts/test-deps installs it)"),
    ));
    g.wait_for("@@nf-up@@")?;
    nf_common::replay(
        g.netns(),
        g.tap(),
        false,
        &["--pps", &PPS.to_string()],
        trace,
    );
    let out = g.finish()?;
    tcpdump.stop_capture();
    Ok(out)
}
