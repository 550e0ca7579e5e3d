//! `rsspp hash`: the Toeplitz hash of a flow, and the bucket it selects.

use std::io::{BufRead, Write};
use std::net::IpAddr;

use clap::Args;
use rsspp_core::{bucket_of, FlowKey, RssKey, Toeplitz};

use crate::error::CliError;

/// Arguments of `rsspp hash`.
#[derive(Debug, Args)]
#[command(
    after_help = "Output: one line per flow, the hash as 0x%08x, followed by the bucket \
(hash & (N - 1)) when --reta-size N is given, e.g. '0x51ccc178 120'.\n\n\
Examples:\n  rsspp hash 66.9.149.187 161.142.100.80 2794 1766\n  \
rsspp hash --key symmetric --reta-size 128 10.0.0.1 10.0.0.2 40000 443\n  \
printf '10.0.0.1 10.0.0.2 1 2\\n::1 ::2 - -\\n' | rsspp hash --batch"
)]
pub struct HashArgs {
    /// RSS key: 'microsoft' (default), 'symmetric', or at least 40 hex bytes.
    #[arg(long, default_value = "microsoft")]
    key: String,
    /// Also print the bucket of a table of this many entries (a power of
    /// two from 64 to 65536).
    #[arg(long, value_name = "N")]
    reta_size: Option<usize>,
    /// Read 'SRC DST SPORT DPORT' lines from stdin ('-' for both ports: hash
    /// the addresses only) and print one hash per line, in order.
    #[arg(long, conflicts_with_all = ["src", "dst", "sport", "dport"])]
    batch: bool,
    /// Source address (IPv4 or IPv6).
    #[arg(required_unless_present = "batch")]
    src: Option<String>,
    /// Destination address (same family as the source).
    #[arg(required_unless_present = "batch")]
    dst: Option<String>,
    /// Source port (with the destination port: hash the 4-tuple).
    #[arg(requires = "dport")]
    sport: Option<String>,
    /// Destination port.
    dport: Option<String>,
}

fn parse_addr(what: &'static str, value: &str) -> Result<IpAddr, CliError> {
    value.parse().map_err(|_| CliError::BadAddress {
        what,
        value: value.to_string(),
    })
}

fn parse_port(what: &'static str, value: &str) -> Result<u16, CliError> {
    value.parse().map_err(|_| CliError::BadPort {
        what,
        value: value.to_string(),
    })
}

/// Builds a flow from its textual fields; `ports` is `None` to hash the
/// addresses only.
fn flow(src: &str, dst: &str, ports: Option<(&str, &str)>) -> Result<FlowKey, CliError> {
    let (s, d) = (parse_addr("source", src)?, parse_addr("destination", dst)?);
    let mixed = || CliError::MixedFamilies {
        src: src.to_string(),
        dst: dst.to_string(),
    };
    match ports {
        Some((sp, dp)) => {
            let (sp, dp) = (
                parse_port("source port", sp)?,
                parse_port("destination port", dp)?,
            );
            FlowKey::new(s, d, sp, dp, 0).map_err(|_| mixed())
        }
        None => FlowKey::addresses_only(s, d, 0).map_err(|_| mixed()),
    }
}

fn line_for(toeplitz: &Toeplitz, flow: &FlowKey, reta_size: Option<usize>) -> String {
    let h = toeplitz.hash_flow(flow);
    match reta_size {
        Some(n) => format!("0x{h:08x} {}", bucket_of(h, n)),
        None => format!("0x{h:08x}"),
    }
}

/// Runs `rsspp hash`.
pub fn run(args: &HashArgs) -> Result<(), CliError> {
    let key: RssKey = args.key.parse()?;
    if let Some(n) = args.reta_size {
        CliError::check_table_size("--reta-size", n)?;
    }
    let toeplitz = Toeplitz::new(key);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.batch {
        let stdin = std::io::stdin();
        for (i, line) in stdin.lock().lines().enumerate() {
            let line = line.map_err(|source| CliError::Io {
                path: "stdin".into(),
                source,
            })?;
            let text = line.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = text.split_whitespace().collect();
            let f = match fields.as_slice() {
                [s, d, "-", "-"] => flow(s, d, None),
                [s, d, sp, dp] => flow(s, d, Some((sp, dp))),
                _ => {
                    return Err(CliError::BadLine {
                        line: i + 1,
                        text: line.clone(),
                    })
                }
            }
            .map_err(|e| CliError::AtLine {
                line: i + 1,
                source: Box::new(e),
            })?;
            writeln!(out, "{}", line_for(&toeplitz, &f, args.reta_size))
                .map_err(CliError::output)?;
        }
    } else {
        let (src, dst) = (
            args.src.as_deref().expect("clap requires SRC"),
            args.dst.as_deref().expect("clap requires DST"),
        );
        let ports = args.sport.as_deref().zip(args.dport.as_deref());
        let f = flow(src, dst, ports)?;
        writeln!(out, "{}", line_for(&toeplitz, &f, args.reta_size)).map_err(CliError::output)?;
    }
    out.flush().map_err(CliError::output)
}
