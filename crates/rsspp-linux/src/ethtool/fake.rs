//! [`FakeNic`]: an [`RssDevice`] in memory, for the daemon's unit tests.

use std::collections::{BTreeMap, VecDeque};

use rsspp_core::RssKey;

use super::{
    check_table, Errno, EthtoolError, FlowRule, HashFunction, RssConfig, RssDevice, RuleTable,
};

/// A NIC with an indirection table in memory. It refuses what the kernel
/// refuses (a table of the wrong size, entries naming missing queues), can
/// be read-only like most virtual NICs, fails on demand, and records every
/// table written. With [`FakeNic::with_rules`] it has an ntuple rule table.
#[derive(Debug, Clone)]
pub struct FakeNic {
    name: String,
    table: Vec<u32>,
    key: Vec<u8>,
    hfunc: HashFunction,
    queues: u32,
    writable: bool,
    failures: VecDeque<EthtoolError>,
    writes: Vec<Vec<u32>>,
    user_set: bool,
    /// The ntuple rule table's size and its rules by location; `None`: no
    /// ntuple rules.
    rules: Option<(u32, BTreeMap<u32, FlowRule>)>,
}

impl FakeNic {
    /// A writable NIC named `name` with a `table_size`-entry table spread
    /// over `queues` RX queues the way drivers initialise it (entry `i` →
    /// queue `i mod queues`), the Microsoft key and Toeplitz hashing.
    pub fn new(name: &str, table_size: usize, queues: u32) -> Self {
        Self {
            name: name.to_string(),
            table: super::default_table(table_size, queues),
            key: RssKey::microsoft().as_bytes().to_vec(),
            hfunc: HashFunction::Toeplitz,
            queues,
            writable: true,
            failures: VecDeque::new(),
            writes: Vec::new(),
            user_set: false,
            rules: None,
        }
    }

    /// Gives the NIC an ntuple rule table of `size` locations.
    pub fn with_rules(mut self, size: u32) -> Self {
        self.rules = Some((size, BTreeMap::new()));
        self
    }

    /// The ntuple rules, by location (none without a rule table).
    pub fn rules(&self) -> Vec<FlowRule> {
        self.rules
            .as_ref()
            .map_or(Vec::new(), |(_, r)| r.values().copied().collect())
    }

    /// Whether the table was written (the kernel's IFF_RXFH_CONFIGURED):
    /// until a reset, `ethtool -L` may not drop a queue it names.
    pub fn user_set(&self) -> bool {
        self.user_set
    }

    /// Makes writes fail as on a driver without a writable table (veth,
    /// most virtio and cloud NICs): `EOPNOTSUPP` from `ETHTOOL_SRSSH`.
    pub fn read_only(mut self) -> Self {
        self.writable = false;
        self
    }

    /// Makes the next call (any method of [`RssDevice`] but `name`) fail
    /// with `error`; calls queue up, one failure each.
    pub fn fail_next(&mut self, error: EthtoolError) {
        self.failures.push_back(error);
    }

    /// Changes the number of RX queues, as `ethtool -L` does; the table
    /// stays as it is, as the kernel leaves a user-set table.
    pub fn set_rx_queues(&mut self, queues: u32) {
        self.queues = queues;
    }

    /// The current table.
    pub fn table(&self) -> &[u32] {
        &self.table
    }

    /// Every table written successfully, oldest first.
    pub fn writes(&self) -> &[Vec<u32>] {
        &self.writes
    }

    fn injected(&mut self) -> Result<(), EthtoolError> {
        match self.failures.pop_front() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl RssDevice for FakeNic {
    fn name(&self) -> &str {
        &self.name
    }

    fn rss(&mut self) -> Result<RssConfig, EthtoolError> {
        self.injected()?;
        Ok(RssConfig {
            indirection: self.table.clone(),
            key: self.key.clone(),
            hfunc: self.hfunc,
        })
    }

    fn set_indirection(&mut self, table: &[u32]) -> Result<(), EthtoolError> {
        self.injected()?;
        if !self.writable {
            return Err(EthtoolError::NotWritable {
                iface: self.name.clone(),
                op: "ETHTOOL_SRSSH",
                errno: Errno(libc::EOPNOTSUPP),
            });
        }
        check_table(&self.name, table, self.table.len(), self.queues)?;
        self.table = table.to_vec();
        self.writes.push(table.to_vec());
        self.user_set = true;
        Ok(())
    }

    fn reset_indirection(&mut self) -> Result<(), EthtoolError> {
        self.injected()?;
        if !self.writable {
            return Err(EthtoolError::NotWritable {
                iface: self.name.clone(),
                op: "ETHTOOL_SRXFHINDIR",
                errno: Errno(libc::EOPNOTSUPP),
            });
        }
        self.table = super::default_table(self.table.len(), self.queues);
        self.user_set = false;
        Ok(())
    }

    fn rx_queues(&mut self) -> Result<u32, EthtoolError> {
        self.injected()?;
        Ok(self.queues)
    }

    fn rule_table(&mut self) -> Result<RuleTable, EthtoolError> {
        self.injected()?;
        match &self.rules {
            None => Err(super::no_rules(&self.name)),
            Some((size, rules)) => Ok(RuleTable {
                size: *size,
                used: rules.keys().copied().collect(),
            }),
        }
    }

    fn insert_rule(&mut self, rule: &FlowRule) -> Result<(), EthtoolError> {
        self.injected()?;
        let queues = self.queues;
        let name = self.name.clone();
        let Some((size, rules)) = &mut self.rules else {
            return Err(super::no_rules(&name));
        };
        // What the kernel and drivers refuse: a location past the table, a
        // queue the NIC does not have.
        if rule.location >= *size || rule.queue >= queues {
            return Err(EthtoolError::RuleRefused {
                iface: name,
                rule: rule.to_string(),
                errno: Errno(libc::EINVAL),
            });
        }
        rules.insert(rule.location, *rule);
        Ok(())
    }

    fn delete_rule(&mut self, location: u32) -> Result<(), EthtoolError> {
        self.injected()?;
        let name = self.name.clone();
        let Some((_, rules)) = &mut self.rules else {
            return Err(super::no_rules(&name));
        };
        match rules.remove(&location) {
            Some(_) => Ok(()),
            None => Err(EthtoolError::Ioctl {
                iface: name,
                op: "ETHTOOL_SRXCLSRLDEL",
                errno: Errno(libc::ENOENT),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_like_a_driver_default_table() {
        let mut nic = FakeNic::new("fake0", 8, 3);
        let rss = nic.rss().unwrap();
        assert_eq!(rss.indirection, vec![0, 1, 2, 0, 1, 2, 0, 1]);
        assert_eq!(rss.key.len(), 40);
        assert_eq!(rss.hfunc, HashFunction::Toeplitz);
        assert_eq!(nic.rx_queues().unwrap(), 3);
        assert!(nic.writes().is_empty());
    }

    #[test]
    fn records_accepted_writes() {
        let mut nic = FakeNic::new("fake0", 4, 4);
        nic.set_indirection(&[3, 3, 1, 1]).unwrap();
        nic.set_indirection(&[0, 1, 2, 3]).unwrap();
        assert_eq!(nic.table(), &[0, 1, 2, 3]);
        assert_eq!(nic.writes(), &[vec![3, 3, 1, 1], vec![0, 1, 2, 3]]);
        assert_eq!(nic.rss().unwrap().indirection, vec![0, 1, 2, 3]);
    }

    #[test]
    fn refuses_wrong_size_and_missing_queues_and_keeps_its_table() {
        let mut nic = FakeNic::new("fake0", 4, 2);
        assert!(matches!(
            nic.set_indirection(&[0, 1]),
            Err(EthtoolError::WrongSize {
                expected: 4,
                actual: 2,
                ..
            })
        ));
        assert!(matches!(
            nic.set_indirection(&[0, 1, 2, 0]),
            Err(EthtoolError::QueueOutOfRange {
                index: 2,
                queue: 2,
                queues: 2,
                ..
            })
        ));
        assert_eq!(nic.table(), &[0, 1, 0, 1]);
        assert!(nic.writes().is_empty());
    }

    #[test]
    fn read_only_nic_refuses_writes_with_the_drivers_errno() {
        let mut nic = FakeNic::new("veth0", 4, 1).read_only();
        let e = nic.set_indirection(&[0, 0, 0, 0]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "veth0: the driver has no writable indirection table \
             (ETHTOOL_SRSSH: EOPNOTSUPP (Operation not supported))"
        );
        assert!(nic.writes().is_empty());
    }

    #[test]
    fn injected_failures_come_once_each_in_order() {
        let mut nic = FakeNic::new("fake0", 4, 2);
        let eperm = EthtoolError::PermissionDenied {
            iface: "fake0".into(),
            op: "ETHTOOL_SRSSH",
            errno: Errno(libc::EPERM),
        };
        let gone = EthtoolError::NoSuchInterface {
            iface: "fake0".into(),
        };
        nic.fail_next(eperm.clone());
        nic.fail_next(gone.clone());
        assert_eq!(nic.set_indirection(&[1, 1, 1, 1]), Err(eperm));
        assert_eq!(nic.rx_queues(), Err(gone));
        assert_eq!(nic.table(), &[0, 1, 0, 1]);
        nic.set_indirection(&[1, 1, 1, 1]).unwrap();
        assert_eq!(nic.writes().len(), 1);
    }

    #[test]
    fn fewer_queues_make_old_entries_invalid() {
        let mut nic = FakeNic::new("fake0", 4, 4);
        nic.set_rx_queues(2);
        assert_eq!(nic.rx_queues().unwrap(), 2);
        assert!(nic.set_indirection(&[0, 1, 2, 3]).is_err());
        nic.set_indirection(&[0, 1, 1, 0]).unwrap();
    }

    #[test]
    fn usable_as_a_trait_object() {
        let mut nic: Box<dyn RssDevice> = Box::new(FakeNic::new("fake0", 64, 8));
        assert_eq!(nic.name(), "fake0");
        let table: Vec<u32> = (0..64).map(|i| i % 2).collect();
        nic.set_indirection(&table).unwrap();
        assert_eq!(nic.rss().unwrap().indirection, table);
    }
}
