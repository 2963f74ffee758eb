//! rondo's pure core: every decision the server and the simulator share.
//!
//! This crate owns units and ids, disk timing models, stream schedules, stride
//! allocation and variable-grain striping, replica placement, reservations and
//! admission, round planning and failure handling. It does no I/O, reads no
//! clock, spawns no threads and draws no unseeded random numbers: callers hand
//! it the time, the inputs and any seeded PRNG state. The simulator
//! (`rondo-sim`) and the server (`rondo-server`) are two drivers of this code,
//! so a simulated result is a statement about the code that serves streams.

pub mod array;
pub mod cluster;
pub mod cycle;
pub mod disk;
pub mod health;
pub mod interface;
pub mod layout;
pub mod rebuild;
pub mod reservation;
pub mod retrieval;
pub mod schedule;
pub mod tier;
pub mod units;

pub use units::*;
