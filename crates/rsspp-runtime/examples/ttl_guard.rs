//! A network function written outside the runtime, through its trait: a
//! TTL guard that decrements each IPv4 packet's TTL (fixing the header
//! checksum incrementally) and drops a flow once it has sent more than a
//! budget of packets with a TTL of 1 or less. Its per-flow state lives in
//! the runtime's per-bucket flow tables and moves with its bucket.
//!
//! Run as root: `cargo run --example ttl_guard -- IN OUT CPUS [SECONDS]`,
//! e.g. `cargo run --example ttl_guard -- veth1 veth2 0,1 10`.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rsspp_runtime::nf::headers::{checksum_update, parse_ip};
use rsspp_runtime::{Config, NetworkFunction, Packet, Verdict};

/// Packets with an expiring TTL a flow may send before it is cut off.
const BUDGET: u32 = 3;

/// The function: no configuration, one instance per worker.
struct TtlGuard;

/// Its state per flow.
#[derive(Default)]
struct Expiring {
    packets: u32,
}

impl NetworkFunction for TtlGuard {
    type State = Expiring;

    fn new_flow(&mut self, _packet: &Packet<'_>) -> Expiring {
        Expiring::default()
    }

    fn process(&mut self, packet: &mut Packet<'_>, state: Option<&mut Expiring>) -> Verdict {
        let Some(ip) = parse_ip(packet.data).filter(|ip| !ip.v6) else {
            return Verdict::Forward;
        };
        let ttl_at = ip.l3 + 8;
        let ttl = packet.data[ttl_at];
        if ttl <= 1 {
            let Some(s) = state else {
                return Verdict::Drop("ttl");
            };
            s.packets += 1;
            return if s.packets > BUDGET {
                Verdict::Drop("ttl_budget")
            } else {
                Verdict::Drop("ttl")
            };
        }
        // TTL and protocol share a 16-bit word of the checksum.
        let old = [ttl, packet.data[ttl_at + 1]];
        let new = [ttl - 1, packet.data[ttl_at + 1]];
        let sum_at = ip.l3 + 10;
        let sum = u16::from_be_bytes([packet.data[sum_at], packet.data[sum_at + 1]]);
        packet.data[sum_at..sum_at + 2]
            .copy_from_slice(&checksum_update(sum, &old, &new).to_be_bytes());
        packet.data[ttl_at] = ttl - 1;
        Verdict::Forward
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, cpus, rest @ ..] = args.as_slice() else {
        eprintln!("usage: ttl_guard IN OUT CPUS [SECONDS]   (e.g. veth1 veth2 0,1 10)");
        std::process::exit(2);
    };
    let cpus: Vec<u32> = cpus.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let mut config = Config::new(input.clone(), cpus);
    config.output = Some(output.clone());
    config.duration = Some(Duration::from_secs_f64(
        rest.first().map_or(Ok(10.0), |s| s.parse())?,
    ));
    let stop = AtomicBool::new(false);
    let outcome = rsspp_runtime::run(&config, |_| TtlGuard, &stop)?;
    println!("{}", serde_json::to_string(&outcome.summary)?);
    Ok(())
}
