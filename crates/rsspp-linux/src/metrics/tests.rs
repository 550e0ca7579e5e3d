use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;

fn snapshot() -> MetricsSnapshot {
    let mut s = MetricsSnapshot::new("veth-rsspp0", "software");
    s.cpus = vec![
        CpuMetrics {
            cpu: 0,
            load: 0.25,
            packets_total: 1000,
            dropped: vec![("cpumap_full".into(), 0)],
        },
        CpuMetrics {
            cpu: 3,
            load: 1.0,
            packets_total: 250_000,
            dropped: vec![("cpumap_full".into(), 0)],
        },
    ];
    s.buckets = (0..8u32)
        .map(|i| BucketMetrics {
            packets_total: u64::from(i) * 10,
            cpu: if i % 2 == 0 { 0 } else { 3 },
        })
        .collect();
    s.packets_by_kind = vec![("not_ip", 0), ("malformed", 0), ("redirect_failed", 0)];
    s.imbalance_ratio = 249.0;
    s.migrations_total = 7;
    s.overrides = Some(2);
    s.elephants_moved_total = 3;
    s.reframer = Some(ReframerMetrics {
        buffered_total: 900,
        held: 12,
        flush_timeout: 40,
        flush_burst: 3,
        flush_bypass: 2,
        flush_early: 1,
        slf_in: 1.25,
        slf_out: 9.5,
    });
    s.rounds_total = 42;
    s.interval_seconds = 0.1;
    for us in [0.5, 3.0, 3.0, 40.0, 20_000.0] {
        s.rebalance_seconds
            .observe_duration(Duration::from_secs_f64(us * 1e-6));
    }
    s
}

/// `# TYPE` of every family, and the samples in order of appearance.
fn parse(text: &str) -> (HashMap<String, String>, Vec<(String, String)>) {
    let mut types = HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "{name} typed twice"
            );
        } else if !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').unwrap();
            samples.push((series.to_string(), value.to_string()));
        }
    }
    (types, samples)
}

fn value_of<'a>(samples: &'a [(String, String)], series: &str) -> &'a str {
    &samples
        .iter()
        .find(|(s, _)| s == series)
        .unwrap_or_else(|| panic!("no series {series}"))
        .1
}

#[test]
fn every_family_has_help_and_the_right_type() {
    let text = render(&snapshot());
    let (types, _) = parse(&text);
    let expected = [
        (names::INFO, "gauge"),
        (names::CPU_LOAD, "gauge"),
        (names::CPU_PACKETS_TOTAL, "counter"),
        (names::BUCKET_PACKETS_TOTAL, "counter"),
        (names::BUCKET_CPU, "gauge"),
        (names::IMBALANCE_RATIO, "gauge"),
        (names::MIGRATIONS_TOTAL, "counter"),
        (names::DROPPED_PACKETS_TOTAL, "counter"),
        (names::PACKETS_TOTAL, "counter"),
        (names::HANDOFFS_PENDING, "gauge"),
        (names::HANDOFFS_TOTAL, "counter"),
        (names::ROUNDS_TOTAL, "counter"),
        (names::INTERVAL_SECONDS, "gauge"),
        (names::REBALANCE_SECONDS, "histogram"),
        (names::OVERRIDES, "gauge"),
        (names::ELEPHANTS_MOVED_TOTAL, "counter"),
        (names::REFRAMER_BUFFERED_TOTAL, "counter"),
        (names::REFRAMER_HELD, "gauge"),
        (names::REFRAMER_FLUSHES_TOTAL, "counter"),
        (names::REFRAMER_SLF, "gauge"),
    ];
    assert_eq!(types.len(), expected.len());
    for (name, kind) in expected {
        assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
        let help = text.find(&format!("# HELP {name} ")).unwrap();
        let ty = text.find(&format!("# TYPE {name} ")).unwrap();
        let first_sample = text.find(&format!("\n{name}")).unwrap();
        assert!(
            help < ty && ty < first_sample,
            "{name}: HELP, TYPE, samples"
        );
    }
}

#[test]
fn per_cpu_and_per_bucket_series_carry_their_label() {
    let mut s = snapshot();
    s.cpus[1].dropped = vec![("cpumap_full".into(), 17)];
    s.packets_by_kind = vec![("not_ip", 0), ("malformed", 2)];
    s.handoffs_pending = 3;
    s.handoffs.forced = 1;
    let (_, samples) = parse(&render(&s));
    const IF: &str = "iface=\"veth-rsspp0\"";
    assert_eq!(
        value_of(&samples, &format!("rsspp_cpu_load{{{IF},cpu=\"0\"}}")),
        "0.25"
    );
    assert_eq!(
        value_of(&samples, &format!("rsspp_cpu_load{{{IF},cpu=\"3\"}}")),
        "1"
    );
    assert_eq!(
        value_of(
            &samples,
            &format!("rsspp_cpu_packets_total{{{IF},cpu=\"3\"}}")
        ),
        "250000"
    );
    assert_eq!(
        value_of(
            &samples,
            &format!("rsspp_dropped_packets_total{{{IF},cpu=\"3\",reason=\"cpumap_full\"}}")
        ),
        "17"
    );
    assert_eq!(
        value_of(
            &samples,
            &format!("rsspp_packets_total{{{IF},kind=\"malformed\"}}")
        ),
        "2"
    );
    assert_eq!(
        value_of(&samples, &format!("rsspp_handoffs_pending{{{IF}}}")),
        "3"
    );
    assert_eq!(
        value_of(
            &samples,
            &format!("rsspp_handoffs_total{{{IF},outcome=\"forced\"}}")
        ),
        "1"
    );
    for b in 0..8 {
        assert_eq!(
            value_of(
                &samples,
                &format!("rsspp_bucket_packets_total{{{IF},bucket=\"{b}\"}}")
            ),
            (b * 10).to_string()
        );
        assert_eq!(
            value_of(
                &samples,
                &format!("rsspp_bucket_cpu{{{IF},bucket=\"{b}\"}}")
            ),
            if b % 2 == 0 { "0" } else { "3" }
        );
    }
    // Every series names the interface.
    assert!(
        samples.iter().all(|(series, _)| series.contains(IF)),
        "{samples:?}"
    );
    assert_eq!(
        samples
            .iter()
            .filter(|(s, _)| s.starts_with("rsspp_bucket_cpu{"))
            .count(),
        8
    );
    assert_eq!(
        value_of(&samples, &format!("rsspp_imbalance_ratio{{{IF}}}")),
        "249"
    );
    assert_eq!(
        value_of(&samples, &format!("rsspp_migrations_total{{{IF}}}")),
        "7"
    );
    assert_eq!(
        value_of(&samples, &format!("rsspp_rounds_total{{{IF}}}")),
        "42"
    );
    assert_eq!(
        value_of(
            &samples,
            "rsspp_info{iface=\"veth-rsspp0\",mode=\"software\"}"
        ),
        "1"
    );
}

#[test]
fn override_series_only_with_overrides() {
    const IF: &str = "iface=\"veth-rsspp0\"";
    let (_, samples) = parse(&render(&snapshot()));
    assert_eq!(
        value_of(&samples, &format!("{}{{{IF}}}", names::OVERRIDES)),
        "2"
    );
    assert_eq!(
        value_of(
            &samples,
            &format!("{}{{{IF}}}", names::ELEPHANTS_MOVED_TOTAL)
        ),
        "3"
    );
    let text = render(&MetricsSnapshot::new("lo", "hardware"));
    assert!(!text.contains(names::OVERRIDES), "{text}");
}

#[test]
fn reframer_series_only_with_a_reframer() {
    const IF: &str = "iface=\"veth-rsspp0\"";
    let (_, samples) = parse(&render(&snapshot()));
    for (series, v) in [
        (format!("{}{{{IF}}}", names::REFRAMER_BUFFERED_TOTAL), "900"),
        (format!("{}{{{IF}}}", names::REFRAMER_HELD), "12"),
        (
            format!(
                "{}{{{IF},reason=\"timeout\"}}",
                names::REFRAMER_FLUSHES_TOTAL
            ),
            "40",
        ),
        (
            format!("{}{{{IF},reason=\"burst\"}}", names::REFRAMER_FLUSHES_TOTAL),
            "3",
        ),
        (
            format!(
                "{}{{{IF},reason=\"bypass\"}}",
                names::REFRAMER_FLUSHES_TOTAL
            ),
            "2",
        ),
        (
            format!("{}{{{IF},reason=\"early\"}}", names::REFRAMER_FLUSHES_TOTAL),
            "1",
        ),
        (
            format!("{}{{{IF},stream=\"in\"}}", names::REFRAMER_SLF),
            "1.25",
        ),
        (
            format!("{}{{{IF},stream=\"out\"}}", names::REFRAMER_SLF),
            "9.5",
        ),
    ] {
        assert_eq!(value_of(&samples, &series), v, "{series}");
    }
    let text = render(&MetricsSnapshot::new("lo", "afpacket"));
    assert!(!text.contains("rsspp_reframer"), "{text}");
}

#[test]
fn histogram_buckets_are_cumulative_and_end_at_inf() {
    let (_, samples) = parse(&render(&snapshot()));
    let buckets: Vec<(String, u64)> = samples
        .iter()
        .filter_map(|(s, v)| {
            let le =
                s.strip_prefix("rsspp_rebalance_seconds_bucket{iface=\"veth-rsspp0\",le=\"")?;
            Some((le.trim_end_matches("\"}").to_string(), v.parse().unwrap()))
        })
        .collect();
    assert_eq!(buckets.len(), REBALANCE_BOUNDS.len() + 1);
    assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 5));
    for ((le, _), bound) in buckets.iter().zip(REBALANCE_BOUNDS) {
        assert_eq!(le.parse::<f64>().unwrap(), *bound);
    }
    // 0.5 µs ≤ 1 µs; two of 3 µs ≤ 5 µs; 40 µs ≤ 50 µs; 20 ms only in +Inf.
    let count = |le: &str| buckets.iter().find(|(l, _)| l == le).unwrap().1;
    assert_eq!(count("0.000001"), 1);
    assert_eq!(count("0.0000025"), 1);
    assert_eq!(count("0.000005"), 3);
    assert_eq!(count("0.00005"), 4);
    assert_eq!(count("0.01"), 4);
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1));
    assert_eq!(
        value_of(
            &samples,
            "rsspp_rebalance_seconds_count{iface=\"veth-rsspp0\"}"
        ),
        "5"
    );
    let sum: f64 = value_of(
        &samples,
        "rsspp_rebalance_seconds_sum{iface=\"veth-rsspp0\"}",
    )
    .parse()
    .unwrap();
    assert!((sum - 20_046.5e-6).abs() < 1e-9, "sum {sum}");
}

#[test]
fn special_values_and_label_values_are_spelled_as_the_format_wants() {
    let mut s = snapshot();
    s.imbalance_ratio = f64::INFINITY;
    s.cpus[0].load = f64::NAN;
    s.iface = "we\"ird\\if\nname".into();
    let text = render(&s);
    let iface = "iface=\"we\\\"ird\\\\if\\nname\"";
    assert!(text.contains(&format!("\nrsspp_imbalance_ratio{{{iface}}} +Inf\n")));
    // Named as rsspp top and rsspp compare name it.
    assert!(text.contains(
        "# HELP rsspp_imbalance_ratio imbalance: (max - min) / min of the per-CPU packet rates over the last interval, as a ratio"
    ));
    assert!(text.contains(&format!("\nrsspp_cpu_load{{{iface},cpu=\"0\"}} NaN\n")));
    assert!(text.contains("rsspp_info{iface=\"we\\\"ird\\\\if\\nname\",mode=\"software\"} 1\n"));
}

#[test]
fn the_shared_snapshot_is_updated_in_place() {
    let shared = SharedMetrics::new(MetricsSnapshot::new("lo", "software"));
    let other = shared.clone();
    shared.update(|s| s.rounds_total += 3);
    assert_eq!(other.snapshot().rounds_total, 3);
    other.publish(snapshot());
    assert_eq!(shared.snapshot(), snapshot());
}

/// Runs `promtool check metrics` on `text`; `None` when promtool is absent.
fn promtool_check(text: &str) -> Option<(bool, String)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

#[test]
fn promtool_accepts_the_output_without_a_complaint() {
    let mut infinite = snapshot();
    infinite.imbalance_ratio = f64::INFINITY;
    for (what, s) in [
        ("a populated snapshot", snapshot()),
        ("an infinite imbalance", infinite),
        (
            "a snapshot before the first round",
            MetricsSnapshot::new("lo", "hardware"),
        ),
    ] {
        let Some((ok, said)) = promtool_check(&render(&s)) else {
            eprintln!("skipping: promtool not found (Debian package prometheus)");
            return;
        };
        assert!(ok && said.trim().is_empty(), "promtool on {what}: {said}");
    }
}

#[test]
fn promtool_does_catch_a_broken_exposition() {
    // Proves the check above can fail: a counter without the `_total`
    // suffix is a lint promtool reports.
    let broken = "# HELP rsspp_packets Packets.\n# TYPE rsspp_packets counter\nrsspp_packets 1\n";
    let Some((ok, said)) = promtool_check(broken) else {
        eprintln!("skipping: promtool not found (Debian package prometheus)");
        return;
    };
    assert!(!ok, "promtool accepted a counter without _total");
    assert!(said.contains("_total"), "promtool said {said:?}");
}
