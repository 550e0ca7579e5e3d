//! `rsspp nic` and the daemon's hardware mode (`rsspp run --mode hardware`)
//! against a NIC whose indirection table is writable: a QEMU guest's
//! multi-queue virtio-net device with RSS on. The table rsspp writes is the
//! one `ethtool -x` reads back in the guest; refused writes leave it as it
//! was; the daemon puts the NIC's table back on exit unless `--keep`; a
//! daemon killed with SIGKILL leaves its table and the original it saved,
//! which `rsspp detach` puts back; a driver-default original goes back by a
//! reset, after which `ethtool -L` may change the queues again (an explicit
//! table, even one with the default's entries, forbids it). Needs root (CI
//! runs as root) and QEMU; see `guest/mod.rs`. One boot for all.

mod guest;

use rsspp_core::IndirectionTable;
use serde_json::Value;

const SCRIPT: &str = "\
started() {
    echo pid=$1
    i=0
    while [ ! -e /run/rsspp/eth0/state ]; do
        kill -0 $1 || return 1
        i=$((i + 1))
        [ $i -gt 600 ] && return 2
        usleep 100000
    done
}
kill9() { kill -9 $1; wait $1; }
step ethtool-default ethtool -x eth0
rsspp run --iface eth0 --mode hardware --cpus 0,3 --xdp-mode skb --no-metrics --duration 30 >/tmp/killed.log 2>&1 &
killed=$!
step killed-started started $killed
step status-running rsspp status --iface eth0
step ethtool-running ethtool -x eth0
step kill-9 kill9 $killed
step killed-log cat /tmp/killed.log
step ethtool-killed ethtool -x eth0
step saved-original cat /run/rsspp/eth0/original-table
step status-killed rsspp status --iface eth0
step status-killed-json rsspp status --iface eth0 --json
step channels-2-killed ethtool -L eth0 combined 2
step detach rsspp detach --iface eth0
step ethtool-detached ethtool -x eth0
step run-dir-detached find /run/rsspp
step channels-2-detached ethtool -L eth0 combined 2
step ethtool-2-detached ethtool -x eth0
step channels-4-detached ethtool -L eth0 combined 4
step ethtool-before-run-default ethtool -x eth0
step run-default rsspp run --iface eth0 --mode hardware --cpus 0,1 --xdp-mode skb --no-metrics --duration 1
step ethtool-run-default ethtool -x eth0
step channels-2-run-default ethtool -L eth0 combined 2
step channels-4-run-default ethtool -L eth0 combined 4
step ethtool-before ethtool -x eth0
step show-before rsspp nic show eth0
step set-equal rsspp nic set eth0 --equal 1,3
step ethtool-equal ethtool -x eth0
step json rsspp nic show eth0 --json
step kernel uname -r
step show-context rsspp nic show eth0 --context 1
step run-context rsspp run --iface eth0 --mode hardware --context 1 --cpus 0,1 --xdp-mode skb --no-metrics --duration 0.5
step set-out-of-range rsspp nic set eth0 --equal 0,4
step set-unprivileged su -s /bin/sh nobody -c '/usr/bin/rsspp nic set eth0 --equal 0'
step ethtool-after-refusals ethtool -x eth0
step set-weights rsspp nic set eth0 --weights 1,0,0,3
step ethtool-weights ethtool -x eth0
step run-keep rsspp run --iface eth0 --mode hardware --cpus 1,3 --xdp-mode skb --no-metrics --duration 1 --keep
step ethtool-run-keep ethtool -x eth0
step run-restore rsspp run --iface eth0 --mode hardware --cpus 0,2 --xdp-mode skb --no-metrics --duration 1
step ethtool-run-restore ethtool -x eth0
step run-bad-queue rsspp run --iface eth0 --mode hardware --cpus 0,5 --xdp-mode skb --no-metrics --duration 1
step run-final rsspp run --iface eth0 --mode hardware --cpus 0,1 --xdp-mode skb --no-metrics --duration 0.5
step ethtool-run-final ethtool -x eth0
step set-default-entries rsspp nic set eth0 --equal 0,1,2,3
step ethtool-default-entries ethtool -x eth0
step channels-2-user-set ethtool -L eth0 combined 2
step reset ethtool -X eth0 default
step channels-2-reset ethtool -L eth0 combined 2
";

/// The ring count and the table of an `ethtool -x eth0` listing (or of
/// `rsspp nic show`, which prints the same layout).
fn parse_table(listing: &str) -> (u32, Vec<u32>) {
    let header = "RX flow hash indirection table for eth0 with ";
    let mut lines = listing.lines().skip_while(|l| !l.starts_with(header));
    let rings = lines
        .next()
        .and_then(|l| l[header.len()..].split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no table header in:\n{listing}"));
    let mut table = Vec::new();
    for line in lines {
        // Rows are "  INDEX:  Q Q Q …"; the key's header ends the table.
        let Some((index, entries)) = line.trim_start().split_once(':') else {
            break;
        };
        let Ok(index) = index.parse::<usize>() else {
            break;
        };
        assert_eq!(index, table.len(), "row numbering in:\n{listing}");
        table.extend(entries.split_whitespace().map(|e| {
            e.parse::<u32>()
                .unwrap_or_else(|_| panic!("entry {e:?} in:\n{listing}"))
        }));
    }
    (rings, table)
}

/// The line after "RSS hash key:".
fn key_line(listing: &str) -> &str {
    let mut lines = listing.lines().skip_while(|l| *l != "RSS hash key:");
    lines.next();
    lines
        .next()
        .unwrap_or_else(|| panic!("no key in:\n{listing}"))
}

fn as_u32(table: &IndirectionTable) -> Vec<u32> {
    table.entries().iter().map(|&q| q as u32).collect()
}

#[test]
fn the_table_rsspp_writes_is_the_one_ethtool_reads() {
    let Some(env) = guest::GuestEnv::find_or_skip() else {
        return;
    };
    let out = guest::run(&env, &guest::GuestSpec::new(SCRIPT)).unwrap_or_else(|e| panic!("{e}"));
    let step = |name: &str, status: i32| {
        let s = out.step(name);
        assert_eq!(s.status, status, "step {name}:\n{}", s.output);
        s.output.as_str()
    };
    let fails = |name: &str| {
        let s = out.step(name);
        assert_ne!(s.status, 0, "step {name} should fail:\n{}", s.output);
        s.output.as_str()
    };

    // The driver's default table: entry i -> queue i mod 4.
    let (rings, default) = parse_table(step("ethtool-default", 0));
    assert_eq!(rings, 4, "ethtool -L eth0 combined 4 in /init");
    let size = default.len();
    assert!(
        size >= 64 && size.is_power_of_two(),
        "table of {size} entries"
    );
    assert_eq!(default, default_table(size, 4));

    // A daemon killed with SIGKILL mid-run, its table in the NIC (over
    // queues 0 and 3: naming queue 3, it holds the NIC to four queues).
    let started = out.step("killed-started");
    assert_eq!(
        started.status,
        0,
        "the daemon did not start:\n{}\ndaemon log:\n{}",
        started.output,
        out.step("killed-log").output
    );
    let started = started.output.as_str();
    let pid: u32 = started
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in:\n{started}"));
    let running = step("status-running", 0);
    assert!(
        running.contains("eth0: xdp_rsspp_")
            && running.contains("hardware steering")
            && running.contains(&format!("held by rsspp run, pid {pid}")),
        "{running}"
    );
    let ours = as_u32(&IndirectionTable::equal_over(size, &[0, 3]).unwrap());
    assert_eq!(parse_table(step("ethtool-running", 0)), (4, ours.clone()));
    step("kill-9", 137);
    // The kill left the NIC with the daemon's table, not the original ...
    assert_eq!(
        parse_table(step("ethtool-killed", 0)),
        (4, ours),
        "daemon log:\n{}",
        out.step("killed-log").output
    );
    // ... and the original saved beside its state file, with its pid.
    let saved = step("saved-original", 0);
    let field = |key: &str| {
        saved
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in:\n{saved}"))
    };
    assert_eq!(field("pid"), pid.to_string(), "{saved}");
    // virtio-net has no ntuple rules: none were written, none listed.
    assert_eq!(field("rules"), "", "{saved}");
    let saved_table: Vec<u32> = field("table")
        .split(',')
        .map(|q| q.parse().unwrap())
        .collect();
    assert_eq!(saved_table, default, "{saved}");
    // Its BPF link went with the process: nothing is attached any more,
    // and `rsspp status` says whose table is left in the NIC.
    assert_eq!(
        step("status-killed", 0),
        format!(
            "no rsspp program attached\n\
             eth0: the NIC's table is the one rsspp run (pid {pid}, no longer running) wrote: \
             `rsspp detach --iface eth0` puts the original back\n"
        )
    );
    let json: Value =
        serde_json::from_str(step("status-killed-json", 0)).expect("rsspp status --json");
    assert_eq!(
        json,
        serde_json::json!({
            "attached": [],
            "stale_pins": [],
            "left_tables": [{"iface": "eth0", "pid": pid, "context": 0, "ntuple_rules": []}],
        })
    );
    // The dead daemon's table counts as the user's and names queue 3: the
    // kernel refuses fewer queues than that.
    // (6.1 ends the message with "settings", 6.12 with the highest queue named.)
    let too_few = "requested channel counts are too low for existing indirection table";
    let refusal = fails("channels-2-killed");
    assert!(refusal.contains(too_few), "{refusal}");

    // `rsspp detach`: no program to remove, but the saved original is put
    // back, by a reset (it is the driver's default) ...
    let detached = step("detach", 0);
    assert_eq!(
        detached,
        format!(
            "eth0: no rsspp program attached\n\
             eth0: put back the NIC's original table (saved by rsspp run, pid {pid})\n"
        )
    );
    assert_eq!(
        parse_table(step("ethtool-detached", 0)),
        (4, default.clone())
    );
    // ... and forgotten, with the dead daemon's state file.
    assert_eq!(step("run-dir-detached", 0), "/run/rsspp\n");
    // The table is no longer the user's: the queues may change again.
    // (Debian's 6.1 virtio_net keeps its default table of four queues on
    // two: only the ring count is checked.)
    step("channels-2-detached", 0);
    assert_eq!(parse_table(step("ethtool-2-detached", 0)).0, 2);
    step("channels-4-detached", 0);

    // A run that ends normally puts the default back by a reset too.
    assert_eq!(
        parse_table(step("ethtool-before-run-default", 0)),
        (4, default.clone())
    );
    step("run-default", 0);
    assert_eq!(
        parse_table(step("ethtool-run-default", 0)),
        (4, default.clone())
    );
    step("channels-2-run-default", 0);
    step("channels-4-run-default", 0);

    // `rsspp nic show` reads what ethtool reads, in the same layout.
    let before = step("ethtool-before", 0);
    let shown = step("show-before", 0);
    assert_eq!(parse_table(shown), parse_table(before));
    assert_eq!(key_line(shown), key_line(before));
    let (rings, initial) = parse_table(before);
    assert_eq!((rings, &initial), (4, &default), "back to 4 queues");

    // --equal 1,3: buckets alternate between queues 1 and 3.
    assert!(step("set-equal", 0).starts_with("eth0: wrote a"));
    let equal = as_u32(&IndirectionTable::equal_over(size, &[1, 3]).unwrap());
    assert_eq!(parse_table(step("ethtool-equal", 0)), (4, equal.clone()));
    assert_ne!(equal, initial, "the write must change the table");

    let json: Value = serde_json::from_str(step("json", 0).trim()).expect("rsspp nic show --json");
    assert_eq!(json["iface"], "eth0");
    assert_eq!(json["rx_queues"], 4);
    assert_eq!(json["table_size"], size);
    assert_eq!(json["indirection"], serde_json::json!(equal));
    assert_eq!(json["hfunc"], "toeplitz");
    assert_eq!(json["key"], key_line(before));
    assert_eq!(json["context"], 0);
    // How the table is read and written follows the guest's kernel:
    // ethtool netlink's RSS_GET from 6.2, RSS_SET from 6.17.
    let kernel = step("kernel", 0).trim();
    let mut version = kernel
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (version.next().unwrap_or(0), version.next().unwrap_or(0));
    let how = json["ethtool"].as_str().expect("\"ethtool\" in the JSON");
    let expected = if (major, minor) >= (6, 17) {
        "ethtool netlink (ETHTOOL_MSG_RSS_GET/RSS_SET)"
    } else if (major, minor) >= (6, 2) {
        "ethtool netlink to read, the ioctls to write"
    } else {
        "the ethtool ioctls"
    };
    assert!(how.starts_with(expected), "kernel {kernel}: {how}");
    // Each queue's CPU is its interrupt's, found by the kernel's link or
    // by the interrupt's name.
    for q in json["queues"].as_array().expect("queues") {
        assert!(
            matches!(q["irq_found_by"].as_str(), Some("netdev" | "name")),
            "{q}"
        );
        assert_eq!(q["irq_cpus"], serde_json::json!([q["cpu"]]), "{q}");
    }
    // virtio-net has no RSS context but its main table: refused, named,
    // by `rsspp nic` and by the daemon, before anything is attached.
    let no_contexts = "eth0: the driver has no additional RSS contexts (asked for context 1)";
    assert!(step("show-context", 1).contains(no_contexts));
    assert!(step("run-context", 1).contains(no_contexts));

    // Refused writes name the problem and leave the table alone.
    assert!(
        step("set-out-of-range", 1)
            .contains("eth0: queue 4 is out of range: the device has 4 RX queue(s) (0 to 3)"),
        "{}",
        out.step("set-out-of-range").output
    );
    let eperm = step("set-unprivileged", 1);
    assert!(
        eperm.contains("eth0: ETHTOOL_SRSSH needs CAP_NET_ADMIN (EPERM"),
        "{eperm}"
    );
    assert_eq!(parse_table(step("ethtool-after-refusals", 0)), (4, equal));

    // --weights 1,0,0,3: a quarter of the buckets on queue 0, the rest on 3.
    step("set-weights", 0);
    let weighted = as_u32(&IndirectionTable::weighted(size, &[1, 0, 0, 3]).unwrap());
    assert_eq!(
        parse_table(step("ethtool-weights", 0)),
        (4, weighted.clone())
    );

    // The daemon in hardware mode writes the equal table over its queues;
    // --keep leaves it in the NIC.
    let log = step("run-keep", 0);
    assert!(log.contains("left the last table in the NIC"), "{log}");
    // virtio-net has no ntuple rules: elephants stay with their buckets,
    // and the log says why.
    assert!(
        log.contains("eth0: the driver has no ntuple rules (ETHTOOL_GRXCLSRLCNT: ")
            && log.contains("per-flow overrides (--elephants) off, balancing buckets only"),
        "{log}"
    );
    let kept = as_u32(&IndirectionTable::equal_over(size, &[1, 3]).unwrap());
    assert_eq!(parse_table(step("ethtool-run-keep", 0)), (4, kept.clone()));
    // The kept run left the original it found (the weighted table) saved:
    // the next run, without --keep, puts that back rather than the table
    // the kept run left.
    let log = step("run-restore", 0);
    assert!(
        log.contains(
            "that did not put the original back: the original it saved will be put back on exit"
        ),
        "{log}"
    );
    assert_eq!(
        parse_table(step("ethtool-run-restore", 0)),
        (4, weighted.clone())
    );
    // A queue the NIC does not have: refused, named.
    let refused = step("run-bad-queue", 1);
    assert!(
        refused.contains("eth0 has 4 receive queues (0 to 3); queue 5 does not exist"),
        "{refused}"
    );
    // No program left attached by any of the runs: another one would be
    // refused ("another XDP program … is attached"). Without --keep the
    // NIC gets back the table it had before the run.
    step("run-final", 0);
    assert_eq!(parse_table(step("ethtool-run-final", 0)), (4, weighted));

    // The default's entries written as a table of the user's: the kernel
    // holds the NIC to them (queue 3 is named) and refuses two queues; the
    // same entries put back by a reset do not. This is why the daemon and
    // `rsspp detach` put a default original back by a reset.
    step("set-default-entries", 0);
    assert_eq!(
        parse_table(step("ethtool-default-entries", 0)),
        (4, default)
    );
    let refusal = fails("channels-2-user-set");
    assert!(refusal.contains(too_few), "{refusal}");
    step("reset", 0);
    step("channels-2-reset", 0);
}

/// The driver's default table: entry `i` -> queue `i mod queues`.
fn default_table(size: usize, queues: u32) -> Vec<u32> {
    (0..size as u32).map(|i| i % queues).collect()
}
