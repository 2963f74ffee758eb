//! Workloads: when playback requests arrive and which title each asks for.
//!
//! Seed 000 §6.2: requests arrive as a Poisson process of rate λ per round;
//! the mixed benchmark submits the titles round-robin (§6.3). Zipf popularity
//! is provided for the server's load generator and other experiments. All
//! randomness is a ChaCha8 stream seeded by the caller, so a run is a pure
//! function of its seed.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rondo_model::units::Round;

/// A Poisson arrival process, sampled round by round.
#[derive(Clone, Debug)]
pub struct PoissonArrivals {
    rng: ChaCha8Rng,
    rate_per_round: f64,
    /// Time of the next arrival, in rounds since time 0.
    next_arrival_rounds: f64,
}

impl PoissonArrivals {
    pub fn new(rate_per_round: f64, seed: u64) -> PoissonArrivals {
        assert!(
            rate_per_round > 0.0 && rate_per_round.is_finite(),
            "arrival rate must be positive"
        );
        let mut arrivals = PoissonArrivals {
            rng: ChaCha8Rng::seed_from_u64(seed),
            rate_per_round,
            next_arrival_rounds: 0.0,
        };
        arrivals.next_arrival_rounds = arrivals.gap();
        arrivals
    }

    /// An exponential inter-arrival gap, by inversion (value-stable across
    /// rand_distr versions).
    fn gap(&mut self) -> f64 {
        let u: f64 = self.rng.random::<f64>();
        -(1.0 - u).ln() / self.rate_per_round
    }

    /// Time of the next arrival, in rounds since time 0 (or in whatever unit
    /// the rate is per: a rate per second gives seconds), and moves past it.
    /// Draws the same sequence as [`PoissonArrivals::arrivals_in_round`], for
    /// drivers on a continuous clock such as `rondo load`.
    pub fn next_arrival_rounds(&mut self) -> f64 {
        let arrival = self.next_arrival_rounds;
        self.next_arrival_rounds += self.gap();
        arrival
    }

    /// Number of requests arriving during round `round` (`[round, round + 1)`).
    /// Must be called for consecutive rounds.
    pub fn arrivals_in_round(&mut self, round: Round) -> u32 {
        let end = round.next().0 as f64;
        let mut count = 0;
        while self.next_arrival_rounds < end {
            count += 1;
            self.next_arrival_rounds += self.gap();
        }
        count
    }
}

/// Which title each arriving request asks for.
#[derive(Clone, Debug)]
pub enum TitleChoice {
    /// Titles in turn: 0, 1, …, n−1, 0, … (seed 000's mixed benchmark).
    RoundRobin { titles: usize, next: usize },
    /// Title k with probability `cumulative[k] − cumulative[k − 1]`
    /// (Zipf, or one popular title among equals).
    Weighted {
        cumulative: Vec<f64>,
        rng: Box<ChaCha8Rng>,
    },
}

impl TitleChoice {
    pub fn round_robin(titles: usize) -> TitleChoice {
        assert!(titles > 0);
        TitleChoice::RoundRobin { titles, next: 0 }
    }

    /// Title k with probability ∝ 1/(k+1)^exponent.
    pub fn zipf(titles: usize, exponent: f64, seed: u64) -> TitleChoice {
        assert!(titles > 0);
        let weights: Vec<f64> = (0..titles)
            .map(|k| 1.0 / ((k + 1) as f64).powf(exponent))
            .collect();
        TitleChoice::weighted(&weights, seed)
    }

    /// Title 0 with probability `share`, each other title with
    /// (1 − share)/(n − 1): seed 001 §6.4's workload, a share of the
    /// requests for one popular title and the rest spread over the others.
    /// `share` is in [0, 1]; one title gets every request.
    pub fn popular(titles: usize, share: f64, seed: u64) -> TitleChoice {
        assert!(titles > 0);
        assert!((0.0..=1.0).contains(&share), "share {share} outside [0, 1]");
        if titles == 1 {
            return TitleChoice::weighted(&[1.0], seed);
        }
        let other = (1.0 - share) / (titles - 1) as f64;
        let weights: Vec<f64> = (0..titles)
            .map(|k| if k == 0 { share } else { other })
            .collect();
        TitleChoice::weighted(&weights, seed)
    }

    fn weighted(weights: &[f64], seed: u64) -> TitleChoice {
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        TitleChoice::Weighted {
            cumulative,
            rng: Box::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }

    pub fn next_title(&mut self) -> usize {
        match self {
            TitleChoice::RoundRobin { titles, next } => {
                let t = *next;
                *next = (*next + 1) % *titles;
                t
            }
            TitleChoice::Weighted { cumulative, rng } => {
                let u: f64 = rng.random::<f64>();
                cumulative
                    .partition_point(|&c| c < u)
                    .min(cumulative.len() - 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_mean_and_variance_match_the_rate() {
        let rate = 0.37;
        let mut a = PoissonArrivals::new(rate, 7);
        let n = 200_000u64;
        let counts: Vec<f64> = (0..n)
            .map(|r| a.arrivals_in_round(Round(r)) as f64)
            .collect();
        let mean = counts.iter().sum::<f64>() / n as f64;
        let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / n as f64;
        // Standard error of the mean is sqrt(0.37/200000) ≈ 0.0014.
        assert!((mean - rate).abs() < 0.006, "mean {mean}");
        assert!((var - rate).abs() < 0.02, "variance {var}");
    }

    #[test]
    fn arrivals_are_reproducible_for_a_seed() {
        let run = |seed| {
            let mut a = PoissonArrivals::new(1.5, seed);
            (0..1000)
                .map(|r| a.arrivals_in_round(Round(r)))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn continuous_arrivals_match_the_per_round_counts() {
        let mut by_round = PoissonArrivals::new(2.5, 11);
        let mut by_time = PoissonArrivals::new(2.5, 11);
        let mut next = by_time.next_arrival_rounds();
        for round in 0..500u64 {
            let mut count = 0;
            while next < (round + 1) as f64 {
                assert!(next >= round as f64);
                count += 1;
                next = by_time.next_arrival_rounds();
            }
            assert_eq!(
                count,
                by_round.arrivals_in_round(Round(round)),
                "round {round}"
            );
        }
    }

    #[test]
    fn round_robin_cycles_and_zipf_prefers_low_ranks() {
        let mut rr = TitleChoice::round_robin(3);
        let seq: Vec<usize> = (0..7).map(|_| rr.next_title()).collect();
        assert_eq!(seq, vec![0, 1, 2, 0, 1, 2, 0]);
        let mut z = TitleChoice::zipf(10, 1.0, 1);
        let mut hits = [0u32; 10];
        for _ in 0..100_000 {
            hits[z.next_title()] += 1;
        }
        // P(0) = 1/H_10 ≈ 0.3414, P(9) ≈ 0.0341.
        assert!((hits[0] as f64 / 1e5 - 0.3414).abs() < 0.01, "{hits:?}");
        assert!((hits[9] as f64 / 1e5 - 0.0341).abs() < 0.005, "{hits:?}");
    }

    #[test]
    fn a_popular_title_gets_its_share_and_the_rest_spread_evenly() {
        let mut c = TitleChoice::popular(5, 0.6, 3);
        let n = 100_000;
        let mut counts = [0u32; 5];
        for _ in 0..n {
            counts[c.next_title()] += 1;
        }
        let share = |k: usize| f64::from(counts[k]) / f64::from(n);
        assert!((share(0) - 0.6).abs() < 0.01, "{counts:?}");
        for k in 1..5 {
            assert!((share(k) - 0.1).abs() < 0.01, "{counts:?}");
        }
        let mut none = TitleChoice::popular(4, 0.0, 3);
        assert!((0..1000).all(|_| none.next_title() != 0));
        let mut all = TitleChoice::popular(4, 1.0, 3);
        assert!((0..1000).all(|_| all.next_title() == 0));
    }
}
