//! Disk timing models: how long a disk takes to serve reads and writes.
//!
//! This module owns everything rondo knows about disk time. Two levels:
//!
//! - closed-form round bounds (`bound`) that admission reserves disk time
//!   with: seed 000 §2.3's `PaperBound` (paper mode) behind the `RoundBound`
//!   trait;
//! - a detailed model (`Disk`) that executes commands and is the simulated
//!   disk of the round-based simulator and the pacing model of emulated disks:
//!   zoned geometry with skews, spares and slips (`geometry`), seek curves
//!   (`seek`), rotational position from the absolute time, controller
//!   overheads, bus, segmented cache with read-ahead (`service`, `cache`), a
//!   flash device (`solid`), and the queue disciplines FCFS and C-SCAN
//!   (`queue`).
//!
//! Built-in parameter sets with their sources are in `profiles`; `summary`
//! computes the figures `rondo disk describe` prints. A `Disk` keeps its
//! state (heads, cache, read-ahead, when it is next free, the last dispatched
//! LBN) across calls, so a round's batch starts where the previous one left
//! the drive. Nothing here reads a clock: callers hand in times.

pub mod bound;
mod cache;
pub mod geometry;
pub mod profiles;
mod queue;
pub mod seek;
mod service;
mod solid;
pub mod summary;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use bound::{PaperBound, RondoBound, RoundBound};
pub use profiles::{
    CacheSpec, ControllerOverheads, DiskModelSpec, DiskProfile, MechanicalSpec, PROFILE_NAMES,
    SolidStateSpec, Stroke, by_name as profile_by_name, seed003_table1_prefetching, short_stroked,
    stroke_holding, stroke_holding_strides, with_cache_segments_for, with_command_queueing,
};
pub use queue::Scheduler;
pub use summary::DiskSummary;

use service::{MechanicalDisk, Mechanism};
use solid::SolidStateDisk;

/// What can go wrong when building or driving a disk model.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DiskError {
    #[error("unknown disk profile '{name}' (known profiles: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("invalid disk profile '{profile}': {reason}")]
    InvalidProfile { profile: String, reason: String },
    #[error("an extent needs at least one sector (LBN {lbn})")]
    EmptyExtent { lbn: u64 },
    #[error(
        "extent of {sectors} sectors at LBN {lbn} ends beyond the disk's capacity of \
         {capacity_sectors} sectors"
    )]
    BeyondCapacity {
        lbn: u64,
        sectors: u64,
        capacity_sectors: u64,
    },
    #[error("a request has one or two extents, not {count}")]
    ExtentCount { count: usize },
}

/// Read or write.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Read,
    Write,
}

/// A contiguous LBN range: `sectors` 512-byte sectors from `lbn`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Extent {
    pub lbn: u64,
    pub sectors: u64,
}

impl Extent {
    pub fn new(lbn: u64, sectors: u64) -> Extent {
        Extent { lbn, sectors }
    }
}

/// One command of a replayed trace.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedRequest {
    pub arrival_ns: u64,
    pub op: Op,
    pub extent: Extent,
}

/// One stream's request on one disk in one round: one or two extents (at most
/// two partial stride accesses). Each extent is its own media access, placed
/// in the C-SCAN order on its own; the request completes with its last extent.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRequest {
    pub op: Op,
    pub first: Extent,
    pub second: Option<Extent>,
    /// Sectors after the request's last extent that the drive reads into a
    /// cache segment of their own before it takes the next command: the
    /// host's prefetch of a stream's next block into the drive cache (seed
    /// 003's Sweep&Prefetch and Gradual Prefetching). 0: none.
    #[serde(default)]
    pub prefetch_sectors: u64,
}

impl BatchRequest {
    pub fn read(lbn: u64, sectors: u64) -> BatchRequest {
        BatchRequest {
            op: Op::Read,
            first: Extent::new(lbn, sectors),
            second: None,
            prefetch_sectors: 0,
        }
    }

    pub fn read_two(first: Extent, second: Extent) -> BatchRequest {
        BatchRequest {
            op: Op::Read,
            first,
            second: Some(second),
            prefetch_sectors: 0,
        }
    }

    /// A read of 1–2 extents given as `(lbn, sectors)`, the `RoundBound` form.
    pub fn read_extents(extents: &[(u64, u64)]) -> Result<BatchRequest, DiskError> {
        match *extents {
            [(lbn, sectors)] => Ok(BatchRequest::read(lbn, sectors)),
            [(l1, s1), (l2, s2)] => Ok(BatchRequest::read_two(
                Extent::new(l1, s1),
                Extent::new(l2, s2),
            )),
            _ => Err(DiskError::ExtentCount {
                count: extents.len(),
            }),
        }
    }

    pub fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        std::iter::once(self.first).chain(self.second)
    }
}

/// How the drive served a command.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceKind {
    /// From the media after repositioning.
    Miss,
    /// Its start was in a stopped cache segment; the rest from the media.
    PartialHit,
    /// Its start was in (or at the end of) data read-ahead was still reading.
    StreamingHit,
    /// Wholly from the cache.
    FullHit,
    Write,
    /// A flash device.
    SolidState,
}

/// The timing of one executed command.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandTiming {
    /// When the drive began the command.
    pub start_ns: u64,
    /// When the host has all its data (read) or the data is on the media (write).
    pub completion_ns: u64,
    /// When the drive can begin the next command (the completion for a
    /// rotating disk; the end of the data-path slot for flash).
    pub ready_ns: u64,
    pub service: ServiceKind,
    /// Controller overhead (flash: the device latency).
    pub overhead_ns: u64,
    /// Seeks, head switches and write settling, including track switches inside the access.
    pub seek_ns: u64,
    /// Rotational waits.
    pub rotation_ns: u64,
    /// Data movement of this command: media time of the sectors read or written
    /// on the media (bus time for a full cache hit; the data-path slot for flash).
    pub transfer_ns: u64,
    /// Sectors that were already in the cache when the command began.
    pub cached_sectors: u64,
}

/// Result of `Disk::execute_batch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchOutcome {
    /// Completion time of every request, in input order.
    pub completion_ns: Vec<u64>,
    /// When the disk began the batch: the later of the batch's arrival and the
    /// end of the disk's backlog.
    pub service_start_ns: u64,
    /// `end_ns − service_start_ns`: the disk time the batch took.
    pub busy_ns: u64,
    /// When the last request completed.
    pub end_ns: u64,
    /// Every extent's command, in service order, with its request's index.
    pub commands: Vec<(usize, CommandTiming)>,
}

#[derive(Clone, Debug)]
enum Engine {
    Mechanical(Box<MechanicalDisk>),
    SolidState(SolidStateDisk),
}

/// One simulated disk: a profile plus its state (heads, cache, read-ahead,
/// when it can take the next command, the last LBN dispatched). It starts idle
/// at time 0, heads on cylinder 0 head 0 (angle 0 at t = 0), cache empty.
#[derive(Clone, Debug)]
pub struct Disk {
    profile: DiskProfile,
    engine: Engine,
    free_ns: u64,
    last_dispatched_lbn: u64,
}

impl Disk {
    pub fn new(profile: DiskProfile) -> Result<Disk, DiskError> {
        profile.validate()?;
        let invalid = |reason| DiskError::InvalidProfile {
            profile: profile.name.clone(),
            reason,
        };
        let engine = match &profile.model {
            DiskModelSpec::Mechanical(m) => Engine::Mechanical(Box::new(MechanicalDisk::new(
                Mechanism::new(m).map_err(invalid)?,
            ))),
            DiskModelSpec::SolidState(s) => Engine::SolidState(SolidStateDisk::new(*s)),
        };
        Ok(Disk {
            profile,
            engine,
            free_ns: 0,
            last_dispatched_lbn: 0,
        })
    }

    /// A disk of a built-in profile.
    pub fn from_name(name: &str) -> Result<Disk, DiskError> {
        Disk::new(profiles::by_name(name)?)
    }

    pub fn profile(&self) -> &DiskProfile {
        &self.profile
    }

    /// Addressable 512-byte sectors.
    pub fn capacity_sectors(&self) -> u64 {
        match &self.engine {
            Engine::Mechanical(m) => m.mech.geometry.capacity_sectors(),
            Engine::SolidState(s) => s.capacity_sectors(),
        }
    }

    /// When the disk can begin its next command (the end of its backlog).
    pub fn free_ns(&self) -> u64 {
        self.free_ns
    }

    /// Keeps the disk busy until at least `t_ns` (a queued batch whose
    /// hits' data is still crossing the bus).
    fn hold_until(&mut self, t_ns: u64) {
        self.free_ns = self.free_ns.max(t_ns);
    }

    /// The LBN of the last command dispatched (C-SCAN continues from it).
    pub fn last_dispatched_lbn(&self) -> u64 {
        self.last_dispatched_lbn
    }

    /// Checks that an extent is non-empty and lies on the disk.
    pub fn check_extent(&self, extent: Extent) -> Result<(), DiskError> {
        if extent.sectors == 0 {
            return Err(DiskError::EmptyExtent { lbn: extent.lbn });
        }
        let capacity_sectors = self.capacity_sectors();
        match extent.lbn.checked_add(extent.sectors) {
            Some(end) if end <= capacity_sectors => Ok(()),
            _ => Err(DiskError::BeyondCapacity {
                lbn: extent.lbn,
                sectors: extent.sectors,
                capacity_sectors,
            }),
        }
    }

    /// Executes one command arriving at `arrival_ns`; it starts when the disk
    /// is free (at once if idle).
    pub fn execute(
        &mut self,
        op: Op,
        extent: Extent,
        arrival_ns: u64,
    ) -> Result<CommandTiming, DiskError> {
        self.execute_prefetching(op, extent, 0, arrival_ns)
    }

    /// [`Disk::execute`] of a read that also has the drive read the
    /// `prefetch_sectors` after it into its cache before the next command
    /// (`BatchRequest::prefetch_sectors`); the timing's `ready_ns` is when
    /// the prefetch ends. A flash device has no cache to prefetch into and
    /// ignores it.
    pub fn execute_prefetching(
        &mut self,
        op: Op,
        extent: Extent,
        prefetch_sectors: u64,
        arrival_ns: u64,
    ) -> Result<CommandTiming, DiskError> {
        self.check_extent(extent)?;
        let prefetch_sectors = if op == Op::Read {
            prefetch_sectors.min(
                self.capacity_sectors()
                    .saturating_sub(extent.lbn + extent.sectors),
            )
        } else {
            0
        };
        let start_ns = arrival_ns.max(self.free_ns);
        let timing = match &mut self.engine {
            Engine::Mechanical(m) => {
                m.execute(op, extent.lbn, extent.sectors, prefetch_sectors, start_ns)
            }
            Engine::SolidState(s) => s.execute(op, extent.sectors, start_ns),
        };
        self.free_ns = timing.ready_ns;
        self.last_dispatched_lbn = extent.lbn;
        Ok(timing)
    }

    /// Whether the drive queues a round's commands and overlaps its hits'
    /// bus transfers with the next commands (`CacheSpec::command_queueing`,
    /// on a bus at least as fast as the media).
    pub fn queues_commands(&self) -> bool {
        self.mechanism().is_some_and(|m| m.command_queueing)
    }

    /// The compiled mechanism of a rotating disk (for bounds and summaries).
    pub(crate) fn mechanism(&self) -> Option<&Mechanism> {
        match &self.engine {
            Engine::Mechanical(m) => Some(&m.mech),
            Engine::SolidState(_) => None,
        }
    }

    fn mechanical_mut(&mut self) -> Option<&mut MechanicalDisk> {
        match &mut self.engine {
            Engine::Mechanical(m) => Some(m),
            Engine::SolidState(_) => None,
        }
    }
}
