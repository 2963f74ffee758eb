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
    /// Seed 003's Sweep&Prefetch: once a stream no longer fits reading one
    /// block per round, it reads in pairs, the second block prefetched into
    /// the drive's cache (a profile with one, e.g. seed003-table1-c2-s8).
    SweepPrefetch,
    /// Seed 003's Gradual Prefetching: every other new stream reads in
    /// drive-cache pairs.
    Gradual,
}

/// `--policy` and `--prefetch-depth`.
#[derive(Args, Clone, Debug)]
pub struct PolicyArgs {
    /// Retrieval policy (seed 003): `sweep` reads each stream's round in
    /// its own request (seed 000's policy, the default); `gpmp` reads a
    /// stream's next 1 + --prefetch-depth rounds of a segment in one request
    /// and holds them in host memory until they are sent (a grouped stream
    /// gets no start burst); `sweep-prefetch` and `gradual` have streams read
    /// in pairs whose second block the drive prefetches into its cache (a
    /// disk profile whose cache holds only what the host prefetches, e.g.
    /// seed003-table1-c2-s8; add -q for command queueing). All but `sweep`
    /// need the `segments` layout. docs/retrieval.md.
    #[arg(long, value_enum, default_value_t = PolicyArg::Sweep)]
    pub policy: PolicyArg,
    /// GPMP's u: rounds read ahead per stream with each read (k = u + 1).
    #[arg(long, value_name = "U", default_value_t = 5, requires = "policy")]
    pub prefetch_depth: u32,
    /// The time-cycle (seed 004): `fixed` reads every stream as --policy
    /// says; `dynamic` changes each stream's cycle (rounds read per
    /// request) at run time, combining low-bitrate streams into longer
    /// reads while the disks are the pressure and splitting them while
    /// memory is, doubling or halving the cycle new streams start at. Every
    /// change is admitted like a stream, so none can make a deadline miss.
    /// Needs the segments layout and --policy sweep. docs/cycle.md.
    #[arg(long, value_enum, default_value_t = CycleArg::Fixed)]
    pub cycle: CycleArg,
    /// The dynamic cycle's longest cycle, in rounds (a power of two, at
    /// most the layout's segment).
    #[arg(long, value_name = "ROUNDS", default_value_t = 16)]
    pub cycle_max_rounds: u32,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleArg {
    /// Every stream reads as --policy says.
    Fixed,
    /// Seed 004's stream combination and dynamic cycle.
    Dynamic,
}

impl PolicyArgs {
    /// Rounds a stream reads per request on a layout of `segment_rounds`
    /// rounds per run: 1 under Sweep, k = U + 1 under GPMP.
    pub fn read_group_rounds(&self, segment_rounds: u32) -> anyhow::Result<u32> {
        match self.policy {
            PolicyArg::Sweep => Ok(1),
            PolicyArg::SweepPrefetch | PolicyArg::Gradual => {
                anyhow::ensure!(
                    segment_rounds > 1,
                    "--policy {} prefetches a stream's next round: it must lie next to the \
                     one read, so it needs the segments layout (--layout segments)",
                    self.name()
                );
                Ok(1)
            }
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

    /// Seed 004's dynamic cycle, when asked, on a layout of
    /// `segment_rounds` rounds per run: its longest cycle is the largest
    /// power of two within both --cycle-max-rounds and the segment.
    pub fn dynamic_cycle(
        &self,
        segment_rounds: u32,
    ) -> anyhow::Result<Option<rondo_model::array::DynamicCycle>> {
        use rondo_model::array::DynamicCycle;
        if self.cycle == CycleArg::Fixed {
            return Ok(None);
        }
        if let Some(why) = DynamicCycle::unavailable(
            segment_rounds,
            self.read_group_rounds(segment_rounds)?,
            self.drive_prefetch(),
        ) {
            anyhow::bail!("--cycle dynamic {why}");
        }
        let limit = self.cycle_max_rounds.min(segment_rounds);
        anyhow::ensure!(limit >= 2, "--cycle-max-rounds must be at least 2");
        let max = 1u32 << (31 - limit.leading_zeros());
        Ok(Some(DynamicCycle::new(max)))
    }

    /// The drive-cache prefetching the policy asks of the array.
    pub fn drive_prefetch(&self) -> rondo_model::array::DrivePrefetch {
        use rondo_model::array::DrivePrefetch;
        match self.policy {
            PolicyArg::Sweep | PolicyArg::Gpmp => DrivePrefetch::None,
            PolicyArg::SweepPrefetch => DrivePrefetch::SweepPrefetch,
            PolicyArg::Gradual => DrivePrefetch::Gradual,
        }
    }

    fn name(&self) -> &'static str {
        match self.policy {
            PolicyArg::Sweep => "sweep",
            PolicyArg::Gpmp => "gpmp",
            PolicyArg::SweepPrefetch => "sweep-prefetch",
            PolicyArg::Gradual => "gradual",
        }
    }
}
