//! Counters of the mechanisms behind the numbers: each policy's own (steals,
//! buffered packets, class splits…), the engine's state accesses, the
//! Reframer stage's. One struct per source, so a policy fills named fields
//! and a reader (a test, the report) reads them, not strings.
//!
//! In JSON a [`Mechanisms`] is one flat object keyed by field name
//! (`.summary.<policy>.mechanisms.steals`); the report lists
//! [`Mechanisms::entries`], one column per name.

use serde::{Deserialize, Serialize};

/// A struct of `u64` counters, serialised by field name, with its entries
/// in declaration order for the report.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* $field:ident,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: u64,)*
        }

        impl $name {
            /// The counters by name, in declaration order.
            pub fn entries(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }
        }
    };
}

counters! {
    /// RSS++ (`rsspp`, `rsspp-autoscale`).
    pub struct RssPlusPlusCounters {
        /// Control rounds run.
        rounds,
        /// Rounds that produced a migration plan.
        plans,
        /// Rounds put off because the previous plan was still being carried
        /// out.
        rounds_postponed,
        /// Packets parked while their bucket's state moved.
        parked_packets,
        /// Most packets pending on one core during a migration.
        peak_pending,
        /// Cores added by scaling.
        cores_added,
        /// Cores removed by scaling.
        cores_removed,
    }
}

counters! {
    /// Metron (`metron`, `metron-autoscale`).
    pub struct MetronCounters {
        /// Traffic classes split in two.
        class_splits,
        /// Overloaded cores whose classes were split onto another.
        core_splits,
        /// Underloaded cores merged into another.
        core_merges,
        /// Overloads left because no class could be split further.
        unsplittable,
        /// Traffic classes at the end.
        classes,
    }
}

counters! {
    /// Affinity-Accept (`affinity-accept`).
    pub struct AffinityAcceptCounters {
        /// Connections accepted.
        connections_accepted,
        /// Connections stolen from a busy core.
        steals,
        /// Flow groups moved to a core that stole from their core.
        flow_group_migrations,
        /// Cores turning busy.
        busy_transitions,
        /// Packets handed to their connection's owner by another core.
        forwarded_packets,
        /// Connections refused by a full accept queue.
        accept_queue_drops,
        /// Packets of refused connections, dropped.
        refused_packets,
        /// Packets dropped by a full backlog.
        backlog_drops,
        /// Packets held behind a migrated flow group's fence.
        fence_held_packets,
    }
}

counters! {
    /// oRSS (`orss`).
    pub struct OrssCounters {
        /// Packets parked in a migration buffer.
        buffered_packets,
        /// Packets dropped by a full migration buffer.
        buffer_drops,
        /// Packets in the fullest migration buffer.
        buffer_peak,
        /// Migrations that had to buffer (the others were immediate).
        buffered_migrations,
        /// Balancing rounds.
        rounds,
        /// Rounds ended because the next move would not lower the imbalance
        /// enough.
        rejected_moves,
        /// Moves refused to a flow still cooling down from its last move.
        pingpong_prevented,
        /// Flows newly left alone on their core by core reduction.
        isolated_flows,
        /// Flows with polls in the load estimate at the end.
        tracked_flows,
    }
}

counters! {
    /// A software dispatcher without a flow table (`sw-shared`, `sw-rr`).
    pub struct DispatchCounters {
        /// Packets handed to a ring (dropped ones included).
        dispatched,
    }
}

counters! {
    /// A software dispatcher with a flow table (`sw-stateful-rr`,
    /// `sw-stateful-load`).
    pub struct StatefulDispatchCounters {
        /// Packets handed to a ring (dropped ones included).
        dispatched,
        /// Flows placed (new flows, and flows whose number started over).
        flows_placed,
    }
}

counters! {
    /// The engine's accesses to per-flow state, whatever the policy.
    pub struct StateAccessCounters {
        /// Accesses that found the flow's state in the core's cache model.
        state_hits,
        /// Accesses that missed it.
        state_misses,
        /// Accesses to state another core touched last.
        state_remote,
        /// Time spent waiting for a shared table's lock stripes, µs.
        lock_wait_us,
    }
}

counters! {
    /// The Reframer stage in front of the NIC (ratios × 1000, as integers).
    pub struct ReframerMechanisms {
        /// Packets held in a batch.
        reframer_buffered,
        /// SYNs sent on without delay.
        reframer_bypassed,
        /// Batches that left at their deadline.
        reframer_flush_timeout,
        /// Batches that left at the maximum burst.
        reframer_flush_burst,
        /// Batches sent early because a SYN of their flow bypassed them.
        reframer_flush_bypass,
        /// Mean packets per batch, × 1000.
        reframer_mean_batch_x1000,
        /// Spatial locality factor of the input stream, × 1000.
        reframer_slf_in_x1000,
        /// Spatial locality factor of the output stream, × 1000.
        reframer_slf_out_x1000,
    }
}

/// A policy's own counters: one variant per kind of policy.
///
/// Serialised as the inner struct's fields (no tag): the field names say
/// which it is. Variants whose fields include another's come first, so
/// that reading one back finds the right one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PolicyMechanisms {
    /// RSS++.
    RssPlusPlus(RssPlusPlusCounters),
    /// Metron.
    Metron(MetronCounters),
    /// Affinity-Accept.
    AffinityAccept(AffinityAcceptCounters),
    /// oRSS.
    Orss(OrssCounters),
    /// A stateful software dispatcher.
    StatefulDispatch(StatefulDispatchCounters),
    /// A software dispatcher without flow table.
    Dispatch(DispatchCounters),
    /// A policy with no mechanism of its own to count (RSS, Sprayer).
    None {},
}

impl Default for PolicyMechanisms {
    fn default() -> Self {
        Self::None {}
    }
}

impl PolicyMechanisms {
    /// The counters by name, in declaration order.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        match self {
            Self::RssPlusPlus(c) => c.entries(),
            Self::Metron(c) => c.entries(),
            Self::AffinityAccept(c) => c.entries(),
            Self::Orss(c) => c.entries(),
            Self::StatefulDispatch(c) => c.entries(),
            Self::Dispatch(c) => c.entries(),
            Self::None {} => Vec::new(),
        }
    }
}

/// Everything counted for one policy's run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mechanisms {
    /// The policy's own.
    #[serde(flatten)]
    pub policy: PolicyMechanisms,
    /// The engine's state accesses.
    #[serde(flatten)]
    pub state: StateAccessCounters,
    /// Spatial locality factor at the cores (Reframer's SLF, seed 002
    /// §2.1): the mean run of packets of one flow a core processes back to
    /// back, × 1000; none when nothing was processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slf_x1000: Option<u64>,
    /// The Reframer stage's, when one ran in front of the policy.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub reframer: Option<ReframerMechanisms>,
}

impl Mechanisms {
    /// Every counter by name: the policy's, the state accesses', the
    /// locality factor, the Reframer's.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let mut all = self.policy.entries();
        all.extend(self.state.entries());
        all.extend(self.slf_x1000.map(|v| ("slf_x1000", v)));
        if let Some(r) = &self.reframer {
            all.extend(r.entries());
        }
        all
    }

    /// RSS++'s counters, if the policy was RSS++.
    pub fn rsspp(&self) -> Option<&RssPlusPlusCounters> {
        match &self.policy {
            PolicyMechanisms::RssPlusPlus(c) => Some(c),
            _ => None,
        }
    }

    /// Metron's counters, if the policy was Metron.
    pub fn metron(&self) -> Option<&MetronCounters> {
        match &self.policy {
            PolicyMechanisms::Metron(c) => Some(c),
            _ => None,
        }
    }

    /// Affinity-Accept's counters, if the policy was Affinity-Accept.
    pub fn affinity_accept(&self) -> Option<&AffinityAcceptCounters> {
        match &self.policy {
            PolicyMechanisms::AffinityAccept(c) => Some(c),
            _ => None,
        }
    }

    /// oRSS's counters, if the policy was oRSS.
    pub fn orss(&self) -> Option<&OrssCounters> {
        match &self.policy {
            PolicyMechanisms::Orss(c) => Some(c),
            _ => None,
        }
    }

    /// Packets a software dispatcher handed to its rings, if the policy was
    /// one.
    pub fn dispatched(&self) -> Option<u64> {
        match &self.policy {
            PolicyMechanisms::Dispatch(c) => Some(c.dispatched),
            PolicyMechanisms::StatefulDispatch(c) => Some(c.dispatched),
            _ => None,
        }
    }

    /// Flows a stateful software dispatcher placed, if the policy was one.
    pub fn flows_placed(&self) -> Option<u64> {
        match &self.policy {
            PolicyMechanisms::StatefulDispatch(c) => Some(c.flows_placed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_one_flat_object_keyed_by_field() {
        let m = Mechanisms {
            policy: PolicyMechanisms::AffinityAccept(AffinityAcceptCounters {
                steals: 3,
                ..Default::default()
            }),
            state: StateAccessCounters {
                state_hits: 10,
                ..Default::default()
            },
            slf_x1000: Some(1500),
            reframer: None,
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["steals"], 3);
        assert_eq!(v["state_hits"], 10);
        assert_eq!(v["slf_x1000"], 1500);
        assert!(v.get("reframer_buffered").is_none());
        let names: Vec<&str> = m.entries().iter().map(|(k, _)| *k).collect();
        assert_eq!(names.len(), v.as_object().unwrap().len());
        for (k, value) in m.entries() {
            assert_eq!(v[k], value, "{k}");
        }
    }

    #[test]
    fn every_kind_reads_back_as_itself() {
        let kinds = [
            PolicyMechanisms::RssPlusPlus(RssPlusPlusCounters {
                rounds: 1,
                ..Default::default()
            }),
            PolicyMechanisms::Metron(MetronCounters::default()),
            PolicyMechanisms::AffinityAccept(AffinityAcceptCounters::default()),
            PolicyMechanisms::Orss(OrssCounters {
                rounds: 2,
                ..Default::default()
            }),
            PolicyMechanisms::StatefulDispatch(StatefulDispatchCounters {
                dispatched: 5,
                flows_placed: 1,
            }),
            PolicyMechanisms::Dispatch(DispatchCounters { dispatched: 5 }),
            PolicyMechanisms::None {},
        ];
        for policy in kinds {
            for reframer in [None, Some(ReframerMechanisms::default())] {
                let m = Mechanisms {
                    policy: policy.clone(),
                    state: StateAccessCounters::default(),
                    slf_x1000: None,
                    reframer,
                };
                let json = serde_json::to_string(&m).unwrap();
                let back: Mechanisms = serde_json::from_str(&json).unwrap();
                assert_eq!(back, m, "{json}");
            }
        }
    }
}
