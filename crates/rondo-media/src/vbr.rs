//! Synthetic VBR MPEG-2 titles calibrated to seed 000 Table 3.
//!
//! This module owns the model of a variable-bit-rate title (scenes, GOPs,
//! picture types, the encoder's rate control) and the calibration that makes
//! each generated title's per-round mean and coefficient of variation equal
//! to the Table 3 row of its content type. It decides nothing about how rounds
//! are scheduled; it only measures its own output at Table 3's round length
//! (1 s, §6.3) while calibrating.
//!
//! The model, top down (docs/traces.md gives the derivation and the reasons):
//! 1. Scenes: a title is a sequence of scenes, each a whole number of GOPs,
//!    geometric with mean `mean_scene_duration_ns`. Scene s has complexity
//!    `exp(σ_s·z_s)`, `z_s ~ N(0,1)`.
//! 2. GOPs: each GOP's complexity is its scene's times `exp(ρ·σ_s·w_g)`,
//!    `w_g ~ N(0,1)` (motion changing within a scene); ρ is the ratio of
//!    within-scene to between-scene variation.
//! 3. Rate control: the encoder gives GOP g the budget
//!    `clamp(scale·complexity_g, floor, peak)` bytes, the floor and peak being
//!    the encoder's 1 and 9.6 Mbit/s limits (§6.3) over a GOP's duration. The
//!    peak is enforced here, on the budget, as an encoder's rate control does,
//!    so no round that is a whole number of GOPs (seed 000: 1-s rounds, 0.5-s
//!    GOPs) can exceed it; a round that cuts a GOP can exceed it by at most
//!    the part of that GOP it holds, as a real encoder's VBV buffer allows.
//! 4. Frames: the budget is split over the GOP's frames in proportion to
//!    picture-type weights (I:P:B from MPEG-2 TM5) times per-frame noise
//!    `exp(σ_f·u_f)`.
//!
//! Calibration, per title and deterministic: the random draws (scene lengths,
//! z, w, u) fix the title's shape; `scale` (what a two-pass encoder's
//! title-level rate control chooses to hit its target average rate) and `σ_s`
//! (the spread of scene complexity) are then solved so that the title's
//! per-round mean and CoV equal the targets. ρ, `σ_f` and the mean scene
//! length are stated assumptions, exposed as parameters.

use std::fmt;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Geometric, StandardNormal};
use rondo_model::schedule::Frame;
use rondo_model::units::NS_PER_S;

use crate::synth::SynthError;
use crate::trace::{FrameType, Trace};

/// The six content types of seed 000 Table 3, in the table's order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContentType {
    ScienceFiction,
    MusicClip,
    Action,
    TalkShow,
    Adventure,
    Documentary,
}

/// One row of seed 000 Table 3: per-round statistics of a 30-minute title
/// with one-second rounds.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Table3Row {
    pub mean_bytes_per_round: f64,
    pub max_bytes_per_round: u64,
    pub cov_per_round: f64,
}

impl ContentType {
    /// All content types in Table 3's order.
    pub const ALL: [ContentType; 6] = [
        ContentType::ScienceFiction,
        ContentType::MusicClip,
        ContentType::Action,
        ContentType::TalkShow,
        ContentType::Adventure,
        ContentType::Documentary,
    ];

    /// The kind name used by the CLI and trace files.
    pub fn name(self) -> &'static str {
        match self {
            ContentType::ScienceFiction => "science-fiction",
            ContentType::MusicClip => "music-clip",
            ContentType::Action => "action",
            ContentType::TalkShow => "talk-show",
            ContentType::Adventure => "adventure",
            ContentType::Documentary => "documentary",
        }
    }

    /// The content type with kind name `name`.
    pub fn from_name(name: &str) -> Option<ContentType> {
        ContentType::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Seed 000 Table 3, verbatim.
    pub fn table3(self) -> Table3Row {
        let (mean_bytes_per_round, max_bytes_per_round, cov_per_round) = match self {
            ContentType::ScienceFiction => (624_935.0, 1_201_221, 0.383),
            ContentType::MusicClip => (624_728.0, 1_201_221, 0.366),
            ContentType::Action => (624_194.0, 1_201_221, 0.245),
            ContentType::TalkShow => (624_729.0, 1_201_221, 0.234),
            ContentType::Adventure => (624_658.0, 1_201_221, 0.201),
            ContentType::Documentary => (625_062.0, 625_786, 0.028),
        };
        Table3Row {
            mean_bytes_per_round,
            max_bytes_per_round,
            cov_per_round,
        }
    }
}

impl fmt::Display for ContentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Round length of Table 3's statistics (§6.3: "the round time was set equal
/// to one second").
pub const TABLE3_ROUND_DURATION_NS: u64 = NS_PER_S;
/// §6.3: "30 frames per second frequency".
pub const MPEG2_FPS: u32 = 30;
/// §6.3: "Every stream has 54,000 frames" (30 minutes at 30 fps).
pub const TITLE_FRAMES: u64 = 54_000;
/// §6.3: the 15-frame GOP IB²PB²PB²PB²PB². Written as the paper writes it,
/// which is also the bitstream (decode) order of an open MPEG-2 GOP: the two
/// B pictures after I display before it.
pub const GOP_PATTERN: &str = "IBBPBBPBBPBBPBB";
/// §6.3: the encoder "generates bit rates between 1 Mbit/s and 9.6 Mbit/s";
/// the lower limit, in bytes per one-second round.
pub const ENCODER_FLOOR_BYTES_PER_S: u64 = 1_000_000 / 8;
/// Assumption: scenes (stretches of similar coding complexity) last 5 s on
/// average. Measured average shot lengths of feature films lie between about
/// 2.5 s (recent action films) and 12 s (1930s films), 4–6 s being typical
/// (Cutting et al., cinemetrics); a complexity level often spans more than one
/// shot, so 5 s sits in the middle. Seed 000 gives no value.
pub const MEAN_SCENE_DURATION_NS_DEFAULT: u64 = 5 * NS_PER_S;
/// Assumption: within a scene, GOP complexity varies with a quarter of the
/// log-sd between scenes (ρ = 0.25). Scene-based MPEG traffic models (Krunz
/// & Tripathi 1997; Yoo & Kim 2001) attribute most variation to scene
/// changes and model the rest as smaller fluctuations around the scene's
/// level; with 5-s scenes, ρ = 0.25 makes successive GOPs' log-complexities
/// correlate at 0.9·1/(1+ρ²) ≈ 0.85. A ratio rather than an absolute spread
/// keeps the split between the two time scales the same for every content
/// type, and lets the nearly constant documentary concentrate its few dips
/// (docs/traces.md).
pub const GOP_LOG_SD_RATIO_DEFAULT: f64 = 0.25;
/// Assumption: frames of one type within a GOP vary by about 10% (log-sd
/// 0.1) around the TM5 proportions. Affects only rounds shorter than a GOP.
pub const FRAME_LOG_SD_DEFAULT: f64 = 0.10;
/// The scene log-sd search scans a geometric grid from this value...
const SCENE_LOG_SD_GRID_START: f64 = 0.01;
/// ...in steps of this factor...
const SCENE_LOG_SD_GRID_FACTOR: f64 = 1.1;
/// ...up to this value, or until exp() of the largest log-complexity would
/// approach f64's range (`LOG_COMPLEXITY_MAX`).
const SCENE_LOG_SD_MAX: f64 = 64.0;
const LOG_COMPLEXITY_MAX: f64 = 600.0;
/// Bisection steps: each halves the bracket, 64 reach f64 resolution.
const BISECTION_STEPS: u32 = 64;

/// Relative sizes of I, P and B pictures at equal picture quality.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FrameTypeWeights {
    pub i: f64,
    pub p: f64,
    pub b: f64,
}

/// MPEG-2 Test Model 5 (ISO/IEC JTC1/SC29/WG11 N0400, rate control step 1): initial
/// complexities X_i:X_p:X_b = 160:60:42 with quantiser ratios K_p = 1.0 and
/// K_b = 1.4, so target sizes are 160 : 60/1.0 : 42/1.4 = 160 : 60 : 30.
pub const TM5_WEIGHTS: FrameTypeWeights = FrameTypeWeights {
    i: 160.0,
    p: 60.0,
    b: 30.0,
};

impl FrameTypeWeights {
    fn of(&self, frame_type: FrameType) -> f64 {
        match frame_type {
            FrameType::I => self.i,
            FrameType::P => self.p,
            FrameType::B => self.b,
            FrameType::Unspecified => unreachable!("validated: GOP patterns hold I, P, B only"),
        }
    }
}

/// Parameters of the VBR model. [`VbrParams::for_content`] gives seed 000's
/// titles; every field may be changed for experiments (e.g. the scene length).
#[derive(Clone, Debug, PartialEq)]
pub struct VbrParams {
    /// Kind written to the trace header.
    pub kind: String,
    /// Frames per second (§6.3: 30).
    pub fps: u32,
    /// Frames in the title (§6.3: 54,000).
    pub frame_count: u64,
    /// Picture types of one GOP in decode order (§6.3: IBBPBBPBBPBBPBB).
    pub gop_pattern: Vec<FrameType>,
    /// Round length at which the targets hold (§6.3: 1 s).
    pub calibration_round_ns: u64,
    /// Target mean bytes per calibration round (Table 3).
    pub target_mean_bytes_per_round: f64,
    /// Target CoV of bytes per calibration round (Table 3).
    pub target_cov_per_round: f64,
    /// Encoder peak: bytes per calibration round no round may exceed (Table 3
    /// maximum: 1,201,221, the 9.6 Mbit/s cap of §6.3; 625,786 for the
    /// documentary, encoded at a near-constant rate).
    pub peak_bytes_per_round: u64,
    /// Encoder floor per calibration round (§6.3: 1 Mbit/s).
    pub floor_bytes_per_round: u64,
    /// Mean scene duration (assumption, see [`MEAN_SCENE_DURATION_NS_DEFAULT`]).
    pub mean_scene_duration_ns: u64,
    /// Log-sd of GOP complexity within a scene over that between scenes
    /// (assumption, see [`GOP_LOG_SD_RATIO_DEFAULT`]).
    pub gop_log_sd_ratio: f64,
    /// Log-sd of frame size around its picture-type weight (assumption).
    pub frame_log_sd: f64,
    /// Picture-type proportions (TM5).
    pub frame_type_weights: FrameTypeWeights,
}

/// What calibration chose for one title, and what it achieved (before the
/// final rounding of budgets to whole bytes, which moves the mean by less than
/// one byte per GOP).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct VbrCalibration {
    /// GOP budget, in bytes, of unit complexity (the rate control's scale).
    pub scale_bytes_per_gop: f64,
    /// Spread of scene complexity σ_s (log-sd).
    pub scene_log_sd: f64,
    pub model_mean_bytes_per_round: f64,
    pub model_cov_per_round: f64,
    /// Scenes drawn for the title.
    pub scene_count: usize,
    /// Fraction of GOPs whose budget the peak limited.
    pub peak_limited_gop_fraction: f64,
    /// Fraction of GOPs whose budget the floor raised.
    pub floor_limited_gop_fraction: f64,
}

/// Independent ChaCha8 streams of one seed, so that changing one part of the
/// model (e.g. the scene length) leaves the other parts' draws unchanged.
const STREAM_SCENES: u64 = 0;
const STREAM_GOPS: u64 = 1;
const STREAM_FRAMES: u64 = 2;

fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Parses a GOP pattern such as `IBBPBBPBBPBBPBB`.
pub fn parse_gop_pattern(pattern: &str) -> Option<Vec<FrameType>> {
    let types: Option<Vec<FrameType>> = pattern
        .chars()
        .map(|c| match c {
            'I' => Some(FrameType::I),
            'P' => Some(FrameType::P),
            'B' => Some(FrameType::B),
            _ => None,
        })
        .collect();
    types.filter(|t| !t.is_empty())
}

fn invalid(param: &'static str, reason: impl Into<String>) -> SynthError {
    SynthError::InvalidParams {
        param,
        reason: reason.into(),
    }
}

impl VbrParams {
    /// Seed 000's title of `content`: §6.3's format, Table 3's targets and
    /// the default assumptions.
    pub fn for_content(content: ContentType) -> VbrParams {
        let row = content.table3();
        VbrParams {
            kind: content.name().to_string(),
            fps: MPEG2_FPS,
            frame_count: TITLE_FRAMES,
            gop_pattern: parse_gop_pattern(GOP_PATTERN).expect("constant pattern is valid"),
            calibration_round_ns: TABLE3_ROUND_DURATION_NS,
            target_mean_bytes_per_round: row.mean_bytes_per_round,
            target_cov_per_round: row.cov_per_round,
            peak_bytes_per_round: row.max_bytes_per_round,
            floor_bytes_per_round: ENCODER_FLOOR_BYTES_PER_S,
            mean_scene_duration_ns: MEAN_SCENE_DURATION_NS_DEFAULT,
            gop_log_sd_ratio: GOP_LOG_SD_RATIO_DEFAULT,
            frame_log_sd: FRAME_LOG_SD_DEFAULT,
            frame_type_weights: TM5_WEIGHTS,
        }
    }

    /// The same parameters with another mean scene duration.
    pub fn with_mean_scene_duration_ns(mut self, mean_scene_duration_ns: u64) -> VbrParams {
        self.mean_scene_duration_ns = mean_scene_duration_ns;
        self
    }

    /// Duration of one GOP in nanoseconds (fractional).
    pub fn gop_duration_ns(&self) -> f64 {
        self.gop_pattern.len() as f64 * NS_PER_S as f64 / self.fps as f64
    }

    fn validate(&self) -> Result<(), SynthError> {
        if !crate::trace::is_valid_kind(&self.kind) {
            return Err(invalid(
                "kind",
                "must be a token of letters, digits, '-', '_', '.'",
            ));
        }
        if self.fps == 0 {
            return Err(invalid("fps", "must be positive"));
        }
        if self.frame_count == 0 {
            return Err(invalid("frame_count", "must be positive"));
        }
        if self.gop_pattern.is_empty() || self.gop_pattern.contains(&FrameType::Unspecified) {
            return Err(invalid(
                "gop_pattern",
                "must be a non-empty sequence of I, P, B",
            ));
        }
        if self.calibration_round_ns == 0 {
            return Err(invalid("calibration_round_ns", "must be positive"));
        }
        let w = self.frame_type_weights;
        if ![w.i, w.p, w.b].iter().all(|x| x.is_finite() && *x > 0.0) {
            return Err(invalid("frame_type_weights", "must be finite and positive"));
        }
        for (param, sd) in [
            ("gop_log_sd_ratio", self.gop_log_sd_ratio),
            ("frame_log_sd", self.frame_log_sd),
        ] {
            if !(sd.is_finite() && sd >= 0.0) {
                return Err(invalid(param, "must be finite and non-negative"));
            }
        }
        if !(self.target_cov_per_round.is_finite() && self.target_cov_per_round >= 0.0) {
            return Err(invalid(
                "target_cov_per_round",
                "must be finite and non-negative",
            ));
        }
        let floor = self.floor_bytes_per_round as f64;
        let peak = self.peak_bytes_per_round as f64;
        let mean = self.target_mean_bytes_per_round;
        if !(floor < mean && mean < peak) {
            return Err(invalid(
                "target_mean_bytes_per_round",
                format!("must lie strictly between the floor ({floor}) and the peak ({peak})"),
            ));
        }
        if (self.mean_scene_duration_ns as f64) < self.gop_duration_ns() {
            return Err(invalid(
                "mean_scene_duration_ns",
                "scenes are whole GOPs: the mean must be at least one GOP",
            ));
        }
        Ok(())
    }

    /// Generates the title for `seed`.
    pub fn generate(&self, seed: u64) -> Result<Trace, SynthError> {
        self.generate_with_calibration(seed).map(|(trace, _)| trace)
    }

    /// Generates the title for `seed` and reports the calibration.
    pub fn generate_with_calibration(
        &self,
        seed: u64,
    ) -> Result<(Trace, VbrCalibration), SynthError> {
        self.validate()?;
        let draws = Draws::new(self, seed)?;
        let layout = Layout::new(self, &draws.frame_shares);
        let calibrator = Calibrator::new(self, &draws, &layout);
        let (calibration, ln_scale) = calibrator.solve()?;
        let budgets: Vec<u64> = calibrator
            .budgets(calibration.scene_log_sd, ln_scale)
            .iter()
            .map(|b| b.round() as u64)
            .collect();
        let trace = self.frames_from_budgets(seed, &budgets, &draws.frame_shares);
        Ok((trace, calibration))
    }

    /// Splits each GOP's budget over its frames so that a full GOP's frames
    /// sum exactly to the budget (cumulative rounding).
    fn frames_from_budgets(&self, seed: u64, budgets: &[u64], frame_shares: &[f64]) -> Trace {
        let gop_len = self.gop_pattern.len();
        let n = self.frame_count as usize;
        let mut frames = Vec::with_capacity(n);
        let mut types = Vec::with_capacity(n);
        for (g, &budget) in budgets.iter().enumerate() {
            let shares = &frame_shares[g * gop_len..(g + 1) * gop_len];
            let mut cumulative = 0.0;
            let mut previous_bytes = 0u64;
            for (j, share) in shares.iter().enumerate() {
                let f = g * gop_len + j;
                if f >= n {
                    break;
                }
                cumulative += share;
                let through = if j + 1 == gop_len {
                    budget // exact: avoids float drift at the GOP's end
                } else {
                    (budget as f64 * cumulative).round() as u64
                };
                let through = through.max(previous_bytes);
                frames.push(Frame {
                    decode_time_ns: decode_time_ns(f as u64, self.fps),
                    bytes: through - previous_bytes,
                });
                types.push(self.gop_pattern[j]);
                previous_bytes = through;
            }
        }
        Trace::new(
            self.kind.clone(),
            Some(seed),
            Some(self.fps as f64),
            frames,
            types,
        )
    }
}

/// Decode time of frame `index` at `fps` frames per second, truncated to
/// whole nanoseconds (frame 30·k decodes at exactly k seconds at 30 fps).
pub fn decode_time_ns(index: u64, fps: u32) -> u64 {
    (index as u128 * NS_PER_S as u128 / fps as u128) as u64
}

/// The random draws of one title: its shape, before calibration.
struct Draws {
    /// Log-complexity of each GOP per unit of scene log-sd: `z_s + ρ·w_g`.
    unit_log_complexity: Vec<f64>,
    scene_count: usize,
    /// Each frame's share of its GOP's budget (full GOPs, `gop_len` per GOP).
    frame_shares: Vec<f64>,
}

impl Draws {
    fn new(params: &VbrParams, seed: u64) -> Result<Draws, SynthError> {
        let gop_len = params.gop_pattern.len();
        let gop_count = (params.frame_count as usize).div_ceil(gop_len);

        // Scene lengths in GOPs: 1 + Geometric(p) has mean 1/p GOPs.
        let p = params.gop_duration_ns() / params.mean_scene_duration_ns as f64;
        let geometric =
            Geometric::new(p).map_err(|e| invalid("mean_scene_duration_ns", e.to_string()))?;
        let mut rng = rng_for(seed, STREAM_SCENES);
        let mut scene_z_of_gop = Vec::with_capacity(gop_count);
        let mut scene_count = 0;
        while scene_z_of_gop.len() < gop_count {
            let length_gops = 1 + geometric.sample(&mut rng);
            let z: f64 = StandardNormal.sample(&mut rng);
            scene_count += 1;
            let remaining = (gop_count - scene_z_of_gop.len()) as u64;
            for _ in 0..length_gops.min(remaining) {
                scene_z_of_gop.push(z);
            }
        }

        let mut rng = rng_for(seed, STREAM_GOPS);
        let unit_log_complexity = scene_z_of_gop
            .iter()
            .map(|z| {
                let w: f64 = StandardNormal.sample(&mut rng);
                z + params.gop_log_sd_ratio * w
            })
            .collect();

        let mut rng = rng_for(seed, STREAM_FRAMES);
        let mut frame_shares = Vec::with_capacity(gop_count * gop_len);
        for _ in 0..gop_count {
            let start = frame_shares.len();
            for &t in &params.gop_pattern {
                let u: f64 = StandardNormal.sample(&mut rng);
                frame_shares
                    .push(params.frame_type_weights.of(t) * (params.frame_log_sd * u).exp());
            }
            let total: f64 = frame_shares[start..].iter().sum();
            frame_shares[start..].iter_mut().for_each(|s| *s /= total);
        }
        Ok(Draws {
            unit_log_complexity,
            scene_count,
            frame_shares,
        })
    }
}

/// Which part of which GOP falls in which calibration round.
struct Layout {
    /// (gop, round, share of the GOP's budget decoded in that round).
    segments: Vec<(usize, usize, f64)>,
    /// Share of each GOP's budget that is in the title (1 except a cut-off last GOP).
    gop_share: Vec<f64>,
    rounds: usize,
}

impl Layout {
    fn new(params: &VbrParams, frame_shares: &[f64]) -> Layout {
        let gop_len = params.gop_pattern.len();
        let n = params.frame_count as usize;
        let round_of = |f: usize| {
            (decode_time_ns(f as u64, params.fps) / params.calibration_round_ns) as usize
        };
        let mut segments: Vec<(usize, usize, f64)> = Vec::new();
        let mut gop_share = vec![0.0; n.div_ceil(gop_len)];
        // Frames beyond the title's end (a cut-off last GOP) are not counted.
        for (f, &share) in frame_shares.iter().enumerate().take(n) {
            let (g, round) = (f / gop_len, round_of(f));
            gop_share[g] += share;
            match segments.last_mut() {
                Some((sg, sr, s)) if *sg == g && *sr == round => *s += share,
                _ => segments.push((g, round, share)),
            }
        }
        Layout {
            segments,
            gop_share,
            rounds: round_of(n - 1) + 1,
        }
    }
}

/// Solves the rate control's scale and the scene spread for one title.
struct Calibrator<'a> {
    draws: &'a Draws,
    layout: &'a Layout,
    floor_bytes_per_gop: f64,
    peak_bytes_per_gop: f64,
    target_mean: f64,
    target_cov: f64,
}

impl<'a> Calibrator<'a> {
    fn new(params: &VbrParams, draws: &'a Draws, layout: &'a Layout) -> Calibrator<'a> {
        // The encoder's per-second limits over one GOP's duration. The peak is
        // rounded down so that budgets rounded to whole bytes stay within it.
        let gops_per_round = params.calibration_round_ns as f64 / params.gop_duration_ns();
        Calibrator {
            draws,
            layout,
            floor_bytes_per_gop: params.floor_bytes_per_round as f64 / gops_per_round,
            peak_bytes_per_gop: (params.peak_bytes_per_round as f64 / gops_per_round).floor(),
            target_mean: params.target_mean_bytes_per_round,
            target_cov: params.target_cov_per_round,
        }
    }

    /// Unscaled complexity of each GOP for scene spread `scene_log_sd`.
    fn complexities(&self, scene_log_sd: f64) -> Vec<f64> {
        self.draws
            .unit_log_complexity
            .iter()
            .map(|x| (scene_log_sd * x).exp())
            .collect()
    }

    fn budget(&self, complexity: f64, ln_scale: f64) -> f64 {
        (complexity * ln_scale.exp()).clamp(self.floor_bytes_per_gop, self.peak_bytes_per_gop)
    }

    fn budgets(&self, scene_log_sd: f64, ln_scale: f64) -> Vec<f64> {
        self.complexities(scene_log_sd)
            .iter()
            .map(|&c| self.budget(c, ln_scale))
            .collect()
    }

    fn mean(&self, complexities: &[f64], ln_scale: f64) -> f64 {
        let total: f64 = complexities
            .iter()
            .zip(&self.layout.gop_share)
            .map(|(&c, share)| self.budget(c, ln_scale) * share)
            .sum();
        total / self.layout.rounds as f64
    }

    fn round_bytes(&self, budgets: &[f64]) -> Vec<f64> {
        let mut rounds = vec![0.0; self.layout.rounds];
        for &(g, r, share) in &self.layout.segments {
            rounds[r] += budgets[g] * share;
        }
        rounds
    }

    /// The scale at which the mean per round equals the target. The mean is
    /// continuous and non-decreasing in the scale, flat below the point where
    /// every GOP is at the floor and above the point where every GOP is at
    /// the peak, so bisection on ln(scale) between those points finds it.
    fn solve_ln_scale(&self, complexities: &[f64]) -> Result<f64, SynthError> {
        let (min_c, max_c) = complexities
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), &c| {
                (lo.min(c), hi.max(c))
            });
        let mut lo = (self.floor_bytes_per_gop / max_c).ln();
        let mut hi = (self.peak_bytes_per_gop / min_c).ln();
        if !(self.mean(complexities, lo) < self.target_mean
            && self.target_mean < self.mean(complexities, hi))
        {
            return Err(SynthError::Unreachable {
                what: format!(
                    "mean {} bytes per round is outside what the floor and peak allow",
                    self.target_mean
                ),
            });
        }
        for _ in 0..BISECTION_STEPS {
            let mid = 0.5 * (lo + hi);
            if self.mean(complexities, mid) < self.target_mean {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(0.5 * (lo + hi))
    }

    /// (ln scale, mean, CoV) per round at scene spread `scene_log_sd`, the
    /// scale solved for the target mean.
    fn evaluate(&self, scene_log_sd: f64) -> Result<(f64, f64, f64), SynthError> {
        let complexities = self.complexities(scene_log_sd);
        let ln_scale = self.solve_ln_scale(&complexities)?;
        let budgets: Vec<f64> = complexities
            .iter()
            .map(|&c| self.budget(c, ln_scale))
            .collect();
        let rounds = self.round_bytes(&budgets);
        let n = rounds.len() as f64;
        let mean = rounds.iter().sum::<f64>() / n;
        let variance = rounds.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
        Ok((ln_scale, mean, variance.sqrt() / mean))
    }

    /// The scene spreads the calibration tries: 0, then a geometric grid up
    /// to the largest spread whose complexities stay within f64's range.
    fn scene_log_sd_grid(&self) -> Vec<f64> {
        let largest_unit = self
            .draws
            .unit_log_complexity
            .iter()
            .fold(0.0f64, |m, x| m.max(x.abs()));
        let limit = SCENE_LOG_SD_MAX.min(LOG_COMPLEXITY_MAX / largest_unit.max(1.0));
        let mut grid = vec![0.0];
        let mut sd = SCENE_LOG_SD_GRID_START;
        while sd <= limit {
            grid.push(sd);
            sd *= SCENE_LOG_SD_GRID_FACTOR;
        }
        grid
    }

    /// Scans σ_s over the grid for the first bracket around the target CoV
    /// and bisects in it. When no σ_s reaches the target (e.g. the floor and
    /// peak leave no room for it), the grid point closest to it is used; the
    /// report says what was achieved.
    fn solve(&self) -> Result<(VbrCalibration, f64), SynthError> {
        let mut previous: Option<(f64, f64)> = None;
        let mut best: Option<(f64, f64)> = None;
        let mut chosen = None;
        for sd in self.scene_log_sd_grid() {
            let (_, _, cov) = self.evaluate(sd)?;
            let miss = (cov - self.target_cov).abs();
            if best.is_none_or(|(_, b)| miss < (b - self.target_cov).abs()) {
                best = Some((sd, cov));
            }
            if let Some((prev_sd, prev_cov)) = previous
                && (prev_cov - self.target_cov) * (cov - self.target_cov) <= 0.0
            {
                chosen = Some(self.bisect_cov(prev_sd, prev_cov, sd)?);
                break;
            }
            previous = Some((sd, cov));
        }
        let scene_log_sd = chosen.unwrap_or_else(|| best.expect("grid is non-empty").0);
        self.report(scene_log_sd)
    }

    fn bisect_cov(&self, mut lo: f64, lo_cov: f64, mut hi: f64) -> Result<f64, SynthError> {
        let rising = lo_cov < self.target_cov;
        for _ in 0..BISECTION_STEPS / 2 {
            let mid = 0.5 * (lo + hi);
            let (_, _, cov) = self.evaluate(mid)?;
            if (cov < self.target_cov) == rising {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(0.5 * (lo + hi))
    }

    /// The calibration at `scene_log_sd`, and its ln(scale).
    fn report(&self, scene_log_sd: f64) -> Result<(VbrCalibration, f64), SynthError> {
        let (ln_scale, mean, cov) = self.evaluate(scene_log_sd)?;
        let budgets = self.budgets(scene_log_sd, ln_scale);
        let gops = budgets.len() as f64;
        let count = |limit: f64| budgets.iter().filter(|&&b| b == limit).count() as f64 / gops;
        let calibration = VbrCalibration {
            scale_bytes_per_gop: ln_scale.exp(),
            scene_log_sd,
            model_mean_bytes_per_round: mean,
            model_cov_per_round: cov,
            scene_count: self.draws.scene_count,
            peak_limited_gop_fraction: count(self.peak_bytes_per_gop),
            floor_limited_gop_fraction: count(self.floor_bytes_per_gop),
        };
        Ok((calibration, ln_scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rondo_model::schedule::{RoundStats, client_bytes_per_round};

    fn client_bytes(trace: &Trace, round_duration_ns: u64) -> Vec<u64> {
        client_bytes_per_round(trace.frames(), round_duration_ns).unwrap()
    }

    fn stats(trace: &Trace) -> RoundStats {
        RoundStats::of(&client_bytes(trace, TABLE3_ROUND_DURATION_NS))
    }

    /// Autocorrelation of `x` at `lag`.
    fn autocorrelation(x: &[u64], lag: usize) -> f64 {
        let n = x.len() as f64;
        let mean = x.iter().sum::<u64>() as f64 / n;
        let var: f64 = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum();
        let cov: f64 = x
            .iter()
            .zip(&x[lag..])
            .map(|(&a, &b)| (a as f64 - mean) * (b as f64 - mean))
            .sum();
        cov / var
    }

    #[test]
    fn every_type_meets_table3_over_seeds() {
        for content in ContentType::ALL {
            let row = content.table3();
            for seed in 1..=5 {
                let trace = generate_default(content, seed);
                assert_eq!(trace.len(), 54_000);
                let s = stats(&trace);
                assert_eq!(s.rounds, 1800, "{content} seed {seed}");
                let mean_error = (s.mean_bytes_per_round / row.mean_bytes_per_round - 1.0).abs();
                assert!(mean_error <= 0.02, "{content} seed {seed}: {s:?}");
                assert!(
                    s.max_bytes_per_round <= row.max_bytes_per_round,
                    "{content} seed {seed}: {s:?}"
                );
                assert!(
                    (s.cov_per_round - row.cov_per_round).abs() <= 0.02,
                    "{content} seed {seed}: {s:?}"
                );
            }
        }
    }

    fn generate_default(content: ContentType, seed: u64) -> Trace {
        VbrParams::for_content(content).generate(seed).unwrap()
    }

    /// The calibration is exact for the VBR types: the mean is off only by
    /// the rounding of budgets to whole bytes, the CoV by less than 0.001.
    #[test]
    fn calibration_hits_vbr_targets_closely() {
        for content in &ContentType::ALL[..5] {
            let row = content.table3();
            for seed in [7, 8] {
                let (trace, cal) = VbrParams::for_content(*content)
                    .generate_with_calibration(seed)
                    .unwrap();
                let s = stats(&trace);
                assert!((s.mean_bytes_per_round - row.mean_bytes_per_round).abs() < 1.0);
                assert!((s.cov_per_round - row.cov_per_round).abs() < 1e-3, "{s:?}");
                assert!((cal.model_cov_per_round - row.cov_per_round).abs() < 1e-6);
                assert!(cal.scene_log_sd > 0.1 && cal.scene_log_sd < 1.0, "{cal:?}");
            }
        }
    }

    /// The documentary is the peak rate with a few dips: the model reaches
    /// Table 3's mean and maximum and, with its dips spread over whole GOPs
    /// of its simplest scenes, a CoV of 0.02–0.026 (docs/traces.md).
    #[test]
    fn documentary_is_nearly_constant() {
        let row = ContentType::Documentary.table3();
        for seed in 1..=3 {
            let (trace, cal) = VbrParams::for_content(ContentType::Documentary)
                .generate_with_calibration(seed)
                .unwrap();
            let s = stats(&trace);
            assert!((s.mean_bytes_per_round - row.mean_bytes_per_round).abs() < 1.0);
            assert_eq!(s.max_bytes_per_round, row.max_bytes_per_round);
            assert!(s.cov_per_round > 0.015 && s.cov_per_round < 0.03, "{s:?}");
            assert!(cal.peak_limited_gop_fraction > 0.99, "{cal:?}");
        }
    }

    #[test]
    fn same_seed_same_trace_different_seed_different_trace() {
        let params = VbrParams::for_content(ContentType::Action);
        let a = params.generate(42).unwrap();
        assert_eq!(a, params.generate(42).unwrap());
        let b = params.generate(43).unwrap();
        assert_ne!(a.frames(), b.frames());
        assert_eq!(a.seed(), Some(42));
        assert_eq!(a.kind(), "action");
    }

    #[test]
    fn frames_follow_the_gop_at_30_fps() {
        let trace = generate_default(ContentType::TalkShow, 1);
        let pattern = parse_gop_pattern(GOP_PATTERN).unwrap();
        for (i, (frame, t)) in trace.frames().iter().zip(trace.frame_types()).enumerate() {
            assert_eq!(*t, pattern[i % 15]);
            assert_eq!(frame.decode_time_ns, i as u64 * NS_PER_S / 30);
            assert!(frame.bytes > 0);
        }
        // Frame 30·k opens round k.
        assert_eq!(trace.frames()[30 * 17].decode_time_ns, 17 * NS_PER_S);
    }

    /// Mean picture sizes keep TM5's proportions I:P:B = 160:60:30.
    #[test]
    fn picture_types_keep_tm5_proportions() {
        let trace = generate_default(ContentType::Adventure, 3);
        let mean_of = |wanted: FrameType| {
            let sizes: Vec<u64> = trace
                .frames()
                .iter()
                .zip(trace.frame_types())
                .filter(|(_, t)| **t == wanted)
                .map(|(f, _)| f.bytes)
                .collect();
            sizes.iter().sum::<u64>() as f64 / sizes.len() as f64
        };
        let (i, p, b) = (
            mean_of(FrameType::I),
            mean_of(FrameType::P),
            mean_of(FrameType::B),
        );
        assert!((i / b / (160.0 / 30.0) - 1.0).abs() < 0.03, "I/B {}", i / b);
        assert!((p / b / 2.0 - 1.0).abs() < 0.03, "P/B {}", p / b);
    }

    /// The peak is a property of every GOP (the encoder's rate control), so
    /// half-second rounds never exceed half the peak either.
    #[test]
    fn peak_holds_for_every_gop() {
        for content in [ContentType::ScienceFiction, ContentType::Documentary] {
            let row = content.table3();
            let trace = generate_default(content, 2);
            let half = client_bytes(&trace, NS_PER_S / 2);
            assert_eq!(
                half.iter().max().copied(),
                Some(row.max_bytes_per_round / 2),
                "{content}: some GOP sits at the peak"
            );
            let floor_per_gop = ENCODER_FLOOR_BYTES_PER_S / 2;
            assert!(half.iter().all(|&b| b >= floor_per_gop - 1));
        }
    }

    #[test]
    fn scene_count_follows_mean_scene_length() {
        for (mean_s, seed) in [(2, 1), (5, 2), (20, 3)] {
            let params = VbrParams::for_content(ContentType::MusicClip)
                .with_mean_scene_duration_ns(mean_s * NS_PER_S);
            let (_, cal) = params.generate_with_calibration(seed).unwrap();
            let expected = 1800.0 / mean_s as f64;
            let ratio = cal.scene_count as f64 / expected;
            assert!((0.8..1.25).contains(&ratio), "{mean_s} s: {cal:?}");
        }
    }

    /// Longer scenes make rounds a few seconds apart more alike (what
    /// striping across disks sees), while the per-round statistics stay on
    /// target.
    #[test]
    fn longer_scenes_raise_round_autocorrelation() {
        let row = ContentType::Action.table3();
        let correlation_at_4s = |mean_scene_s: u64| {
            let trace = VbrParams::for_content(ContentType::Action)
                .with_mean_scene_duration_ns(mean_scene_s * NS_PER_S)
                .generate(11)
                .unwrap();
            let rounds = client_bytes(&trace, NS_PER_S);
            let s = RoundStats::of(&rounds);
            assert!((s.cov_per_round - row.cov_per_round).abs() < 1e-3);
            autocorrelation(&rounds, 4)
        };
        let short = correlation_at_4s(1);
        let default = correlation_at_4s(5);
        let long = correlation_at_4s(30);
        assert!(short < 0.1, "{short}");
        assert!(
            short < default && default < long,
            "{short} {default} {long}"
        );
        assert!(long > 0.6, "{long}");
    }

    #[test]
    fn changing_the_scene_length_keeps_frame_draws() {
        // Separate ChaCha streams: the frame-level noise does not depend on
        // the scene model, so I/P/B splits of a GOP stay comparable.
        let params = VbrParams::for_content(ContentType::Action);
        let a = Draws::new(&params, 5).unwrap();
        let b = Draws::new(&params.clone().with_mean_scene_duration_ns(9 * NS_PER_S), 5).unwrap();
        assert_eq!(a.frame_shares, b.frame_shares);
        assert_ne!(a.unit_log_complexity, b.unit_log_complexity);
    }

    #[test]
    fn odd_lengths_and_rates_still_calibrate() {
        // 25 fps, 12-frame GOPs, a title that ends mid-GOP.
        let mut params = VbrParams::for_content(ContentType::Action);
        params.fps = 25;
        params.gop_pattern = parse_gop_pattern("IBBPBBPBBPBB").unwrap();
        params.frame_count = 25 * 600 + 7;
        let trace = params.generate(3).unwrap();
        assert_eq!(trace.len(), 15_007);
        let s = stats(&trace);
        assert_eq!(s.rounds, 601);
        assert!((s.mean_bytes_per_round / params.target_mean_bytes_per_round - 1.0).abs() < 1e-3);
        assert!(
            (s.cov_per_round - params.target_cov_per_round).abs() < 2e-3,
            "{s:?}"
        );
        // 1-s rounds are not whole 0.48-s GOPs here: a round may hold part of
        // a third GOP, as a real encoder's VBV buffer allows, but never more
        // than one GOP's budget above the peak.
        let peak_per_gop = params.peak_bytes_per_round as f64 * 0.48;
        assert!(
            (s.max_bytes_per_round as f64) <= params.peak_bytes_per_round as f64 + peak_per_gop
        );
        let half = RoundStats::of(&client_bytes(&trace, 480_000_000));
        assert!((half.max_bytes_per_round as f64) <= peak_per_gop);
    }

    #[test]
    fn invalid_parameters_are_refused() {
        let base = VbrParams::for_content(ContentType::Action);
        let cases: Vec<(&str, VbrParams)> = vec![
            (
                "mean_scene_duration_ns",
                base.clone().with_mean_scene_duration_ns(NS_PER_S / 4),
            ),
            (
                "target_mean_bytes_per_round",
                VbrParams {
                    target_mean_bytes_per_round: 2e6,
                    ..base.clone()
                },
            ),
            (
                "gop_pattern",
                VbrParams {
                    gop_pattern: vec![],
                    ..base.clone()
                },
            ),
            (
                "fps",
                VbrParams {
                    fps: 0,
                    ..base.clone()
                },
            ),
            (
                "kind",
                VbrParams {
                    kind: "two words".into(),
                    ..base.clone()
                },
            ),
        ];
        for (param, params) in cases {
            match params.generate(1) {
                Err(SynthError::InvalidParams { param: p, .. }) => assert_eq!(p, param),
                other => panic!("{param}: {other:?}"),
            }
        }
    }

    #[test]
    fn content_names_round_trip() {
        for c in ContentType::ALL {
            assert_eq!(ContentType::from_name(c.name()), Some(c));
        }
        assert_eq!(ContentType::from_name("comedy"), None);
    }
}
