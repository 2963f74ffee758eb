//! The round driver: the array on the wall clock.
//!
//! One OS thread. Round r starts at `t0 + r·T` (`std::time::Instant`
//! deadlines, so rounds do not drift; T is asked of the array). At each
//! boundary it:
//!
//! 1. hands the array the ingest writers' requests (`gate`), then asks it to
//!    begin the round (`Array::begin_round`): the misses of the round that
//!    ended, the streams it stopped, and every disk's commands — stream
//!    reads chosen by the retrieval policy, re-reads after errors, the
//!    rebuild's copies and ingest writes, each fully resolved to extents
//!    with checksums and charged to the round's budget;
//!    Before that it tells the array how many rounds each session's client
//!    has taken (`Array::client_took`), so that the plan also carries the
//!    rounds released to clients (data read in round r is sent from round
//!    r+1, in playback order), the streams whose client took everything,
//!    and those stopped because their client stopped reading;
//! 2. tells each session which of its rounds are released;
//! 3. sends each disk its batch (with the piece queues of the sessions its
//!    reads are for), the rebuild's copies to the copier and the ingest grants to
//!    the gate.
//!
//! Between boundaries it receives the I/O threads' completions and hands
//! each to the array (`Array::complete`), whose effects it carries out: a
//! late round released at once goes to its session; a failed read is
//! re-read from the other replica in a coming round's unreserved time (the
//! array queues it); a disk that fails is recorded in the data directory; a
//! stream the array stops is ended. Read bytes never pass through here: the
//! disk threads put them in the sessions' piece queues. The driver decides
//! nothing itself and never waits for a client.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rondo_model::array::{
    AbortReason, Aborted, Completion, DiskCommand, Effect, ExtentFaults, Purpose, ReadOutcome,
    Release, RoundPlan, state_name,
};
use rondo_model::units::{PlaybackRound, Round, TitleId};

use crate::gate::GateRequest;
use crate::io::{DiskBatch, IoEvent};
use crate::metrics::GrantedIo;
use crate::session::{Delivery, PieceSender, SessionMsg, end_stream};
use crate::state::{Core, CoreJob, Shared};

/// Jobs (admissions) run per wake of the driver before their late starts'
/// reads go to the disks. Assumption: 16; an admission takes tens of
/// microseconds here, so the first one's reads wait well under a
/// millisecond of the late-start allowance (`LATE_START_ALLOWANCE_NS`,
/// 10 ms) for the others.
const JOBS_PER_WAKE_MAX: usize = 16;

/// The driver thread's own state.
pub struct Driver {
    shared: Arc<Shared>,
    /// The array and the sessions: this thread's alone.
    core: Core,
    disks: Vec<crate::io::BatchSender>,
    events: Receiver<IoEvent>,
    /// Jobs from HTTP handlers, sessions and the copier, run on the core.
    jobs: Receiver<CoreJob>,
    /// The array's extent faults go to the thread that saves them, when
    /// they change (`extent_faults_signature`).
    faults: Sender<ExtentFaults>,
    faults_signature: Option<[u64; 5]>,
    /// Reads reported after a round's boundary, taken from the queue while
    /// draining it at the boundary: handled after the round begins.
    deferred: Option<IoEvent>,
    /// One completion's effects; kept empty between reads, so that a
    /// stream-round's completion allocates nothing.
    effects: Vec<Effect>,
}

impl Driver {
    pub fn new(
        shared: Arc<Shared>,
        core: Core,
        disks: Vec<crate::io::BatchSender>,
        events: Receiver<IoEvent>,
        jobs: Receiver<CoreJob>,
        faults: Sender<ExtentFaults>,
    ) -> Driver {
        Driver {
            shared,
            core,
            disks,
            events,
            jobs,
            faults,
            faults_signature: None,
            deferred: None,
            effects: Vec::new(),
        }
    }

    /// Sends the array's bad extents and lost rounds to be saved if they
    /// changed since the last time.
    fn save_extent_faults(&mut self) {
        let signature = self.core.array.extent_faults_signature();
        if self.faults_signature != Some(signature) {
            self.faults_signature = Some(signature);
            let faults = self.core.array.extent_faults();
            let mut lost: BTreeMap<TitleId, Vec<PlaybackRound>> = BTreeMap::new();
            for l in &faults.lost {
                lost.entry(l.title).or_default().push(l.playback_round);
            }
            *self
                .shared
                .lost_rounds
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = lost;
            let _ = self.faults.send(faults);
        }
    }

    /// Runs rounds until shutdown; then ends every stream and closes the
    /// disks' channels (their threads exit after their current batch).
    pub fn run(mut self) {
        let mut round = Round(0);
        loop {
            let boundary = self.shared.clock.boundary(round);
            loop {
                if self.shared.shutting_down.load(Relaxed) {
                    self.stop();
                    return;
                }
                let now = Instant::now();
                if now >= boundary {
                    break;
                }
                // Shutdown sends a job, which wakes this wait.
                let wait = boundary - now;
                crossbeam_channel::select! {
                    recv(self.events) -> event => match event {
                        Ok(event) => self.on_event(event),
                        Err(_) => {
                            tracing::error!("every disk thread has stopped; the round driver stops");
                            self.stop();
                            return;
                        }
                    },
                    recv(self.jobs) -> job => {
                        if let Ok(job) = job {
                            self.report_delivery_lag();
                            job(&self.shared, &mut self.core);
                            // Admissions that queued meanwhile (many
                            // streams starting at once) run before the
                            // disks and the send loops are woken, once
                            // for them all.
                            for job in self.jobs.try_iter().take(JOBS_PER_WAKE_MAX) {
                                job(&self.shared, &mut self.core);
                            }
                            self.send_late_batches();
                        }
                    },
                    default(wait) => {}
                }
                self.publish();
            }
            let late = Instant::now().saturating_duration_since(boundary);
            self.shared.metrics.round_lateness.observe(late);
            if late > Duration::from_nanos(self.shared.clock.round_duration_ns / 4) {
                tracing::warn!(
                    round = round.0,
                    late_ms = late.as_millis() as u64,
                    "round started late"
                );
            }
            self.take_events_reported_by(boundary);
            // The round that ended gets its last lag before it becomes
            // the one before.
            self.report_delivery_lag();
            self.begin_round(round);
            if let Some(event) = self.deferred.take() {
                self.on_event(event);
            }
            round = round.next();
        }
    }

    /// Handles the disk threads' reports queued by `boundary`, in order, up
    /// to the first sent after it. Reads reported by a round's boundary
    /// are on time for it: when admissions kept the driver busy past the
    /// boundary, their reports waited in the queue and the round began
    /// without them, counting their streams' reads as deadline misses
    /// (measured: 60 misses at 13,750 streams arriving at 1375 a second,
    /// with every batch ended within its round, docs/capacity.md).
    fn take_events_reported_by(&mut self, boundary: Instant) {
        while self.deferred.is_none() {
            let Ok(event) = self.events.try_recv() else {
                return;
            };
            match &event {
                IoEvent::Reads { sent_at, .. } if *sent_at > boundary => {
                    self.deferred = Some(event);
                }
                _ => self.on_event(event),
            }
        }
    }

    /// Hands the array the send loops' delivery lag since the last report,
    /// which its admission checks (`Array::delivery_lag`).
    fn report_delivery_lag(&mut self) {
        let lag_ns = self.core.outbox.take_lag_ns();
        if lag_ns > 0 {
            self.core.array.delivery_lag(lag_ns);
        }
    }

    /// Publishes what others read without asking: the sessions held and
    /// the array's per-extent faults (their counts, each title's lost
    /// rounds; saved when they change).
    fn publish(&mut self) {
        self.core.outbox.flush();
        self.shared
            .active_streams
            .store(self.core.streams.len(), Relaxed);
        crate::ops::publish_extent_counts(&self.shared, &self.core);
        self.save_extent_faults();
    }

    fn stop(&mut self) {
        let core = &mut self.core;
        let aborted = core.array.abort_all();
        for a in &aborted {
            if let Some(state) = core.streams.remove(&a.stream) {
                state.abort();
                self.shared.metrics.streams_aborted.fetch_add(1, Relaxed);
            }
        }
        // Sessions the array no longer knows (ended by now).
        for (_, state) in std::mem::take(&mut core.streams) {
            state.abort();
            self.shared.metrics.streams_aborted.fetch_add(1, Relaxed);
        }
        self.publish();
        self.disks.clear();
        self.shared.gate.shutdown();
    }

    fn begin_round(&mut self, round: Round) {
        let shared = Arc::clone(&self.shared);
        let metrics = &shared.metrics;
        metrics.rounds.fetch_add(1, Relaxed);
        let core = &mut self.core;

        // 1. The writers' requests, then the array's plan of the round.
        for request in shared.gate.take_requests() {
            match request {
                GateRequest::Begin { title, layout } => core.array.begin_ingest(title, layout),
                GateRequest::Want { title, round } => core.array.want_write(title, round),
                GateRequest::End { title } => {
                    core.array.end_ingest(title);
                }
            }
        }
        // What each session's client has taken, for the array's stall rule.
        for (&stream, state) in &core.streams {
            core.array
                .client_took(stream, state.taken_rounds.load(Relaxed));
        }
        // Buffers past the server buffer admission may reserve: stalled
        // clients lose their grace (the array's rule).
        let budget_bytes =
            self.shared.config.buffer_per_disk_bytes * u64::from(self.shared.array.disk_count);
        let in_use_bytes = metrics.buffer_bytes_in_use.load(Relaxed);
        core.array.buffers_over_budget(in_use_bytes > budget_bytes);
        // Keep free no more than streams use now: enough to reuse at a
        // steady load, and memory goes back to the system when they leave.
        shared.pool.trim(in_use_bytes);
        let plan = core.array.begin_round(round);
        if let Some(status) = core.array.cycle_status() {
            if let Some(event) = &plan.cycle_event {
                tracing::info!(
                    round = round.0,
                    ?event,
                    cycle_rounds = status.group_rounds,
                    "time-cycle operation"
                );
            }
            *metrics.cycle.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        }
        for miss in &plan.missed {
            if !core.streams.contains_key(&miss.stream) {
                continue;
            }
            if miss.recovery {
                metrics.recovery_misses.fetch_add(1, Relaxed);
            } else {
                metrics.stream_round_misses.fetch_add(1, Relaxed);
                tracing::warn!(
                    stream = miss.stream.0,
                    read_round = miss.read_round.0,
                    "deadline miss: a read was not complete when its round ended"
                );
            }
        }
        for a in &plan.aborted {
            // A plan aborts streams whose data is gone and clients that
            // stopped reading; only the former lost a read.
            if matches!(a.reason, AbortReason::DataLost { .. }) {
                metrics.lost_reads.fetch_add(1, Relaxed);
            }
            self.aborted(a);
        }

        // 2. The sessions: rounds released, streams finished.
        for release in &plan.releases {
            self.release(release);
        }
        // One message per send loop for the round's releases.
        self.core.outbox.flush();
        for stream in &plan.finished {
            if self.core.streams.remove(stream).is_some() {
                metrics.streams_completed.fetch_add(1, Relaxed);
            }
        }

        // 3. The disks' batches, the copies and the grants.
        let core = &mut self.core;
        let mut swaps = std::mem::take(&mut core.ops.device_swaps);
        core.ops.device_swaps = vec![None; swaps.len()];
        crate::ops::rebuild::hand_out(&shared, core, &plan);
        let RoundPlan {
            disks,
            ingest_grants,
            ..
        } = plan;
        for disk_plan in &disks {
            if let Some(reserved_ns) = disk_plan.reserved_ns.filter(|_| disk_plan.serving) {
                let d = &metrics.disks[disk_plan.disk.index()];
                d.last_reserved_ns.store(reserved_ns, Relaxed);
                d.reserved_ns_total.fetch_add(reserved_ns, Relaxed);
            }
        }
        shared
            .gate
            .begin_round(round, &ingest_grants, disks.len() as u32);
        for disk_plan in disks {
            let disk = disk_plan.disk.index();
            // Each read's bytes go straight to its session.
            let deliver_to = deliver_to(core, &disk_plan.commands);
            let batch = DiskBatch {
                round,
                reserved_ns: disk_plan.reserved_ns,
                granted_ns: disk_plan.granted_ns,
                commands: disk_plan.commands,
                scheduler: disk_plan.scheduler,
                device: swaps[disk].take(),
                deliver_to,
                late_start_ns: None,
            };
            // Bounded: a disk rounds behind makes the driver wait here rather
            // than queue without limit; clients never do.
            if self.disks[disk].send(batch).is_err() {
                tracing::error!(disk, "disk thread has stopped");
            }
        }
    }

    fn on_event(&mut self, event: IoEvent) {
        match event {
            IoEvent::Reads { reads, .. } => {
                for read in reads {
                    self.on_read(read.completion);
                }
            }
            IoEvent::BatchDone {
                disk,
                round,
                reserved_ns,
                granted_ns,
                requests,
                bytes,
                granted_commands,
                granted_bytes,
                granted_model_ns,
                cache_hits,
                shared_reads,
                shared_bytes,
                ended_at,
                arrived_at,
                model_ns,
                late,
                model_busy_ns,
                measured_busy_ns,
            } => {
                let metrics = &self.shared.metrics;
                let d = &metrics.disks[disk.index()];
                d.cache_hits.fetch_add(cache_hits as u64, Relaxed);
                d.shared_reads.fetch_add(shared_reads as u64, Relaxed);
                d.shared_bytes.fetch_add(shared_bytes, Relaxed);
                d.reads.fetch_add(requests as u64, Relaxed);
                d.bytes_read.fetch_add(bytes, Relaxed);
                // Every batch of the round, a late start's too, must end
                // within it.
                if ended_at > self.shared.clock.boundary(round.next()) {
                    d.overruns.fetch_add(1, Relaxed);
                    metrics.disk_round_overruns.fetch_add(1, Relaxed);
                    // Where the time went, in ms from the round's start:
                    // a batch that arrived late, one the model ended late,
                    // or reads that took longer than the model.
                    let clock = &self.shared.clock;
                    let start = clock.boundary(round);
                    let ms = |at: Instant| at.saturating_duration_since(start).as_secs_f64() * 1e3;
                    let model_ms = |ns: Option<u64>| ns.map(|ns| ms(clock.at_model_ns(ns)));
                    tracing::warn!(
                        disk = disk.0,
                        round = round.0,
                        late_start = late,
                        arrived_ms = ms(arrived_at),
                        model_start_ms = ?model_ms(model_ns.as_ref().map(|m| m.start)),
                        model_end_ms = ?model_ms(model_ns.as_ref().map(|m| m.end)),
                        ended_ms = ms(ended_at),
                        "disk-round overrun: the batch ended after its round"
                    );
                }
                // How much later than the model the disk ended it: late
                // starts leave that much more of their round for the next
                // two rounds (`Array::batch_late`). A lost node's batch
                // (no model times) says nothing of the host's pace.
                if let Some(model_ns) = model_ns {
                    let clock = &self.shared.clock;
                    let late_ns = clock.model_ns(ended_at).saturating_sub(model_ns.end);
                    metrics.batch_end_lateness.observe_ns(late_ns);
                    metrics
                        .batch_arrival_lateness
                        .observe_ns(clock.model_ns(arrived_at).saturating_sub(model_ns.start));
                    self.core.array.batch_late(late_ns);
                }
                if late {
                    // The round's budget check and the gate count the
                    // round's own batch.
                    return;
                }
                d.rounds.fetch_add(1, Relaxed);
                let granted = GrantedIo {
                    granted_ns,
                    commands: granted_commands as u64,
                    bytes: granted_bytes,
                    model_ns: granted_model_ns,
                };
                let check =
                    d.record_round(round, reserved_ns, granted, model_busy_ns, measured_busy_ns);
                if check.measured_over || check.model_over {
                    tracing::warn!(
                        disk = disk.0,
                        round = round.0,
                        reserved_ms = reserved_ns.unwrap_or(0) as f64 / 1e6,
                        granted_ms = granted_ns as f64 / 1e6,
                        granted_model_ms = granted_model_ns as f64 / 1e6,
                        model_busy_ms = model_busy_ns as f64 / 1e6,
                        measured_busy_ms = measured_busy_ns as f64 / 1e6,
                        "disk busier than reserved and granted in a round{}",
                        if check.model_over {
                            " (the disk model too: the round bound does not hold)"
                        } else {
                            " (the model was not: the device or the host was slower than the model)"
                        }
                    );
                }
                self.shared.gate.disk_done(round);
            }
        }
    }

    /// A stream read finished (its bytes, if good, are in its session's
    /// piece queue): the array decides what follows.
    fn on_read(&mut self, completion: Completion) {
        if completion.outcome != ReadOutcome::Ok {
            let metrics = &self.shared.metrics;
            metrics.read_errors.fetch_add(1, Relaxed);
            metrics.disks[completion.disk.index()]
                .errors
                .fetch_add(1, Relaxed);
            let reason = match &completion.outcome {
                ReadOutcome::IoError(e) | ReadOutcome::BadChecksum(e) => e.as_str(),
                ReadOutcome::Ok => "",
            };
            tracing::warn!(
                disk = completion.disk.0,
                stream = completion.stream.0,
                playback_round = completion.playback_round.0,
                "read error on disk {} ({reason})",
                completion.disk
            );
        }
        let mut effects = std::mem::take(&mut self.effects);
        self.core.array.complete_into(&completion, &mut effects);
        self.apply(effects.drain(..));
        self.effects = effects;
    }

    /// Carries out the array's effects.
    fn apply(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::Ready(_) => {}
                Effect::Released(release) => self.release(&release),
                Effect::ReReadQueued {
                    stream,
                    playback_round,
                    replica,
                } => {
                    self.shared.metrics.rereads.fetch_add(1, Relaxed);
                    tracing::info!(
                        stream = stream.0,
                        playback_round = playback_round.0,
                        ?replica,
                        "reading the other replica in the next round's unreserved time"
                    );
                }
                Effect::DiskState { disk, state } => {
                    crate::ops::publish_state(&self.shared, disk, state);
                    tracing::warn!(
                        disk = disk.0,
                        state = state_name(state),
                        "disk state changed"
                    );
                }
                Effect::DiskFailed { disk, cause } => {
                    crate::ops::record_failed(&self.shared, disk, &cause.to_string());
                    tracing::error!(
                        disk = disk.0,
                        "disk failed ({cause}): its reads go to the other replicas from the next round"
                    );
                }
                Effect::Aborted(a) => self.aborted(&a),
                Effect::ExtentBad { .. } | Effect::ExtentRepaired { .. } | Effect::RoundLost(_) => {
                    crate::ops::log_extent_effect(&effect)
                }
            }
        }
    }

    /// A stream the array stopped: its response fails.
    fn aborted(&mut self, a: &Aborted) {
        if let AbortReason::ClientStalled { held_rounds, .. } = a.reason
            && let Some(state) = self.core.streams.get(&a.stream)
        {
            self.shared
                .metrics
                .streams_dropped_stalled
                .fetch_add(1, Relaxed);
            tracing::warn!(
                stream = a.stream.0,
                title = state.title.id().0,
                peer = %state.peer,
                grace_s = self.shared.config.stall_grace.as_secs_f64(),
                held_rounds,
                "client stopped reading; stream dropped after the grace time"
            );
            let state = end_stream(&mut self.core, a.stream).expect("present");
            state.abort();
            return;
        }
        crate::ops::end_aborted(&self.shared, &mut self.core, a);
    }

    /// Late starts' reads (queued by admissions run as jobs) go to their
    /// disks at once.
    fn send_late_batches(&mut self) {
        for batch in std::mem::take(&mut self.core.late_batches) {
            let disk = batch.commands.first().map(|c| c.disk.index());
            if let Some(disk) = disk
                && self.disks[disk].send(batch).is_err()
            {
                tracing::error!(disk, "disk thread has stopped");
            }
        }
    }

    /// A round the array released goes to its session.
    fn release(&mut self, release: &Release) {
        send_release(&mut self.core, release);
    }
}

/// Where each command's bytes go: the piece queue of the session a stream
/// read is for (`None` for other commands, or a stream with no session).
pub(crate) fn deliver_to(core: &Core, commands: &[DiskCommand]) -> Vec<Option<PieceSender>> {
    commands
        .iter()
        .map(|c| match c.purpose {
            Purpose::Deliver { stream, .. } => core.streams.get(&stream).map(|s| s.pieces.clone()),
            _ => None,
        })
        .collect()
}

/// A round the array released goes to its session (if it still has one).
pub(crate) fn send_release(core: &mut Core, release: &Release) {
    let Some(state) = core.streams.get(&release.stream) else {
        return;
    };
    match &state.delivery {
        Delivery::Body(inbox) => {
            let _ = inbox.send(SessionMsg::Release {
                playback_round: release.playback_round,
                replica: release.replica,
            });
        }
        Delivery::Sink(sink) => core.outbox.push(
            release.stream,
            sink,
            release.playback_round,
            release.replica,
        ),
    }
}
