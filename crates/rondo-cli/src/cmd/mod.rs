//! One module per top-level subcommand.

pub mod disk;
pub mod trace;
