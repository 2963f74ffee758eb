//! A small mutation fuzzer for parsers, run as ordinary tests.
//!
//! This module owns rondo's fuzzing of untrusted input (HTTP `Range` and
//! `?t=`, MP4 and MPEG-TS parsing, the catalog's blob decoders). The
//! machine's one toolchain is stable Rust, on which `cargo fuzz` (it needs
//! `-Z` sanitizer flags) does not run, so the fuzzer is our own: it starts
//! from a corpus of valid inputs and the regression cases kept in the
//! repository, applies random mutations (byte flips, interesting values,
//! insertions, deletions, duplicated and spliced chunks, truncation) from
//! a seeded generator, and calls the target on each input, catching
//! panics. It is blind (no coverage feedback), so it finds what random
//! damage to real inputs finds, not deep paths. Each run is a pure
//! function of its seed; a failure prints the seed, the input in hex and
//! the command that replays it, and the input belongs in the target's
//! regression folder afterwards. A short run is in the default suite; with
//! `RONDO_SLOW_TESTS=1` each target runs for `RONDO_FUZZ_SECONDS` (600 by
//! default).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a target runs: 2 s by default, `RONDO_FUZZ_SECONDS` (600 by
/// default) with `RONDO_SLOW_TESTS=1`.
pub fn budget() -> Duration {
    let slow = std::env::var("RONDO_SLOW_TESTS").is_ok_and(|v| v == "1");
    let seconds = std::env::var("RONDO_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(if slow { 600 } else { 2 });
    Duration::from_secs(seconds)
}

/// The run's seed: `RONDO_FUZZ_SEED`, or one derived from the target's name.
fn seed_for(name: &str) -> u64 {
    std::env::var("RONDO_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x1000_0000_01b3)
            })
        })
}

/// xorshift64*: enough randomness for mutation, and no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [u8; 10] = [0, 1, 0x7f, 0x80, 0xff, b'-', b',', b'=', b'0', b'9'];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, corpus: &[Vec<u8>], size_max: usize) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let at = rng.below(len);
                input[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                input[at] = rng.next() as u8;
            }
            2 if len > 0 => {
                let at = rng.below(len);
                input[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            3 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                input.drain(at..at + n);
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                let chunk = input[at..at + n].to_vec();
                let to = rng.below(len + 1);
                input.splice(to..to, chunk);
            }
            6 if !corpus.is_empty() => {
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let n = 1 + rng.below((other.len() - from).min(256));
                    let to = rng.below(len + 1);
                    input.splice(to..to, other[from..from + n].iter().copied());
                }
            }
            7 => input.truncate(rng.below(len + 1)),
            _ => {}
        }
    }
    input.truncate(size_max);
}

/// What a run did.
#[derive(Debug)]
pub struct FuzzReport {
    pub executions: u64,
    pub seed: u64,
}

/// Fuzzes `target` for [`budget`] from `corpus` plus every file in
/// `regressions` (a folder of inputs that once failed; may be absent).
/// Panics, after printing the seed, the input and the replay command, if
/// the target panics on an input. `replay` is the `cargo test` command
/// that runs this target.
pub fn fuzz(
    name: &str,
    replay: &str,
    corpus: Vec<Vec<u8>>,
    regressions: &Path,
    size_max: usize,
    target: impl Fn(&[u8]),
) -> FuzzReport {
    let mut corpus = corpus;
    if let Ok(entries) = std::fs::read_dir(regressions) {
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let bytes = std::fs::read(&path).expect("a regression case is readable");
            run_one(name, replay, 0, &bytes, &target);
            corpus.push(bytes);
        }
    }
    for input in &corpus {
        run_one(name, replay, 0, input, &target);
    }
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    let seed = seed_for(name);
    let mut rng = Rng(seed | 1);
    let deadline = Instant::now() + budget();
    let mut executions = 0u64;
    while Instant::now() < deadline {
        // Check the clock every 256 inputs: the targets take microseconds.
        for _ in 0..256 {
            let mut input = corpus[rng.below(corpus.len())].clone();
            mutate(&mut rng, &mut input, &corpus, size_max);
            run_one(name, replay, seed, &input, &target);
            executions += 1;
        }
    }
    eprintln!("fuzz {name}: {executions} inputs, seed {seed}, no panic");
    FuzzReport { executions, seed }
}

fn run_one(name: &str, replay: &str, seed: u64, input: &[u8], target: &impl Fn(&[u8])) {
    if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        panic!(
            "fuzz target {name} panicked on a {}-byte input (seed {seed}): {hex}\n\
             replay: RONDO_FUZZ_SEED={seed} {replay}\n\
             keep the input (hex above, as raw bytes) in the target's regression folder",
            input.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_target_is_found_and_reported_with_its_seed() {
        let found = catch_unwind(|| {
            fuzz(
                "self-test",
                "cargo test -p rondo-testkit",
                vec![b"abc".to_vec()],
                Path::new("/nonexistent"),
                64,
                |input| assert!(!input.contains(&0xff), "0xff found"),
            )
        });
        let message = found.expect_err("the fuzzer finds a 0xff");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("RONDO_FUZZ_SEED="), "{text}");
        assert!(text.contains("ff"), "{text}");
    }

    #[test]
    fn a_run_is_a_function_of_its_seed() {
        let mut a = Rng(7);
        let mut b = Rng(7);
        let corpus = vec![b"bytes=0-99".to_vec()];
        for _ in 0..100 {
            let (mut x, mut y) = (corpus[0].clone(), corpus[0].clone());
            mutate(&mut a, &mut x, &corpus, 128);
            mutate(&mut b, &mut y, &corpus, 128);
            assert_eq!(x, y);
        }
    }
}
