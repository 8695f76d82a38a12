//! Transactions on one partition log (the transaction half of Kafka's `ProducerStateManager`,
//! and its `TransactionIndex`): the last stable offset, the aborted transaction index of every
//! segment, and the aborted transactions a read_committed fetch is told of.
//!
//! The last stable offset (LSO) is computed, never stored (`State::last_stable_offset`): the
//! first offset of the earliest transaction that is open, or ended by a marker not yet below
//! the high watermark (`State::unreplicated_txns`), else the high watermark.
//!
//! Aborted transaction indexes (`Segment::txn_index`, see `txn_index`): `append` adds an entry
//! to the active segment for each ABORT marker that ends an open transaction. A segment's
//! `.txnindex` is written (temp file, sync, rename, directory sync) when the segment is
//! finalized, by `close` for the active segment, by the open that rebuilt it, and by
//! compaction; before the flusher writes bytes into a segment whose file exists, it removes
//! the file and syncs the directory. So a `.txnindex` on disk lists every marker of its
//! segment's file. At open, a segment whose file is missing, does not decode or names a marker
//! past the segment's end is rebuilt: the producer state is replayed from a snapshot at or
//! below it (see `snapshots`), which meets its ABORT markers again. All of it runs under the
//! flush lock or at open, on the shard owning the partition.

use std::path::Path;

use crate::error::StorageError;
use crate::io::Disk;
use crate::producer_state::CompletedTxn;
use crate::segment::segment_path;
use crate::txn_index::{AbortedTxn, TxnIndex};
use crate::types::Offset;

use super::{Log, State};

pub(super) const TXN_INDEX_EXT: &str = "txnindex";

impl State {
    /// A marker just staged in the active segment ended `txn`: an aborted one gets an entry in
    /// the segment's index, with the LSO of the other transactions (Kafka
    /// `lastStableOffset(completedTxn)`); either holds the LSO until the high watermark passes
    /// its marker.
    pub(super) fn complete_txn(&mut self, txn: CompletedTxn) {
        if txn.aborted {
            let lso = self
                .producers
                .first_ongoing_offset()
                .unwrap_or(txn.last_offset + 1);
            self.active().txn_index.push(AbortedTxn {
                producer_id: txn.producer_id,
                first_offset: Offset(txn.first_offset),
                last_offset: Offset(txn.last_offset),
                last_stable_offset: Offset(lso),
            });
        }
        self.unreplicated_txns
            .insert(txn.first_offset, txn.last_offset);
    }
}

impl Log {
    /// Kafka's LSO: see [`crate::LogOffsets::last_stable_offset`].
    pub fn last_stable_offset(&self) -> Offset {
        self.inner.state.borrow().last_stable_offset()
    }

    /// Kafka `collectAbortedTransactions`: the aborted transactions, as (producer id, first
    /// offset), whose offsets meet `[from, upto)`: what a read_committed consumer of the
    /// batches in that range needs to drop the aborted ones.
    pub fn aborted_transactions(&self, from: Offset, upto: Offset) -> Vec<(i64, Offset)> {
        self.aborted_txns(from, upto)
            .into_iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// The index entries of the aborted transactions meeting `[from, upto)`, from the segment
    /// holding `from` on, until an entry's LSO says no later one can.
    pub(super) fn aborted_txns(&self, from: Offset, upto: Offset) -> Vec<AbortedTxn> {
        let mut out = Vec::new();
        if from >= upto {
            return out;
        }
        let s = self.inner.state.borrow();
        let start = s.segment_for(from);
        for g in &s.segments[start..] {
            if g.txn_index.collect(from, upto, &mut out) {
                break;
            }
        }
        out
    }

    /// Writes segment `base`'s `.txnindex` from memory. Caller holds the flush lock (or is
    /// the open) and has written every byte of the segment the index describes.
    pub(super) async fn write_txn_index(&self, base: Offset) -> Result<(), StorageError> {
        let bytes = {
            let s = self.inner.state.borrow();
            match s.segment(base) {
                Some(g) => g.txn_index.encode(),
                None => return Ok(()),
            }
        };
        let dir = &self.inner.dir;
        self.inner
            .disk
            .write_file_atomic(&segment_path(dir, base, TXN_INDEX_EXT), bytes)
            .await?;
        self.inner.disk.sync_dir_async(dir).await?;
        if let Some(g) = self.inner.state.borrow_mut().segment_mut(base) {
            g.txn_index_on_disk = true;
        }
        Ok(())
    }

    /// Before the flusher writes staged bytes into segment `base`: removes its `.txnindex`,
    /// durably, if it is on disk (it would no longer list every marker of the file). Caller
    /// holds the flush lock.
    pub(super) async fn unlink_txn_index_before_write(
        &self,
        base: Offset,
    ) -> Result<(), StorageError> {
        let on_disk = self
            .inner
            .state
            .borrow()
            .segment(base)
            .is_some_and(|g| g.txn_index_on_disk && g.size > g.written);
        if !on_disk {
            return Ok(());
        }
        remove_txn_index(&self.inner.disk, &self.inner.dir, base).await?;
        if let Some(g) = self.inner.state.borrow_mut().segment_mut(base) {
            g.txn_index_on_disk = false;
        }
        Ok(())
    }

    /// At open: the base of the first segment whose `.txnindex` did not load.
    pub(super) fn txn_index_rebuild_from(&self) -> Option<Offset> {
        let s = self.inner.state.borrow();
        s.segments
            .iter()
            .find(|g| !g.txn_index_on_disk)
            .map(|g| g.base_offset)
    }

    /// At open, once the replay from a snapshot at or below `from` found `aborted` (the
    /// entries of the ABORT markers at or after `from`): gives them to the segments whose
    /// index did not load and writes those files; the active segment's is not written (its
    /// first write would remove it again), a stale one is removed.
    pub(super) async fn install_rebuilt_txn_indexes(
        &self,
        from: Offset,
        aborted: Vec<AbortedTxn>,
    ) -> Result<(), StorageError> {
        let rebuilt: Vec<(Offset, bool)> = {
            let mut s = self.inner.state.borrow_mut();
            let last = s.segments.len() - 1;
            for txn in aborted {
                let i = s.segment_for(txn.last_offset);
                let g = &mut s.segments[i];
                if !g.txn_index_on_disk && g.base_offset >= from {
                    g.txn_index.push(txn);
                }
            }
            s.segments
                .iter()
                .enumerate()
                .filter(|(_, g)| !g.txn_index_on_disk)
                .map(|(i, g)| (g.base_offset, i == last))
                .collect()
        };
        for (base, active) in rebuilt {
            if active {
                let path = segment_path(&self.inner.dir, base, TXN_INDEX_EXT);
                if self.inner.disk.exists(&path) {
                    remove_txn_index(&self.inner.disk, &self.inner.dir, base).await?;
                }
            } else {
                self.write_txn_index(base).await?;
                tracing::info!(dir = %self.inner.dir.display(), base_offset = base.0, "rebuilt the aborted transaction index");
            }
        }
        Ok(())
    }

    /// The aborted transaction entries of every segment, for tests.
    #[cfg(test)]
    pub(crate) fn txn_index_entries(&self) -> Vec<AbortedTxn> {
        let s = self.inner.state.borrow();
        s.segments
            .iter()
            .flat_map(|g| g.txn_index.entries().iter().copied())
            .collect()
    }
}

/// At open: the `.txnindex` of the segment `[base, next_offset)` if it is there and
/// consistent with it, `None` otherwise.
pub(super) async fn load_txn_index(
    disk: &Disk,
    dir: &Path,
    base: Offset,
    next_offset: Offset,
) -> Result<Option<TxnIndex>, StorageError> {
    let Some(bytes) = disk
        .read_file(&segment_path(dir, base, TXN_INDEX_EXT))
        .await?
    else {
        return Ok(None);
    };
    let index = TxnIndex::decode(&bytes, base, next_offset);
    if index.is_none() {
        tracing::warn!(dir = %dir.display(), base_offset = base.0, "inconsistent aborted transaction index; rebuilding it");
    }
    Ok(index)
}

/// Removes segment `base`'s `.txnindex` (one already gone is fine) and syncs the directory.
async fn remove_txn_index(disk: &Disk, dir: &Path, base: Offset) -> Result<(), StorageError> {
    let path = segment_path(dir, base, TXN_INDEX_EXT);
    match disk.remove(&path).await {
        Ok(()) => {}
        Err(e) if disk.exists(&path) => return Err(e.into()),
        Err(_) => {}
    }
    disk.sync_dir_async(dir).await
}
