//! The storage node's messages (`proto/storage.proto`) and their
//! conversions to and from the core's commands and the server's I/O events.
//! What crosses the wire is plain data: round numbers, model time (ns since
//! round 0) and the stored extents' offsets and checksums. A message that
//! does not decode into the core's form (an unknown enum value, a missing
//! field) is an error naming the field, never a default.

use rondo_model::array::command::CommandExtent;
use rondo_model::array::{Completion, CopyId, DiskCommand, Purpose, ReadOutcome, WholeExtent};
use rondo_model::disk::{Op, Scheduler};
use rondo_model::layout::Replica;
use rondo_model::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};
use rondo_server::io::{IoEvent, ReadDone, RoundClock};

#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("rondo.storage.v1");
}

/// A message that does not decode into the core's form.
#[derive(Debug, thiserror::Error)]
#[error("a storage node message is malformed: {0}")]
pub struct WireError(pub String);

fn malformed(what: impl Into<String>) -> WireError {
    WireError(what.into())
}

pub fn replica_to_wire(replica: Replica) -> i32 {
    match replica {
        Replica::Primary => pb::Replica::Primary as i32,
        Replica::Backup => pb::Replica::Backup as i32,
    }
}

pub fn replica_from_wire(value: i32) -> Result<Replica, WireError> {
    match pb::Replica::try_from(value) {
        Ok(pb::Replica::Primary) => Ok(Replica::Primary),
        Ok(pb::Replica::Backup) => Ok(Replica::Backup),
        Err(_) => Err(malformed(format!(
            "replica {value} is neither primary nor backup"
        ))),
    }
}

pub fn scheduler_to_wire(scheduler: Scheduler) -> i32 {
    match scheduler {
        Scheduler::Cscan => pb::Scheduler::Cscan as i32,
        Scheduler::Fcfs => pb::Scheduler::Fcfs as i32,
    }
}

pub fn scheduler_from_wire(value: i32) -> Result<Scheduler, WireError> {
    match pb::Scheduler::try_from(value) {
        Ok(pb::Scheduler::Cscan) => Ok(Scheduler::Cscan),
        Ok(pb::Scheduler::Fcfs) => Ok(Scheduler::Fcfs),
        Err(_) => Err(malformed(format!("scheduler {value} is unknown"))),
    }
}

fn whole_to_wire(whole: &WholeExtent) -> pb::WholeExtent {
    pb::WholeExtent {
        device_offset_bytes: whole.device_offset_bytes,
        length_bytes: whole.length_bytes,
        crc32c: whole.crc32c,
    }
}

fn extent_to_wire(extent: &CommandExtent) -> pb::Extent {
    pb::Extent {
        device_offset_bytes: extent.device_offset_bytes,
        length_bytes: extent.length_bytes,
        crc32c: extent.crc32c,
        whole: extent.whole.as_ref().map(whole_to_wire),
    }
}

fn extent_from_wire(extent: &pb::Extent) -> CommandExtent {
    CommandExtent {
        device_offset_bytes: extent.device_offset_bytes,
        length_bytes: extent.length_bytes,
        crc32c: extent.crc32c,
        whole: extent.whole.as_ref().map(|w| WholeExtent {
            device_offset_bytes: w.device_offset_bytes,
            length_bytes: w.length_bytes,
            crc32c: w.crc32c,
        }),
    }
}

pub fn command_to_wire(command: &DiskCommand) -> pb::Command {
    use pb::command::Purpose as P;
    let purpose = match command.purpose {
        Purpose::Deliver {
            stream,
            title,
            playback_round,
            replica,
            piece,
            recovery,
        } => P::Deliver(pb::Deliver {
            stream: stream.0,
            title: title.0,
            playback_round: playback_round.0,
            replica: replica_to_wire(replica),
            piece: u32::from(piece),
            recovery,
        }),
        Purpose::RebuildRead { copy } => P::RebuildRead(copy.0),
        Purpose::RebuildWrite { copy } => P::RebuildWrite(copy.0),
        Purpose::IngestWrite { title, title_round } => P::IngestWrite(pb::IngestWrite {
            title: title.0,
            title_round: title_round.0,
        }),
    };
    pb::Command {
        disk: command.disk.0,
        round: command.round.0,
        write: command.op == Op::Write,
        purpose: Some(purpose),
        extents: command.extents.iter().map(extent_to_wire).collect(),
        charge_ns: command.charge_ns,
        joins_previous: command.joins_previous,
        prefetch_bytes: command.prefetch_bytes,
        part_offset_bytes: command.part_offset_bytes,
    }
}

pub fn command_from_wire(command: &pb::Command) -> Result<DiskCommand, WireError> {
    use pb::command::Purpose as P;
    let purpose = match command
        .purpose
        .as_ref()
        .ok_or_else(|| malformed("a command has no purpose"))?
    {
        P::Deliver(d) => Purpose::Deliver {
            stream: StreamId(d.stream),
            title: TitleId(d.title),
            playback_round: PlaybackRound(d.playback_round),
            replica: replica_from_wire(d.replica)?,
            piece: u16::try_from(d.piece)
                .map_err(|_| malformed(format!("piece {} is out of range", d.piece)))?,
            recovery: d.recovery,
        },
        P::RebuildRead(copy) => Purpose::RebuildRead {
            copy: CopyId(*copy),
        },
        P::RebuildWrite(copy) => Purpose::RebuildWrite {
            copy: CopyId(*copy),
        },
        P::IngestWrite(w) => Purpose::IngestWrite {
            title: TitleId(w.title),
            title_round: PlaybackRound(w.title_round),
        },
    };
    Ok(DiskCommand {
        disk: DiskIndex(command.disk),
        round: Round(command.round),
        op: if command.write { Op::Write } else { Op::Read },
        purpose,
        extents: command.extents.iter().map(extent_from_wire).collect(),
        charge_ns: command.charge_ns,
        joins_previous: command.joins_previous,
        prefetch_bytes: command.prefetch_bytes,
        part_offset_bytes: command.part_offset_bytes,
    })
}

/// A read's completion as sent.
pub fn read_done_to_wire(read: &ReadDone) -> pb::ReadDone {
    let c = &read.completion;
    let (outcome, error) = match &c.outcome {
        ReadOutcome::Ok => (pb::Outcome::Ok, String::new()),
        ReadOutcome::IoError(e) => (pb::Outcome::IoError, e.clone()),
        ReadOutcome::BadChecksum(e) => (pb::Outcome::BadChecksum, e.clone()),
    };
    pb::ReadDone {
        model_completion_ns: read.model_completion_ns,
        disk: c.disk.0,
        stream: c.stream.0,
        playback_round: c.playback_round.0,
        replica: replica_to_wire(c.replica),
        piece: u32::from(c.piece),
        outcome: outcome as i32,
        error,
    }
}

pub fn read_done_from_wire(read: &pb::ReadDone) -> Result<ReadDone, WireError> {
    let outcome = match pb::Outcome::try_from(read.outcome) {
        Ok(pb::Outcome::Ok) => ReadOutcome::Ok,
        Ok(pb::Outcome::IoError) => ReadOutcome::IoError(read.error.clone()),
        Ok(pb::Outcome::BadChecksum) => ReadOutcome::BadChecksum(read.error.clone()),
        Err(_) => return Err(malformed(format!("outcome {} is unknown", read.outcome))),
    };
    Ok(ReadDone {
        model_completion_ns: read.model_completion_ns,
        completion: Completion {
            disk: DiskIndex(read.disk),
            stream: StreamId(read.stream),
            playback_round: PlaybackRound(read.playback_round),
            replica: replica_from_wire(read.replica)?,
            piece: u16::try_from(read.piece)
                .map_err(|_| malformed(format!("piece {} is out of range", read.piece)))?,
            outcome,
        },
    })
}

/// An I/O event as sent (`seq`: the batch a `BatchDone` ends), with its
/// instant turned into model time on `clock`.
pub fn event_to_wire(event: &IoEvent, seq: u64, clock: &RoundClock) -> pb::FromDisk {
    use pb::from_disk::Kind;
    let kind = match event {
        IoEvent::Reads { round, reads, .. } => Kind::Reads(pb::Reads {
            round: round.0,
            reads: reads.iter().map(read_done_to_wire).collect(),
        }),
        IoEvent::BatchDone {
            disk,
            round,
            reserved_ns,
            granted_ns,
            requests,
            bytes,
            granted_commands,
            cache_hits,
            shared_reads,
            shared_bytes,
            granted_bytes,
            granted_model_ns,
            ended_at,
            arrived_at,
            model_ns,
            late,
            model_busy_ns,
            measured_busy_ns,
        } => Kind::Done(pb::BatchDone {
            seq,
            disk: disk.0,
            round: round.0,
            reserved_ns: *reserved_ns,
            granted_ns: *granted_ns,
            requests: *requests as u64,
            bytes: *bytes,
            granted_commands: *granted_commands as u64,
            cache_hits: *cache_hits as u64,
            shared_reads: *shared_reads as u64,
            shared_bytes: *shared_bytes,
            granted_bytes: *granted_bytes,
            granted_model_ns: *granted_model_ns,
            ended_at_model_ns: clock.model_ns(*ended_at),
            arrived_at_model_ns: clock.model_ns(*arrived_at),
            model_start_ns: model_ns.as_ref().map(|m| m.start),
            model_end_ns: model_ns.as_ref().map(|m| m.end),
            late: *late,
            model_busy_ns: *model_busy_ns,
            measured_busy_ns: *measured_busy_ns,
        }),
    };
    pb::FromDisk { kind: Some(kind) }
}

/// A batch's end as the round driver takes it, its instant on `clock`.
pub fn batch_done_from_wire(done: &pb::BatchDone, clock: &RoundClock) -> IoEvent {
    IoEvent::BatchDone {
        disk: DiskIndex(done.disk),
        round: Round(done.round),
        reserved_ns: done.reserved_ns,
        granted_ns: done.granted_ns,
        requests: done.requests as usize,
        bytes: done.bytes,
        granted_commands: done.granted_commands as usize,
        cache_hits: done.cache_hits as usize,
        shared_reads: done.shared_reads as usize,
        shared_bytes: done.shared_bytes,
        granted_bytes: done.granted_bytes,
        granted_model_ns: done.granted_model_ns,
        ended_at: clock.at_model_ns(done.ended_at_model_ns),
        arrived_at: clock.at_model_ns(done.arrived_at_model_ns),
        model_ns: done
            .model_start_ns
            .zip(done.model_end_ns)
            .map(|(start, end)| start..end),
        late: done.late,
        model_busy_ns: done.model_busy_ns,
        measured_busy_ns: done.measured_busy_ns,
    }
}

/// Nanoseconds since the Unix epoch of `instant` on this host, through the
/// system clock read now (what `Open::round_zero_unix_ns` carries).
pub fn unix_ns_of(instant: std::time::Instant) -> u64 {
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i128;
    let now = std::time::Instant::now();
    let offset = if instant >= now {
        (instant - now).as_nanos() as i128
    } else {
        -((now - instant).as_nanos() as i128)
    };
    (now_unix + offset).max(0) as u64
}

/// The instant on this host of `unix_ns` (the inverse of [`unix_ns_of`]).
pub fn instant_of_unix_ns(unix_ns: u64) -> std::time::Instant {
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i128;
    let now = std::time::Instant::now();
    let ahead = unix_ns as i128 - now_unix;
    if ahead >= 0 {
        now + std::time::Duration::from_nanos(ahead as u64)
    } else {
        now.checked_sub(std::time::Duration::from_nanos((-ahead) as u64))
            .unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of command survives the wire unchanged.
    #[test]
    fn commands_survive_the_wire() {
        let extent = CommandExtent {
            device_offset_bytes: 1 << 20,
            length_bytes: 65536,
            crc32c: Some(0xdead_beef),
            whole: None,
        };
        let part = CommandExtent {
            device_offset_bytes: (1 << 20) + 4096,
            length_bytes: 8192,
            crc32c: None,
            whole: Some(WholeExtent {
                device_offset_bytes: 1 << 20,
                length_bytes: 65536,
                crc32c: Some(7),
            }),
        };
        let purposes = [
            Purpose::Deliver {
                stream: StreamId(9),
                title: TitleId(3),
                playback_round: PlaybackRound(41),
                replica: Replica::Backup,
                piece: 2,
                recovery: true,
            },
            Purpose::RebuildRead { copy: CopyId(5) },
            Purpose::RebuildWrite { copy: CopyId(6) },
            Purpose::IngestWrite {
                title: TitleId(8),
                title_round: PlaybackRound(12),
            },
        ];
        for (i, purpose) in purposes.into_iter().enumerate() {
            let command = DiskCommand {
                disk: DiskIndex(3),
                round: Round(1000 + i as u64),
                op: if i == 2 { Op::Write } else { Op::Read },
                purpose,
                extents: vec![extent, part],
                charge_ns: 12_345,
                joins_previous: i == 0,
                prefetch_bytes: 4096 * i as u64,
                part_offset_bytes: 4096,
            };
            let back = command_from_wire(&command_to_wire(&command)).expect("decodes");
            assert_eq!(back, command);
        }
    }

    /// A completion of each outcome survives the wire.
    #[test]
    fn completions_survive_the_wire() {
        for outcome in [
            ReadOutcome::Ok,
            ReadOutcome::IoError("EIO".into()),
            ReadOutcome::BadChecksum("crc".into()),
        ] {
            let read = ReadDone {
                model_completion_ns: 987_654_321,
                completion: Completion {
                    disk: DiskIndex(1),
                    stream: StreamId(77),
                    playback_round: PlaybackRound(5),
                    replica: Replica::Primary,
                    piece: 1,
                    outcome,
                },
            };
            let back = read_done_from_wire(&read_done_to_wire(&read)).expect("decodes");
            assert_eq!(back.completion, read.completion);
            assert_eq!(back.model_completion_ns, read.model_completion_ns);
        }
    }

    /// Unknown enum values and a missing purpose are errors naming them.
    #[test]
    fn malformed_messages_are_refused_by_name() {
        let mut command = command_to_wire(&DiskCommand {
            disk: DiskIndex(0),
            round: Round(1),
            op: Op::Read,
            purpose: Purpose::RebuildRead { copy: CopyId(1) },
            extents: Vec::new(),
            charge_ns: 0,
            joins_previous: false,
            prefetch_bytes: 0,
            part_offset_bytes: 0,
        });
        command.purpose = None;
        let e = command_from_wire(&command).unwrap_err().to_string();
        assert!(e.contains("no purpose"), "{e}");
        let e = replica_from_wire(7).unwrap_err().to_string();
        assert!(e.contains("replica 7"), "{e}");
        let e = scheduler_from_wire(9).unwrap_err().to_string();
        assert!(e.contains("scheduler 9"), "{e}");
    }

    /// Round 0's instant crosses hosts as Unix time and comes back within
    /// the clocks' reading error.
    #[test]
    fn round_zero_crosses_as_unix_time() {
        let t0 = std::time::Instant::now() + std::time::Duration::from_millis(250);
        let back = instant_of_unix_ns(unix_ns_of(t0));
        let error = if back > t0 { back - t0 } else { t0 - back };
        assert!(error < std::time::Duration::from_millis(5), "{error:?}");
    }
}
