//! Seed 004's dynamic time-cycle, executed in the array's rounds.
//!
//! The disks keep their rounds of T (every reservation counts in them), and
//! a stream's *cycle* is its read-group length: g rounds read in one
//! request every g rounds (docs/cycle.md, "The server's dynamic cycle").
//! The array's cycle is the group length new streams are admitted at
//! (`group_rounds`); a stream at it is *uncombined*, one at twice it
//! *combined*. Once per cycle, at a round boundary before the round is
//! planned, Figure 2's CheckSchedule (`CombinationParams::check`) reads the
//! memory utilisation u_m (server buffer reserved over its capacity) and the
//! time utilisation u_t (disk time reserved over the round, the busiest
//! disk), both averaged over the coming rounds, and makes at most one
//! operation:
//!
//! - disk time is the pressure: *combine* the two lowest-bitrate streams
//!   below twice the cycle (they read groups of twice the cycle from their
//!   next request); when fewer than two are left, *double* the cycle (every
//!   combined stream is then uncombined at the new cycle, nothing is
//!   reread);
//! - memory is the pressure: *split* the highest-bitrate stream above the
//!   cycle (back to groups of the cycle); when none is left, *halve* the
//!   cycle (seed 004 shrinks by UNIT; a cycle here is a whole number of
//!   rounds, and halving turns every stream into a combined one, so splits
//!   can go on).
//!
//! Every regroup is kept only if every round of the stream from the round
//! being begun still fits its disk time, the buffer and the network
//! (`Reservations::regroup_together`): an operation never over-commits a
//! round, so the zero-miss guarantee is the tables' own. SFLAG is set when
//! the utilisations are still apart after an operation, or when one was due
//! and none fitted; it forces CheckSchedule at the next cycle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Array, DrivePrefetch};
use crate::cycle::{CombinationParams, Pressure};
use crate::layout::{TitleLayout, TitlePlan};
use crate::reservation::{Bound, ChargesError, TitleCharges};
use crate::schedule::Schedule;
use crate::units::{DiskIndex, Round, StreamId, TitleId};

/// Candidate pairs (or streams) an operation tries before it gives up for
/// this cycle, and the cycles from the round being begun its regroup may
/// start in (its next request first, then later ones: a full round now may
/// have room a cycle later). Assumption: bounds on the work of one round
/// boundary, as the switch's `SWITCH_TRIES_MAX`.
const OPERATION_TRIES_MAX: usize = 8;
const OPERATION_START_CYCLES_MAX: u64 = 3;

/// The dynamic cycle's configuration.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DynamicCycle {
    /// Figure 2's thresholds (u_mT, u_tT, u_dT) and trigger reading; UNIT
    /// and the cycle's bounds in it are not used (see the module docs).
    pub combination: CombinationParams,
    /// The cycle new streams start at before any operation, in rounds.
    pub initial_group_rounds: u32,
    /// The longest cycle, in rounds (a power of two up to the layout's
    /// segment; titles need charges for every power of two up to it).
    pub max_group_rounds: u32,
    /// Whether an operation's regroups must fit every round. `false` only
    /// to show what ignoring the transitory reads does (misses).
    pub check_operations: bool,
}

impl DynamicCycle {
    /// Seed 004's thresholds (docs/assumptions.md), starting at one round
    /// per read, up to `max_group_rounds`.
    pub fn new(max_group_rounds: u32) -> DynamicCycle {
        DynamicCycle {
            combination: CombinationParams::default(),
            initial_group_rounds: 1,
            max_group_rounds,
            check_operations: true,
        }
    }

    /// The group lengths titles need charges for: the powers of two up to
    /// the longest cycle.
    pub fn group_lengths(&self) -> Vec<u32> {
        let mut lengths = Vec::new();
        let mut g = 1;
        while g <= self.max_group_rounds.max(1) {
            lengths.push(g);
            g *= 2;
        }
        lengths
    }

    /// A title's charges for every group length the cycle may use
    /// (`ArrayTitle::with_group_charges`), as the simulator and the store
    /// load them.
    pub fn title_charges(
        &self,
        bound: &Bound,
        plan: &TitlePlan,
        layout: Option<&TitleLayout>,
        schedule: &Schedule,
    ) -> Result<Vec<TitleCharges>, ChargesError> {
        self.group_lengths()
            .into_iter()
            .map(|g| bound.title_charges_grouped(plan, layout, schedule, g))
            .collect()
    }

    /// Why an array on a layout of `segment_rounds` rounds per run, whose
    /// streams read `group_rounds` per request and prefetch as `prefetch`
    /// says, cannot run the dynamic cycle (`None`: it can). The simulator
    /// and the server refuse a configuration with it.
    pub fn unavailable(
        segment_rounds: u32,
        group_rounds: u32,
        prefetch: DrivePrefetch,
    ) -> Option<&'static str> {
        if segment_rounds <= 1 {
            Some(
                "combines a stream's next rounds into one read: they must lie next to each \
                 other, so it needs the segments layout (--layout segments)",
            )
        } else if group_rounds > 1 || prefetch != DrivePrefetch::None {
            Some(
                "chooses each stream's rounds per read itself: use it with --policy sweep (one \
                 round per read, no drive-cache prefetching)",
            )
        } else {
            None
        }
    }
}

/// One operation of the dynamic cycle, as made at a round boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "op")]
pub enum CycleEvent {
    /// Streams now read groups of `group_rounds` from their next request.
    Combine {
        streams: Vec<StreamId>,
        group_rounds: u32,
    },
    /// A stream back to groups of the cycle.
    Split { stream: StreamId, group_rounds: u32 },
    /// The cycle doubled: new streams start at `to_rounds`.
    Double { from_rounds: u32, to_rounds: u32 },
    /// The cycle halved.
    Halve { from_rounds: u32, to_rounds: u32 },
    /// An operation was due and none fitted (SFLAG: tried again next cycle).
    Refused { pressure: Pressure },
}

/// What the dashboard and `/metrics` show of the dynamic cycle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CycleStatus {
    /// The cycle, in rounds and in time.
    pub group_rounds: u32,
    pub cycle_ns: u64,
    /// u_m and u_t as CheckSchedule last read them.
    pub memory_utilisation: f64,
    pub time_utilisation: f64,
    /// Streams by their read-group length, shortest first.
    pub streams_by_group_rounds: Vec<(u32, usize)>,
    pub combines: u64,
    pub splits: u64,
    pub doubles: u64,
    pub halves: u64,
    pub refusals: u64,
    /// The last operation and the round it was made at.
    pub last_event: Option<(Round, CycleEvent)>,
}

/// The array's dynamic-cycle state.
#[derive(Clone, Debug)]
pub(super) struct CycleState {
    config: DynamicCycle,
    group_rounds: u32,
    sflag: bool,
    /// No operation before this round (one per cycle).
    next_check_round: Round,
    status: CycleStatus,
}

impl CycleState {
    pub(super) fn new(config: DynamicCycle) -> CycleState {
        let group_rounds = config
            .initial_group_rounds
            .clamp(1, config.max_group_rounds.max(1));
        CycleState {
            config,
            group_rounds,
            sflag: false,
            next_check_round: Round(0),
            status: CycleStatus::default(),
        }
    }
}

impl Array {
    /// The dynamic cycle's state for dashboards (`None`: a fixed cycle).
    pub fn cycle_status(&self) -> Option<CycleStatus> {
        let state = self.cycle.as_ref()?;
        let mut by_length: BTreeMap<u32, usize> = BTreeMap::new();
        for stream in self.reservations.stream_ids() {
            if let Some(g) = self.reservations.stream_group_rounds(stream) {
                *by_length.entry(g).or_default() += 1;
            }
        }
        Some(CycleStatus {
            group_rounds: state.group_rounds,
            cycle_ns: u64::from(state.group_rounds) * self.config.reservation.round_duration_ns,
            streams_by_group_rounds: by_length.into_iter().collect(),
            ..state.status.clone()
        })
    }

    /// The dynamic cycle in rounds: the group length new streams are
    /// admitted at (`None`: a fixed cycle, each title's own groups).
    pub fn admission_cycle_rounds(&self) -> Option<u32> {
        self.cycle.as_ref().map(|c| c.group_rounds)
    }

    /// CheckSchedule at the start of `round`, before it is planned: at most
    /// one operation per cycle.
    pub(super) fn cycle_step(&mut self, round: Round) -> Option<CycleEvent> {
        let state = self.cycle.as_ref()?;
        if round < state.next_check_round {
            return None;
        }
        let (config, sflag) = (state.config, state.sflag);
        let (u_m, u_t) = self.utilisations(round);
        let checked = config.combination.check(u_m, u_t, sflag);
        let state = self.cycle.as_mut().expect("checked above");
        state.status.memory_utilisation = u_m;
        state.status.time_utilisation = u_t;
        let pressure = checked?;
        let cycle_rounds = state.group_rounds;
        state.sflag = false;
        let event = match pressure {
            Pressure::Time => self.lengthen(round),
            Pressure::Memory => self.shorten(round),
        };
        let (u_m, u_t) = self.utilisations(round);
        let state = self.cycle.as_mut().expect("checked above");
        state.status.memory_utilisation = u_m;
        state.status.time_utilisation = u_t;
        state.sflag =
            matches!(event, CycleEvent::Refused { .. }) || config.combination.apart(u_m, u_t);
        state.next_check_round = round.plus(u64::from(cycle_rounds));
        let counter = match &event {
            CycleEvent::Combine { .. } => &mut state.status.combines,
            CycleEvent::Split { .. } => &mut state.status.splits,
            CycleEvent::Double { .. } => &mut state.status.doubles,
            CycleEvent::Halve { .. } => &mut state.status.halves,
            CycleEvent::Refused { .. } => &mut state.status.refusals,
        };
        *counter += 1;
        state.status.last_event = Some((round, event.clone()));
        Some(event)
    }

    /// u_m and u_t over the coming rounds (the longest cycle twice): the
    /// mean over those rounds of the reserved buffer over its capacity and
    /// of the busiest disk's reserved time over the round's budget.
    /// Assumption: a mean over the rounds a cycle's groups spread over
    /// stands for seed 004's per-cycle figures (docs/assumptions.md).
    fn utilisations(&self, round: Round) -> (f64, f64) {
        let state = self.cycle.as_ref().expect("a dynamic cycle");
        let cfg = &self.config.reservation;
        let window = (2 * u64::from(state.config.max_group_rounds.max(1)))
            .min(cfg.horizon_rounds.saturating_sub(1))
            .max(1);
        let budget_ns = cfg.budget_ns().max(1);
        // An unbounded buffer (tests) is never the pressure.
        let bounded = cfg.buffer_capacity_bytes > 0 && cfg.buffer_capacity_bytes < u64::MAX;
        let (mut memory, mut time) = (0.0, 0.0);
        for r in Round::range(round, round.plus(window)) {
            if bounded {
                memory += self.reservations.reserved_buffer_bytes(r) as f64
                    / cfg.buffer_capacity_bytes as f64;
            }
            let busiest = DiskIndex::all(cfg.disks)
                .map(|d| self.reservations.reserved_ns(d, r))
                .max()
                .unwrap_or(0);
            time += busiest as f64 / budget_ns as f64;
        }
        (memory / window as f64, time / window as f64)
    }

    /// Disk time is the pressure: combine, or double the cycle.
    fn lengthen(&mut self, round: Round) -> CycleEvent {
        let state = self.cycle.as_ref().expect("a dynamic cycle");
        let (g, max) = (state.group_rounds, state.config.max_group_rounds);
        let checked = state.config.check_operations;
        let target = 2 * g;
        let mut candidates = self.candidates(round, |len| len < target);
        // Lowest bitrate first (Figure 2), then admission order.
        candidates.sort_by_key(|&(bytes, id)| (bytes, id));
        if target <= max && candidates.len() >= 2 {
            for pair in candidates.windows(2).take(OPERATION_TRIES_MAX) {
                let streams = [pair[0].1, pair[1].1];
                if self.regroup_soon(&streams, target, round, g, checked) {
                    return CycleEvent::Combine {
                        streams: streams.to_vec(),
                        group_rounds: target,
                    };
                }
            }
            return CycleEvent::Refused {
                pressure: Pressure::Time,
            };
        }
        if candidates.len() < 2 && target <= max {
            let state = self.cycle.as_mut().expect("a dynamic cycle");
            state.group_rounds = target;
            return CycleEvent::Double {
                from_rounds: g,
                to_rounds: target,
            };
        }
        CycleEvent::Refused {
            pressure: Pressure::Time,
        }
    }

    /// Memory is the pressure: split, or halve the cycle.
    fn shorten(&mut self, round: Round) -> CycleEvent {
        let state = self.cycle.as_ref().expect("a dynamic cycle");
        let g = state.group_rounds;
        let checked = state.config.check_operations;
        let mut candidates = self.candidates(round, |len| len > g);
        // Highest bitrate first (Figure 2).
        candidates.sort_by_key(|&(bytes, id)| (std::cmp::Reverse(bytes), id));
        if !candidates.is_empty() {
            for &(_, stream) in candidates.iter().take(OPERATION_TRIES_MAX) {
                if self.regroup_soon(&[stream], g, round, g, checked) {
                    return CycleEvent::Split {
                        stream,
                        group_rounds: g,
                    };
                }
            }
            return CycleEvent::Refused {
                pressure: Pressure::Memory,
            };
        }
        if g > 1 {
            let state = self.cycle.as_mut().expect("a dynamic cycle");
            state.group_rounds = g / 2;
            return CycleEvent::Halve {
                from_rounds: g,
                to_rounds: g / 2,
            };
        }
        CycleEvent::Refused {
            pressure: Pressure::Memory,
        }
    }

    /// Regroups `streams` to `group_rounds` from their next request after
    /// `round`, or after one of the next few cycles of `cycle_rounds`.
    fn regroup_soon(
        &mut self,
        streams: &[StreamId],
        group_rounds: u32,
        round: Round,
        cycle_rounds: u32,
        checked: bool,
    ) -> bool {
        (0..OPERATION_START_CYCLES_MAX).any(|k| {
            let from = round.plus(k * u64::from(cycle_rounds));
            self.reservations
                .regroup_together(streams, group_rounds, from, checked)
                .is_ok()
        })
    }

    /// Streams that could be regrouped at `round` whose group length
    /// satisfies `wanted`, with their bitrate (their title's mean bytes
    /// read per round, worked out once per title here).
    fn candidates(&self, round: Round, wanted: impl Fn(u32) -> bool) -> Vec<(u64, StreamId)> {
        let mut bitrates: BTreeMap<TitleId, u64> = BTreeMap::new();
        self.reservations
            .stream_ids()
            .filter(|&s| {
                self.reservations
                    .stream_group_rounds(s)
                    .is_some_and(&wanted)
                    && self.reservations.regroupable(s, round)
            })
            .filter_map(|s| {
                let title = self.reservations.stream_span(s)?.title;
                let bytes = *bitrates
                    .entry(title)
                    .or_insert_with(|| self.titles[&title].charges.mean_read_bytes());
                Some((bytes, s))
            })
            .collect()
    }
}
