//! Measures the engine's speed alone: simulated packets per second of host
//! time for each policy named, on a workload generated beforehand.
//!
//! `cargo run --release -p rsspp-sim --example sim_speed -- [SECONDS] [POLICY…]`
//! (campus4 at its own speed on 8 cores; default 5 s of `rss`).

use std::time::Instant;

use rsspp_sim::engine::{Engine, EngineConfig};
use rsspp_sim::policy::{self, PolicyConfig};
use rsspp_sim::workload::{TraceSource, Workload, WorkloadConfig};
use rsspp_sim::SimError;
use rsspp_trace::Preset;

fn main() -> Result<(), SimError> {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = match args.next() {
        Some(s) => s
            .parse()
            .map_err(|_| SimError::InvalidOption(format!("not a number of seconds: {s}")))?,
        None => 5.0,
    };
    let mut names: Vec<String> = args.collect();
    if names.is_empty() {
        names.push("rss".into());
    }
    let config = WorkloadConfig::new(TraceSource::preset(Preset::Campus4), seconds, 1.0)?;
    let mut workload = Workload::open(&config)?;
    let mut windows = Vec::new();
    loop {
        let mut window = Vec::new();
        let more = workload.next_batch(&mut window)?;
        windows.push(window);
        if !more {
            break;
        }
    }
    let packets: usize = windows.iter().map(Vec::len).sum();
    for name in &names {
        let policy = policy::build(name, &PolicyConfig::default())?;
        let start = Instant::now();
        let mut engine = Engine::new(policy, EngineConfig::default());
        for window in &windows {
            engine.feed(window);
        }
        let result = engine.finish();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name:18} {packets} packets in {secs:.2} s: {:.2} M packets/s ({} processed)",
            packets as f64 / secs / 1e6,
            result.summary.processed
        );
    }
    Ok(())
}
