//! Tiers below the disk array (seed 002): where titles live that the array
//! does not hold, and what it costs to bring them back: the optical jukebox
//! model ([`jukebox`]) and which staged titles leave the array when it needs
//! room ([`staging`]).

pub mod jukebox;
pub mod staging;
