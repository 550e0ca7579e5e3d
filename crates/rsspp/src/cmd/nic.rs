//! `rsspp nic`: a NIC's RSS indirection table (or one RSS context's), shown
//! and written through ethtool (what `ethtool -x` / `ethtool -X` do), with
//! the tables built by the core crate.

use std::io::Write;

use clap::{Args, Subcommand};
use rsspp_core::reta::RetaError;
use rsspp_core::IndirectionTable;
use rsspp_linux::ethtool::{Ethtool, EthtoolError, HashFunction, RssConfig, RssDevice};
use rsspp_linux::queues::{queue_cpus, FoundBy, Queue, Served};

use crate::error::CliError;

/// Arguments of `rsspp nic`.
#[derive(Debug, Args)]
pub struct NicArgs {
    #[command(subcommand)]
    command: NicCommand,
}

#[derive(Debug, Subcommand)]
enum NicCommand {
    /// Show the RX queues, the RSS key, the hash function and the
    /// indirection table (like `ethtool -x IFACE`).
    Show(ShowArgs),
    /// Write an indirection table of the device's size (like `ethtool -X`):
    /// buckets spread evenly over a list of queues, or by weight.
    #[command(after_help = "Examples:\n  rsspp nic set eth0 --equal 0,1,2,3\n  \
rsspp nic set eth0 --equal 1,3        # queues 1 and 3 only\n  \
rsspp nic set eth0 --weights 1,1,2,0  # queue 2 gets half the buckets, queue 3 none\n\n\
Needs CAP_NET_ADMIN and a driver with a writable table (veth and most virtio and cloud \
NICs have none).")]
    Set(SetArgs),
}

#[derive(Debug, Args)]
struct ShowArgs {
    /// The network interface.
    iface: String,
    /// An additional RSS context's table instead of the main one.
    #[arg(long, value_name = "N")]
    context: Option<u32>,
    /// Print JSON: {"iface", "context", "rx_queues", "queues": [{"queue", "cpu",
    /// "assumed", "irq", "irq_name", "irq_found_by", "irq_cpus"}], "table_size",
    /// "indirection": [...], "key": "6d:5a:…" or null, "hfunc": "toeplitz" or
    /// null, "ethtool": how the table is read and written}.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("table").required(true).args(["equal", "weights"])))]
struct SetArgs {
    /// The network interface.
    iface: String,
    /// Write an additional RSS context's table instead of the main one.
    #[arg(long, value_name = "N")]
    context: Option<u32>,
    /// Bucket i goes to queue QUEUES[i mod n] (like `ethtool -X IFACE
    /// equal N`, over the queues named).
    #[arg(long, value_name = "Q0,Q1,…", value_delimiter = ',', num_args = 1)]
    equal: Option<Vec<u32>>,
    /// Queue k gets a contiguous run of buckets proportional to Wk (like
    /// `ethtool -X IFACE weight W0 W1 …`).
    #[arg(long, value_name = "W0,W1,…", value_delimiter = ',', num_args = 1)]
    weights: Option<Vec<u32>>,
}

/// Why `rsspp nic` failed.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    /// The device refused (or has no table, no such interface, …).
    #[error(transparent)]
    Device(#[from] EthtoolError),
    /// `--equal` names a queue the device does not have.
    #[error("{iface}: queue {queue} is out of range: the device has {queues} RX queue(s){}", valid_queues(*queues))]
    QueueOutOfRange {
        /// The interface.
        iface: String,
        /// The queue asked for.
        queue: u32,
        /// The device's RX queues.
        queues: u32,
    },
    /// More `--weights` than queues.
    #[error("{iface}: {given} weights given, but the device has {queues} RX queue(s)")]
    TooManyWeights {
        /// The interface.
        iface: String,
        /// Weights given.
        given: usize,
        /// The device's RX queues.
        queues: u32,
    },
    /// The core crate cannot build a table of the device's size.
    #[error("{iface}: cannot build a table of the device's {size} entries: {source}")]
    Table {
        /// The interface.
        iface: String,
        /// The device's table size.
        size: usize,
        /// Why.
        source: RetaError,
    },
}

fn valid_queues(queues: u32) -> String {
    match queues {
        0 => String::new(),
        1 => " (only queue 0)".into(),
        n => format!(" (0 to {})", n - 1),
    }
}

/// Runs `rsspp nic …`.
pub fn run(args: &NicArgs) -> Result<(), CliError> {
    match &args.command {
        NicCommand::Show(a) => show(a),
        NicCommand::Set(a) => set(a),
    }
}

fn show(args: &ShowArgs) -> Result<(), CliError> {
    let mut dev = open(&args.iface, args.context)?;
    // The table first: on a device without one, that is what to report.
    let rss = dev.rss().map_err(NicError::from)?;
    let queues = dev.rx_queues().map_err(NicError::from)?;
    let served = queue_cpus(&args.iface, queues);
    let text = if args.json {
        let per_queue: Vec<serde_json::Value> = served
            .iter()
            .map(|q| {
                serde_json::json!({
                    "queue": q.queue,
                    "cpu": q.cpu(),
                    "assumed": q.assumed(),
                    "irq": q.irq.as_ref().map(|(n, _)| n),
                    "irq_name": q.irq.as_ref().map(|(_, name)| name),
                    "irq_found_by": q.found_by.map(|f| match f {
                        FoundBy::Netdev => "netdev",
                        FoundBy::Name => "name",
                    }),
                    "irq_cpus": match &q.served {
                        Served::Cpu(c) => vec![*c],
                        Served::Several(cpus) => cpus.clone(),
                        Served::Unknown => Vec::new(),
                    },
                })
            })
            .collect();
        let doc = serde_json::json!({
            "iface": args.iface,
            "context": dev.rss_context(),
            "rx_queues": queues,
            "queues": per_queue,
            "table_size": rss.indirection.len(),
            "indirection": rss.indirection,
            "key": (!rss.key.is_empty()).then(|| hex_key(&rss.key)),
            "hfunc": (rss.hfunc != HashFunction::Unknown).then(|| rss.hfunc.to_string()),
            "ethtool": dev.interface().to_string(),
        });
        format!("{doc}\n")
    } else {
        let context = match dev.rss_context() {
            0 => String::new(),
            n => format!("RSS context {n}\n"),
        };
        context
            + &ethtool_style(&args.iface, queues, &rss)
            + &served_style(&served)
            + &format!("Read and written through {}\n", dev.interface())
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(CliError::output)?;
    out.flush().map_err(CliError::output)
}

/// Which CPU serves each queue, after the `ethtool -x` layout.
fn served_style(queues: &[Queue]) -> String {
    let mut s = String::from("RX queues and the CPUs serving them (their interrupts):\n");
    for q in queues {
        let by = match q.found_by {
            Some(FoundBy::Netdev) => ", from netdev netlink",
            _ => "",
        };
        let irq = q.irq.as_ref().map_or(String::new(), |(n, name)| {
            let name = if name.is_empty() {
                String::new()
            } else {
                format!(" {name}")
            };
            format!(" (IRQ {n}{name}{by})")
        });
        let how = match &q.served {
            Served::Cpu(c) => format!("CPU {c}{irq}"),
            Served::Several(cpus) => format!(
                "CPU {} assumed: the interrupt may go to CPUs {}{irq}",
                q.cpu(),
                rsspp_linux::cpu::CpuList::from_cpus(cpus.clone())
            ),
            Served::Unknown => format!("CPU {} assumed: no interrupt found", q.cpu()),
        };
        s.push_str(&format!("    queue {}: {how}\n", q.queue));
    }
    s
}

fn hex_key(key: &[u8]) -> String {
    key.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The layout of `ethtool -x`: eight entries a line, each line headed by
/// its first bucket.
fn ethtool_style(iface: &str, queues: u32, rss: &RssConfig) -> String {
    let mut s = format!("RX flow hash indirection table for {iface} with {queues} RX ring(s):\n");
    for (row, chunk) in rss.indirection.chunks(8).enumerate() {
        s.push_str(&format!("{:5}: ", row * 8));
        for q in chunk {
            s.push_str(&format!(" {q:5}"));
        }
        s.push('\n');
    }
    s.push_str("RSS hash key:\n");
    if rss.key.is_empty() {
        s.push_str("(not reported by the driver)\n");
    } else {
        s.push_str(&hex_key(&rss.key));
        s.push('\n');
    }
    s.push_str("RSS hash function:\n");
    match rss.hfunc {
        HashFunction::Unknown => s.push_str("    (not reported by the driver)\n"),
        current => {
            for (f, name) in HashFunction::KNOWN {
                let on = if f == current { "on" } else { "off" };
                s.push_str(&format!("    {name}: {on}\n"));
            }
            if let HashFunction::Other(_) = current {
                s.push_str(&format!("    {current}: on\n"));
            }
        }
    }
    s
}

/// The interface's main table, or its RSS context `context`.
fn open(iface: &str, context: Option<u32>) -> Result<Ethtool, NicError> {
    let dev = Ethtool::open(iface)?;
    Ok(dev.context(context.unwrap_or(0))?)
}

fn set(args: &SetArgs) -> Result<(), CliError> {
    let iface = args.iface.as_str();
    let mut dev = open(iface, args.context)?;
    // Both answers first, so that a queue list the device cannot take is
    // reported (bad input) before the device's own limits.
    let queues = dev.rx_queues();
    let rss = dev.rss();
    if let Ok(queues) = queues {
        check_request(iface, args, queues)?;
    }
    let rss = rss.map_err(|e| match e {
        // Writing is what was asked: say the table is not writable.
        EthtoolError::NoTable { iface, op, errno } => {
            EthtoolError::NotWritable { iface, op, errno }
        }
        other => other,
    });
    let size = rss.map_err(NicError::from)?.indirection.len();
    queues.map_err(NicError::from)?;
    let table = match (&args.equal, &args.weights) {
        (Some(list), _) => {
            let cores: Vec<usize> = list.iter().map(|&q| q as usize).collect();
            IndirectionTable::equal_over(size, &cores)
        }
        (None, Some(weights)) => IndirectionTable::weighted(size, weights),
        (None, None) => {
            return Err(CliError::Invalid(
                "rsspp nic set needs --equal or --weights".into(),
            ))
        }
    }
    .map_err(|source| NicError::Table {
        iface: iface.to_string(),
        size,
        source,
    })?;
    let entries: Vec<u32> = table.entries().iter().map(|&q| q as u32).collect();
    dev.set_indirection(&entries).map_err(NicError::from)?;
    let mut summary = format!("{iface}: wrote a {size}-entry indirection table:");
    for queue in table.cores_in_use() {
        let buckets = table.buckets_of(queue).len();
        summary.push_str(&format!(" queue {queue} {buckets} buckets,"));
    }
    summary.pop();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{summary}").map_err(CliError::output)?;
    out.flush().map_err(CliError::output)
}

/// Checks `--equal` / `--weights` against the device's RX queues.
fn check_request(iface: &str, args: &SetArgs, queues: u32) -> Result<(), NicError> {
    if let Some(list) = &args.equal {
        if let Some(&queue) = list.iter().find(|&&q| q >= queues) {
            return Err(NicError::QueueOutOfRange {
                iface: iface.to_string(),
                queue,
                queues,
            });
        }
    }
    if let Some(weights) = &args.weights {
        if weights.len() > queues as usize {
            return Err(NicError::TooManyWeights {
                iface: iface.to_string(),
                given: weights.len(),
                queues,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_style_matches_ethtool_x() {
        let rss = RssConfig {
            indirection: (0..10).map(|i| [1, 3][i % 2]).collect(),
            key: vec![0x6d, 0x5a, 0x56],
            hfunc: HashFunction::Toeplitz,
        };
        let expected = "RX flow hash indirection table for eth0 with 4 RX ring(s):\n\
                        \x20   0:      1     3     1     3     1     3     1     3\n\
                        \x20   8:      1     3\n\
                        RSS hash key:\n\
                        6d:5a:56\n\
                        RSS hash function:\n\
                        \x20   toeplitz: on\n\
                        \x20   xor: off\n\
                        \x20   crc32: off\n";
        assert_eq!(ethtool_style("eth0", 4, &rss), expected);
    }

    #[test]
    fn ethtool_style_without_key_or_function() {
        let rss = RssConfig {
            indirection: vec![0; 8],
            key: vec![],
            hfunc: HashFunction::Unknown,
        };
        let text = ethtool_style("eth1", 1, &rss);
        assert!(
            text.contains("RSS hash key:\n(not reported by the driver)\n"),
            "{text}"
        );
        assert!(
            text.ends_with("RSS hash function:\n    (not reported by the driver)\n"),
            "{text}"
        );
    }

    #[test]
    fn queue_lists_are_checked_against_the_device() {
        let args = |equal: Option<Vec<u32>>, weights: Option<Vec<u32>>| SetArgs {
            iface: "eth0".into(),
            context: None,
            equal,
            weights,
        };
        assert!(check_request("eth0", &args(Some(vec![0, 3]), None), 4).is_ok());
        let e = check_request("eth0", &args(Some(vec![0, 4]), None), 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "eth0: queue 4 is out of range: the device has 4 RX queue(s) (0 to 3)"
        );
        let e = check_request("eth0", &args(None, Some(vec![1, 1, 1])), 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "eth0: 3 weights given, but the device has 2 RX queue(s)"
        );
        assert!(check_request("eth0", &args(None, Some(vec![1, 0])), 2).is_ok());
    }
}
