//! The real server: rondo's core driven on the wall clock with real devices.
//!
//! Owns the round executor (one I/O thread per device, C-SCAN order, reads
//! paced to the disk model when emulated), buffers, HTTP delivery, the
//! control API, ingest into the store, and loading stored titles into the
//! core's reservation tables. Every decision (admission, which reads each
//! disk does each round, replica choice on failure) is `rondo-model`'s; this
//! crate executes them. `docs/server.md` describes the whole.
//!
//! ```text
//! listener (connection bounds) --> HTTP (tokio, axum) --job--> round driver (owns Core: the array, sessions)
//!                                                                |  DiskBatch per disk and round
//!                                   I/O thread per device <------'
//!   piece --> session's piece queue      completion --> round driver --> array
//!   release from the driver --> send loop (sink: a batch per driver step) --> socket
//!                           `--> SessionBody (hyper polls it; SessionMsg) --> socket
//! ```

pub mod auth;
pub mod buffers;
pub mod config;
pub mod executor;
pub mod gate;
pub mod http;
pub mod ingest;
pub mod io;
pub mod listener;
pub mod metrics;
pub mod observe;
pub mod ops;
pub mod round;
pub mod server;
pub mod session;
pub mod sink;
pub mod staging;
pub mod state;
pub mod storage;
pub mod stroke;
pub mod tier_http;
pub mod titles;
pub mod zerocopy;

pub use config::{DiskTiming, ServerConfig};
pub use listener::ConnectionLimits;
pub use server::{
    RunningServer, SERVER_JSON, ServerError, init_logging, raise_open_files_limit,
    serve_until_signal, shutdown_signal,
};
