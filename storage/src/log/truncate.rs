//! Truncation of a partition log's tail, for a follower whose log diverged from its leader's
//! (Kafka's `truncateTo` and `truncateFullyAndStartAt`). Runs under the flush lock on the
//! shard owning the partition; appends are refused while it runs (`State::truncating`).
//!
//! `truncate_to(offset)` keeps whole batches: the log then ends at `offset`, or at the base
//! offset of the batch holding it (Kafka's segments truncate at batch boundaries too). Below
//! the log start offset it is refused (`OffsetOutOfRange`): that is `truncate_fully_and_start_at`.
//! Below the high watermark it is done with a warning (the outcome says so), as Kafka does.
//!
//! Order, chosen so that a crash at any point leaves a log that `open` recovers to the old
//! state, the truncated one, or a prefix of the old log between them (whole segments gone
//! from the top: the follower fetches them again), never one with a hole:
//! 1. everything staged is written and synced (a disk-full stall fails the truncation; it
//!    can be retried), and the log start offset file is lowered if the point is below it;
//! 2. the in-memory state is cut at once (one borrow, no await): later segments dropped, the
//!    holding segment sized to the point, offsets, tail cache, epochs, transactions;
//! 3. the later segments' files are deleted, highest base first, indexes before the `.log`;
//! 4. the holding segment's file is truncated to the point and synced, and its index files
//!    removed (it is the active segment now: open rescans it and rebuilds them);
//! 5. `leader-epoch-checkpoint` is rewritten (open also cuts epochs at the recovered end);
//! 6. the producer state is rebuilt as of the point, as open builds it: the newest snapshot at
//!    or below it, batch headers replayed from there, snapshots past the point deleted, the
//!    holding segment's aborted transaction index rebuilt (open does the same);
//! 7. the high watermark checkpoint is rewritten (open clamps it to the log end anyway).
//!
//! A failure from step 3 on poisons the log, as does a future dropped midway after step 2:
//! memory and files may disagree until the log is reopened, which recovers as above.

use std::rc::Rc;

use crate::error::StorageError;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::Disk;
use crate::producer_state::ProducerStateManager;
use crate::segment::{align_down, segment_path, Segment};
use crate::types::{Offset, TruncateOutcome};
use keel_vocab::BytePosition;

use super::{write_log_start, Inner, Log, State};

/// Refuses appends while set; on drop, poisons the log if the truncation stopped after its
/// in-memory cut and before it finished.
struct Truncating {
    inner: Rc<Inner>,
    cut: bool,
    done: bool,
}

impl Truncating {
    fn start(inner: &Rc<Inner>) -> Truncating {
        inner.state.borrow_mut().truncating = true;
        Truncating {
            inner: inner.clone(),
            cut: false,
            done: false,
        }
    }
}

impl Drop for Truncating {
    fn drop(&mut self) {
        let mut s = self.inner.state.borrow_mut();
        s.truncating = false;
        if self.cut && !self.done && s.poisoned.is_none() {
            tracing::error!(dir = %self.inner.dir.display(), "truncation stopped midway; refusing writes until the log is reopened");
            s.poisoned = Some("truncation stopped midway".to_string());
            crate::poison::signal_offline();
        }
    }
}

/// The holding segment's state up to the truncation point, read before the cut.
struct SegmentCut {
    base: Offset,
    point: Offset,
    position: u64,
    file: Rc<crate::io::SegmentFile>,
    tail_block: Vec<u8>,
    index: OffsetIndex,
    time_index: TimeIndex,
    max_timestamp_ms: i64,
    offset_of_max_timestamp: Offset,
    bytes_since_index: u64,
}

impl State {
    /// Drops cached batches at or past `point`.
    fn cache_truncate(&mut self, point: Offset) {
        while self
            .tail_cache
            .back()
            .is_some_and(|b| b.last_offset >= point)
        {
            if let Some(b) = self.tail_cache.pop_back() {
                self.tail_cache_bytes -= b.bytes.len();
                crate::tail_budget::release(b.bytes.len());
            }
        }
        // Whole batches ending at the log end: a cache whose last batch ends before the point
        // (a gap) would not be contiguous with later appends.
        if self
            .tail_cache
            .back()
            .is_some_and(|b| b.last_offset.0 + 1 != point.0)
        {
            self.cache_trim(0);
        }
    }
}

impl Log {
    /// Removes every batch at or past `offset` (see the module docs). Returns what it did.
    pub async fn truncate_to(&self, offset: Offset) -> Result<TruncateOutcome, StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        // Nothing to cut at or past the log end, but as Kafka's `truncateTo` the epoch cache
        // still drops what starts at the log end: a replica that took up a leadership and was
        // deposed before it appended keeps that epoch's entry at its log end, sends it as its
        // last fetched epoch, and the leader (which never heard of it) answers the same
        // divergence forever (found by keel-sim --controller-network --metadata-network, seed
        // 9671).
        let at_end = {
            let mut s = self.inner.state.borrow_mut();
            s.check_poisoned()?;
            let end = s.log_end_offset;
            (offset >= end).then(|| {
                let dropped = s.epochs.truncate_from_end(end);
                if dropped {
                    s.epochs_dirty = true;
                }
                (end, dropped)
            })
        };
        if let Some((end, dropped)) = at_end {
            if dropped {
                let result = self.persist_epochs().await;
                self.poison_on_error(result)?;
            }
            return Ok(TruncateOutcome {
                log_end_offset: end,
                ..TruncateOutcome::default()
            });
        }
        {
            let s = self.inner.state.borrow();
            if offset < s.log_start_offset {
                return Err(StorageError::OffsetOutOfRange {
                    requested: offset,
                    log_start_offset: s.log_start_offset,
                    log_end_offset: s.log_end_offset,
                });
            }
        }
        let mut guard = Truncating::start(&self.inner);
        self.flush_locked(true).await?;
        let cut = self.read_cut(offset).await?;
        let point = cut.point;
        if point < self.offsets().log_start_offset {
            write_log_start(&self.inner.disk, &self.inner.dir, point).await?;
        }
        guard.cut = true;
        let (removed, below_hw) = self.inner.state.borrow_mut().cut_at(cut);
        if below_hw {
            tracing::warn!(dir = %self.inner.dir.display(), offset = point.0, "truncating below the high watermark");
        }
        let segments_deleted = removed.len();
        let result = self.truncate_files(removed, point).await;
        self.poison_on_error(result)?;
        guard.done = true;
        tracing::info!(dir = %self.inner.dir.display(), offset = point.0, segments_deleted, "truncated the log");
        Ok(TruncateOutcome {
            log_end_offset: point,
            truncated: true,
            below_high_watermark: below_hw,
            segments_deleted,
        })
    }

    /// Steps 3 to 7 of the module docs.
    async fn truncate_files(
        &self,
        removed: Vec<Segment>,
        point: Offset,
    ) -> Result<(), StorageError> {
        let dir = self.inner.dir.clone();
        let removed_any = !removed.is_empty();
        for g in removed.into_iter().rev() {
            if let Some(file) = g.file {
                let _ = file.close_rc().await;
            }
            remove_segment_files(
                &self.inner.disk,
                &dir,
                g.base_offset,
                &["index", "timeindex", "txnindex", "log"],
            )
            .await?;
        }
        if removed_any {
            // The removals are durable before the remaining segment is cut: a power cut in
            // between must not leave the cut segment followed by a later one it no longer
            // reaches (a gap, the partition offline; found by the fault simulation,
            // replicated seed 865).
            self.inner.disk.sync_dir_async(&dir).await?;
        }
        let (base, file, size) = {
            let mut s = self.inner.state.borrow_mut();
            let active = s.active();
            (active.base_offset, active.file.clone(), active.size)
        };
        if let Some(file) = file {
            file.truncate(size).await?;
            crate::io_depth::track(crate::io_depth::IoKind::Sync, file.fdatasync()).await?;
        }
        remove_segment_files(
            &self.inner.disk,
            &dir,
            base,
            &["index", "timeindex", "txnindex"],
        )
        .await?;
        self.inner.disk.sync_dir_async(&dir).await?;
        self.persist_epochs().await?;
        self.truncate_cleaner_checkpoint(point).await?;
        self.load_producer_state(self.inner.cleaned_up_to.get())
            .await?;
        self.write_hw_checkpoint_locked().await?;
        // Nothing past the cut is synced log any more.
        self.write_recovery_point_locked(Some(point)).await?;
        Ok(())
    }

    /// Compaction's first dirty offset never lies past the log end (Kafka's
    /// `maybeTruncateCheckpoint`).
    async fn truncate_cleaner_checkpoint(&self, point: Offset) -> Result<(), StorageError> {
        let path = self.inner.dir.join(super::cleaner::CLEANER_FILE);
        if self.inner.cleaned_up_to.get() > point && self.inner.disk.exists(&path) {
            self.inner
                .disk
                .write_file_atomic(&path, format!("{}\n", point.0).into_bytes())
                .await?;
        }
        if self.inner.cleaned_up_to.get() > point {
            self.inner.cleaned_up_to.set(point);
        }
        Ok(())
    }

    /// Finds the batch boundary at or below `offset` and reads what the holding segment
    /// keeps: its last partial block and its indexes up to there. No state changes.
    async fn read_cut(&self, offset: Offset) -> Result<SegmentCut, StorageError> {
        let (base, start, size, next_offset, finalized_file) = {
            let s = self.inner.state.borrow();
            let g = &s.segments[s.segment_for(offset)];
            let rel = u32::try_from(offset.0 - g.base_offset.0).unwrap_or(u32::MAX);
            (
                g.base_offset,
                g.index.lookup(rel).0,
                g.size,
                g.next_offset,
                g.file.is_none(),
            )
        };
        let found = self
            .find_batch(base, start, size, |h| h.last_offset() >= offset.0)
            .await?;
        let (point, position) = match found {
            Some((pos, h)) => (Offset(h.base_offset), pos),
            None => (next_offset, size),
        };
        let file = if finalized_file {
            crate::file_cache::forget(&segment_path(&self.inner.dir, base, "log"));
            Rc::new(
                self.inner
                    .disk
                    .open_log_file(&segment_path(&self.inner.dir, base, "log"), false)
                    .await?,
            )
        } else {
            self.segment_file(base)?
        };
        let block_start = align_down(position);
        let tail_block = self
            .read_range(base, block_start, position - block_start)
            .await?
            .to_vec();
        if tail_block.len() as u64 != position - block_start {
            return Err(StorageError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "short read of the last block",
            )));
        }
        // Indexes: the entries before the point, then the batches after the last kept offset
        // index entry noted again, as the appends noted them.
        let mut scratch = Segment::new(base, None);
        let (interval, index, time_index) = {
            let s = self.inner.state.borrow();
            let g = s.segment(base).ok_or_else(|| {
                StorageError::Io(std::io::Error::other("segment vanished during truncation"))
            })?;
            (
                s.config.index_interval_bytes,
                g.index.clone(),
                g.time_index.clone(),
            )
        };
        scratch.index = index;
        scratch
            .index
            .entries
            .retain(|&(_, pos)| (pos as u64) < position);
        scratch.time_index = time_index;
        scratch
            .time_index
            .entries
            .retain(|&(_, rel)| base.0 + (rel as i64) < point.0);
        if let Some((ts, rel)) = scratch.time_index.last() {
            scratch.max_timestamp_ms = ts;
            scratch.offset_of_max_timestamp = Offset(base.0 + rel as i64);
        }
        let mut pos = scratch.index.entries.last().map_or(0, |&(_, p)| p as u64);
        while pos < position {
            let Some((at, h)) = self.find_batch(base, pos, position, |_| true).await? else {
                break;
            };
            scratch.note_batch(BytePosition(at), &h, interval);
            pos = at + h.size as u64;
        }
        Ok(SegmentCut {
            base,
            point,
            position,
            file,
            tail_block,
            index: scratch.index,
            time_index: scratch.time_index,
            max_timestamp_ms: scratch.max_timestamp_ms,
            offset_of_max_timestamp: scratch.offset_of_max_timestamp,
            bytes_since_index: scratch.bytes_since_index,
        })
    }

    /// Deletes every segment and restarts the log empty at `offset`: log start = log end =
    /// high watermark = `offset` (Kafka's `truncateFullyAndStartAt`, for a follower whose log
    /// end is below its leader's log start offset). Producer state, snapshots, leader epochs
    /// and transactions are cleared. Crash-safe order: the old segment files go (highest
    /// first), then the new empty segment file is created, then `log-start-offset` written;
    /// open of any intermediate state gives an empty log or one at `offset`.
    pub async fn truncate_fully_and_start_at(&self, offset: Offset) -> Result<(), StorageError> {
        if offset.0 < 0 {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                log_start_offset: self.offsets().log_start_offset,
                log_end_offset: self.offsets().log_end_offset,
            });
        }
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        self.inner.state.borrow().check_poisoned()?;
        let mut guard = Truncating::start(&self.inner);
        guard.cut = true;
        let (removed, snapshots) = {
            let mut s = self.inner.state.borrow_mut();
            let removed = std::mem::replace(&mut s.segments, vec![Segment::new(offset, None)]);
            s.log_start_offset = offset;
            s.log_end_offset = offset;
            s.high_watermark = offset;
            s.written_end = offset;
            s.synced_end = offset;
            s.cache_trim(0);
            s.epochs = crate::epoch::EpochCache::default();
            s.epochs_dirty = true;
            s.producers = ProducerStateManager::new();
            s.pending_snapshots.clear();
            s.unreplicated_txns.clear();
            (removed, std::mem::take(&mut s.snapshots))
        };
        let result = async {
            let dir = self.inner.dir.clone();
            for g in removed.into_iter().rev() {
                if let Some(file) = g.file {
                    let _ = file.close_rc().await;
                }
                crate::file_cache::forget(&segment_path(&dir, g.base_offset, "log"));
                remove_segment_files(
                    &self.inner.disk,
                    &dir,
                    g.base_offset,
                    &["index", "timeindex", "txnindex", "log"],
                )
                .await?;
            }
            let mut stale = self.inner.disk.list_offset_files(&dir, ".snapshot")?;
            stale.extend(snapshots);
            for o in stale {
                super::snapshots::remove_snapshot(&self.inner.disk, &dir, o).await?;
            }
            let file = self
                .inner
                .disk
                .open_log_file(&segment_path(&dir, offset, "log"), true)
                .await?;
            self.inner.disk.sync_dir_async(&dir).await?;
            if let Some(g) = self.inner.state.borrow_mut().segments.first_mut() {
                g.file = Some(Rc::new(file));
            }
            write_log_start(&self.inner.disk, &dir, offset).await?;
            self.persist_epochs().await?;
            self.truncate_cleaner_checkpoint(offset).await?;
            self.write_hw_checkpoint_locked().await?;
            self.write_recovery_point_locked(Some(offset)).await?;
            Ok(())
        }
        .await;
        self.poison_on_error(result)?;
        guard.done = true;
        tracing::info!(dir = %self.inner.dir.display(), offset = offset.0, "log emptied and restarted");
        Ok(())
    }
}

impl State {
    /// Step 2 of the module docs: cuts the in-memory log at `cut.point`. Returns the segments
    /// dropped (their files still to delete) and whether the high watermark went down.
    fn cut_at(&mut self, cut: SegmentCut) -> (Vec<Segment>, bool) {
        let point = cut.point;
        let i = self
            .segments
            .iter()
            .position(|g| g.base_offset == cut.base)
            .unwrap_or(self.segments.len() - 1);
        let removed: Vec<Segment> = self.segments.drain(i + 1..).collect();
        let g = &mut self.segments[i];
        g.size = cut.position;
        g.written = cut.position;
        g.synced = cut.position;
        g.pending.clear();
        g.tail_block = cut.tail_block;
        g.file = Some(cut.file);
        g.index = cut.index;
        g.time_index = cut.time_index;
        g.max_timestamp_ms = cut.max_timestamp_ms;
        g.offset_of_max_timestamp = cut.offset_of_max_timestamp;
        g.bytes_since_index = cut.bytes_since_index;
        g.next_offset = point.max(g.base_offset);
        g.closed = false;
        g.finalized = false;
        // Rebuilt by the producer state's replay (step 6).
        g.txn_index = Default::default();
        g.txn_index_on_disk = false;
        if cut.position == 0 {
            g.created_ms = None;
            g.first_batch_max_ts = None;
        }
        for g in self.segments.iter_mut().filter(|g| !g.txn_index_on_disk) {
            g.txn_index = Default::default();
        }
        self.log_end_offset = point;
        self.written_end = self.written_end.min(point);
        self.synced_end = self.synced_end.min(point);
        let below_hw = point < self.high_watermark;
        self.high_watermark = self.high_watermark.min(point);
        self.log_start_offset = self.log_start_offset.min(point);
        self.cache_truncate(point);
        if self.epochs.truncate_from_end(point) {
            self.epochs_dirty = true;
        }
        self.pending_snapshots.retain(|(o, _)| *o <= point);
        self.unreplicated_txns.retain(|_, marker| *marker < point.0);
        (removed, below_hw)
    }
}

/// Removes segment `base`'s files with these extensions, in order; missing ones are fine.
async fn remove_segment_files(
    disk: &Disk,
    dir: &std::path::Path,
    base: Offset,
    exts: &[&str],
) -> Result<(), StorageError> {
    for ext in exts {
        let path = segment_path(dir, base, ext);
        if *ext == "log" {
            crate::file_cache::forget(&path);
        }
        match disk.remove(&path).await {
            Ok(()) => {}
            Err(e) if disk.exists(&path) => return Err(e.into()),
            Err(_) => {}
        }
    }
    Ok(())
}
