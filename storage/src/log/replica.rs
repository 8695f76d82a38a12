//! Replication's half in the partition log (Kafka's ISR replication, followers pulling by
//! Fetch): the replicated mode, where the high watermark is kept apart from what this replica
//! has made durable; its checkpoint; the follower's append of the leader's batches; the
//! leader epoch recorded on becoming leader; the log start offset a follower learns from its
//! leader. Truncation is in `truncate`.
//!
//! Modes (`Log::set_replicated`, off after `open`): a single-replica log is acknowledged
//! when durable, so `commit`/`sync`/`close`/`retry_stalled` move the high watermark to what
//! the flush policy has made durable, as always. A replicated log's flushes make data durable
//! and move `durable_end` (what this replica may report as fetched: synced under
//! `flush.policy=group`, written under `interval`) but never the high watermark: only
//! `advance_high_watermark` does (the replication layer: on a leader the least log end
//! offset over the ISR, on a follower min(the leader's high watermark, its own log end)). It
//! moves forward only, never past the log end; only truncation moves it back. The mode is not
//! part of `LogConfig` (a topic config change would reset it): the broker sets it after every
//! open. Turning it off moves the high watermark up to `durable_end` at once.
//!
//! `replication-offset-checkpoint` (one per partition, as `log-start-offset`; Kafka keeps one
//! per log dir) holds the high watermark as text. A replicated log writes it from
//! `checkpoint_high_watermark` (when changed since its last write) and from `close`; a
//! single-replica log never writes it. At open: high watermark = min(checkpoint, log end),
//! at least the log start; without the file it is the log end (a data dir of an earlier
//! version, whose single replica acknowledged everything in it). A malformed file gives the
//! log start offset: too low is safe, the leader's next answer raises it.
//!
//! Follower appends (`append_as_follower`, Kafka's `AppendOrigin.REPLICATION`) keep the
//! leader's offsets, epochs and timestamps byte for byte; no sequence or epoch check of
//! producers (the leader made them), no recompression, no key check. Every check runs before
//! anything is staged, so a refused append changes nothing. Runs on the shard owning the
//! partition; nothing here holds a `RefCell` borrow across an `.await`.

use std::path::Path;

use bytes::Bytes;

use crate::batch::{validate_batches, BatchHeader};
use crate::error::StorageError;
use crate::io::Disk;
use crate::types::{AppendInfo, LeaderEpoch, Offset};

use super::Log;

/// The high watermark checkpoint in the partition directory.
pub(super) const HW_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";

/// At open: the checkpointed high watermark, `None` without the file. A malformed file reads
/// as offset 0 (the open raises it to the log start offset).
pub(super) async fn read_hw_checkpoint(
    disk: &Disk,
    dir: &Path,
) -> Result<Option<Offset>, StorageError> {
    let Some(bytes) = disk.read_file(&dir.join(HW_CHECKPOINT_FILE)).await? else {
        return Ok(None);
    };
    let parsed = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .filter(|o| *o >= 0);
    Ok(Some(match parsed {
        Some(o) => Offset(o),
        None => {
            tracing::warn!(dir = %dir.display(), "malformed replication-offset-checkpoint; the high watermark starts at the log start offset");
            Offset(0)
        }
    }))
}

impl Log {
    /// Turns the replicated mode on or off (see the module docs). Off moves the high watermark
    /// up to `durable_end`.
    pub fn set_replicated(&self, replicated: bool) {
        let mut s = self.inner.state.borrow_mut();
        s.replicated = replicated;
        let durable = s.durable_end();
        s.follow_durable(durable);
    }

    pub fn is_replicated(&self) -> bool {
        self.inner.state.borrow().replicated
    }

    /// What this replica may report as fetched: every offset below is synced
    /// (`flush.policy=group`) or written (`interval`).
    pub fn durable_end(&self) -> Offset {
        self.inner.state.borrow().durable_end()
    }

    /// Flushes until `durable_end >= min(upto, log_end_offset)`, sharing flushes with
    /// concurrent `commit`s; moves no high watermark. Returns `durable_end`.
    pub async fn make_durable(&self, upto: Offset) -> Result<Offset, StorageError> {
        self.durable_upto(upto, false).await
    }

    /// Moves the high watermark forward to `to` (never back, never past the log end offset);
    /// the last stable offset follows. Wakes nobody: the broker wakes its fetchers. Returns
    /// the high watermark.
    pub fn advance_high_watermark(&self, to: Offset) -> Offset {
        let mut s = self.inner.state.borrow_mut();
        if s.poisoned.is_some() {
            // An offline replica keeps nothing moving (Kafka drops an offline log's partition
            // from memory, and waiting acks=all writes get KAFKA_STORAGE_ERROR). Seen while
            // building keel-sim --metadata-network: an offline former leader that learned a
            // committed ISR expansion late moved its high watermark.
            return s.high_watermark;
        }
        let to = to.min(s.log_end_offset);
        if to > s.high_watermark {
            s.high_watermark = to;
            let hw = to.0;
            s.unreplicated_txns.retain(|_, marker| *marker >= hw);
        }
        s.assert_offsets();
        s.high_watermark
    }

    /// Writes `replication-offset-checkpoint` if the log is replicated and its high watermark
    /// changed since the last write. Returns whether it wrote.
    pub async fn checkpoint_high_watermark(&self) -> Result<bool, StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        self.write_hw_checkpoint_locked().await
    }

    /// `checkpoint_high_watermark` for a caller holding the flush lock (one writer of the
    /// file at a time).
    pub(super) async fn write_hw_checkpoint_locked(&self) -> Result<bool, StorageError> {
        let hw = {
            let s = self.inner.state.borrow();
            if !s.replicated || s.hw_checkpointed == Some(s.high_watermark) {
                return Ok(false);
            }
            s.high_watermark
        };
        self.inner
            .disk
            .write_file_atomic(
                &self.inner.dir.join(HW_CHECKPOINT_FILE),
                format!("{}\n", hw.0).into_bytes(),
            )
            .await?;
        self.inner.state.borrow_mut().hw_checkpointed = Some(hw);
        Ok(true)
    }

    /// Makes this log ready for a follower append of `batches` that leaves offset gaps (the
    /// leader's log was compacted: Kafka's follower takes any increasing offsets). Recovery
    /// accepts gaps only in a log with a cleaner checkpoint, so when `batches` has a gap and
    /// this log does not take gaps yet, the checkpoint is written first (cleaned up to the log
    /// start: this log's own cleaner still finds all of it dirty) and gaps are allowed from
    /// then on. Nothing happens for batches without a gap. Call before `append_as_follower`.
    pub async fn prepare_for_gaps(&self, batches: &[u8]) -> Result<(), StorageError> {
        let (allowed, mut expected, start) = {
            let s = self.inner.state.borrow();
            (s.gaps_allowed, s.log_end_offset.0, s.log_start_offset.0)
        };
        if allowed {
            return Ok(());
        }
        let mut pos = 0usize;
        let mut gap = false;
        while let Some(h) = batches.get(pos..).and_then(BatchHeader::parse) {
            if h.base_offset > expected {
                gap = true;
                break;
            }
            expected = h.last_offset().saturating_add(1);
            pos = match pos.checked_add(h.size) {
                Some(next) if next <= batches.len() => next,
                _ => break,
            };
        }
        if !gap {
            return Ok(());
        }
        let path = self.inner.dir.join(super::cleaner::CLEANER_FILE);
        if self.inner.disk.read_file(&path).await?.is_none() {
            self.inner
                .disk
                .write_file_atomic(&path, format!("{start}\n").into_bytes())
                .await?;
        }
        self.inner.state.borrow_mut().gaps_allowed = true;
        Ok(())
    }

    /// A follower's append of batches fetched from its leader (Kafka's
    /// `appendAsFollower`): kept as they are (offsets, partitionLeaderEpoch, timestamps,
    /// compression), staged and indexed as a leader's append is, with the leader epochs,
    /// producer state (no sequence checks) and transaction markers recorded. Does not move
    /// the high watermark.
    ///
    /// Refused whole, with nothing changed (`CorruptMessage`/`InvalidRecord`/
    /// `MessageTooLarge` from validation, else `ReplicaAppend`), unless: every batch is valid
    /// (header, CRC32C, `max.message.bytes`); base offsets strictly increase: the first at the
    /// log end offset, each after the previous batch's last offset (Kafka's follower takes any
    /// increasing offsets; Keel takes a gap, at the log end or between batches, only on a log
    /// whose recovery accepts gaps, one with a cleaner checkpoint: `prepare_for_gaps` makes
    /// one); partitionLeaderEpochs never
    /// go down (from the log's latest epoch on) nor above `max_epoch`, the leader's current
    /// epoch.
    pub fn append_as_follower(
        &self,
        batches: Bytes,
        max_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let info = self.append_as_follower_inner(batches, max_epoch, now_ms);
        crate::tail_budget::enforce();
        info
    }

    fn append_as_follower_inner(
        &self,
        batches: Bytes,
        max_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let mut s = self.inner.state.borrow_mut();
        s.check_writable()?;
        let summary = validate_batches(&batches, s.config.max_message_bytes)?;
        let refuse = |why: String| Err(StorageError::ReplicaAppend(why));
        let mut expected = s.log_end_offset.0;
        let mut previous_epoch = s.epochs.latest().map_or(-1, |e| e.0);
        let mut first = None;
        let mut pos = 0usize;
        while pos < batches.len() {
            let h = BatchHeader::parse(&batches[pos..])
                .ok_or_else(|| StorageError::CorruptMessage("batch vanished".to_string()))?;
            let base = h.base_offset;
            if base < expected {
                return refuse(format!(
                    "batch at offset {base} overlaps the log, which continues at {expected}"
                ));
            }
            if base > expected && !s.gaps_allowed {
                return refuse(format!(
                    "batch at offset {base} leaves a gap after {expected} in a log whose \
                     recovery does not accept gaps"
                ));
            }
            if h.leader_epoch < previous_epoch {
                return refuse(format!(
                    "batch at offset {base} has leader epoch {} below the previous {previous_epoch}",
                    h.leader_epoch
                ));
            }
            if h.leader_epoch > max_epoch.0 {
                return refuse(format!(
                    "batch at offset {base} has leader epoch {} above the leader's {}",
                    h.leader_epoch, max_epoch.0
                ));
            }
            let Some(next) = base.checked_add(h.last_offset_delta as i64 + 1) else {
                return refuse(format!("batch at offset {base} overflows i64 offsets"));
            };
            first.get_or_insert(base);
            expected = next;
            previous_epoch = h.leader_epoch;
            pos += h.size;
        }
        let base_offset = Offset(first.unwrap_or(expected));
        s.stage_batches(&batches, None, now_ms)?;
        assert_eq!(s.log_end_offset, Offset(expected));
        Ok(AppendInfo {
            base_offset,
            last_offset: Offset(expected - 1),
            log_append_time_ms: -1,
            log_start_offset: s.log_start_offset,
            record_count: summary.record_count.min(u32::MAX as u64) as u32,
            duplicate: false,
            recompressed: None,
        })
    }

    /// On becoming leader for `epoch`: makes everything appended durable (a former follower
    /// syncs what it appended before its next fetch, which never comes: unsynced, that tail
    /// would hold the high watermark below the epoch's start until the next produce; found by
    /// the fault simulation, replicated seed 2866), records that the epoch starts at the log
    /// end offset (if it is newer than the latest epoch) and persists `leader-epoch-checkpoint`
    /// before returning, so OffsetForLeaderEpoch answers the epoch's start before its first
    /// append.
    pub async fn become_leader(&self, epoch: LeaderEpoch) -> Result<(), StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        let sync = self.config().flush_policy == crate::types::FlushPolicy::Group;
        self.flush_locked(sync).await?;
        {
            let mut s = self.inner.state.borrow_mut();
            s.check_poisoned()?;
            let log_end_offset = s.log_end_offset;
            if s.epochs.latest().is_none_or(|l| epoch > l) && s.epochs.assign(epoch, log_end_offset)
            {
                s.epochs_dirty = true;
            }
        }
        let result = self.persist_epochs().await;
        self.poison_on_error(result)
    }

    /// A follower learned its leader's log start offset: moves its own up to `offset`, capped
    /// at the high watermark (as Kafka does), persists it and deletes the segments wholly
    /// below it, as DeleteRecords does. Returns the log start offset.
    pub async fn maybe_increment_log_start_offset(
        &self,
        offset: Offset,
    ) -> Result<Offset, StorageError> {
        let target = {
            let s = self.inner.state.borrow();
            s.check_poisoned()?;
            let target = offset.min(s.high_watermark);
            if target <= s.log_start_offset {
                return Ok(s.log_start_offset);
            }
            target
        };
        self.move_log_start(target).await
    }

    /// The leader epoch cache's entries, for tests.
    #[cfg(test)]
    pub(crate) fn epoch_entries(&self) -> Vec<(LeaderEpoch, Offset)> {
        self.inner.state.borrow().epochs.entries.clone()
    }
}
