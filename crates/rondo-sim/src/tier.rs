//! A tier below the array in simulation (seed 002 with rondo's staging):
//! start-up delay against request rate for a library on optical
//! jukeboxes, a popularity and an array that holds some of it.
//!
//! Requests arrive as a Poisson process (seeded) for titles chosen by Zipf
//! popularity. A title on the array starts at once (a hit). Otherwise a
//! staging brings it: its extent files are read by the core's
//! `JukeboxFarm` (FIFO drives and arms, discs left in drives), then written
//! to the array in the rounds `Array::predict_write` gives (the caller runs
//! it for the configuration), and the title is ready at
//! `tier::staging::ready_ns`; requests for a title being staged wait for
//! the same staging. When the array is full, a staged title leaves it in
//! `tier::staging::eviction_order` (least requested first, never one being
//! played); a staging that finds every staged title playing is refused, as
//! the server refuses it. Each stream plays for the title's duration.
//! Deterministic for its seed; no clock, no threads.

use std::collections::BTreeMap;

use rondo_model::array::WritePrediction;
use rondo_model::tier::jukebox::{DiscId, JukeboxFarm, JukeboxParams, optimal_stripe_factor};
use rondo_model::tier::staging::{StagedTitle, eviction_order, ready_ns};
use rondo_model::units::NS_PER_S;
use serde::Serialize;

use crate::run::{SimConfig, SimError, SimTitle, place_ingest, place_titles, prepare_placed};
use crate::workload::{PoissonArrivals, TitleChoice};

/// How `config`'s array writes one tier title of `title_bytes` played over
/// `duration_ns` (a constant bitrate): `Array::predict_write` on the idle
/// array for the layout the title would get, and how many such titles the
/// array holds (its strides over the title's, primary and backups).
pub fn staging_write(
    config: &SimConfig,
    title_bytes: u64,
    duration_ns: u64,
) -> Result<(WritePrediction, u32), SimError> {
    let rounds = duration_ns.div_ceil(config.round_duration_ns).max(1);
    let per_round = title_bytes.div_ceil(rounds);
    let schedule = rondo_model::schedule::Schedule::from_client_bytes(
        vec![per_round; rounds as usize],
        config.round_duration_ns,
        config.block_bytes,
    )
    .map_err(|e| SimError::Config(format!("a tier title's schedule: {e}")))?;
    let title = SimTitle {
        name: "tier".into(),
        schedule,
    };
    let profile = config.disk_profile([&title.schedule])?;
    let (bound, placed) = place_titles(config, &profile, std::slice::from_ref(&title))?;
    let layout = place_ingest(config, &profile, &placed, 0)?;
    let title_strides = layout.strides().count().max(1);
    let strides_per_disk = profile.capacity_bytes()? / config.stride_bytes;
    let array_titles = (strides_per_disk * u64::from(config.disks) / title_strides) as u32;
    let prepared = prepare_placed(config, &bound, &placed)?;
    let write = prepared
        .array()
        .predict_write(
            std::sync::Arc::new(layout),
            rondo_model::array::WriteLoad::AdmittedOnly,
        )
        .ok_or_else(|| SimError::Config("a tier title's write never fits a round".into()))?;
    Ok((write, array_titles))
}

/// One configuration of the tier simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierSimConfig {
    /// Titles in the library; all have their home on the jukeboxes.
    pub library_titles: u32,
    /// Bytes of each title's media file (what the jukebox reads).
    pub title_bytes: u64,
    pub title_duration_ns: u64,
    /// Staged titles the array holds at once.
    pub array_titles: u32,
    /// Zipf exponent of title popularity (0: uniform).
    pub zipf: f64,
    pub rate_per_s: f64,
    pub jukebox: JukeboxParams,
    pub jukeboxes: u32,
    /// SF; 0 = SF_opt for the title size.
    pub stripe_factor: u32,
    /// How the array writes one title (`Array::predict_write` on the
    /// configuration's array).
    pub write: WritePrediction,
    pub round_duration_ns: u64,
    pub warmup_requests: u64,
    pub measured_requests: u64,
    pub seed: u64,
}

/// What one run measured over its measured requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierSimResult {
    /// Start-up delay of the requests served (hits count 0).
    pub mean_delay_s: f64,
    pub p95_delay_s: f64,
    /// Requests that found their title on the array (of all measured).
    pub hit_ratio: f64,
    /// Mean delay of the requests that did not.
    pub mean_miss_delay_s: f64,
    /// Requests refused (their staging found every staged title playing).
    pub refused_ratio: f64,
    pub stagings: u64,
    pub evictions: u64,
    /// The stripe factor used.
    pub stripe_factor: u32,
}

struct Title {
    requests: u64,
    last_request_ns: u64,
    /// Ready time of its staging in progress, or when it was staged.
    ready_ns: Option<u64>,
    staged: bool,
    playing_until_ns: u64,
}

/// Runs one replication.
pub fn run_tier(config: &TierSimConfig) -> TierSimResult {
    assert!(config.library_titles > 0 && config.array_titles > 0);
    let sf = match config.stripe_factor {
        0 => optimal_stripe_factor(&config.jukebox, config.title_bytes),
        sf => sf,
    }
    .max(1);
    let jukeboxes = config.jukeboxes.max(1);
    let discs = u64::from(jukeboxes) * u64::from(config.jukebox.slots);
    // Title f's extent files are on discs f·SF .. f·SF + SF − 1, numbered
    // round-robin over the jukeboxes (as seed002-contention).
    let disc = |g: u64| {
        let g = g % discs;
        DiscId {
            jukebox: (g % u64::from(jukeboxes)) as u32,
            slot: (g / u64::from(jukeboxes)) as u32,
        }
    };
    let per_disc = config.title_bytes.div_ceil(u64::from(sf));
    let mut farm = JukeboxFarm::new(config.jukebox, jukeboxes);
    let mut arrivals = PoissonArrivals::new(config.rate_per_s, config.seed);
    let mut choice = TitleChoice::zipf(
        config.library_titles as usize,
        config.zipf,
        config.seed.wrapping_add(1),
    );
    let mut titles: Vec<Title> = (0..config.library_titles)
        .map(|_| Title {
            requests: 0,
            last_request_ns: 0,
            ready_ns: None,
            staged: false,
            playing_until_ns: 0,
        })
        .collect();
    // Stagings in progress by ready time (then title), and the requests
    // each one holds.
    let mut pending: BTreeMap<(u64, usize), Vec<u64>> = BTreeMap::new();
    let mut staged_count = 0u32;
    let mut delays_s: Vec<f64> = Vec::new();
    let (mut hits, mut refused, mut stagings, mut evictions) = (0u64, 0u64, 0u64, 0u64);
    let total = config.warmup_requests + config.measured_requests;
    let measured = |n: u64| n >= config.warmup_requests;
    for n in 0..total {
        let now_ns = (arrivals.next_arrival_rounds() * NS_PER_S as f64) as u64;
        // Stagings that end by now, in time order: the title goes on the
        // array (evicting if it must) and its waiting requests start.
        while let Some((&(ready, t), _)) = pending.iter().next() {
            if ready > now_ns {
                break;
            }
            let waiting = pending.remove(&(ready, t)).expect("present");
            let admitted = if staged_count < config.array_titles {
                true
            } else {
                let candidates: Vec<StagedTitle> = titles
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| x.staged)
                    .map(|(i, x)| StagedTitle {
                        id: i as u64,
                        requests: x.requests,
                        last_request_ns: x.last_request_ns,
                        pinned: false,
                        streaming: x.playing_until_ns > ready,
                    })
                    .collect();
                match eviction_order(&candidates).first() {
                    Some(&victim) => {
                        titles[victim as usize].staged = false;
                        titles[victim as usize].ready_ns = None;
                        staged_count -= 1;
                        evictions += 1;
                        true
                    }
                    None => false,
                }
            };
            let title = &mut titles[t];
            if admitted {
                title.staged = true;
                staged_count += 1;
                for &arrival in &waiting {
                    title.playing_until_ns =
                        title.playing_until_ns.max(ready + config.title_duration_ns);
                    if arrival != u64::MAX {
                        delays_s.push((ready - arrival) as f64 / NS_PER_S as f64);
                    }
                }
            } else {
                title.ready_ns = None;
                refused += waiting.iter().filter(|&&a| a != u64::MAX).count() as u64;
            }
        }
        let t = choice.next_title();
        let title = &mut titles[t];
        title.requests += 1;
        title.last_request_ns = now_ns;
        // u64::MAX marks a request before the measurement window.
        let mark = if measured(n) { now_ns } else { u64::MAX };
        if title.staged {
            title.playing_until_ns = title
                .playing_until_ns
                .max(now_ns + config.title_duration_ns);
            if measured(n) {
                hits += 1;
                delays_s.push(0.0);
            }
            continue;
        }
        if let Some(ready) = title.ready_ns {
            pending.get_mut(&(ready, t)).expect("a staging").push(mark);
            continue;
        }
        let extents: Vec<(DiscId, u64)> = (0..u64::from(sf))
            .map(|i| (disc(t as u64 * u64::from(sf) + i), per_disc))
            .collect();
        let fetched = farm.submit(now_ns, &extents).done_ns;
        let ready = ready_ns(fetched, config.round_duration_ns, config.write);
        title.ready_ns = Some(ready);
        pending.insert((ready, t), vec![mark]);
        stagings += 1;
    }
    // Requests still waiting at the end: their stagings complete in time
    // order as above would, without further arrivals; count their delays.
    for ((ready, _), waiting) in pending {
        for arrival in waiting.into_iter().filter(|&a| a != u64::MAX) {
            delays_s.push((ready - arrival) as f64 / NS_PER_S as f64);
        }
    }
    let served = delays_s.len().max(1) as f64;
    let offered = served + refused as f64;
    let misses: Vec<f64> = delays_s.iter().copied().filter(|&d| d > 0.0).collect();
    let mean = delays_s.iter().sum::<f64>() / served;
    let mut sorted = delays_s.clone();
    sorted.sort_by(f64::total_cmp);
    let p95 = sorted
        .get(((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len().max(1)) - 1)
        .copied()
        .unwrap_or(0.0);
    TierSimResult {
        mean_delay_s: mean,
        p95_delay_s: p95,
        hit_ratio: hits as f64 / offered,
        mean_miss_delay_s: if misses.is_empty() {
            0.0
        } else {
            misses.iter().sum::<f64>() / misses.len() as f64
        },
        refused_ratio: refused as f64 / offered,
        stagings,
        evictions,
        stripe_factor: sf,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rate_per_hour: f64, array_titles: u32) -> TierSimConfig {
        TierSimConfig {
            library_titles: 200,
            title_bytes: 500_000_000,
            title_duration_ns: 1_800 * NS_PER_S,
            array_titles,
            zipf: 1.0,
            rate_per_s: rate_per_hour / 3_600.0,
            jukebox: JukeboxParams::nsm_satellite(),
            jukeboxes: 4,
            stripe_factor: 0,
            write: WritePrediction {
                rounds: 10,
                last_round_busy_ns: 500_000_000,
            },
            round_duration_ns: NS_PER_S,
            warmup_requests: 200,
            measured_requests: 2_000,
            seed: 7,
        }
    }

    #[test]
    fn a_lone_miss_waits_t_sf_then_the_writes() {
        // One request on an idle farm: T(SF) for 500 MB at SF_opt = 4 over
        // four jukeboxes (59.0 s), then the 10 write rounds.
        let mut c = config(1.0, 10);
        c.warmup_requests = 0;
        c.measured_requests = 1;
        let r = run_tier(&c);
        assert_eq!(r.stripe_factor, 4);
        assert_eq!(r.stagings, 1);
        let t_sf = rondo_model::tier::jukebox::response_time_ns(&c.jukebox, c.title_bytes, 4, 4);
        // Arrival at a random instant; the write starts at the next round.
        assert!(
            (r.mean_delay_s - (t_sf as f64 / 1e9 + 9.5)).abs() < 1.0,
            "{r:?}"
        );
    }

    #[test]
    fn more_room_means_more_hits_and_heavy_load_queues_stagings() {
        let small = run_tier(&config(60.0, 10));
        let large = run_tier(&config(60.0, 60));
        assert!(large.hit_ratio > small.hit_ratio, "{small:?} {large:?}");
        assert!(
            large.mean_delay_s < small.mean_delay_s,
            "{small:?} {large:?}"
        );
        // Near the drives' saturation, stagings queue for drives and arms.
        let heavy = run_tier(&config(1_500.0, 60));
        assert!(
            heavy.mean_miss_delay_s > 1.5 * large.mean_miss_delay_s,
            "{heavy:?} {large:?}"
        );
        // Same seed, same run.
        assert_eq!(run_tier(&config(60.0, 10)), small);
    }
}
