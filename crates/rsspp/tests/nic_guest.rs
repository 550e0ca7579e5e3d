//! `rsspp nic` and the daemon's hardware mode (`rsspp run --mode hardware`)
//! against a NIC whose indirection table is writable: a QEMU guest's
//! multi-queue virtio-net device with RSS on. The table rsspp writes is the
//! one `ethtool -x` reads back in the guest; refused writes leave it as it
//! was; the daemon puts the NIC's table back on exit unless `--keep`. Needs
//! root (CI runs as root) and QEMU; see `guest/mod.rs`. One boot for all.

mod guest;

use rsspp_core::IndirectionTable;
use serde_json::Value;

const SCRIPT: &str = "\
step ethtool-before ethtool -x eth0
step show-before rsspp nic show eth0
step set-equal rsspp nic set eth0 --equal 1,3
step ethtool-equal ethtool -x eth0
step json rsspp nic show eth0 --json
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

    // `rsspp nic show` reads what ethtool reads, in the same layout.
    let before = step("ethtool-before", 0);
    let shown = step("show-before", 0);
    assert_eq!(parse_table(shown), parse_table(before));
    assert_eq!(key_line(shown), key_line(before));
    let (rings, initial) = parse_table(before);
    assert_eq!(rings, 4, "ethtool -L eth0 combined 4 in /init");
    let size = initial.len();
    assert!(
        size >= 64 && size.is_power_of_two(),
        "table of {size} entries"
    );

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
    let kept = as_u32(&IndirectionTable::equal_over(size, &[1, 3]).unwrap());
    assert_eq!(parse_table(step("ethtool-run-keep", 0)), (4, kept));
    // The next run puts back the table the NIC had before rsspp wrote its
    // own (saved under /run/rsspp by the --keep run), not the kept one.
    step("run-restore", 0);
    assert_eq!(parse_table(step("ethtool-run-restore", 0)), (4, weighted));
    // A queue the NIC does not have: refused, named.
    let refused = step("run-bad-queue", 1);
    assert!(
        refused.contains("eth0 has 4 receive queues (0 to 3); queue 5 does not exist"),
        "{refused}"
    );
    // No program left attached by any of the runs: another one would be
    // refused ("another XDP program … is attached").
    step("run-final", 0);
}
