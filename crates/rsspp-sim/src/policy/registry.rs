//! The registry: every policy by the name it is reported under, and the
//! default list `rsspp compare` runs. The only module that knows them all.

use super::software::{Placement, SoftwareDispatch};
use super::{affinity_accept, metron, orss, ovs_alb, rfs, rss, rsspp, sprayer};
use crate::system::{Policy, PolicyConfig};

/// The policies `rsspp compare` runs by default, in the order of the report.
/// `--autoscale` makes the ones that can scale do so.
pub const POLICY_NAMES: &[&str] = &[
    "rss",
    "rsspp",
    "sprayer",
    "sw-shared",
    "sw-rr",
    "sw-stateful-rr",
    "sw-stateful-load",
    "metron",
    "affinity-accept",
    "orss",
];

/// Names for the scaling variants, so that a run can compare them with the
/// fixed-core policies (the RSS++ paper's Figure 11).
pub const AUTOSCALING_NAMES: &[&str] = &["rsspp-autoscale", "metron-autoscale"];

/// The balancers production systems run (not in the default list: name
/// them with `--policies`): Open vSwitch's PMD auto load balancer and
/// Linux's Receive Flow Steering.
pub const PRODUCTION_NAMES: &[&str] = &["ovs-alb", "rfs"];

/// Builds the policy called `name`.
pub fn build(name: &str, config: &PolicyConfig) -> Result<Box<dyn Policy>, crate::SimError> {
    let autoscaling = PolicyConfig {
        autoscale: true,
        ..config.clone()
    };
    let policy: Box<dyn Policy> = match name {
        "rss" => Box::new(rss::Rss::new(config)?),
        "rsspp" => Box::new(rsspp::RssPlusPlus::new(config)?),
        "rsspp-autoscale" => Box::new(rsspp::RssPlusPlus::new(&autoscaling)?),
        "sprayer" => Box::new(sprayer::Sprayer::new(config)),
        "sw-shared" | "sw-rr" | "sw-stateful-rr" | "sw-stateful-load" => {
            let placement = Placement::from_name(name).expect("a software placement");
            Box::new(SoftwareDispatch::new(config, placement)?)
        }
        "metron" => Box::new(metron::Metron::new(config)?),
        "metron-autoscale" => Box::new(metron::Metron::new(&autoscaling)?),
        "orss" => Box::new(orss::Orss::new(config)?),
        "affinity-accept" => Box::new(affinity_accept::AffinityAccept::new(config)?),
        "ovs-alb" => Box::new(ovs_alb::OvsAlb::new(config)?),
        "rfs" => Box::new(rfs::Rfs::new(config)?),
        _ => {
            return Err(crate::SimError::UnknownPolicy {
                name: name.to_string(),
                known: [POLICY_NAMES, AUTOSCALING_NAMES, PRODUCTION_NAMES]
                    .concat()
                    .join(", "),
            })
        }
    };
    Ok(policy)
}
