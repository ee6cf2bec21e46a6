//! A small seeded PRNG: xoshiro256** (Blackman & Vigna), its state filled by SplitMix64.
//! Written out here so the experiment's numbers do not move with a dependency's version.
//!
//! Each use of randomness draws from its own [`Stream`], derived from the run's seed, so that the
//! workload for a seed is the same whatever the policy, and the policy's own draws (the `random`
//! policy) cannot shift the tie ranking or the workload.

/// The independent random streams of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Shuffle of the trace and the draws with replacement.
    Workload = 1,
    /// The ranking of all nodes that breaks score ties.
    TieRank = 2,
    /// Draws made by the `random` policy.
    Policy = 3,
}

/// SplitMix64: one 64-bit state, used to seed xoshiro.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The `random` policy's draw for (arrival, node, what) in the run with this seed: a pure
/// function, so a plugin can draw through the engine without carrying a generator from cycle
/// to cycle (`what`: 0 the node's score, 1 the device).
pub fn draw(seed: u64, arrival: u64, node: u64, what: u64) -> u64 {
    let tag = SplitMix64::new(Stream::Policy as u64).next_u64();
    let mut sm = SplitMix64::new(seed ^ tag);
    let base = sm.next_u64();
    let mut a = SplitMix64::new(base ^ arrival.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let mut b = SplitMix64::new(a.next_u64() ^ node.wrapping_mul(0xA076_1D64_78BD_642F) ^ what);
    b.next_u64()
}

/// xoshiro256**.
#[derive(Clone, Debug)]
pub struct Rng([u64; 4]);

impl Rng {
    /// A generator whose state is four SplitMix64 outputs from `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        Rng([sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()])
    }

    /// The generator of one stream of the run with this seed.
    pub fn stream(seed: u64, stream: Stream) -> Self {
        // Mix the stream tag through SplitMix64 first so that nearby seeds and tags do not give
        // overlapping states.
        let tag = SplitMix64::new(stream as u64).next_u64();
        Rng::from_seed(seed ^ tag)
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` without modulo bias (Lemire's multiply-and-reject). `n` must be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // First outputs for seed 1234567 from the reference C implementation (Vigna).
        let mut sm = SplitMix64::new(1234567);
        assert_eq!(sm.next_u64(), 6457827717110365317);
        assert_eq!(sm.next_u64(), 3203168211198807973);
    }

    #[test]
    fn xoshiro_reference_values() {
        // xoshiro256** from state [1, 2, 3, 4]: the reference implementation gives 11520, 0,
        // 1509978240, 1215971899390074240.
        let mut r = Rng([1, 2, 3, 4]);
        assert_eq!(r.next_u64(), 11520);
        assert_eq!(r.next_u64(), 0);
        assert_eq!(r.next_u64(), 1509978240);
        assert_eq!(r.next_u64(), 1215971899390074240);
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::stream(42, Stream::Workload);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::stream(42, Stream::Workload);
                move |_| r.next_u64()
            })
            .collect();
        let c = Rng::stream(42, Stream::TieRank).next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
    }

    #[test]
    fn below_stays_in_range_and_shuffle_is_a_permutation() {
        let mut r = Rng::from_seed(7);
        for n in 1..50 {
            assert!(r.below(n) < n);
        }
        let mut v: Vec<u32> = (0..100).collect();
        r.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }
}
