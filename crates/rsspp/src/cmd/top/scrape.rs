//! Reading the daemon's `/metrics`: a one-shot HTTP GET over a TCP stream,
//! and a parser of the Prometheus text format for the names `rsspp run`
//! exports.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rsspp_linux::metrics::names;

use super::TopError;

/// Largest response read: a 4096-bucket table renders to about 300 KiB.
const MAX_RESPONSE_BYTES: u64 = 16 << 20;

/// Fetches the body of `GET /metrics` from `addr`.
pub fn fetch(addr: SocketAddr, timeout: Duration) -> Result<String, TopError> {
    let io = |source| TopError::Io { addr, source };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|source| {
        if source.kind() == std::io::ErrorKind::ConnectionRefused {
            TopError::Refused { addr }
        } else {
            TopError::Io { addr, source }
        }
    })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // HTTP/1.0 asks for a plain body ended by the close: no chunked
    // encoding whatever serves it.
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream
        .take(MAX_RESPONSE_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(io)?;
    if raw.len() as u64 > MAX_RESPONSE_BYTES {
        return Err(TopError::Response {
            addr,
            what: format!("a response over {MAX_RESPONSE_BYTES} bytes"),
        });
    }
    let text = String::from_utf8(raw).map_err(|_| TopError::Response {
        addr,
        what: "a response that is not UTF-8".into(),
    })?;
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(TopError::Response {
            addr,
            what: "a response without an HTTP header".into(),
        });
    };
    let status = head.lines().next().unwrap_or("");
    let code = status.split(' ').nth(1).unwrap_or("");
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(TopError::Status {
            addr,
            status: status.to_string(),
        });
    }
    Ok(body.to_string())
}

/// One sample line: `name{label="value",…} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Series<'a> {
    /// Metric name (for a histogram, with its `_bucket`/`_sum`/`_count`).
    pub name: &'a str,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(&'a str, String)>,
    /// The value.
    pub value: f64,
}

impl Series<'_> {
    /// The value of a label.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

/// Parses a sample value as the format writes it.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok().filter(|v: &f64| !v.is_nan()),
    }
}

/// Length of the metric or label name `s` starts with (0: none).
fn name_len(s: &str) -> usize {
    s.char_indices()
        .find(|&(i, c)| {
            !(if i == 0 {
                is_name_start(c)
            } else {
                is_name_char(c)
            })
        })
        .map_or(s.len(), |(i, _)| i)
}

/// Parses one line; `Ok(None)` for comments and blank lines.
pub fn parse_line(line: &str) -> Result<Option<Series<'_>>, String> {
    let line = line.trim_start();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let name_len = name_len(line);
    if name_len == 0 {
        return Err("expected a metric name".into());
    }
    let (name, mut rest) = line.split_at(name_len);
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value = fields.next().ok_or("expected a value")?;
    let value = parse_value(value).ok_or_else(|| format!("{value:?} is not a number"))?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("{ts:?} is not a timestamp"))?;
    }
    if fields.next().is_some() {
        return Err("unexpected text after the value".into());
    }
    Ok(Some(Series {
        name,
        labels,
        value,
    }))
}

/// Parses `name="value",…}` and returns what follows the `}`.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut Vec<(&'a str, String)>,
) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok(rest);
        }
        let len = name_len(s);
        if len == 0 {
            return Err("expected a label name".into());
        }
        let (label, rest) = s.split_at(len);
        let rest = rest
            .trim_start()
            .strip_prefix('=')
            .and_then(|r| r.trim_start().strip_prefix('"'))
            .ok_or_else(|| format!("expected =\"…\" after label {label}"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("unterminated value of label {label}")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => return Err(format!("bad escape in the value of label {label}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((label, value));
        s = rest[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

/// One CPU in a sample.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuSample {
    /// CPU number.
    pub cpu: u32,
    /// Busy fraction over the daemon's last interval.
    pub load: f64,
    /// Packets steered to or counted on it since the daemon started.
    pub packets_total: u64,
    /// Frames dropped on their way to it since the daemon started (its
    /// queue full), if the daemon exports them.
    pub dropped_total: Option<u64>,
}

/// What one scrape of the daemon says.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSample {
    /// The interface balanced, if the daemon says.
    pub iface: Option<String>,
    /// `software` or `hardware`, if the daemon says.
    pub mode: Option<String>,
    /// The CPUs, in the daemon's order.
    pub cpus: Vec<CpuSample>,
    /// The indirection table: CPU of each bucket.
    pub table: Vec<u32>,
    /// Packets per bucket since the daemon started.
    pub bucket_packets: Vec<u64>,
    /// (max − min) / min of per-CPU packet rates over the last interval.
    pub imbalance: f64,
    /// Buckets moved since the daemon started.
    pub migrations: u64,
    /// Rounds run since the daemon started.
    pub rounds: u64,
    /// The control loop's current interval, seconds.
    pub interval_seconds: Option<f64>,
    /// Sum of the rounds' durations, seconds.
    pub rebalance_seconds_sum: f64,
    /// Number of rounds timed.
    pub rebalance_seconds_count: u64,
}

/// A counter or index as an integer (the format writes every value as a
/// float).
fn whole(v: f64, what: &str) -> Result<u64, String> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(64) {
        Ok(v as u64)
    } else {
        Err(format!("{what} {v} is not a whole number"))
    }
}

fn index_label(s: &Series<'_>, label: &str) -> Result<u32, String> {
    let v = s
        .label(label)
        .ok_or_else(|| format!("{} without a {label} label", s.name))?;
    v.parse()
        .map_err(|_| format!("{}: {label}={v:?} is not a number", s.name))
}

/// Fills a per-bucket vector, which must end up without holes.
fn place<T: Copy>(v: &mut Vec<Option<T>>, i: u32, x: T) {
    let i = i as usize;
    if v.len() <= i {
        v.resize(i + 1, None);
    }
    v[i] = Some(x);
}

impl DaemonSample {
    /// Reads the daemon's metrics from the text of `/metrics`.
    pub fn parse(text: &str) -> Result<Self, TopError> {
        let at = |line: usize, what: String| TopError::Parse { line, what };
        let mut s = DaemonSample {
            iface: None,
            mode: None,
            cpus: Vec::new(),
            table: Vec::new(),
            bucket_packets: Vec::new(),
            imbalance: f64::NAN,
            migrations: 0,
            rounds: 0,
            interval_seconds: None,
            rebalance_seconds_sum: 0.0,
            rebalance_seconds_count: 0,
        };
        let mut loads: Vec<(u32, f64)> = Vec::new();
        let mut packets: HashMap<u32, u64> = HashMap::new();
        let mut dropped: HashMap<u32, u64> = HashMap::new();
        let mut table: Vec<Option<u32>> = Vec::new();
        let mut bucket_packets: Vec<Option<u64>> = Vec::new();
        let mut seen_imbalance = false;
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let Some(series) = parse_line(line).map_err(|e| at(n, e))? else {
                continue;
            };
            let v = series.value;
            match series.name {
                names::INFO => {
                    s.iface = series.label("iface").map(str::to_string);
                    s.mode = series.label("mode").map(str::to_string);
                }
                names::CPU_LOAD => {
                    loads.push((index_label(&series, "cpu").map_err(|e| at(n, e))?, v))
                }
                names::CPU_PACKETS_TOTAL => {
                    let cpu = index_label(&series, "cpu").map_err(|e| at(n, e))?;
                    packets.insert(cpu, whole(v, series.name).map_err(|e| at(n, e))?);
                }
                names::DROPPED_PACKETS_TOTAL => {
                    // Summed over the reasons.
                    let cpu = index_label(&series, "cpu").map_err(|e| at(n, e))?;
                    *dropped.entry(cpu).or_insert(0) +=
                        whole(v, series.name).map_err(|e| at(n, e))?;
                }
                names::BUCKET_CPU => {
                    let b = index_label(&series, "bucket").map_err(|e| at(n, e))?;
                    let cpu = whole(v, series.name).map_err(|e| at(n, e))?;
                    let cpu =
                        u32::try_from(cpu).map_err(|_| at(n, format!("CPU {cpu} out of range")))?;
                    place(&mut table, b, cpu);
                }
                names::BUCKET_PACKETS_TOTAL => {
                    let b = index_label(&series, "bucket").map_err(|e| at(n, e))?;
                    place(
                        &mut bucket_packets,
                        b,
                        whole(v, series.name).map_err(|e| at(n, e))?,
                    );
                }
                names::IMBALANCE_RATIO => {
                    s.imbalance = v;
                    seen_imbalance = true;
                }
                names::MIGRATIONS_TOTAL => {
                    s.migrations = whole(v, series.name).map_err(|e| at(n, e))?
                }
                names::ROUNDS_TOTAL => s.rounds = whole(v, series.name).map_err(|e| at(n, e))?,
                names::INTERVAL_SECONDS => s.interval_seconds = Some(v),
                name if name.strip_prefix(names::REBALANCE_SECONDS) == Some("_sum") => {
                    s.rebalance_seconds_sum = v;
                }
                name if name.strip_prefix(names::REBALANCE_SECONDS) == Some("_count") => {
                    s.rebalance_seconds_count = whole(v, name).map_err(|e| at(n, e))?;
                }
                // Other exporters' metrics (a process collector, say) are fine.
                _ => {}
            }
        }
        if !seen_imbalance {
            return Err(TopError::NotRsspp {
                missing: names::IMBALANCE_RATIO,
            });
        }
        s.cpus = loads
            .into_iter()
            .map(|(cpu, load)| CpuSample {
                cpu,
                load,
                packets_total: packets.get(&cpu).copied().unwrap_or(0),
                dropped_total: dropped.get(&cpu).copied(),
            })
            .collect();
        s.table = collect_buckets(table, names::BUCKET_CPU)?;
        s.bucket_packets = collect_buckets(bucket_packets, names::BUCKET_PACKETS_TOTAL)?;
        Ok(s)
    }
}

fn collect_buckets<T>(v: Vec<Option<T>>, name: &'static str) -> Result<Vec<T>, TopError> {
    v.into_iter()
        .enumerate()
        .map(|(i, x)| {
            x.ok_or_else(|| TopError::Incomplete {
                what: format!("{name} has no bucket {i} although it has higher ones"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsspp_linux::metrics::{render, BucketMetrics, CpuMetrics, MetricsSnapshot};

    #[test]
    fn lines_are_parsed_with_labels_escapes_and_special_values() {
        let s = parse_line(r#"a_b:c{x="1",y="q\"\\\n" , } +Inf 1700000000000"#)
            .unwrap()
            .unwrap();
        assert_eq!(s.name, "a_b:c");
        assert_eq!(s.label("x"), Some("1"));
        assert_eq!(s.label("y"), Some("q\"\\\n"));
        assert_eq!(s.value, f64::INFINITY);
        assert!(parse_line("x NaN").unwrap().unwrap().value.is_nan());
        assert_eq!(
            parse_line("x -Inf").unwrap().unwrap().value,
            f64::NEG_INFINITY
        );
        assert_eq!(parse_line("x 1.5e3").unwrap().unwrap().value, 1500.0);
        assert_eq!(parse_line("# HELP x y").unwrap(), None);
        assert_eq!(parse_line("   ").unwrap(), None);
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "{a=\"1\"} 1",
            "x{a=1} 1",
            "x{a=\"1} 1",
            "x{a=\"\\q\"} 1",
            "x{a=\"1\" b=\"2\"} 1",
            "x",
            "x one",
            "x 1 2 3",
            "x 1 soon",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?} accepted");
        }
    }

    fn snapshot() -> MetricsSnapshot {
        let mut s = MetricsSnapshot::new("veth0", "hardware");
        s.cpus = [(2, 0.5, 100), (5, 1.0, 3000), (11, 0.0, 0)]
            .into_iter()
            .map(|(cpu, load, packets_total)| CpuMetrics {
                cpu,
                load,
                packets_total,
                dropped: vec![("cpumap_full".into(), packets_total / 100)],
            })
            .collect();
        s.buckets = (0..16u32)
            .map(|b| BucketMetrics {
                packets_total: u64::from(b) * 7,
                cpu: [2, 5, 11][b as usize % 3],
            })
            .collect();
        s.imbalance_ratio = f64::INFINITY;
        s.migrations_total = 9;
        s.rounds_total = 1234;
        s.interval_seconds = 0.2;
        s.rebalance_seconds.observe(4e-6);
        s.rebalance_seconds.observe(6e-6);
        s
    }

    #[test]
    fn the_daemons_rendering_reads_back_whole() {
        let snap = snapshot();
        let back = DaemonSample::parse(&render(&snap)).unwrap();
        assert_eq!(back.iface.as_deref(), Some("veth0"));
        assert_eq!(back.mode.as_deref(), Some("hardware"));
        let cpus: Vec<(u32, f64, u64)> = back
            .cpus
            .iter()
            .map(|c| (c.cpu, c.load, c.packets_total))
            .collect();
        assert_eq!(cpus, vec![(2, 0.5, 100), (5, 1.0, 3000), (11, 0.0, 0)]);
        let drops: Vec<Option<u64>> = back.cpus.iter().map(|c| c.dropped_total).collect();
        assert_eq!(drops, vec![Some(1), Some(30), Some(0)]);
        let table: Vec<u32> = snap.buckets.iter().map(|b| b.cpu).collect();
        let packets: Vec<u64> = snap.buckets.iter().map(|b| b.packets_total).collect();
        assert_eq!(back.table, table);
        assert_eq!(back.bucket_packets, packets);
        assert_eq!(back.imbalance, f64::INFINITY);
        assert_eq!(back.migrations, 9);
        assert_eq!(back.rounds, 1234);
        assert_eq!(back.interval_seconds, Some(0.2));
        assert_eq!(back.rebalance_seconds_count, 2);
        assert!((back.rebalance_seconds_sum - 1e-5).abs() < 1e-15);
    }

    #[test]
    fn another_exporter_is_not_taken_for_the_daemon() {
        let text = "# TYPE up gauge\nup 1\n";
        assert!(matches!(
            DaemonSample::parse(text),
            Err(TopError::NotRsspp { .. })
        ));
    }

    #[test]
    fn a_table_with_a_hole_or_a_bad_value_is_refused() {
        let hole = "rsspp_imbalance_ratio 0\nrsspp_bucket_cpu{bucket=\"0\"} 1\nrsspp_bucket_cpu{bucket=\"2\"} 1\n";
        let err = DaemonSample::parse(hole).unwrap_err().to_string();
        assert!(err.contains("no bucket 1"), "{err}");
        let frac = "rsspp_imbalance_ratio 0\nrsspp_bucket_cpu{bucket=\"0\"} 1.5\n";
        let err = DaemonSample::parse(frac).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("whole number"),
            "{err}"
        );
        let unlabelled = "rsspp_imbalance_ratio 0\nrsspp_cpu_load 0.5\n";
        let err = DaemonSample::parse(unlabelled).unwrap_err().to_string();
        assert!(err.contains("cpu label"), "{err}");
    }
}
