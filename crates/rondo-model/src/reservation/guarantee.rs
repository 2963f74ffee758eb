//! The guarantee admission gives: deterministic (the bound's worst case,
//! the default) or statistical (a disk-round overruns with probability at
//! most a target).
//!
//! Under the rondo bound each extent's charge includes one whole revolution
//! for the rotational wait before its first sector (`Bound::revolution_ns`);
//! everything else in the charge (overhead, the seek line, read-ahead span,
//! the exact tail) stays a worst case. The statistical guarantee models the
//! waits of a disk-round's k extents as independent and uniform on
//! [0, T_rev) — the target sector's angle is fixed by the layout, the
//! head's by when the previous command ends, which the model's timing
//! scatters over the revolution — and reserves, instead of k·T_rev, the
//! smallest q(k) with P(Σ waits > q(k)) ≤ ε by the Chernoff bound
//! (docs/guarantee.md):
//!
//! P(Σ U_i > s) ≤ min_θ e^(−θs) · M(θ)^k,  M(θ) = (e^(θ·T_rev) − 1)/(θ·T_rev),
//!
//! so q(k) = T_rev · min_x (k·ln((e^x − 1)/x) − ln ε) / x, capped at k·T_rev.
//! A slot keeps its primary reads' revolutions k and reserves
//! k·T_rev − q(k) less than their charges' sum (the "rotation credit").
//! Backup time (a failure's reads) keeps its worst case.

use serde::{Deserialize, Serialize};

use super::{Bound, ReservationConfig};

/// What admission guarantees each disk-round.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Guarantee {
    /// Every disk-round ends within its round whatever the rotational
    /// positions (the bound's worst case; seed 000).
    #[default]
    Deterministic,
    /// A disk-round's primary reads overrun their reservation with
    /// probability at most `overrun_probability` (rotational waits
    /// independent and uniform; everything else worst case).
    Statistical { overrun_probability: f64 },
}

impl Guarantee {
    /// Statistical at `overrun_probability` when one is given (the
    /// `--overrun-probability` of `rondo serve` and `rondo simulate`),
    /// deterministic otherwise.
    pub fn with_overrun_probability(overrun_probability: Option<f64>) -> Guarantee {
        match overrun_probability {
            Some(p) => Guarantee::Statistical {
                overrun_probability: p,
            },
            None => Guarantee::Deterministic,
        }
    }

    /// Sets `reservation` to admit under this guarantee with `bound`'s
    /// charges, as the simulator and the server both do; refuses a
    /// probability outside (0, 1) and a statistical guarantee where the
    /// charges hold no rotational wait to credit.
    pub fn configure(
        self,
        bound: &Bound,
        reservation: &mut ReservationConfig,
    ) -> Result<(), String> {
        self.validate()?;
        if self != Guarantee::Deterministic && bound.revolution_ns() == 0 {
            return Err(
                "a statistical guarantee needs the rondo bound on a rotating disk (the \
                        paper bound's T_avgRot is an average, flash has no rotational wait)"
                    .into(),
            );
        }
        reservation.guarantee = self;
        reservation.revolution_ns = bound.revolution_ns();
        Ok(())
    }

    /// Refuses a probability outside (0, 1).
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Guarantee::Deterministic => Ok(()),
            Guarantee::Statistical {
                overrun_probability: p,
            } if p > 0.0 && p < 1.0 => Ok(()),
            Guarantee::Statistical {
                overrun_probability: p,
            } => Err(format!(
                "the overrun probability must lie strictly between 0 and 1, not {p}"
            )),
        }
    }
}

/// Rotation credits k·T_rev − q(k) for k = 0 … `CREDIT_TABLE_LEN` − 1.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RotationCredit {
    credit_ns: Vec<u64>,
}

/// Extents per disk-round the credit table covers (assumption: a 1 s round
/// of the slowest-positioning drive holds far fewer; beyond it the credit
/// stays at the last entry's, which only reserves more).
const CREDIT_TABLE_LEN: usize = 1024;

impl RotationCredit {
    /// The credits of a statistical guarantee on a disk whose extents'
    /// charges each include `revolution_ns`; `None` when there is nothing
    /// to credit (a deterministic guarantee, or no revolution in the
    /// charges: the paper bound, flash).
    pub(super) fn new(guarantee: Guarantee, revolution_ns: u64) -> Option<RotationCredit> {
        let Guarantee::Statistical {
            overrun_probability,
        } = guarantee
        else {
            return None;
        };
        if revolution_ns == 0 {
            return None;
        }
        // The charges hold the revolution rounded down; the waits are
        // uniform over the true revolution, less than 1 ns longer.
        let wait_max_ns = revolution_ns + 1;
        let credit_ns = (0..CREDIT_TABLE_LEN as u32)
            .map(|k| {
                let q = rotation_quantile_ns(k, wait_max_ns, overrun_probability);
                (u64::from(k) * revolution_ns).saturating_sub(q)
            })
            .collect();
        Some(RotationCredit { credit_ns })
    }

    /// The credit of a disk-round whose primary reads have `revolutions`.
    pub(super) fn credit_ns(&self, revolutions: u32) -> u64 {
        let last = self.credit_ns.len() - 1;
        self.credit_ns[(revolutions as usize).min(last)]
    }
}

/// q(k): a time the sum of `k` independent waits uniform on [0,
/// `wait_max_ns`) exceeds with probability at most `epsilon`, by the
/// Chernoff bound; never more than k·`wait_max_ns`.
pub fn rotation_quantile_ns(k: u32, wait_max_ns: u64, epsilon: f64) -> u64 {
    if k == 0 {
        return 0;
    }
    let k_f = f64::from(k);
    let log_inv_eps = -epsilon.ln();
    // ln((e^x − 1)/x), written to stay finite for large x.
    let log_mgf = |x: f64| x + (-(-x).exp()).ln_1p() - x.ln();
    let f = |x: f64| (k_f * log_mgf(x) + log_inv_eps) / x;
    // f is quasi-convex in x > 0: golden-section search over ln x.
    let (mut lo, mut hi) = ((1e-4f64).ln(), (1e4f64).ln());
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..200 {
        let a = hi - phi * (hi - lo);
        let b = lo + phi * (hi - lo);
        if f(a.exp()) < f(b.exp()) {
            hi = b;
        } else {
            lo = a;
        }
    }
    let q = f(((lo + hi) / 2.0).exp()) * wait_max_ns as f64;
    // Rounded up, and a hair over for the search's own error.
    let q_ns = (q * (1.0 + 1e-9)).ceil() as u64;
    q_ns.min(u64::from(k) * wait_max_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P(Σ_k U[0,1) > s): the Irwin–Hall tail, exact, computed as the
    /// lower tail at k − s (by symmetry), whose alternating sum has few
    /// terms where the tail is small.
    fn irwin_hall_tail(k: u32, s: f64) -> f64 {
        let t = f64::from(k) - s;
        if t <= 0.0 {
            return 0.0;
        }
        let mut fact = 1.0;
        for j in 1..=k {
            fact *= f64::from(j);
        }
        let (mut cdf, mut binom) = (0.0, 1.0);
        for j in 0..=k {
            if f64::from(j) >= t {
                break;
            }
            let term = binom * (t - f64::from(j)).powi(k as i32);
            cdf += if j % 2 == 0 { term } else { -term };
            binom = binom * f64::from(k - j) / f64::from(j + 1);
        }
        cdf / fact
    }

    #[test]
    fn the_quantile_bounds_the_exact_tail_and_saves_time_as_k_grows() {
        let rev = 1_000_000u64;
        for (k, eps) in [(1u32, 1e-6), (5, 1e-6), (15, 1e-6), (15, 1e-3), (30, 1e-9)] {
            let q = rotation_quantile_ns(k, rev, eps);
            let tail = irwin_hall_tail(k, q as f64 / rev as f64);
            assert!(tail <= eps, "k = {k}: P(sum > q) = {tail:e} > {eps:e}");
            assert!(q <= u64::from(k) * rev);
        }
        // The Chernoff quantile of 15 waits at 1e-6: well below 15 revolutions,
        // above their mean, within a few percent of the exact quantile.
        let q15 = rotation_quantile_ns(15, rev, 1e-6) as f64 / rev as f64;
        assert!(q15 > 7.5 && q15 < 13.5, "{q15}");
        assert!(
            irwin_hall_tail(15, q15 * 0.9) > 1e-6,
            "not too loose: {q15}"
        );
        assert_eq!(rotation_quantile_ns(0, rev, 1e-6), 0);
    }

    /// docs/guarantee.md's table for the Cheetah 4LP (10,033 rpm) at 10⁻⁶,
    /// printed with `cargo test -p rondo-model docs_quantile_table --
    /// --nocapture`: per k, k·T_rev, the Chernoff q(k), the exact quantile
    /// (bisection on the Irwin–Hall tail), the mean and the credit, in ms.
    #[test]
    fn the_docs_quantile_table() {
        let rev_ns = (60e9f64 / 10_033.0).floor() as u64;
        let ms = |ns: f64| (ns / 1e5).round() / 10.0;
        let documented = [
            (5u32, 29.2, 28.9),
            (10, 54.3, 53.0),
            (15, 76.6, 74.4),
            (20, 97.4, 94.6),
            (30, 137.0, 133.1),
            (40, 175.0, 170.2),
        ];
        for (k, chernoff_ms, exact_ms) in documented {
            let q = rotation_quantile_ns(k, rev_ns + 1, 1e-6) as f64;
            let (mut lo, mut hi) = (0.0, f64::from(k));
            for _ in 0..200 {
                let mid = (lo + hi) / 2.0;
                if irwin_hall_tail(k, mid) > 1e-6 {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let exact = hi * rev_ns as f64;
            let full = f64::from(k) * rev_ns as f64;
            println!(
                "| {k} | {} ms | {} ms | {} ms | {} ms | {} ms |",
                ms(full),
                ms(q),
                ms(exact),
                ms(full / 2.0),
                ms(full - q)
            );
            assert_eq!((ms(q), ms(exact)), (chernoff_ms, exact_ms), "k = {k}");
        }
    }

    #[test]
    fn credits_grow_with_the_revolutions_and_need_a_statistical_guarantee() {
        assert!(RotationCredit::new(Guarantee::Deterministic, 5_980_000).is_none());
        let statistical = Guarantee::Statistical {
            overrun_probability: 1e-6,
        };
        assert!(RotationCredit::new(statistical, 0).is_none());
        let c = RotationCredit::new(statistical, 5_980_000).unwrap();
        assert_eq!(c.credit_ns(0), 0);
        let credits: Vec<u64> = (0..64).map(|k| c.credit_ns(k)).collect();
        assert!(credits.windows(2).all(|w| w[0] <= w[1]), "{credits:?}");
        assert!(c.credit_ns(15) > 10_000_000, "{}", c.credit_ns(15));
        assert_eq!(c.credit_ns(5000), c.credit_ns(1023));
        assert!(
            Guarantee::Statistical {
                overrun_probability: 0.0
            }
            .validate()
            .is_err()
        );
        assert!(statistical.validate().is_ok());
    }
}
