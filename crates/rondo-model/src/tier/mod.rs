//! Tiers below the disk array (seed 002): where titles live that the array
//! does not hold, and what it costs to bring them back. Today: the optical
//! jukebox model ([`jukebox`]).

pub mod jukebox;
