//! Per-round history for the dashboard: a sampler task reads the counters
//! once per round (late in the round, after most batches have reported),
//! turns their differences into one [`RoundSample`], keeps the last
//! [`HISTORY_ROUNDS`] in a ring and broadcasts each to the event streams.
//!
//! The sampler only reads atomics and counts the registered streams (one
//! short lock of the core), so it never delays the round driver; event
//! stream clients get samples through a bounded broadcast channel, and one
//! that falls behind loses samples rather than holding anything up.
//! Per-disk figures are differences of the running totals, so a sample
//! taken late (a starved host) still adds up: it then covers more than one
//! round, and its `rounds` field says how many.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rondo_model::units::{DiskIndex, Round};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::metrics::Metrics;
use crate::state::Shared;

/// Rounds of history a new event-stream client gets first.
pub const HISTORY_ROUNDS: usize = 300;

/// Samples a slow event-stream client may fall behind before it loses some.
const BROADCAST_CAPACITY: usize = 64;

/// How often the sampler looks at the shutdown flag while waiting.
const SHUTDOWN_POLL: Duration = Duration::from_millis(100);

/// One disk in a [`RoundSample`].
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DiskSample {
    /// Disk time reserved (fixed term included), model and measured busy
    /// time, summed over the sample's rounds.
    pub reserved_ns: u64,
    pub model_busy_ns: u64,
    pub measured_busy_ns: u64,
    /// `DiskMetrics::state`: 0 healthy, 1 suspect, 2 failed, 3 rebuilding.
    pub state: u64,
    pub overruns: u64,
    pub errors: u64,
    /// Rounds whose measured busy time exceeded their reservation
    /// (`rondo_disk_rounds_over_reserved_total`'s difference).
    pub over_reserved: u64,
}

/// The running rebuild, if any.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RebuildSample {
    pub disk: DiskIndex,
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// One round as the dashboard shows it. Counts (`admitted`, `rejected_*`,
/// `misses`, …) are what happened since the previous sample.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoundSample {
    /// The round most recently begun by the round driver.
    pub round: Round,
    /// Rounds the sample covers (1 unless the sampler was late).
    pub rounds: u64,
    /// Named `round_ns` in the JSON the dashboard reads.
    #[serde(rename = "round_ns")]
    pub round_duration_ns: u64,
    pub active_streams: usize,
    pub admitted: u64,
    pub rejected_disk_time: u64,
    pub rejected_buffer: u64,
    pub rejected_network: u64,
    pub rejected_host: u64,
    pub rejected_other: u64,
    /// Stream-round misses and disk-round overruns.
    pub misses: u64,
    pub overruns: u64,
    pub sent_bytes: u64,
    pub buffer_bytes_in_use: u64,
    pub disks: Vec<DiskSample>,
    pub rebuild: Option<RebuildSample>,
    /// Seed 004's dynamic cycle now (`None`: a fixed cycle).
    pub cycle: Option<rondo_model::array::CycleStatus>,
    /// Seed 002's tiers and staging jobs now (`None`: no tiers).
    pub staging: Option<crate::staging::StagingSnapshot>,
}

/// The running totals a sample is the difference of.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    rounds: u64,
    admitted: u64,
    rejected: [u64; 5],
    misses: u64,
    overruns: u64,
    sent_bytes: u64,
    /// Per disk: reserved, model busy, measured busy, overruns, errors,
    /// rounds over reserved.
    disks: Vec<[u64; 6]>,
}

impl Totals {
    pub fn read(metrics: &Metrics) -> Totals {
        let g = |a: &AtomicU64| a.load(Relaxed);
        Totals {
            rounds: g(&metrics.rounds),
            admitted: g(&metrics.admitted),
            rejected: [
                g(&metrics.rejected_disk_time),
                g(&metrics.rejected_buffer),
                g(&metrics.rejected_network),
                g(&metrics.rejected_other),
                g(&metrics.rejected_host),
            ],
            misses: g(&metrics.stream_round_misses),
            overruns: g(&metrics.disk_round_overruns),
            sent_bytes: g(&metrics.bytes_sent),
            disks: metrics
                .disks
                .iter()
                .map(|d| {
                    [
                        g(&d.reserved_ns_total),
                        g(&d.model_busy_ns_total),
                        g(&d.measured_busy_ns_total),
                        g(&d.overruns),
                        g(&d.errors),
                        g(&d.rounds_over_reserved),
                    ]
                })
                .collect(),
        }
    }
}

/// The sample between two readings of the totals. Gauges (disk states,
/// buffer bytes, rebuild) are read now.
pub fn sample(
    metrics: &Metrics,
    before: &Totals,
    now: &Totals,
    active_streams: usize,
    round_duration_ns: u64,
) -> RoundSample {
    let rebuild_plus_one = metrics.rebuild_disk_plus_one.load(Relaxed);
    RoundSample {
        round: Round(now.rounds.saturating_sub(1)),
        rounds: now.rounds.saturating_sub(before.rounds),
        round_duration_ns,
        active_streams,
        admitted: now.admitted.saturating_sub(before.admitted),
        rejected_disk_time: now.rejected[0].saturating_sub(before.rejected[0]),
        rejected_buffer: now.rejected[1].saturating_sub(before.rejected[1]),
        rejected_network: now.rejected[2].saturating_sub(before.rejected[2]),
        rejected_other: now.rejected[3].saturating_sub(before.rejected[3]),
        rejected_host: now.rejected[4].saturating_sub(before.rejected[4]),
        misses: now.misses.saturating_sub(before.misses),
        overruns: now.overruns.saturating_sub(before.overruns),
        sent_bytes: now.sent_bytes.saturating_sub(before.sent_bytes),
        buffer_bytes_in_use: metrics.buffer_bytes_in_use.load(Relaxed),
        disks: metrics
            .disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let b = before.disks.get(i).copied().unwrap_or_default();
                let n = now.disks[i];
                DiskSample {
                    reserved_ns: n[0].saturating_sub(b[0]),
                    model_busy_ns: n[1].saturating_sub(b[1]),
                    measured_busy_ns: n[2].saturating_sub(b[2]),
                    overruns: n[3].saturating_sub(b[3]),
                    errors: n[4].saturating_sub(b[4]),
                    over_reserved: n[5].saturating_sub(b[5]),
                    state: d.state.load(Relaxed),
                }
            })
            .collect(),
        rebuild: (rebuild_plus_one > 0).then(|| RebuildSample {
            disk: DiskIndex((rebuild_plus_one - 1) as u32),
            done_bytes: metrics.rebuild_done_bytes.load(Relaxed),
            total_bytes: metrics.rebuild_total_bytes.load(Relaxed),
        }),
        cycle: metrics.cycle(),
        staging: None,
    }
}

/// The ring of recent samples (as JSON text) and the channel that
/// announces new ones.
pub struct History {
    inner: Mutex<Inner>,
}

struct Inner {
    ring: VecDeque<Arc<str>>,
    /// `None` once the sampler has stopped: event streams then end.
    sender: Option<broadcast::Sender<Arc<str>>>,
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

impl History {
    pub fn new() -> History {
        let (sender, _) = broadcast::channel(BROADCAST_CAPACITY);
        History {
            inner: Mutex::new(Inner {
                ring: VecDeque::with_capacity(HISTORY_ROUNDS),
                sender: Some(sender),
            }),
        }
    }

    /// Adds a sample and announces it; never waits for a receiver.
    pub fn push(&self, sample: &RoundSample) {
        let json: Arc<str> = serde_json::to_string(sample).expect("serialisable").into();
        let mut inner = self.inner.lock().expect("history lock");
        if inner.ring.len() == HISTORY_ROUNDS {
            inner.ring.pop_front();
        }
        inner.ring.push_back(Arc::clone(&json));
        if let Some(sender) = &inner.sender {
            // An error only means nobody is listening.
            let _ = sender.send(json);
        }
    }

    /// The samples so far and a receiver of the ones that follow, taken
    /// together so that none is missed or repeated. No receiver once the
    /// sampler has stopped.
    pub fn subscribe(&self) -> (Vec<Arc<str>>, Option<broadcast::Receiver<Arc<str>>>) {
        let inner = self.inner.lock().expect("history lock");
        let recent = inner.ring.iter().cloned().collect();
        (recent, inner.sender.as_ref().map(|s| s.subscribe()))
    }

    /// Number of samples held.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("history lock").ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends every event stream (at shutdown).
    pub fn close(&self) {
        self.inner.lock().expect("history lock").sender = None;
    }
}

/// Samples `shared` late in each round until the server shuts down or is
/// dropped, then closes `history`.
pub async fn run_sampler(shared: Weak<Shared>, history: Arc<History>) {
    let Some(first) = shared.upgrade() else {
        history.close();
        return;
    };
    let round_duration_ns = first.round_duration_ns();
    let clock_t0 = first.clock.t0;
    let mut before = Totals::read(&first.metrics);
    drop(first);
    // Sample at 90% of each round: the round's batches have normally
    // reported by then, and the next round's reservations are not yet added.
    let offset = Duration::from_nanos(round_duration_ns / 10 * 9);
    // Whole rounds in `elapsed`.
    let rounds_in =
        |elapsed: Duration| (elapsed.as_nanos() / u128::from(round_duration_ns.max(1))) as u64;
    let mut index = rounds_in(std::time::Instant::now().saturating_duration_since(clock_t0));
    loop {
        let at = clock_t0 + Duration::from_nanos(round_duration_ns.saturating_mul(index)) + offset;
        // Wait for `at`, looking at the shutdown flag now and then.
        loop {
            let Some(shared) = shared.upgrade() else {
                history.close();
                return;
            };
            if shared.shutting_down.load(Relaxed) {
                history.close();
                return;
            }
            drop(shared);
            let now = std::time::Instant::now();
            if now >= at {
                break;
            }
            tokio::time::sleep((at - now).min(SHUTDOWN_POLL)).await;
        }
        let Some(shared) = shared.upgrade() else {
            history.close();
            return;
        };
        // Streams first: an admission between the two readings is then in
        // this sample's count and in the next sample's streams, never
        // among the streams before it is counted.
        let active = shared.active_streams();
        let now = Totals::read(&shared.metrics);
        if now.rounds > before.rounds {
            let mut round = sample(&shared.metrics, &before, &now, active, round_duration_ns);
            if shared.staging.has_tiers() {
                round.staging = Some(shared.staging.snapshot());
            }
            history.push(&round);
            before = now;
        }
        drop(shared);
        // The next round not yet past its sampling instant.
        let elapsed = std::time::Instant::now().saturating_duration_since(clock_t0);
        index = (rounds_in(elapsed.saturating_sub(offset)) + 1).max(index + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_the_difference_of_totals() {
        let metrics = Metrics::new(2);
        metrics.rounds.store(10, Relaxed);
        metrics.admitted.store(3, Relaxed);
        metrics.disks[0].reserved_ns_total.store(1_000, Relaxed);
        metrics.disks[0].measured_busy_ns_total.store(400, Relaxed);
        let before = Totals::read(&metrics);
        metrics.rounds.store(11, Relaxed);
        metrics.admitted.store(5, Relaxed);
        metrics.rejected_disk_time.store(4, Relaxed);
        metrics.stream_round_misses.store(1, Relaxed);
        metrics.disks[0].reserved_ns_total.store(1_300, Relaxed);
        metrics.disks[0].model_busy_ns_total.store(90, Relaxed);
        metrics.disks[0].measured_busy_ns_total.store(500, Relaxed);
        metrics.disks[1].state.store(2, Relaxed);
        metrics.rebuild_disk_plus_one.store(2, Relaxed);
        metrics.rebuild_total_bytes.store(100, Relaxed);
        let now = Totals::read(&metrics);
        let s = sample(&metrics, &before, &now, 7, 1_000_000_000);
        assert_eq!((s.round, s.rounds, s.active_streams), (Round(10), 1, 7));
        assert_eq!((s.admitted, s.rejected_disk_time, s.misses), (2, 4, 1));
        assert_eq!(
            (
                s.disks[0].reserved_ns,
                s.disks[0].model_busy_ns,
                s.disks[0].measured_busy_ns
            ),
            (300, 90, 100)
        );
        assert_eq!((s.disks[1].state, s.disks[1].reserved_ns), (2, 0));
        assert_eq!(
            s.rebuild,
            Some(RebuildSample {
                disk: DiskIndex(1),
                done_bytes: 0,
                total_bytes: 100
            })
        );
    }

    #[test]
    fn the_ring_is_bounded_and_subscribers_get_what_follows() {
        let metrics = Metrics::new(1);
        let totals = Totals::read(&metrics);
        let history = History::new();
        let mut s = sample(&metrics, &totals, &totals, 0, 1);
        for round in 0..(HISTORY_ROUNDS as u64 + 5) {
            s.round = Round(round);
            history.push(&s);
        }
        let (recent, receiver) = history.subscribe();
        assert_eq!(recent.len(), HISTORY_ROUNDS);
        assert!(recent[0].contains("\"round\":5,"), "{}", recent[0]);
        let mut receiver = receiver.expect("open");
        s.round = Round(999);
        history.push(&s);
        assert!(
            receiver
                .try_recv()
                .expect("announced")
                .contains("\"round\":999,")
        );
        // A receiver that falls behind loses samples; push never waits.
        for _ in 0..(BROADCAST_CAPACITY + 10) {
            history.push(&s);
        }
        assert!(matches!(
            receiver.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
        history.close();
        assert!(history.subscribe().1.is_none());
    }
}
