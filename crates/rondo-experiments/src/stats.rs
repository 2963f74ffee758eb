//! Confidence intervals over independent replications (seed 000 §6.3).
//!
//! Replications are independent seeded runs; their means are summarised with
//! a Student-t 95% confidence interval. An experiment adds replications until
//! the half-width is within the target fraction of the mean (seed 000: 5%),
//! with a minimum and a maximum count.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Mean and 95% confidence half-width of a sample.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub mean: f64,
    /// Half-width of the 95% confidence interval; infinite with one sample.
    pub ci_half_width: f64,
    pub samples: usize,
}

impl Estimate {
    pub fn of(values: &[f64]) -> Estimate {
        let n = values.len();
        assert!(n > 0, "an estimate needs a sample");
        let mean = values.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Estimate {
                mean,
                ci_half_width: f64::INFINITY,
                samples: n,
            };
        }
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
            .expect("degrees of freedom are positive")
            .inverse_cdf(0.975);
        Estimate {
            mean,
            ci_half_width: t * (variance / n as f64).sqrt(),
            samples: n,
        }
    }

    /// Whether the half-width is within `fraction` of the mean's magnitude.
    pub fn is_within(&self, fraction: f64) -> bool {
        self.ci_half_width <= fraction * self.mean.abs()
    }
}

/// When to stop adding replications.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoppingRule {
    pub min_replications: usize,
    pub max_replications: usize,
    /// Target half-width as a fraction of the mean (seed 000: 0.05).
    pub ci_fraction: f64,
}

impl Default for StoppingRule {
    fn default() -> Self {
        StoppingRule {
            min_replications: 3,
            max_replications: 30,
            ci_fraction: 0.05,
        }
    }
}

impl StoppingRule {
    pub fn is_done(&self, values: &[f64]) -> bool {
        values.len() >= self.max_replications
            || (values.len() >= self.min_replications
                && Estimate::of(values).is_within(self.ci_fraction))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_width_matches_a_t_table() {
        // n = 5, s = sqrt(2.5) = 1.581: t(0.975, 4) = 2.776, half-width = 2.776·1.581/√5 = 1.963.
        let e = Estimate::of(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(e.mean, 3.0);
        assert!(
            (e.ci_half_width - 1.96324).abs() < 1e-4,
            "{}",
            e.ci_half_width
        );
    }

    #[test]
    fn stopping_rule_needs_the_minimum_and_a_tight_interval() {
        let rule = StoppingRule::default();
        assert!(!rule.is_done(&[100.0, 100.0]));
        assert!(rule.is_done(&[100.0, 100.5, 99.5]));
        assert!(!rule.is_done(&[100.0, 150.0, 50.0]));
        assert!(rule.is_done(&vec![1.0; 30]));
    }
}
