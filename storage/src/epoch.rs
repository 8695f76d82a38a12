//! Leader epoch cache: which leader epoch started at which offset, persisted as Kafka's
//! `leader-epoch-checkpoint` text file ("0\n<count>\n<epoch> <start_offset>\n..."). Invariant:
//! entries strictly increase in both epoch and start offset, and every start offset is below
//! log_end_offset once recovery has run. Runs on the shard owning the partition.

use crate::types::{LeaderEpoch, Offset};

pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const CHECKPOINT_VERSION: &str = "0";
/// Kafka's `UNDEFINED_EPOCH`.
const UNDEFINED_EPOCH: i32 = -1;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochCache {
    pub entries: Vec<(LeaderEpoch, Offset)>,
}

impl EpochCache {
    pub fn latest(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start_offset`; returns whether the cache changed.
    /// Ignored unless the epoch is newer than the latest (Kafka's `assign`); a newer epoch
    /// starting at or before an existing entry replaces those entries.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if let Some(&(e, _)) = self.entries.last() {
            if epoch <= e {
                return false;
            }
        }
        while matches!(self.entries.last(), Some(&(_, o)) if o >= start_offset) {
            self.entries.pop();
        }
        self.entries.push((epoch, start_offset));
        true
    }

    /// Drops entries starting at or after `log_end_offset`; returns whether any were dropped.
    pub fn truncate_from_end(&mut self, log_end_offset: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < log_end_offset);
        before != self.entries.len()
    }

    /// Kafka OffsetForLeaderEpoch, as `LeaderEpochFileCache.endOffsetFor`: `None` stands for
    /// Kafka's `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)` = (-1, -1). In Kafka's order:
    /// - `epoch` is -1 (undefined): `None`;
    /// - `epoch` is the latest epoch: (it, `log_end_offset`);
    /// - no known epoch is above `epoch` (it is past the latest, or the cache is empty): `None`;
    /// - no known epoch is at or below `epoch` (it is older than the first): (`epoch` itself,
    ///   the first epoch's start offset), so a follower truncates to where the leader's known
    ///   history begins;
    /// - otherwise: (the largest known epoch <= `epoch`, the start offset of the next one).
    pub fn end_offset_for(
        &self,
        epoch: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        if epoch.0 == UNDEFINED_EPOCH {
            return None;
        }
        if self.latest() == Some(epoch) {
            return Some((epoch, log_end_offset));
        }
        let i = self.entries.partition_point(|&(e, _)| e <= epoch);
        let &(_, higher_start) = self.entries.get(i)?;
        match i.checked_sub(1) {
            None => Some((epoch, higher_start)),
            Some(floor) => Some((self.entries[floor].0, higher_start)),
        }
    }

    pub fn encode(&self) -> String {
        let mut s = format!("{CHECKPOINT_VERSION}\n{}\n", self.entries.len());
        for (e, o) in &self.entries {
            s.push_str(&format!("{} {}\n", e.0, o.0));
        }
        s
    }

    /// Parses checkpoint text; `None` if it is malformed in any way.
    pub fn decode(text: &str) -> Option<EpochCache> {
        let mut lines = text.lines();
        if lines.next()?.trim() != CHECKPOINT_VERSION {
            return None;
        }
        let count: usize = lines.next()?.trim().parse().ok()?;
        let mut cache = EpochCache::default();
        for _ in 0..count {
            let mut parts = lines.next()?.split_whitespace();
            let epoch = LeaderEpoch(parts.next()?.parse().ok()?);
            let offset = Offset(parts.next()?.parse().ok()?);
            if parts.next().is_some() {
                return None;
            }
            if let Some(&(le, lo)) = cache.entries.last() {
                if epoch <= le || offset < lo {
                    return None;
                }
            }
            cache.entries.push((epoch, offset));
        }
        Some(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_text_round_trip() {
        let mut c = EpochCache::default();
        assert!(c.assign(LeaderEpoch(0), Offset(0)));
        assert!(!c.assign(LeaderEpoch(0), Offset(5)));
        assert!(c.assign(LeaderEpoch(3), Offset(10)));
        assert_eq!(c.encode(), "0\n2\n0 0\n3 10\n");
        assert_eq!(EpochCache::decode(&c.encode()), Some(c.clone()));
        assert_eq!(EpochCache::decode("0\n2\n0 0\n"), None);
        assert_eq!(EpochCache::decode("1\n0\n"), None);
    }

    /// One case per branch of Kafka's `LeaderEpochFileCache.endOffsetFor`.
    #[test]
    fn end_offset_for_matches_kafka() {
        let mut c = EpochCache::default();
        // Empty cache: no higher entry, Kafka answers (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        assert_eq!(c.end_offset_for(LeaderEpoch(0), Offset(20)), None);
        c.assign(LeaderEpoch(2), Offset(5));
        c.assign(LeaderEpoch(4), Offset(10));
        c.assign(LeaderEpoch(7), Offset(15));
        // requestedEpoch == UNDEFINED_EPOCH: (-1, -1).
        assert_eq!(c.end_offset_for(LeaderEpoch(-1), Offset(20)), None);
        // The latest epoch: (latest, log end offset).
        assert_eq!(
            c.end_offset_for(LeaderEpoch(7), Offset(20)),
            Some((LeaderEpoch(7), Offset(20)))
        );
        // Above the latest: no higher entry, (-1, -1).
        assert_eq!(c.end_offset_for(LeaderEpoch(9), Offset(20)), None);
        // Below the first: (the requested epoch, the first epoch's start offset).
        assert_eq!(
            c.end_offset_for(LeaderEpoch(1), Offset(20)),
            Some((LeaderEpoch(1), Offset(5)))
        );
        // A known epoch: (it, the next epoch's start).
        assert_eq!(
            c.end_offset_for(LeaderEpoch(2), Offset(20)),
            Some((LeaderEpoch(2), Offset(10)))
        );
        // Between known epochs: (the floor epoch, the next epoch's start).
        assert_eq!(
            c.end_offset_for(LeaderEpoch(5), Offset(20)),
            Some((LeaderEpoch(4), Offset(15)))
        );
    }
}
