//! The flow tables' index: an open-addressing hash table of 8-byte words,
//! each holding a flow's 32-bit RSS hash and its entry's position, with
//! linear probing and backward-shift deletion (no tombstones).
//!
//! Written for the flow tables rather than borrowed from a general map for
//! one reason: a batch must be able to compute where a flow's word lives
//! from the hash alone, with arithmetic and no probing, so that it can
//! prefetch the words of a whole batch, then the entries, before touching
//! either ([`FlowIndex::prefetch_home`]). A general map hides that address.

use crate::state::table::prefetch_line;

/// An empty word. A stored word is never 0: positions are stored plus one.
const EMPTY: u64 = 0;

/// Multiplier of the Fibonacci hash that spreads the RSS hash: within one
/// bucket the hash's low bits are all equal, so the home slot is taken from
/// the top bits of the product, which depend on every input bit.
const SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;

/// Smallest number of slots once something is stored.
const MIN_SLOTS: usize = 8;

#[derive(Clone)]
pub(crate) struct FlowIndex {
    words: Vec<u64>,
    /// `64 - log2(words.len())`: the home slot is `(hash * SPREAD) >> shift`.
    shift: u32,
    len: usize,
}

#[inline]
fn word(hash: u32, position: usize) -> u64 {
    (u64::from(hash) << 32) | (position as u64 + 1)
}

/// The hash stored in a word.
#[inline]
pub(crate) fn word_hash(w: u64) -> u32 {
    (w >> 32) as u32
}

/// The entry position stored in a word.
#[inline]
pub(crate) fn word_position(w: u64) -> usize {
    (w as u32 as usize) - 1
}

impl FlowIndex {
    pub(crate) fn new() -> Self {
        Self {
            words: Vec::new(),
            shift: 64,
            len: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, hash: u32) -> usize {
        if self.words.is_empty() {
            return 0;
        }
        (u64::from(hash).wrapping_mul(SPREAD) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.words.len().wrapping_sub(1)
    }

    /// Starts loading the slot where the search for `hash` begins.
    #[inline]
    pub(crate) fn prefetch_home(&self, hash: u32) {
        if let Some(w) = self.words.get(self.home(hash)) {
            prefetch_line(w);
        }
    }

    /// The position of the first word with `hash` for which `eq(position)`
    /// holds.
    #[inline]
    pub(crate) fn find(&self, hash: u32, mut eq: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.words.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(hash);
        loop {
            let w = self.words[i];
            if w == EMPTY {
                return None;
            }
            if word_hash(w) == hash && eq(word_position(w)) {
                return Some(word_position(w));
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds a word; the caller guarantees it is not there yet.
    pub(crate) fn insert(&mut self, hash: u32, position: usize) {
        // Grow past 5/8 full: linear probing stays short below that.
        if (self.len + 1) * 8 > self.words.len() * 5 {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(hash);
        while self.words[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.words[i] = word(hash, position);
        self.len += 1;
    }

    fn grow(&mut self) {
        let slots = (self.words.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.words, vec![EMPTY; slots]);
        self.shift = 64 - slots.trailing_zeros();
        let mask = slots - 1;
        for w in old.into_iter().filter(|&w| w != EMPTY) {
            let mut i = self.home(word_hash(w));
            while self.words[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.words[i] = w;
        }
    }

    /// The slot holding exactly `(hash, position)`.
    fn slot_of(&self, hash: u32, position: usize) -> Option<usize> {
        if self.words.is_empty() {
            return None;
        }
        let target = word(hash, position);
        let mask = self.mask();
        let mut i = self.home(hash);
        loop {
            match self.words[i] {
                EMPTY => return None,
                w if w == target => return Some(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Points the word `(hash, from)` at position `to`.
    pub(crate) fn repoint(&mut self, hash: u32, from: usize, to: usize) {
        if let Some(i) = self.slot_of(hash, from) {
            self.words[i] = word(hash, to);
        }
    }

    /// Removes the word `(hash, position)`, shifting back the words after it
    /// that probed past its slot.
    pub(crate) fn remove(&mut self, hash: u32, position: usize) {
        let Some(mut hole) = self.slot_of(hash, position) else {
            return;
        };
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let w = self.words[i];
            if w == EMPTY {
                break;
            }
            // A word may move back into the hole only if its home is not
            // between the hole (exclusive) and its slot (inclusive), in
            // cyclic order: otherwise it would land before its home.
            let home = self.home(word_hash(w));
            let home_to_slot = i.wrapping_sub(home) & mask;
            let hole_to_slot = i.wrapping_sub(hole) & mask;
            if home_to_slot >= hole_to_slot {
                self.words[hole] = w;
                hole = i;
            }
        }
        self.words[hole] = EMPTY;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::collections::HashMap;

    #[test]
    fn random_operations_match_a_map() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut index = FlowIndex::new();
        // position → hash; hashes from a small range collide often, and
        // share their low bits as the flows of one bucket do.
        let mut model: HashMap<usize, u32> = HashMap::new();
        let mut next_position = 0;
        for step in 0..50_000 {
            if rng.random_range(0..3) > 0 || model.is_empty() {
                let hash = (rng.random_range(0..300u32) << 9) | 0x55;
                index.insert(hash, next_position);
                model.insert(next_position, hash);
                next_position += 1;
            } else {
                let &position = model.keys().nth(rng.random_range(0..model.len())).unwrap();
                let hash = model.remove(&position).unwrap();
                index.remove(hash, position);
            }
            assert_eq!(index.len(), model.len(), "step {step}");
            if step % 500 == 0 {
                for (&position, &hash) in &model {
                    assert_eq!(
                        index.find(hash, |p| p == position),
                        Some(position),
                        "step {step}"
                    );
                }
                assert_eq!(index.find(0xdead_beef, |_| true), None);
            }
        }
    }

    #[test]
    fn repoint_moves_a_word() {
        let mut index = FlowIndex::new();
        index.insert(7, 0);
        index.insert(7, 1);
        index.repoint(7, 1, 5);
        assert_eq!(index.find(7, |p| p == 5), Some(5));
        assert_eq!(index.find(7, |p| p == 1), None);
        index.remove(7, 0);
        assert_eq!(index.find(7, |_| true), Some(5));
    }
}
