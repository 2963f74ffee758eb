//! The service-time model of a flash (NVMe) device.
//!
//! This module owns the solid-state engine: no seek, no rotation, no zones.
//! A command occupies the device's data path for max(bytes / rate, 1 / IOPS)
//! (the IOPS ceiling is the device's command-processing limit at depth) and
//! completes one latency after its data path slot ends. The next queued
//! command may start as soon as the data path is free, so a batch pipelines:
//! N equal reads take N·slot + one latency, a single read at queue depth 1
//! takes latency + bytes / rate (disk-models.md §3.2: "QD1 read latency + size
//! / rate, IOPS capped, no positional dependence").

use super::profiles::SolidStateSpec;
use super::{CommandTiming, Op, ServiceKind};
use crate::units::{NS_PER_S, SECTOR_BYTES};

#[derive(Clone, Debug)]
pub(crate) struct SolidStateDisk {
    pub spec: SolidStateSpec,
}

impl SolidStateDisk {
    pub fn new(spec: SolidStateSpec) -> SolidStateDisk {
        SolidStateDisk { spec }
    }

    pub fn capacity_sectors(&self) -> u64 {
        self.spec.capacity_bytes / SECTOR_BYTES
    }

    /// Data-path time of one command, rounded up to whole nanoseconds.
    pub fn slot_ns(&self, op: Op, sectors: u64) -> u64 {
        let (rate, iops) = match op {
            Op::Read => (self.spec.read_bytes_per_s, self.spec.max_read_iops),
            Op::Write => (self.spec.write_bytes_per_s, self.spec.max_write_iops),
        };
        let transfer = (sectors as u128 * SECTOR_BYTES as u128 * NS_PER_S as u128)
            .div_ceil(rate as u128) as u64;
        transfer.max(NS_PER_S.div_ceil(iops))
    }

    pub fn latency_ns(&self, op: Op) -> u64 {
        match op {
            Op::Read => self.spec.read_latency_ns,
            Op::Write => self.spec.write_latency_ns,
        }
    }

    /// Executes one command whose data-path slot starts at `start_ns`.
    pub fn execute(&mut self, op: Op, sectors: u64, start_ns: u64) -> CommandTiming {
        let slot = self.slot_ns(op, sectors);
        let latency = self.latency_ns(op);
        CommandTiming {
            start_ns,
            completion_ns: start_ns + slot + latency,
            ready_ns: start_ns + slot,
            service: ServiceKind::SolidState,
            overhead_ns: latency,
            seek_ns: 0,
            rotation_ns: 0,
            transfer_ns: slot,
            cached_sectors: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::profiles::{DiskModelSpec, nvme_gen4};

    fn nvme() -> SolidStateDisk {
        let DiskModelSpec::SolidState(s) = nvme_gen4().model else {
            panic!()
        };
        SolidStateDisk::new(s)
    }

    #[test]
    fn qd1_read_is_latency_plus_size_over_rate() {
        let mut d = nvme();
        // 4 KiB: 4096 / 6.8 GB/s = 602.35 ns < 1/850k IOPS = 1176.5 ns: the IOPS cap rules.
        let c = d.execute(Op::Read, 8, 0);
        assert_eq!(c.completion_ns, 80_000 + 1177);
        // 1 MB: 1,048,576 / 6.8e9 = 154,202.4 ns.
        let c = d.execute(Op::Read, 2048, 0);
        assert_eq!(c.completion_ns, 80_000 + 154_203);
        assert_eq!(c.ready_ns, 154_203);
        // Writes use their own rate and latency: 1 MiB / 2 GB/s = 524,288 ns.
        let c = d.execute(Op::Write, 2048, 10);
        assert_eq!(c.completion_ns, 10 + 524_288 + 20_000);
    }
}
