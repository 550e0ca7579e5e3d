//! Linux Receive Flow Steering (RPS/RFS, `net/core/dev.c`'s
//! `get_rps_cpu`), the steering decision, with no I/O; and a small model of
//! the scheduler's load balancing, which moves the consumers RFS follows.
//!
//! What it models:
//! - the *sock flow table* (`rps_sock_flow_table`): the CPU where each
//!   flow's consumer last ran — the caller passes it as the *desired* CPU;
//! - the *device flow table* of each receive queue (`rps_dev_flow_table`,
//!   `rps_flow_cnt` entries indexed by the flow hash, shared by colliding
//!   flows): the CPU the flow's packets currently go to and `last_qtail`,
//!   the position in that CPU's backlog of the last packet steered there;
//! - the switch rule that keeps a flow's packets in order: a flow moves to
//!   the desired CPU only when it has none yet, or the current CPU's backlog
//!   head (`input_queue_head`, packets dequeued) has reached `last_qtail`
//!   (every packet of the flow queued there has been taken).
//!
//! Not modelled: `rps_cpus` masks (RPS without a consumer: every flow has
//! one here), CPU hotplug, collisions in the sock flow table (the desired
//! CPU is exact per flow).

/// The device flow table of every receive queue.
#[derive(Debug, Clone)]
pub struct RfsTable {
    mask: usize,
    /// Per receive queue, per entry: current CPU (`u32::MAX`: none) and
    /// `last_qtail`.
    entries: Vec<Vec<(u32, u64)>>,
    switches: u64,
}

/// Where a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steer {
    /// The CPU whose backlog the packet joins.
    pub cpu: usize,
    /// Whether the flow's entry moved to the desired CPU now.
    pub switched: bool,
    /// Whether the desired CPU differs and the flow had to stay (packets of
    /// it are still queued on its current CPU).
    pub held: bool,
}

const NONE: u32 = u32::MAX;

impl RfsTable {
    /// Tables for `rx_queues` receive queues of `flow_cnt` entries each
    /// (`rps_flow_cnt`, rounded up to a power of two as the kernel does).
    pub fn new(rx_queues: usize, flow_cnt: usize) -> Self {
        let n = flow_cnt.max(1).next_power_of_two();
        Self {
            mask: n - 1,
            entries: vec![vec![(NONE, 0); n]; rx_queues],
            switches: 0,
        }
    }

    /// Flows moved from one CPU to another so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// `get_rps_cpu`: the CPU for a packet with `hash` received on `rxq`
    /// whose consumer last ran on `desired`; `head(cpu)` is the packets
    /// taken so far from `cpu`'s backlog.
    pub fn steer(
        &mut self,
        rxq: usize,
        hash: u32,
        desired: usize,
        head: impl Fn(usize) -> u64,
    ) -> Steer {
        let entry = &mut self.entries[rxq][hash as usize & self.mask];
        let (current, last_qtail) = *entry;
        if current == NONE {
            entry.0 = desired as u32;
            return Steer {
                cpu: desired,
                switched: false,
                held: false,
            };
        }
        let current = current as usize;
        if current == desired {
            return Steer {
                cpu: current,
                switched: false,
                held: false,
            };
        }
        if head(current) >= last_qtail {
            entry.0 = desired as u32;
            self.switches += 1;
            Steer {
                cpu: desired,
                switched: true,
                held: false,
            }
        } else {
            Steer {
                cpu: current,
                switched: false,
                held: true,
            }
        }
    }

    /// After the packet joined `cpu`'s backlog: `tail` is that backlog's
    /// count of packets ever enqueued (`input_queue_tail`), now the entry's
    /// `last_qtail`.
    pub fn enqueued(&mut self, rxq: usize, hash: u32, tail: u64) {
        self.entries[rxq][hash as usize & self.mask].1 = tail;
    }
}

/// One round of the scheduler's load balancing over threads (a simple
/// model of CFS's `load_balance` between busy CPUs): while the busiest CPU
/// not yet touched carries more than `imbalance_pct` percent of the least
/// loaded one's load, the heaviest of its threads whose load is at most
/// half the difference moves there (each CPU takes part in one move a
/// round). `thread_load`: each thread's load over the last period;
/// `thread_cpu`: each thread's CPU, updated. Returns the threads moved.
pub fn balance_threads(
    thread_load: &[u64],
    thread_cpu: &mut [usize],
    cpus: usize,
    imbalance_pct: u64,
) -> Vec<usize> {
    let mut load = vec![0u64; cpus];
    for (t, &c) in thread_cpu.iter().enumerate() {
        load[c] += thread_load[t];
    }
    let mut touched = vec![false; cpus];
    let mut moved = Vec::new();
    loop {
        let free = (0..cpus).filter(|&c| !touched[c]);
        let Some(busiest) = free
            .clone()
            .max_by_key(|&c| (load[c], std::cmp::Reverse(c)))
        else {
            break;
        };
        let Some(idlest) = free.min_by_key(|&c| (load[c], c)) else {
            break;
        };
        if busiest == idlest
            || u128::from(load[busiest]) * 100
                <= u128::from(load[idlest]) * u128::from(imbalance_pct)
        {
            break;
        }
        let half = (load[busiest] - load[idlest]) / 2;
        let pick = (0..thread_cpu.len())
            .filter(|&t| thread_cpu[t] == busiest && thread_load[t] > 0 && thread_load[t] <= half)
            .max_by_key(|&t| (thread_load[t], std::cmp::Reverse(t)));
        touched[busiest] = true;
        let Some(t) = pick else { continue };
        touched[idlest] = true;
        thread_cpu[t] = idlest;
        load[busiest] -= thread_load[t];
        load[idlest] += thread_load[t];
        moved.push(t);
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_flow_goes_where_its_consumer_runs() {
        let mut t = RfsTable::new(2, 16);
        let s = t.steer(0, 7, 3, |_| 0);
        assert_eq!((s.cpu, s.switched, s.held), (3, false, false));
        t.enqueued(0, 7, 1);
        // Same consumer CPU: stays.
        assert_eq!(t.steer(0, 7, 3, |_| 0).cpu, 3);
    }

    #[test]
    fn a_flow_follows_its_consumer_only_once_its_old_backlog_drained() {
        let mut t = RfsTable::new(1, 16);
        t.steer(0, 5, 1, |_| 0);
        // Its packet is the 10th enqueued on CPU 1.
        t.enqueued(0, 5, 10);
        // The consumer moved to CPU 2, but CPU 1 has taken only 9 packets.
        let s = t.steer(0, 5, 2, |c| if c == 1 { 9 } else { 0 });
        assert_eq!((s.cpu, s.switched, s.held), (1, false, true));
        t.enqueued(0, 5, 11);
        // 10 taken: the 11th (this flow's) is still queued.
        assert!(t.steer(0, 5, 2, |_| 10).held);
        // 11 taken: it switches.
        let s = t.steer(0, 5, 2, |_| 11);
        assert_eq!((s.cpu, s.switched), (2, true));
        assert_eq!(t.switches(), 1);
    }

    #[test]
    fn flows_whose_hashes_collide_share_an_entry_and_queues_do_not() {
        let mut t = RfsTable::new(2, 4);
        t.steer(0, 1, 0, |_| 0);
        t.enqueued(0, 1, 5);
        // Hash 5 = 1 mod 4: the same entry, held by the first flow's
        // packets on CPU 0.
        assert!(t.steer(0, 5, 3, |_| 0).held);
        // Another receive queue has its own table.
        assert_eq!(t.steer(1, 5, 3, |_| 0).cpu, 3);
    }

    #[test]
    fn the_scheduler_moves_a_thread_that_halves_the_gap() {
        // CPU 0: threads of 50, 30, 20; CPU 1: 10.
        let load = [50, 30, 20, 10];
        let mut cpu = vec![0, 0, 0, 1];
        let moved = balance_threads(&load, &mut cpu, 2, 117);
        // Gap 90, half 45: the heaviest thread under it is 30.
        assert_eq!(moved, vec![1]);
        assert_eq!(cpu, vec![0, 1, 0, 1]);
    }

    #[test]
    fn the_scheduler_leaves_a_small_imbalance_and_a_lone_heavy_thread() {
        let mut cpu = vec![0, 1];
        assert!(balance_threads(&[110, 100], &mut cpu, 2, 117).is_empty());
        // One thread of 100 on CPU 0, none on 1: moving it would not help.
        let mut cpu = vec![0];
        assert!(balance_threads(&[100], &mut cpu, 2, 117).is_empty());
        assert_eq!(cpu, vec![0]);
    }
}
