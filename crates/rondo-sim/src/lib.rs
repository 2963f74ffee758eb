//! The simulator: drives rondo's core on a virtual clock.
//!
//! Owns the virtual clock, simulated disks executing each round's batch,
//! workloads (Poisson arrivals, round-robin or Zipf title choice), fault
//! injection and metrics. One run is single-threaded and deterministic for its
//! seed; it touches no network, no wall clock and spawns no threads. Every
//! decision (admission, which replica each disk reads) is the core's
//! (`rondo-model`), so a simulated result describes the code the server runs.

pub mod cluster;
pub mod faults;
pub mod run;
pub mod tier;
pub mod titles;
pub mod workload;
