//! The charged stroke: which part of its drives' stroke a directory's
//! rondo bound charges seeks for, and its widening while streams play.
//!
//! Under `Stroke::Whole` the bound is the drive's (seed 000's worst case:
//! two full strokes and a sweep, a seek line over every distance) and
//! never changes. Under `Stroke::Data` it is the drive short-stroked to the
//! least share of its cylinders that holds every allocated stride
//! (`titles::rondo_bound`): first fit keeps the data packed from LBN 0, so
//! the heads never seek past it. An ingest (or a tier's staging) whose
//! placement reaches past that share asks for it to widen before any byte
//! is written ([`ChargedStroke::cover`]): every title is charged again under
//! the wider stroke's bound and the array takes it only if every stream
//! admitted now still fits (`Array::recharge`); otherwise the ingest is
//! refused and its strides given back, and the bound in force stays an
//! upper bound for everything on the disks. The stroke never narrows while
//! serving (a delete leaves it); a restart charges where the data then ends.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde::Serialize;

use rondo_model::layout::TitleLayout;
use rondo_model::reservation::{Bound, TitleCharges};
use rondo_model::units::TitleId;
use rondo_store::Stroke;
use rondo_store::titles::{ChargedDrive, LoadedTitle, rondo_bound, title_charges};

use crate::state::Shared;

/// The bound in force and the drive it charges. Held locked while a title's
/// charges are computed and it is added to the array, so that no widening
/// falls between the two.
pub struct ChargedStroke {
    stroke: Stroke,
    state: Mutex<StrokeState>,
    /// What the API and the dashboard show: written after a widening,
    /// read without the lock above (the round driver reads it, and a
    /// widening holds that lock while it waits for the driver).
    published: RwLock<StrokeStatus>,
}

/// The charged stroke as `/api/disks` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct StrokeStatus {
    pub stroke: Stroke,
    /// The drive charged (the profile, or it short-stroked: `-outer<P>`).
    pub charged_profile: String,
    /// Its share of the stroke, in percent.
    pub stroke_percent: u32,
    /// Widenings since start, and widenings refused (their ingest with them).
    pub widened: u64,
    pub refused: u64,
}

/// What [`ChargedStroke::hold`] gives: the bound to charge a new title with.
pub struct StrokeState {
    pub bound: Bound,
    pub drive: ChargedDrive,
    /// Strides per disk the charged drive holds (`u64::MAX` for the whole
    /// drive: nothing lies past it).
    strides_covered: u64,
}

impl ChargedStroke {
    pub fn new(
        stroke: Stroke,
        bound: Bound,
        drive: ChargedDrive,
        array: &rondo_store::ArrayConfig,
    ) -> Result<ChargedStroke, String> {
        let strides_covered = strides_covered(&drive, array)?;
        Ok(ChargedStroke {
            stroke,
            published: RwLock::new(StrokeStatus {
                stroke,
                charged_profile: drive.profile_name.clone(),
                stroke_percent: drive.stroke_percent,
                widened: 0,
                refused: 0,
            }),
            state: Mutex::new(StrokeState {
                bound,
                drive,
                strides_covered,
            }),
        })
    }

    pub fn stroke(&self) -> Stroke {
        self.stroke
    }

    /// The bound and drive in force, locked: no widening until dropped.
    pub fn hold(&self) -> MutexGuard<'_, StrokeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The charged stroke now (never waits on a widening).
    pub fn status(&self) -> StrokeStatus {
        self.published
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn publish(&self, update: impl FnOnce(&mut StrokeStatus)) {
        update(&mut self.published.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// Makes the charged stroke cover a placed title's strides, before any
    /// of its bytes is written: widens it when they reach past it and every
    /// admitted stream fits the wider stroke's bound; the reason otherwise.
    pub fn cover(&self, shared: &Shared, layout: &TitleLayout) -> Result<(), String> {
        if self.stroke == Stroke::Whole {
            return Ok(());
        }
        let Some(highest) = layout.strides().iter().map(|(_, _, s)| s).max() else {
            return Ok(());
        };
        let mut state = self.hold();
        if highest < state.strides_covered {
            return Ok(());
        }
        let (bound, drive) = rondo_bound(&shared.array, self.stroke, Some(highest))
            .map_err(|e| format!("charging the stroke to stride {highest}: {e}"))?;
        let strides = strides_covered(&drive, &shared.array)?;
        // Every title the array holds, charged under the wider stroke.
        let reads = shared.read_charging();
        let titles: Vec<Arc<LoadedTitle>> = shared
            .titles
            .read()
            .expect("titles lock")
            .values()
            .cloned()
            .collect();
        let mut charges: BTreeMap<TitleId, (Arc<TitleCharges>, Vec<Arc<TitleCharges>>)> =
            BTreeMap::new();
        for t in &titles {
            let (own, groups) = title_charges(&bound, reads, &t.plan, &t.layout, &t.schedule)
                .map_err(|e| format!("charging title {} anew: {e}", t.id().0))?;
            charges.insert(
                t.id(),
                (Arc::new(own), groups.into_iter().map(Arc::new).collect()),
            );
        }
        let reservation = crate::server::reservation_config(
            &shared.array,
            &shared.config,
            &bound,
            shared.horizon_stream_rounds,
        )
        .map_err(|e| e.to_string())?;
        let taken_bound = bound.clone();
        let outcome = shared.with_core_blocking(move |_, core| {
            core.array.recharge(taken_bound, reservation, &charges)
        });
        let from = state.drive.stroke_percent;
        match outcome {
            Some(Ok(())) => {
                tracing::info!(
                    from_percent = from,
                    to_percent = drive.stroke_percent,
                    profile = %drive.profile_name,
                    "the charged stroke widened to hold a new title"
                );
                shared
                    .metrics
                    .charged_stroke_percent
                    .store(u64::from(drive.stroke_percent), Relaxed);
                shared.metrics.stroke_widenings.fetch_add(1, Relaxed);
                self.publish(|p| {
                    p.charged_profile = drive.profile_name.clone();
                    p.stroke_percent = drive.stroke_percent;
                    p.widened += 1;
                });
                state.bound = bound;
                state.drive = drive;
                state.strides_covered = strides;
                Ok(())
            }
            Some(Err(why)) => {
                self.publish(|p| p.refused += 1);
                Err(format!(
                    "its data would reach stride {highest}, past the {from}% of the drives' \
                     stroke charged now, and the {}% that would hold it cannot be charged: \
                     {why}; try again when fewer streams play",
                    drive.stroke_percent
                ))
            }
            None => Err("the server is stopping".into()),
        }
    }
}

/// Strides per disk `drive` holds (its capacity in whole strides), or
/// `u64::MAX` for the whole drive.
fn strides_covered(drive: &ChargedDrive, array: &rondo_store::ArrayConfig) -> Result<u64, String> {
    if drive.stroke_percent >= 100 {
        return Ok(u64::MAX);
    }
    let profile =
        rondo_model::disk::profile_by_name(&drive.profile_name).map_err(|e| e.to_string())?;
    let bytes = profile.capacity_bytes().map_err(|e| e.to_string())?;
    Ok(bytes / array.stride_bytes)
}
