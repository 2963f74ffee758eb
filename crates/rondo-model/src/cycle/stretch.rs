//! Fixed-Stretch, seed 004's baseline (Chang & Garcia-Molina, "Effective
//! Memory Use in a Media Server", VLDB 1997), reconstructed: the paper's
//! text was not available here (only its abstract), so this follows what is
//! public about the scheme and says so in docs/cycle.md.
//!
//! This module owns the reconstruction: a fixed cycle T cut into one slot
//! per stream, each slot long enough for a read under the worst-case access
//! time (the "stretch": reads are spread out at fixed offsets instead of
//! swept in seek order), served in the same order every cycle. Because a
//! stream's read lands at the same offset in every cycle, its data is
//! consumed exactly one cycle after it arrives, so a stream needs one
//! cycle's data (R·T) rather than the two a sweep needs; with buffers shared
//! between streams the pool needs only the peak over the cycle of what the
//! streams still hold (each stream's share drains linearly after its slot).
//! Admission: the slots fit the cycle and the memory (shared peak, or seed
//! 004's Equation 2, Σ R·T, when compared under seed 004's accounting) fits
//! the budget. A departed stream leaves a hole that a later stream whose
//! slot fits may take (first fit).

use serde::{Deserialize, Serialize};

use super::scheduler::{CycleRead, Rejection};
use super::{CycleDisk, CycleStreamId, bytes_for};

/// A stream's slot: its read starts no earlier than `offset_ns` into the
/// cycle and is charged `slot_ns`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub stream: CycleStreamId,
    pub bitrate_bps: u64,
    pub offset_ns: u64,
    pub slot_ns: u64,
}

/// A read of Fixed-Stretch's cycle and the instant its slot opens.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StretchRead {
    pub read: CycleRead,
    pub not_before_ns: u64,
}

#[derive(Clone, Debug)]
pub struct FixedStretch {
    disk: CycleDisk,
    memory_bytes: u64,
    cycle_ns: u64,
    /// Shared buffers (Chang & Garcia-Molina's memory use) or Equation 2.
    sharing: bool,
    /// Ordered by offset.
    slots: Vec<Slot>,
    /// Even slots: every slot sized for this bitrate, slot k at k·T/n.
    even_slots: Option<EvenSlots>,
}

#[derive(Copy, Clone, Debug)]
struct EvenSlots {
    slot_ns: u64,
    count: u64,
}

impl FixedStretch {
    pub fn new(disk: CycleDisk, memory_bytes: u64, cycle_ns: u64, sharing: bool) -> FixedStretch {
        FixedStretch {
            disk,
            memory_bytes,
            cycle_ns,
            sharing,
            slots: Vec::new(),
            even_slots: None,
        }
    }

    /// The other reading of the scheme: the cycle cut into n equal slots,
    /// each long enough for a read of `max_bitrate_bps` (the highest bitrate
    /// admitted), slot k starting at k·T/n, taken so that reads are spread
    /// over the whole cycle (more sharing, fewer slots for low bitrates).
    pub fn with_even_slots(
        disk: CycleDisk,
        memory_bytes: u64,
        cycle_ns: u64,
        sharing: bool,
        max_bitrate_bps: u64,
    ) -> FixedStretch {
        let slot_ns = disk.read_ns(bytes_for(max_bitrate_bps, cycle_ns));
        let mut f = FixedStretch::new(disk, memory_bytes, cycle_ns, sharing);
        assert_eq!(disk.fixed_ns, 0, "even slots are for the paper's disk");
        f.even_slots = Some(EvenSlots {
            slot_ns,
            count: cycle_ns / slot_ns,
        });
        f
    }

    pub fn cycle_ns(&self) -> u64 {
        self.cycle_ns
    }

    pub fn streams(&self) -> usize {
        self.slots.len()
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The memory admission counts: the shared peak or Equation 2.
    pub fn memory_bytes(&self) -> u64 {
        if self.sharing {
            shared_peak_bytes(&self.slots, self.cycle_ns)
        } else {
            self.equation2_bytes()
        }
    }

    /// Seed 004's Equation 2 for the same streams: Σ R_i·T.
    pub fn equation2_bytes(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| bytes_for(s.bitrate_bps, self.cycle_ns))
            .sum()
    }

    /// First-fit slot of `slot_ns` in the cycle, if any.
    fn gap_for(&self, slot_ns: u64) -> Option<(usize, u64)> {
        // The disk's fixed term is charged at the cycle's start.
        let mut at = self.disk.fixed_ns;
        for (i, s) in self.slots.iter().enumerate() {
            if s.offset_ns >= at + slot_ns {
                return Some((i, at));
            }
            at = s.offset_ns + s.slot_ns;
        }
        (at + slot_ns <= self.cycle_ns).then_some((self.slots.len(), at))
    }

    pub fn admit(&mut self, id: CycleStreamId, bitrate_bps: u64) -> Result<(), Rejection> {
        if self.slots.iter().any(|s| s.stream == id) {
            return Err(Rejection::Duplicate);
        }
        let (slot_ns, (i, offset_ns)) = match self.even_slots {
            Some(e) => {
                if bitrate_bps > 0
                    && self.disk.read_ns(bytes_for(bitrate_bps, self.cycle_ns)) > e.slot_ns
                {
                    return Err(Rejection::Disk);
                }
                // Free slots are taken in van der Corput order (0, n/2,
                // n/4, 3n/4, …) so the reads of any number of streams are
                // spread over the cycle.
                let pow2 = e.count.next_power_of_two();
                let bits = pow2.trailing_zeros();
                let offset_ns = (0..pow2)
                    .map(|j| {
                        if bits == 0 {
                            0
                        } else {
                            j.reverse_bits() >> (64 - bits)
                        }
                    })
                    .filter(|&k| k < e.count)
                    .map(|k| k * self.cycle_ns / e.count)
                    .find(|&o| self.slots.iter().all(|s| s.offset_ns != o))
                    .ok_or(Rejection::Disk)?;
                let free = (
                    self.slots.partition_point(|s| s.offset_ns < offset_ns),
                    offset_ns,
                );
                (e.slot_ns, free)
            }
            None => {
                let slot_ns = self.disk.read_ns(bytes_for(bitrate_bps, self.cycle_ns));
                (slot_ns, self.gap_for(slot_ns).ok_or(Rejection::Disk)?)
            }
        };
        let slot = Slot {
            stream: id,
            bitrate_bps,
            offset_ns,
            slot_ns,
        };
        self.slots.insert(i, slot);
        if self.memory_bytes() > self.memory_bytes {
            self.slots.remove(i);
            return Err(Rejection::Memory);
        }
        Ok(())
    }

    pub fn remove(&mut self, id: CycleStreamId) {
        self.slots.retain(|s| s.stream != id);
    }

    /// The reads of the cycle starting at `start_ns`, in slot order. A read
    /// must be complete by its slot's end, when its stream starts playing
    /// the cycle of data it brings (`from_ns`).
    pub fn plan(&self, start_ns: u64) -> Vec<StretchRead> {
        self.slots
            .iter()
            .map(|s| {
                let bytes = bytes_for(s.bitrate_bps, self.cycle_ns);
                let from_ns = start_ns + s.offset_ns + s.slot_ns;
                StretchRead {
                    read: CycleRead {
                        stream: s.stream,
                        bytes,
                        from_ns,
                        to_ns: from_ns + self.cycle_ns,
                        charge_ns: s.slot_ns,
                    },
                    not_before_ns: start_ns + s.offset_ns,
                }
            })
            .collect()
    }
}

/// The peak over the cycle of Σ_i b_i·(1 − ((t − c_i) mod T)/T), where c_i
/// is the end of stream i's slot and b_i its cycle of data: shared buffers
/// hold what each stream has not yet played. The sum falls between slot ends
/// and jumps at them, so the peak is at one of them.
fn shared_peak_bytes(slots: &[Slot], cycle_ns: u64) -> u64 {
    let ends: Vec<(u64, u64)> = slots
        .iter()
        .map(|s| {
            (
                (s.offset_ns + s.slot_ns) % cycle_ns,
                bytes_for(s.bitrate_bps, cycle_ns),
            )
        })
        .collect();
    ends.iter()
        .map(|&(t, _)| {
            ends.iter()
                .map(|&(c, b)| {
                    let since = (t + cycle_ns - c) % cycle_ns;
                    (u128::from(b) * u128::from(cycle_ns - since)).div_ceil(u128::from(cycle_ns))
                        as u64
                })
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}
