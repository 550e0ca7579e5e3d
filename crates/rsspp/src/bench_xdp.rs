//! `rsspp bench xdp`: the XDP programs' cost per packet, measured in the
//! kernel with `BPF_PROG_TEST_RUN` (the program runs `--repeat` times on
//! one frame; the kernel reports the mean time per run). Count-only
//! (hardware mode, Toeplitz in BPF), steering (software mode, Toeplitz,
//! table lookup and CPUMAP redirect), steering a bucket in handoff (the
//! frame stamped for the order-preserving move), a flow with a per-flow
//! override (the override table looked up first) and a flow of a hot bucket
//! (counted per flow), on an IPv4 TCP and an IPv6 UDP frame.
//! The programs are loaded for `lo` but never attached. Needs root.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use clap::Args;
use etherparse::PacketBuilder;
use rsspp_core::{bucket_of, FlowKey, Toeplitz};
use rsspp_linux::cpu::CpuList;
use rsspp_linux::xdp::{
    Entry, FlowInput, Program, Xdp, XdpOptions, BUCKET_HOT, BUCKET_OVERRIDES, DEFAULT_CPUMAP_QUEUE,
};
use serde::Serialize;

use crate::error::CliError;

/// Arguments of `rsspp bench xdp`.
#[derive(Debug, Clone, Args)]
pub struct BenchXdpArgs {
    /// Runs of the program per measurement.
    #[arg(long, default_value_t = 1_000_000)]
    pub repeat: u32,
    /// Measurements per case (the best and the median are reported).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Indirection-table size (a power of two from 64 to 65536).
    #[arg(long, default_value_t = 128)]
    pub reta_size: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One program on one frame.
#[derive(Debug, Serialize)]
struct Case {
    program: &'static str,
    frame: &'static str,
    frame_bytes: usize,
    verdict: String,
    best_ns: u64,
    median_ns: u64,
}

fn ipv4_tcp() -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(
            Ipv4Addr::new(66, 9, 149, 187).octets(),
            Ipv4Addr::new(161, 142, 100, 80).octets(),
            64,
        )
        .tcp(2794, 1766, 1, 65535)
        .write(&mut out, &[0; 10])
        .expect("writes to a Vec");
    out
}

fn ipv6_udp() -> Vec<u8> {
    let src: Ipv6Addr = "3ffe:2501:200:1fff::7".parse().expect("address");
    let dst: Ipv6Addr = "3ffe:2501:200:3::1".parse().expect("address");
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(src.octets(), dst.octets(), 64)
        .udp(2794, 1766)
        .write(&mut out, &[0; 16])
        .expect("writes to a Vec");
    out
}

fn ipv4_tcp_flow() -> FlowKey {
    FlowKey::new(
        Ipv4Addr::new(66, 9, 149, 187).into(),
        Ipv4Addr::new(161, 142, 100, 80).into(),
        2794,
        1766,
        6,
    )
    .expect("one family")
}

fn ipv6_udp_flow() -> FlowKey {
    let src: Ipv6Addr = "3ffe:2501:200:1fff::7".parse().expect("address");
    let dst: Ipv6Addr = "3ffe:2501:200:3::1".parse().expect("address");
    FlowKey::new(src.into(), dst.into(), 2794, 1766, 17).expect("one family")
}

fn measure(args: &BenchXdpArgs) -> Result<Vec<Case>, CliError> {
    // Two CPUs at most: the cost does not depend on how many the table names.
    let cpus: Vec<u32> = CpuList::online()?.cpus().iter().copied().take(2).collect();
    let mut opts = XdpOptions::new("lo");
    opts.reta_size = args.reta_size;
    opts.default_cpu = cpus[0];
    let steer = Program::Steer {
        cpus: cpus.clone(),
        cpumap_queue: DEFAULT_CPUMAP_QUEUE,
        ordered_moves: true,
    };
    let mut programs = vec![
        ("count", Program::Count { rx_hash: false }),
        ("steer", steer.clone()),
    ];
    // A bucket in handoff whose old CPU never drains it: every frame takes
    // the held path (stamp in the metadata, atomic sequence number).
    if cpus.len() > 1 {
        programs.push(("handoff", steer.clone()));
        // The frame's flow has an override (to the other CPU), its bucket
        // flagged: the override lookup, then the redirect.
        programs.push(("override", steer.clone()));
    }
    // The frame's bucket is hot: its flow is counted in the per-flow map.
    programs.push(("hot", steer));
    let frames = [
        ("IPv4 TCP", ipv4_tcp(), ipv4_tcp_flow()),
        ("IPv6 UDP", ipv6_udp(), ipv6_udp_flow()),
    ];
    let toeplitz = Toeplitz::new(opts.key.clone());
    let mut cases = Vec::new();
    for (name, program) in programs {
        let mut opts = opts.clone();
        if matches!(name, "override" | "hot") {
            opts.override_slots = 1;
        }
        let xdp = Xdp::load(&opts, program)?;
        if name == "handoff" {
            let all: Vec<(usize, u32)> = (0..args.reta_size).map(|b| (b, cpus[0])).collect();
            xdp.write_entries(&all)?;
            let moves: Vec<(usize, u32, u32)> =
                (0..args.reta_size).map(|b| (b, cpus[0], cpus[1])).collect();
            xdp.begin_handoffs(&moves, true)?;
        }
        for (frame_name, frame, flow) in &frames {
            let bucket = bucket_of(toeplitz.hash_flow(flow), args.reta_size);
            match name {
                "override" => {
                    let to = Entry {
                        cpu: cpus[1],
                        next: None,
                    };
                    xdp.write_override(&FlowInput::of(flow), 0, to, false)?;
                    xdp.set_bucket_flags(&[(bucket, BUCKET_OVERRIDES)])?;
                }
                "hot" => xdp.set_bucket_flags(&[(bucket, BUCKET_HOT)])?,
                _ => {}
            }
            // One short run first: faults the maps' pages in, warms caches.
            xdp.test_run(frame, 1000)?;
            let mut ns = Vec::with_capacity(args.rounds);
            let mut verdict = String::new();
            for _ in 0..args.rounds {
                let run = xdp.test_run(frame, args.repeat)?;
                ns.push(run.duration_per_run.as_nanos() as u64);
                verdict = format!("{:?}", run.action);
            }
            ns.sort_unstable();
            tracing::debug!(program = name, frame = frame_name, ?ns, "measured");
            cases.push(Case {
                program: name,
                frame: frame_name,
                frame_bytes: frame.len(),
                verdict,
                best_ns: ns[0],
                median_ns: ns[ns.len() / 2],
            });
        }
    }
    Ok(cases)
}

/// Runs `rsspp bench xdp`.
pub fn run(args: &BenchXdpArgs) -> Result<(), CliError> {
    if args.rounds == 0 || args.repeat == 0 {
        return Err(CliError::Invalid(
            "--rounds and --repeat must be at least 1".into(),
        ));
    }
    CliError::check_table_size("--reta-size", args.reta_size)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(CliError::Invalid(
            "rsspp bench xdp needs root: it loads XDP programs and runs them with BPF_PROG_TEST_RUN"
                .into(),
        ));
    }
    let cases = measure(args)?;
    let text = if args.json {
        serde_json::to_string_pretty(&cases).expect("serialises") + "\n"
    } else {
        let mut t = format!(
            "XDP cost per packet (BPF_PROG_TEST_RUN, {} runs x {} rounds, {}-bucket table)\n\
             program  frame     bytes  verdict   best ns  median ns\n",
            args.repeat, args.rounds, args.reta_size
        );
        for c in &cases {
            t += &format!(
                "{:<8} {:<9} {:>5}  {:<8} {:>8} {:>10}\n",
                c.program, c.frame, c.frame_bytes, c.verdict, c.best_ns, c.median_ns
            );
        }
        t += "count: parse + Toeplitz + per-bucket and per-CPU counters, XDP_PASS;\n\
              steer: the same + table lookup + bpf_redirect_map to a CPUMAP (the kernel does\n\
              not perform the redirect in a test run);\n\
              handoff: steer for a bucket in handoff, held on its old CPU (stamped);\n\
              override: steer for a flow with a per-flow override (its bucket flagged: the\n\
              override table looked up before the bucket table);\n\
              hot: steer for a flow of a hot bucket (counted in the per-flow map).\n";
        t
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(CliError::output)
}
