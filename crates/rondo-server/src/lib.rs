//! The real server: rondo's core driven on the wall clock with real devices.
//!
//! Owns the round executor (one I/O thread per device, C-SCAN order, reads
//! paced to the disk model when emulated), buffers, HTTP delivery, the
//! control API, ingest into the store, and loading stored titles into the
//! core's reservation tables. Every decision (admission, which reads each
//! disk does each round, replica choice on failure) is `rondo-model`'s; this
//! crate executes them.

pub mod ingest;
pub mod titles;
