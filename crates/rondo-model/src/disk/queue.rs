//! Request queues in front of a disk: FCFS and C-SCAN, event-driven replay
//! and round batches.
//!
//! This module owns the order in which queued commands reach the drive (the
//! drive itself holds one command at a time, as DiskSim's Cheetah validation
//! configuration with `Max queue length = 1`):
//!
//! - FCFS: earliest arrival first (input order among equal arrivals);
//! - C-SCAN (C-LOOK): the queued command with the smallest start LBN at or
//!   above the last dispatched one; if none, wrap to the smallest start LBN.
//!   Equal LBNs go in input order.
//!
//! An idle disk takes an arriving command at once. Both entry points keep the
//! disk's state across calls (`Disk` remembers when it is free and the last
//! LBN it dispatched).

use serde::{Deserialize, Serialize};

use super::{
    BatchOutcome, BatchRequest, CommandTiming, Disk, DiskError, Extent, Op, ServiceKind,
    TimedRequest,
};

/// Queue discipline.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    Fcfs,
    Cscan,
}

/// Position in `candidates` (each `(start LBN, input index)`) that C-SCAN
/// serves next after dispatching `last_lbn`.
pub(crate) fn cscan_pick(candidates: &[(u64, usize)], last_lbn: u64) -> usize {
    let mut best_above: Option<usize> = None;
    let mut best_any: Option<usize> = None;
    for (pos, &key) in candidates.iter().enumerate() {
        if best_any.is_none_or(|b| key < candidates[b]) {
            best_any = Some(pos);
        }
        if key.0 >= last_lbn && best_above.is_none_or(|b| key < candidates[b]) {
            best_above = Some(pos);
        }
    }
    best_above
        .or(best_any)
        .expect("cscan_pick needs a candidate")
}

/// The C-SCAN service order of commands all queued at once.
pub(crate) fn cscan_order(keys: &[(u64, usize)], last_lbn: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    let wrap = order.partition_point(|&i| keys[i].0 < last_lbn);
    order.rotate_left(wrap);
    order
}

impl Disk {
    /// Event-driven replay: every command arrives at its `arrival_ns` and
    /// waits in the queue while the disk is busy. Returns each command's
    /// timing in input order. Nothing is executed if any extent is invalid.
    pub fn replay(
        &mut self,
        requests: &[TimedRequest],
        scheduler: Scheduler,
    ) -> Result<Vec<CommandTiming>, DiskError> {
        for r in requests {
            self.check_extent(r.extent)?;
        }
        let mut arrivals: Vec<usize> = (0..requests.len()).collect();
        arrivals.sort_by_key(|&i| (requests[i].arrival_ns, i));
        let mut next = 0;
        let mut queue: Vec<usize> = Vec::new();
        let mut out: Vec<Option<CommandTiming>> = vec![None; requests.len()];
        loop {
            let mut now = self.free_ns();
            if queue.is_empty() {
                let Some(&first) = arrivals.get(next) else {
                    break;
                };
                // Idle until the next arrival, which the disk takes at once
                // (with anything arriving at the same instant).
                now = now.max(requests[first].arrival_ns);
            }
            while next < arrivals.len() && requests[arrivals[next]].arrival_ns <= now {
                queue.push(arrivals[next]);
                next += 1;
            }
            let pos = match scheduler {
                Scheduler::Fcfs => (0..queue.len())
                    .min_by_key(|&p| (requests[queue[p]].arrival_ns, queue[p]))
                    .expect("queue is not empty"),
                Scheduler::Cscan => {
                    let keys: Vec<(u64, usize)> =
                        queue.iter().map(|&i| (requests[i].extent.lbn, i)).collect();
                    cscan_pick(&keys, self.last_dispatched_lbn())
                }
            };
            let i = queue.swap_remove(pos);
            let r = &requests[i];
            out[i] = Some(self.execute(r.op, r.extent, r.arrival_ns)?);
        }
        Ok(out
            .into_iter()
            .map(|t| t.expect("every command ran"))
            .collect())
    }

    /// A round's batch: every request arrives at `start_ns` (the disk starts
    /// it when its backlog from earlier batches is done) and the disk serves
    /// the requests' extents in `scheduler` order. Nothing is executed if any
    /// extent is invalid.
    pub fn execute_batch(
        &mut self,
        requests: &[BatchRequest],
        start_ns: u64,
        scheduler: Scheduler,
    ) -> Result<BatchOutcome, DiskError> {
        // Each extent a command; a request's prefetch follows its last.
        let mut commands: Vec<(usize, Extent, u64)> = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            let extents: Vec<Extent> = r.extents().collect();
            for (n, &e) in extents.iter().enumerate() {
                self.check_extent(e)?;
                let prefetch = if n + 1 == extents.len() {
                    r.prefetch_sectors
                } else {
                    0
                };
                commands.push((i, e, prefetch));
            }
        }
        let service_start_ns = start_ns.max(self.free_ns());
        // A drive that queues the batch serves what it holds whole first
        // (their data then crosses the bus while the heads work on the rest).
        let queued = self.queues_commands()
            && requests.iter().all(|r| r.op == Op::Read)
            && self
                .mechanical_mut()
                .is_some_and(|m| m.begin_queued_batch());
        let held: Vec<bool> = commands
            .iter()
            .map(|(_, e, _)| {
                queued
                    && self
                        .mechanical_mut()
                        .is_some_and(|m| m.holds_whole(e.lbn, e.sectors, service_start_ns as f64))
            })
            .collect();
        let rest: Vec<usize> = (0..commands.len()).filter(|&k| !held[k]).collect();
        let mut order: Vec<usize> = (0..commands.len()).filter(|&k| held[k]).collect();
        match scheduler {
            Scheduler::Fcfs => order.extend(rest),
            Scheduler::Cscan => {
                let keys: Vec<(u64, usize)> =
                    rest.iter().map(|&k| (commands[k].1.lbn, k)).collect();
                order.extend(
                    cscan_order(&keys, self.last_dispatched_lbn())
                        .into_iter()
                        .map(|p| rest[p]),
                );
            }
        }
        let mut completion_ns = vec![service_start_ns; requests.len()];
        let mut timings = Vec::with_capacity(commands.len());
        let mut end_ns = service_start_ns;
        for k in order {
            let (i, extent, prefetch) = commands[k];
            let t = self.execute_prefetching(requests[i].op, extent, prefetch, start_ns)?;
            completion_ns[i] = completion_ns[i].max(t.completion_ns);
            // The disk is busy until a prefetch ends, after the host has its data.
            end_ns = end_ns.max(t.completion_ns).max(t.ready_ns);
            timings.push((i, t));
        }
        if queued {
            // The hits' data crossed the bus in the media's gaps: their
            // completions, in the order they ran (all first).
            let done = self
                .mechanical_mut()
                .map(|m| m.end_queued_batch())
                .unwrap_or_default();
            for ((i, t), done_ns) in timings
                .iter_mut()
                .filter(|(_, t)| t.service == ServiceKind::FullHit)
                .zip(done)
            {
                t.completion_ns = (done_ns.ceil() as u64).max(t.ready_ns);
                completion_ns[*i] = completion_ns[*i].max(t.completion_ns);
                end_ns = end_ns.max(t.completion_ns);
            }
            self.hold_until(end_ns);
        }
        Ok(BatchOutcome {
            completion_ns,
            service_start_ns,
            busy_ns: end_ns - service_start_ns,
            end_ns,
            commands: timings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cscan_serves_ascending_from_the_last_and_wraps() {
        let keys = [(50, 0), (10, 1), (70, 2), (30, 3), (70, 4), (5, 5)];
        // After dispatching LBN 30: 30, 50, 70, 70 (input order), then wrap to 5, 10.
        assert_eq!(cscan_order(&keys, 30), vec![3, 0, 2, 4, 5, 1]);
        assert_eq!(cscan_order(&keys, 0), vec![5, 1, 3, 0, 2, 4]);
        assert_eq!(cscan_order(&keys, 1000), vec![5, 1, 3, 0, 2, 4]);
        assert_eq!(keys[cscan_pick(&keys, 31)], (50, 0));
        assert_eq!(keys[cscan_pick(&keys, 71)], (5, 5));
        assert_eq!(keys[cscan_pick(&keys, 70)], (70, 2));
        // Picking one at a time reproduces the batch order.
        let mut left: Vec<(u64, usize)> = keys.to_vec();
        let mut last = 30;
        let mut picked = vec![];
        while !left.is_empty() {
            let p = cscan_pick(&left, last);
            let k = left.swap_remove(p);
            last = k.0;
            picked.push(k.1);
        }
        assert_eq!(picked, cscan_order(&keys, 30));
    }
}
