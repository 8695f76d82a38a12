//! Log compaction (`cleanup.policy=compact`) of one partition, on the shard that owns it.
//!
//! A pass takes the cleanable prefix of the log — closed, finalized segments wholly below the
//! last stable offset (so every transaction in them has its marker, and none is open) and
//! older than `min.compaction.lag.ms` (the active segment never) — and runs
//! when its dirty part (at or after the cleaner checkpoint) is at least
//! `min.cleanable.dirty.ratio` of it, or when dirty records are older than
//! `max.compaction.lag.ms`. It maps each key of the dirty part to its latest offset, rewrites
//! every cleanable segment keeping the latest record per key (tombstones until
//! `delete.retention.ms` has passed; offsets kept, so gaps appear; every codec rewritten with
//! itself), drops the batches of aborted transactions (from the aborted transaction indexes;
//! they are never mapped either) and keeps every transaction marker, merges small cleaned
//! segments up to `segment.bytes` (their aborted transaction indexes concatenated), and swaps
//! them in.
//!
//! Swap protocol (crash safe, as Kafka's): each merged segment is written and synced as
//! `<base>.log.cleaned`, renamed to `<base>.log.swap` (from here it replaces its members),
//! the members' files are deleted, and the swap is renamed to `<base>.log`. `Log::open`
//! deletes `.cleaned` files and completes any `.swap` (see `complete_swaps`).
//!
//! The pass works in slices and yields between them, and holds the flush lock only to swap, so
//! produce and fetch on the shard go on. Reads during a pass see the old segments until the
//! swap, then the new ones.

use keel_vocab::BytePosition;
use std::path::Path;

use crate::batch::BatchHeader;
use crate::compact::{build_offset_map, clean_segment, AbortedTxns, CleanParams, OffsetMap};
use crate::error::StorageError;
use crate::io::Disk;
use crate::segment::{align_up, segment_path, Segment};
use crate::txn_index::TxnIndex;
use crate::types::{CompactionOutcome, Offset};

use super::Log;

/// The first dirty offset, kept per partition (Kafka: `cleaner-offset-checkpoint`).
pub(in crate::log) const CLEANER_FILE: &str = "cleaner-offset-checkpoint";
/// Batches are cleaned in slices of about this many bytes, yielding between slices.
const SLICE_BYTES: usize = 1 << 20;

/// One cleanable segment as the pass sees it.
struct Source {
    base: Offset,
    next_offset: Offset,
    size: u64,
}

/// One merged output segment.
struct Output {
    base: Offset,
    next_offset: Offset,
    bytes: Vec<u8>,
    members: Vec<Offset>,
}

fn suffixed(dir: &Path, base: Offset, suffix: &str) -> std::path::PathBuf {
    let mut p = segment_path(dir, base, "log").into_os_string();
    p.push(suffix);
    p.into()
}

/// Splits `bytes` (whole batches) at batch boundaries into slices of about `SLICE_BYTES`.
fn slices(bytes: &[u8]) -> Result<Vec<&[u8]>, StorageError> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut pos = 0usize;
    while pos < bytes.len() {
        let header = BatchHeader::parse(&bytes[pos..]).ok_or_else(|| {
            StorageError::CorruptMessage(format!("unreadable batch at byte {pos} while compacting"))
        })?;
        if pos + header.size > bytes.len() {
            return Err(StorageError::CorruptMessage(format!(
                "batch at byte {pos} runs past the segment while compacting"
            )));
        }
        pos += header.size;
        if pos - start >= SLICE_BYTES {
            out.push(&bytes[start..pos]);
            start = pos;
        }
    }
    if start < pos {
        out.push(&bytes[start..pos]);
    }
    Ok(out)
}

impl Log {
    /// The cleaner checkpoint: offsets below it have been compacted.
    pub fn cleaned_up_to(&self) -> Offset {
        self.inner.cleaned_up_to.get()
    }

    /// One compaction pass (see the module docs). `None` when there is nothing to do.
    /// `map_bytes_max` bounds the key map: the dirty range is cut at a segment boundary when
    /// the map reaches it.
    pub async fn compact(
        &self,
        now_ms: i64,
        map_bytes_max: u64,
    ) -> Result<Option<CompactionOutcome>, StorageError> {
        let Some((sources, dirty_from)) = self.cleanable(now_ms) else {
            return Ok(None);
        };
        let aborted = match (sources.first(), sources.last()) {
            (Some(first), Some(last)) => AbortedTxns::new(
                self.aborted_txns(first.base, last.next_offset)
                    .into_iter()
                    .map(|t| (t.producer_id, t.first_offset, t.last_offset)),
            ),
            _ => AbortedTxns::default(),
        };
        // Map the dirty segments' keys to their latest offsets.
        let mut map = OffsetMap::new();
        let mut mapped_end = dirty_from;
        for src in sources.iter().filter(|s| s.next_offset > dirty_from) {
            if !map.is_empty() && map.memory_bytes() >= map_bytes_max {
                break;
            }
            let bytes = self.read_range(src.base, 0, src.size).await?;
            for slice in slices(&bytes)? {
                build_offset_map(&mut map, slice, &aborted)?;
                glommio::executor().yield_if_needed().await;
            }
            mapped_end = src.next_offset;
        }
        if mapped_end <= dirty_from {
            return Ok(None);
        }
        // Clean every cleanable segment up to the end of the mapped range.
        let config = self.config();
        let params = CleanParams {
            delete_horizon_ms: now_ms.saturating_sub(config.delete_retention_ms.max(0)),
            aborted: &aborted,
        };
        let mut outputs: Vec<Output> = Vec::new();
        let mut outcome = CompactionOutcome {
            cleaned_up_to: mapped_end,
            ..CompactionOutcome::default()
        };
        for src in sources.iter().filter(|s| s.next_offset <= mapped_end) {
            let bytes = self.read_range(src.base, 0, src.size).await?;
            let mut cleaned = Vec::with_capacity(bytes.len());
            for slice in slices(&bytes)? {
                let out = clean_segment(slice, &map, &params)?;
                outcome.records_dropped += out.records_dropped;
                cleaned.extend_from_slice(&out.bytes);
                glommio::executor().yield_if_needed().await;
            }
            outcome.segments_in += 1;
            outcome.bytes_in += src.size;
            // Merge into the previous output while it stays within segment.bytes and 32-bit
            // relative offsets.
            match outputs.last_mut() {
                Some(prev)
                    if (prev.bytes.len() + cleaned.len()) as u64 <= config.segment_bytes
                        && src.next_offset.0 - prev.base.0 <= i64::from(u32::MAX) =>
                {
                    prev.bytes.extend_from_slice(&cleaned);
                    prev.next_offset = src.next_offset;
                    prev.members.push(src.base);
                }
                _ => outputs.push(Output {
                    base: src.base,
                    next_offset: src.next_offset,
                    bytes: cleaned,
                    members: vec![src.base],
                }),
            }
        }
        outcome.segments_out = outputs.len();
        outcome.bytes_out = outputs.iter().map(|o| o.bytes.len() as u64).sum();
        // The checkpoint file exists before the first gap does: recovery accepts offset gaps
        // only in a log that has it.
        if !self.inner.disk.exists(&self.inner.dir.join(CLEANER_FILE)) {
            self.inner
                .disk
                .write_file_atomic(
                    &self.inner.dir.join(CLEANER_FILE),
                    format!("{}\n", dirty_from.0).into_bytes(),
                )
                .await?;
        }
        self.inner.state.borrow_mut().gaps_allowed = true;
        for out in &outputs {
            self.write_cleaned(out).await?;
        }
        if !self.swap_in(&outputs).await? {
            for out in &outputs {
                let _ = self
                    .inner
                    .disk
                    .remove(&suffixed(&self.inner.dir, out.base, ".cleaned"))
                    .await;
            }
            return Ok(None);
        }
        self.inner
            .disk
            .write_file_atomic(
                &self.inner.dir.join(CLEANER_FILE),
                format!("{}\n", mapped_end.0).into_bytes(),
            )
            .await?;
        self.inner.cleaned_up_to.set(mapped_end);
        Ok(Some(outcome))
    }

    /// The cleanable segments and the first dirty offset, if a pass is due.
    fn cleanable(&self, now_ms: i64) -> Option<(Vec<Source>, Offset)> {
        let s = self.inner.state.borrow();
        let c = &s.config;
        if !c.cleanup_compact {
            return None;
        }
        let dirty_from = self.inner.cleaned_up_to.get().max(s.log_start_offset);
        let last_stable_offset = s.last_stable_offset();
        let mut sources = Vec::new();
        for g in &s.segments[..s.segments.len() - 1] {
            let old_enough = g.max_timestamp_ms < 0
                || now_ms.saturating_sub(g.max_timestamp_ms) >= c.min_compaction_lag_ms;
            if !(g.closed && g.finalized) || g.next_offset > last_stable_offset || !old_enough {
                break;
            }
            sources.push(Source {
                base: g.base_offset,
                next_offset: g.next_offset,
                size: g.size,
            });
        }
        let total: u64 = sources.iter().map(|x| x.size).sum();
        let dirty: Vec<&Source> = sources
            .iter()
            .filter(|x| x.next_offset > dirty_from)
            .collect();
        let dirty_bytes: u64 = dirty.iter().map(|x| x.size).sum();
        if dirty_bytes == 0 || total == 0 {
            return None;
        }
        let overdue = dirty.iter().any(|x| {
            s.segment(x.base).is_some_and(|g| {
                g.max_timestamp_ms >= 0
                    && now_ms.saturating_sub(g.max_timestamp_ms) > c.max_compaction_lag_ms
            })
        });
        let ratio = dirty_bytes as f64 / total as f64;
        if ratio < c.min_cleanable_dirty_ratio && !overdue {
            return None;
        }
        Some((sources, dirty_from))
    }

    /// Writes `<base>.log.cleaned` and syncs it.
    async fn write_cleaned(&self, out: &Output) -> Result<(), StorageError> {
        let path = suffixed(&self.inner.dir, out.base, ".cleaned");
        let file = self.inner.disk.open_log_file(&path, true).await?;
        let len = out.bytes.len();
        if len > 0 {
            let mut buffer = file.alloc_buffer(align_up(len as u64) as usize);
            let b = buffer.as_bytes_mut();
            b[..len].copy_from_slice(&out.bytes);
            b[len..].fill(0);
            file.write_at(buffer, 0).await?;
        }
        file.truncate(len as u64).await?;
        file.fdatasync().await?;
        file.close().await?;
        Ok(())
    }

    /// Replaces the members of each output with it, under the flush lock. Returns false
    /// (changing nothing) if the log's first segments are no longer the ones cleaned
    /// (retention or DeleteRecords removed some meanwhile). The renames, deletions and the
    /// state change happen in one step with no `.await` between them, so no read sees a
    /// segment's new file with its old positions.
    async fn swap_in(&self, outputs: &[Output]) -> Result<bool, StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        let members: Vec<Offset> = outputs.iter().flat_map(|o| o.members.clone()).collect();
        {
            let s = self.inner.state.borrow();
            let current: Vec<Offset> = s
                .segments
                .iter()
                .take(members.len())
                .map(|g| g.base_offset)
                .collect();
            if current != members || s.segments.len() <= members.len() {
                return Ok(false);
            }
        }
        let dir = self.inner.dir.clone();
        let interval = self.config().index_interval_bytes;
        // Build the new segments' in-memory state first (no visible change).
        let mut fresh: Vec<Segment> = Vec::with_capacity(outputs.len());
        for out in outputs {
            let mut seg = Segment::new(out.base, None);
            // Markers are kept: the members' aborted transactions stay, in order.
            let mut txn_index = TxnIndex::default();
            {
                let s = self.inner.state.borrow();
                for m in &out.members {
                    if let Some(g) = s.segment(*m) {
                        txn_index.extend(&g.txn_index);
                    }
                }
            }
            seg.txn_index = txn_index;
            let mut pos = 0usize;
            while pos < out.bytes.len() {
                let header = BatchHeader::parse(&out.bytes[pos..]).ok_or_else(|| {
                    StorageError::CorruptMessage("cleaned segment does not parse".into())
                })?;
                seg.note_batch(BytePosition(pos as u64), &header, interval);
                pos += header.size;
            }
            seg.next_offset = out.next_offset;
            seg.size = out.bytes.len() as u64;
            seg.written = seg.size;
            seg.synced = seg.size;
            seg.closed = true;
            seg.finalized = true;
            seg.seal_time_index();
            fresh.push(seg);
        }
        // The swap itself: synchronous file operations and the state change, one step.
        let disk = &self.inner.disk;
        let mut swapped = || -> std::io::Result<Vec<Segment>> {
            for out in outputs {
                disk.rename_blocking(
                    &suffixed(&dir, out.base, ".cleaned"),
                    &suffixed(&dir, out.base, ".swap"),
                )?;
                for &m in &out.members {
                    for ext in ["index", "timeindex", super::txns::TXN_INDEX_EXT] {
                        let p = segment_path(&dir, m, ext);
                        if disk.exists(&p) {
                            disk.remove_blocking(&p)?;
                        }
                    }
                    crate::file_cache::forget(&segment_path(&dir, m, "log"));
                    if m != out.base {
                        disk.remove_blocking(&segment_path(&dir, m, "log"))?;
                    }
                }
                disk.rename_blocking(
                    &suffixed(&dir, out.base, ".swap"),
                    &segment_path(&dir, out.base, "log"),
                )?;
            }
            disk.sync_dir_blocking(&dir)?;
            let mut s = self.inner.state.borrow_mut();
            let old: Vec<Segment> = s.segments.drain(..members.len()).collect();
            for (i, seg) in fresh.drain(..).enumerate() {
                s.segments.insert(i, seg);
            }
            // Cached batches of the swapped range hold records compaction removed.
            let swapped_end = outputs.last().map_or(Offset(0), |o| o.next_offset);
            while s
                .tail_cache
                .front()
                .is_some_and(|b| b.base_offset < swapped_end)
            {
                s.cache_pop_front();
            }
            Ok(old)
        };
        let old = swapped()?;
        // Indexes only speed up reads and recovery rebuilds missing ones.
        let indexes: Vec<(Offset, Vec<u8>, Vec<u8>)> = {
            let s = self.inner.state.borrow();
            s.segments
                .iter()
                .take(outputs.len())
                .map(|g| (g.base_offset, g.index.encode(), g.time_index.encode()))
                .collect()
        };
        for (base, index, time_index) in indexes {
            self.inner
                .disk
                .write_file(segment_path(&dir, base, "index").as_path(), index)
                .await?;
            self.inner
                .disk
                .write_file(segment_path(&dir, base, "timeindex").as_path(), time_index)
                .await?;
            // Missing, it is rebuilt at open (from the log, as a lost one is).
            self.write_txn_index(base).await?;
        }
        for g in old {
            if let Some(f) = g.file {
                let _ = f.close_rc().await;
            }
        }
        Ok(true)
    }
}

/// At open: deletes `.cleaned` leftovers and completes interrupted swaps: a
/// `<base>.log.swap` replaces `<base>.log` and every segment whose base lies in its offset
/// range. Returns the loaded cleaner checkpoint, `None` if the log was never compacted.
pub(super) async fn complete_swaps(
    disk: &Disk,
    dir: &Path,
) -> Result<Option<Offset>, StorageError> {
    let mut swaps = Vec::new();
    for name in disk.list_dir(dir)? {
        if name.ends_with(".log.cleaned") {
            disk.remove_blocking(&dir.join(&name))?;
        } else if let Some(stem) = name.strip_suffix(".log.swap") {
            if let Ok(base) = stem.parse::<i64>() {
                swaps.push(Offset(base));
            }
        }
    }
    let completed = !swaps.is_empty();
    for base in swaps {
        let swap = suffixed(dir, base, ".swap");
        let bytes = disk.read_file_blocking(&swap)?;
        let mut pos = 0usize;
        let mut next = base;
        while pos < bytes.len() {
            let Some(h) = BatchHeader::parse(&bytes[pos..]) else {
                break;
            };
            next = Offset(h.last_offset() + 1);
            pos += h.size;
        }
        for m in disk.list_segments(dir)? {
            if m >= base && m < next {
                // The base's own `.txnindex` lists only its markers: rebuilt at open.
                for ext in ["index", "timeindex", super::txns::TXN_INDEX_EXT] {
                    let p = segment_path(dir, m, ext);
                    if disk.exists(&p) {
                        disk.remove_blocking(&p)?;
                    }
                }
                if m != base {
                    disk.remove_blocking(&segment_path(dir, m, "log"))?;
                }
            }
        }
        disk.rename_blocking(&swap, &segment_path(dir, base, "log"))?;
        tracing::warn!(dir = %dir.display(), base_offset = base.0, "completed an interrupted compaction swap");
    }
    if completed {
        disk.sync_dir_async(dir).await?;
    }
    Ok(disk.read_file(&dir.join(CLEANER_FILE)).await?.map(|b| {
        std::str::from_utf8(&b)
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .map_or(Offset(0), Offset)
    }))
}
