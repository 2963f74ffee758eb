//! What the coordination tests share.

use rondo_cluster::StreamRecord;

/// A stream record of `title`; the other fields do not matter to the log.
pub fn record(title: u64) -> StreamRecord {
    StreamRecord {
        title,
        first_byte: 0,
        end_byte: 1 << 20,
        interface: "i1".into(),
        admitted_round: 10,
        start_round: 11,
    }
}
