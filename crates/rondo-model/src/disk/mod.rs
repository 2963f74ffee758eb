//! Disk timing models (placeholder; see the disk-model work).
