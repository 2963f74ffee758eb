//! Optical jukeboxes (seed 002): robot arms, drives and discs, the response
//! time of a striped file, and its queueing under contention.
//!
//! A jukebox has one robot arm, a few drives and magazine slots of discs. To
//! read a disc that is not in a drive, the arm moves it from its slot into a
//! free drive (an *exchange*, which also puts the drive's old disc back),
//! the disc spins up, and the drive seeks, waits for the rotation and
//! transfers at X_drive. A *striped file* is cut into SF extent files on SF
//! discs, read in parallel. Seed 002 §4 gives the response time of one
//! request on an idle system:
//!
//! T(SF) = SF·T_exchange + T_spinup + T_rot + T_seek + (F / X_drive) / SF
//!
//! on one jukebox, whose single arm does the SF exchanges one after the
//! other; across J jukeboxes each arm does ⌈SF / J⌉ of them
//! ([`response_time_ns`]). SF_opt = round(√((F / X_drive) / T_exchange)).
//!
//! [`JukeboxFarm`] adds what the paper only states, contention: requests
//! queue for drives and arms. Requests are served first come, first
//! served: each extent file, in arrival order, takes the drive of its
//! jukebox that frees first (one already holding its disc if there is one:
//! no exchange), then the arm when both are free. This list schedule is a
//! FIFO queue in front of each jukebox's drive pool and arm; it is exact
//! for a single request (the closed form, as a test) and deterministic.
//! Times are model nanoseconds; nothing here reads a clock.

use serde::Serialize;

use crate::units::NS_PER_S;

/// One jukebox model's timing and size.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JukeboxParams {
    /// T_exchange: the arm moves a disc between a slot and a drive.
    pub exchange_ns: u64,
    /// T_spinup of a disc just loaded.
    pub spinup_ns: u64,
    /// T_seek: the head's move to an extent file.
    pub seek_ns: u64,
    /// T_rot: mean rotational latency.
    pub rotation_ns: u64,
    /// X_drive: one drive's transfer rate.
    pub drive_rate_bytes_per_s: u64,
    pub drives: u32,
    /// Magazine slots (discs a jukebox holds).
    pub slots: u32,
}

impl JukeboxParams {
    /// The NSM Satellite of seed 002 §4 (Fig. 2): exchange 8.7 s, spin-up
    /// 8.6 s, 3 MB/s (MB = 10^6 bytes) per drive; 4 drives ("small
    /// jukeboxes have often 4 optical disk drive units", §4, Fig. 1).
    /// Assumptions (the paper gives no value): T_seek 100 ms, inside its
    /// "typically 70 to 140 ms"; T_rot 6 ms, half a revolution of a CD at
    /// 5,000 rpm; 100 slots. With them a 500 MB file takes 184.1 s
    /// unstriped, where Fig. 2 says 184 s.
    pub fn nsm_satellite() -> JukeboxParams {
        JukeboxParams {
            exchange_ns: 8_700_000_000,
            spinup_ns: 8_600_000_000,
            seek_ns: 100_000_000,
            rotation_ns: 6_000_000,
            drive_rate_bytes_per_s: 3_000_000,
            drives: 4,
            slots: 100,
        }
    }

    /// F / X_drive, rounded up to the nanosecond.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        (u128::from(bytes) * u128::from(NS_PER_S)).div_ceil(u128::from(self.drive_rate_bytes_per_s))
            as u64
    }

    /// Spin-up, seek and rotation: what follows an exchange before data.
    fn access_ns(&self) -> u64 {
        self.spinup_ns + self.seek_ns + self.rotation_ns
    }
}

/// Seed 002's T(SF) for a file of `file_bytes` striped evenly over `sf`
/// discs spread round-robin over `jukeboxes` jukeboxes (1: all in one),
/// on an idle system with no disc already loaded.
pub fn response_time_ns(params: &JukeboxParams, file_bytes: u64, sf: u32, jukeboxes: u32) -> u64 {
    let sf = sf.max(1);
    let exchanges_per_arm = u64::from(sf.div_ceil(jukeboxes.clamp(1, sf)));
    exchanges_per_arm * params.exchange_ns
        + params.access_ns()
        + params.transfer_ns(file_bytes).div_ceil(u64::from(sf))
}

/// SF_opt = round(√((F / X_drive) / T_exchange)), at least 1.
pub fn optimal_stripe_factor(params: &JukeboxParams, file_bytes: u64) -> u32 {
    let ratio = params.transfer_ns(file_bytes) as f64 / params.exchange_ns as f64;
    (ratio.sqrt().round() as u32).max(1)
}

/// A disc: jukebox `jukebox`, slot `slot`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DiscId {
    pub jukebox: u32,
    pub slot: u32,
}

#[derive(Clone, Debug)]
struct Drive {
    loaded: Option<DiscId>,
    free_at_ns: u64,
}

#[derive(Clone, Debug)]
struct Jukebox {
    arm_free_at_ns: u64,
    drives: Vec<Drive>,
}

/// What a request's extent files went through.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Served {
    /// When the last extent file was read.
    pub done_ns: u64,
    /// Extent files whose disc had to be loaded.
    pub exchanges: u32,
    /// Extent files read from a disc already in a drive.
    pub loaded_hits: u32,
}

/// Several jukeboxes, each with its arm and drives, serving striped-file
/// requests first come, first served (see the module docs).
#[derive(Clone, Debug)]
pub struct JukeboxFarm {
    params: JukeboxParams,
    jukeboxes: Vec<Jukebox>,
}

impl JukeboxFarm {
    /// `jukeboxes` idle jukeboxes of `params`, no disc in any drive.
    pub fn new(params: JukeboxParams, jukeboxes: u32) -> JukeboxFarm {
        let jukebox = Jukebox {
            arm_free_at_ns: 0,
            drives: vec![
                Drive {
                    loaded: None,
                    free_at_ns: 0,
                };
                params.drives as usize
            ],
        };
        JukeboxFarm {
            params,
            jukeboxes: vec![jukebox; jukeboxes as usize],
        }
    }

    pub fn params(&self) -> &JukeboxParams {
        &self.params
    }

    pub fn jukebox_count(&self) -> u32 {
        self.jukeboxes.len() as u32
    }

    /// Serves a request arriving at `arrival_ns` for `extents` (disc and
    /// bytes of each extent file), after every request submitted before it.
    /// Arrivals must not go back in time.
    pub fn submit(&mut self, arrival_ns: u64, extents: &[(DiscId, u64)]) -> Served {
        let mut served = Served {
            done_ns: arrival_ns,
            ..Served::default()
        };
        for step in self.schedule(arrival_ns, extents) {
            if step.exchange_start_ns.is_some() {
                served.exchanges += 1;
            } else {
                served.loaded_hits += 1;
            }
            served.done_ns = served.done_ns.max(step.done_ns);
        }
        served
    }

    /// [`JukeboxFarm::submit`] with each extent file's own schedule: the
    /// drive it takes, when the arm starts its exchange (none when the disc
    /// is already in a drive), when its transfer starts and ends. The
    /// emulated jukebox (rondo-tier) sleeps until these instants, so the
    /// model is the one source of its timing.
    pub fn schedule(&mut self, arrival_ns: u64, extents: &[(DiscId, u64)]) -> Vec<ExtentStep> {
        let mut steps = Vec::with_capacity(extents.len());
        for &(disc, bytes) in extents {
            let p = self.params;
            let jukebox = &mut self.jukeboxes[disc.jukebox as usize];
            let holding = jukebox.drives.iter().position(|d| d.loaded == Some(disc));
            let drive_index = holding.unwrap_or_else(|| {
                (0..jukebox.drives.len())
                    .min_by_key(|&i| (jukebox.drives[i].free_at_ns, i))
                    .expect("a jukebox has drives")
            });
            let drive_free = jukebox.drives[drive_index].free_at_ns.max(arrival_ns);
            let (exchange_start_ns, read_start) = if holding.is_some() {
                (None, drive_free + p.seek_ns + p.rotation_ns)
            } else {
                let arm_start = drive_free.max(jukebox.arm_free_at_ns);
                jukebox.arm_free_at_ns = arm_start + p.exchange_ns;
                (Some(arm_start), arm_start + p.exchange_ns + p.access_ns())
            };
            let done = read_start + p.transfer_ns(bytes);
            let drive = &mut jukebox.drives[drive_index];
            let unloaded = drive.loaded.filter(|&d| d != disc);
            drive.loaded = Some(disc);
            drive.free_at_ns = done;
            steps.push(ExtentStep {
                disc,
                drive: drive_index as u32,
                unloaded: if holding.is_some() { None } else { unloaded },
                exchange_start_ns,
                transfer_start_ns: read_start,
                done_ns: done,
            });
        }
        steps
    }

    /// The disc each drive of `jukebox` holds.
    pub fn loaded(&self, jukebox: u32) -> Vec<Option<DiscId>> {
        self.jukeboxes[jukebox as usize]
            .drives
            .iter()
            .map(|d| d.loaded)
            .collect()
    }

    /// Drives busy at `now_ns` (serving or with work queued), over all
    /// jukeboxes.
    pub fn busy_drives(&self, now_ns: u64) -> u32 {
        self.jukeboxes
            .iter()
            .flat_map(|j| &j.drives)
            .filter(|d| d.free_at_ns > now_ns)
            .count() as u32
    }

    /// When the last work queued so far ends.
    pub fn idle_at_ns(&self) -> u64 {
        self.jukeboxes
            .iter()
            .flat_map(|j| {
                j.drives
                    .iter()
                    .map(|d| d.free_at_ns)
                    .chain([j.arm_free_at_ns])
            })
            .max()
            .unwrap_or(0)
    }
}

/// One extent file's part in a request: see [`JukeboxFarm::schedule`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExtentStep {
    pub disc: DiscId,
    /// The drive of the disc's jukebox that reads it.
    pub drive: u32,
    /// The disc the exchange takes out of that drive, if it held one.
    pub unloaded: Option<DiscId>,
    /// When the arm starts the exchange; `None` when the disc was in the
    /// drive already.
    pub exchange_start_ns: Option<u64>,
    /// When the transfer starts (after exchange, spin-up, seek and rotation).
    pub transfer_start_ns: u64,
    pub done_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn seconds(ns: u64) -> f64 {
        ns as f64 / NS_PER_S as f64
    }

    fn within(got_ns: u64, paper_s: f64, tolerance: f64) {
        let got = seconds(got_ns);
        assert!(
            (got - paper_s).abs() <= tolerance * paper_s,
            "{got:.2} s against the paper's {paper_s} s"
        );
    }

    /// SF discs of one file: disc i in jukebox i mod J, slot i / J.
    fn striped(file_bytes: u64, sf: u32, jukeboxes: u32) -> Vec<(DiscId, u64)> {
        (0..sf)
            .map(|i| {
                (
                    DiscId {
                        jukebox: i % jukeboxes,
                        slot: i / jukeboxes,
                    },
                    file_bytes / u64::from(sf),
                )
            })
            .collect()
    }

    #[test]
    fn seed002_section4_numbers_come_out_of_the_model() {
        let p = JukeboxParams::nsm_satellite();
        // Fig. 2: 500 MB unstriped, 184 s; Fig. 3: SF = 4 in one jukebox,
        // 85 s; Fig. 5: SF = 4 across four jukeboxes, 59 s. Within 2%.
        within(response_time_ns(&p, 500 * MB, 1, 1), 184.0, 0.02);
        within(response_time_ns(&p, 500 * MB, 4, 1), 85.0, 0.02);
        within(response_time_ns(&p, 500 * MB, 4, 4), 59.0, 0.02);
        // The speed-ups the paper states: 2.16 and 3.1.
        let t1 = response_time_ns(&p, 500 * MB, 1, 1) as f64;
        let speedup_one = t1 / response_time_ns(&p, 500 * MB, 4, 1) as f64;
        let speedup_four = t1 / response_time_ns(&p, 500 * MB, 4, 4) as f64;
        assert!((speedup_one - 2.16).abs() < 0.03, "{speedup_one}");
        assert!((speedup_four - 3.1).abs() < 0.05, "{speedup_four}");
        // SF_opt for 500 MB is 4, and it is T(SF)'s minimum on one jukebox.
        assert_eq!(optimal_stripe_factor(&p, 500 * MB), 4);
        let best = (1..=12)
            .min_by_key(|&sf| response_time_ns(&p, 500 * MB, sf, 1))
            .unwrap();
        assert_eq!(best, 4);
        // Far past SF_opt the time grows with slope T_exchange.
        let slope = response_time_ns(&p, 500 * MB, 41, 1) - response_time_ns(&p, 500 * MB, 40, 1);
        assert!(
            slope.abs_diff(p.exchange_ns) < p.exchange_ns / 10,
            "{slope}"
        );
        // A small file gains nothing from striping.
        assert_eq!(optimal_stripe_factor(&p, 10 * MB), 1);
    }

    #[test]
    fn one_request_on_an_idle_farm_takes_the_closed_form_time() {
        let p = JukeboxParams::nsm_satellite();
        for (file, sf, jukeboxes) in [
            (500 * MB, 1, 1),
            (500 * MB, 4, 1),
            (500 * MB, 4, 4),
            (600 * MB, 3, 2),
        ] {
            let mut farm = JukeboxFarm::new(p, jukeboxes);
            let served = farm.submit(0, &striped(file, sf, jukeboxes));
            assert_eq!(
                served.done_ns,
                response_time_ns(&p, file, sf, jukeboxes),
                "F = {file}, SF = {sf}, J = {jukeboxes}"
            );
            assert_eq!(served.exchanges, sf);
        }
    }

    #[test]
    fn requests_contend_for_drives_and_the_arm_and_loaded_discs_skip_the_exchange() {
        let p = JukeboxParams::nsm_satellite();
        let mut farm = JukeboxFarm::new(p, 1);
        let first = farm.submit(0, &striped(500 * MB, 4, 1));
        // A second file on four other discs arriving at once waits for the
        // four drives to free, then the arm loads its discs one by one.
        let other: Vec<(DiscId, u64)> = (0..4)
            .map(|i| {
                (
                    DiscId {
                        jukebox: 0,
                        slot: 10 + i,
                    },
                    125 * MB,
                )
            })
            .collect();
        let second = farm.submit(0, &other);
        assert!(second.done_ns > first.done_ns + response_time_ns(&p, 500 * MB, 4, 1) / 2);
        // The first file again: its discs were put back, so they load again;
        // the second file's discs are still in the drives.
        let again = farm.submit(second.done_ns, &other);
        assert_eq!((again.exchanges, again.loaded_hits), (0, 4));
        assert_eq!(
            again.done_ns - second.done_ns,
            p.seek_ns + p.rotation_ns + p.transfer_ns(125 * MB)
        );
    }
}
