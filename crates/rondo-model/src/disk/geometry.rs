//! Zoned disk geometry: where each logical block (LBN) lies on the platters.
//!
//! This module owns the LBN ↔ physical sector mapping of a zoned-recording
//! disk and the angular position of every physical sector. It follows DiskSim
//! 4.0's `dm_layout_g1` (`diskmodel/layout_g1.c`, `layout_g1_load.c`), the
//! layout the Cheetah 4LP model uses:
//!
//! - mapping scheme 0: within a zone, LBNs fill track 0…H−1 of a cylinder, then
//!   the next cylinder;
//! - sparing scheme 8 ("sectors per range"): each run of `range_cylinders`
//!   cylinders, counted from the zone's first cylinder, keeps `spares_per_range`
//!   spare sectors at its physical end; a last, partial range has no spares
//!   (DiskSim: `blksinband -= spares·(cyls / rangesize)`, integer division);
//! - slip lists: a slipped sector (zone-relative physical number) holds no LBN;
//!   the LBNs after it in its range move one sector on, into the spares;
//! - cylinders that belong to no zone (DiskSim's single-cylinder gaps between
//!   zones) hold no LBNs but count for seek distances;
//! - angles: sector s of track (c, h) (c counted from the zone's first
//!   cylinder) starts at ((h + (H−1)·c)·track_skew + c·cylinder_skew + s)/spt
//!   of a revolution, so a head switch costs one track skew and a cylinder
//!   switch one cylinder skew (`g1_map_pbn_skew`; slips do not move the skew in
//!   scheme 8).
//!
//! The disk's capacity is the smaller of the mapped LBN count and the profile's
//! declared block count: DiskSim's Cheetah model maps 8,887,940 LBNs but the
//! drive reports 8,887,200 blocks, so the last 740 mapped LBNs (on the
//! innermost cylinders) are never addressed.

use serde::{Deserialize, Serialize};

/// One recording zone as a profile states it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZoneSpec {
    pub first_cylinder: u32,
    pub last_cylinder: u32,
    pub sectors_per_track: u32,
    /// Angular offset between consecutive tracks of a cylinder, in sectors.
    pub track_skew_sectors: f64,
    /// Angular offset between the last track of a cylinder and the first of the next.
    pub cylinder_skew_sectors: f64,
    /// Spare sectors at the end of each sparing range (0 without sparing).
    pub spares_per_range: u32,
    /// Slipped sectors, numbered physically from the zone's first sector.
    #[serde(default)]
    pub slips: Vec<u64>,
}

/// Physical address of one sector.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Pbn {
    pub cylinder: u32,
    pub head: u32,
    pub sector: u32,
}

/// A track: cylinder and head.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Track {
    pub cylinder: u32,
    pub head: u32,
}

/// A maximal piece of an LBN range that the head reads without a break:
/// consecutive LBNs on consecutive physical sectors of one track.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TrackRun {
    pub start: Pbn,
    pub sectors: u64,
    pub zone: usize,
}

#[derive(Clone, Debug, PartialEq)]
struct Zone {
    first_cylinder: u32,
    last_cylinder: u32,
    sectors_per_track: u32,
    track_skew_sectors: f64,
    cylinder_skew_sectors: f64,
    /// Physical sectors per sparing range (the whole zone without sparing).
    sectors_per_range: u64,
    /// LBNs per full sparing range.
    lbns_per_range: u64,
    slips: Vec<u64>,
    first_lbn: u64,
    lbn_count: u64,
}

/// A validated zoned geometry.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    surfaces: u32,
    cylinders: u32,
    zones: Vec<Zone>,
    mapped_sectors: u64,
    capacity_sectors: u64,
}

impl Geometry {
    /// Builds the geometry. `range_cylinders` is the sparing range (DiskSim
    /// `Rangesize for sparing`); `None` means no sparing. `block_count` caps the
    /// capacity (the drive's reported size); `None` uses every mapped LBN.
    pub fn new(
        surfaces: u32,
        cylinders: u32,
        range_cylinders: Option<u32>,
        block_count: Option<u64>,
        specs: &[ZoneSpec],
    ) -> Result<Geometry, String> {
        if surfaces == 0 || cylinders == 0 || specs.is_empty() {
            return Err("a disk needs surfaces, cylinders and at least one zone".into());
        }
        let mut zones = Vec::with_capacity(specs.len());
        let mut next_lbn = 0u64;
        let mut previous_last: Option<u32> = None;
        for (i, z) in specs.iter().enumerate() {
            if z.last_cylinder < z.first_cylinder || z.last_cylinder >= cylinders {
                return Err(format!(
                    "zone {i}: cylinders out of order or beyond the disk"
                ));
            }
            if previous_last.is_some_and(|p| z.first_cylinder <= p) {
                return Err(format!("zone {i} overlaps or precedes the previous zone"));
            }
            previous_last = Some(z.last_cylinder);
            if z.sectors_per_track == 0 {
                return Err(format!("zone {i}: zero sectors per track"));
            }
            let valid_skew = |s: f64| s.is_finite() && s >= 0.0;
            if !valid_skew(z.track_skew_sectors) || !valid_skew(z.cylinder_skew_sectors) {
                return Err(format!("zone {i}: skews must be finite and non-negative"));
            }
            let zone_cylinders = (z.last_cylinder - z.first_cylinder + 1) as u64;
            let per_cylinder = surfaces as u64 * z.sectors_per_track as u64;
            let (range_cyls, spares) = match range_cylinders {
                Some(r) if r > 0 => (r as u64, z.spares_per_range as u64),
                _ if z.spares_per_range == 0 => (zone_cylinders, 0),
                _ => return Err(format!("zone {i}: spares given without a sparing range")),
            };
            // A partial last range must fit without spares (see the module doc).
            if spares > per_cylinder {
                return Err(format!(
                    "zone {i}: more spares per range than sectors per cylinder"
                ));
            }
            let sectors_per_range = range_cyls * per_cylinder;
            let lbns_per_range = sectors_per_range - spares;
            let physical = zone_cylinders * per_cylinder;
            let mut slips = z.slips.clone();
            slips.sort_unstable();
            slips.dedup();
            if slips.last().is_some_and(|&s| s >= physical) {
                return Err(format!("zone {i}: slip beyond the zone"));
            }
            let full_ranges = zone_cylinders / range_cyls;
            let partial_sectors = (zone_cylinders % range_cyls) * per_cylinder;
            for r in 0..=full_ranges {
                let lo = r * sectors_per_range;
                let n = count_in(&slips, lo, lo + sectors_per_range);
                if r < full_ranges && n as u64 > spares {
                    return Err(format!("zone {i}: range {r} has more slips than spares"));
                }
            }
            let partial_slips = count_in(
                &slips,
                full_ranges * sectors_per_range,
                full_ranges * sectors_per_range + partial_sectors,
            ) as u64;
            let lbn_count = full_ranges * lbns_per_range + partial_sectors - partial_slips;
            zones.push(Zone {
                first_cylinder: z.first_cylinder,
                last_cylinder: z.last_cylinder,
                sectors_per_track: z.sectors_per_track,
                track_skew_sectors: z.track_skew_sectors,
                cylinder_skew_sectors: z.cylinder_skew_sectors,
                sectors_per_range,
                lbns_per_range,
                slips,
                first_lbn: next_lbn,
                lbn_count,
            });
            next_lbn += lbn_count;
        }
        let capacity_sectors = block_count.map_or(next_lbn, |b| b.min(next_lbn));
        Ok(Geometry {
            surfaces,
            cylinders,
            zones,
            mapped_sectors: next_lbn,
            capacity_sectors,
        })
    }

    pub fn surfaces(&self) -> u32 {
        self.surfaces
    }

    /// Physical cylinders, including those in no zone.
    pub fn cylinders(&self) -> u32 {
        self.cylinders
    }

    /// Addressable sectors: LBNs run from 0 to `capacity_sectors() - 1`.
    pub fn capacity_sectors(&self) -> u64 {
        self.capacity_sectors
    }

    /// LBNs the zone table maps, before the declared block count caps them.
    pub fn mapped_sectors(&self) -> u64 {
        self.mapped_sectors
    }

    pub fn zone_count(&self) -> usize {
        self.zones.len()
    }

    pub fn sectors_per_track(&self, zone: usize) -> u32 {
        self.zones[zone].sectors_per_track
    }

    /// (first, last) cylinder of a zone.
    pub fn zone_cylinders(&self, zone: usize) -> (u32, u32) {
        (
            self.zones[zone].first_cylinder,
            self.zones[zone].last_cylinder,
        )
    }

    /// (first LBN, LBN count) of a zone, before the capacity cap.
    pub fn zone_lbns(&self, zone: usize) -> (u64, u64) {
        (self.zones[zone].first_lbn, self.zones[zone].lbn_count)
    }

    /// (track skew, cylinder skew) of a zone, in sectors.
    pub fn zone_skews(&self, zone: usize) -> (f64, f64) {
        (
            self.zones[zone].track_skew_sectors,
            self.zones[zone].cylinder_skew_sectors,
        )
    }

    /// The zone holding an LBN (which must be below the mapped count).
    pub fn zone_of_lbn(&self, lbn: u64) -> usize {
        debug_assert!(lbn < self.mapped_sectors);
        self.zones
            .partition_point(|z| z.first_lbn + z.lbn_count <= lbn)
    }

    /// The zone a cylinder belongs to, or `None` for a gap cylinder.
    pub fn zone_of_cylinder(&self, cylinder: u32) -> Option<usize> {
        let i = self.zones.partition_point(|z| z.last_cylinder < cylinder);
        (i < self.zones.len() && self.zones[i].first_cylinder <= cylinder).then_some(i)
    }

    /// Physical address of an addressable LBN.
    pub fn lbn_to_pbn(&self, lbn: u64) -> Pbn {
        self.locate(lbn).0
    }

    /// Physical address of `lbn`, its zone, and its zone-relative physical
    /// sector number.
    fn locate(&self, lbn: u64) -> (Pbn, usize, u64) {
        assert!(lbn < self.capacity_sectors, "LBN {lbn} beyond capacity");
        let zi = self.zone_of_lbn(lbn);
        let z = &self.zones[zi];
        let offset = lbn - z.first_lbn;
        let range = offset / z.lbns_per_range;
        let range_start = range * z.sectors_per_range;
        let mut p = offset % z.lbns_per_range;
        // Each slip at or before the (shifted) position pushes the LBN one sector on.
        let from = z.slips.partition_point(|&s| s < range_start);
        for &s in &z.slips[from..] {
            if s - range_start <= p {
                p += 1;
            } else {
                break;
            }
        }
        let physical = range_start + p;
        let spt = z.sectors_per_track as u64;
        let per_cylinder = spt * self.surfaces as u64;
        let pbn = Pbn {
            cylinder: z.first_cylinder + (physical / per_cylinder) as u32,
            head: ((physical % per_cylinder) / spt) as u32,
            sector: (physical % spt) as u32,
        };
        (pbn, zi, physical)
    }

    /// The LBN stored in a physical sector, or `None` for a spare, a slipped
    /// sector, a gap cylinder, a sector past the capacity, or an address off the disk.
    pub fn pbn_to_lbn(&self, pbn: Pbn) -> Option<u64> {
        if pbn.head >= self.surfaces {
            return None;
        }
        let zi = self.zone_of_cylinder(pbn.cylinder)?;
        let z = &self.zones[zi];
        if pbn.sector >= z.sectors_per_track {
            return None;
        }
        let spt = z.sectors_per_track as u64;
        let per_cylinder = spt * self.surfaces as u64;
        let physical = (pbn.cylinder - z.first_cylinder) as u64 * per_cylinder
            + pbn.head as u64 * spt
            + pbn.sector as u64;
        if z.slips.binary_search(&physical).is_ok() {
            return None;
        }
        let range = physical / z.sectors_per_range;
        let range_start = range * z.sectors_per_range;
        let slips_before = count_in(&z.slips, range_start, physical) as u64;
        let offset = physical - range_start - slips_before;
        if offset >= z.lbns_per_range {
            return None;
        }
        let lbn = z.first_lbn + range * z.lbns_per_range + offset;
        (lbn < z.first_lbn + z.lbn_count && lbn < self.capacity_sectors).then_some(lbn)
    }

    /// The run the head reads first when it reads `max_sectors` (≥ 1) LBNs
    /// from `lbn`: consecutive LBNs on consecutive sectors of `lbn`'s track.
    pub fn track_run(&self, lbn: u64, max_sectors: u64) -> TrackRun {
        debug_assert!(max_sectors > 0);
        let (start, zi, physical) = self.locate(lbn);
        let z = &self.zones[zi];
        let spt = z.sectors_per_track as u64;
        let range_start = physical / z.sectors_per_range * z.sectors_per_range;
        let mut n = max_sectors
            .min(spt - physical % spt)
            .min(z.first_lbn + z.lbn_count - lbn)
            .min(self.capacity_sectors - lbn);
        // The range's spares follow its last LBN; a slip breaks physical contiguity.
        let offset_in_range =
            physical - range_start - count_in(&z.slips, range_start, physical) as u64;
        n = n.min(z.lbns_per_range - offset_in_range);
        let next_slip = z.slips.partition_point(|&s| s <= physical);
        if let Some(&s) = z.slips.get(next_slip) {
            n = n.min(s - physical);
        }
        TrackRun {
            start,
            sectors: n,
            zone: zi,
        }
    }

    /// First LBNs, as `(start, end)` intervals, that stand for every window
    /// of `reach` + 1 consecutive LBNs the layout can hold: any other window
    /// is one of these moved by whole periods within its zone, on the same
    /// heads and sectors with the same runs, the same cylinder differences
    /// and so the same repositionings. A zone's period is one sparing range
    /// (one cylinder without spares); a period is distinct when a window
    /// starting in it reaches a slip, the zone's partial last range, its
    /// end or the capacity. What lets a worst case over the whole disk be
    /// found by scanning a few periods per zone (`RondoBound::split_ns`).
    pub fn distinct_window_starts(&self, reach: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let capacity = self.capacity_sectors;
        let mut push = |lo: u64, hi: u64| {
            let hi = hi.min(capacity);
            if lo >= hi {
                return;
            }
            match out.last_mut() {
                Some(last) if last.1 >= lo => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        };
        for z in &self.zones {
            let per_cylinder = z.sectors_per_track as u64 * self.surfaces as u64;
            let zone_cylinders = (z.last_cylinder - z.first_cylinder + 1) as u64;
            // Periods the layout repeats over, `period_count` of them whole
            // and unshifted from the zone's start; slips inside them.
            let (period_lbns, period_sectors, period_count) =
                if z.lbns_per_range < z.sectors_per_range {
                    let range_cylinders = z.sectors_per_range / per_cylinder;
                    (
                        z.lbns_per_range,
                        z.sectors_per_range,
                        zone_cylinders / range_cylinders,
                    )
                } else {
                    // No spares: a slip (only in a partial range) shifts every LBN after it.
                    let unshifted = z
                        .slips
                        .first()
                        .map_or(zone_cylinders, |&s| s / per_cylinder);
                    (per_cylinder, per_cylinder, unshifted)
                };
            let slipped: Vec<u64> = z.slips.iter().map(|&s| s / period_sectors).collect();
            let reach_periods = reach.div_ceil(period_lbns);
            let start = |j: u64| z.first_lbn + j * period_lbns;
            let distinct = |j: u64| {
                j + reach_periods >= period_count
                    || start(j + reach_periods + 1) > capacity
                    || slipped
                        .iter()
                        .any(|&r| (j..=j + reach_periods).contains(&r))
            };
            let mut generic_seen = false;
            for j in 0..period_count {
                if start(j) >= capacity {
                    break;
                }
                if distinct(j) || !generic_seen {
                    generic_seen |= !distinct(j);
                    push(start(j), start(j + 1));
                }
            }
            push(start(period_count), z.first_lbn + z.lbn_count);
        }
        out
    }

    /// Start angle of a physical sector, as a fraction of a revolution in [0, 1).
    pub fn sector_angle(&self, pbn: Pbn, zone: usize) -> f64 {
        let z = &self.zones[zone];
        let c = (pbn.cylinder - z.first_cylinder) as f64;
        let tracks = pbn.head as f64 + (self.surfaces - 1) as f64 * c;
        let sectors =
            tracks * z.track_skew_sectors + c * z.cylinder_skew_sectors + pbn.sector as f64;
        (sectors / z.sectors_per_track as f64).rem_euclid(1.0)
    }
}

/// Number of sorted values in [lo, hi).
fn count_in(sorted: &[u64], lo: u64, hi: u64) -> usize {
    sorted.partition_point(|&s| s < hi) - sorted.partition_point(|&s| s < lo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::profiles;
    use proptest::prelude::*;

    fn zone(first: u32, last: u32, spt: u32, spares: u32, slips: Vec<u64>) -> ZoneSpec {
        ZoneSpec {
            first_cylinder: first,
            last_cylinder: last,
            sectors_per_track: spt,
            track_skew_sectors: 2.0,
            cylinder_skew_sectors: 3.0,
            spares_per_range: spares,
            slips,
        }
    }

    /// A small disk worked by hand: 2 surfaces, zone 0 = cylinders 0–4 (10 spt,
    /// ranges of 2 cylinders with 3 spares, slip at physical sector 5), a gap
    /// at cylinder 5, zone 1 = cylinders 6–7 (8 spt, range 2 cylinders, 3 spares).
    fn tiny() -> Geometry {
        Geometry::new(
            2,
            8,
            Some(2),
            None,
            &[zone(0, 4, 10, 3, vec![5]), zone(6, 7, 8, 3, vec![])],
        )
        .unwrap()
    }

    /// Every window of the disk is one of `distinct_window_starts`' moved
    /// by whole cylinders: the same heads, sectors, zones, runs and
    /// cylinder differences LBN by LBN (on the hand-worked disk with
    /// spares, a slip, a partial range and a gap; on one with slips in
    /// middle ranges; and on a cut Cheetah with 12-cylinder ranges).
    #[test]
    fn every_window_is_a_distinct_one_moved_by_whole_periods() {
        let shape = |g: &Geometry, l: u64, reach: u64| -> Vec<(u32, u32, u32, usize, u64)> {
            let base = g.lbn_to_pbn(l).cylinder;
            (l..=(l + reach).min(g.capacity_sectors() - 1))
                .map(|x| {
                    let (p, zone, _) = g.locate(x);
                    let run = g.track_run(x, u64::MAX).sectors;
                    (
                        p.cylinder - base,
                        p.head,
                        p.sector,
                        zone,
                        run.min(reach + 1),
                    )
                })
                .collect()
        };
        let cheetah = match profiles::by_name("cheetah-4lp-outer3").unwrap().model {
            crate::disk::DiskModelSpec::Mechanical(m) => m.geometry().unwrap(),
            crate::disk::DiskModelSpec::SolidState(_) => unreachable!(),
        };
        // Slips in ranges 1 and 3 of seven, the rest alike.
        let slipped = Geometry::new(
            2,
            20,
            Some(2),
            None,
            &[
                zone(0, 13, 10, 3, vec![45, 125]),
                zone(15, 19, 8, 3, vec![]),
            ],
        )
        .unwrap();
        let reaches = vec![0, 1, 7, 25, 60];
        for (g, reaches) in [
            (tiny(), reaches.clone()),
            (slipped, reaches),
            (cheetah, vec![31]),
        ] {
            for reach in reaches {
                let starts = g.distinct_window_starts(reach);
                let shapes: std::collections::BTreeSet<_> = starts
                    .iter()
                    .flat_map(|&(lo, hi)| lo..hi)
                    .map(|l| shape(&g, l, reach))
                    .collect();
                let listed: u64 = starts.iter().map(|&(lo, hi)| hi - lo).sum();
                // On a real drive a few periods per zone stand for all.
                let capacity = g.capacity_sectors();
                assert!(
                    capacity < 10_000 || listed * 4 < capacity,
                    "{listed} of {capacity}"
                );
                for l in 0..g.capacity_sectors() {
                    assert!(
                        shapes.contains(&shape(&g, l, reach)),
                        "the window of {reach} LBNs after LBN {l} is not a distinct one moved"
                    );
                }
            }
        }
    }

    #[test]
    fn tiny_geometry_by_hand() {
        let g = tiny();
        // Zone 0: 5 cylinders × 20 sectors; 2 full ranges of 40 with 3 spares
        // (37 LBNs each) and a partial range of 20 without spares: 94 LBNs.
        // Zone 1: one full range of 32 sectors minus 3 spares: 29 LBNs.
        assert_eq!(g.zone_lbns(0), (0, 94));
        assert_eq!(g.zone_lbns(1), (94, 29));
        assert_eq!(g.capacity_sectors(), 123);
        // LBN 0..4 are sectors 0..4; sector 5 is slipped, so LBN 5 is sector 6.
        assert_eq!(
            g.lbn_to_pbn(4),
            Pbn {
                cylinder: 0,
                head: 0,
                sector: 4
            }
        );
        assert_eq!(
            g.lbn_to_pbn(5),
            Pbn {
                cylinder: 0,
                head: 0,
                sector: 6
            }
        );
        // LBN 36, the range's last, is physical 37; physical 38, 39 are spares.
        assert_eq!(
            g.lbn_to_pbn(36),
            Pbn {
                cylinder: 1,
                head: 1,
                sector: 7
            }
        );
        assert_eq!(
            g.pbn_to_lbn(Pbn {
                cylinder: 1,
                head: 1,
                sector: 8
            }),
            None
        );
        assert_eq!(
            g.pbn_to_lbn(Pbn {
                cylinder: 0,
                head: 0,
                sector: 5
            }),
            None
        );
        // LBN 37 starts range 1 (cylinder 2).
        assert_eq!(
            g.lbn_to_pbn(37),
            Pbn {
                cylinder: 2,
                head: 0,
                sector: 0
            }
        );
        // Partial range: cylinder 4 holds LBNs 74..93.
        assert_eq!(
            g.lbn_to_pbn(74),
            Pbn {
                cylinder: 4,
                head: 0,
                sector: 0
            }
        );
        assert_eq!(
            g.lbn_to_pbn(93),
            Pbn {
                cylinder: 4,
                head: 1,
                sector: 9
            }
        );
        // Gap cylinder 5; zone 1 starts at cylinder 6.
        assert_eq!(
            g.pbn_to_lbn(Pbn {
                cylinder: 5,
                head: 0,
                sector: 0
            }),
            None
        );
        assert_eq!(
            g.lbn_to_pbn(94),
            Pbn {
                cylinder: 6,
                head: 0,
                sector: 0
            }
        );
        assert_eq!(g.zone_of_cylinder(5), None);
        assert_eq!(g.zone_of_cylinder(6), Some(1));

        // Runs: from LBN 0, the slip ends the first run after 5 sectors.
        assert_eq!(g.track_run(0, 100).sectors, 5);
        // From LBN 5 (sector 6) to the end of the track: 4 sectors.
        assert_eq!(g.track_run(5, 100).sectors, 4);
        // Last track of range 0: LBNs 29..36 (sectors 0..7), then spares.
        assert_eq!(
            g.lbn_to_pbn(29),
            Pbn {
                cylinder: 1,
                head: 1,
                sector: 0
            }
        );
        assert_eq!(g.track_run(29, 100).sectors, 8);
        assert_eq!(g.track_run(29, 3).sectors, 3);
        // The last LBN of the disk.
        assert_eq!(g.track_run(122, 100).sectors, 1);
    }

    #[test]
    fn angles_follow_skews() {
        let g = tiny();
        // Zone 0, 10 spt, track skew 2, cylinder skew 3.
        let a = |c, h, s| {
            g.sector_angle(
                Pbn {
                    cylinder: c,
                    head: h,
                    sector: s,
                },
                0,
            )
        };
        assert!((a(0, 0, 0) - 0.0).abs() < 1e-12);
        assert!((a(0, 0, 3) - 0.3).abs() < 1e-12);
        assert!((a(0, 1, 0) - 0.2).abs() < 1e-12); // one track skew
        // Cylinder 1, head 0: (H−1)·1 track skews + 1 cylinder skew = 2 + 3 = 5 sectors.
        assert!((a(1, 0, 0) - 0.5).abs() < 1e-12);
        // Cylinder 3, head 1, sector 9: (1 + 3)·2 + 3·3 + 9 = 26 sectors → 0.6.
        assert!((a(3, 1, 9) - 0.6).abs() < 1e-12);
        // Zone 1 restarts at angle 0 at its first cylinder.
        assert!(
            (g.sector_angle(
                Pbn {
                    cylinder: 6,
                    head: 0,
                    sector: 0
                },
                1
            ))
            .abs()
                < 1e-12
        );
    }

    #[test]
    fn rejects_inconsistent_zones() {
        assert!(Geometry::new(2, 8, Some(2), None, &[zone(0, 8, 10, 0, vec![])]).is_err());
        assert!(
            Geometry::new(
                2,
                8,
                Some(2),
                None,
                &[zone(0, 3, 10, 0, vec![]), zone(3, 4, 10, 0, vec![])]
            )
            .is_err()
        );
        // Four slips in one range with three spares.
        assert!(
            Geometry::new(2, 8, Some(2), None, &[zone(0, 3, 10, 3, vec![1, 2, 3, 4])]).is_err()
        );
        assert!(Geometry::new(2, 8, None, None, &[zone(0, 3, 10, 3, vec![])]).is_err());
    }

    #[test]
    fn cheetah_capacity_and_zones() {
        let profiles::DiskModelSpec::Mechanical(m) = profiles::cheetah_4lp().model else {
            panic!("the Cheetah is mechanical")
        };
        let g = m.geometry().unwrap();
        // disk-models.md §1.2: usable sectors per zone = cyls·8·spt − 108·(cyls/12).
        let expected = [
            2_084_544u64,
            1_641_648,
            1_527_708,
            1_139_616,
            1_004_496,
            842_532,
            647_396,
        ];
        for (zi, &n) in expected.iter().enumerate() {
            assert_eq!(g.zone_lbns(zi).1, n, "zone {zi}");
        }
        assert_eq!(g.mapped_sectors(), 8_887_940);
        assert_eq!(g.capacity_sectors(), 8_887_200);
        assert_eq!(g.cylinders(), 6581);
        // Gap cylinders between zones.
        for gap in [1344, 2449, 3542, 4407, 5224, 5957] {
            assert_eq!(g.zone_of_cylinder(gap), None, "cylinder {gap}");
        }
        // Zone 0's first slip (1,448,762) lies in range 1448762 / (12·8·195) = 77.
        let slip = 1_448_762u64;
        let per_cyl = 8 * 195;
        let pbn = Pbn {
            cylinder: (slip / per_cyl) as u32,
            head: ((slip % per_cyl) / 195) as u32,
            sector: (slip % 195) as u32,
        };
        assert_eq!(g.pbn_to_lbn(pbn), None);
        let before = Pbn {
            sector: pbn.sector - 1,
            ..pbn
        };
        let after = Pbn {
            sector: pbn.sector + 1,
            ..pbn
        };
        let lb = g.pbn_to_lbn(before).unwrap();
        assert_eq!(g.pbn_to_lbn(after), Some(lb + 1));
        // Range 77 starts at LBN 77·(18720 − 108); the sector before the slip is
        // physical offset (slip − 77·18720 − 1) within it.
        assert_eq!(lb, 77 * (18_720 - 108) + (slip - 77 * 18_720 - 1));
    }

    /// Every LBN of a geometry maps to a distinct non-spare sector and back;
    /// every sector that maps to an LBN maps back to the same sector.
    fn check_bijection(g: &Geometry) {
        let mut count = 0u64;
        for c in 0..g.cylinders() {
            let Some(zi) = g.zone_of_cylinder(c) else {
                continue;
            };
            for h in 0..g.surfaces() {
                for s in 0..g.sectors_per_track(zi) {
                    let pbn = Pbn {
                        cylinder: c,
                        head: h,
                        sector: s,
                    };
                    if let Some(lbn) = g.pbn_to_lbn(pbn) {
                        assert_eq!(lbn, count, "LBNs are dense and ascending in physical order");
                        assert_eq!(g.lbn_to_pbn(lbn), pbn);
                        count += 1;
                    }
                }
            }
        }
        assert_eq!(count, g.capacity_sectors());
    }

    #[test]
    fn tiny_bijection() {
        check_bijection(&tiny());
    }

    fn arb_geometry() -> impl Strategy<Value = Geometry> {
        (
            1u32..4,
            1u32..4,
            prop::collection::vec((1u32..5, 0u32..2, 3u32..12), 1..4),
        )
            .prop_flat_map(|(surfaces, range, zones)| {
                // Lay zones out with optional one-cylinder gaps; spares < one cylinder.
                let mut specs = vec![];
                let mut cyl = 0;
                for (cyls, gap, spt) in zones {
                    let spares = (spt * surfaces).min(3);
                    specs.push(ZoneSpec {
                        first_cylinder: cyl,
                        last_cylinder: cyl + cyls - 1,
                        sectors_per_track: spt,
                        track_skew_sectors: 1.0,
                        cylinder_skew_sectors: 2.0,
                        spares_per_range: spares,
                        slips: vec![],
                    });
                    cyl += cyls + gap;
                }
                let cylinders = cyl;
                let slip_choices: Vec<_> = specs
                    .iter()
                    .map(|z| {
                        let phys = (z.last_cylinder - z.first_cylinder + 1) as u64
                            * surfaces as u64
                            * z.sectors_per_track as u64;
                        prop::collection::btree_set(0..phys, 0..3)
                    })
                    .collect();
                (
                    Just((surfaces, range, specs, cylinders)),
                    slip_choices,
                    0u64..400,
                )
            })
            .prop_filter_map(
                "slips exceed spares",
                |((surfaces, range, mut specs, cylinders), slips, cap)| {
                    for (z, s) in specs.iter_mut().zip(slips) {
                        z.slips = s.into_iter().collect();
                    }
                    let cap = (cap > 0).then_some(cap);
                    Geometry::new(surfaces, cylinders, Some(range), cap, &specs).ok()
                },
            )
    }

    proptest! {
        #[test]
        fn lbns_map_bijectively_onto_non_spare_sectors(g in arb_geometry()) {
            check_bijection(&g);
        }

        #[test]
        fn track_runs_are_physically_contiguous(g in arb_geometry(), pick in 0.0f64..1.0, len in 1u64..60) {
            prop_assume!(g.capacity_sectors() > 0);
            let lbn = ((g.capacity_sectors() as f64 * pick) as u64).min(g.capacity_sectors() - 1);
            let run = g.track_run(lbn, len);
            prop_assert!(run.sectors >= 1 && run.sectors <= len);
            for k in 0..run.sectors {
                let p = g.lbn_to_pbn(lbn + k);
                prop_assert_eq!(p, Pbn { sector: run.start.sector + k as u32, ..run.start });
            }
            // The run is maximal: the next LBN (if wanted and present) is not the next sector.
            let next = lbn + run.sectors;
            if run.sectors < len && next < g.capacity_sectors() {
                let p = g.lbn_to_pbn(next);
                let contiguous = Pbn { sector: run.start.sector + run.sectors as u32, ..run.start };
                prop_assert_ne!(p, contiguous);
            }
        }
    }
}
