//! Experiments: sweeps of simulator runs, replicated until their confidence
//! intervals are tight, summarised as tables, JSON, CSV and plots.
//!
//! Owns experiment definitions as data (TOML under `experiments/`), running
//! independent seeded replications in parallel across cores, confidence
//! intervals, and output. It contains no decision that belongs in the core:
//! every run is a `rondo-sim` run of `rondo-model` code (seed 004's time-cycle
//! runs are driven by `cycle_sim`, a small driver of `rondo_model::cycle`).

pub mod cluster;
pub mod cycle;
pub mod cycle_sim;
pub mod jukebox;
pub mod plot;
pub mod runner;
pub mod spec;
pub mod stats;
