//! The migration protocol of §3.3 (Figure 8): moving a bucket's flow table
//! from core A to core B without a lock on the fast path and without
//! processing any packet out of order.
//!
//! Three parties take part:
//!
//! 1. The **coordinator** ([`MigrationCoordinator`], run where the
//!    indirection table is rewritten: the balancing timer, or the NIC model of
//!    a simulation). For a [`MigrationPlan`] it checks every move, notes for
//!    each source core how many packets the NIC had queued to it so far
//!    ([`Release::after_received`]), rewrites the table, and hands each
//!    concerned core a [`CoreCommand`].
//! 2. The **old owner A** keeps processing bucket X's packets that were
//!    queued before the switch, and releases X's table as soon as either
//!    - it has taken from its receive queue as many packets as had been
//!      queued to it when the table was rewritten (first release condition), or
//!    - it takes from its queue a packet of a bucket newly assigned to it by
//!      the same or a later rewrite (second condition: its queue is FIFO, so
//!      every packet queued under the old table is behind it).
//!
//!    Releasing *moves* the table into a [`Handoff`] value: A no longer has
//!    it, so no two cores can ever touch it.
//! 3. The **new owner B** parks the packets of X that reach it before the
//!    handoff in a per-bucket pending queue only B touches; when the
//!    [`Handoff`] arrives it takes the table, processes the parked packets in
//!    arrival order, and reports [`Completed`] to the coordinator.
//!
//! The coordinator refuses to move a bucket again until its previous move is
//! completed, so at most one handoff per bucket is ever in flight.

use serde::{Deserialize, Serialize};

use crate::reta::{CoreId, IndirectionTable, MigrationPlan, RetaError};
use crate::state::table::FlowTable;

/// Why a plan, a command or a handoff was refused. Nothing changes when one
/// of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrationError {
    /// The plan does not fit the indirection table.
    #[error(transparent)]
    Plan(#[from] RetaError),
    /// A move whose source and destination are the same core.
    #[error("bucket {bucket} is moved from core {core} to itself")]
    SelfMove {
        /// The bucket.
        bucket: usize,
        /// The core.
        core: CoreId,
    },
    /// A bucket whose previous move has not completed yet.
    #[error("bucket {bucket} is still migrating (move {generation} not completed)")]
    StillMigrating {
        /// The bucket.
        bucket: usize,
        /// The generation of the move in flight.
        generation: u64,
    },
    /// The number of queue marks differs from the number of cores.
    #[error("{got} receive-queue counts given for {cores} cores")]
    QueueCounts {
        /// Counts given.
        got: usize,
        /// Cores.
        cores: usize,
    },
    /// A completion for a bucket that is not migrating with that generation.
    #[error("bucket {bucket} has no move {generation} in flight")]
    NotMigrating {
        /// The bucket.
        bucket: usize,
        /// The generation claimed.
        generation: u64,
    },
    /// A command or handoff delivered to the wrong core.
    #[error("message for core {addressed} delivered to core {core}")]
    WrongCore {
        /// The core it was addressed to.
        addressed: CoreId,
        /// The core that got it.
        core: CoreId,
    },
    /// A bucket number past the worker's table size.
    #[error("bucket {bucket} does not exist (the table has {size} buckets)")]
    UnknownBucket {
        /// The bucket.
        bucket: usize,
        /// Table size.
        size: usize,
    },
    /// A release for a bucket the core does not own.
    #[error("core {core} is told to release bucket {bucket}, which it does not own")]
    NotOwner {
        /// The core.
        core: CoreId,
        /// The bucket.
        bucket: usize,
    },
    /// An arrival or handoff for a bucket the core already owns.
    #[error("core {core} already owns bucket {bucket}")]
    AlreadyOwner {
        /// The core.
        core: CoreId,
        /// The bucket.
        bucket: usize,
    },
    /// A second arrival announced for a bucket already on its way.
    #[error("core {core} was already told that bucket {bucket} is coming")]
    AlreadyAnnounced {
        /// The core.
        core: CoreId,
        /// The bucket.
        bucket: usize,
    },
    /// A bucket named twice in one command.
    #[error("bucket {0} is named twice in one command")]
    Duplicate(usize),
    /// A handoff sent to a worker of the shared-table baseline, which keeps
    /// no per-bucket tables.
    #[error("a shared-table worker takes no per-bucket table")]
    SharedTable,
}

/// A handoff that a worker refused, returned with the table so that no flow
/// state is lost.
#[derive(thiserror::Error)]
#[error("handoff of bucket {} to core {} refused: {error}", .handoff.bucket, .handoff.to)]
pub struct HandoffRejected<S> {
    /// Why.
    #[source]
    pub error: MigrationError,
    /// The handoff, table included.
    pub handoff: Box<Handoff<S>>,
}

impl<S> std::fmt::Debug for HandoffRejected<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoffRejected")
            .field("error", &self.error)
            .field("handoff", &self.handoff)
            .finish()
    }
}

/// "Release bucket `bucket` to core `to`": sent to the old owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Release {
    /// The bucket.
    pub bucket: usize,
    /// The new owner.
    pub to: CoreId,
    /// Packets the NIC had queued to the old owner, counted since start, when
    /// the table was rewritten. Once the old owner has taken that many
    /// packets from its queue, no packet of the bucket can still be waiting
    /// for it.
    pub after_received: u64,
}

/// "Bucket `bucket` comes to you from core `from`": sent to the new owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Arrival {
    /// The bucket.
    pub bucket: usize,
    /// The old owner.
    pub from: CoreId,
}

/// Everything one core must know about one table rewrite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct CoreCommand {
    /// The core it is for.
    pub core: CoreId,
    /// The rewrite's number (1 for the first plan, increasing).
    pub generation: u64,
    /// Buckets this core must hand over.
    pub releases: Vec<Release>,
    /// Buckets this core will receive.
    pub arrivals: Vec<Arrival>,
}

/// A bucket's flow table on its way from its old owner to its new one.
///
/// Owning this value is owning the table: it is moved (over a channel, or by
/// a function call in a simulation), never shared. (`Clone` exists for
/// model checking, which explores copies of a whole system.)
#[derive(Clone, Hash)]
pub struct Handoff<S> {
    /// The bucket.
    pub bucket: usize,
    /// The old owner.
    pub from: CoreId,
    /// The new owner.
    pub to: CoreId,
    /// The rewrite that moved the bucket.
    pub generation: u64,
    /// The bucket's flows.
    pub table: FlowTable<S>,
}

impl<S> std::fmt::Debug for Handoff<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("bucket", &self.bucket)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("generation", &self.generation)
            .field("table", &self.table)
            .finish()
    }
}

/// "The move of `bucket` in rewrite `generation` is done": reported by the
/// new owner once it holds the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Completed {
    /// The bucket.
    pub bucket: usize,
    /// The rewrite that moved it.
    pub generation: u64,
}

/// Position of `core`'s command in `commands` (sorted by core), added if
/// missing.
fn command_index(commands: &mut Vec<CoreCommand>, core: CoreId, generation: u64) -> usize {
    match commands.binary_search_by_key(&core, |c| c.core) {
        Ok(i) => i,
        Err(i) => {
            commands.insert(
                i,
                CoreCommand {
                    core,
                    generation,
                    releases: Vec::new(),
                    arrivals: Vec::new(),
                },
            );
            i
        }
    }
}

/// The coordinator's side of the protocol: owns the indirection table, turns
/// plans into per-core commands, and tracks moves in flight.
#[derive(Debug, Clone)]
pub struct MigrationCoordinator {
    table: IndirectionTable,
    cores: usize,
    generation: u64,
    /// Per bucket: generation of the move in flight, if any.
    in_flight: Vec<Option<u64>>,
    migrating: usize,
    completed: u64,
}

impl MigrationCoordinator {
    /// A coordinator for `table` over `cores` cores. Every entry of `table`
    /// must name one of them.
    pub fn new(table: IndirectionTable, cores: usize) -> Result<Self, MigrationError> {
        let table = IndirectionTable::from_entries(table.entries().to_vec(), cores)?;
        Ok(Self {
            in_flight: vec![None; table.len()],
            table,
            cores,
            generation: 0,
            migrating: 0,
            completed: 0,
        })
    }

    /// The table as rewritten so far.
    pub fn table(&self) -> &IndirectionTable {
        &self.table
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Number of the last rewrite (0 before the first).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True while `bucket`'s last move has not completed.
    pub fn is_migrating(&self, bucket: usize) -> bool {
        self.in_flight.get(bucket).is_some_and(Option::is_some)
    }

    /// Number of buckets whose move has not completed.
    pub fn migrating(&self) -> usize {
        self.migrating
    }

    /// Number of bucket moves completed so far.
    pub fn completed_moves(&self) -> u64 {
        self.completed
    }

    /// Applies `plan`: checks it, rewrites the table, and returns one command
    /// per concerned core, ascending by core.
    ///
    /// `queued[c]` is the number of packets queued to core `c` since start at
    /// this instant (a NIC's per-queue receive counter); the caller must make
    /// sure no packet is queued between reading those counts and the next
    /// packet dispatched with [`table`](Self::table).
    ///
    /// A plan with an unknown bucket or core, a wrong source, a bucket moved
    /// twice, moved to its own core, or still migrating is refused as a whole.
    pub fn apply(
        &mut self,
        plan: &MigrationPlan,
        queued: &[u64],
    ) -> Result<Vec<CoreCommand>, MigrationError> {
        if queued.len() != self.cores {
            return Err(MigrationError::QueueCounts {
                got: queued.len(),
                cores: self.cores,
            });
        }
        plan.validate(&self.table, self.cores)?;
        for m in &plan.moves {
            if m.from == m.to {
                return Err(MigrationError::SelfMove {
                    bucket: m.bucket,
                    core: m.from,
                });
            }
            if let Some(generation) = self.in_flight[m.bucket] {
                return Err(MigrationError::StillMigrating {
                    bucket: m.bucket,
                    generation,
                });
            }
        }
        self.generation += 1;
        let generation = self.generation;
        self.table.apply(plan, self.cores)?;
        let mut commands: Vec<CoreCommand> = Vec::new();
        for m in &plan.moves {
            self.in_flight[m.bucket] = Some(generation);
            let i = command_index(&mut commands, m.from, generation);
            commands[i].releases.push(Release {
                bucket: m.bucket,
                to: m.to,
                after_received: queued[m.from],
            });
            let i = command_index(&mut commands, m.to, generation);
            commands[i].arrivals.push(Arrival {
                bucket: m.bucket,
                from: m.from,
            });
        }
        self.migrating += plan.moves.len();
        Ok(commands)
    }

    /// Records that a move is done; the bucket may move again.
    pub fn complete(&mut self, done: Completed) -> Result<(), MigrationError> {
        match self.in_flight.get_mut(done.bucket) {
            Some(slot) if *slot == Some(done.generation) => {
                *slot = None;
                self.migrating -= 1;
                self.completed += 1;
                Ok(())
            }
            _ => Err(MigrationError::NotMigrating {
                bucket: done.bucket,
                generation: done.generation,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reta::BucketMove;

    fn mv(bucket: usize, from: CoreId, to: CoreId) -> BucketMove {
        BucketMove { bucket, from, to }
    }

    fn plan(moves: &[BucketMove]) -> MigrationPlan {
        MigrationPlan {
            moves: moves.to_vec(),
        }
    }

    fn coordinator() -> MigrationCoordinator {
        MigrationCoordinator::new(IndirectionTable::equal(64, 3).unwrap(), 3).unwrap()
    }

    #[test]
    fn commands_carry_queue_marks() {
        let mut c = coordinator();
        // Buckets 0 and 3 are on core 0, bucket 1 on core 1.
        let cmds = c
            .apply(
                &plan(&[mv(0, 0, 2), mv(3, 0, 1), mv(1, 1, 0)]),
                &[10, 20, 30],
            )
            .unwrap();
        assert_eq!(c.table().core_of(0), 2);
        assert_eq!(c.table().core_of(3), 1);
        assert_eq!(c.table().core_of(1), 0);
        assert_eq!(cmds.len(), 3);
        assert_eq!(cmds[0].core, 0);
        assert_eq!(cmds[0].generation, 1);
        assert_eq!(
            cmds[0].releases,
            vec![
                Release {
                    bucket: 0,
                    to: 2,
                    after_received: 10
                },
                Release {
                    bucket: 3,
                    to: 1,
                    after_received: 10
                }
            ]
        );
        assert_eq!(cmds[0].arrivals, vec![Arrival { bucket: 1, from: 1 }]);
        assert_eq!(cmds[1].releases[0].after_received, 20);
        assert_eq!(cmds[2].arrivals, vec![Arrival { bucket: 0, from: 0 }]);
        assert_eq!(c.migrating(), 3);
    }

    #[test]
    fn bad_plans_change_nothing() {
        let mut c = coordinator();
        let before = c.table().clone();
        let bad = [
            plan(&[mv(64, 1, 0)]),
            plan(&[mv(0, 0, 3)]),
            plan(&[mv(0, 1, 2)]),
            plan(&[mv(0, 0, 1), mv(0, 0, 2)]),
            plan(&[mv(1, 1, 0), mv(0, 0, 0)]),
        ];
        for p in &bad {
            assert!(c.apply(p, &[0, 0, 0]).is_err(), "{p}");
        }
        assert!(matches!(
            c.apply(&plan(&[mv(1, 1, 0)]), &[0, 0]),
            Err(MigrationError::QueueCounts { got: 2, cores: 3 })
        ));
        assert_eq!(c.table(), &before);
        assert_eq!(c.generation(), 0);
        assert_eq!(c.migrating(), 0);
    }

    #[test]
    fn a_bucket_moves_again_only_after_completion() {
        let mut c = coordinator();
        c.apply(&plan(&[mv(0, 0, 1)]), &[0, 0, 0]).unwrap();
        let err = c.apply(&plan(&[mv(0, 1, 2), mv(4, 1, 2)]), &[0, 0, 0]);
        assert_eq!(
            err,
            Err(MigrationError::StillMigrating {
                bucket: 0,
                generation: 1
            })
        );
        assert_eq!(c.table().core_of(4), 1, "refused plan applied partly");
        assert!(c
            .complete(Completed {
                bucket: 0,
                generation: 2
            })
            .is_err());
        c.complete(Completed {
            bucket: 0,
            generation: 1,
        })
        .unwrap();
        assert!(c
            .complete(Completed {
                bucket: 0,
                generation: 1
            })
            .is_err());
        assert!(c.apply(&plan(&[mv(0, 1, 2)]), &[0, 0, 0]).is_ok());
        assert_eq!(c.completed_moves(), 1);
    }

    #[test]
    fn table_naming_unknown_cores_is_refused() {
        let t = IndirectionTable::equal(64, 4).unwrap();
        assert!(MigrationCoordinator::new(t, 2).is_err());
    }
}
