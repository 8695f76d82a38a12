//! Producer-state snapshots of one partition log, beside its segments as Kafka keeps them:
//! `<offset, 20 digits>.snapshot` holds the producer state after every batch below `offset`
//! (format in `producer_state`).
//!
//! When they are written: at each segment roll (the state as of the new segment's base
//! offset, taken by `append` and written by the flush that has synced every segment below it),
//! and by `close` at the log end when everything appended is synced. The newest
//! `SNAPSHOTS_KEPT` are kept, and the newest at or below the active segment's base (an unclean
//! restart replays from there to rebuild the active segment's aborted transaction index); a
//! snapshot below the first segment goes when retention or DeleteRecords deletes that
//! segment. Every snapshot file operation runs under the flush lock
//! (or at open, before the log is shared), so the list in `State::snapshots` matches the
//! directory.
//!
//! At open: snapshots past the recovered log end (a truncated tail) or below the first
//! segment are deleted; the newest that decodes (version, CRC, offset matching its name) and
//! lies at or below the first segment whose aborted transaction index must be rebuilt (see
//! `txns`) is loaded, a corrupt one deleted and the next older tried; then the batch headers
//! (and the markers of control batches) from its offset (or from the first segment, with none)
//! to the log end are replayed, rebuilding those indexes on the way. A bad snapshot never
//! fails the open: at worst the state is rebuilt from the whole log.

use crate::batch::{BatchHeader, HEADER_BYTES};
use crate::error::StorageError;
use crate::io::Disk;
use crate::producer_state::{ProducerInfo, ProducerStateManager};
use crate::records::end_txn_marker;
use crate::segment::segment_path;
use crate::txn_index::AbortedTxn;
use crate::types::Offset;

use super::Log;

/// Snapshot files kept per partition (the newest), and pending snapshots kept while the
/// flusher is stalled.
pub(super) const SNAPSHOTS_KEPT: usize = 3;
const SNAPSHOT_EXT: &str = "snapshot";
/// Bytes read per I/O while replaying batch headers at open; a batch running past the window
/// is skipped without reading its records.
const REPLAY_WINDOW_BYTES: u64 = 256 * 1024;

impl Log {
    /// Every producer this partition knows, ascending by id (DescribeProducers).
    pub fn producers(&self) -> Vec<ProducerInfo> {
        self.inner.state.borrow().producers.producers()
    }

    /// Forgets producers whose last batch's timestamp is at least `producer.id.expiration.ms`
    /// before `now_ms` and that have no open transaction (Kafka's periodic
    /// `removeExpiredProducers`). Returns how many were forgotten. Segment rolls do the same.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let mut s = self.inner.state.borrow_mut();
        let expiration_ms = s.config.producer_id_expiration_ms;
        s.producers.expire(now_ms, expiration_ms)
    }

    /// Offsets of the snapshot files on disk, for tests.
    #[cfg(test)]
    pub(crate) fn snapshot_offsets(&self) -> Vec<Offset> {
        self.inner.state.borrow().snapshots.clone()
    }

    /// Writes the pending snapshots at or below `upto`, oldest first. Caller holds the flush
    /// lock and has synced every segment below `upto`. A snapshot whose write fails is dropped
    /// (recovery does without it) and the error returned.
    pub(super) async fn write_due_snapshots(&self, upto: Offset) -> Result<(), StorageError> {
        loop {
            let due = {
                let mut s = self.inner.state.borrow_mut();
                match s.pending_snapshots.front() {
                    Some((offset, _)) if *offset <= upto => s.pending_snapshots.pop_front(),
                    _ => None,
                }
            };
            let Some((offset, bytes)) = due else {
                return Ok(());
            };
            self.write_snapshot(offset, bytes).await?;
        }
    }

    /// Writes one snapshot file (temp file, sync, rename), then deletes the oldest beyond
    /// `SNAPSHOTS_KEPT`. Caller holds the flush lock.
    pub(super) async fn write_snapshot(
        &self,
        offset: Offset,
        bytes: Vec<u8>,
    ) -> Result<(), StorageError> {
        let dir = &self.inner.dir;
        self.inner
            .disk
            .write_file_atomic(&segment_path(dir, offset, SNAPSHOT_EXT), bytes)
            .await?;
        let doomed: Vec<Offset> = {
            let mut s = self.inner.state.borrow_mut();
            if let Err(i) = s.snapshots.binary_search(&offset) {
                s.snapshots.insert(i, offset);
            }
            let active_base = s.segments[s.segments.len() - 1].base_offset;
            let keep = s
                .snapshots
                .iter()
                .rev()
                .find(|o| **o <= active_base)
                .copied();
            let mut excess = s.snapshots.len().saturating_sub(SNAPSHOTS_KEPT);
            let mut doomed = Vec::new();
            s.snapshots.retain(|o| {
                if excess == 0 || Some(*o) == keep {
                    return true;
                }
                excess -= 1;
                doomed.push(*o);
                false
            });
            doomed
        };
        for o in doomed {
            remove_snapshot(&self.inner.disk, dir, o).await?;
        }
        tracing::debug!(dir = %dir.display(), offset = offset.0, "wrote producer snapshot");
        Ok(())
    }

    /// After segments were deleted: deletes the snapshots below the first segment. Replaying
    /// from one of them would miss the deleted batches, so its state would be stale. Caller
    /// holds the flush lock.
    pub(super) async fn delete_snapshots_before_first_segment(&self) -> Result<(), StorageError> {
        let doomed: Vec<Offset> = {
            let mut s = self.inner.state.borrow_mut();
            let first = s.segments[0].base_offset;
            s.pending_snapshots.retain(|(o, _)| *o >= first);
            let n = s.snapshots.partition_point(|o| *o < first);
            s.snapshots.drain(..n).collect()
        };
        for o in doomed {
            remove_snapshot(&self.inner.disk, &self.inner.dir, o).await?;
        }
        Ok(())
    }

    /// At open, once the segments are recovered: loads the newest usable snapshot and replays
    /// the log after it (see the module docs). `cleaned_up_to` is the cleaner checkpoint:
    /// batches below it may have been removed by compaction.
    pub(super) async fn load_producer_state(
        &self,
        cleaned_up_to: Offset,
    ) -> Result<(), StorageError> {
        let dir = self.inner.dir.clone();
        let (first_base, log_end_offset) = {
            let s = self.inner.state.borrow();
            (s.segments[0].base_offset, s.log_end_offset)
        };
        let rebuild_from = self.txn_index_rebuild_from();
        // A temp file is a write cut short; the file it was to replace (if any) is whole.
        for ext in [SNAPSHOT_EXT, super::txns::TXN_INDEX_EXT] {
            for o in self
                .inner
                .disk
                .list_offset_files(&dir, &format!(".{ext}.tmp"))?
            {
                let mut tmp = segment_path(&dir, o, ext).into_os_string();
                tmp.push(".tmp");
                let _ = self.inner.disk.remove_blocking(std::path::Path::new(&tmp));
            }
        }
        let (mut usable, stale): (Vec<Offset>, Vec<Offset>) = self
            .inner
            .disk
            .list_offset_files(&dir, ".snapshot")?
            .into_iter()
            .partition(|o| *o >= first_base && *o <= log_end_offset);
        for o in stale {
            tracing::info!(dir = %dir.display(), offset = o.0, "deleting a producer snapshot outside the log");
            remove_snapshot(&self.inner.disk, &dir, o).await?;
        }
        // Replaying from a snapshot at or below `rebuild_from` meets every marker of the
        // segments to rebuild.
        let limit = rebuild_from.unwrap_or(log_end_offset);
        let mut candidates = usable.partition_point(|o| *o <= limit);
        let mut loaded = None;
        while candidates > 0 {
            candidates -= 1;
            let o = usable[candidates];
            match read_snapshot(&self.inner.disk, &dir, o).await {
                Ok(state) => {
                    loaded = Some((o, state));
                    break;
                }
                Err(why) => {
                    usable.remove(candidates);
                    tracing::warn!(dir = %dir.display(), offset = o.0, reason = %why, "corrupt producer snapshot; deleting it and falling back to an older one or the log");
                    // It can never load (its CRC or shape is wrong): left behind, it is only
                    // skipped again.
                    if let Err(e) = remove_snapshot(&self.inner.disk, &dir, o).await {
                        tracing::warn!(dir = %dir.display(), offset = o.0, error = %e, "cannot delete a corrupt producer snapshot");
                    }
                }
            }
        }
        let (from, mut producers) = loaded.unwrap_or((first_base, ProducerStateManager::new()));
        let aborted = self
            .replay_producers(from, &mut producers, rebuild_from)
            .await?;
        if let Some(rebuild_from) = rebuild_from {
            self.install_rebuilt_txn_indexes(rebuild_from, aborted)
                .await?;
        }
        if from < cleaned_up_to {
            let forgotten = producers.forget_below(cleaned_up_to);
            if forgotten > 0 {
                tracing::info!(dir = %dir.display(), forgotten, "forgot producers last seen in the compacted part of the log");
            }
        }
        tracing::debug!(
            dir = %dir.display(),
            snapshot = from.0,
            producers = producers.len(),
            "producer state loaded"
        );
        let mut s = self.inner.state.borrow_mut();
        s.producers = producers;
        s.snapshots = usable;
        Ok(())
    }

    /// Records into `producers` every batch with a producer id from offset `from` (a batch
    /// boundary) to the log end, reading headers (and control batches' markers) only. Returns
    /// the aborted transaction entries of the ABORT markers at or after `index_from`.
    async fn replay_producers(
        &self,
        from: Offset,
        producers: &mut ProducerStateManager,
        index_from: Option<Offset>,
    ) -> Result<Vec<AbortedTxn>, StorageError> {
        let mut aborted = Vec::new();
        let plan: Vec<(Offset, u64, u64)> = {
            let s = self.inner.state.borrow();
            s.segments
                .iter()
                .filter(|g| g.next_offset > from && g.size > 0)
                .map(|g| {
                    let start = if g.base_offset < from {
                        g.index.lookup(g.relative(from)).0
                    } else {
                        0
                    };
                    (g.base_offset, start, g.size)
                })
                .collect()
        };
        for (base, mut pos, end) in plan {
            while pos < end {
                let window = self
                    .read_range(base, pos, REPLAY_WINDOW_BYTES.min(end - pos))
                    .await?;
                let mut off = 0usize;
                while off + HEADER_BYTES <= window.len() {
                    let header = BatchHeader::parse(&window[off..]).ok_or_else(|| {
                        StorageError::CorruptMessage(format!(
                            "unreadable batch at position {} of segment {} (producer state)",
                            pos + off as u64,
                            base.0
                        ))
                    })?;
                    if header.base_offset >= from.0 && header.is_control() {
                        let marker = match window.get(off..off + header.size) {
                            Some(batch) => end_txn_marker(batch).ok(),
                            None => end_txn_marker(
                                &self
                                    .read_range(base, pos + off as u64, header.size as u64)
                                    .await?,
                            )
                            .ok(),
                        };
                        let completed = producers.record_marker(&header, marker.as_ref());
                        if let Some(txn) = completed.filter(|t| t.aborted) {
                            if index_from.is_some_and(|i| txn.last_offset >= i.0) {
                                aborted.push(AbortedTxn {
                                    producer_id: txn.producer_id,
                                    first_offset: Offset(txn.first_offset),
                                    last_offset: Offset(txn.last_offset),
                                    last_stable_offset: Offset(
                                        producers
                                            .first_ongoing_offset()
                                            .unwrap_or(txn.last_offset + 1),
                                    ),
                                });
                            }
                        }
                    } else if header.base_offset >= from.0 {
                        producers.record(&header);
                    }
                    off += header.size;
                }
                if off == 0 {
                    break; // less than a header left; recovery leaves whole batches only
                }
                pos += off as u64;
                glommio::executor().yield_if_needed().await;
            }
        }
        Ok(aborted)
    }
}

/// Reads and decodes the snapshot at `offset`; `Err` says why it is unusable.
async fn read_snapshot(
    disk: &Disk,
    dir: &std::path::Path,
    offset: Offset,
) -> Result<ProducerStateManager, String> {
    let bytes = match disk
        .read_file(&segment_path(dir, offset, SNAPSHOT_EXT))
        .await
    {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err("the file vanished".to_string()),
        Err(e) => return Err(e.to_string()),
    };
    let (at, state) = ProducerStateManager::decode_snapshot(&bytes)?;
    if at != offset {
        return Err(format!("holds offset {} instead of its name's", at.0));
    }
    Ok(state)
}

/// Deletes one snapshot file; one already gone is fine.
pub(super) async fn remove_snapshot(
    disk: &Disk,
    dir: &std::path::Path,
    offset: Offset,
) -> Result<(), StorageError> {
    let path = segment_path(dir, offset, SNAPSHOT_EXT);
    match disk.remove(&path).await {
        Ok(()) => Ok(()),
        Err(e) if disk.exists(&path) => Err(e.into()),
        Err(_) => Ok(()),
    }
}
