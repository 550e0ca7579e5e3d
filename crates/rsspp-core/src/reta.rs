//! The indirection table (RETA): bucket → core.
//!
//! NICs index it with the low bits of the RSS hash ([`crate::bucket_of`]), so
//! its size is a power of two; 128 and 512 are the common hardware sizes.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::rand::SplitMix64;

/// Index of a core (a receive queue, a CPU) as the table names it.
pub type CoreId = usize;

/// Smallest table size accepted.
pub const MIN_SIZE: usize = 64;
/// Largest table size accepted.
pub const MAX_SIZE: usize = 65536;

/// The table-size rule in words, as every message about a table size says
/// it.
pub const SIZE_RULE: &str = "a power of two from 64 to 65536";

const _: () = assert!(
    MIN_SIZE == 64 && MAX_SIZE == 65536,
    "SIZE_RULE says 64 to 65536"
);

/// Why a table could not be built or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetaError {
    /// Size not [`SIZE_RULE`].
    #[error("indirection table size {0} is not {SIZE_RULE}")]
    BadSize(usize),
    /// No cores to spread over.
    #[error("an indirection table needs at least one core")]
    NoCores,
    /// A weight list with no positive weight.
    #[error("at least one weight must be positive")]
    ZeroWeights,
    /// A bucket index past the end of the table.
    #[error("bucket {bucket} does not exist (the table has {size} buckets)")]
    UnknownBucket {
        /// The bucket named.
        bucket: usize,
        /// Table size.
        size: usize,
    },
    /// A core index past the number of cores.
    #[error("core {core} does not exist (there are {cores} cores)")]
    UnknownCore {
        /// The core named.
        core: CoreId,
        /// Number of cores.
        cores: usize,
    },
    /// A move whose `from` is not where the bucket is.
    #[error("bucket {bucket} is on core {actual}, not on core {claimed}")]
    WrongSource {
        /// The bucket.
        bucket: usize,
        /// Where the move says it is.
        claimed: CoreId,
        /// Where it is.
        actual: CoreId,
    },
    /// A plan that moves one bucket twice.
    #[error("bucket {0} is moved twice in one plan")]
    DuplicateMove(usize),
}

/// One bucket changing core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BucketMove {
    /// The bucket.
    pub bucket: usize,
    /// The core it leaves.
    pub from: CoreId,
    /// The core it goes to.
    pub to: CoreId,
}

/// A set of bucket moves applied together: what the balancer proposes, and
/// what the table's owner prepares per-bucket state for, then applies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationPlan {
    /// The moves, at most one per bucket.
    pub moves: Vec<BucketMove>,
}

impl MigrationPlan {
    /// True when nothing moves.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty()
    }

    /// The moves grouped as "buckets X, Y, Z move from core A to core B".
    pub fn by_core_pair(&self) -> BTreeMap<(CoreId, CoreId), Vec<usize>> {
        let mut groups: BTreeMap<(CoreId, CoreId), Vec<usize>> = BTreeMap::new();
        for m in &self.moves {
            groups.entry((m.from, m.to)).or_default().push(m.bucket);
        }
        groups
    }

    /// Checks the plan against `table` with `cores` cores: every bucket and
    /// core exists, each move starts where its bucket is, no bucket moves twice.
    pub fn validate(&self, table: &IndirectionTable, cores: usize) -> Result<(), RetaError> {
        let mut seen = vec![false; table.len()];
        for m in &self.moves {
            let actual = table.core_of_checked(m.bucket)?;
            for core in [m.from, m.to] {
                if core >= cores {
                    return Err(RetaError::UnknownCore { core, cores });
                }
            }
            if actual != m.from {
                return Err(RetaError::WrongSource {
                    bucket: m.bucket,
                    claimed: m.from,
                    actual,
                });
            }
            if std::mem::replace(&mut seen[m.bucket], true) {
                return Err(RetaError::DuplicateMove(m.bucket));
            }
        }
        Ok(())
    }
}

impl fmt::Display for MigrationPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no moves");
        }
        let groups = self.by_core_pair();
        for (i, ((from, to), buckets)) in groups.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let list: Vec<String> = buckets.iter().map(ToString::to_string).collect();
            write!(
                f,
                "buckets {} move from core {from} to core {to}",
                list.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Bucket → core mapping.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndirectionTable {
    entries: Vec<CoreId>,
}

/// [`RetaError::BadSize`] unless `size` is [`SIZE_RULE`]: a power of two
/// from [`MIN_SIZE`] to [`MAX_SIZE`].
pub fn check_size(size: usize) -> Result<(), RetaError> {
    if size.is_power_of_two() && (MIN_SIZE..=MAX_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(RetaError::BadSize(size))
    }
}

impl IndirectionTable {
    /// Like `ethtool -X IF equal N`: bucket `i` → core `i mod cores`.
    pub fn equal(size: usize, cores: usize) -> Result<Self, RetaError> {
        check_size(size)?;
        if cores == 0 {
            return Err(RetaError::NoCores);
        }
        Ok(Self {
            entries: (0..size).map(|i| i % cores).collect(),
        })
    }

    /// Like `equal`, over an explicit list of cores: bucket `i` → `cores[i mod n]`.
    pub fn equal_over(size: usize, cores: &[CoreId]) -> Result<Self, RetaError> {
        let t = Self::equal(size, cores.len())?;
        Ok(Self {
            entries: t.entries.iter().map(|&i| cores[i]).collect(),
        })
    }

    /// Like `ethtool -X IF weight W0 W1 …`: core `k` gets a contiguous run of
    /// buckets whose length is proportional to `weights[k]`.
    pub fn weighted(size: usize, weights: &[u32]) -> Result<Self, RetaError> {
        check_size(size)?;
        if weights.is_empty() {
            return Err(RetaError::NoCores);
        }
        let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        if sum == 0 {
            return Err(RetaError::ZeroWeights);
        }
        // Core k owns buckets [⌊size·W(<k)/sum⌋, ⌊size·W(≤k)/sum⌋).
        let mut entries = Vec::with_capacity(size);
        let mut cumulative = 0u64;
        for (core, &w) in weights.iter().enumerate() {
            cumulative += u64::from(w);
            let end = (size as u64 * cumulative / sum) as usize;
            entries.resize(end, core);
        }
        Ok(Self { entries })
    }

    /// A table from explicit entries; every entry must name one of `cores` cores.
    pub fn from_entries(entries: Vec<CoreId>, cores: usize) -> Result<Self, RetaError> {
        check_size(entries.len())?;
        if let Some(&core) = entries.iter().find(|&&c| c >= cores) {
            return Err(RetaError::UnknownCore { core, cores });
        }
        Ok(Self { entries })
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: a table has at least 64 buckets.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The core of `bucket`.
    ///
    /// # Panics
    /// If `bucket >= self.len()`.
    #[inline]
    pub fn core_of(&self, bucket: usize) -> CoreId {
        self.entries[bucket]
    }

    /// The core of `bucket`, or an error naming the bucket.
    pub fn core_of_checked(&self, bucket: usize) -> Result<CoreId, RetaError> {
        self.entries
            .get(bucket)
            .copied()
            .ok_or(RetaError::UnknownBucket {
                bucket,
                size: self.len(),
            })
    }

    /// All entries, bucket order.
    pub fn entries(&self) -> &[CoreId] {
        &self.entries
    }

    /// The buckets assigned to `core`, ascending.
    pub fn buckets_of(&self, core: CoreId) -> Vec<usize> {
        (0..self.len())
            .filter(|&b| self.entries[b] == core)
            .collect()
    }

    /// Number of buckets per core, for cores `0..cores`.
    pub fn bucket_counts(&self, cores: usize) -> Vec<usize> {
        let mut counts = vec![0; cores];
        for &c in &self.entries {
            if c < cores {
                counts[c] += 1;
            }
        }
        counts
    }

    /// The distinct cores that own at least one bucket, ascending.
    pub fn cores_in_use(&self) -> Vec<CoreId> {
        let mut used = vec![false; self.entries.iter().copied().max().map_or(0, |c| c + 1)];
        for &c in &self.entries {
            used[c] = true;
        }
        used.iter()
            .enumerate()
            .filter(|(_, &u)| u)
            .map(|(c, _)| c)
            .collect()
    }

    /// Points `bucket` at `to` and returns the core it was on.
    pub fn move_bucket(&mut self, bucket: usize, to: CoreId) -> Result<CoreId, RetaError> {
        let from = self.core_of_checked(bucket)?;
        self.entries[bucket] = to;
        Ok(from)
    }

    /// The moves that turn `self` into `target` (same size required).
    pub fn diff(&self, target: &IndirectionTable) -> Result<MigrationPlan, RetaError> {
        if self.len() != target.len() {
            return Err(RetaError::BadSize(target.len()));
        }
        let moves = self
            .entries
            .iter()
            .zip(&target.entries)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(bucket, (&from, &to))| BucketMove { bucket, from, to })
            .collect();
        Ok(MigrationPlan { moves })
    }

    /// A plan moving `count` distinct buckets, drawn at random, each to
    /// another of `cores` cores drawn at random (fewer when the table is
    /// smaller; none with fewer than two cores), never one of `held` (buckets
    /// still in handoff). Churn for testing what migration does to traffic,
    /// whatever the load.
    pub fn random_plan(
        &self,
        count: usize,
        cores: usize,
        held: &[usize],
        rng: &mut SplitMix64,
    ) -> MigrationPlan {
        if cores < 2 {
            return MigrationPlan::default();
        }
        let mut buckets: Vec<usize> = (0..self.len()).filter(|b| !held.contains(b)).collect();
        rng.shuffle(&mut buckets);
        let moves = buckets
            .into_iter()
            .take(count)
            .map(|bucket| {
                let from = self.entries[bucket];
                // Uniform over the other cores: skip `from`.
                let pick = rng.below(cores - 1);
                let to = if pick >= from { pick + 1 } else { pick };
                BucketMove { bucket, from, to }
            })
            .collect();
        MigrationPlan { moves }
    }

    /// Applies a plan after checking it against `cores` cores; on error the
    /// table is unchanged.
    pub fn apply(&mut self, plan: &MigrationPlan, cores: usize) -> Result<(), RetaError> {
        plan.validate(self, cores)?;
        for m in &plan.moves {
            self.entries[m.bucket] = m.to;
        }
        Ok(())
    }
}

impl fmt::Debug for IndirectionTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IndirectionTable{:?}", self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_plans_move_distinct_buckets_to_other_cores() {
        let table = IndirectionTable::equal(128, 4).unwrap();
        let mut rng = SplitMix64::new(7);
        let mut seen_targets = [false; 4];
        for _ in 0..50 {
            let plan = table.random_plan(10, 4, &[], &mut rng);
            assert_eq!(plan.moves.len(), 10);
            plan.validate(&table, 4).unwrap();
            assert!(plan.moves.iter().all(|m| m.from != m.to && m.to < 4));
            for m in &plan.moves {
                seen_targets[m.to] = true;
            }
        }
        assert_eq!(seen_targets, [true; 4]);
        assert_eq!(table.random_plan(500, 4, &[], &mut rng).moves.len(), 128);
        let held: Vec<usize> = (0..120).collect();
        let plan = table.random_plan(500, 4, &held, &mut rng);
        assert_eq!(plan.moves.len(), 8);
        assert!(plan.moves.iter().all(|m| m.bucket >= 120));
        assert!(table.random_plan(5, 1, &[], &mut rng).is_empty());
    }

    #[test]
    fn sizes() {
        for size in [64, 128, 512, 4096, 65536] {
            assert_eq!(IndirectionTable::equal(size, 3).unwrap().len(), size);
        }
        for bad in [0, 32, 100, 131072] {
            assert_eq!(
                IndirectionTable::equal(bad, 2),
                Err(RetaError::BadSize(bad))
            );
        }
        assert_eq!(IndirectionTable::equal(128, 0), Err(RetaError::NoCores));
    }

    #[test]
    fn equal_is_round_robin() {
        let t = IndirectionTable::equal(128, 3).unwrap();
        assert_eq!(&t.entries()[..6], &[0, 1, 2, 0, 1, 2]);
        assert_eq!(t.bucket_counts(3), vec![43, 43, 42]);
        let t = IndirectionTable::equal_over(64, &[2, 5]).unwrap();
        assert_eq!(&t.entries()[..4], &[2, 5, 2, 5]);
        assert_eq!(t.cores_in_use(), vec![2, 5]);
    }

    #[test]
    fn weighted_is_contiguous_and_proportional() {
        let t = IndirectionTable::weighted(128, &[1, 1, 2]).unwrap();
        assert_eq!(t.bucket_counts(3), vec![32, 32, 64]);
        assert!(t.entries().windows(2).all(|w| w[0] <= w[1]));
        let t = IndirectionTable::weighted(64, &[0, 3]).unwrap();
        assert_eq!(t.bucket_counts(2), vec![0, 64]);
        assert_eq!(
            IndirectionTable::weighted(64, &[0, 0]),
            Err(RetaError::ZeroWeights)
        );
    }

    #[test]
    fn diff_and_apply_round_trip() {
        let a = IndirectionTable::equal(64, 4).unwrap();
        let b = IndirectionTable::weighted(64, &[1, 1, 1, 1]).unwrap();
        let plan = a.diff(&b).unwrap();
        let mut c = a.clone();
        c.apply(&plan, 4).unwrap();
        assert_eq!(c, b);
        assert!(b.diff(&b).unwrap().is_empty());
    }

    #[test]
    fn bad_plans_are_rejected_and_leave_the_table_alone() {
        let mut t = IndirectionTable::equal(64, 2).unwrap();
        let before = t.clone();
        let mv = |bucket, from, to| BucketMove { bucket, from, to };
        let cases = [
            (
                vec![mv(64, 0, 1)],
                RetaError::UnknownBucket {
                    bucket: 64,
                    size: 64,
                },
            ),
            (
                vec![mv(0, 0, 7)],
                RetaError::UnknownCore { core: 7, cores: 2 },
            ),
            (
                vec![mv(0, 1, 0)],
                RetaError::WrongSource {
                    bucket: 0,
                    claimed: 1,
                    actual: 0,
                },
            ),
            (vec![mv(2, 0, 1), mv(2, 0, 1)], RetaError::DuplicateMove(2)),
        ];
        for (moves, err) in cases {
            assert_eq!(t.apply(&MigrationPlan { moves }, 2), Err(err));
            assert_eq!(t, before);
        }
        assert!(matches!(
            IndirectionTable::from_entries([0, 1, 2].repeat(22)[..64].to_vec(), 2),
            Err(RetaError::UnknownCore { core: 2, cores: 2 })
        ));
    }

    #[test]
    fn plan_groups_by_core_pair() {
        let plan = MigrationPlan {
            moves: vec![
                BucketMove {
                    bucket: 3,
                    from: 0,
                    to: 1,
                },
                BucketMove {
                    bucket: 9,
                    from: 0,
                    to: 1,
                },
                BucketMove {
                    bucket: 4,
                    from: 2,
                    to: 1,
                },
            ],
        };
        assert_eq!(
            plan.to_string(),
            "buckets 3, 9 move from core 0 to core 1; buckets 4 move from core 2 to core 1"
        );
    }
}
