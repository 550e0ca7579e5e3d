//! Helpers shared by the simulator's integration tests.

#![allow(dead_code)]

use rsspp_sim::cost::StateTable;
use rsspp_sim::run::{run, speed_for_load, RunConfig};
use rsspp_sim::workload::{RateProfile, TraceSource, WorkloadConfig};
use rsspp_sim::{PolicyResult, PolicySummary};
use rsspp_trace::Preset;

/// A run of `policies` on `source` over `cores` cores for `duration_s`.
pub fn config(source: TraceSource, cores: usize, duration_s: f64, policies: &[&str]) -> RunConfig {
    RunConfig::new(
        WorkloadConfig::new(source, duration_s, 1.0).unwrap(),
        cores,
        policies,
    )
}

/// Campus #4 on `cores` cores.
pub fn campus4(cores: usize, duration_s: f64, policies: &[&str]) -> RunConfig {
    config(
        TraceSource::preset(Preset::Campus4),
        cores,
        duration_s,
        policies,
    )
}

/// `n` constant-rate UDP flows.
pub fn udp_flows(n: usize, cores: usize, duration_s: f64, policies: &[&str]) -> RunConfig {
    let source = TraceSource::Preset {
        preset: Preset::UdpFlows,
        flows: Some(n),
        frame_size: None,
    };
    config(source, cores, duration_s, policies)
}

/// The replay speed for an average core load of `load`.
pub fn speed_for(config: &RunConfig, load: f64) -> f64 {
    speed_for_load(config, load).unwrap()
}

/// Sets the replay speed for an average core load of `load`.
pub fn at_load(mut config: RunConfig, load: f64) -> RunConfig {
    let speed = speed_for(&config, load);
    config.workload.rate = RateProfile::constant(speed).unwrap();
    config
}

/// Sets a constant replay speed.
pub fn at_speed(mut config: RunConfig, speed: f64) -> RunConfig {
    config.workload.rate = RateProfile::constant(speed).unwrap();
    config
}

/// Uses a shared flow table for the flow-affine policies.
pub fn shared_table(mut config: RunConfig) -> RunConfig {
    config.policy.state_table = StateTable::Shared;
    config
}

/// Runs and returns the results by policy, in order.
pub fn results(config: &RunConfig) -> Vec<PolicyResult> {
    run(config, |_| {}).unwrap().results
}

/// The summary of the policy called `name`.
pub fn summary<'a>(results: &'a [PolicyResult], name: &str) -> &'a PolicySummary {
    &results
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no result for {name}"))
        .summary
}
