//! Built-in disk profiles and the serializable profile format.
//!
//! This module owns the parameter sets rondo can model and where each number
//! comes from. Every value carries its source next to it: a seed paper, a
//! DiskSim 4.0 file as named in `reference/disk-models.md` (byte-identical in
//! `benh/disksim`, `tcyfree/disksim-4` and `westerndigitalcorporation/DiskSim`),
//! a cited datasheet, or "assumption: <reason>" where no source gives it.

use serde::{Deserialize, Serialize};

use super::DiskError;
use super::bound::PaperBound;
use super::geometry::{Geometry, ZoneSpec};
use super::seek::{SeekCurve, SeekPoint, SeekSpec};
use crate::units::{SECTOR_BYTES, ms_to_ns};

/// A named disk model with the paper-mode values that go with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskProfile {
    pub name: String,
    /// One line: what the drive is and where its numbers come from.
    pub summary: String,
    pub model: DiskModelSpec,
    /// Datasheet values for the paper's closed-form bound, when the paper gives
    /// them (seed 000 Table 2 for the Cheetah). `None`: derived from the model.
    pub datasheet_bound: Option<PaperBound>,
}

/// The two kinds of device rondo models.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiskModelSpec {
    Mechanical(MechanicalSpec),
    SolidState(SolidStateSpec),
}

/// A rotating disk: zoned geometry, seek curve, rotation, controller, bus, cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MechanicalSpec {
    pub rpm: f64,
    pub surfaces: u32,
    /// Physical cylinders, including any that belong to no zone.
    pub cylinders: u32,
    /// The drive's reported capacity in sectors; caps the mapped LBNs.
    pub block_count: Option<u64>,
    /// DiskSim sparing scheme 8's range; `None` = no sparing.
    pub sparing_range_cylinders: Option<u32>,
    pub zones: Vec<ZoneSpec>,
    pub seek: SeekSpec,
    pub head_switch_ns: u64,
    /// Extra settling after a seek or head switch before a write.
    pub write_settle_ns: u64,
    pub overheads: ControllerOverheads,
    /// Host bus rate; one sector's bus time is `SECTOR_BYTES / rate`.
    pub bus_bytes_per_s: u64,
    pub cache: CacheSpec,
}

/// Per-command controller overheads (DiskSim names them "after read/write":
/// the kind of the previous command matters).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerOverheads {
    pub read_hit_after_read_ns: u64,
    pub read_hit_after_write_ns: u64,
    pub read_miss_after_read_ns: u64,
    pub read_miss_after_write_ns: u64,
    /// Writes go to the media (no write-back cache): DiskSim's write-miss values.
    pub write_after_read_ns: u64,
    pub write_after_write_ns: u64,
}

impl ControllerOverheads {
    /// The largest overhead any command can be charged.
    pub fn max_ns(&self) -> u64 {
        [
            self.read_hit_after_read_ns,
            self.read_hit_after_write_ns,
            self.read_miss_after_read_ns,
            self.read_miss_after_write_ns,
            self.write_after_read_ns,
            self.write_after_write_ns,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }
}

/// On-board segmented read cache with read-ahead ("buffer continuous read":
/// after a read from the media, keep reading up to `max_read_ahead_sectors`
/// past its end into the same segment, in the background, until a command
/// needs the mechanism). `segments == 0` disables caching.
///
/// The switches seed 003 added to DiskSim are all here: caching of requested
/// data on or off (`keep_requested`), prefetch depth
/// (`max_read_ahead_sectors`), number and size of segments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheSpec {
    pub segments: u32,
    pub segment_sectors: u32,
    pub max_read_ahead_sectors: u32,
    /// Whether the data a read returns to the host stays in its segment
    /// (`true`, DiskSim's behaviour) or is dropped once sent, so that a segment
    /// keeps only what was read ahead past the latest request. Absent in a
    /// config: `true`.
    #[serde(default = "keep_requested_default")]
    pub keep_requested: bool,
    /// DiskSim's "Allow almost read hits": whether a read whose first sector is
    /// the one read-ahead is reading right now (not yet in the buffer) rides
    /// the stream. When `false` (DiskSim's Cheetah 4LP, and the default when
    /// absent) it is a miss: only a read whose first sector is already in the
    /// buffer is a hit.
    #[serde(default)]
    pub almost_read_hits: bool,
    /// Command queueing with hits first: the drive takes a round's commands
    /// at once, serves the reads it holds wholly in its cache first, and
    /// sends a hit's data over the bus while the mechanism works on the next
    /// command (seed 003: hits "can be transferred by I/O controllers to the
    /// host in parallel to other, disk surface-to-buffer transfers"). When
    /// `false` (the default when absent, DiskSim's Cheetah validation set-up
    /// with one command in the drive) commands run one after the other,
    /// a hit's bus transfer included.
    #[serde(default)]
    pub command_queueing: bool,
}

fn keep_requested_default() -> bool {
    true
}

impl CacheSpec {
    /// No cache and no read-ahead.
    pub const NONE: CacheSpec = CacheSpec {
        segments: 0,
        segment_sectors: 0,
        max_read_ahead_sectors: 0,
        keep_requested: true,
        almost_read_hits: false,
        command_queueing: false,
    };
}

/// A flash device: no positional dependence. A command occupies the device's
/// data path for max(bytes / rate, 1 / IOPS) and completes one latency later;
/// queued commands pipeline (the next one's transfer overlaps the previous one's
/// latency).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SolidStateSpec {
    pub capacity_bytes: u64,
    pub read_latency_ns: u64,
    pub write_latency_ns: u64,
    pub read_bytes_per_s: u64,
    pub write_bytes_per_s: u64,
    pub max_read_iops: u64,
    pub max_write_iops: u64,
}

impl MechanicalSpec {
    /// One revolution in nanoseconds.
    pub fn revolution_ns(&self) -> f64 {
        60e9 / self.rpm
    }

    /// One sector's bus time in nanoseconds.
    pub fn bus_sector_ns(&self) -> f64 {
        SECTOR_BYTES as f64 * 1e9 / self.bus_bytes_per_s as f64
    }

    pub fn geometry(&self) -> Result<Geometry, String> {
        Geometry::new(
            self.surfaces,
            self.cylinders,
            self.sparing_range_cylinders,
            self.block_count,
            &self.zones,
        )
    }

    pub fn seek_curve(&self) -> Result<SeekCurve, String> {
        SeekCurve::new(&self.seek, self.cylinders)
    }

    /// Checks everything the service model relies on.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.rpm.is_finite() && self.rpm > 0.0) {
            return Err("rpm must be positive".into());
        }
        if self.bus_bytes_per_s == 0 {
            return Err("bus rate must be positive".into());
        }
        let c = &self.cache;
        if c.segments > 0 && (c.segment_sectors == 0) {
            return Err("cache segments must hold at least one sector".into());
        }
        self.geometry()?;
        self.seek_curve()?;
        Ok(())
    }
}

impl SolidStateSpec {
    pub fn validate(&self) -> Result<(), String> {
        let rates = [
            self.read_bytes_per_s,
            self.write_bytes_per_s,
            self.max_read_iops,
            self.max_write_iops,
        ];
        if rates.contains(&0) {
            return Err("rates and IOPS must be positive".into());
        }
        if self.capacity_bytes < SECTOR_BYTES {
            return Err("capacity below one sector".into());
        }
        Ok(())
    }
}

impl DiskProfile {
    /// Addressable sectors (the zone table capped by the declared block count).
    pub fn capacity_sectors(&self) -> Result<u64, DiskError> {
        self.validate()?;
        Ok(match &self.model {
            DiskModelSpec::Mechanical(m) => m.geometry().expect("validated").capacity_sectors(),
            DiskModelSpec::SolidState(s) => s.capacity_bytes / SECTOR_BYTES,
        })
    }

    /// Addressable bytes.
    pub fn capacity_bytes(&self) -> Result<u64, DiskError> {
        Ok(self.capacity_sectors()? * SECTOR_BYTES)
    }

    pub fn validate(&self) -> Result<(), DiskError> {
        let result = match &self.model {
            DiskModelSpec::Mechanical(m) => m.validate(),
            DiskModelSpec::SolidState(s) => s.validate(),
        };
        result.map_err(|reason| DiskError::InvalidProfile {
            profile: self.name.clone(),
            reason,
        })
    }

    /// The values the paper-mode bound uses: the datasheet's when the profile
    /// has them; otherwise derived from the model (full-stroke seek = largest
    /// seek, track seek = one-cylinder seek, T_avgRot = half a revolution,
    /// R_disk = innermost zone's media rate). For a solid-state device the
    /// seeks are 0 and 2·T_avgRot is one read latency.
    pub fn paper_bound(&self) -> Result<PaperBound, DiskError> {
        if let Some(b) = self.datasheet_bound {
            return Ok(b);
        }
        self.validate()?;
        Ok(match &self.model {
            DiskModelSpec::Mechanical(m) => {
                let curve = m.seek_curve().expect("validated");
                let geometry = m.geometry().expect("validated");
                let full = (1..m.cylinders)
                    .map(|d| curve.seek_ns(d))
                    .fold(0.0, f64::max);
                let min_spt = (0..geometry.zone_count())
                    .map(|z| geometry.sectors_per_track(z))
                    .min()
                    .expect("at least one zone");
                let rate = min_spt as f64 * SECTOR_BYTES as f64 * m.rpm / 60.0;
                PaperBound {
                    full_seek_ns: full.ceil() as u64,
                    track_seek_ns: curve.seek_ns(1).ceil() as u64,
                    avg_rot_ns: (m.revolution_ns() / 2.0).ceil() as u64,
                    // Round the rate down so the bound rounds transfer times up.
                    rate_bytes_per_s: rate.floor() as u64,
                }
            }
            DiskModelSpec::SolidState(s) => PaperBound {
                full_seek_ns: 0,
                track_seek_ns: 0,
                avg_rot_ns: s.read_latency_ns.div_ceil(2),
                rate_bytes_per_s: s.read_bytes_per_s,
            },
        })
    }
}

/// Names of the built-in profiles, in listing order.
pub const PROFILE_NAMES: [&str; 4] = ["cheetah-4lp", "seed003-table1", "hdd-7200", "nvme-gen4"];

/// All built-in profiles, in listing order.
pub fn builtin() -> Vec<DiskProfile> {
    vec![cheetah_4lp(), seed003_table1(), hdd_7200(), nvme_gen4()]
}

/// A built-in profile by name; the error lists the known names. Besides
/// the listed ones, `seed003-table1-c<MIB>-s<N>` is seed 003's drive set as
/// its Sweep&Prefetch experiments set DiskSim ([`seed003_table1_prefetching`]),
/// and any of them with a cache followed by `-q` is that drive with command
/// queueing ([`with_command_queueing`]), and any rotating one followed by
/// `-outer<PERCENT>` is that drive short-stroked ([`short_stroked`]).
pub fn by_name(name: &str) -> Result<DiskProfile, DiskError> {
    if let Some((base, percent)) = name.rsplit_once("-outer")
        && let Ok(percent) = percent.parse::<u32>()
    {
        return short_stroked(by_name(base)?, percent);
    }
    if let Some(profile) = parse_seed003_prefetching(name) {
        return Ok(profile);
    }
    if let Some(base) = name.strip_suffix("-q")
        && let Ok(profile) = by_name(base)
        && matches!(&profile.model, DiskModelSpec::Mechanical(m) if m.cache.segments > 0)
    {
        return Ok(with_command_queueing(profile));
    }
    builtin()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| DiskError::UnknownProfile {
            name: name.to_string(),
            known: format!(
                "{}, or seed003-table1-c<MIB>-s<SEGMENTS> (e.g. seed003-table1-c2-s8); any of \
                 them with a cache followed by -q: command queueing, hits overlapping the next \
                 command (e.g. hdd-7200-q); any rotating one followed by -outer<PERCENT>: \
                 short-stroked to that share of its cylinders (e.g. cheetah-4lp-outer30)",
                PROFILE_NAMES.join(", ")
            ),
        })
}

/// `valid/cheetah4LP.seek` [file], distance in cylinders : time in ms.
#[rustfmt::skip]
const CHEETAH_4LP_SEEK_MS: [(u32, f64); 103] = [
    (1, 0.636), (2, 1.146), (3, 1.16), (4, 1.275), (5, 1.285), (6, 1.403), (7, 1.287),
    (8, 1.42), (9, 1.539), (10, 1.416), (12, 1.527), (14, 1.55), (16, 1.547), (18, 1.547),
    (20, 1.679), (25, 1.928), (30, 1.936), (35, 1.937), (40, 2.07), (45, 2.187), (50, 2.314),
    (60, 2.325), (70, 2.324), (80, 2.459), (90, 2.586), (100, 2.705), (125, 3.111),
    (150, 3.627), (175, 3.622), (200, 3.754), (225, 3.875), (250, 3.878), (275, 3.843),
    (300, 4.008), (325, 4.007), (350, 4.135), (375, 4.136), (400, 4.138), (425, 4.266),
    (450, 4.397), (475, 4.4), (500, 4.414), (600, 4.795), (700, 5.056), (800, 5.426),
    (900, 5.576), (1000, 5.838), (1100, 6.099), (1200, 6.356), (1300, 6.606), (1400, 6.744),
    (1500, 7.003), (1600, 7.138), (1700, 7.269), (1800, 7.398), (1900, 7.779), (2000, 7.788),
    (2100, 8.05), (2200, 8.178), (2300, 8.433), (2400, 8.568), (2500, 8.817), (2600, 8.824),
    (2700, 9.082), (2800, 9.221), (2900, 9.474), (3000, 9.727), (3100, 9.857), (3200, 9.997),
    (3300, 10.254), (3400, 10.383), (3500, 10.513), (3600, 10.647), (3700, 10.905),
    (3800, 11.039), (3900, 11.297), (4000, 11.429), (4100, 11.552), (4200, 11.817),
    (4300, 11.946), (4400, 12.176), (4500, 12.334), (4600, 12.466), (4700, 12.723),
    (4800, 12.856), (4900, 12.99), (5000, 13.241), (5100, 13.368), (5200, 13.635),
    (5300, 13.758), (5400, 13.904), (5500, 14.157), (5600, 14.288), (5700, 14.414),
    (5800, 14.673), (5900, 14.809), (6000, 15.06), (6100, 15.186), (6200, 15.33),
    (6300, 15.579), (6400, 15.727), (6500, 15.969), (6580, 16.107),
];

/// Seagate Cheetah 4LP ST34501N as DiskSim 4.0's `SEAGATE_ST34501N_validate`
/// (disk-models.md §1.2), with the 40 MB/s ultra-wide SCSI bus of seed 000 §6.3.
pub fn cheetah_4lp() -> DiskProfile {
    // valid/cheetah4LP.model [file]: zone table with per-zone skews (in sectors),
    // 108 spares per 12-cylinder range, and the slip lists.
    let zone = |first, last, spt, track_skew, cyl_skew, slips: &[u64]| ZoneSpec {
        first_cylinder: first,
        last_cylinder: last,
        sectors_per_track: spt,
        track_skew_sectors: track_skew,
        cylinder_skew_sectors: cyl_skew,
        spares_per_range: 108,
        slips: slips.to_vec(),
    };
    // Zone 1's defect list in the model file remaps sector 233,375 onto itself, a
    // no-op; rondo models no remapped defects.
    let zones = vec![
        zone(
            0,
            1343,
            195,
            22.0,
            37.0,
            &[1_448_762, 1_916_532, 1_918_075, 1_919_618, 1_921_161],
        ),
        zone(
            1345,
            2448,
            187,
            22.0,
            35.0,
            &[
                234_713, 236_193, 237_860, 239_340, 240_820, 242_299, 1_624_216,
            ],
        ),
        zone(2450, 3541, 176, 20.0, 33.0, &[]),
        zone(
            3543,
            4406,
            166,
            19.0,
            31.0,
            &[
                365_917, 367_310, 368_623, 369_937, 820_783, 822_097, 823_410, 824_724,
            ],
        ),
        zone(4408, 5223, 155, 18.0, 29.0, &[]),
        zone(5225, 5956, 145, 17.0, 27.0, &[]),
        zone(5958, 6580, 131, 15.0, 25.0, &[]),
    ];
    let seek = SeekSpec::Extracted {
        points: CHEETAH_4LP_SEEK_MS
            .iter()
            .map(|&(d, ms)| SeekPoint {
                distance_cylinders: d,
                time_ns: ms_to_ns(ms),
            })
            .collect(),
    };
    DiskProfile {
        name: "cheetah-4lp".into(),
        summary: "Seagate Cheetah 4LP ST34501N: DiskSim 4.0 SEAGATE_ST34501N_validate \
                  (valid/cheetah4LP.*) with a 40 MB/s ultra-wide SCSI bus (seed 000 §6.3)"
            .into(),
        model: DiskModelSpec::Mechanical(MechanicalSpec {
            rpm: 10033.0,    // cheetah4LP.model: Rotation speed (measured; datasheet 10025)
            surfaces: 8,     // cheetah4LP.model: Number of data surfaces
            cylinders: 6581, // cheetah4LP.model: Number of cylinders (physical)
            block_count: Some(8_887_200), // cheetah4LP.model: Block count
            sparing_range_cylinders: Some(12), // cheetah4LP.model: sparing scheme 8, range 12
            zones,
            seek, // cheetah4LP.model: Seek type = extracted, cheetah4LP.seek
            head_switch_ns: ms_to_ns(0.195), // cheetah4LP.model: Head switch time
            write_settle_ns: 0, // cheetah4LP.model: Add. write settling delay = 0
            overheads: ControllerOverheads {
                // cheetah4LP.diskspecs: controller overheads (ms)
                read_hit_after_read_ns: ms_to_ns(0.068),
                read_hit_after_write_ns: ms_to_ns(0.309),
                read_miss_after_read_ns: ms_to_ns(0.6077),
                read_miss_after_write_ns: ms_to_ns(0.5688),
                write_after_read_ns: ms_to_ns(0.4313),
                write_after_write_ns: ms_to_ns(0.5378),
            },
            // Seed 000 §6.3: "Seagate Cheetah with ultra-wide SCSI interface" = 40 MB/s,
            // 0.0128 ms per sector. Not the diskspecs' 0.106 ms/sector of the validation rig.
            bus_bytes_per_s: 40_000_000,
            cache: CacheSpec {
                segments: 3,                 // cheetah4LP.diskspecs: Number of buffer segments
                segment_sectors: 282,        // cheetah4LP.diskspecs: Segment size (blocks)
                max_read_ahead_sectors: 282, // cheetah4LP.diskspecs: Maximum read-ahead (blks)
                keep_requested: true, // DiskSim keeps it; cheetah4LP.diskspecs: Enable caching in buffer = 1
                almost_read_hits: false, // cheetah4LP.diskspecs: Allow almost read hits = 0
                command_queueing: false, // DiskSim's validation set-up: Max queue length = 1
            },
        }),
        // Seed 000 Table 2 (datasheet): T_fullSeek 18.2 ms, T_trackSeek 0.98 ms,
        // T_avgRot 2.99 ms, R_disk 11.3 MB/s (inner zone sustained).
        datasheet_bound: Some(PaperBound::seed000_table2()),
    }
}

/// Seed 003's own settings of its sweep: cache size in bytes and segment count.
pub const SEED003_DEFAULT_CACHE_BYTES: u64 = 4 * 1024 * 1024;
pub const SEED003_DEFAULT_SEGMENTS: u32 = 16;

/// The drive of seed 003 Table 1 with the default cache (4 MB in 16 segments).
pub fn seed003_table1() -> DiskProfile {
    seed003_table1_with_cache(SEED003_DEFAULT_CACHE_BYTES, SEED003_DEFAULT_SEGMENTS)
}

/// The drive of seed 003 Table 1 with a cache of `cache_bytes` in `segments`
/// segments (seed 003 sweeps 2, 4, 8 and 12 MB and changes the segmentation).
pub fn seed003_table1_with_cache(cache_bytes: u64, segments: u32) -> DiskProfile {
    let rpm = 10_000.0; // seed 003 Table 1: RPM
    let surfaces = 18; // seed 003 Table 1: Heads/recording surfaces
    let cylinders = 6720; // seed 003 Table 1: Cylinders
    let head_switch_ns = ms_to_ns(0.195); // assumption: the Cheetah 4LP's (Table 1 gives none)
    let seek = SeekSpec::Hpl {
        // seed 003 Table 1 seek function, in DiskSim hpl form (disk-models.md §1.5):
        // [1344, 1.867, 0.1315, 3.8635, 0.0021, -1] ms; V6 = -1: seek(1) from the √ branch.
        boundary_cylinders: 1344,
        sqrt_base_ns: 1.867e6,
        sqrt_ns: 0.1315e6,
        linear_base_ns: 3.8635e6,
        linear_ns_per_cylinder: 0.0021e6,
        single_cylinder_ns: None,
    };
    let one_cylinder_ns = 1.867e6 + 0.1315e6;
    let revolution_ns = 60e9 / rpm;
    // assumption: skews follow the Cheetah 4LP's measured rule, switch time + 0.5 ms
    // rounded up to whole sectors (its skews are 0.675–0.685 ms track, 1.135–1.141 ms
    // cylinder against a 0.195 ms head switch and a 0.636 ms one-cylinder seek).
    let skew =
        |switch_ns: f64, spt: u32| ((switch_ns + 0.5e6) / (revolution_ns / spt as f64)).ceil();
    // assumption: 10 equal zones of 672 cylinders, sectors per track falling
    // linearly from 220 (outer) to 140 (inner), Table 1's range; equal-width zones
    // with linearly falling spt model constant linear bit density. No gap cylinders.
    let zone_count = 10u32;
    let per_zone = cylinders / zone_count;
    let zones = (0..zone_count)
        .map(|i| {
            let spt = (220.0 - i as f64 * 80.0 / (zone_count - 1) as f64).round() as u32;
            ZoneSpec {
                first_cylinder: i * per_zone,
                last_cylinder: (i + 1) * per_zone - 1,
                sectors_per_track: spt,
                track_skew_sectors: skew(head_switch_ns as f64, spt),
                cylinder_skew_sectors: skew(one_cylinder_ns, spt),
                spares_per_range: 0, // assumption: Table 1 gives no sparing
                slips: vec![],
            }
        })
        .collect();
    let segment_sectors = if segments == 0 {
        0
    } else {
        (cache_bytes / SECTOR_BYTES / segments as u64) as u32
    };
    DiskProfile {
        name: "seed003-table1".into(),
        summary: format!(
            "The 10,886 MB, 18-head, 10,000 rpm drive of seed 003 Table 1 (HPL seek); zones, \
             skews, overheads and cache layout are assumptions; cache {} KiB in {} segments",
            cache_bytes / 1024,
            segments
        ),
        model: DiskModelSpec::Mechanical(MechanicalSpec {
            rpm,
            surfaces,
            cylinders,
            // seed 003 Table 1: Capacity 10,886 Mbytes; assumption: MB = 10^6 bytes. The
            // raw zones hold 2.3% more (21,772,800 sectors); the difference is taken as
            // spare/reserved space at the inner edge.
            block_count: Some(10_886_000_000 / SECTOR_BYTES),
            sparing_range_cylinders: None,
            zones,
            seek,
            head_switch_ns,
            write_settle_ns: 0, // assumption: the Cheetah 4LP's
            // assumption: the Cheetah 4LP's overheads (seed 003: "delays and overheads equal
            // those on currently available disk drives").
            overheads: cheetah_overheads(),
            bus_bytes_per_s: 40_000_000, // seed 003 Table 1: 40 MBps (Ultra SCSI)
            cache: CacheSpec {
                segments,        // seed 003 changes the segmentation; default an assumption
                segment_sectors, // seed 003 sweeps 2–12 MB of cache
                // assumption: read ahead up to one segment, as the Cheetah 4LP does
                max_read_ahead_sectors: segment_sectors,
                keep_requested: true, // assumption: DiskSim keeps it (seed 003 switches it)
                almost_read_hits: false, // assumption: the Cheetah 4LP's (DiskSim's) rule
                command_queueing: false, // DiskSim's validation set-up: Max queue length = 1
            },
        }),
        datasheet_bound: None,
    }
}

/// `seed003-table1-c<MIB>-s<N>` → [`seed003_table1_prefetching`].
fn parse_seed003_prefetching(name: &str) -> Option<DiskProfile> {
    let rest = name.strip_prefix("seed003-table1-c")?;
    let (mib, segments) = rest.split_once("-s")?;
    let mib: u64 = mib.parse().ok().filter(|&m| (1..=1024).contains(&m))?;
    let segments: u32 = segments.parse().ok().filter(|&n| (1..=1024).contains(&n))?;
    Some(seed003_table1_prefetching(mib << 20, segments))
}

/// Seed 003's drive as its prefetching experiments set it ("the ability to
/// enable and disable requested-data caching, ... to switch prefetching off
/// and on at various depths; and ... to change the disk cache
/// segmentation"): `cache_bytes` in `segments` segments, requested data not
/// kept, no read-ahead of its own, so that the cache holds exactly the
/// blocks the host asked to prefetch (`BatchRequest::prefetch_sectors`),
/// one per segment. Named `seed003-table1-c<MIB>-s<N>`.
pub fn seed003_table1_prefetching(cache_bytes: u64, segments: u32) -> DiskProfile {
    let mut profile = seed003_table1_with_cache(cache_bytes, segments);
    profile.name = format!("seed003-table1-c{}-s{segments}", cache_bytes >> 20);
    profile.summary = format!(
        "{}; requested data not kept, no read-ahead but the host's prefetches (seed 003's \
         switches)",
        profile.summary
    );
    if let DiskModelSpec::Mechanical(m) = &mut profile.model {
        m.cache.keep_requested = false; // seed 003: requested-data caching off
        m.cache.max_read_ahead_sectors = 0; // seed 003: prefetch depth set by the host
    }
    profile
}

/// A profile whose drive queues commands and sends its cache hits over the
/// bus while the mechanism works on the next command
/// ([`CacheSpec::command_queueing`]); named with `-q` after the original
/// name (`seed003-table1-c8-s32-q`).
pub fn with_command_queueing(mut profile: DiskProfile) -> DiskProfile {
    if let DiskModelSpec::Mechanical(m) = &mut profile.model {
        m.cache.command_queueing = true;
        profile.name = format!("{}-q", profile.name);
        profile.summary = format!(
            "{}; command queueing, hits first, a hit's bus transfer overlapping the next \
             command (seed 003's assumption)",
            profile.summary
        );
    }
    profile
}

/// `profile` with its drive cache re-cut into as many equal segments as it
/// has room for blocks of `block_bytes` (at least one): the host sets the
/// segmentation (SCSI's caching mode page has the number of segments and
/// their size) so that each segment holds one prefetched block and the
/// cache as many blocks as fit. Unchanged without a cache.
pub fn with_cache_segments_for(mut profile: DiskProfile, block_bytes: u64) -> DiskProfile {
    if let DiskModelSpec::Mechanical(m) = &mut profile.model
        && m.cache.segments > 0
    {
        let cache_sectors = u64::from(m.cache.segments) * u64::from(m.cache.segment_sectors);
        let block_sectors = block_bytes.div_ceil(SECTOR_BYTES).max(1);
        let segments = (cache_sectors / block_sectors).clamp(1, u64::from(u32::MAX));
        m.cache.segments = segments as u32;
        m.cache.segment_sectors = (cache_sectors / segments) as u32;
        profile.summary = format!(
            "{}; cache re-cut into {} segments of {} KiB (one block of {} KiB each)",
            profile.summary,
            m.cache.segments,
            u64::from(m.cache.segment_sectors) * SECTOR_BYTES / 1024,
            block_bytes / 1024
        );
    }
    profile
}

/// `profile` short-stroked: only the outer `percent`% of its cylinders hold
/// data. Operators short-stroke disks to trade capacity for shorter seeks;
/// for rondo it is what lets the rondo bound charge the seeks of the stroke
/// the data can lie in instead of the whole disk's (its fixed part is two
/// full strokes and a sweep, its seek line is fitted over every distance).
///
/// The kept cylinders end at a sparing-range boundary of the zone they end
/// in (or at the end of the previous zone), so every kept LBN maps to the
/// same physical sector as on the whole drive: the result is the same drive
/// with its addresses past the kept ones unused. Named with `-outer<P>`
/// after the original name (`cheetah-4lp-outer30`). Refused for a
/// solid-state profile (no stroke) and for `percent` outside 1–100.
pub fn short_stroked(mut profile: DiskProfile, percent: u32) -> Result<DiskProfile, DiskError> {
    let invalid = |reason: String| DiskError::InvalidProfile {
        profile: format!("{}-outer{percent}", profile.name),
        reason,
    };
    if !(1..=100).contains(&percent) {
        return Err(invalid(format!(
            "the kept share of the stroke is given in percent, 1 to 100, not {percent}"
        )));
    }
    let DiskModelSpec::Mechanical(m) = &mut profile.model else {
        return Err(invalid(
            "a solid-state device has no stroke to shorten".to_string(),
        ));
    };
    let limit = (u64::from(m.cylinders) * u64::from(percent) / 100).max(1) as u32;
    let range = m.sparing_range_cylinders.filter(|&r| r > 0);
    let mut zones = Vec::with_capacity(m.zones.len());
    for z in &m.zones {
        if z.first_cylinder >= limit {
            break;
        }
        let mut kept = z.clone();
        if z.last_cylinder >= limit {
            let whole = limit - z.first_cylinder;
            let aligned = match range {
                Some(r) => whole / r * r,
                None => whole,
            };
            if aligned == 0 {
                break;
            }
            kept.last_cylinder = z.first_cylinder + aligned - 1;
            let surfaces = u64::from(m.surfaces);
            let physical = u64::from(aligned) * surfaces * u64::from(z.sectors_per_track);
            kept.slips.retain(|&s| s < physical);
        }
        zones.push(kept);
    }
    let Some(last) = zones.last() else {
        return Err(invalid(format!(
            "{percent}% of {} cylinders holds no whole sparing range of the first zone",
            m.cylinders
        )));
    };
    let cylinders_before = m.cylinders;
    let cylinders = last.last_cylinder + 1;
    // Lee's curve is fitted to the whole stroke (its full seek at the last
    // cylinder): keep the whole drive's curve by sampling it, densely where
    // it bends, over the distances the kept stroke has.
    if matches!(m.seek, SeekSpec::Lee { .. }) {
        let curve = m.seek_curve().map_err(invalid)?;
        // Every distance to 100, then 1% apart, and always the longest.
        let longest = cylinders - 1;
        let mut points = Vec::new();
        let mut d = 1u32;
        while d <= longest {
            points.push(SeekPoint {
                distance_cylinders: d,
                time_ns: curve.seek_ns(d).round() as u64,
            });
            d = if d == longest {
                d + 1
            } else {
                (d + (d / 100).max(1)).min(longest)
            };
        }
        if points.len() < 2 {
            return Err(invalid(
                "too few cylinders kept for a seek curve".to_string(),
            ));
        }
        m.seek = SeekSpec::Extracted { points };
    }
    m.cylinders = cylinders;
    m.zones = zones;
    profile.name = format!("{}-outer{percent}", profile.name);
    profile.summary = format!(
        "{}; short-stroked to the outer {} of its {} cylinders ({percent}%)",
        profile.summary, m.cylinders, cylinders_before
    );
    profile.validate()?;
    Ok(profile)
}

/// Which stroke of its drives a directory's rondo bound charges (its fixed
/// part: two strokes and a sweep; its seek line: the distances within it).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stroke {
    /// The whole drive's, wherever the data lies (seed 000's bound).
    #[default]
    Whole,
    /// The cylinders the data occupies: the drive short-stroked
    /// ([`short_stroked`]) to the least share of its stroke
    /// that holds every allocated stride, widened while streams play when
    /// ingest places data further in and they still fit
    /// (`docs/guarantee.md`, "The charged stroke"). [`stroke_holding`]
    /// gives the drive.
    Data,
}

impl Stroke {
    pub fn name(self) -> &'static str {
        match self {
            Stroke::Whole => "whole",
            Stroke::Data => "data",
        }
    }
}

impl std::fmt::Display for Stroke {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Stroke {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Stroke, String> {
        match s {
            "whole" => Ok(Stroke::Whole),
            "data" => Ok(Stroke::Data),
            _ => Err(format!("unknown stroke '{s}' (known: whole, data)")),
        }
    }
}

/// [`stroke_holding`] for data in strides of `stride_bytes` from LBN 0,
/// the highest in use `highest_stride` (`None`: no data): what the server
/// and the simulator charge under [`Stroke::Data`].
pub fn stroke_holding_strides(
    profile: &DiskProfile,
    highest_stride: Option<u64>,
    stride_bytes: u64,
) -> Result<(DiskProfile, u32), DiskError> {
    let end_bytes = highest_stride.map_or(0, |s| (s + 1) * stride_bytes);
    stroke_holding(profile, end_bytes.div_ceil(SECTOR_BYTES))
}

/// The drive a bound charges for data ending at sector `end_sectors` (LBNs
/// `0..end_sectors` in use): `profile` short-stroked ([`short_stroked`])
/// to the least whole percent of its stroke that holds them, or `profile`
/// itself when only the whole drive does (or it has no stroke: solid
/// state). First-fit allocation keeps a directory's data packed from LBN 0,
/// so this is the stroke its reads seek over; every kept LBN lies where it
/// lies on the whole drive, so the emulated and the real drive serve them
/// alike. Returns the percent with the profile (100 for the whole drive).
pub fn stroke_holding(
    profile: &DiskProfile,
    end_sectors: u64,
) -> Result<(DiskProfile, u32), DiskError> {
    if !matches!(profile.model, DiskModelSpec::Mechanical(_))
        || end_sectors >= profile.capacity_sectors()?
    {
        return Ok((profile.clone(), 100));
    }
    // The kept capacity grows with the percent: the least that holds the
    // data, by bisection (a percent too small to keep a whole sparing
    // range holds nothing).
    let holds = |percent: u32| -> Result<Option<DiskProfile>, DiskError> {
        match short_stroked(profile.clone(), percent) {
            Ok(p) => Ok((p.capacity_sectors()? >= end_sectors.max(1)).then_some(p)),
            Err(DiskError::InvalidProfile { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let (mut low, mut high) = (0u32, 100u32);
    while high - low > 1 {
        let mid = (low + high) / 2;
        if holds(mid)?.is_some() {
            high = mid;
        } else {
            low = mid;
        }
    }
    match holds(high)? {
        Some(p) if high < 100 => Ok((p, high)),
        _ => Ok((profile.clone(), 100)),
    }
}

fn cheetah_overheads() -> ControllerOverheads {
    match cheetah_4lp().model {
        DiskModelSpec::Mechanical(m) => m.overheads,
        DiskModelSpec::SolidState(_) => unreachable!("the Cheetah is mechanical"),
    }
}

/// A modern 7200-rpm enterprise HDD, mixed sources (disk-models.md §3.1's
/// "suggested parameter set"); every value without a citation is an assumption.
pub fn hdd_7200() -> DiskProfile {
    let rpm = 7200.0; // Exos M 30TB / Ultrastar HC310 / 7K8: 7200 rpm [cited]
    let surfaces = 18; // assumption: 9 platters of a 16–18 TB Exos-class drive
    let zone_count = 24u32; // disk-models.md §3.1: "≈ 20–30 zones, linear in radius"
    let per_zone = 22_000u32; // assumption: sized so the zones hold ≥ 16 TB
    let cylinders = zone_count * per_zone;
    let revolution_ns = 60e9 / rpm;
    // disk-models.md §3.1: OD 270 MB/s (Exos X18 [cited]), ID ≈ 0.5 × OD [estimate].
    let spt_outer = (270e6 / (SECTOR_BYTES as f64 * rpm / 60.0)).round();
    let spt_inner = (spt_outer / 2.0).round();
    let head_switch_ns = ms_to_ns(0.5); // assumption: equal to the track-to-track seek below
    let single_ns = 0.5e6; // disk-models.md §3.1 suggested set: track-to-track 0.5 ms
    // assumption: skew = switch + 0.2 ms settle/controller margin, whole sectors.
    let skew =
        |switch_ns: f64, spt: u32| ((switch_ns + 0.2e6) / (revolution_ns / spt as f64)).ceil();
    let zones = (0..zone_count)
        .map(|i| {
            let f = i as f64 / (zone_count - 1) as f64;
            let spt = (spt_outer + (spt_inner - spt_outer) * f).round() as u32;
            ZoneSpec {
                first_cylinder: i * per_zone,
                last_cylinder: (i + 1) * per_zone - 1,
                sectors_per_track: spt,
                track_skew_sectors: skew(head_switch_ns as f64, spt),
                cylinder_skew_sectors: skew(single_ns, spt),
                spares_per_range: 0, // assumption: sparing not modelled
                slips: vec![],
            }
        })
        .collect();
    DiskProfile {
        name: "hdd-7200".into(),
        summary: "A modern 7200-rpm enterprise HDD (16 TB, 270→135 MB/s), mixed sources: \
                  Exos/Ultrastar datasheets where cited, assumptions elsewhere"
            .into(),
        model: DiskModelSpec::Mechanical(MechanicalSpec {
            rpm,
            surfaces,
            cylinders,
            block_count: Some(16_000_000_000_000 / SECTOR_BYTES), // assumption: a 16 TB model
            sparing_range_cylinders: None,
            zones,
            // disk-models.md §3.1 suggested set: track-to-track 0.5 ms, full stroke ≈ 16 ms;
            // average 8 ms (HGST Ultrastar 7K8 spec [cited]); Lee's curve through the three.
            seek: SeekSpec::Lee {
                single_ns,
                average_ns: 8.0e6,
                full_ns: 16.0e6,
            },
            head_switch_ns,
            write_settle_ns: ms_to_ns(0.1), // assumption: HC310 write seeks ~0.1 ms slower [cited: 0.23 vs 0.32 ms track-to-track]
            overheads: ControllerOverheads {
                // disk-models.md §3.1: "controller overhead of ~0.1–0.3 ms [unverified]"
                read_hit_after_read_ns: ms_to_ns(0.05), // assumption
                read_hit_after_write_ns: ms_to_ns(0.05), // assumption
                read_miss_after_read_ns: ms_to_ns(0.2),
                read_miss_after_write_ns: ms_to_ns(0.2),
                write_after_read_ns: ms_to_ns(0.2),
                write_after_write_ns: ms_to_ns(0.2),
            },
            bus_bytes_per_s: 600_000_000, // assumption: SATA/SAS 6 Gb/s link payload rate
            cache: CacheSpec {
                // disk-models.md §3.1: cache 256–512 MB (Exos M: 512 MB multisegmented)
                segments: 16,            // assumption: 16 segments of 16 MiB = 256 MiB
                segment_sectors: 32_768, // assumption
                max_read_ahead_sectors: 2048, // assumption: 1 MiB read-ahead
                keep_requested: true,    // assumption: as DiskSim
                almost_read_hits: false, // assumption: as DiskSim's Cheetah 4LP
                command_queueing: false, // DiskSim's validation set-up: Max queue length = 1
            },
        }),
        datasheet_bound: None,
    }
}

/// A PCIe Gen4 NVMe SSD (disk-models.md §3.2), Samsung PM9A3 1.92 TB figures
/// where cited.
pub fn nvme_gen4() -> DiskProfile {
    DiskProfile {
        name: "nvme-gen4".into(),
        summary: "PCIe Gen4 NVMe SSD (Samsung PM9A3 1.92 TB datasheet values as quoted in \
                  disk-models.md §3.2): no positional dependence, latency + size/rate"
            .into(),
        model: DiskModelSpec::SolidState(SolidStateSpec {
            capacity_bytes: 1_920_000_000_000, // PM9A3 U.2 1.92 TB [cited]
            read_latency_ns: 80_000,           // PM9A3: 4K random-read latency QD1 80 µs [cited]
            write_latency_ns: 20_000, // assumption: power-loss-protected write buffer acknowledges
            read_bytes_per_s: 6_800_000_000, // PM9A3: 128K sequential read 6800 MB/s [cited]
            write_bytes_per_s: 2_000_000_000, // assumption: Micron 7450 writes 0.7–5.6 GB/s by capacity [cited]; ~2 TB class
            max_read_iops: 850_000,           // PM9A3: random read QD32 850 K IOPS [cited]
            max_write_iops: 130_000,          // PM9A3: steady random write 130 K IOPS [cited]
        }),
        datasheet_bound: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_spec_without_the_new_switches_still_parses() {
        use serde::de::value::{Error, MapDeserializer};
        // A config written before the switches existed: today's behaviour
        // (requested data kept) and DiskSim's rule (no almost read hits).
        let old = [
            ("segments", 3u32),
            ("segment_sectors", 282),
            ("max_read_ahead_sectors", 282),
        ];
        let spec =
            CacheSpec::deserialize(MapDeserializer::<_, Error>::new(old.into_iter())).unwrap();
        assert_eq!(
            spec,
            CacheSpec {
                segments: 3,
                segment_sectors: 282,
                max_read_ahead_sectors: 282,
                keep_requested: true,
                almost_read_hits: false,
                command_queueing: false,
            }
        );
    }

    #[test]
    fn every_builtin_profile_is_valid_and_found_by_name() {
        let all = builtin();
        assert_eq!(all.len(), PROFILE_NAMES.len());
        for (p, name) in all.iter().zip(PROFILE_NAMES) {
            assert_eq!(p.name, name);
            p.validate().unwrap();
            assert!(p.capacity_bytes().unwrap() > 1_000_000_000);
            assert_eq!(by_name(name).unwrap(), *p);
            p.paper_bound().unwrap();
        }
        let err = by_name("cheetah").unwrap_err().to_string();
        assert!(
            err.contains("cheetah-4lp") && err.contains("nvme-gen4"),
            "{err}"
        );
    }

    #[test]
    fn cheetah_seek_table_matches_the_file() {
        let DiskModelSpec::Mechanical(m) = cheetah_4lp().model else {
            panic!()
        };
        let SeekSpec::Extracted { points } = &m.seek else {
            panic!()
        };
        assert_eq!(points.len(), 103);
        assert_eq!(points[0].time_ns, 636_000);
        assert_eq!(points[102].distance_cylinders, 6580);
        assert_eq!(points[102].time_ns, 16_107_000);
    }

    #[test]
    fn seed003_geometry_meets_table_1() {
        let DiskModelSpec::Mechanical(m) = seed003_table1().model else {
            panic!()
        };
        let g = m.geometry().unwrap();
        assert_eq!(g.cylinders(), 6720);
        assert_eq!(g.surfaces(), 18);
        assert_eq!(g.sectors_per_track(0), 220);
        assert_eq!(g.sectors_per_track(9), 140);
        assert_eq!(g.capacity_sectors(), 10_886_000_000 / 512);
        assert!(g.mapped_sectors() > g.capacity_sectors());
        assert_eq!(
            m.cache.segments * m.cache.segment_sectors * 512,
            4 * 1024 * 1024
        );
        let custom = seed003_table1_with_cache(12 * 1024 * 1024, 8);
        let DiskModelSpec::Mechanical(m) = custom.model else {
            panic!()
        };
        assert_eq!(m.cache.segment_sectors as u64 * 8 * 512, 12 * 1024 * 1024);
    }

    #[test]
    fn hdd_7200_rates_and_capacity() {
        let DiskModelSpec::Mechanical(m) = hdd_7200().model else {
            panic!()
        };
        let g = m.geometry().unwrap();
        let rate = |z: usize| g.sectors_per_track(z) as f64 * 512.0 * 7200.0 / 60.0 / 1e6;
        assert!((rate(0) - 270.0).abs() < 0.1);
        assert!((rate(g.zone_count() - 1) - 135.0).abs() < 0.1);
        assert_eq!(g.capacity_sectors(), 16_000_000_000_000 / 512);
    }
}
