//! The figures `rondo disk describe` reports for a profile.
//!
//! This module owns how a profile's headline numbers are computed: capacity,
//! per-zone media rates (sectors per track × 512 B × rpm / 60; MB = 10^6 B),
//! effective sequential rates once track and cylinder switches are paid, the
//! mean seek over random cylinder pairs, the mean rotational latency, the
//! paper-mode round bound for M requests of seed 000's mean request size, and
//! the rondo-mode bound for such a request in each zone.

use serde::{Deserialize, Serialize};

use super::bound::{PaperBound, RondoBound, RoundBound};
use super::profiles::{CacheSpec, DiskModelSpec, DiskProfile};
use super::seek::mean_seek_random_pairs_ns;
use super::service::Mechanism;
use super::{Disk, DiskError};
use crate::units::{NS_PER_S, SECTOR_BYTES, ns_to_ms};

/// Seed 000 Table 3: mean bytes per round of the six clips (624,935, 624,728,
/// 624,194, 624,729, 624,658, 625,062) = 624,717.7, rounded.
pub const SEED000_MEAN_REQUEST_BYTES: u64 = 624_718;

/// Numbers of requests per round `describe` tabulates.
pub const ROUND_TABLE_REQUESTS: [u64; 5] = [5, 10, 20, 40, 80];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskSummary {
    pub name: String,
    pub summary: String,
    /// "mechanical" or "solid_state".
    pub kind: String,
    pub capacity_sectors: u64,
    pub capacity_bytes: u64,
    /// `None` for flash.
    pub rpm: Option<f64>,
    pub surfaces: Option<u32>,
    pub cylinders: Option<u32>,
    /// Half a revolution (0 for flash).
    pub avg_rotational_latency_ms: f64,
    /// Mean seek over two independently uniform cylinders (0 for flash).
    pub avg_seek_ms: f64,
    pub single_cylinder_seek_ms: f64,
    /// Largest seek over the disk's cylinder distances.
    pub full_stroke_seek_ms: f64,
    pub head_switch_ms: f64,
    /// Host bus rate (0 for flash, whose rate is `read_rate_mb_per_s`).
    pub bus_mb_per_s: f64,
    pub cache: Option<CacheSpec>,
    /// Flash: read latency at queue depth 1.
    pub read_latency_ms: Option<f64>,
    /// Flash: sequential read rate.
    pub read_rate_mb_per_s: Option<f64>,
    pub zones: Vec<ZoneSummary>,
    pub paper_bound: PaperBoundSummary,
    pub rondo_bound: RondoBoundSummary,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZoneSummary {
    pub zone: usize,
    pub first_cylinder: u32,
    pub last_cylinder: u32,
    pub sectors_per_track: u32,
    pub track_skew_sectors: f64,
    pub cylinder_skew_sectors: f64,
    /// Addressable LBNs in the zone.
    pub sectors: u64,
    /// spt × 512 B × rpm / 60, MB = 10^6 bytes.
    pub media_rate_mb_per_s: f64,
    /// Reading whole cylinders: every track switch costs its skew (or a
    /// revolution more when the switch outlasts the skew); spares ignored.
    pub effective_rate_mb_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaperBoundSummary {
    /// "datasheet" (the paper's values) or "model" (derived from the profile).
    pub source: String,
    pub full_seek_ms: f64,
    pub track_seek_ms: f64,
    pub avg_rot_ms: f64,
    pub rate_mb_per_s: f64,
    pub request_bytes: u64,
    pub rows: Vec<RoundBoundRow>,
    pub round_ms: f64,
    /// Requests of `request_bytes` that fit in one round of `round_ms`.
    pub max_requests_per_round: u64,
}

/// rondo mode's bound for requests of seed 000's mean size, zone by zone
/// (each at its worst-placed position among 50 spread over the zone).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RondoBoundSummary {
    pub fixed_ms: f64,
    /// seek(d) ≤ a + b·d: a in ms, b in ms per cylinder (rotating disks).
    pub seek_line_ms: Option<(f64, f64)>,
    pub request_bytes: u64,
    pub round_ms: f64,
    pub zones: Vec<RondoZoneRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RondoZoneRow {
    /// `None` for a device without zones.
    pub zone: Option<usize>,
    pub request_ms: f64,
    pub max_requests_per_round: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundBoundRow {
    pub requests: u64,
    pub bound_ms: f64,
}

impl DiskSummary {
    pub fn of(profile: &DiskProfile) -> Result<DiskSummary, DiskError> {
        let disk = Disk::new(profile.clone())?;
        let bound = profile.paper_bound()?;
        let paper_bound = paper_bound_summary(&bound, profile.datasheet_bound.is_some());
        let capacity_sectors = disk.capacity_sectors();
        let rondo_bound = rondo_bound_summary(profile, &disk)?;
        let base = DiskSummary {
            name: profile.name.clone(),
            summary: profile.summary.clone(),
            kind: String::new(),
            capacity_sectors,
            capacity_bytes: capacity_sectors * SECTOR_BYTES,
            rpm: None,
            surfaces: None,
            cylinders: None,
            avg_rotational_latency_ms: 0.0,
            avg_seek_ms: 0.0,
            single_cylinder_seek_ms: 0.0,
            full_stroke_seek_ms: 0.0,
            head_switch_ms: 0.0,
            bus_mb_per_s: 0.0,
            cache: None,
            read_latency_ms: None,
            read_rate_mb_per_s: None,
            zones: vec![],
            paper_bound,
            rondo_bound,
        };
        Ok(match &profile.model {
            DiskModelSpec::Mechanical(spec) => {
                let m = disk.mechanism().expect("a mechanical profile");
                let cylinders = m.geometry.cylinders();
                DiskSummary {
                    kind: "mechanical".into(),
                    rpm: Some(spec.rpm),
                    surfaces: Some(spec.surfaces),
                    cylinders: Some(cylinders),
                    avg_rotational_latency_ms: ns_to_ms_f(m.revolution_ns / 2.0),
                    avg_seek_ms: ns_to_ms_f(mean_seek_random_pairs_ns(&m.seek, cylinders)),
                    single_cylinder_seek_ms: ns_to_ms_f(m.seek.seek_ns(1)),
                    full_stroke_seek_ms: ns_to_ms_f(
                        (1..cylinders)
                            .map(|d| m.seek.seek_ns(d))
                            .fold(0.0, f64::max),
                    ),
                    head_switch_ms: ns_to_ms_f(m.head_switch_ns),
                    bus_mb_per_s: spec.bus_bytes_per_s as f64 / 1e6,
                    cache: Some(spec.cache),
                    zones: zone_summaries(m, spec.rpm),
                    ..base
                }
            }
            DiskModelSpec::SolidState(s) => DiskSummary {
                kind: "solid_state".into(),
                read_latency_ms: Some(ns_to_ms(s.read_latency_ns)),
                read_rate_mb_per_s: Some(s.read_bytes_per_s as f64 / 1e6),
                ..base
            },
        })
    }
}

fn ns_to_ms_f(ns: f64) -> f64 {
    ns / 1e6
}

fn zone_summaries(m: &Mechanism, rpm: f64) -> Vec<ZoneSummary> {
    let g = &m.geometry;
    let h = g.surfaces() as f64;
    (0..g.zone_count())
        .map(|z| {
            let spt = g.sectors_per_track(z);
            let (first, last) = g.zone_cylinders(z);
            let (track_skew, cylinder_skew) = g.zone_skews(z);
            let (first_lbn, count) = g.zone_lbns(z);
            let sectors = count.min(g.capacity_sectors().saturating_sub(first_lbn));
            let media = spt as f64 * SECTOR_BYTES as f64 * rpm / 60.0;
            // A switch longer than its skew misses the sector and waits a revolution more.
            let sector_ns = m.sector_ns(z);
            let lost = |skew: f64, switch_ns: f64| {
                let mut s = skew;
                while s * sector_ns < switch_ns {
                    s += spt as f64;
                }
                s
            };
            let per_cylinder = h * spt as f64;
            let track_loss = lost(track_skew, m.head_switch_ns);
            let cylinder_loss = lost(cylinder_skew, m.seek.seek_ns(1).max(m.head_switch_ns));
            let effective =
                media * per_cylinder / (per_cylinder + (h - 1.0) * track_loss + cylinder_loss);
            ZoneSummary {
                zone: z,
                first_cylinder: first,
                last_cylinder: last,
                sectors_per_track: spt,
                track_skew_sectors: track_skew,
                cylinder_skew_sectors: cylinder_skew,
                sectors,
                media_rate_mb_per_s: media / 1e6,
                effective_rate_mb_per_s: effective / 1e6,
            }
        })
        .collect()
}

fn rondo_bound_summary(profile: &DiskProfile, disk: &Disk) -> Result<RondoBoundSummary, DiskError> {
    let bound = RondoBound::new(profile)?;
    let bytes = SEED000_MEAN_REQUEST_BYTES;
    let sectors = bytes.div_ceil(SECTOR_BYTES);
    let fixed = RoundBound::fixed_ns(&bound);
    let row = |zone, request_ns: u64| RondoZoneRow {
        zone,
        request_ms: ns_to_ms(request_ns),
        max_requests_per_round: NS_PER_S.saturating_sub(fixed) / request_ns,
    };
    let zones = match disk.mechanism() {
        None => vec![row(None, bound.extent_ns(0, sectors))],
        Some(m) => {
            let g = &m.geometry;
            (0..g.zone_count())
                .filter_map(|z| {
                    let (first, count) = g.zone_lbns(z);
                    let count = count.min(g.capacity_sectors().saturating_sub(first));
                    (count >= sectors).then(|| {
                        let worst = (0..50)
                            .map(|k| first + (count - sectors) * k / 49)
                            .map(|lbn| bound.extent_ns(lbn, sectors))
                            .max()
                            .expect("50 positions");
                        row(Some(z), worst)
                    })
                })
                .collect()
        }
    };
    Ok(RondoBoundSummary {
        fixed_ms: ns_to_ms(fixed),
        seek_line_ms: bound.seek_line_ns().map(|(a, b)| (a / 1e6, b / 1e6)),
        request_bytes: bytes,
        round_ms: ns_to_ms(NS_PER_S),
        zones,
    })
}

fn paper_bound_summary(b: &PaperBound, datasheet: bool) -> PaperBoundSummary {
    let bytes = SEED000_MEAN_REQUEST_BYTES;
    let rows = ROUND_TABLE_REQUESTS
        .iter()
        .map(|&m| RoundBoundRow {
            requests: m,
            bound_ms: ns_to_ms(b.round_ns(&vec![bytes; m as usize])),
        })
        .collect();
    PaperBoundSummary {
        source: if datasheet { "datasheet" } else { "model" }.into(),
        full_seek_ms: ns_to_ms(b.full_seek_ns),
        track_seek_ms: ns_to_ms(b.track_seek_ns),
        avg_rot_ms: ns_to_ms(b.avg_rot_ns),
        rate_mb_per_s: b.rate_bytes_per_s as f64 / 1e6,
        request_bytes: bytes,
        rows,
        round_ms: ns_to_ms(NS_PER_S),
        max_requests_per_round: b.max_requests(bytes, NS_PER_S),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::profiles;

    #[test]
    fn cheetah_headline_numbers() {
        let s = DiskSummary::of(&profiles::cheetah_4lp()).unwrap();
        // disk-models.md §1.2: 2.990 ms, 7.96 ms, 4.55 GB, 11.22–16.69 MB/s.
        assert!((s.avg_rotational_latency_ms - 2.990).abs() < 0.001);
        assert!((s.avg_seek_ms - 7.96).abs() < 0.005, "{}", s.avg_seek_ms);
        assert_eq!(s.capacity_bytes, 8_887_200 * 512);
        assert_eq!(s.zones.len(), 7);
        assert!((s.zones[0].media_rate_mb_per_s - 16.69).abs() < 0.005);
        assert!((s.zones[6].media_rate_mb_per_s - 11.22).abs() < 0.005);
        // Effective sequential rates of §1.2's table: 14.87 (zone 0) … 9.98 (zone 6).
        assert!((s.zones[0].effective_rate_mb_per_s - 14.87).abs() < 0.01);
        assert!((s.zones[6].effective_rate_mb_per_s - 9.98).abs() < 0.01);
        assert_eq!(s.full_stroke_seek_ms, 16.107);
        // Paper mode: seed 000 Table 2, 15 streams of 625 KB per second.
        assert_eq!(s.paper_bound.source, "datasheet");
        assert_eq!(s.paper_bound.max_requests_per_round, 15);
        // disk-models.md §2.4 (transfer excluded): 76.1 ms at M = 5; plus 5·55.28 ms.
        let row = &s.paper_bound.rows[0];
        assert!((row.bound_ms - (36.4 + 5.0 * (7.94 + 624_718.0 / 11.3e3))).abs() < 1e-5);
        // rondo mode: one row per zone, more streams in the outer zones than the paper's 15.
        let r = &s.rondo_bound;
        assert_eq!(r.zones.len(), 7);
        assert!(r.zones[0].max_requests_per_round > 15);
        assert!(r.zones[0].request_ms < r.zones[6].request_ms);
    }

    #[test]
    fn every_profile_summarises() {
        for p in profiles::builtin() {
            let s = DiskSummary::of(&p).unwrap();
            assert!(s.capacity_bytes > 0);
            assert_eq!(s.paper_bound.rows.len(), ROUND_TABLE_REQUESTS.len());
            if s.kind == "mechanical" {
                assert!(!s.zones.is_empty());
                assert!(s.avg_seek_ms > s.single_cylinder_seek_ms);
            } else {
                assert!(s.zones.is_empty());
                assert_eq!(s.avg_seek_ms, 0.0);
            }
        }
    }
}
