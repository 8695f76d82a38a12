//! Sparse indexes of one segment, held in memory and written as Kafka's `.index` (relative
//! offset u32 BE -> file position u32 BE, 8 bytes/entry) and `.timeindex` (max timestamp i64 BE
//! -> relative offset u32 BE, 12 bytes/entry). Invariants: entries strictly increase in offset
//! and position (offset index) and in timestamp (time index); an offset-index entry names the
//! base offset of the batch starting at that position. Decoding assumes hostile bytes. Runs on
//! the shard owning the partition.

use keel_vocab::BytePosition;

pub const OFFSET_ENTRY_BYTES: usize = 8;
pub const TIME_ENTRY_BYTES: usize = 12;

/// Relative offset -> byte position of the batch whose base offset it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    pub entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    /// Appends an entry if it keeps the index strictly increasing.
    /// Kafka's `.index` holds positions as u32: a segment is at most `i32::MAX` bytes.
    pub fn push(&mut self, relative_offset: u32, position: BytePosition) {
        let Ok(position) = u32::try_from(position.0) else {
            return;
        };
        if let Some(&(o, p)) = self.entries.last() {
            if relative_offset <= o || position <= p {
                return;
            }
        }
        self.entries.push((relative_offset, position));
    }

    /// Position of the last indexed batch whose base offset is <= `relative_offset`
    /// (0 when none is): scanning forward from there reaches the batch holding it.
    pub fn lookup(&self, relative_offset: u32) -> BytePosition {
        let i = self.entries.partition_point(|&(o, _)| o <= relative_offset);
        if i == 0 {
            BytePosition(0)
        } else {
            BytePosition(u64::from(self.entries[i - 1].1))
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY_BYTES);
        for &(o, p) in &self.entries {
            out.extend_from_slice(&o.to_be_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
        out
    }

    /// Decodes a file's bytes; `None` unless it is a whole number of strictly increasing
    /// entries whose positions lie inside a log of `log_bytes`.
    pub fn decode(b: &[u8], log_bytes: u64) -> Option<OffsetIndex> {
        if b.len() % OFFSET_ENTRY_BYTES != 0 {
            return None;
        }
        let mut index = OffsetIndex::default();
        for e in b.chunks_exact(OFFSET_ENTRY_BYTES) {
            let o = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let p = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            if let Some(&(lo, lp)) = index.entries.last() {
                if o <= lo || p <= lp {
                    return None;
                }
            }
            if p as u64 >= log_bytes {
                return None;
            }
            index.entries.push((o, p));
        }
        Some(index)
    }
}

/// Max timestamp so far -> relative offset of the batch (last offset) that reached it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeIndex {
    pub entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    /// Appends an entry if it raises the indexed timestamp.
    pub fn maybe_push(&mut self, timestamp_ms: i64, relative_offset: u32) {
        match self.entries.last() {
            Some(&(t, o)) if timestamp_ms <= t || relative_offset < o => {}
            _ => self.entries.push((timestamp_ms, relative_offset)),
        }
    }

    /// Relative offset of the last entry with a timestamp strictly below `ts_ms`: every record
    /// at or before it is older than `ts_ms`. `None` when no entry is older.
    pub fn lookup_before(&self, ts_ms: i64) -> Option<u32> {
        let i = self.entries.partition_point(|&(t, _)| t < ts_ms);
        if i == 0 {
            None
        } else {
            Some(self.entries[i - 1].1)
        }
    }

    pub fn last(&self) -> Option<(i64, u32)> {
        self.entries.last().copied()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_ENTRY_BYTES);
        for &(t, o) in &self.entries {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&o.to_be_bytes());
        }
        out
    }

    /// Decodes a file's bytes; `None` unless it is a whole number of entries increasing in
    /// timestamp and non-decreasing in offset.
    pub fn decode(b: &[u8]) -> Option<TimeIndex> {
        if b.len() % TIME_ENTRY_BYTES != 0 {
            return None;
        }
        let mut index = TimeIndex::default();
        for e in b.chunks_exact(TIME_ENTRY_BYTES) {
            let mut t = [0u8; 8];
            t.copy_from_slice(&e[..8]);
            let t = i64::from_be_bytes(t);
            let o = u32::from_be_bytes([e[8], e[9], e[10], e[11]]);
            if let Some(&(lt, lo)) = index.entries.last() {
                if t <= lt || o < lo {
                    return None;
                }
            }
            index.entries.push((t, o));
        }
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_round_trip_and_lookup() {
        let mut i = OffsetIndex::default();
        let at = BytePosition;
        i.push(0, at(0));
        i.push(10, at(4096));
        i.push(10, at(5000)); // not increasing: ignored
        i.push(20, at(8200));
        i.push(30, at(u64::from(u32::MAX) + 1)); // past what `.index` holds: ignored
        let d = OffsetIndex::decode(&i.encode(), 9000).unwrap();
        assert_eq!(d, i);
        assert_eq!(d.lookup(5), at(0));
        assert_eq!(d.lookup(10), at(4096));
        assert_eq!(d.lookup(19), at(4096));
        assert_eq!(d.lookup(100), at(8200));
        assert!(
            OffsetIndex::decode(&i.encode(), 8200).is_none(),
            "entry past end of log"
        );
        assert!(
            OffsetIndex::decode(&i.encode()[..7], 9000).is_none(),
            "partial entry"
        );
    }

    #[test]
    fn time_index_round_trip_and_lookup() {
        let mut t = TimeIndex::default();
        t.maybe_push(100, 3);
        t.maybe_push(90, 5); // older: ignored
        t.maybe_push(200, 9);
        let d = TimeIndex::decode(&t.encode()).unwrap();
        assert_eq!(d, t);
        assert_eq!(d.lookup_before(100), None);
        assert_eq!(d.lookup_before(101), Some(3));
        assert_eq!(d.lookup_before(1000), Some(9));
        assert_eq!(d.last(), Some((200, 9)));
    }
}
