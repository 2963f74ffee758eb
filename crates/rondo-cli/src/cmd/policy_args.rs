//! The retrieval-policy flags shared by `rondo serve` and `rondo simulate`:
//! `--policy sweep|gpmp` and `--prefetch-depth U` (seed 003;
//! docs/retrieval.md).

use clap::{Args, ValueEnum};

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyArg {
    /// Each stream's round in its own request (seed 000's policy).
    Sweep,
    /// Seed 003's Grouped Periodic Multiround Prefetching: a stream's next
    /// 1 + U rounds of a segment in one request, held in host memory.
    Gpmp,
}

/// `--policy` and `--prefetch-depth`.
#[derive(Args, Clone, Debug)]
pub struct PolicyArgs {
    /// Retrieval policy (seed 003): `sweep` reads each stream's round in
    /// its own request (seed 000's policy, the default); `gpmp` reads a
    /// stream's next 1 + --prefetch-depth rounds of a segment in one request
    /// and holds them in host memory until they are sent (needs the
    /// `segments` layout; a grouped stream gets no start burst).
    /// docs/retrieval.md.
    #[arg(long, value_enum, default_value_t = PolicyArg::Sweep)]
    pub policy: PolicyArg,
    /// GPMP's u: rounds read ahead per stream with each read (k = u + 1).
    #[arg(long, value_name = "U", default_value_t = 5, requires = "policy")]
    pub prefetch_depth: u32,
}

impl PolicyArgs {
    /// Rounds a stream reads per request on a layout of `segment_rounds`
    /// rounds per run: 1 under Sweep, k = U + 1 under GPMP.
    pub fn read_group_rounds(&self, segment_rounds: u32) -> anyhow::Result<u32> {
        match self.policy {
            PolicyArg::Sweep => Ok(1),
            PolicyArg::Gpmp => {
                anyhow::ensure!(
                    segment_rounds > 1,
                    "--policy gpmp reads a stream's next rounds in one request: they must lie \
                     next to each other, so it needs the segments layout (--layout segments)"
                );
                anyhow::ensure!(
                    self.prefetch_depth >= 1,
                    "--prefetch-depth must be at least 1 (0 is --policy sweep)"
                );
                Ok(self.prefetch_depth + 1)
            }
        }
    }
}
