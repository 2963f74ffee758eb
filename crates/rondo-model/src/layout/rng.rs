//! The core's seeded pseudo-random numbers: SplitMix64 and an unbiased bounded draw.
//!
//! Random replica placement must give the same layout for the same per-title
//! seed on every machine and in every future version, because the catalog
//! stores only the seed and recomputes the layout on restart. So this module
//! fixes the generator and the way a bounded integer is drawn from it, and
//! both are value-stable forever: changing either silently moves stored data.
//! The core does not depend on `rand` for this reason.

/// SplitMix64 (Steele, Lea, Flood 2014; Vigna's reference `splitmix64.c`).
///
/// State: one `u64`. Each step adds the golden-ratio increment
/// `0x9E3779B97F4A7C15` and returns the state passed through the
/// `0xBF58476D1CE4E5B9` / `0x94D049BB133111EB` finaliser. Any seed, including
/// zero, gives a full-period sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first output is the reference algorithm's first
    /// output for `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A uniform integer in `[0, n)`, without bias (Lemire 2019, "Fast random
    /// integer generation in an interval"): multiply a 64-bit draw by `n`, keep
    /// the high word, and redraw when the low word falls below `2^64 mod n`.
    /// Always consumes at least one `next_u64`, also when `n == 1`.
    pub fn next_below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "next_below(0) has no value to return");
        let threshold = n.wrapping_neg() % n;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(n);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }
}

/// The SplitMix64 finaliser: a bijection on `u64` that mixes every input bit
/// into every output bit. Also used to derive independent seeds.
pub fn mix64(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_reference_splitmix64_vectors() {
        // First outputs of Vigna's splitmix64.c for seed 1234567.
        let mut rng = SplitMix64::new(1_234_567);
        let expected = [
            6_457_827_717_110_365_317u64,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for want in expected {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn bounded_draw_is_the_high_word_of_the_product() {
        // Value-stability pin: these exact draws place stored data.
        let mut a = SplitMix64::new(1_234_567);
        let mut b = SplitMix64::new(1_234_567);
        for n in [1u64, 2, 3, 7, 1000, u64::MAX] {
            let raw = b.next_u64();
            let threshold = n.wrapping_neg() % n;
            let product = u128::from(raw) * u128::from(n);
            assert!(product as u64 >= threshold, "test vector hit a redraw");
            assert_eq!(a.next_below(n), (product >> 64) as u64);
        }
    }

    #[test]
    fn bounded_draw_redraws_in_the_biased_zone() {
        // n = 2^63 + 1: threshold = 2^63 - 1, so about half of all draws are
        // rejected; every accepted value must still be below n.
        let n = (1u64 << 63) + 1;
        let mut rng = SplitMix64::new(7);
        let mut shadow = SplitMix64::new(7);
        let mut consumed = 0;
        for _ in 0..64 {
            let v = rng.next_below(n);
            assert!(v < n);
            loop {
                consumed += 1;
                let p = u128::from(shadow.next_u64()) * u128::from(n);
                if p as u64 >= n.wrapping_neg() % n {
                    assert_eq!((p >> 64) as u64, v);
                    break;
                }
            }
        }
        assert!(consumed > 64, "no redraw happened in 64 draws");
        assert_eq!(rng, shadow);
    }
}
