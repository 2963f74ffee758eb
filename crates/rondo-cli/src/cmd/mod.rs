//! One module per top-level subcommand.

pub mod disk;
pub mod experiment;
pub mod simulate;
pub mod trace;
