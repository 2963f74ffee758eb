//! The time-cycle scheduler: seed 004's stream combination with a dynamic
//! cycle (its Figure 2), and the plain fixed cycle as the same machinery
//! with the operations switched off.
//!
//! Every stream has a *coverage*: the playback instant up to which its data
//! has been read. The rule that makes every cycle's plan correct whatever
//! operation came before is one invariant, checked at every cycle start j
//! (start s_j, length L_j, end e_j = s_j + L_j):
//!
//! > every stream's coverage is at least e_j, and a stream that is not read
//! > in cycle j has coverage at least e_{j+1}.
//!
//! A cycle's reads all complete by e_j (admission keeps the cycle's charged
//! time within L_j), so the data a stream plays during cycle j was in memory
//! when the cycle began, and the invariant holds again at e_j. Each read
//! extends its stream's coverage to a target: e_{j+1} for an uncombined
//! stream; e_{j+1} + L_{j+1} for a combined stream on its turn (it is not
//! read in the next cycle); a combined stream off its turn reads only a
//! shortfall (after a combination or a cycle growth). Operations change only
//! the targets; the reads they cost in their own cycle (the "transitory"
//! transfer of seed 004 §2.1 (v)) are the reads of that cycle's plan, and an
//! operation is done only when that plan, the steady state after it and
//! Equation 2's memory all fit. docs/cycle.md has the proof sketch.

use serde::{Deserialize, Serialize};

use super::{CycleDisk, CycleStreamId, bytes_for};

/// Which scheduler.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// A fixed cycle: one read per stream per cycle, no operations.
    Fixed,
    /// Seed 004: combine, split, double and shrink (Figure 2).
    Combination,
}

/// When CheckSchedule calls Reschedule. Seed 004 contradicts itself.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// §2.2 heuristic 3: "either memory or time-cycle utilizations exceed
    /// their threshold and their difference is greater than the difference
    /// threshold".
    Prose,
    /// Figure 2: `((u_m>u_mT || u_t>u_tT) && abs(u_m-u_t)<u_dT) || SFLAG`.
    PseudoCode,
}

/// Figure 2's constants. The paper gives none of the values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CombinationParams {
    /// u_mT, in thousandths. Assumption: 800 (act before 80% of memory is
    /// used: "proactive", seed 004 §2.1 (ii)); chosen before any run.
    pub memory_threshold_permille: u32,
    /// u_tT, in thousandths. Assumption: 800, as u_mT.
    pub time_threshold_permille: u32,
    /// u_dT, in thousandths. Assumption: 100 (a tenth of either resource).
    pub difference_threshold_permille: u32,
    /// UNIT, the shrink step, in thousandths of the cycle ("decreases the
    /// time-cycle by a UNIT percentage value", §2.2 heuristic 2).
    /// Assumption: 100 (10%).
    pub unit_permille: u32,
    pub trigger: Trigger,
    /// Assumption: the cycle never shrinks below 100 ms (a few reads'
    /// access time; the paper sets no floor).
    pub min_cycle_ns: u64,
    /// Assumption: the cycle never grows past 60 s (start-up latency; the
    /// paper sets no ceiling, and Equation 2's memory stops it long before).
    pub max_cycle_ns: u64,
}

impl Default for CombinationParams {
    fn default() -> CombinationParams {
        CombinationParams {
            memory_threshold_permille: 800,
            time_threshold_permille: 800,
            difference_threshold_permille: 100,
            unit_permille: 100,
            trigger: Trigger::Prose,
            min_cycle_ns: 100_000_000,
            max_cycle_ns: 60_000_000_000,
        }
    }
}

/// Which resource Figure 2's Reschedule relieves.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pressure {
    /// u_m > u_t: split a combined stream or shrink the cycle.
    Memory,
    /// Otherwise: combine two streams or double the cycle.
    Time,
}

impl CombinationParams {
    /// Figure 2's CheckSchedule: whether Reschedule runs at memory
    /// utilisation `u_m` and time utilisation `u_t` (or because it is
    /// `forced`: SFLAG, a doubling in preparation), and which way.
    pub fn check(&self, u_m: f64, u_t: f64, forced: bool) -> Option<Pressure> {
        let (m_t, t_t) = (
            f64::from(self.memory_threshold_permille) / 1000.0,
            f64::from(self.time_threshold_permille) / 1000.0,
        );
        let over = u_m > m_t || u_t > t_t;
        let trigger = match self.trigger {
            Trigger::Prose => over && self.apart(u_m, u_t),
            Trigger::PseudoCode => over && (u_m - u_t).abs() < self.difference(),
        };
        (trigger || forced).then_some(if u_m > u_t {
            Pressure::Memory
        } else {
            Pressure::Time
        })
    }

    /// Whether the two utilisations differ by more than u_dT (after an
    /// operation this sets SFLAG).
    pub fn apart(&self, u_m: f64, u_t: f64) -> bool {
        (u_m - u_t).abs() > self.difference()
    }

    fn difference(&self) -> f64 {
        f64::from(self.difference_threshold_permille) / 1000.0
    }
}

/// A scheduler's configuration.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleConfig {
    pub disk: CycleDisk,
    /// Buffer memory, Equation 2's budget.
    pub memory_bytes: u64,
    pub initial_cycle_ns: u64,
    pub policy: Policy,
    pub combination: CombinationParams,
    /// Whether admission charges the reads an operation costs in its own
    /// cycle (a combination's extra transfer, a cycle change's transitional
    /// reads). `false` only to show what ignoring them does (misses).
    pub account_transitory: bool,
}

impl CycleConfig {
    /// Seed 004 §3's set-up with the given memory and initial cycle.
    pub fn seed004(memory_bytes: u64, initial_cycle_ns: u64, policy: Policy) -> CycleConfig {
        CycleConfig {
            disk: CycleDisk::seed004(),
            memory_bytes,
            initial_cycle_ns,
            policy,
            combination: CombinationParams::default(),
            account_transitory: true,
        }
    }
}

/// An operation of Figure 2's Reschedule, as done in one cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CycleOp {
    /// The two lowest-bitrate uncombined streams: `first` reads two cycles
    /// now, `second` next cycle (Figure 1).
    Combine {
        first: CycleStreamId,
        second: CycleStreamId,
    },
    /// The highest-bitrate combined stream and its partner (if it still has
    /// one) read one cycle each again.
    Split {
        first: CycleStreamId,
        second: Option<CycleStreamId>,
    },
    /// The cycle shrinks by UNIT from the next cycle on.
    Shrink { from_ns: u64, to_ns: u64 },
    /// Doubling is due but its transitional reads do not fit one cycle:
    /// combined streams on their turn read one cycle more (`prepared` of
    /// them so far), so the switch costs no extra access.
    PrepareDouble { prepared: usize },
    /// The cycle doubles from the next cycle on; every stream is
    /// uncombined.
    Double { from_ns: u64, to_ns: u64 },
}

/// Why a stream was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// Its reads would not fit a cycle.
    Disk,
    /// Equation 2's memory would exceed the budget.
    Memory,
    /// The id is already admitted.
    Duplicate,
    /// `admit` outside `begin_cycle` … `plan`.
    NotInCycle,
}

/// One read of a cycle's plan.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleRead {
    pub stream: CycleStreamId,
    pub bytes: u64,
    /// The playback instant of its first byte: it must be complete by then.
    pub from_ns: u64,
    /// The stream's coverage after it.
    pub to_ns: u64,
    /// What admission charged for it (access + transfer).
    pub charge_ns: u64,
}

/// A cycle's reads, any order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CyclePlan {
    pub index: u64,
    pub start_ns: u64,
    pub cycle_ns: u64,
    pub reads: Vec<CycleRead>,
    /// The disk's fixed term + Σ charge_ns: at most `cycle_ns` unless
    /// transitory reads were not accounted (`account_transitory = false`).
    pub charged_ns: u64,
    pub op: Option<CycleOp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Stream {
    id: CycleStreamId,
    bitrate_bps: u64,
    coverage_ns: u64,
    /// Combined: the parity of the cycles it reads in.
    turn: Option<u8>,
    partner: Option<CycleStreamId>,
    /// Preparing a doubling: reads one more cycle on its turn.
    prepared: bool,
}

impl Stream {
    fn combined(&self) -> bool {
        self.turn.is_some()
    }
}

/// The scheduler of one disk. Per cycle the caller removes streams that
/// ended, calls `begin_cycle`, offers arrivals to `admit`, then takes the
/// cycle's reads from `plan`.
#[derive(Clone, Debug)]
pub struct CycleScheduler {
    config: CycleConfig,
    streams: Vec<Stream>,
    started: bool,
    in_cycle: bool,
    index: u64,
    start_ns: u64,
    cycle_ns: u64,
    next_cycle_ns: u64,
    sflag: bool,
    pending_double: bool,
    op: Option<CycleOp>,
}

/// Cycle-j quantities a plan is computed from.
#[derive(Copy, Clone, Debug)]
struct Frame {
    index: u64,
    end_ns: u64,
    next_ns: u64,
}

impl CycleScheduler {
    pub fn new(config: CycleConfig) -> CycleScheduler {
        assert!(config.initial_cycle_ns > 0, "a cycle has a length");
        CycleScheduler {
            config,
            streams: Vec::new(),
            started: false,
            in_cycle: false,
            index: 0,
            start_ns: 0,
            cycle_ns: config.initial_cycle_ns,
            next_cycle_ns: config.initial_cycle_ns,
            sflag: false,
            pending_double: false,
            op: None,
        }
    }

    pub fn config(&self) -> &CycleConfig {
        &self.config
    }

    /// For tests: change thresholds or the budget mid-run, and drop SFLAG.
    #[cfg(test)]
    pub(super) fn config_mut(&mut self) -> &mut CycleConfig {
        &mut self.config
    }

    #[cfg(test)]
    pub(super) fn clear_sflag(&mut self) {
        self.sflag = false;
    }

    /// The current cycle's length (L_j).
    pub fn cycle_ns(&self) -> u64 {
        self.cycle_ns
    }

    /// The next cycle's length (L_{j+1}), known from `begin_cycle` on.
    pub fn next_cycle_ns(&self) -> u64 {
        self.next_cycle_ns
    }

    /// When the next cycle starts.
    pub fn next_start_ns(&self) -> u64 {
        self.start_ns + self.cycle_ns
    }

    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    pub fn combined_streams(&self) -> usize {
        self.streams.iter().filter(|s| s.combined()).count()
    }

    /// The playback instant up to which `id`'s data is read.
    pub fn coverage_ns(&self, id: CycleStreamId) -> Option<u64> {
        self.streams
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.coverage_ns)
    }

    /// The admitted streams' ids, in admission order.
    pub fn stream_ids(&self) -> Vec<CycleStreamId> {
        self.streams.iter().map(|s| s.id).collect()
    }

    pub fn contains(&self, id: CycleStreamId) -> bool {
        self.streams.iter().any(|s| s.id == id)
    }

    /// Equation 2 at the current cycle, plus the extra cycle of data that
    /// streams preparing a doubling hold.
    pub fn memory_bytes(&self) -> u64 {
        memory_of(&self.streams, self.cycle_ns)
    }

    /// u_m: Equation 2's memory over the budget.
    pub fn memory_utilisation(&self) -> f64 {
        self.memory_bytes() as f64 / self.config.memory_bytes as f64
    }

    /// u_t: the steady state's charged time of the busier parity over the
    /// cycle.
    pub fn time_utilisation(&self) -> f64 {
        let l = self.cycle_ns;
        let [a, b] = steady_ns(&self.config.disk, &self.streams, l);
        a.max(b) as f64 / l as f64
    }

    /// Forgets a stream that ended (call between cycles). Its partner stays
    /// combined on its own turn, so no cycle's charge grows.
    pub fn remove(&mut self, id: CycleStreamId) {
        self.streams.retain(|s| s.id != id);
        for s in &mut self.streams {
            if s.partner == Some(id) {
                s.partner = None;
            }
        }
    }

    /// Starts cycle j at `start_ns` (the previous cycle's end) and, under
    /// stream combination, runs CheckSchedule: at most one operation.
    pub fn begin_cycle(&mut self, start_ns: u64) -> Option<CycleOp> {
        assert!(!self.in_cycle, "begin_cycle twice without plan");
        if self.started {
            assert_eq!(
                start_ns,
                self.start_ns + self.cycle_ns,
                "cycles follow each other"
            );
            self.index += 1;
            self.cycle_ns = self.next_cycle_ns;
        }
        self.started = true;
        self.in_cycle = true;
        self.start_ns = start_ns;
        self.next_cycle_ns = self.cycle_ns;
        self.op = None;
        if self.config.policy == Policy::Combination && !self.streams.is_empty() {
            self.check_schedule();
        }
        self.op.clone()
    }

    /// Admission: the new stream plays from the end of this cycle and reads
    /// in it; it is admitted when this cycle's plan, the steady state at the
    /// next cycle's length and Equation 2's memory all fit.
    pub fn admit(&mut self, id: CycleStreamId, bitrate_bps: u64) -> Result<(), Rejection> {
        if !self.in_cycle {
            return Err(Rejection::NotInCycle);
        }
        if self.contains(id) {
            return Err(Rejection::Duplicate);
        }
        let mut cand = self.streams.clone();
        cand.push(Stream {
            id,
            bitrate_bps,
            coverage_ns: self.start_ns + self.cycle_ns,
            turn: None,
            partner: None,
            prepared: false,
        });
        self.fits(&cand, self.next_cycle_ns)?;
        if !self.config.account_transitory {
            // Without transitory accounting only steady states are checked.
            let [a, b] = steady_ns(&self.config.disk, &cand, self.cycle_ns);
            if a.max(b) > self.cycle_ns {
                return Err(Rejection::Disk);
            }
        }
        self.streams = cand;
        Ok(())
    }

    /// The cycle's reads; commits the streams' coverage.
    pub fn plan(&mut self) -> CyclePlan {
        assert!(self.in_cycle, "plan outside a cycle");
        self.in_cycle = false;
        let frame = self.frame(self.next_cycle_ns);
        let reads = plan_reads(&self.config.disk, &self.streams, frame);
        for r in &reads {
            let s = self
                .streams
                .iter_mut()
                .find(|s| s.id == r.stream)
                .expect("planned streams exist");
            s.coverage_ns = r.to_ns;
        }
        CyclePlan {
            index: self.index,
            start_ns: self.start_ns,
            cycle_ns: self.cycle_ns,
            charged_ns: self.config.disk.fixed_ns + reads.iter().map(|r| r.charge_ns).sum::<u64>(),
            reads,
            op: self.op.clone(),
        }
    }

    fn frame(&self, next_ns: u64) -> Frame {
        Frame {
            index: self.index,
            end_ns: self.start_ns + self.cycle_ns,
            next_ns,
        }
    }

    /// Whether `cand` fits with the next cycle `next_ns`: the steady state at
    /// `next_ns`, memory at both lengths (buffers drain over a cycle) and,
    /// when transitory reads are accounted, this cycle's plan.
    fn fits(&self, cand: &[Stream], next_ns: u64) -> Result<(), Rejection> {
        let disk = &self.config.disk;
        let memory = memory_of(cand, self.cycle_ns).max(memory_of(cand, next_ns));
        if memory > self.config.memory_bytes {
            return Err(Rejection::Memory);
        }
        let [a, b] = steady_ns(disk, cand, next_ns);
        if a.max(b) > next_ns {
            return Err(Rejection::Disk);
        }
        if self.config.account_transitory {
            let charged: u64 = disk.fixed_ns
                + plan_reads(disk, cand, self.frame(next_ns))
                    .iter()
                    .map(|r| r.charge_ns)
                    .sum::<u64>();
            if charged > self.cycle_ns {
                return Err(Rejection::Disk);
            }
        }
        Ok(())
    }

    fn utilisations(&self, streams: &[Stream], cycle_ns: u64) -> (f64, f64) {
        let u_m = memory_of(streams, cycle_ns) as f64 / self.config.memory_bytes as f64;
        let [a, b] = steady_ns(&self.config.disk, streams, cycle_ns);
        (u_m, a.max(b) as f64 / cycle_ns as f64)
    }

    /// Figure 2's CheckSchedule (a doubling in preparation continues it).
    fn check_schedule(&mut self) {
        let c = self.config.combination;
        let (u_m, u_t) = self.utilisations(&self.streams, self.cycle_ns);
        let Some(pressure) = c.check(u_m, u_t, self.sflag || self.pending_double) else {
            return;
        };
        self.reschedule(pressure == Pressure::Memory);
        let (u_m, u_t) = self.utilisations(&self.streams, self.next_cycle_ns);
        if c.apart(u_m, u_t) {
            self.sflag = true;
        }
    }

    /// Figure 2's Reschedule: one operation, done only if it fits.
    fn reschedule(&mut self, memory_bound: bool) {
        self.sflag = false;
        if memory_bound {
            self.cancel_double();
            let victim = self
                .streams
                .iter()
                .filter(|s| s.combined())
                .max_by_key(|s| (s.bitrate_bps, std::cmp::Reverse(s.id)))
                .map(|s| (s.id, s.partner));
            match victim {
                Some((first, second)) => {
                    let mut cand = self.streams.clone();
                    for s in &mut cand {
                        if s.id == first || Some(s.id) == second {
                            s.turn = None;
                            s.partner = None;
                        }
                    }
                    self.try_apply(cand, self.cycle_ns, CycleOp::Split { first, second });
                }
                None => {
                    let c = self.config.combination;
                    let to_ns =
                        (self.cycle_ns as u128 * u128::from(1000 - c.unit_permille) / 1000) as u64;
                    let to_ns = to_ns.max(c.min_cycle_ns);
                    if to_ns < self.cycle_ns {
                        let op = CycleOp::Shrink {
                            from_ns: self.cycle_ns,
                            to_ns,
                        };
                        self.try_apply(self.streams.clone(), to_ns, op);
                    } else {
                        self.sflag = true;
                    }
                }
            }
            return;
        }
        let mut singles: Vec<&Stream> = self.streams.iter().filter(|s| !s.combined()).collect();
        if !self.pending_double && singles.len() >= 2 {
            singles.sort_by_key(|s| (s.bitrate_bps, s.id));
            let (first, second) = (singles[0].id, singles[1].id);
            let parity = (self.index % 2) as u8;
            let mut cand = self.streams.clone();
            for s in &mut cand {
                if s.id == first {
                    s.turn = Some(parity);
                    s.partner = Some(second);
                } else if s.id == second {
                    s.turn = Some(1 - parity);
                    s.partner = Some(first);
                }
            }
            self.try_apply(cand, self.cycle_ns, CycleOp::Combine { first, second });
            return;
        }
        self.double();
    }

    /// Applies `cand` with the next cycle `next_ns` if it fits; otherwise
    /// keeps SFLAG so the operation is tried again next cycle.
    fn try_apply(&mut self, cand: Vec<Stream>, next_ns: u64, op: CycleOp) -> bool {
        if self.fits(&cand, next_ns).is_ok() {
            self.streams = cand;
            self.next_cycle_ns = next_ns;
            self.op = Some(op);
            true
        } else {
            self.sflag = true;
            false
        }
    }

    fn cancel_double(&mut self) {
        self.pending_double = false;
        for s in &mut self.streams {
            s.prepared = false;
        }
    }

    /// Doubles the cycle and uncombines every stream if this cycle's
    /// transitional reads fit; otherwise prepares: combined streams on their
    /// turn read one cycle more, as many as this cycle's slack allows.
    fn double(&mut self) {
        let c = self.config.combination;
        let to_ns = (self.cycle_ns * 2).min(c.max_cycle_ns);
        if to_ns <= self.cycle_ns {
            self.cancel_double();
            return;
        }
        let mut cand = self.streams.clone();
        for s in &mut cand {
            s.turn = None;
            s.partner = None;
            s.prepared = false;
        }
        let op = CycleOp::Double {
            from_ns: self.cycle_ns,
            to_ns,
        };
        match self.fits(&cand, to_ns) {
            Ok(()) => {
                self.streams = cand;
                self.next_cycle_ns = to_ns;
                self.op = Some(op);
                self.pending_double = false;
                return;
            }
            Err(Rejection::Memory) => {
                self.cancel_double();
                return;
            }
            Err(_) => {}
        }
        // The steady state after the doubling must fit, or preparing is
        // pointless.
        let [a, b] = steady_ns(&self.config.disk, &cand, to_ns);
        if a.max(b) > to_ns {
            self.cancel_double();
            return;
        }
        self.pending_double = true;
        let parity = (self.index % 2) as u8;
        let mut order: Vec<usize> = (0..self.streams.len())
            .filter(|&i| {
                let s = &self.streams[i];
                s.turn == Some(parity) && !s.prepared
            })
            .collect();
        order.sort_by_key(|&i| (self.streams[i].bitrate_bps, self.streams[i].id));
        let mut cand = self.streams.clone();
        for i in order {
            cand[i].prepared = true;
            if self.fits(&cand, self.cycle_ns).is_err() {
                cand[i].prepared = false;
                break;
            }
        }
        let prepared = cand.iter().filter(|s| s.prepared).count();
        self.streams = cand;
        self.op = Some(CycleOp::PrepareDouble { prepared });
    }
}

/// The reads of cycle `frame` for `streams` (see the module's invariant).
fn plan_reads(disk: &CycleDisk, streams: &[Stream], frame: Frame) -> Vec<CycleRead> {
    let next_end = frame.end_ns + frame.next_ns;
    let parity = (frame.index % 2) as u8;
    streams
        .iter()
        .filter_map(|s| {
            let target = match s.turn {
                None => next_end,
                Some(p) if p == parity => {
                    next_end + frame.next_ns + if s.prepared { frame.next_ns } else { 0 }
                }
                Some(_) => next_end,
            };
            (s.coverage_ns < target).then(|| {
                let bytes = bytes_for(s.bitrate_bps, target - s.coverage_ns);
                CycleRead {
                    stream: s.id,
                    bytes,
                    from_ns: s.coverage_ns,
                    to_ns: target,
                    charge_ns: disk.read_ns(bytes),
                }
            })
        })
        .collect()
}

/// Steady-state charged time of each cycle parity at cycle `cycle_ns`: an
/// uncombined stream reads one cycle in every cycle, a combined one two
/// cycles on its turn.
fn steady_ns(disk: &CycleDisk, streams: &[Stream], cycle_ns: u64) -> [u64; 2] {
    let mut load = [disk.fixed_ns; 2];
    for s in streams {
        match s.turn {
            None => {
                let t = disk.read_ns(bytes_for(s.bitrate_bps, cycle_ns));
                load[0] += t;
                load[1] += t;
            }
            Some(p) => load[usize::from(p)] += disk.read_ns(bytes_for(s.bitrate_bps, 2 * cycle_ns)),
        }
    }
    load
}

/// Equation 2: Σ T·R_i over all streams plus Σ T·R_i over combined ones;
/// plus the extra cycle a stream preparing a doubling holds.
fn memory_of(streams: &[Stream], cycle_ns: u64) -> u64 {
    streams
        .iter()
        .map(|s| {
            let one = bytes_for(s.bitrate_bps, cycle_ns);
            one * (1 + u64::from(s.combined()) + u64::from(s.prepared))
        })
        .sum()
}
