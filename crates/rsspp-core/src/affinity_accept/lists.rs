//! Short FIFO lists of packets kept aside by the policy — those waiting with
//! a connection nobody accepted yet, those held behind a flow-group fence —
//! in one slab, so that parking a packet allocates nothing once the slab
//! has grown to the run's peak. `P` is the caller's packet type.

const NIL: u32 = u32::MAX;

/// A list's handle: its ends and length (empty by default). Its packets
/// live in a [`Lists`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for List {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl List {
    /// Packets in the list.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[derive(Debug, Clone, Copy)]
struct Node<P> {
    packet: P,
    /// The core whose receive path handled the packet.
    rx_core: u8,
    next: u32,
}

/// The slab every list lives in.
#[derive(Debug)]
pub struct Lists<P> {
    nodes: Vec<Node<P>>,
    /// First node of the free chain.
    free: u32,
}

impl<P> Default for Lists<P> {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            free: NIL,
        }
    }
}

impl<P: Copy> Lists<P> {
    /// Appends `packet` (received by `rx_core`) to `list`.
    pub fn push(&mut self, list: &mut List, packet: P, rx_core: u8) {
        let node = Node {
            packet,
            rx_core,
            next: NIL,
        };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.nodes[i as usize].next;
            self.nodes[i as usize] = node;
            i
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        if list.tail == NIL {
            list.head = i;
        } else {
            self.nodes[list.tail as usize].next = i;
        }
        list.tail = i;
        list.len += 1;
    }

    /// Takes the first packet of `list` and the core that received it.
    pub fn pop(&mut self, list: &mut List) -> Option<(P, u8)> {
        if list.head == NIL {
            return None;
        }
        let i = list.head;
        let node = self.nodes[i as usize];
        list.head = node.next;
        if list.head == NIL {
            list.tail = NIL;
        }
        list.len -= 1;
        self.nodes[i as usize].next = self.free;
        self.free = i;
        Some((node.packet, node.rx_core))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet is its sequence number here.
    fn packet(seq: u32) -> u32 {
        seq
    }

    #[test]
    fn lists_are_fifo_and_reuse_their_nodes() {
        let mut lists = Lists::default();
        let (mut a, mut b) = (List::default(), List::default());
        for s in 0..3 {
            lists.push(&mut a, packet(s), 1);
            lists.push(&mut b, packet(10 + s), 2);
        }
        assert_eq!(a.len(), 3);
        assert_eq!(lists.pop(&mut a), Some((0, 1)));
        assert_eq!(lists.pop(&mut b), Some((10, 2)));
        lists.push(&mut a, packet(3), 1);
        let seqs: Vec<u32> = std::iter::from_fn(|| lists.pop(&mut a).map(|(p, _)| p)).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert!(a.is_empty());
        // Freed nodes are reused: the slab did not grow past its peak.
        for s in 0..4 {
            lists.push(&mut a, packet(s), 0);
        }
        assert_eq!(lists.nodes.len(), 6);
    }
}
