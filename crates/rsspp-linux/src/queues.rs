//! Which CPU serves each receive queue of a NIC: the queue's interrupt, and
//! the CPUs that interrupt is delivered to
//! (`/proc/irq/N/effective_affinity_list`, else `smp_affinity_list`). The
//! interrupt comes from the kernel where it says (netdev netlink, Linux
//! 6.8+: the queue's NAPI instance and that instance's IRQ, for drivers
//! that register it), else from the names in `/proc/interrupts`. In
//! hardware mode a queue's packets are processed (and counted by the XDP
//! program) on that CPU, and its load is that CPU's: irqbalance or a
//! hand-set affinity make "queue q on CPU q" wrong on most servers.
//!
//! Interrupt names are the driver's. Those of the common drivers are
//! recognised: the interface's or the device's name (`eth0-TxRx-3`,
//! `i40e-eth0-TxRx-3`, `virtio0-input.3`, `mlx5_comp3@pci:0000:3b:00.0`)
//! with the queue number at the end; transmit-only interrupts (`tx`,
//! `output`) and the others (`config`, `async`) are left out. A queue whose
//! interrupt is not found, or is delivered to several CPUs, is reported as
//! such, and the daemon then assumes CPU = queue number, as before.

use std::fs;
use std::path::{Path, PathBuf};

use crate::genl::{self, Genl, Message};

/// Where a queue's CPU came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// Its interrupt is delivered to this one CPU.
    Cpu(u32),
    /// Its interrupt may be delivered to any of these CPUs: which one
    /// serves it is not known.
    Several(Vec<u32>),
    /// No interrupt of its was found.
    Unknown,
}

/// How a queue's interrupt was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// The kernel said: netdev netlink, queue → NAPI → IRQ.
    Netdev,
    /// Its name in `/proc/interrupts`.
    Name,
}

/// One receive queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The queue number.
    pub queue: u32,
    /// Its interrupt and the interrupt's name, if found.
    pub irq: Option<(u32, String)>,
    /// How the interrupt was found (`None` when it was not).
    pub found_by: Option<FoundBy>,
    /// Who serves it.
    pub served: Served,
}

impl Queue {
    /// The CPU the daemon takes to serve it: the one its interrupt goes to,
    /// else (unknown or several) the queue's own number.
    pub fn cpu(&self) -> u32 {
        match self.served {
            Served::Cpu(c) => c,
            Served::Several(_) | Served::Unknown => self.queue,
        }
    }

    /// Whether [`Queue::cpu`] is a guess.
    pub fn assumed(&self) -> bool {
        !matches!(self.served, Served::Cpu(_))
    }
}

/// The receive queues `0..queues` of `iface` and who serves them: the
/// kernel's queue → NAPI → IRQ links where it has them, this machine's
/// `/proc` and `/sys` for the rest.
pub fn queue_cpus(iface: &str, queues: u32) -> Vec<Queue> {
    let irqs = netdev_irqs(iface).unwrap_or_default();
    queue_cpus_at(Path::new("/"), iface, queues, &irqs)
}

const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_CMD_NAPI_GET: u8 = 11;
const NETDEV_A_QUEUE_ID: u16 = 1;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_A_QUEUE_NAPI_ID: u16 = 4;
const NETDEV_QUEUE_TYPE_RX: u32 = 0;
const NETDEV_A_NAPI_ID: u16 = 2;
const NETDEV_A_NAPI_IRQ: u16 = 3;

/// `(queue, irq)` for each receive queue of `iface` whose NAPI instance
/// has an interrupt, from netdev netlink; `None` where this kernel (before
/// 6.8) or this namespace cannot say.
pub fn netdev_irqs(iface: &str) -> Option<Vec<(u32, u32)>> {
    let ifindex = crate::lifecycle::ifindex_of(iface)?;
    let mut nl = Genl::open().ok()?;
    let family = nl.family("netdev").ok()??;
    if !family.supports(NETDEV_CMD_QUEUE_GET) || !family.supports(NETDEV_CMD_NAPI_GET) {
        return None;
    }
    let mut dump = Message::new(family.id, NETDEV_CMD_QUEUE_GET, 1);
    dump.u32(NETDEV_A_QUEUE_IFINDEX, ifindex);
    let mut napis = Vec::new();
    for reply in nl.request(dump, true).ok()? {
        let rx = genl::attr(&reply, NETDEV_A_QUEUE_TYPE).and_then(genl::u32_of)
            == Some(NETDEV_QUEUE_TYPE_RX);
        let same =
            genl::attr(&reply, NETDEV_A_QUEUE_IFINDEX).and_then(genl::u32_of) == Some(ifindex);
        let id = genl::attr(&reply, NETDEV_A_QUEUE_ID).and_then(genl::u32_of);
        let napi = genl::attr(&reply, NETDEV_A_QUEUE_NAPI_ID).and_then(genl::u32_of);
        if let (true, true, Some(id), Some(napi)) = (rx, same, id, napi) {
            napis.push((id, napi));
        }
    }
    let mut irqs = Vec::new();
    for (queue, napi) in napis {
        let mut get = Message::new(family.id, NETDEV_CMD_NAPI_GET, 1);
        get.u32(NETDEV_A_NAPI_ID, napi);
        let Ok(replies) = nl.request(get, false) else {
            continue;
        };
        if let Some(irq) = replies
            .first()
            .and_then(|r| genl::attr(r, NETDEV_A_NAPI_IRQ))
            .and_then(genl::u32_of)
        {
            irqs.push((queue, irq));
        }
    }
    Some(irqs)
}

/// [`queue_cpus`] under another root, with the kernel's `(queue, irq)`
/// links given (tests).
pub fn queue_cpus_at(root: &Path, iface: &str, queues: u32, netdev: &[(u32, u32)]) -> Vec<Queue> {
    let device = fs::canonicalize(root.join(format!("sys/class/net/{iface}/device")))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let mut names: Vec<&str> = vec![iface];
    if let Some(d) = device.as_deref() {
        names.push(d);
    }
    let interrupts = fs::read_to_string(root.join("proc/interrupts")).unwrap_or_default();
    let mut found: Vec<Option<(u32, String)>> = vec![None; queues as usize];
    let mut found_by: Vec<Option<FoundBy>> = vec![None; queues as usize];
    for &(queue, irq) in netdev {
        if let Some(slot) = found.get_mut(queue as usize) {
            let name = interrupt_name(&interrupts, irq).unwrap_or_default();
            *slot = Some((irq, name));
            found_by[queue as usize] = Some(FoundBy::Netdev);
        }
    }
    for line in interrupts.lines() {
        let Some((irq, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let Ok(irq) = irq.parse::<u32>() else {
            continue;
        };
        let Some(name) = rest.split_whitespace().last() else {
            continue;
        };
        if netdev.iter().any(|&(_, i)| i == irq) {
            continue; // the kernel said which queue it serves
        }
        if let Some(q) = rx_queue_of(name, &names) {
            if let Some(slot) = found.get_mut(q as usize) {
                if slot.is_none() {
                    *slot = Some((irq, name.to_string()));
                    found_by[q as usize] = Some(FoundBy::Name);
                }
            }
        }
    }
    found
        .into_iter()
        .enumerate()
        .map(|(q, irq)| {
            let served = match &irq {
                None => Served::Unknown,
                Some((n, _)) => match irq_cpus(root, *n) {
                    Some(cpus) if cpus.len() == 1 => Served::Cpu(cpus[0]),
                    Some(cpus) if !cpus.is_empty() => Served::Several(cpus),
                    _ => Served::Unknown,
                },
            };
            Queue {
                queue: q as u32,
                irq,
                found_by: found_by[q],
                served,
            }
        })
        .collect()
}

/// The name `/proc/interrupts` gives interrupt `irq` (its last column).
fn interrupt_name(interrupts: &str, irq: u32) -> Option<String> {
    interrupts.lines().find_map(|line| {
        let (n, rest) = line.trim_start().split_once(':')?;
        (n.parse::<u32>().ok()? == irq)
            .then(|| rest.split_whitespace().last().map(str::to_string))?
    })
}

/// The receive queue an interrupt named `name` serves, if it belongs to one
/// of `owners` (the interface's and the device's names).
fn rx_queue_of(name: &str, owners: &[&str]) -> Option<u32> {
    let owner = owners
        .iter()
        .find(|o| !o.is_empty() && name.contains(**o))?;
    let rest = name.replacen(owner, "", 1);
    let lower = rest.to_ascii_lowercase();
    let transmit_only = (lower.contains("tx") && !lower.contains("rx")) || lower.contains("output");
    if transmit_only {
        return None;
    }
    let trimmed = rest.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    let trimmed = trimmed.strip_suffix("@pci").unwrap_or(trimmed);
    let digits = trimmed.len() - trimmed.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    trimmed[trimmed.len() - digits..].parse().ok()
}

/// The CPUs interrupt `irq` is delivered to.
fn irq_cpus(root: &Path, irq: u32) -> Option<Vec<u32>> {
    let dir: PathBuf = root.join(format!("proc/irq/{irq}"));
    let text = fs::read_to_string(dir.join("effective_affinity_list"))
        .or_else(|_| fs::read_to_string(dir.join("smp_affinity_list")))
        .ok()?;
    text.trim()
        .parse::<crate::cpu::CpuList>()
        .ok()
        .map(|l| l.cpus().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_names_of_common_drivers() {
        let eth = ["eth0", "0000:3b:00.0"];
        assert_eq!(rx_queue_of("eth0-TxRx-3", &eth), Some(3));
        assert_eq!(rx_queue_of("i40e-eth0-TxRx-12", &eth), Some(12));
        assert_eq!(rx_queue_of("eth0-rx-2", &eth), Some(2));
        assert_eq!(rx_queue_of("eth0-tx-2", &eth), None);
        assert_eq!(rx_queue_of("mlx5_comp7@pci:0000:3b:00.0", &eth), Some(7));
        assert_eq!(rx_queue_of("mlx5_async@pci:0000:3b:00.0", &eth), None);
        assert_eq!(rx_queue_of("eth1-TxRx-3", &["eth1"]), Some(3));
        assert_eq!(rx_queue_of("eth1-TxRx-3", &["eth0"]), None);
        let virtio = ["ens3", "virtio0"];
        assert_eq!(rx_queue_of("virtio0-input.1", &virtio), Some(1));
        assert_eq!(rx_queue_of("virtio0-output.1", &virtio), None);
        assert_eq!(rx_queue_of("virtio0-config", &virtio), None);
    }

    /// A fake `/proc` and `/sys`: a virtio NIC whose queue 0 is on CPU 2,
    /// queue 1 on CPUs 0-1 (not pinned), queue 2 with no interrupt.
    fn fake_root(test: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("rsspp-queues-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dev = root.join("sys/devices/pci0000:00/0000:00:03.0/virtio0");
        fs::create_dir_all(&dev).unwrap();
        fs::create_dir_all(root.join("sys/class/net/ens3")).unwrap();
        std::os::unix::fs::symlink(&dev, root.join("sys/class/net/ens3/device")).unwrap();
        fs::create_dir_all(root.join("proc")).unwrap();
        fs::write(
            root.join("proc/interrupts"),
            "           CPU0       CPU1\n \
             28:          0          0 PCI-MSIX-0000:00:03.0   0-edge      virtio0-config\n \
             29:        100          5 PCI-MSIX-0000:00:03.0   1-edge      virtio0-input.0\n \
             30:          0          0 PCI-MSIX-0000:00:03.0   2-edge      virtio0-output.0\n \
             31:          7        900 PCI-MSIX-0000:00:03.0   3-edge      virtio0-input.1\n \
             NMI:         0          0   Non-maskable interrupts\n",
        )
        .unwrap();
        for (irq, file, cpus) in [
            (29, "effective_affinity_list", "2\n"),
            (31, "smp_affinity_list", "0-1\n"),
        ] {
            let dir = root.join(format!("proc/irq/{irq}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(file), cpus).unwrap();
        }
        root
    }

    #[test]
    fn each_queue_is_served_by_its_interrupts_cpu() {
        let root = fake_root("names");
        let q = queue_cpus_at(&root, "ens3", 3, &[]);
        assert_eq!(q[0].irq, Some((29, "virtio0-input.0".into())));
        assert_eq!(q[0].found_by, Some(FoundBy::Name));
        assert_eq!(q[0].served, Served::Cpu(2));
        assert_eq!((q[0].cpu(), q[0].assumed()), (2, false));
        assert_eq!(q[1].served, Served::Several(vec![0, 1]));
        assert_eq!((q[1].cpu(), q[1].assumed()), (1, true));
        assert_eq!(q[2].served, Served::Unknown);
        assert_eq!((q[2].cpu(), q[2].assumed()), (2, true));
        // Nothing readable: every queue assumed on its own CPU.
        let none = queue_cpus_at(&root.join("nowhere"), "ens3", 2, &[]);
        assert!(none.iter().all(|q| q.assumed() && q.cpu() == q.queue));
        assert!(none.iter().all(|q| q.found_by.is_none()));
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn the_kernels_links_come_before_the_names() {
        // The kernel says queue 1 is served by interrupt 29 (which the
        // names would give queue 0) and queue 2 by 31: its word wins, an
        // interrupt it placed is not placed again by name, and queue 0 is
        // left unknown.
        let root = fake_root("netdev");
        let q = queue_cpus_at(&root, "ens3", 3, &[(1, 29), (2, 31), (7, 29)]);
        assert_eq!(q[1].irq, Some((29, "virtio0-input.0".into())));
        assert_eq!(q[1].found_by, Some(FoundBy::Netdev));
        assert_eq!(q[1].served, Served::Cpu(2));
        assert_eq!(q[2].irq, Some((31, "virtio0-input.1".into())));
        assert_eq!(q[2].found_by, Some(FoundBy::Netdev));
        assert_eq!((q[0].found_by, &q[0].served), (None, &Served::Unknown));
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn netdev_netlink_answers_for_the_loopback() {
        // The loopback has queues but no NAPI instance with an interrupt:
        // where this kernel has netdev's queue messages, the answer is an
        // empty list, not an error.
        match netdev_irqs("lo") {
            Some(irqs) => assert!(irqs.is_empty(), "{irqs:?}"),
            None => eprintln!("skipped: no netdev netlink queue messages on this kernel"),
        }
    }
}
