//! The one pseudo-random generator of the workspace: seeded, deterministic
//! across platforms, so a seed names one workload, one placement, one run
//! everywhere (the synthetic bucket workloads, the trace generator, the
//! simulated policies' random choices).

/// SplitMix64 (Steele, Lea and Flood, 2014): 64 bits of state, one add and
/// three xor-shift-multiplies per value.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)`: a multiply-shift of the next 64 bits.
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, n)` from the high 32 bits of the next value: a
    /// multiply-shift in 64-bit arithmetic, for `n` up to 2³² (core counts);
    /// its bias is under `n / 2³²`. Draws differ from [`Self::below`]'s:
    /// oRSS's flow placement uses this one.
    pub fn below_u32(&mut self, n: usize) -> usize {
        debug_assert!(n as u64 <= 1 << 32);
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_deterministic_and_uniform_enough() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(9);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::new(9);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        let mut r = SplitMix64::new(1);
        let mean = (0..10_000).map(|_| r.next_f64()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        let mut hits = [0; 4];
        for _ in 0..4000 {
            hits[r.below(4)] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
        let mut hits = [0; 4];
        for _ in 0..4000 {
            hits[r.below_u32(4)] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }

    #[test]
    fn the_reference_sequence() {
        // SplitMix64 seeded with 0: the published first outputs.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn below_u32_takes_the_high_half() {
        // With n = 2³², the result is the high 32 bits of the value.
        let mut a = SplitMix64::new(5);
        let mut b = SplitMix64::new(5);
        for _ in 0..8 {
            assert_eq!(a.below_u32(1 << 32) as u64, b.next_u64() >> 32,);
        }
    }
}
