//! One module per top-level subcommand.

pub mod admin;
pub mod bench;
pub mod disk;
pub mod experiment;
pub mod fsck;
pub mod ingest;
pub mod layout_args;
pub mod load;
pub mod node;
pub mod policy_args;
pub mod serve;
pub mod simulate;
pub mod simulate_tier;
pub mod tier;
pub mod trace;
