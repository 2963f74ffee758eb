//! The detailed service-time model of a rotating disk: it executes commands.
//!
//! This module owns what happens between a command reaching the drive and its
//! completion, in the order DiskSim 4.0's disk module charges it
//! (`src/disksim_diskctlr.c`, `diskmodel/mech_g1.c`, access type
//! `trackSwitchPlusRotation`):
//!
//! 1. controller overhead, chosen by hit/miss and by the previous command's kind;
//! 2. for each run of consecutive sectors on one track: a seek (or a head
//!    switch on the same cylinder; a seek hides a head switch), write settling
//!    for writes, then the rotational wait until the run's first sector comes
//!    under the head — the angle under the head is `time mod revolution`, so
//!    the wait depends on the absolute time — then the run's sectors at the
//!    zone's media rate;
//! 3. the bus: sectors go to the host as they come off the media, one bus
//!    sector time each, so on a miss with a bus faster than the media only the
//!    last sector's bus time adds (the general max-plus recurrence is used, so
//!    a slower bus is modelled too);
//! 4. the segmented cache (`cache`): after a read from the media the drive
//!    keeps reading ahead into the same segment, in the background, until it
//!    has read `max_read_ahead_sectors` past the command's end or a command
//!    needs the mechanism. A read wholly in cache costs the hit overhead plus
//!    bus time and leaves read-ahead running; a read that starts inside the
//!    data read-ahead has read so far rides the stream with no repositioning
//!    (hit overhead; the rest comes as the media reaches it); a read starting
//!    at the sector being read right now is a miss unless "almost read hits"
//!    are allowed (DiskSim's Cheetah 4LP does not allow them), and one starting
//!    further ahead is a miss, as in DiskSim's reading-hit rule; a read whose
//!    start is cached in a stopped segment takes the cached part and reads the
//!    rest after repositioning (miss overhead). Without caching of requested
//!    data, a segment drops what a read returned and keeps only what lies past it.
//!
//! Writes are write-through: overhead, seek, settle, rotation, media; they
//! stop read-ahead and drop overlapping cache segments.
//!
//! Times inside a command are f64 nanoseconds (angles need fractions); command
//! boundaries are integer nanoseconds, rounded up.

use super::cache::SegmentCache;
use super::geometry::{Geometry, Track};
use super::profiles::{ControllerOverheads, MechanicalSpec};
use super::seek::SeekCurve;
use super::{CommandTiming, Extent, Op, ServiceKind};

/// A target less than this fraction of a revolution behind the head counts as
/// exactly under it: it is floating-point noise, not a missed sector.
pub(crate) const ANGLE_TOLERANCE_REV: f64 = 1e-7;

/// Sectors read or written back to back on one track.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct Run {
    pub first_lbn: u64,
    pub sectors: u64,
    /// When the run's first sector starts passing under the head.
    pub start_ns: f64,
    pub sector_ns: f64,
    pub track: Track,
}

impl Run {
    pub fn end_ns(&self) -> f64 {
        self.start_ns + self.sectors as f64 * self.sector_ns
    }
}

/// Where the time of a media access went.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct Tally {
    pub seek_ns: f64,
    pub rotation_ns: f64,
    pub transfer_ns: f64,
}

/// A rotating disk's fixed parameters, compiled from a `MechanicalSpec`.
#[derive(Clone, Debug)]
pub(crate) struct Mechanism {
    pub geometry: Geometry,
    pub seek: SeekCurve,
    pub revolution_ns: f64,
    pub head_switch_ns: f64,
    pub write_settle_ns: f64,
    pub overheads: ControllerOverheads,
    pub bus_sector_ns: f64,
    pub segments: u32,
    pub segment_sectors: u32,
    pub max_read_ahead_sectors: u64,
    /// `CacheSpec::keep_requested`.
    pub keep_requested: bool,
    /// `CacheSpec::almost_read_hits`.
    pub almost_read_hits: bool,
    /// `CacheSpec::command_queueing`, kept only when the bus is at least as
    /// fast as the media in every zone: the overlap gives the media's data
    /// the bus first, and a slower bus could not carry it as it comes.
    pub command_queueing: bool,
}

impl Mechanism {
    pub fn new(spec: &MechanicalSpec) -> Result<Mechanism, String> {
        spec.validate()?;
        Ok(Mechanism {
            geometry: spec.geometry()?,
            seek: spec.seek_curve()?,
            revolution_ns: spec.revolution_ns(),
            head_switch_ns: spec.head_switch_ns as f64,
            write_settle_ns: spec.write_settle_ns as f64,
            overheads: spec.overheads,
            bus_sector_ns: spec.bus_sector_ns(),
            segments: spec.cache.segments,
            segment_sectors: spec.cache.segment_sectors,
            max_read_ahead_sectors: if spec.cache.segments == 0 {
                0
            } else {
                spec.cache.max_read_ahead_sectors as u64
            },
            keep_requested: spec.cache.keep_requested,
            almost_read_hits: spec.cache.almost_read_hits,
            command_queueing: false,
        }
        .with_command_queueing(spec.cache.command_queueing))
    }

    fn with_command_queueing(mut self, asked: bool) -> Mechanism {
        self.command_queueing = asked && self.segments > 0 && self.bus_media_ratio() <= 1.0;
        self
    }

    /// The largest share of the bus the media's data can take while the
    /// heads read (bus sector time over the fastest zone's sector time).
    pub fn bus_media_ratio(&self) -> f64 {
        (0..self.geometry.zone_count())
            .map(|z| self.bus_sector_ns / self.sector_ns(z))
            .fold(0.0, f64::max)
    }

    /// Time to move the heads from one track to another: a seek (which hides
    /// a head switch), a head switch alone on the same cylinder, or nothing.
    pub fn reposition_ns(&self, from: Track, to: Track) -> f64 {
        let switch = if from.head == to.head {
            0.0
        } else {
            self.head_switch_ns
        };
        let distance = from.cylinder.abs_diff(to.cylinder);
        if distance == 0 {
            switch
        } else {
            self.seek.seek_ns(distance).max(switch)
        }
    }

    /// Wait from time `t_ns` until the sector starting at `angle_rev` (a
    /// fraction of a revolution) comes under the head; the angle under the head
    /// at time t is (t mod revolution) / revolution. Always < one revolution.
    pub fn rotational_wait_ns(&self, t_ns: f64, angle_rev: f64) -> f64 {
        let now = (t_ns / self.revolution_ns).rem_euclid(1.0);
        let mut wait = (angle_rev - now).rem_euclid(1.0);
        if wait > 1.0 - ANGLE_TOLERANCE_REV {
            wait = 0.0;
        }
        wait * self.revolution_ns
    }

    pub fn sector_ns(&self, zone: usize) -> f64 {
        self.revolution_ns / self.geometry.sectors_per_track(zone) as f64
    }

    /// Reads or writes `extent` starting with the heads on
    /// `arm` at time `t_ns`; appends the runs, moves the arm, returns the time
    /// the last sector has passed under the head.
    pub fn access(
        &self,
        arm: &mut Track,
        t_ns: f64,
        extent: Extent,
        write: bool,
        runs: &mut Vec<Run>,
        tally: &mut Tally,
    ) -> f64 {
        let (mut t, mut lbn, mut left) = (t_ns, extent.lbn, extent.sectors);
        while left > 0 {
            let run = self.geometry.track_run(lbn, left);
            let target = Track {
                cylinder: run.start.cylinder,
                head: run.start.head,
            };
            let mut moving = self.reposition_ns(*arm, target);
            if write && moving > 0.0 {
                moving += self.write_settle_ns;
            }
            t += moving;
            tally.seek_ns += moving;
            let wait = self.rotational_wait_ns(t, self.geometry.sector_angle(run.start, run.zone));
            t += wait;
            tally.rotation_ns += wait;
            let sector_ns = self.sector_ns(run.zone);
            runs.push(Run {
                first_lbn: lbn,
                sectors: run.sectors,
                start_ns: t,
                sector_ns,
                track: target,
            });
            let transfer = run.sectors as f64 * sector_ns;
            t += transfer;
            tally.transfer_ns += transfer;
            *arm = target;
            lbn += run.sectors;
            left -= run.sectors;
        }
        t
    }
}

/// When the bus has delivered every sector: sectors go in order, each needs
/// one bus sector time and cannot go before it is ready. `pieces` are
/// (first sector ready, step between sectors, count), in LBN order.
pub(crate) fn bus_finish_ns(
    bus_start_ns: f64,
    bus_sector_ns: f64,
    pieces: impl IntoIterator<Item = (f64, f64, u64)>,
) -> f64 {
    let mut done = bus_start_ns;
    for (first_ready, step, count) in pieces {
        if count == 0 {
            continue;
        }
        // b_i = max(b_{i−1}, r_i) + bus with r_i linear in i: the maximum of
        // the unrolled terms sits at a piece's first or last sector.
        let k = count as f64;
        done = (done + k * bus_sector_ns)
            .max(first_ready + k * bus_sector_ns)
            .max(first_ready + (k - 1.0) * step + bus_sector_ns);
    }
    done
}

/// Read-ahead in progress: runs scheduled from `start_lbn` to `end_lbn`
/// (exclusive), filling `segment`.
#[derive(Clone, Debug)]
struct ReadAhead {
    segment: usize,
    start_lbn: u64,
    end_lbn: u64,
    /// Where the arm was when read-ahead began.
    arm_before: Track,
    runs: Vec<Run>,
    /// Arm and time after the last scheduled run.
    tail_arm: Track,
    tail_ns: f64,
}

impl ReadAhead {
    /// When the sectors before `lbn` are all read (`lbn` at most
    /// `end_lbn`; at once for sectors read already).
    fn time_reaching(&self, lbn: u64) -> f64 {
        self.runs
            .iter()
            .find(|r| r.first_lbn < lbn && lbn <= r.first_lbn + r.sectors)
            .map_or(f64::NEG_INFINITY, |r| {
                r.start_ns + (lbn - r.first_lbn) as f64 * r.sector_ns
            })
    }

    /// First LBN not yet wholly read at time `t_ns`.
    fn progress(&self, t_ns: f64) -> u64 {
        let mut done = self.start_lbn;
        for run in &self.runs {
            if t_ns >= run.end_ns() {
                done = run.first_lbn + run.sectors;
            } else {
                if t_ns > run.start_ns {
                    let whole = ((t_ns - run.start_ns) / run.sector_ns).floor() as u64;
                    done = run.first_lbn + whole.min(run.sectors);
                }
                break;
            }
        }
        done
    }

    /// Forgets the runs finished by `t_ns` (a long sequential stream would
    /// otherwise keep every run it ever read).
    fn prune(&mut self, t_ns: f64) {
        let done = self.runs.iter().take_while(|r| r.end_ns() <= t_ns).count();
        if let Some(last) = done.checked_sub(1).map(|i| self.runs[i]) {
            self.start_lbn = last.first_lbn + last.sectors;
            self.arm_before = last.track;
            self.runs.drain(..done);
        }
    }

    /// The sectors from `lbn` on are read `by_ns` later (whole revolutions, so
    /// each still starts under the head).
    fn delay_from(&mut self, lbn: u64, by_ns: f64) {
        if let Some(i) = self
            .runs
            .iter()
            .position(|r| r.first_lbn < lbn && lbn < r.first_lbn + r.sectors)
        {
            let r = self.runs[i];
            let head = lbn - r.first_lbn;
            self.runs[i].sectors = head;
            self.runs.insert(
                i + 1,
                Run {
                    first_lbn: lbn,
                    sectors: r.sectors - head,
                    start_ns: r.start_ns + head as f64 * r.sector_ns,
                    ..r
                },
            );
        }
        for r in self.runs.iter_mut().filter(|r| r.first_lbn >= lbn) {
            r.start_ns += by_ns;
        }
        self.tail_ns += by_ns;
    }

    /// The track the heads are on at `t_ns` (the last run begun by then).
    fn arm_at(&self, t_ns: f64) -> Track {
        self.runs
            .iter()
            .take_while(|r| r.start_ns <= t_ns)
            .last()
            .map_or(self.arm_before, |r| r.track)
    }
}

/// A cache hit of a queued batch whose data waits for the bus.
#[derive(Clone, Debug)]
struct HitTransfer {
    /// When its data may start crossing (the end of its controller overhead).
    release_ns: f64,
    bus_ns: f64,
    segment: usize,
    end_lbn: u64,
}

/// A batch the drive holds whole (`CacheSpec::command_queueing`): its hits
/// were served first, their data crossing the bus whenever the media's data
/// leaves it free; `media` is when the media read data for the host
/// (start, end, sector time), in time order.
#[derive(Clone, Debug, Default)]
struct QueuedBatch {
    hits: Vec<HitTransfer>,
    media: Vec<(f64, f64, f64)>,
}

/// A rotating disk: its parameters and its state (arm, cache, read-ahead).
#[derive(Clone, Debug)]
pub(crate) struct MechanicalDisk {
    pub mech: Mechanism,
    arm: Track,
    cache: SegmentCache,
    read_ahead: Option<ReadAhead>,
    last_op: Op,
    /// The batch in progress when the drive queues commands.
    queued: Option<QueuedBatch>,
}

impl MechanicalDisk {
    /// Idle, heads on cylinder 0 head 0, cache empty.
    pub fn new(mech: Mechanism) -> MechanicalDisk {
        let cache = SegmentCache::new(mech.segments, mech.segment_sectors);
        MechanicalDisk {
            mech,
            arm: Track {
                cylinder: 0,
                head: 0,
            },
            cache,
            read_ahead: None,
            last_op: Op::Read,
            queued: None,
        }
    }

    /// Whether the drive holds all of `[lbn, lbn + sectors)` at `t_ns` (a
    /// full hit if read then).
    pub fn holds_whole(&self, lbn: u64, sectors: u64, t_ns: f64) -> bool {
        let filling = self
            .read_ahead
            .as_ref()
            .map(|ra| (ra.segment, ra.progress(t_ns)));
        self.cache.find_whole(lbn, sectors, filling).is_some()
    }

    /// Starts a batch the drive takes whole: until `end_queued_batch`, a
    /// full hit costs the drive its overhead only, and its data crosses the
    /// bus in the time the media's data leaves (`CacheSpec::command_queueing`).
    /// Returns false (and changes nothing) when the drive does not queue.
    pub fn begin_queued_batch(&mut self) -> bool {
        if self.mech.command_queueing {
            self.queued = Some(QueuedBatch::default());
        }
        self.mech.command_queueing
    }

    /// Ends a queued batch: when each of its hits' data has crossed the
    /// bus, in the order the hits ran. The media's data has the bus first
    /// (it cannot wait: the media does not stop), so while the heads read
    /// a zone of sector time s the hits get 1 − bus/s of the bus, and all of
    /// it otherwise. A hit's segment stays in use until then; its data is
    /// dropped after (requested data not kept).
    pub fn end_queued_batch(&mut self) -> Vec<f64> {
        let Some(batch) = self.queued.take() else {
            return vec![];
        };
        let bus = self.mech.bus_sector_ns;
        let mut done = Vec::with_capacity(batch.hits.len());
        let mut t = f64::NEG_INFINITY;
        let mut next_media = 0;
        for hit in &batch.hits {
            t = t.max(hit.release_ns);
            let mut left_ns = hit.bus_ns;
            while left_ns > 0.0 {
                while next_media < batch.media.len() && batch.media[next_media].1 <= t {
                    next_media += 1;
                }
                match batch.media.get(next_media) {
                    // Before the next media transfer: the whole bus.
                    Some(&(start, _, _)) if start > t => {
                        let step = left_ns.min(start - t);
                        t += step;
                        left_ns -= step;
                    }
                    // During it: what the media's data leaves.
                    Some(&(_, end, sector_ns)) => {
                        let share = (1.0 - bus / sector_ns).max(0.0);
                        if share * (end - t) >= left_ns {
                            t += left_ns / share;
                            left_ns = 0.0;
                        } else {
                            left_ns -= share * (end - t);
                            t = end;
                        }
                    }
                    None => {
                        t += left_ns;
                        left_ns = 0.0;
                    }
                }
            }
            done.push(t);
        }
        for hit in &batch.hits {
            self.release_requested(hit.segment, hit.end_lbn);
        }
        done
    }

    /// The heads' track now (ignoring read-ahead still running).
    #[cfg(test)]
    pub fn arm(&self) -> Track {
        self.arm
    }

    /// Executes one command starting at `start_ns`; a read with
    /// `prefetch_sectors` has the drive read that many sectors after it into
    /// the read's cache segment before it takes the next command (its
    /// read-ahead made to run at least that far and then stopped): the
    /// timing's `ready_ns` is when they are in.
    pub fn execute(
        &mut self,
        op: Op,
        lbn: u64,
        sectors: u64,
        prefetch_sectors: u64,
        start_ns: u64,
    ) -> CommandTiming {
        let t = start_ns as f64;
        let prefetch_sectors = if op == Op::Read { prefetch_sectors } else { 0 };
        let outcome = match op {
            Op::Read => self.read(lbn, sectors, prefetch_sectors, t),
            Op::Write => self.write(lbn, sectors, t),
        };
        self.last_op = op;
        let completion_ns = (outcome.completion_ns.ceil() as u64).max(start_ns);
        let mut ready_ns = completion_ns;
        if self.queued.is_some() && outcome.service == ServiceKind::FullHit {
            // Its data waits for the bus; the drive takes the next command
            // once the overhead is done (the batch's end settles the completion).
            ready_ns = ((t + outcome.overhead_ns).ceil() as u64).max(start_ns);
        }
        if prefetch_sectors > 0 {
            let until = lbn + sectors + prefetch_sectors;
            let reach = self
                .read_ahead
                .as_ref()
                .filter(|ra| ra.end_lbn >= until)
                .map(|ra| ra.time_reaching(until));
            if let Some(reach_ns) = reach {
                self.stop_read_ahead(reach_ns);
                ready_ns = ready_ns.max(reach_ns.ceil() as u64);
            }
        }
        CommandTiming {
            start_ns,
            completion_ns,
            ready_ns,
            service: outcome.service,
            overhead_ns: outcome.overhead_ns.round() as u64,
            seek_ns: outcome.tally.seek_ns.round() as u64,
            rotation_ns: outcome.tally.rotation_ns.round() as u64,
            transfer_ns: outcome.tally.transfer_ns.round() as u64,
            cached_sectors: outcome.cached_sectors,
        }
    }

    fn overhead_ns(&self, hit: bool) -> f64 {
        let o = &self.mech.overheads;
        let after_write = self.last_op == Op::Write;
        (match (hit, after_write) {
            (true, false) => o.read_hit_after_read_ns,
            (true, true) => o.read_hit_after_write_ns,
            (false, false) => o.read_miss_after_read_ns,
            (false, true) => o.read_miss_after_write_ns,
        }) as f64
    }

    fn read(&mut self, lbn: u64, sectors: u64, prefetch_sectors: u64, t: f64) -> Outcome {
        let bus = self.mech.bus_sector_ns;
        let end = lbn + sectors;
        let capacity = self.mech.geometry.capacity_sectors();
        // How far read-ahead runs after this read: the drive's depth, or
        // further when the host asks for a prefetch.
        let read_ahead_end =
            (end + self.mech.max_read_ahead_sectors.max(prefetch_sectors)).min(capacity);
        let filling = self
            .read_ahead
            .as_ref()
            .map(|ra| (ra.segment, ra.progress(t)));

        // Wholly cached: the mechanism is not needed and read-ahead goes on
        // (a prefetch asked of a hit starts its own, after the overhead).
        if let Some(seg) = self.cache.find_whole(lbn, sectors, filling) {
            self.cache.touch(seg);
            let overhead = self.overhead_ns(true);
            if let Some(batch) = self.queued.as_mut() {
                // Queued: the data waits for the bus, which the batch's end
                // settles; the drive goes on after the overhead.
                batch.hits.push(HitTransfer {
                    release_ns: t + overhead,
                    bus_ns: sectors as f64 * bus,
                    segment: seg,
                    end_lbn: lbn + sectors,
                });
            } else {
                self.release_requested(seg, lbn + sectors);
            }
            if prefetch_sectors > 0 && filling.is_none_or(|(s, _)| s != seg) {
                self.stop_read_ahead(t);
                self.start_read_ahead(seg, end, read_ahead_end, t + overhead);
            }
            return Outcome {
                completion_ns: t + overhead + sectors as f64 * bus,
                service: ServiceKind::FullHit,
                overhead_ns: overhead,
                tally: Tally {
                    transfer_ns: sectors as f64 * bus,
                    ..Tally::default()
                },
                cached_sectors: sectors,
            };
        }

        // Riding the read-ahead stream: `lbn` is in the buffer already (DiskSim
        // counts a reading hit only when the segment holds the first block,
        // `disk_buffer_select_read_segment`). A read starting at the sector
        // being read right now rides too only with almost read hits; a read
        // starting further ahead is a miss.
        if let Some((seg, progress)) = filling {
            let ra = self
                .read_ahead
                .as_ref()
                .expect("filling implies read-ahead");
            let (lo, _) = self.cache.window(seg, Some(progress));
            let first_buffered = lbn < progress || (self.mech.almost_read_hits && lbn == progress);
            if progress < ra.end_lbn && lo <= lbn && first_buffered {
                return self.ride_read_ahead(lbn, sectors, read_ahead_end, t, progress);
            }
        }

        self.stop_read_ahead(t);
        let overhead = self.overhead_ns(false);
        // A read takes a segment only for what it leaves in it: its own data
        // (kept requested data) or what is read after it.
        let keeps_anything = self.mech.keep_requested || read_ahead_end > end;
        let (seg, cached) = match self.cache.find_start(lbn) {
            Some((seg, end)) => (Some(seg), (end - lbn).min(sectors)),
            None if self.cache.enabled() && keeps_anything => {
                let pinned: Vec<usize> = self
                    .queued
                    .iter()
                    .flat_map(|b| b.hits.iter().map(|h| h.segment))
                    .collect();
                (Some(self.cache.victim(&pinned)), 0)
            }
            None => (None, 0),
        };
        debug_assert!(cached < sectors, "a wholly cached read is a full hit");
        let mut runs = Vec::new();
        let mut tally = Tally::default();
        let media_end = self.mech.access(
            &mut self.arm,
            t + overhead,
            Extent::new(lbn + cached, sectors - cached),
            false,
            &mut runs,
            &mut tally,
        );
        let bus_start = t + overhead;
        let pieces = std::iter::once((bus_start, 0.0, cached)).chain(
            runs.iter()
                .map(|r| (r.start_ns + r.sector_ns, r.sector_ns, r.sectors)),
        );
        let completion = bus_finish_ns(bus_start, bus, pieces);
        if let Some(batch) = self.queued.as_mut() {
            batch
                .media
                .extend(runs.iter().map(|r| (r.start_ns, r.end_ns(), r.sector_ns)));
        }
        if let Some(seg) = seg {
            let (old_start, _) = self.cache.window(seg, None);
            let start = if cached > 0 { old_start } else { lbn };
            self.cache.fill(seg, start, end);
            self.release_requested(seg, end);
            self.start_read_ahead(seg, end, read_ahead_end, media_end);
        }
        Outcome {
            completion_ns: completion,
            service: if cached > 0 {
                ServiceKind::PartialHit
            } else {
                ServiceKind::Miss
            },
            overhead_ns: overhead,
            tally,
            cached_sectors: cached,
        }
    }

    /// A read starting inside the data read-ahead has read, or at the next
    /// sector it reads, streams: the cached part goes at once, the rest as the
    /// media reaches it.
    fn ride_read_ahead(
        &mut self,
        lbn: u64,
        sectors: u64,
        read_ahead_end: u64,
        t: f64,
        progress: u64,
    ) -> Outcome {
        if let Some(ra) = self.read_ahead.as_mut() {
            ra.prune(t);
        }
        let end = lbn + sectors;
        self.extend_read_ahead(read_ahead_end);
        let overhead = self.overhead_ns(true);
        let cached = progress.saturating_sub(lbn).min(sectors);
        let bus_start = t + overhead;
        let from = lbn + cached;
        self.hold_back_read_ahead(lbn, end, t, bus_start, cached);
        let ra = self.read_ahead.as_ref().expect("riding read-ahead");
        let seg = ra.segment;
        let mut transfer = 0.0;
        let mut pieces = vec![(bus_start, 0.0, cached)];
        for r in &ra.runs {
            let lo = r.first_lbn.max(from);
            let hi = (r.first_lbn + r.sectors).min(end);
            if lo < hi {
                let first_ready = r.start_ns + (lo - r.first_lbn + 1) as f64 * r.sector_ns;
                pieces.push((first_ready, r.sector_ns, hi - lo));
                transfer += (hi - lo) as f64 * r.sector_ns;
            }
        }
        let completion = bus_finish_ns(bus_start, self.mech.bus_sector_ns, pieces);
        self.cache.touch(seg);
        self.release_requested(seg, end);
        Outcome {
            completion_ns: completion,
            service: ServiceKind::StreamingHit,
            overhead_ns: overhead,
            tally: Tally {
                transfer_ns: transfer,
                ..Tally::default()
            },
            cached_sectors: cached,
        }
    }

    /// A segment holds at most `segment_sectors` of a read's data the host has
    /// not taken yet: while a read arriving at `t` owns the stream, the media
    /// reads sector b in its pass starting at s_b only if b − (the read's next
    /// sector to cross the bus, as of s_b) < `segment_sectors`; otherwise the
    /// sector goes by and is read when it next comes round, a revolution
    /// later, and everything after it with it (DiskSim 4.0:
    /// `disk_buffer_block_available` in `disksim_diskcache.c`, checked for each
    /// sector in `disk_buffer_sector_done`, `disksim_diskctlr.c`, after
    /// counting the sectors the bus has carried so far). With a bus faster than
    /// the media this only happens when read-ahead has buffered nearly a whole
    /// segment of the read before the bus gets going.
    fn hold_back_read_ahead(
        &mut self,
        lbn: u64,
        end: u64,
        t_ns: f64,
        bus_start_ns: f64,
        cached_sectors: u64,
    ) {
        let limit_sectors = self.mech.segment_sectors as u64;
        let bus_sector_ns = self.mech.bus_sector_ns;
        let revolution_ns = self.mech.revolution_ns;
        let Some(ra) = self.read_ahead.as_mut() else {
            return;
        };
        // When each of the read's sectors has crossed the bus, in LBN order
        // (non-decreasing): the cached ones from the bus start, the rest one
        // bus sector time after the media has read them or after the previous.
        let mut crossed_ns = Vec::with_capacity((end - lbn) as usize);
        let mut last_ns = bus_start_ns;
        for _ in 0..cached_sectors {
            last_ns += bus_sector_ns;
            crossed_ns.push(last_ns);
        }
        let mut delayed_lbns = vec![];
        let mut shift_ns = 0.0;
        for r in &ra.runs {
            let lo = r.first_lbn.max(lbn + cached_sectors);
            let hi = (r.first_lbn + r.sectors).min(end);
            for b in lo..hi {
                let mut pass_ns = r.start_ns + (b - r.first_lbn) as f64 * r.sector_ns + shift_ns;
                if pass_ns >= t_ns {
                    // Sectors after b are not read before b's pass.
                    let taken = |at_ns: f64| crossed_ns.partition_point(|&c| c <= at_ns) as u64;
                    while b - lbn - taken(pass_ns) >= limit_sectors {
                        pass_ns += revolution_ns;
                        shift_ns += revolution_ns;
                        delayed_lbns.push(b);
                    }
                }
                last_ns = last_ns.max(pass_ns + r.sector_ns) + bus_sector_ns;
                crossed_ns.push(last_ns);
            }
        }
        for b in delayed_lbns {
            ra.delay_from(b, revolution_ns);
        }
    }

    fn write(&mut self, lbn: u64, sectors: u64, t: f64) -> Outcome {
        self.stop_read_ahead(t);
        let o = &self.mech.overheads;
        let overhead = match self.last_op {
            Op::Read => o.write_after_read_ns,
            Op::Write => o.write_after_write_ns,
        } as f64;
        if self.cache.enabled() {
            self.cache.invalidate(lbn, sectors);
        }
        let mut runs = Vec::new();
        let mut tally = Tally::default();
        let media_end = self.mech.access(
            &mut self.arm,
            t + overhead,
            Extent::new(lbn, sectors),
            true,
            &mut runs,
            &mut tally,
        );
        // The host's data crosses the bus while the heads move; the write ends
        // when both the media and the bus are done.
        let completion = media_end.max(t + overhead + sectors as f64 * self.mech.bus_sector_ns);
        Outcome {
            completion_ns: completion,
            service: ServiceKind::Write,
            overhead_ns: overhead,
            tally,
            cached_sectors: 0,
        }
    }

    /// Without caching of requested data, a segment drops what a read returned
    /// (and anything before it): it keeps only what read-ahead brings in past `end_lbn`.
    fn release_requested(&mut self, segment: usize, end_lbn: u64) {
        if !self.mech.keep_requested {
            self.cache.drop_below(segment, end_lbn);
        }
    }

    /// Starts reading ahead from `from_lbn` to `end` at `t_ns` (the media
    /// end of a read).
    fn start_read_ahead(&mut self, segment: usize, from_lbn: u64, end: u64, t_ns: f64) {
        if end <= from_lbn {
            return;
        }
        let mut runs = Vec::new();
        let mut arm = self.arm;
        let tail_ns = self.mech.access(
            &mut arm,
            t_ns,
            Extent::new(from_lbn, end - from_lbn),
            false,
            &mut runs,
            &mut Tally::default(),
        );
        self.read_ahead = Some(ReadAhead {
            segment,
            start_lbn: from_lbn,
            end_lbn: end,
            arm_before: self.arm,
            runs,
            tail_arm: arm,
            tail_ns,
        });
    }

    /// Schedules the running read-ahead on to `end_lbn`.
    fn extend_read_ahead(&mut self, end_lbn: u64) {
        let Some(ra) = self.read_ahead.as_mut() else {
            return;
        };
        if end_lbn <= ra.end_lbn {
            return;
        }
        let mut arm = ra.tail_arm;
        ra.tail_ns = self.mech.access(
            &mut arm,
            ra.tail_ns,
            Extent::new(ra.end_lbn, end_lbn - ra.end_lbn),
            false,
            &mut ra.runs,
            &mut Tally::default(),
        );
        ra.tail_arm = arm;
        ra.end_lbn = end_lbn;
    }

    /// A command needs the mechanism at `t_ns`: read-ahead stops; what it has
    /// read stays in its segment and the heads stay on its current track.
    fn stop_read_ahead(&mut self, t_ns: f64) {
        if let Some(ra) = self.read_ahead.take() {
            self.cache.extend(ra.segment, ra.progress(t_ns));
            self.arm = ra.arm_at(t_ns);
        }
    }
}

/// One command's result before rounding to integer nanoseconds.
struct Outcome {
    completion_ns: f64,
    service: ServiceKind,
    overhead_ns: f64,
    tally: Tally,
    cached_sectors: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::geometry::ZoneSpec;
    use crate::disk::profiles::CacheSpec;
    use crate::disk::seek::{SeekPoint, SeekSpec};

    /// One zone of 10 sectors per track, 2 surfaces, 6000 rpm (10 ms per
    /// revolution, 1 ms per sector), track skew 3 sectors, cylinder skew 4,
    /// head switch 0.5 ms, seek 2 ms + 1 ms per cylinder, bus 0.25 ms/sector.
    fn toy_spec(cache: CacheSpec) -> MechanicalSpec {
        MechanicalSpec {
            rpm: 6000.0,
            surfaces: 2,
            cylinders: 100,
            block_count: None,
            sparing_range_cylinders: None,
            zones: vec![ZoneSpec {
                first_cylinder: 0,
                last_cylinder: 99,
                sectors_per_track: 10,
                track_skew_sectors: 3.0,
                cylinder_skew_sectors: 4.0,
                spares_per_range: 0,
                slips: vec![],
            }],
            seek: SeekSpec::Extracted {
                points: vec![
                    SeekPoint {
                        distance_cylinders: 1,
                        time_ns: 3_000_000,
                    },
                    SeekPoint {
                        distance_cylinders: 2,
                        time_ns: 4_000_000,
                    },
                ],
            },
            head_switch_ns: 500_000,
            write_settle_ns: 200_000,
            overheads: ControllerOverheads {
                read_hit_after_read_ns: 100_000,
                read_hit_after_write_ns: 150_000,
                read_miss_after_read_ns: 1_000_000,
                read_miss_after_write_ns: 1_100_000,
                write_after_read_ns: 700_000,
                write_after_write_ns: 800_000,
            },
            bus_bytes_per_s: 2_048_000, // 512 B / 2.048 MB/s = 0.25 ms per sector
            cache,
        }
    }

    const NO_CACHE: CacheSpec = CacheSpec::NONE;

    fn toy(cache: CacheSpec) -> MechanicalDisk {
        MechanicalDisk::new(Mechanism::new(&toy_spec(cache)).unwrap())
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn rotational_wait_from_absolute_angles() {
        let d = toy(NO_CACHE);
        let m = &d.mech;
        assert_eq!(m.revolution_ns, 10e6);
        // At t = 0 the head is at angle 0: sector 3 (angle 0.3) is 3 ms away.
        assert!((m.rotational_wait_ns(0.0, 0.3) - 3e6).abs() < 1e-3);
        // At t = 12.5 ms (angle 0.25), angle 0.3 is 0.5 ms away; angle 0.2 a
        // whole revolution minus 0.5 ms away.
        assert!((m.rotational_wait_ns(12.5e6, 0.3) - 0.5e6).abs() < 1e-3);
        assert!((m.rotational_wait_ns(12.5e6, 0.2) - 9.5e6).abs() < 1e-3);
        // Exactly under the head: no wait, not a revolution.
        assert_eq!(m.rotational_wait_ns(1_234.0 * 10e6 + 2e6, 0.2), 0.0);
    }

    #[test]
    fn repositioning_seeks_hide_head_switches() {
        let d = toy(NO_CACHE);
        let t = |c, h| Track {
            cylinder: c,
            head: h,
        };
        let m = &d.mech;
        assert_eq!(m.reposition_ns(t(5, 0), t(5, 0)), 0.0);
        assert_eq!(m.reposition_ns(t(5, 0), t(5, 1)), 0.5e6);
        assert_eq!(m.reposition_ns(t(5, 0), t(6, 1)), 3e6);
        assert_eq!(m.reposition_ns(t(7, 1), t(5, 0)), 4e6);
    }

    #[test]
    fn a_miss_is_overhead_seek_rotation_transfer_and_the_last_bus_sector() {
        let mut d = toy(NO_CACHE);
        // LBN 43 = cylinder 2, head 0, sector 3. Angle: (head 0 + 1·2) track skews
        // + 2 cylinder skews + 3 = 6 + 8 + 3 = 17 sectors → 0.7 rev.
        // Start at t = 0: overhead 1 ms, seek 2 cylinders 4 ms → t = 5 ms (angle 0.5);
        // wait 2 ms; read 4 sectors 4 ms → media end 11 ms; last sector's bus 0.25 ms.
        let c = d.execute(Op::Read, 43, 4, 0, 0);
        assert_eq!(c.service, ServiceKind::Miss);
        assert_eq!(c.overhead_ns, MS);
        assert_eq!(c.seek_ns, 4 * MS);
        assert_eq!(c.rotation_ns, 2 * MS);
        assert_eq!(c.transfer_ns, 4 * MS);
        assert_eq!(c.completion_ns, 11 * MS + MS / 4);
        assert_eq!(
            d.arm(),
            Track {
                cylinder: 2,
                head: 0
            }
        );
    }

    #[test]
    fn a_track_switch_costs_exactly_the_skew_when_the_switch_is_shorter() {
        let mut d = toy(NO_CACHE);
        // LBNs 0..15: track (0,0) sectors 0..9, then track (0,1) from its sector 0,
        // which starts 3 sectors (track skew) after sector 0 of track (0,0).
        // t = 1 ms overhead → angle 0.1: wait 9 ms for sector 0 (angle 0); read 10
        // sectors to t = 20 ms (angle 0); head switch 0.5 ms; wait to angle 0.3 (2.5 ms);
        // read 5 sectors → 28 ms; + bus 0.25.
        let c = d.execute(Op::Read, 0, 15, 0, 0);
        assert_eq!(c.seek_ns, MS / 2);
        assert_eq!(c.rotation_ns, 9 * MS + 2_500_000);
        assert_eq!(c.completion_ns, 28_250_000);
        // A cylinder switch (track (0,1) → (1,0)) costs the cylinder skew in the same way:
        // 1-cylinder seek 3 ms < 4 sectors of skew relative to the previous track end.
        let mut d = toy(NO_CACHE);
        let c = d.execute(Op::Read, 15, 10, 0, 0);
        // LBN 15 = (0,1) sector 5 at angle 0.8; t = 1 ms, head switch from (0,0) to
        // 1.5 ms → wait 6.5 ms; 5 sectors → 13 ms
        // (angle 0.3 = start of track (0,1)); track (1,0) sector 0 sits at
        // 1·3 + 1·4 = 7 sectors = 0.7; seek 3 ms to t = 16 (angle 0.6), wait 1 ms,
        // 5 sectors → 22 ms, + 0.25 ms bus.
        assert_eq!(c.completion_ns, 22_250_000);
        assert_eq!(c.seek_ns, MS / 2 + 3 * MS);
    }

    #[test]
    fn bus_overlaps_the_media_and_a_slow_bus_dominates() {
        // Fast bus: the last ready sector plus one bus time.
        let done = bus_finish_ns(0.0, 0.25, [(1.0, 1.0, 4)]);
        assert!((done - 4.25).abs() < 1e-12);
        // Slow bus (2 per sector): the bus starts with the first sector and never waits again.
        let done = bus_finish_ns(0.0, 2.0, [(1.0, 1.0, 4)]);
        assert!((done - 9.0).abs() < 1e-12);
        // Cached sectors go first from the bus start, then the media pieces.
        let done = bus_finish_ns(10.0, 1.0, [(10.0, 0.0, 3), (11.0, 0.5, 2)]);
        assert!((done - 15.0).abs() < 1e-12);
        // Brute-force recurrence agrees on an irregular case.
        let pieces = [(3.0, 0.0, 2u64), (4.0, 0.3, 5), (9.0, 1.7, 3)];
        let mut b: f64 = 2.0;
        for (r0, step, k) in pieces {
            for i in 0..k {
                b = b.max(r0 + i as f64 * step) + 0.5;
            }
        }
        assert!((bus_finish_ns(2.0, 0.5, pieces) - b).abs() < 1e-9);
    }

    const CACHE: CacheSpec = CacheSpec {
        segments: 2,
        segment_sectors: 30,
        max_read_ahead_sectors: 20,
        keep_requested: true,
        almost_read_hits: false,
        command_queueing: false,
    };

    #[test]
    fn read_ahead_hits_wholly_and_partially() {
        let mut d = toy(CACHE);
        // Miss on LBNs 0..5 (t = 0): overhead 1 ms, wait 9 ms, 5 sectors → media end 15 ms.
        let c = d.execute(Op::Read, 0, 5, 0, 0);
        assert_eq!(c.completion_ns, 15_250_000);
        // Read-ahead continues from LBN 5 at 15 ms: sectors 5..9 end at 16..20 ms.
        // At t = 18 ms LBNs 5, 6, 7 are read: a read of 5..8 is a full hit.
        let c = d.execute(Op::Read, 5, 3, 0, 18 * MS);
        assert_eq!(c.service, ServiceKind::FullHit);
        assert_eq!(c.completion_ns, 18 * MS + 100_000 + 3 * 250_000);
        // At t = 19 ms a read of LBNs 8..12 rides the stream: LBN 8 is read (ends at 19
        // ms). LBN 9 ends 20 ms, then the head switch + skew to track (0,1): its sector
        // 0 starts at angle 0.3 → 23 ms; LBNs 10, 11 end at 24, 25 ms. Completion =
        // 25 ms + 0.25 ms (the bus keeps up).
        let c = d.execute(Op::Read, 8, 4, 0, 19 * MS);
        assert_eq!(c.service, ServiceKind::StreamingHit);
        assert_eq!(c.cached_sectors, 1);
        assert_eq!(c.completion_ns, 25_250_000);
        // Read-ahead now targets 12 + 20 = 32. At t = 26 ms it has read up to LBN 12
        // (LBN 12 ends at 26 ms): a read of LBN 14 lies ahead of the stream, a miss
        // — checked on a copy, the original continues.
        let mut ahead = d.clone();
        let c = ahead.execute(Op::Read, 14, 1, 0, 26 * MS);
        assert_eq!(c.service, ServiceKind::Miss);
        assert_eq!(c.overhead_ns, MS);
        // LBN 13 is the sector being read right now (26–27 ms): not in the
        // buffer, so a miss (DiskSim: no almost read hits). Overhead 1 ms; the
        // heads are already on track (0,1) (the run holding LBN 13 has begun);
        // LBN 13 comes round again at 26 + 10 = 36 ms → 37 ms + 0.25 ms bus.
        let c = d.clone().execute(Op::Read, 13, 1, 0, 26 * MS);
        assert_eq!(c.service, ServiceKind::Miss);
        assert_eq!(c.completion_ns, 37_250_000);
        // With almost read hits it rides the stream: LBN 13 ends at 27 ms.
        let mut almost = toy(CacheSpec {
            almost_read_hits: true,
            ..CACHE
        });
        almost.execute(Op::Read, 0, 5, 0, 0);
        almost.execute(Op::Read, 8, 4, 0, 19 * MS);
        let c = almost.execute(Op::Read, 13, 1, 0, 26 * MS);
        assert_eq!(c.service, ServiceKind::StreamingHit);
        assert_eq!(c.completion_ns, 27_250_000);
        // A miss elsewhere stops it at t = 30 ms:
        // LBNs up to 16 are read (sector ends 24..30 ms on track (0,1): LBN 16 ends at 30).
        let c = d.execute(Op::Read, 1000, 1, 0, 30 * MS);
        assert_eq!(c.service, ServiceKind::Miss);
        // The segment keeps its newest 30 sectors; its LBNs 0..17 are all there.
        let c2 = d.execute(Op::Read, 0, 17, 0, c.completion_ns);
        assert_eq!(c2.service, ServiceKind::FullHit);
        // A read starting in the stopped segment and running past it is a partial hit:
        // the cached part goes at once, the rest after repositioning, miss overhead.
        let c3 = d.execute(Op::Read, 15, 5, 0, c2.completion_ns);
        assert_eq!(c3.service, ServiceKind::PartialHit);
        assert_eq!(c3.cached_sectors, 2);
        assert_eq!(c3.overhead_ns, MS);
        assert_eq!(c3.transfer_ns, 3 * MS);
    }

    #[test]
    fn the_media_stays_within_a_segment_of_the_host() {
        // Segments of 4 sectors, read-ahead 4. A miss on LBNs 0..5: media end
        // 15 ms; read-ahead reads LBNs 5..9, each ending at 16..19 ms. A read of
        // LBNs 5..10 arrives at 18.9 ms: 5, 6, 7 are in (a hit), 8 is being
        // read. Hit overhead 0.1 ms: the bus starts at 19 ms and carries its
        // first sector by 19.25 ms. LBN 9's pass starts at 19 ms, when the
        // buffer already holds 4 sectors the host has not taken (5..8): it goes
        // by and is read on its next pass, 29–30 ms; completion 30.25 ms.
        let small = CacheSpec {
            segments: 2,
            segment_sectors: 4,
            max_read_ahead_sectors: 4,
            ..CACHE
        };
        let mut d = toy(small);
        d.execute(Op::Read, 0, 5, 0, 0);
        let c = d.execute(Op::Read, 5, 5, 0, 18_900_000);
        assert_eq!(c.service, ServiceKind::StreamingHit);
        assert_eq!(c.cached_sectors, 3);
        assert_eq!(c.completion_ns, 30_250_000);
        // Read-ahead goes on from the delayed stream: LBN 10 (track (0,1),
        // sector 0 at angle 0.3) follows 9 after the head switch, 33–34 ms. At
        // 33.5 ms it is still being read (a miss), at 34.5 ms it is in.
        let c = d.clone().execute(Op::Read, 10, 1, 0, 33_500_000);
        assert_eq!(c.service, ServiceKind::Miss);
        let c = d.execute(Op::Read, 10, 1, 0, 34_500_000);
        assert_eq!(c.service, ServiceKind::FullHit);
        // With room for 5 sectors LBN 9 is read on its first pass: 20.25 ms.
        let mut d = toy(CacheSpec {
            segment_sectors: 5,
            ..small
        });
        d.execute(Op::Read, 0, 5, 0, 0);
        let c = d.execute(Op::Read, 5, 5, 0, 18_900_000);
        assert_eq!(c.completion_ns, 20_250_000);
    }

    #[test]
    fn requested_data_stays_cached_only_when_kept() {
        // A miss on LBNs 0..5 fills segment 0 and reads ahead to LBN 25; each
        // later read comes 40 ms after the previous completes, when read-ahead
        // is done: LBNs 5..10 (read ahead), 5..10 again, then 10..15.
        let run = |keep_requested| {
            let mut d = toy(CacheSpec {
                keep_requested,
                ..CACHE
            });
            let mut t = d.execute(Op::Read, 0, 5, 0, 0).completion_ns;
            let mut kinds = vec![];
            for (lbn, n) in [(5, 5), (5, 5), (10, 5)] {
                let c = d.execute(Op::Read, lbn, n, 0, t + 40 * MS);
                kinds.push(c.service);
                t = c.completion_ns;
            }
            kinds
        };
        use ServiceKind::{FullHit, Miss};
        // Kept (DiskSim): segment 0 holds LBNs 0..25 throughout.
        assert_eq!(run(true), vec![FullHit, FullHit, FullHit]);
        // Not kept: once LBNs 5..10 went to the host segment 0 holds 10..25, so
        // reading them again misses; what was read ahead past them still hits.
        assert_eq!(run(false), vec![FullHit, Miss, FullHit]);
    }

    #[test]
    fn writes_settle_stop_read_ahead_and_invalidate() {
        let mut d = toy(CACHE);
        let c = d.execute(Op::Read, 0, 5, 0, 0);
        // Write LBN 40..42 (cylinder 2, head 0, sectors 0..1; angle 2 track skews
        // + 2 cylinder skews = 6 + 8 = 14 sectors = 0.4) at t = 20 ms, when read-ahead
        // has just left track (0,0): overhead 0.7 ms, seek 2 cylinders 4 ms + settle
        // 0.2 → 24.9 ms (angle 0.49); wait 9.1 ms → 34 ms; write 2 sectors → 36 ms.
        let w = d.execute(Op::Write, 40, 2, 0, 20 * MS);
        assert_eq!(w.service, ServiceKind::Write);
        assert_eq!(w.completion_ns, 36 * MS);
        assert_eq!(w.seek_ns, 4_200_000);
        assert!(c.completion_ns < w.start_ns);
        // The next read follows a write: read-miss-after-write overhead.
        let r = d.execute(Op::Read, 41, 1, 0, 40 * MS);
        assert_eq!(r.overhead_ns, 1_100_000);
        // Read-ahead had filled LBNs 5.. before the write stopped it; a write over
        // LBN 3 drops that segment.
        let mut d = toy(CACHE);
        d.execute(Op::Read, 0, 5, 0, 0);
        d.execute(Op::Write, 3, 1, 0, 50 * MS);
        let r = d.execute(Op::Read, 6, 1, 0, 80 * MS);
        assert_eq!(r.service, ServiceKind::Miss);
    }
}
