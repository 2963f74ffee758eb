//! The drive's on-board segmented read cache.
//!
//! This module owns what each cache segment holds: one contiguous window of
//! LBNs, at most `segment_sectors` long, replaced least-recently-used first
//! (DiskSim's Cheetah 4LP: 3 segments × 282 sectors). A segment that keeps
//! filling (read-ahead, or a request longer than the segment) keeps only its
//! newest `segment_sectors` ("read-ahead over requested": prefetched data may
//! overwrite data just returned to the host). The timing of read-ahead lives
//! in `service`; this module only answers "which sectors are here".

/// One segment's contents: LBNs `[start, end)`, trimmed to the newest
/// `segment_sectors` when read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    end: u64,
    last_use: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentCache {
    segments: Vec<Segment>,
    segment_sectors: u64,
    /// Use counter for LRU; it only orders uses, it is not a time.
    uses: u64,
}

impl SegmentCache {
    pub fn new(segments: u32, segment_sectors: u32) -> SegmentCache {
        let empty = Segment {
            start: 0,
            end: 0,
            last_use: 0,
        };
        SegmentCache {
            segments: vec![
                empty;
                if segment_sectors == 0 {
                    0
                } else {
                    segments as usize
                }
            ],
            segment_sectors: segment_sectors as u64,
            uses: 0,
        }
    }

    pub fn enabled(&self) -> bool {
        !self.segments.is_empty()
    }

    /// The LBNs segment `i` holds, `[start, end)`. `end_now` overrides the
    /// stored end for a segment read-ahead is still filling.
    pub fn window(&self, i: usize, end_now: Option<u64>) -> (u64, u64) {
        let s = &self.segments[i];
        let end = end_now.unwrap_or(s.end).max(s.end);
        let start = s.start.max(end.saturating_sub(self.segment_sectors));
        (start.min(end), end)
    }

    /// A segment holding all of `[lbn, lbn + sectors)`. `filling` names the
    /// segment read-ahead is filling and how far it has got.
    pub fn find_whole(
        &self,
        lbn: u64,
        sectors: u64,
        filling: Option<(usize, u64)>,
    ) -> Option<usize> {
        (0..self.segments.len()).find(|&i| {
            let (lo, hi) = self.window(i, end_for(filling, i));
            lo <= lbn && lbn + sectors <= hi
        })
    }

    /// A segment holding `lbn` (and possibly more after it), with its end.
    pub fn find_start(&self, lbn: u64) -> Option<(usize, u64)> {
        (0..self.segments.len()).find_map(|i| {
            let (lo, hi) = self.window(i, None);
            (lo <= lbn && lbn < hi).then_some((i, hi))
        })
    }

    /// The segment a new read takes: an empty one first (lowest index),
    /// else the least recently used (lowest index among ties). Empty
    /// segments are those never used, invalidated by a write, or whose data
    /// the host took with requested-data caching off: taking them first
    /// keeps data the host has yet to read (a prefetched block) as long as
    /// any segment is free (assumption: seed 003 does not say how its
    /// modified DiskSim replaces segments; docs/disk-model.md).
    /// Segments in `pinned` (hits whose data has not crossed the bus yet)
    /// are taken only when every segment is pinned.
    pub fn victim(&self, pinned: &[usize]) -> usize {
        (0..self.segments.len())
            .min_by_key(|&i| {
                let s = &self.segments[i];
                (pinned.contains(&i), s.start < s.end, s.last_use)
            })
            .expect("victim() needs an enabled cache")
    }

    /// Marks a segment used now.
    pub fn touch(&mut self, i: usize) {
        self.uses += 1;
        self.segments[i].last_use = self.uses;
    }

    /// Sets a segment's contents to `[start, end)` (trimmed to its size) and marks it used.
    pub fn fill(&mut self, i: usize, start: u64, end: u64) {
        debug_assert!(start <= end);
        let start = start.max(end.saturating_sub(self.segment_sectors));
        self.segments[i].start = start;
        self.segments[i].end = end;
        self.touch(i);
    }

    /// Read-ahead has read up to `end` into segment `i`.
    pub fn extend(&mut self, i: usize, end: u64) {
        let (start, _) = self.window(i, Some(end));
        let s = &mut self.segments[i];
        s.end = s.end.max(end);
        s.start = start;
    }

    /// Drops what segment `i` holds below `lbn` (requested data the host has
    /// taken, when requested data is not kept). The segment stays one window:
    /// it starts at `lbn` and grows as read-ahead fills it.
    pub fn drop_below(&mut self, i: usize, lbn: u64) {
        let s = &mut self.segments[i];
        s.start = s.start.max(lbn);
        s.end = s.end.max(s.start);
    }

    /// Drops every segment that overlaps `[lbn, lbn + sectors)` (a write changed them).
    pub fn invalidate(&mut self, lbn: u64, sectors: u64) {
        for i in 0..self.segments.len() {
            let (lo, hi) = self.window(i, None);
            if lo < lbn + sectors && lbn < hi {
                let s = &mut self.segments[i];
                s.start = 0;
                s.end = 0;
            }
        }
    }
}

fn end_for(filling: Option<(usize, u64)>, i: usize) -> Option<u64> {
    filling.and_then(|(seg, end)| (seg == i).then_some(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_trim_to_the_newest_sectors() {
        let mut c = SegmentCache::new(3, 10);
        c.fill(0, 100, 104);
        assert_eq!(c.window(0, None), (100, 104));
        // Read-ahead filling to 112 pushes the oldest two sectors out.
        assert_eq!(c.window(0, Some(112)), (102, 112));
        c.extend(0, 112);
        assert_eq!(c.window(0, None), (102, 112));
        // A fill longer than the segment keeps its tail.
        c.fill(1, 0, 50);
        assert_eq!(c.window(1, None), (40, 50));
    }

    #[test]
    fn lookups_and_lru() {
        let mut c = SegmentCache::new(3, 10);
        c.fill(0, 100, 108);
        c.fill(1, 200, 205);
        assert_eq!(c.find_whole(101, 7, None), Some(0));
        assert_eq!(c.find_whole(101, 8, None), None);
        assert_eq!(c.find_whole(101, 8, Some((0, 109))), Some(0));
        assert_eq!(c.find_start(204), Some((1, 205)));
        assert_eq!(c.find_start(205), None);
        // Segment 2 was never used; then 0 (filled before 1).
        assert_eq!(c.victim(&[]), 2);
        c.fill(2, 300, 301);
        assert_eq!(c.victim(&[]), 0);
        c.touch(0);
        assert_eq!(c.victim(&[]), 1);
        c.invalidate(204, 10);
        assert_eq!(c.find_start(200), None);
        assert_eq!(c.find_start(100), Some((0, 108)));
        // Dropping what lies below an LBN leaves the rest of the window.
        c.fill(1, 200, 210);
        c.drop_below(1, 205);
        assert_eq!(c.window(1, None), (205, 210));
        c.drop_below(1, 215);
        assert_eq!(c.window(1, None), (215, 215));
        assert_eq!(c.find_start(215), None);
        assert!(!SegmentCache::new(3, 0).enabled());
        assert!(!SegmentCache::new(0, 10).enabled());
    }
}
