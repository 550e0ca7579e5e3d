//! The application side of Affinity-Accept: each core's event loop over
//! its backlog, `accept()` with the 5:1 local/remote share, stealing, and
//! the processing of a connection's packets by its owner.

use rsspp_core::affinity_accept::{Waiting, LOCAL_PER_REMOTE};

use super::{AffinityAccept, Conn, Work};
use crate::cost::StateTable;
use crate::packet::SimPacket;
use crate::system::Cpu;

impl AffinityAccept {
    /// Processes `p` on the core of `cpu`; `remote` when another core
    /// received it (its data is in that core's cache).
    fn finish(&mut self, p: &SimPacket, remote: bool, cpu: &mut Cpu<'_>) {
        #[cfg(test)]
        if self.flows[p.flow as usize].conn == Conn::Owned {
            self.audit
                .lock()
                .expect("audit")
                .processed(p.flow, cpu.core());
        }
        let extra = if remote {
            u64::from(cpu.cost().remote_cycles)
        } else {
            0
        };
        // A flow whose previous packet another core is still processing (a
        // batch is costed when it starts, so that packet was taken earlier
        // but finishes later): its socket is locked until then.
        let f = &mut self.flows[p.flow as usize];
        cpu.wait_until(f.done_at);
        cpu.process_with(p, StateTable::Sharded, extra);
        self.flows[p.flow as usize].done_at = cpu.now();
    }

    /// The application of `core` runs its backlog, up to a batch of packets
    /// or the time a batch nominally takes, whichever comes first: the
    /// receive path, which would interrupt it, gets its turn at least that
    /// often even while the core works through expensive requests.
    pub(super) fn run_application(&mut self, core: usize, cpu: &mut Cpu<'_>) {
        let budget = self.app_batch as f64 * cpu.cost().nominal_cycles();
        let deadline = cpu.now() + cpu.cost().ns(budget as u64);
        let mut done = 0;
        while done < self.app_batch && cpu.now() < deadline {
            match self.backlog[core].pop_front() {
                Some(Work::Packet { packet, forwarded }) => {
                    self.flows[packet.flow as usize].queued -= 1;
                    self.finish(&packet, forwarded, cpu);
                    done += 1;
                }
                Some(Work::Accept) => done += self.accept_one(core, cpu),
                None => {
                    // Nothing else to do: look for connections at busy
                    // cores, then at any other, before sleeping (every
                    // local one has its marker, so none waits here).
                    let victim = if self.may_steal(core) {
                        self.stealers[core].next_victim_when_idle(core, &self.accept)
                    } else {
                        None
                    };
                    match victim {
                        Some(v) => done += self.steal(core, v, cpu),
                        None => break,
                    }
                }
            }
        }
    }

    /// `accept()` on `core`, as a server loops on it: the oldest local
    /// connection, and for a non-busy core one from a busy core after every
    /// [`LOCAL_PER_REMOTE`] local ones, or when none is local (another core
    /// stole it). Returns the packets processed.
    fn accept_one(&mut self, core: usize, cpu: &mut Cpu<'_>) -> usize {
        let mut done = 0;
        while let Some(w) = self.accept[core].pop() {
            if self.is_current(&w) {
                self.stealers[core].local_run += 1;
                done = self.take(core, w, cpu);
                break;
            }
        }
        if (done == 0 || self.stealers[core].local_run >= LOCAL_PER_REMOTE) && self.may_steal(core)
        {
            if let Some(v) = self.stealers[core].next_victim(core, &self.accept) {
                done += self.steal(core, v, cpu);
            }
        }
        done
    }

    /// `core` steals the oldest connection of `victim`'s queue.
    fn steal(&mut self, core: usize, victim: usize, cpu: &mut Cpu<'_>) -> usize {
        while let Some(w) = self.accept[victim].pop() {
            if self.is_current(&w) {
                // The victim's queue lock comes over.
                cpu.charge(u64::from(cpu.cost().remote_cycles));
                self.stealers[core].stole(victim);
                self.counters.steals += 1;
                return self.take(core, w, cpu);
            }
        }
        0
    }

    /// Whether an accept-queue entry is still the connection waiting.
    fn is_current(&self, w: &Waiting<SimPacket>) -> bool {
        let f = &self.flows[w.syn.flow as usize];
        f.conn == Conn::Waiting && f.generation == w.generation
    }

    /// `core` accepts `w`: it owns the connection, and processes its SYN
    /// and the packets that waited with it. Returns the packets processed.
    fn take(&mut self, core: usize, w: Waiting<SimPacket>, cpu: &mut Cpu<'_>) -> usize {
        let f = &mut self.flows[w.syn.flow as usize];
        f.conn = Conn::Owned;
        f.core = core as u8;
        let mut parked = std::mem::take(&mut f.parked);
        self.counters.connections_accepted += 1;
        self.finish(&w.syn, usize::from(w.rx_core) != core, cpu);
        let mut n = 1;
        while let Some((p, rx)) = self.lists.pop(&mut parked) {
            self.finish(&p, usize::from(rx) != core, cpu);
            n += 1;
        }
        n
    }
}
