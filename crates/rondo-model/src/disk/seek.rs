//! Seek time as a function of seek distance in cylinders.
//!
//! This module owns the three seek models rondo's profiles use, each one of
//! DiskSim 4.0's `Seek type`s (`diskmodel/modules/mech_g1.modspec`): an
//! extracted table (`extracted`: linear interpolation between measured points,
//! linear extrapolation past the last one), the Ruemmler–Wilkes two-branch
//! formula (`hpl`), and Lee's three-point curve (`curve`). A seek of distance 0
//! takes no time; a head switch is the caller's business (`service`), as in
//! DiskSim where the seek and the head switch overlap.

use serde::{Deserialize, Serialize};

/// One measured point of an extracted seek curve.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeekPoint {
    pub distance_cylinders: u32,
    pub time_ns: u64,
}

/// How a profile describes its seek curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SeekSpec {
    /// A measured table, strictly increasing in distance, starting at distance 1.
    Extracted { points: Vec<SeekPoint> },
    /// Ruemmler & Wilkes (DiskSim `hpl`): `single_cylinder_ns` for d = 1 when
    /// given (DiskSim's V6 ≠ −1), `sqrt_base_ns + sqrt_ns·√d` for d < `boundary_cylinders`,
    /// `linear_base_ns + linear_ns_per_cylinder·d` otherwise.
    Hpl {
        boundary_cylinders: u32,
        sqrt_base_ns: f64,
        sqrt_ns: f64,
        linear_base_ns: f64,
        linear_ns_per_cylinder: f64,
        single_cylinder_ns: Option<f64>,
    },
    /// Lee's equation (DiskSim `curve`) through three datasheet numbers:
    /// seek(x) = c + a·√(x−1) + b·(x−1) with c = single, reproducing `single_ns`
    /// at x = 1, `full_ns` at x = N and `average_ns` as the mean over random
    /// pairs of cylinders (DiskSim's `diskmodel/doc/dm_param.tex`).
    Lee {
        single_ns: f64,
        average_ns: f64,
        full_ns: f64,
    },
}

/// A seek curve ready to evaluate (validated, with derived coefficients).
#[derive(Clone, Debug, PartialEq)]
pub struct SeekCurve {
    kind: CurveKind,
}

#[derive(Clone, Debug, PartialEq)]
enum CurveKind {
    Table(Vec<(f64, f64)>),
    Hpl {
        boundary: f64,
        sqrt_base: f64,
        sqrt_coeff: f64,
        linear_base: f64,
        linear_coeff: f64,
        single: Option<f64>,
    },
    Lee {
        single: f64,
        sqrt_coeff: f64,
        linear_coeff: f64,
    },
}

impl SeekCurve {
    /// Builds the curve; `cylinders` is the disk's physical cylinder count
    /// (Lee's curve needs it). Returns a reason when the spec is unusable.
    pub fn new(spec: &SeekSpec, cylinders: u32) -> Result<SeekCurve, String> {
        let kind = match spec {
            SeekSpec::Extracted { points } => {
                if points.len() < 2 {
                    return Err("an extracted seek curve needs at least two points".into());
                }
                if points[0].distance_cylinders == 0 {
                    return Err("extracted seek points start at distance 1".into());
                }
                if points
                    .windows(2)
                    .any(|w| w[1].distance_cylinders <= w[0].distance_cylinders)
                {
                    return Err("extracted seek distances must strictly increase".into());
                }
                CurveKind::Table(
                    points
                        .iter()
                        .map(|p| (p.distance_cylinders as f64, p.time_ns as f64))
                        .collect(),
                )
            }
            SeekSpec::Hpl {
                boundary_cylinders,
                sqrt_base_ns,
                sqrt_ns,
                linear_base_ns,
                linear_ns_per_cylinder,
                single_cylinder_ns,
            } => {
                let all = [
                    *sqrt_base_ns,
                    *sqrt_ns,
                    *linear_base_ns,
                    *linear_ns_per_cylinder,
                ];
                if all.iter().any(|v| !v.is_finite() || *v < 0.0) {
                    return Err("HPL seek coefficients must be finite and non-negative".into());
                }
                CurveKind::Hpl {
                    boundary: *boundary_cylinders as f64,
                    sqrt_base: *sqrt_base_ns,
                    sqrt_coeff: *sqrt_ns,
                    linear_base: *linear_base_ns,
                    linear_coeff: *linear_ns_per_cylinder,
                    single: *single_cylinder_ns,
                }
            }
            SeekSpec::Lee {
                single_ns,
                average_ns,
                full_ns,
            } => {
                if cylinders < 2 {
                    return Err("Lee's seek curve needs at least two cylinders".into());
                }
                let n = cylinders as f64;
                // Coefficients of DiskSim's `curve` (dm_param.tex), with the 3·√N divisor.
                let a = (-10.0 * single_ns + 15.0 * average_ns - 5.0 * full_ns) / (3.0 * n.sqrt());
                let b = (7.0 * single_ns - 15.0 * average_ns + 8.0 * full_ns) / (3.0 * n);
                if a < 0.0 || b < 0.0 {
                    return Err(format!(
                        "Lee's seek curve through single {single_ns} ns, average {average_ns} ns, \
                         full {full_ns} ns is not monotone (a = {a}, b = {b})"
                    ));
                }
                CurveKind::Lee {
                    single: *single_ns,
                    sqrt_coeff: a,
                    linear_coeff: b,
                }
            }
        };
        Ok(SeekCurve { kind })
    }

    /// Seek time in nanoseconds for a move of `distance` cylinders.
    pub fn seek_ns(&self, distance: u32) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        let d = distance as f64;
        match &self.kind {
            CurveKind::Table(points) => interpolate(points, d),
            CurveKind::Hpl {
                boundary,
                sqrt_base,
                sqrt_coeff,
                linear_base,
                linear_coeff,
                single,
            } => match single {
                Some(single) if distance == 1 => *single,
                _ if d < *boundary => sqrt_base + sqrt_coeff * d.sqrt(),
                _ => linear_base + linear_coeff * d,
            },
            CurveKind::Lee {
                single,
                sqrt_coeff,
                linear_coeff,
            } => single + sqrt_coeff * (d - 1.0).sqrt() + linear_coeff * (d - 1.0),
        }
    }
}

/// Linear interpolation in a table sorted by distance, extrapolating linearly
/// from the two nearest points at either end (DiskSim `extracted`).
fn interpolate(points: &[(f64, f64)], d: f64) -> f64 {
    let i = points.partition_point(|&(pd, _)| pd < d);
    if i < points.len() && points[i].0 == d {
        return points[i].1;
    }
    let i = i.clamp(1, points.len() - 1);
    let (d0, t0) = points[i - 1];
    let (d1, t1) = points[i];
    (t0 + (t1 - t0) * (d - d0) / (d1 - d0)).max(0.0)
}

/// Mean seek time over two cylinders drawn independently and uniformly from
/// `cylinders` (distance 0 included, weight of distance d ∝ 2·(N − d)).
pub fn mean_seek_random_pairs_ns(curve: &SeekCurve, cylinders: u32) -> f64 {
    let n = cylinders as f64;
    let mut sum = 0.0;
    for d in 1..cylinders {
        sum += 2.0 * (n - d as f64) * curve.seek_ns(d);
    }
    sum / (n * n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(points: &[(u32, f64)]) -> SeekCurve {
        let points = points
            .iter()
            .map(|&(d, ms)| SeekPoint {
                distance_cylinders: d,
                time_ns: (ms * 1e6) as u64,
            })
            .collect();
        SeekCurve::new(&SeekSpec::Extracted { points }, 1000).unwrap()
    }

    #[test]
    fn table_hits_points_interpolates_and_extrapolates() {
        let c = table(&[(1, 1.0), (10, 2.0), (110, 4.0)]);
        assert_eq!(c.seek_ns(0), 0.0);
        assert_eq!(c.seek_ns(1), 1e6);
        assert_eq!(c.seek_ns(10), 2e6);
        // Halfway between 10 and 110: 3 ms.
        assert!((c.seek_ns(60) - 3e6).abs() < 1e-6);
        // Between 1 and 10: 1 + (4-1)/9 ms.
        assert!((c.seek_ns(4) - (1e6 + 3e6 / 9.0)).abs() < 1e-6);
        // Past the end: the last segment's slope, 0.02 ms per cylinder.
        assert!((c.seek_ns(160) - 5e6).abs() < 1e-6);
    }

    #[test]
    fn hpl_branches_and_single_cylinder_override() {
        // Seed 003 Table 1: [1344, 1.867, 0.1315, 3.8635, 0.0021, -1] ms.
        let spec = SeekSpec::Hpl {
            boundary_cylinders: 1344,
            sqrt_base_ns: 1.867e6,
            sqrt_ns: 0.1315e6,
            linear_base_ns: 3.8635e6,
            linear_ns_per_cylinder: 0.0021e6,
            single_cylinder_ns: None,
        };
        let c = SeekCurve::new(&spec, 6720).unwrap();
        // disk-models.md §1.5: seek(1) = 2.00 ms, 6.686 ms on both sides of 1344, seek(6719) = 17.97 ms.
        assert!((c.seek_ns(1) - 1.9985e6).abs() < 1.0);
        assert!((c.seek_ns(1343) - (1.867e6 + 0.1315e6 * 1343f64.sqrt())).abs() < 1.0);
        assert!((c.seek_ns(1344) - 6.6859e6).abs() < 1.0);
        assert!((c.seek_ns(6719) - 17.9734e6).abs() < 1.0);
        let mean = mean_seek_random_pairs_ns(&c, 6720);
        assert!((mean / 1e6 - 8.49).abs() < 0.01, "mean {mean}");

        let mut spec = spec;
        if let SeekSpec::Hpl {
            single_cylinder_ns, ..
        } = &mut spec
        {
            *single_cylinder_ns = Some(0.5e6);
        }
        let c = SeekCurve::new(&spec, 6720).unwrap();
        assert_eq!(c.seek_ns(1), 0.5e6);
        assert!((c.seek_ns(2) - (1.867e6 + 0.1315e6 * 2f64.sqrt())).abs() < 1.0);
    }

    #[test]
    fn lee_curve_reproduces_its_three_points() {
        let spec = SeekSpec::Lee {
            single_ns: 0.5e6,
            average_ns: 8.0e6,
            full_ns: 16.0e6,
        };
        let n = 20_000;
        let c = SeekCurve::new(&spec, n).unwrap();
        assert!((c.seek_ns(1) - 0.5e6).abs() < 1e-6);
        // At x = N the curve gives `full` up to the x−1 versus x difference (a/(2√N) + b).
        assert!((c.seek_ns(n) - 16.0e6).abs() < 1e3);
        // The mean over random pairs (of distinct-or-equal cylinders) is the average
        // up to the discretisation of E[x] = N/3, E[√x] = (8/15)√N.
        let mean = mean_seek_random_pairs_ns(&c, n);
        assert!((mean - 8.0e6).abs() < 0.02e6, "mean {mean}");
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(SeekCurve::new(&SeekSpec::Extracted { points: vec![] }, 10).is_err());
        let bad = SeekSpec::Extracted {
            points: vec![
                SeekPoint {
                    distance_cylinders: 5,
                    time_ns: 1,
                },
                SeekPoint {
                    distance_cylinders: 5,
                    time_ns: 2,
                },
            ],
        };
        assert!(SeekCurve::new(&bad, 10).is_err());
        let non_monotone = SeekSpec::Lee {
            single_ns: 5e6,
            average_ns: 1e6,
            full_ns: 6e6,
        };
        assert!(SeekCurve::new(&non_monotone, 1000).is_err());
    }
}
