//! Staging: a title whose home is a tier (seed 002) is brought onto the
//! array when a client asks for it, and evicted by popularity when the
//! array needs its room.
//!
//! A request for a tier title that is not on the array starts a *staging
//! job* (one per title; later requests join it): the tier's object is
//! fetched into `staging/` in the data directory, then ingested like an
//! upload, its writes paced by the array's write queue in disk time that
//! admitted streams leave (`gate`), so staging never touches a reservation.
//! When the title is stored it is loaded and streams are admitted as for
//! any title. Until then the client is told to come back: 503 with
//! `Retry-After` set to the predicted remaining delay, which the player page
//! waits out by itself. The prediction, made when the job starts, is the
//! tier's (`Tier::predict_fetch_ns`: the jukebox model run ahead, or the
//! object store's measured throughput) then the array's: from the round
//! boundary after the fetch, `Array::predict_write_rounds` rounds on the
//! layout the title would get now ([`predicted_ready`]). Both the prediction
//! and the measured delay are logged and counted.
//!
//! When the array is full, titles staged earlier are evicted, least
//! requested first (then least recently), never a pinned one nor one being
//! streamed, until the new one fits. A missing or corrupt tier object fails
//! its job with an error naming the tier, the object and what is wrong; the
//! client gets it (502) and the log has it, and the job may be retried after
//! [`FAILED_RETRY_AFTER`]. A crash during staging leaves a partial file in
//! `staging/` (removed at the next start) and at most a `writing` title
//! (removed by the store's recovery): nothing partial is ever visible.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rondo_model::array::{WriteLoad, WritePrediction};
use rondo_model::layout::TitlePlan;
use rondo_model::schedule::Schedule;
use rondo_model::units::TitleId;
use rondo_store::TierTitleRecord;
use rondo_tier::{Tier, TierObject, TierStatus, TiersFile};
use serde::Serialize;

use crate::ingest::{IngestError, stage_file};
use crate::state::Shared;
use crate::titles::LoadedTitle;

/// The directory inside a data directory where fetched objects wait to be
/// ingested.
pub const STAGING_DIR: &str = "staging";

/// How long a failed job answers with its error before a request retries.
pub const FAILED_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Where a job is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Fetching,
    Writing,
    /// `object_fault`: the tier's object is missing or corrupt (the
    /// client gets 502), not the machinery.
    Failed {
        error: String,
        object_fault: bool,
    },
}

/// Why a staging failed.
struct Failure {
    error: String,
    object_fault: bool,
}

impl From<String> for Failure {
    fn from(error: String) -> Failure {
        Failure {
            error,
            object_fault: false,
        }
    }
}

struct Job {
    tier: String,
    phase: Phase,
    started: Instant,
    predicted_ns: u64,
    predicted_fetch_ns: u64,
    predicted_write_rounds: u64,
    /// The array was too busy for the steady-load prediction.
    predicted_lower_bound: bool,
    object_bytes: u64,
    fetched_bytes: Arc<AtomicU64>,
    written_bytes: Arc<AtomicU64>,
    stored_bytes: u64,
    failed_at: Option<Instant>,
    /// Measured: how long the tier's fetch took.
    fetch_ns: Option<u64>,
}

/// One job as the dashboard, `/metrics` and a 503's body show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobView {
    pub name: String,
    pub tier: String,
    pub phase: Phase,
    pub elapsed_seconds: f64,
    pub predicted_seconds: f64,
    /// Predicted time left (0 once overdue).
    pub remaining_seconds: f64,
    pub predicted_fetch_seconds: f64,
    /// Measured, once the fetch has ended.
    pub fetch_seconds: Option<f64>,
    pub predicted_write_rounds: u64,
    /// The prediction is a lower bound: at the staging's start the array
    /// was so busy that, were it to stay so, no round would fit a round of
    /// the title's writes; it counts only the streams admitted then.
    pub predicted_lower_bound: bool,
    pub fetched_bytes: u64,
    pub object_bytes: u64,
    pub written_bytes: u64,
    pub stored_bytes: u64,
}

/// Everything the dashboard and `/metrics` show about staging.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StagingSnapshot {
    pub jobs: Vec<JobView>,
    pub tiers: Vec<TierStatus>,
    pub staged_total: u64,
    pub failures_total: u64,
    pub evictions_total: u64,
    /// Sums over finished jobs, for the mean delay and its prediction, and
    /// the same for their fetches alone.
    pub delay_seconds_sum: f64,
    pub predicted_seconds_sum: f64,
    pub fetch_seconds_sum: f64,
    pub predicted_fetch_seconds_sum: f64,
    /// The last finished job's measured delay over its prediction.
    pub last_delay_ratio: Option<f64>,
}

/// What a request for a tier title gets.
#[derive(Debug)]
pub enum StageAnswer {
    /// On the array: stream it.
    Staged(Arc<LoadedTitle>),
    /// Being staged: come back in `retry_after_s`.
    Waiting { retry_after_s: u64, job: JobView },
    /// The staging failed (the tier object is missing or corrupt, the array
    /// is full of pinned or playing titles, …).
    Failed { error: String, object_fault: bool },
}

/// Sums over finished jobs (see [`StagingSnapshot`]).
#[derive(Copy, Clone, Default)]
struct Delays {
    delay_s: f64,
    predicted_s: f64,
    fetch_s: f64,
    predicted_fetch_s: f64,
    last_ratio: Option<f64>,
}

#[derive(Default)]
struct Counters {
    staged_total: AtomicU64,
    failures_total: AtomicU64,
    evictions_total: AtomicU64,
}

pub struct Staging {
    /// Opened at start; a tier added to `tiers.toml` since (`rondo tier
    /// add` while the server runs) is opened when first named.
    tiers: std::sync::RwLock<BTreeMap<String, Arc<dyn Tier>>>,
    data_dir: PathBuf,
    jobs: Mutex<BTreeMap<String, Job>>,
    counters: Counters,
    delays: Mutex<Delays>,
    dir: PathBuf,
}

/// Why the tiers of a data directory could not be opened.
pub type TiersError = rondo_tier::TierError;

impl Staging {
    /// Opens the tiers `data_dir/tiers.toml` names and clears what a
    /// crashed server left in `staging/`.
    pub fn open(data_dir: &Path) -> Result<Staging, TiersError> {
        let file = TiersFile::read(data_dir)?;
        let mut tiers: BTreeMap<String, Arc<dyn Tier>> = BTreeMap::new();
        for config in &file.tiers {
            let tier = rondo_tier::open(config, data_dir)?;
            tiers.insert(config.name.clone(), Arc::from(tier));
        }
        let dir = data_dir.join(STAGING_DIR);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                tracing::info!(file = %entry.path().display(), "removing a staging file a stopped server left");
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(Staging {
            tiers: std::sync::RwLock::new(tiers),
            data_dir: data_dir.to_path_buf(),
            jobs: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
            delays: Mutex::new(Delays::default()),
            dir,
        })
    }

    pub fn has_tiers(&self) -> bool {
        !self.tiers.read().expect("tiers lock").is_empty()
    }

    /// The tier named `name`: one opened already, or one `tiers.toml` has
    /// named since the server started (opened now; blocks for an S3 tier's
    /// calibration). An error says why it cannot be had.
    pub fn tier(&self, name: &str) -> Result<Arc<dyn Tier>, String> {
        if let Some(tier) = self.tiers.read().expect("tiers lock").get(name) {
            return Ok(Arc::clone(tier));
        }
        let file = TiersFile::read(&self.data_dir).map_err(|e| e.to_string())?;
        let Some(config) = file.get(name) else {
            return Err(format!(
                "no tier named {name:?} in {} (tiers: {})",
                self.data_dir.join(rondo_tier::TIERS_FILE).display(),
                file.names()
            ));
        };
        let opened: Arc<dyn Tier> = Arc::from(
            rondo_tier::open(config, &self.data_dir)
                .map_err(|e| format!("opening tier {name:?}: {e}"))?,
        );
        tracing::info!(tier = name, "opened a tier added since the server started");
        let mut tiers = self.tiers.write().expect("tiers lock");
        Ok(Arc::clone(tiers.entry(name.to_string()).or_insert(opened)))
    }

    /// The staging state now.
    pub fn snapshot(&self) -> StagingSnapshot {
        let jobs = self.jobs.lock().expect("staging lock");
        let delays = *self.delays.lock().expect("delays lock");
        StagingSnapshot {
            jobs: jobs.iter().map(|(name, job)| view(name, job)).collect(),
            tiers: self
                .tiers
                .read()
                .expect("tiers lock")
                .values()
                .map(|t| t.status())
                .collect(),
            staged_total: self.counters.staged_total.load(Relaxed),
            failures_total: self.counters.failures_total.load(Relaxed),
            evictions_total: self.counters.evictions_total.load(Relaxed),
            delay_seconds_sum: delays.delay_s,
            predicted_seconds_sum: delays.predicted_s,
            fetch_seconds_sum: delays.fetch_s,
            predicted_fetch_seconds_sum: delays.predicted_fetch_s,
            last_delay_ratio: delays.last_ratio,
        }
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn view(name: &str, job: &Job) -> JobView {
    let elapsed_ns = job.started.elapsed().as_nanos() as u64;
    JobView {
        name: name.to_string(),
        tier: job.tier.clone(),
        phase: job.phase.clone(),
        elapsed_seconds: seconds(elapsed_ns),
        predicted_seconds: seconds(job.predicted_ns),
        remaining_seconds: seconds(remaining_ns(job, elapsed_ns)),
        predicted_fetch_seconds: seconds(job.predicted_fetch_ns),
        fetch_seconds: job.fetch_ns.map(seconds),
        predicted_write_rounds: job.predicted_write_rounds,
        predicted_lower_bound: job.predicted_lower_bound,
        fetched_bytes: job.fetched_bytes.load(Relaxed),
        object_bytes: job.object_bytes,
        written_bytes: job.written_bytes.load(Relaxed),
        stored_bytes: job.stored_bytes,
    }
}

/// Time left, as told to waiting clients. Until the predicted end, the
/// prediction's; past it (a loaded array gives the writes less time than
/// predicted), the rate the job has measured so far for what is left of
/// its phase (and the predicted writes after a fetch), so that clients
/// retry when it is likely done rather than every second.
fn remaining_ns(job: &Job, elapsed_ns: u64) -> u64 {
    if elapsed_ns < job.predicted_ns {
        return job.predicted_ns - elapsed_ns;
    }
    let predicted_write_ns = job.predicted_ns.saturating_sub(job.predicted_fetch_ns);
    let left_at_rate = |done: u64, total: u64, spent_ns: u64| -> Option<u64> {
        (done > 0 && spent_ns > 0).then(|| {
            (u128::from(total.saturating_sub(done)) * u128::from(spent_ns) / u128::from(done))
                as u64
        })
    };
    match (&job.phase, job.fetch_ns) {
        (Phase::Writing, Some(fetch_ns)) => left_at_rate(
            job.written_bytes.load(Relaxed),
            job.stored_bytes,
            elapsed_ns.saturating_sub(fetch_ns),
        )
        .unwrap_or(predicted_write_ns),
        (Phase::Fetching, _) => {
            left_at_rate(
                job.fetched_bytes.load(Relaxed),
                job.object_bytes,
                elapsed_ns,
            )
            .unwrap_or(job.predicted_fetch_ns)
                + predicted_write_ns
        }
        _ => predicted_write_ns,
    }
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The title `record` names, if it is on the array now.
fn staged_copy(shared: &Shared, name: &str) -> Option<Arc<LoadedTitle>> {
    shared.titles().into_iter().find(|t| t.record.name == name)
}

/// Serves a request for tier title `record`: the staged copy, or the job
/// bringing it (started now if there is none).
pub async fn request(shared: &Arc<Shared>, record: TierTitleRecord) -> StageAnswer {
    let staging = &shared.staging;
    if let Some(title) = staged_copy(shared, &record.name) {
        // Popularity counts the streams a title serves, not a waiting
        // client's retries.
        let store = shared.store.clone();
        let name = record.name.clone();
        let _ =
            tokio::task::spawn_blocking(move || store.record_tier_request(&name, now_unix_ns()))
                .await;
        return StageAnswer::Staged(title);
    }
    {
        let mut jobs = staging.jobs.lock().expect("staging lock");
        if let Some(job) = jobs.get(&record.name) {
            match &job.phase {
                Phase::Failed {
                    error,
                    object_fault,
                } => {
                    if job
                        .failed_at
                        .is_some_and(|at| at.elapsed() < FAILED_RETRY_AFTER)
                    {
                        return StageAnswer::Failed {
                            error: error.clone(),
                            object_fault: *object_fault,
                        };
                    }
                    jobs.remove(&record.name);
                }
                _ => return waiting(&record.name, job),
            }
        }
    }
    let tier = {
        let staging = Arc::clone(shared);
        let name = record.tier.clone();
        match tokio::task::spawn_blocking(move || staging.staging.tier(&name)).await {
            Ok(Ok(tier)) => tier,
            Ok(Err(error)) => {
                return StageAnswer::Failed {
                    error: format!(
                        "title {:?} lives on tier {:?}: {error}",
                        record.name, record.tier
                    ),
                    object_fault: false,
                };
            }
            Err(e) => {
                return StageAnswer::Failed {
                    error: e.to_string(),
                    object_fault: false,
                };
            }
        }
    };
    // The prediction: the tier's fetch, then the array's writes.
    let object = object_of(&record);
    let predicted_fetch_ns = {
        let (tier, object) = (Arc::clone(&tier), object.clone());
        tokio::task::spawn_blocking(move || tier.predict_fetch_ns(&object))
            .await
            .unwrap_or(0)
    };
    // Arrivals refill the time departures free (a server at capacity); if
    // under that no round would ever fit the title's writes, only the
    // streams admitted now are counted, and the prediction is a lower bound.
    let (write, lower_bound) = match predict_write(shared, &record, WriteLoad::Steady).await {
        Some(write) => (write, false),
        None => match predict_write(shared, &record, WriteLoad::AdmittedOnly).await {
            Some(write) => (write, true),
            None => (
                WritePrediction {
                    rounds: record.client_bytes.len() as u64,
                    last_round_busy_ns: shared.round_duration_ns(),
                },
                true,
            ),
        },
    };
    let predicted_write_rounds = write.rounds;
    let now = Instant::now();
    let predicted_ns = predicted_ready(shared, now, predicted_fetch_ns, write)
        .saturating_duration_since(now)
        .as_nanos() as u64;
    let stored_bytes = record.stored_bytes;
    let job = Job {
        tier: record.tier.clone(),
        phase: Phase::Fetching,
        started: Instant::now(),
        predicted_ns,
        predicted_fetch_ns,
        predicted_write_rounds,
        predicted_lower_bound: lower_bound,
        object_bytes: record.object_bytes,
        fetched_bytes: Arc::new(AtomicU64::new(0)),
        written_bytes: Arc::new(AtomicU64::new(0)),
        stored_bytes,
        failed_at: None,
        fetch_ns: None,
    };
    let answer = {
        let mut jobs = staging.jobs.lock().expect("staging lock");
        if let Some(existing) = jobs.get(&record.name) {
            // Another request started it meanwhile.
            return waiting(&record.name, existing);
        }
        let answer = waiting(&record.name, &job);
        jobs.insert(record.name.clone(), job);
        answer
    };
    tracing::info!(
        title = %record.name,
        tier = %record.tier,
        bytes = record.object_bytes,
        predicted_s = seconds(predicted_ns),
        predicted_fetch_s = seconds(predicted_fetch_ns),
        predicted_write_rounds,
        "staging from the tier"
    );
    let task_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name(format!("rondo-stage-{}", record.name))
        .spawn(move || run_job(&task_shared, tier, record));
    if let Err(e) = spawned {
        tracing::error!("cannot start a staging thread: {e}");
    }
    answer
}

/// When a staging started at `now` is predicted to end: the core's rule
/// (`rondo_model::tier::staging::ready_ns`) on the round clock.
fn predicted_ready(
    shared: &Shared,
    now: Instant,
    fetch_ns: u64,
    write: WritePrediction,
) -> Instant {
    let clock = &shared.clock;
    // The fetch's end as an instant first: before round 0's start (a
    // server just started) it is model time 0, when round 0 is planned.
    let ready_ns = rondo_model::tier::staging::ready_ns(
        clock.model_ns(now + Duration::from_nanos(fetch_ns)),
        clock.round_duration_ns,
        write,
    );
    clock.at_model_ns(ready_ns)
}

fn waiting(name: &str, job: &Job) -> StageAnswer {
    let job = view(name, job);
    StageAnswer::Waiting {
        retry_after_s: (job.remaining_seconds.ceil() as u64).max(1),
        job,
    }
}

fn object_of(record: &TierTitleRecord) -> TierObject {
    TierObject {
        key: record.object_key.clone(),
        size_bytes: record.object_bytes,
        crc32c: record.object_crc32c,
    }
}

/// How the array would write `record`'s stored stream now.
async fn predict_write(
    shared: &Arc<Shared>,
    record: &TierTitleRecord,
    load: WriteLoad,
) -> Option<WritePrediction> {
    let store = shared.store.clone();
    let client_bytes = record.client_bytes.clone();
    let round_ns = record.round_duration_ns;
    let layout = tokio::task::spawn_blocking(move || {
        let config = store.config();
        let schedule =
            Schedule::from_client_bytes(client_bytes, round_ns, config.block_bytes).ok()?;
        let inputs = store.layout_inputs().ok()?;
        let plan = TitlePlan::for_schedule(
            &schedule,
            &store.layout_params(),
            inputs.start_disk,
            inputs.seed,
        )
        .ok()?;
        store.preview_layout(&plan).ok()
    })
    .await
    .ok()??;
    let layout = Arc::new(layout);
    shared
        .with_core(move |_, core| core.array.predict_write(layout, load))
        .await?
}

/// The staging job's thread: fetch, then ingest (evicting as needed), then
/// load.
fn run_job(shared: &Arc<Shared>, tier: Arc<dyn Tier>, record: TierTitleRecord) {
    let staging = &shared.staging;
    let (fetched, written) = {
        let jobs = staging.jobs.lock().expect("staging lock");
        let job = jobs.get(&record.name).expect("the job was registered");
        (
            Arc::clone(&job.fetched_bytes),
            Arc::clone(&job.written_bytes),
        )
    };
    let set_phase = |phase: Phase| {
        if let Some(job) = staging
            .jobs
            .lock()
            .expect("staging lock")
            .get_mut(&record.name)
        {
            if matches!(phase, Phase::Failed { .. }) {
                job.failed_at = Some(Instant::now());
            }
            job.phase = phase;
        }
    };
    match stage(
        shared,
        tier.as_ref(),
        &record,
        &fetched,
        &written,
        &set_phase,
    ) {
        Ok(title) => {
            let job = staging
                .jobs
                .lock()
                .expect("staging lock")
                .remove(&record.name);
            staging.counters.staged_total.fetch_add(1, Relaxed);
            if let Some(job) = job {
                let delay_s = job.started.elapsed().as_secs_f64();
                let predicted_s = seconds(job.predicted_ns);
                let fetch_s = seconds(job.fetch_ns.unwrap_or(0));
                let predicted_fetch_s = seconds(job.predicted_fetch_ns);
                let mut delays = staging.delays.lock().expect("delays lock");
                delays.delay_s += delay_s;
                delays.predicted_s += predicted_s;
                delays.fetch_s += fetch_s;
                delays.predicted_fetch_s += predicted_fetch_s;
                delays.last_ratio = Some(delay_s / predicted_s.max(1e-9));
                tracing::info!(
                    title = %record.name,
                    id = title.id().0,
                    delay_s,
                    predicted_s,
                    fetch_s,
                    predicted_fetch_s,
                    "staged onto the array"
                );
            }
        }
        Err(Failure {
            error,
            object_fault,
        }) => {
            staging.counters.failures_total.fetch_add(1, Relaxed);
            tracing::warn!(title = %record.name, tier = %record.tier, object_fault, "staging failed: {error}");
            set_phase(Phase::Failed {
                error,
                object_fault,
            });
        }
    }
}

fn stage(
    shared: &Arc<Shared>,
    tier: &dyn Tier,
    record: &TierTitleRecord,
    fetched: &AtomicU64,
    written: &AtomicU64,
    set_phase: &dyn Fn(Phase),
) -> Result<Arc<LoadedTitle>, Failure> {
    let staging = &shared.staging;
    std::fs::create_dir_all(&staging.dir)
        .map_err(|e| format!("creating {}: {e}", staging.dir.display()))?;
    let path = staging.dir.join(format!("{}.part", record.object_key));
    let _cleanup = RemoveOnDrop(path.clone());
    {
        let file = std::fs::File::create(&path)
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        tier.fetch(&object_of(record), &mut out, &|done| {
            fetched.store(done, Relaxed)
        })
        .map_err(|e| Failure {
            object_fault: e.is_object_fault(),
            error: e.to_string(),
        })?;
        out.flush()
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    if let Some(job) = staging
        .jobs
        .lock()
        .expect("staging lock")
        .get_mut(&record.name)
    {
        job.fetch_ns = Some(job.started.elapsed().as_nanos() as u64);
    }
    set_phase(Phase::Writing);
    loop {
        let result = stage_file(
            &shared.store,
            &path,
            record,
            now_unix_ns(),
            shared.gate.as_ref(),
            &|done, _| written.store(done, Relaxed),
        );
        match result {
            Ok(stored) => {
                return shared
                    .load_and_add_title(stored.id)
                    .map_err(|e| e.to_string().into());
            }
            Err(IngestError::DiskFull { reason, .. }) => {
                if !evict_one(shared, &record.name)? {
                    return Err(format!(
                        "the array has no room for {:?} ({reason}) and every staged title is \
                         pinned or being streamed",
                        record.name
                    )
                    .into());
                }
            }
            Err(e) => return Err(e.to_string().into()),
        }
    }
}

/// Evicts a staged tier title other than `keep`, in the core's order
/// (`rondo_model::tier::staging::eviction_order`: least requested, never
/// pinned or streamed); false when there is none.
fn evict_one(shared: &Arc<Shared>, keep: &str) -> Result<bool, String> {
    use rondo_model::tier::staging::{StagedTitle, eviction_order};
    let tier_titles = shared.store.tier_titles().map_err(|e| e.to_string())?;
    let streaming: Vec<TitleId> = shared
        .with_core_blocking(|_, core| core.streams.values().map(|s| s.title.id()).collect())
        .unwrap_or_default();
    let staged: Vec<(StagedTitle, String)> = tier_titles
        .iter()
        .filter(|t| t.name != keep)
        .filter_map(|t| {
            let copy = staged_copy(shared, &t.name)?;
            Some((
                StagedTitle {
                    id: copy.id().0,
                    requests: t.request_count,
                    last_request_ns: t.last_request_unix_ns,
                    pinned: t.pinned,
                    streaming: streaming.contains(&copy.id()),
                },
                t.name.clone(),
            ))
        })
        .collect();
    let titles: Vec<StagedTitle> = staged.iter().map(|(t, _)| *t).collect();
    for id in eviction_order(&titles) {
        let (title, name) = staged
            .iter()
            .find(|(t, _)| t.id == id)
            .expect("a candidate");
        match shared.remove_title_blocking(TitleId(id)) {
            Ok(()) => {
                shared
                    .staging
                    .counters
                    .evictions_total
                    .fetch_add(1, Relaxed);
                tracing::info!(title = %name, id, requests = title.requests, "evicted from the array to make room; its home is its tier");
                return Ok(true);
            }
            // A stream started on it meanwhile.
            Err(crate::state::RemoveTitleError::Streaming { .. }) => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(false)
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(phase: Phase, fetch_ns: Option<u64>, fetched: u64, written: u64) -> Job {
        Job {
            tier: "vault".into(),
            phase,
            started: Instant::now(),
            predicted_ns: 10_000,
            predicted_fetch_ns: 4_000,
            predicted_write_rounds: 6,
            predicted_lower_bound: false,
            object_bytes: 1_000,
            fetched_bytes: Arc::new(AtomicU64::new(fetched)),
            written_bytes: Arc::new(AtomicU64::new(written)),
            stored_bytes: 2_000,
            failed_at: None,
            fetch_ns,
        }
    }

    #[test]
    fn the_time_left_is_the_predictions_then_the_measured_rates() {
        // Before the predicted end: what the prediction leaves.
        assert_eq!(
            remaining_ns(&job(Phase::Fetching, None, 0, 0), 3_000),
            7_000
        );
        // Overdue while writing: 500 of 2,000 bytes in 26,000 ns of writes
        // (fetched at 4,000): 1,500 more take 78,000.
        let writing = job(Phase::Writing, Some(4_000), 1_000, 500);
        assert_eq!(remaining_ns(&writing, 30_000), 78_000);
        // Overdue with nothing written yet: the predicted writes again.
        assert_eq!(
            remaining_ns(&job(Phase::Writing, Some(4_000), 1_000, 0), 12_000),
            6_000
        );
        // Overdue while fetching: half fetched in 12,000, the other half
        // takes as long, then the predicted writes.
        assert_eq!(
            remaining_ns(&job(Phase::Fetching, None, 500, 0), 12_000),
            18_000
        );
    }
}
