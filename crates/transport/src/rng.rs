//! The workspace's one random-number generator: SplitMix64 (Steele, Lea, Flood: "Fast
//! splittable pseudorandom number generators", OOPSLA 2014). 64 bits of state, passes
//! BigCrush, and its output for a seed never changes between versions of irn or of any
//! dependency — a failing seed replays forever (DEVELOPERS: determinism).
//!
//! Users keep one generator per purpose, so that changing how one part draws numbers never
//! shifts another: the simulator one per stream of a run ([`Rng::stream`]), DCQCN one per
//! queue pair for its timer jitter, the UDP runtime one per impaired path, memory regions one
//! for their keys, the test harness one per pair of links.

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (the queue pair's and the test harness's seeding).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// A generator for `seed` and `stream`: distinct streams of one seed are independent
    /// (the simulator's seeding).
    pub fn stream(seed: u64, stream: u64) -> Rng {
        let mut r = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    /// A generator whose state is exactly `state` (for a state derived elsewhere).
    pub const fn from_state(state: u64) -> Rng {
        Rng(state)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) by Lemire's multiply-shift (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Exponentially distributed with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// SplitMix64's finaliser: a bijective mix of 64 bits (also the simulator's ECMP hash).
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(mut r: Rng) -> Vec<u64> {
        (0..4).map(|_| r.next_u64()).collect()
    }

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        assert_eq!(draws(Rng::stream(7, 1)), draws(Rng::stream(7, 1)));
        assert_ne!(draws(Rng::stream(7, 1)), draws(Rng::stream(7, 2)));
        assert_ne!(draws(Rng::new(7)), draws(Rng::new(8)));
        assert_eq!(draws(Rng::from_state(5)), draws(Rng::from_state(5)));
    }

    #[test]
    fn splitmix64_reference_output() {
        // The first outputs of SplitMix64 from state 0 (the reference implementation's).
        let mut r = Rng::from_state(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn unit_and_below_stay_in_range_and_are_roughly_uniform() {
        let mut r = Rng::stream(1, 0);
        let mut buckets = [0u32; 10];
        for _ in 0..100_000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            buckets[r.below(10) as usize] += 1;
        }
        for b in buckets {
            assert!((9_000..11_000).contains(&b), "{buckets:?}");
        }
        assert_eq!(r.below(0), 0);
        let mean: f64 = (0..100_000).map(|_| r.exponential(5.0)).sum::<f64>() / 100_000.0;
        assert!((mean - 5.0).abs() < 0.1, "{mean}");
    }
}
