//! Helpers shared by rondo's test suites (a dev-dependency only; never
//! published).
//!
//! - [`media`]: clips made at test time with ffmpeg from lavfi sources, and
//!   the checks that ffmpeg (or an encoder) is there.
//! - [`process`]: the built `rondo` binary as a child process: `rondo serve`
//!   started and waited for, killed on drop; a subcommand's JSON output.
//! - [`http`]: the small HTTP requests the end-to-end tests make again and
//!   again.
//! - [`netns`]: hosts in network namespaces on one bridge, for the
//!   cluster tests, with cuts and partitions.
//! - [`files`]: damage done to files on purpose (a flipped byte).
//! - [`fuzz`]: a seeded mutation fuzzer for parsers, run as tests.
//! - [`s3`]: a real S3 server (s3s-fs) over a directory, in process, for
//!   the S3 tier's tests; also the `rondo-test-s3` binary.

pub mod browser;
pub mod files;
pub mod fuzz;
pub mod http;
pub mod media;
pub mod netns;
pub mod process;
pub mod s3;
