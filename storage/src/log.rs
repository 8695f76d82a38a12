//! The partition log: an ordered set of segments named by base offset, the offset bookkeeping
//! (`log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset`), the tail
//! cache, the leader epoch cache, the producer state (with its snapshots, see `snapshots`),
//! the transactions (last stable offset, aborted transaction indexes, see `txns`) and the
//! group-commit flusher.
//!
//! Who moves what: `append` moves `log_end_offset` (and stages bytes) and the producer state
//! with its open transactions, which it checks before staging anything, so a refused batch
//! changes nothing; the last stable offset follows the open transactions and the high
//! watermark (it is computed, never stored); the flusher
//! (one at a time, under `flush_lock`) moves `written_end`/`synced_end` and the segments'
//! `written`/`synced`; on a single-replica log `commit`/`sync` move `high_watermark`, never
//! past what the flush policy has made committed; on a replicated one only
//! `advance_high_watermark` moves it (see `replica`, which also holds the follower's append;
//! `truncate` cuts the tail). A failed write or fsync poisons the log. No `RefCell` borrow is held
//! across an `.await`. If a `commit`/`sync`/`read` future is dropped midway, nothing is lost:
//! state moves only after an I/O completes, so the next flush rewrites the same range. The log
//! lives on exactly one glommio executor (the shard owning the partition) and is not `Send`.

mod cleaner;
mod replica;
mod snapshots;
mod truncate;
mod txns;

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use glommio::sync::Semaphore;

use crate::batch::{
    set_base_offset_and_epoch, stamp_log_append_time, validate_batches, BatchHeader, HEADER_BYTES,
};
use crate::epoch::{EpochCache, CHECKPOINT_FILE};
use crate::error::StorageError;
use crate::index::{OffsetIndex, TimeIndex};
use crate::io::Disk;
use crate::io_depth::IoKind;
use crate::producer_state::{BatchMetadata, Check, ProducerStateManager};
use crate::records::{end_txn_marker, find_record};
use crate::recovery::scan_segment;
use crate::segment::{align_down, align_up, segment_path, Segment};
use crate::types::{
    AppendInfo, LeaderEpoch, LogConfig, LogOffsets, Offset, ReadResult, RetentionOutcome,
    TimestampType,
};
use keel_vocab::BytePosition;

/// The log start offset moved by DeleteRecords (Kafka keeps it in
/// `log-start-offset-checkpoint`; Keel keeps one file per partition).
const LOG_START_FILE: &str = "log-start-offset";
/// The offset below which the log is known synced (Kafka's `recovery-point-offset-checkpoint`,
/// one per partition here): at open, a bad batch below it is corruption (the partition stays
/// offline), one at or past it may be a torn unsynced write (cut). Written by `close` and
/// `checkpoint_recovery_point`, lowered by truncation.
pub(crate) const RECOVERY_POINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Bytes read per I/O when walking batch headers in a segment.
const LOCATE_WINDOW_BYTES: u64 = 64 * 1024;

struct CachedBatch {
    /// Insertion number on the shard (see `tail_budget`).
    seq: u64,
    base_offset: Offset,
    last_offset: Offset,
    bytes: Bytes,
}

struct State {
    config: LogConfig,
    /// Ascending by base offset; the last is the active segment. Never empty.
    segments: Vec<Segment>,
    log_start_offset: Offset,
    log_end_offset: Offset,
    high_watermark: Offset,
    /// Every offset below is written to its segment file.
    written_end: Offset,
    /// Every offset below is written and fdatasync'ed.
    synced_end: Offset,
    /// Most recent whole batches, contiguous, ending at `log_end_offset`.
    tail_cache: VecDeque<CachedBatch>,
    tail_cache_bytes: usize,
    epochs: EpochCache,
    epochs_dirty: bool,
    poisoned: Option<String>,
    /// Set while writes fail with ENOSPC: appends are refused until `retry_stalled` writes
    /// the staged bytes.
    disk_full: Option<String>,
    /// Producer state as of `log_end_offset` (see `producer_state`).
    producers: ProducerStateManager,
    /// Snapshots taken at segment rolls and not yet written, ascending: (offset, bytes). A
    /// flush writes one once every offset below it is in a synced segment.
    pending_snapshots: VecDeque<(Offset, Vec<u8>)>,
    /// Offsets of the snapshot files on disk, ascending.
    snapshots: Vec<Offset>,
    /// Transactions a marker ended whose marker may not be below the high watermark yet:
    /// first offset -> marker offset (Kafka `unreplicatedTxns`). They hold the last stable
    /// offset as open ones do; `append` drops those the high watermark has passed.
    unreplicated_txns: BTreeMap<i64, i64>,
    /// Replicated mode (see `replica`): flushes make data durable but only
    /// `advance_high_watermark` moves the high watermark. Off (single replica) by default.
    replicated: bool,
    /// The high watermark last written to (or read from) `replication-offset-checkpoint`.
    hw_checkpointed: Option<Offset>,
    /// The recovery point last written (`RECOVERY_POINT_FILE`).
    recovery_point: Offset,
    /// Recovery accepts offset gaps in this log (its cleaner checkpoint exists): a follower
    /// may append a compacted leader's batches with gaps between them.
    gaps_allowed: bool,
    /// Set while `truncate_to` or `truncate_fully_and_start_at` runs: appends are refused.
    truncating: bool,
    /// Set as `close` begins: appends after it would miss the indexes and snapshot `close`
    /// writes (a follower's fetch landing during a shutdown), so they are refused.
    closed: bool,
}

impl State {
    fn offsets(&self) -> LogOffsets {
        LogOffsets {
            log_start_offset: self.log_start_offset,
            last_stable_offset: self.last_stable_offset(),
            high_watermark: self.high_watermark,
            log_end_offset: self.log_end_offset,
        }
    }

    /// Kafka `lastStableOffset`: the first offset of the earliest transaction that is open or
    /// whose marker is not below the high watermark (at least the log start offset), capped
    /// at the high watermark.
    fn last_stable_offset(&self) -> Offset {
        let hw = self.high_watermark;
        let unreplicated = self
            .unreplicated_txns
            .iter()
            .find(|(_, &marker)| marker >= hw.0)
            .map(|(&first, _)| first);
        let first_unstable = match (self.producers.first_ongoing_offset(), unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let lso = first_unstable.map_or(hw, |f| Offset(f).max(self.log_start_offset).min(hw));
        debug_assert!(self.log_start_offset <= lso && lso <= hw);
        lso
    }

    /// What this replica may report as fetched: synced under `flush.policy=group`, written
    /// under `interval`.
    fn durable_end(&self) -> Offset {
        match self.config.flush_policy {
            crate::types::FlushPolicy::Group => self.synced_end,
            crate::types::FlushPolicy::Interval => self.written_end,
        }
    }

    /// Single replica: what is durable is acknowledged, so the high watermark follows it.
    /// Replicated: nothing (only `advance_high_watermark` moves it).
    fn follow_durable(&mut self, durable: Offset) {
        if !self.replicated {
            let to = durable.min(self.log_end_offset);
            self.high_watermark = self.high_watermark.max(to);
        }
        self.assert_offsets();
    }

    /// `log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset`.
    fn assert_offsets(&self) {
        let lso = self.last_stable_offset();
        assert!(
            self.log_start_offset <= lso
                && lso <= self.high_watermark
                && self.high_watermark <= self.log_end_offset,
            "offsets out of order: start {:?} lso {lso:?} hw {:?} end {:?}",
            self.log_start_offset,
            self.high_watermark,
            self.log_end_offset
        );
    }

    fn segment(&self, base: Offset) -> Option<&Segment> {
        self.segments.iter().find(|s| s.base_offset == base)
    }

    fn segment_mut(&mut self, base: Offset) -> Option<&mut Segment> {
        self.segments.iter_mut().find(|s| s.base_offset == base)
    }

    fn active(&mut self) -> &mut Segment {
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    /// Index of the segment holding `offset` (the last with base <= offset).
    fn segment_for(&self, offset: Offset) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }

    fn check_poisoned(&self) -> Result<(), StorageError> {
        match &self.poisoned {
            Some(why) => Err(StorageError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether the log's files may be written: not poisoned, not closed.
    fn check_writable_files(&self) -> Result<(), StorageError> {
        self.check_poisoned()?;
        if self.closed {
            return Err(StorageError::Closed);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<(), StorageError> {
        self.check_poisoned()?;
        if self.closed {
            return Err(StorageError::Closed);
        }
        if self.truncating {
            return Err(StorageError::ReplicaAppend(
                "the log is being truncated".to_string(),
            ));
        }
        match &self.disk_full {
            Some(why) => Err(StorageError::DiskFull(why.clone())),
            None => Ok(()),
        }
    }

    /// Rolls the active segment if the batch (already stamped) must not go into it.
    fn maybe_roll(&mut self, header: &BatchHeader, now_ms: i64) {
        let segment_bytes = self.config.segment_bytes;
        let segment_ms = self.config.segment_ms;
        let active = self.active();
        if active.size == 0 {
            return;
        }
        let new_size = active.size + header.size as u64;
        let too_big = new_size > segment_bytes || new_size > u32::MAX as u64;
        // Kafka: record time since the segment's first batch when timestamps exist, else
        // the wall clock since the segment took its first batch here.
        let segment_ms = segment_ms.min(i64::MAX as u64) as i64;
        let too_old = match (active.first_batch_max_ts, header.max_timestamp) {
            (Some(first), ts) if ts >= 0 => ts.saturating_sub(first) > segment_ms,
            _ => active
                .created_ms
                .is_some_and(|c| now_ms.saturating_sub(c) > segment_ms),
        };
        let offset_overflow = header.last_offset() - active.base_offset.0 > u32::MAX as i64;
        if !(too_big || too_old || offset_overflow) {
            return;
        }
        active.closed = true;
        active.seal_time_index();
        tracing::debug!(
            base_offset = active.base_offset.0,
            too_big,
            too_old,
            offset_overflow,
            "rolling segment"
        );
        let mut next = Segment::new(Offset(header.base_offset), None);
        next.created_ms = Some(now_ms);
        self.segments.push(next);
        self.take_snapshot(Offset(header.base_offset), now_ms);
    }

    /// Snapshots the producer state as of `offset` (the new segment's base: the batch that
    /// rolled is not recorded yet), after dropping expired producers. The next flush that
    /// covers `offset` writes it.
    fn take_snapshot(&mut self, offset: Offset, now_ms: i64) {
        let expiration_ms = self.config.producer_id_expiration_ms;
        self.producers.expire(now_ms, expiration_ms);
        let bytes = self.producers.encode_snapshot(offset);
        self.pending_snapshots.push_back((offset, bytes));
        // A stalled flusher keeps only the newest few: each supersedes the older ones.
        while self.pending_snapshots.len() > snapshots::SNAPSHOTS_KEPT {
            self.pending_snapshots.pop_front();
        }
    }

    /// Stages whole, validated batches that already carry their offsets, epochs and
    /// timestamps (stamped by a leader's `append`, or a leader's as a follower received them),
    /// the first at `log_end_offset`: rolls, indexes, tail cache, leader epochs, producer
    /// state and transactions, then moves `log_end_offset`. `marker` is the leader append's
    /// already-checked transaction marker; without it a control batch's marker is read here.
    /// No I/O; fails only on bytes that no longer parse (nothing is staged then).
    fn stage_batches(
        &mut self,
        bytes: &Bytes,
        marker: Option<&crate::records::EndTxnMarker>,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let mut headers = Vec::new();
        let mut pos = 0usize;
        while pos < bytes.len() {
            let header = BatchHeader::parse(&bytes[pos..])
                .filter(|h| pos + h.size <= bytes.len())
                .ok_or_else(|| StorageError::CorruptMessage("batch vanished".to_string()))?;
            pos += header.size;
            headers.push(header);
        }
        let index_interval_bytes = self.config.index_interval_bytes;
        let high_watermark = self.high_watermark.0;
        self.unreplicated_txns
            .retain(|_, marker_offset| *marker_offset >= high_watermark);
        let mut pos = 0usize;
        for header in headers {
            let batch = bytes.slice(pos..pos + header.size);
            if header.leader_epoch >= 0
                && self
                    .epochs
                    .assign(LeaderEpoch(header.leader_epoch), Offset(header.base_offset))
            {
                self.epochs_dirty = true;
            }
            self.maybe_roll(&header, now_ms);
            let active = self.active();
            if active.created_ms.is_none() {
                active.created_ms = Some(now_ms);
            }
            let position = active.size;
            active.note_batch(BytePosition(position), &header, index_interval_bytes);
            active.stage(batch.clone());
            // After the roll above: a snapshot it took is the state before this batch.
            if header.is_control() {
                let read;
                let marker = match marker {
                    Some(m) => Some(m),
                    None => {
                        read = end_txn_marker(&batch).ok();
                        read.as_ref()
                    }
                };
                if let Some(txn) = self.producers.record_marker(&header, marker) {
                    self.complete_txn(txn);
                }
            } else {
                self.producers.record(&header);
            }
            self.cache_push(&header, batch);
            self.log_end_offset = Offset(header.last_offset() + 1);
            pos += header.size;
        }
        assert!(self.high_watermark <= self.log_end_offset);
        Ok(())
    }

    fn cache_push(&mut self, header: &BatchHeader, bytes: Bytes) {
        let cap = self.config.tail_cache_bytes;
        if bytes.len() > cap {
            self.cache_trim(0);
            return;
        }
        self.tail_cache_bytes += bytes.len();
        crate::tail_budget::add(bytes.len());
        self.tail_cache.push_back(CachedBatch {
            seq: crate::tail_budget::next_seq(),
            base_offset: Offset(header.base_offset),
            last_offset: Offset(header.last_offset()),
            bytes,
        });
        self.cache_trim(cap);
    }

    /// Evicts the oldest cached batches until at most `cap` bytes stay.
    fn cache_trim(&mut self, cap: usize) {
        while self.tail_cache_bytes > cap {
            if self.cache_pop_front() == 0 {
                break;
            }
        }
    }

    /// Evicts the oldest cached batch; returns its size (0 when the cache is empty).
    fn cache_pop_front(&mut self) -> usize {
        match self.tail_cache.pop_front() {
            Some(b) => {
                self.tail_cache_bytes -= b.bytes.len();
                crate::tail_budget::release(b.bytes.len());
                b.bytes.len()
            }
            None => 0,
        }
    }

    /// Whole batches from the tail cache, or `None` when the cache does not cover `fetch`.
    fn read_cache(&self, fetch: Offset, max_bytes: usize, max_offset: Offset) -> Option<Bytes> {
        let front = self.tail_cache.front()?;
        if front.base_offset > fetch {
            return None;
        }
        let first = self.tail_cache.partition_point(|b| b.last_offset < fetch);
        let mut taken = 0usize;
        let mut total = 0usize;
        for b in self.tail_cache.iter().skip(first) {
            if b.last_offset >= max_offset || (taken > 0 && total + b.bytes.len() > max_bytes) {
                break;
            }
            taken += 1;
            total += b.bytes.len();
        }
        match taken {
            0 => Some(Bytes::new()),
            1 => Some(self.tail_cache[first].bytes.clone()),
            _ => {
                let mut out = BytesMut::with_capacity(total);
                for b in self.tail_cache.iter().skip(first).take(taken) {
                    out.extend_from_slice(&b.bytes);
                }
                Some(out.freeze())
            }
        }
    }
}

struct Inner {
    dir: PathBuf,
    /// Where its files live: glommio in production, a simulated disk in the simulation.
    disk: Disk,
    state: RefCell<State>,
    /// One flush at a time: its holder is the only writer of segment files.
    flush_lock: Semaphore,
    /// Flushes run so far (write passes over the staged data); read by tests and metrics.
    flushes: std::cell::Cell<u64>,
    /// Fault-injection seam: when set, the next segment write fails as the disk would.
    fail_next_write: std::cell::Cell<bool>,
    /// Fault-injection seam: while set, segment writes fail with ENOSPC.
    inject_disk_full: std::cell::Cell<bool>,
    /// Compaction's checkpoint: offsets below are clean (`cleaner-offset-checkpoint`).
    cleaned_up_to: std::cell::Cell<Offset>,
    /// Segment bytes `open` scanned to recover the log (after a clean shutdown, only what
    /// follows each segment's last index entry).
    recovery_scanned_bytes: u64,
}

impl crate::tail_budget::Evict for Inner {
    fn oldest(&self) -> Option<u64> {
        self.state
            .try_borrow()
            .ok()
            .and_then(|s| s.tail_cache.front().map(|b| b.seq))
    }

    fn evict_oldest(&self) -> usize {
        self.state
            .try_borrow_mut()
            .map_or(0, |mut s| s.cache_pop_front())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The shard's budget no longer counts this log's cached batches.
        let s = self.state.get_mut();
        crate::tail_budget::release(s.tail_cache_bytes);
    }
}

/// Cheap-to-clone handle (Rc inside) to one partition's log. Lives on exactly one glommio
/// executor (not Send).
#[derive(Clone)]
pub struct Log {
    inner: Rc<Inner>,
}

/// One segment's write job: bytes `[block_start, new_written)` padded to the block size.
struct WriteJob {
    file: Rc<crate::io::SegmentFile>,
    buffer: crate::io::WriteBuffer,
    block_start: u64,
    chunks: usize,
    new_written: u64,
    new_tail_block: Vec<u8>,
}

impl Log {
    /// Opens or creates the log in `dir` and recovers it (see the crate docs): closed segments
    /// keep trusted indexes (else rebuilt), the active segment is rescanned, a torn or corrupt
    /// tail is truncated and segments after a gap are deleted; the producer state (open
    /// transactions included) is loaded and replayed, rebuilding the aborted transaction
    /// indexes that did not load (see `txns`).
    pub async fn open(dir: &Path, config: LogConfig) -> Result<Log, StorageError> {
        Log::open_on(Disk::Glommio, dir, config).await
    }

    /// [`Log::open`] on `disk` (the simulation opens its logs on a simulated disk).
    pub async fn open_on(disk: Disk, dir: &Path, config: LogConfig) -> Result<Log, StorageError> {
        disk.create_dir_all_durable(dir).await?;
        disk.prime_iopoll_probe(dir).await?;
        let cleaner_checkpoint = cleaner::complete_swaps(&disk, dir).await?;
        // Offset gaps exist only in a log that compaction has touched.
        let gaps_allowed = cleaner_checkpoint.is_some();
        let cleaned_up_to = cleaner_checkpoint.unwrap_or(Offset(0));
        let mut epochs = match disk.read_file(&dir.join(CHECKPOINT_FILE)).await? {
            Some(bytes) => match std::str::from_utf8(&bytes)
                .ok()
                .and_then(EpochCache::decode)
            {
                Some(c) => c,
                None => {
                    tracing::warn!(dir = %dir.display(), "malformed leader-epoch-checkpoint; rebuilding from batches");
                    EpochCache::default()
                }
            },
            None => EpochCache::default(),
        };
        let checkpoint_before = epochs.clone();
        let recovery_point = read_offset_file(&disk, &dir.join(RECOVERY_POINT_FILE)).await?;
        let bases = disk.list_segments(dir)?;
        let mut segments = Vec::with_capacity(bases.len().max(1));
        let mut scanned_bytes = 0u64;
        let mut i = 0;
        while i < bases.len() {
            let is_last = i + 1 == bases.len();
            let seg = recover_segment(
                &disk,
                dir,
                bases[i],
                is_last,
                gaps_allowed,
                recovery_point.unwrap_or(Offset(0)),
                &config,
                &mut epochs,
                &mut scanned_bytes,
            )
            .await?;
            let next_offset = seg.next_offset;
            segments.push(seg);
            // Segments follow each other without a gap, except where compaction (which has
            // run once the cleaner checkpoint exists) removed records. A missing range or an
            // overlap means data is gone or does not belong: the log stays offline rather than
            // serving around it.
            if !is_last {
                let next_base = bases[i + 1];
                if next_base < next_offset || (next_base > next_offset && !gaps_allowed) {
                    return Err(StorageError::CorruptSegment {
                        segment: segment_path(dir, bases[i], "log").display().to_string(),
                        position: segments[segments.len() - 1].size,
                        reason: format!(
                            "the segment ends at offset {} but the next segment starts at {}",
                            next_offset.0, next_base.0
                        ),
                    });
                }
            }
            i += 1;
        }
        if segments.is_empty() {
            let file = disk
                .open_log_file(&segment_path(dir, Offset(0), "log"), true)
                .await?;
            segments.push(Segment::new(Offset(0), Some(Rc::new(file))));
        }
        let log_end_offset = segments[segments.len() - 1].next_offset;
        let checkpointed = disk
            .read_file(&dir.join(LOG_START_FILE))
            .await?
            .and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse::<i64>().ok())
            .unwrap_or(0);
        let log_start_offset = Offset(checkpointed)
            .max(segments[0].base_offset)
            .min(log_end_offset);
        let hw_checkpointed = replica::read_hw_checkpoint(&disk, dir).await?;
        let high_watermark = match hw_checkpointed {
            Some(hw) => hw.min(log_end_offset).max(log_start_offset),
            // Data dirs of earlier versions: the single replica acknowledged all of it.
            None => log_end_offset,
        };
        epochs.truncate_from_end(log_end_offset);
        if epochs != checkpoint_before {
            disk.write_file_atomic(&dir.join(CHECKPOINT_FILE), epochs.encode().into_bytes())
                .await?;
        }
        tracing::info!(
            dir = %dir.display(),
            segments = segments.len(),
            log_start_offset = log_start_offset.0,
            log_end_offset = log_end_offset.0,
            high_watermark = high_watermark.0,
            "log opened"
        );
        let state = State {
            config,
            segments,
            log_start_offset,
            log_end_offset,
            high_watermark,
            written_end: log_end_offset,
            synced_end: log_end_offset,
            tail_cache: VecDeque::new(),
            tail_cache_bytes: 0,
            epochs,
            epochs_dirty: false,
            poisoned: None,
            disk_full: None,
            producers: ProducerStateManager::new(),
            pending_snapshots: VecDeque::new(),
            snapshots: Vec::new(),
            unreplicated_txns: BTreeMap::new(),
            replicated: false,
            hw_checkpointed,
            recovery_point: recovery_point.unwrap_or(Offset(0)),
            gaps_allowed,
            truncating: false,
            closed: false,
        };
        let log = Log {
            inner: Rc::new(Inner {
                dir: dir.to_path_buf(),
                state: RefCell::new(state),
                flush_lock: Semaphore::new(1),
                flushes: std::cell::Cell::new(0),
                fail_next_write: std::cell::Cell::new(false),
                inject_disk_full: std::cell::Cell::new(false),
                cleaned_up_to: std::cell::Cell::new(cleaned_up_to),
                recovery_scanned_bytes: scanned_bytes,
                disk,
            }),
        };
        let weak: std::rc::Weak<dyn crate::tail_budget::Evict> =
            Rc::downgrade(&log.inner) as std::rc::Weak<dyn crate::tail_budget::Evict>;
        crate::tail_budget::register(weak);
        log.load_producer_state(cleaned_up_to).await?;
        Ok(log)
    }

    pub fn config(&self) -> LogConfig {
        self.inner.state.borrow().config.clone()
    }

    /// Applies a topic config change; size and time limits apply from the next append.
    pub fn set_config(&self, config: LogConfig) {
        let mut s = self.inner.state.borrow_mut();
        s.config = config;
        let cap = s.config.tail_cache_bytes;
        s.cache_trim(cap);
    }

    pub fn offsets(&self) -> LogOffsets {
        self.inner.state.borrow().offsets()
    }

    /// Why the log is poisoned (a write, fdatasync or truncation failed; it takes no more
    /// writes until it is reopened), or `None`.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.state.borrow().poisoned.clone()
    }

    pub fn dir(&self) -> PathBuf {
        self.inner.dir.clone()
    }

    /// Segment bytes `open` scanned to recover this log.
    pub fn recovery_scanned_bytes(&self) -> u64 {
        self.inner.recovery_scanned_bytes
    }

    pub fn segment_count(&self) -> usize {
        self.inner.state.borrow().segments.len()
    }

    /// Bytes of all segments, staged bytes included.
    pub fn size_bytes(&self) -> u64 {
        self.inner
            .state
            .borrow()
            .segments
            .iter()
            .map(|g| g.size)
            .sum()
    }

    /// DeleteRecords: moves the log start offset up to `before` (-1 = the high watermark),
    /// persists it, and deletes the segments wholly below it. An offset above the high
    /// watermark is out of range. Returns the new log start offset.
    pub async fn delete_records(&self, before: Offset) -> Result<Offset, StorageError> {
        let target = {
            let s = self.inner.state.borrow();
            s.check_poisoned()?;
            let target = if before.0 == -1 {
                s.high_watermark
            } else {
                before
            };
            if target.0 < 0 || target > s.high_watermark {
                return Err(StorageError::OffsetOutOfRange {
                    requested: before,
                    log_start_offset: s.log_start_offset,
                    log_end_offset: s.high_watermark,
                });
            }
            if target <= s.log_start_offset {
                return Ok(s.log_start_offset);
            }
            target
        };
        self.move_log_start(target).await
    }

    /// Moves the log start offset up to `target` (at most the high watermark), persists it,
    /// and deletes the segments wholly below it. Returns the new log start offset.
    async fn move_log_start(&self, target: Offset) -> Result<Offset, StorageError> {
        write_log_start(&self.inner.disk, &self.inner.dir, target).await?;
        {
            let mut s = self.inner.state.borrow_mut();
            s.log_start_offset = s.log_start_offset.max(target);
            assert!(s.log_start_offset <= s.high_watermark);
        }
        self.remove_segments(|_, _| false, false).await?;
        Ok(self.offsets().log_start_offset)
    }

    /// One retention pass (`cleanup.policy` with `delete`): deletes, oldest first, closed and
    /// finalized segments wholly below the high watermark whose newest timestamp is older than
    /// `retention.ms`, or without which the log is still at least `retention.bytes`, and any
    /// wholly below the log start offset. The active segment is never deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<RetentionOutcome, StorageError> {
        self.remove_segments(
            |c, g| {
                c.cleanup_delete
                    && c.retention_ms >= 0
                    && g.max_timestamp_ms >= 0
                    && now_ms.saturating_sub(g.max_timestamp_ms) > c.retention_ms
            },
            true,
        )
        .await
    }

    /// Removes the longest prefix of segments that are closed, finalized, wholly below the
    /// high watermark and either wholly below the log start offset, or `by_time`, or over
    /// `retention.bytes` (when `by_size`). Holds the flush lock, so no flush writes them.
    async fn remove_segments(
        &self,
        by_time: impl Fn(&LogConfig, &Segment) -> bool,
        by_size: bool,
    ) -> Result<RetentionOutcome, StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        let removed: Vec<Segment> = {
            let mut s = self.inner.state.borrow_mut();
            let c = s.config.clone();
            let mut total: u64 = s.segments.iter().map(|g| g.size).sum();
            let mut n = 0;
            for g in &s.segments[..s.segments.len() - 1] {
                if !(g.closed && g.finalized) || g.next_offset > s.high_watermark {
                    break;
                }
                let below_start = g.next_offset <= s.log_start_offset;
                let over_size = by_size
                    && c.cleanup_delete
                    && c.retention_bytes >= 0
                    && total.saturating_sub(g.size) >= c.retention_bytes as u64;
                if !(below_start || over_size || by_time(&c, g)) {
                    break;
                }
                total -= g.size;
                n += 1;
            }
            let removed: Vec<Segment> = s.segments.drain(..n).collect();
            let first = s.segments[0].base_offset;
            s.log_start_offset = s.log_start_offset.max(first);
            assert!(s.log_start_offset <= s.high_watermark && s.high_watermark <= s.log_end_offset);
            removed
        };
        let mut outcome = RetentionOutcome {
            segments_deleted: removed.len(),
            bytes_deleted: removed.iter().map(|g| g.size).sum(),
            log_start_offset: self.offsets().log_start_offset,
        };
        for g in removed {
            if let Some(file) = g.file {
                let _ = file.close_rc().await;
            }
            crate::file_cache::forget(&segment_path(&self.inner.dir, g.base_offset, "log"));
            for ext in ["log", "index", "timeindex", "txnindex"] {
                let path = segment_path(&self.inner.dir, g.base_offset, ext);
                match self.inner.disk.remove(&path).await {
                    Ok(()) => {}
                    Err(e) if self.inner.disk.exists(&path) => return Err(e.into()),
                    Err(_) => {}
                }
            }
            tracing::info!(
                dir = %self.inner.dir.display(),
                base_offset = g.base_offset.0,
                bytes = g.size,
                "deleted segment"
            );
        }
        if outcome.segments_deleted > 0 {
            self.delete_snapshots_before_first_segment().await?;
        }
        outcome.log_start_offset = self.offsets().log_start_offset;
        Ok(outcome)
    }

    /// Validates every batch, then assigns offsets, stamps, stages and caches them (no I/O).
    /// If any batch is bad nothing is appended.
    pub fn append(
        &self,
        batches: BytesMut,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let info = self.append_inner(batches, leader_epoch, now_ms, true);
        // Over the shard's tail-cache budget: evict the shard's oldest cached batches.
        crate::tail_budget::enforce();
        info
    }

    /// [`Log::append`] for a batch the broker's own coordinator writes (Kafka's
    /// `AppendOrigin.COORDINATOR`): a transactional offset commit carries the producer's id and
    /// epoch but no sequence of the producer's, so its sequence is not checked (the epoch
    /// still is).
    pub fn append_from_coordinator(
        &self,
        batches: BytesMut,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let info = self.append_inner(batches, leader_epoch, now_ms, false);
        crate::tail_budget::enforce();
        info
    }

    fn append_inner(
        &self,
        mut batches: BytesMut,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
        check_sequences: bool,
    ) -> Result<AppendInfo, StorageError> {
        let mut s = self.inner.state.borrow_mut();
        s.check_writable()?;
        let summary = validate_batches(&batches, s.config.max_message_bytes)?;
        if s.config.cleanup_compact {
            let (unkeyed, indexes) =
                crate::records::unkeyed_records(&batches, crate::error::RECORD_ERRORS_MAX)?;
            if unkeyed > 0 {
                // Kafka's per-record message and summary (LogValidator).
                let record_errors: Vec<crate::error::RecordError> = indexes
                    .into_iter()
                    .map(|batch_index| crate::error::RecordError {
                        batch_index,
                        message: "Compacted topic cannot accept message without key".to_string(),
                    })
                    .collect();
                let first: Vec<i32> = record_errors
                    .iter()
                    .take(3)
                    .map(|e| e.batch_index)
                    .collect();
                return Err(StorageError::InvalidRecords {
                    message: format!(
                        "{unkeyed} record(s) without a key: a compacted topic needs a key on \
                         every record (first at batch indexes {first:?})"
                    ),
                    record_errors,
                });
            }
        }
        if summary.producer_batches == 0 && summary.transactional_batches > 0 {
            return Err(StorageError::InvalidRecord(
                "a transactional or control batch without a producer id".to_string(),
            ));
        }
        let mut marker = None;
        if summary.producer_batches > 0 {
            // Kafka takes one batch per partition in a produce (v3+); sequence checks rely on it.
            if summary.batch_count > 1 {
                return Err(StorageError::InvalidRecord(format!(
                    "{} record batches in one append with a producer id: an idempotent or \
                     transactional producer sends exactly one batch per partition",
                    summary.batch_count
                )));
            }
            let header = BatchHeader::parse(&batches)
                .ok_or_else(|| StorageError::CorruptMessage("batch vanished".to_string()))?;
            if header.is_control() {
                // A transaction marker: fenced by producer epoch, then by coordinator epoch
                // (Kafka's order).
                if !header.is_transactional() {
                    return Err(StorageError::InvalidRecord(
                        "a control batch that is not transactional".to_string(),
                    ));
                }
                let m = end_txn_marker(&batches)?;
                s.producers.check_epoch(&header)?;
                s.producers.check_marker(&header, &m)?;
                marker = Some(m);
            }
            if !check_sequences {
                s.producers.check_epoch(&header)?;
            } else if let Check::Duplicate(original) = s.producers.check(&header)? {
                return Ok(duplicate_info(&original, s.log_start_offset));
            }
        }
        let recompressed = match s.config.compression_type.codec() {
            Some(codec) => recompress_for_topic(&mut batches, codec, &s.config)?,
            None => None,
        };
        let base_offset = s.log_end_offset;
        if base_offset
            .0
            .checked_add(summary.record_count as i64)
            .is_none()
        {
            return Err(StorageError::InvalidRecord(
                "offsets would overflow i64".to_string(),
            ));
        }
        let log_append_time = s.config.message_timestamp_type == TimestampType::LogAppendTime;
        let mut pos = 0usize;
        let mut next = base_offset.0;
        while pos < batches.len() {
            let header = BatchHeader::parse(&batches[pos..])
                .ok_or_else(|| StorageError::CorruptMessage("batch vanished".to_string()))?;
            let batch = &mut batches[pos..pos + header.size];
            set_base_offset_and_epoch(batch, next, leader_epoch.0);
            if log_append_time {
                stamp_log_append_time(batch, now_ms);
            }
            next += header.last_offset_delta as i64 + 1;
            pos += header.size;
        }
        s.stage_batches(&batches.freeze(), marker.as_ref(), now_ms)?;
        debug_assert_eq!(s.log_end_offset, Offset(next));
        Ok(AppendInfo {
            base_offset,
            last_offset: Offset(next - 1),
            log_append_time_ms: if log_append_time { now_ms } else { -1 },
            log_start_offset: s.log_start_offset,
            record_count: summary.record_count.min(u32::MAX as u64) as u32,
            duplicate: false,
            recompressed,
        })
    }

    /// Marks `[.., upto)` committed under the flush policy and, on a single-replica log,
    /// advances the high watermark to at least `upto` (clamped to log_end_offset); a
    /// replicated log's high watermark stays (see `replica`). Concurrent callers share one
    /// flush.
    pub async fn commit(&self, upto: Offset) -> Result<(), StorageError> {
        self.durable_upto(upto, true).await.map(|_| ())
    }

    /// Flushes until `durable_end >= min(upto, log_end_offset)`, group-committing as
    /// `commit` does; with `move_hw`, then does what `try_commit_covered` does. Returns
    /// `durable_end`.
    async fn durable_upto(&self, upto: Offset, move_hw: bool) -> Result<Offset, StorageError> {
        loop {
            if let Some(durable) = self.try_commit_covered(upto, move_hw)? {
                return Ok(durable);
            }
            let _permit = self.inner.flush_lock.acquire_permit(1).await?;
            if let Some(durable) = self.try_commit_covered(upto, move_hw)? {
                return Ok(durable);
            }
            let sync = self.config().flush_policy == crate::types::FlushPolicy::Group;
            self.flush_locked(sync).await?;
        }
    }

    /// If `upto` is already durable, returns `durable_end`, having advanced the high
    /// watermark to `upto` when `move_hw` and the log is single-replica.
    fn try_commit_covered(
        &self,
        upto: Offset,
        move_hw: bool,
    ) -> Result<Option<Offset>, StorageError> {
        let mut s = self.inner.state.borrow_mut();
        s.check_poisoned()?;
        let upto = upto.min(s.log_end_offset);
        let covered = s.durable_end();
        if covered < upto {
            return Ok(None);
        }
        if move_hw {
            s.follow_durable(upto);
        }
        Ok(Some(covered))
    }

    /// Whether writes are failing with ENOSPC (appends refused).
    pub fn is_disk_full(&self) -> bool {
        self.inner.state.borrow().disk_full.is_some()
    }

    /// After a disk-full stall: tries to write (and sync, under `flush.policy=group`) the
    /// staged bytes again. On success appends are accepted again and the high watermark moves
    /// over what was written (records whose producers were answered with an error become
    /// visible: at least once, as after any failed request). Returns whether the log is
    /// writable now.
    pub async fn retry_stalled(&self) -> bool {
        if !self.is_disk_full() {
            return true;
        }
        let Ok(_permit) = self.inner.flush_lock.acquire_permit(1).await else {
            return false;
        };
        // A log an earlier failure poisoned (a failed fdatasync while it stalled, say) writes
        // nothing more: its segments were cut back to their synced bytes, and writing the
        // staged bytes again would lay them over the cut and report them durable (found by
        // the fault simulation, replicated seed 62 with disk faults and full disks).
        if self.inner.state.borrow().check_writable_files().is_err() {
            return false;
        }
        let sync = self.config().flush_policy == crate::types::FlushPolicy::Group;
        // As every flush: a failed write or fdatasync cuts the segments back to their synced
        // bytes before the log is poisoned (without the cut, the bytes whose sync failed read
        // back after a restart and are lost at the next power cut: replicated seed 372 with
        // disk faults and full disks).
        let result = self.flush_locked(sync).await;
        let mut s = self.inner.state.borrow_mut();
        match result {
            Ok(()) => {
                s.disk_full = None;
                let covered = if sync { s.synced_end } else { s.written_end };
                s.follow_durable(covered);
                tracing::info!(dir = %self.inner.dir.display(), "disk space is back: appends accepted again");
                true
            }
            Err(_) => false,
        }
    }

    /// (base offset, next offset, bytes) of every segment, for tests.
    #[cfg(test)]
    pub(crate) fn segment_layout(&self) -> Vec<(i64, i64, u64)> {
        self.inner
            .state
            .borrow()
            .segments
            .iter()
            .map(|g| (g.base_offset.0, g.next_offset.0, g.size))
            .collect()
    }

    /// Test seam: while `on`, segment writes fail with ENOSPC.
    #[cfg(test)]
    pub(crate) fn inject_disk_full(&self, on: bool) {
        self.inner.inject_disk_full.set(on);
    }

    /// Writes `recovery-point-offset-checkpoint` (what is synced now) if it moved since the
    /// last write: the broker calls it every `log.flush.offset.checkpoint.interval.ms`, as
    /// Kafka checkpoints its recovery points. Returns whether it wrote.
    pub async fn checkpoint_recovery_point(&self) -> Result<bool, StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        self.write_recovery_point_locked(None).await
    }

    /// Writes the recovery point (what is synced, or `lower` if that is less: a truncation)
    /// when it changed. Caller holds `flush_lock`.
    pub(crate) async fn write_recovery_point_locked(
        &self,
        lower: Option<Offset>,
    ) -> Result<bool, StorageError> {
        let (point, written) = {
            let s = self.inner.state.borrow();
            let synced = s.synced_end.min(s.log_end_offset);
            (lower.map_or(synced, |l| l.min(synced)), s.recovery_point)
        };
        if point == written {
            return Ok(false);
        }
        self.inner
            .disk
            .write_file_atomic(
                &self.inner.dir.join(RECOVERY_POINT_FILE),
                format!("{}\n", point.0).into_bytes(),
            )
            .await?;
        self.inner.state.borrow_mut().recovery_point = point;
        Ok(true)
    }

    /// Writes everything staged and fdatasyncs; on a single-replica log, advances the high
    /// watermark to what is synced.
    pub async fn sync(&self) -> Result<(), StorageError> {
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        self.flush_locked(true).await?;
        let mut s = self.inner.state.borrow_mut();
        let synced = s.synced_end;
        s.follow_durable(synced);
        Ok(())
    }

    /// Flush + fdatasync, then writes the active segment's indexes (its aborted transaction
    /// index too), truncates its file to its logical size and, when everything appended is
    /// synced, snapshots the producer state at the log end (so the next open replays nothing);
    /// a replicated log also writes its high watermark checkpoint. Appends are refused
    /// (`StorageError::Closed`) from the moment it begins; reads go on.
    pub async fn close(&self) -> Result<(), StorageError> {
        self.inner.state.borrow_mut().closed = true;
        let _permit = self.inner.flush_lock.acquire_permit(1).await?;
        self.flush_locked(true).await?;
        let (file, size, base, index, time_index, snapshot) = {
            let mut s = self.inner.state.borrow_mut();
            let synced = s.synced_end;
            s.follow_durable(synced);
            // Appends that came in during the flush are not synced: no snapshot past them.
            let snapshot = (s.log_end_offset == s.synced_end).then(|| {
                (
                    s.log_end_offset,
                    s.producers.encode_snapshot(s.log_end_offset),
                )
            });
            let active = s.active();
            active.seal_time_index();
            (
                active.file.clone(),
                active.size,
                active.base_offset,
                active.index.encode(),
                active.time_index.encode(),
                snapshot,
            )
        };
        let result = async {
            if let Some(file) = file {
                file.truncate(size).await?;
                crate::io_depth::track(IoKind::Sync, file.fdatasync()).await?;
            }
            let dir = &self.inner.dir;
            self.inner
                .disk
                .write_file(&segment_path(dir, base, "index"), index)
                .await?;
            self.inner
                .disk
                .write_file(&segment_path(dir, base, "timeindex"), time_index)
                .await?;
            // Under the flush lock: no byte reaches the segment between its flush above and
            // this, so the file lists every marker written.
            self.write_txn_index(base).await?;
            if let Some((offset, bytes)) = snapshot {
                self.write_snapshot(offset, bytes).await?;
            }
            self.write_hw_checkpoint_locked().await?;
            self.write_recovery_point_locked(None).await?;
            Ok(())
        }
        .await;
        self.poison_on_error(result)
    }

    fn poison_on_error<T>(&self, result: Result<T, StorageError>) -> Result<T, StorageError> {
        // ENOSPC anywhere in a flush (segment, index or checkpoint write) is a stall, not a
        // broken disk.
        let result = result.map_err(|e| match e {
            StorageError::Io(io) if is_enospc(&io) => StorageError::DiskFull(io.to_string()),
            e => e,
        });
        if let Err(StorageError::DiskFull(why)) = &result {
            let mut s = self.inner.state.borrow_mut();
            if s.disk_full.is_none() {
                tracing::warn!(dir = %self.inner.dir.display(), error = %why, "disk full: refusing appends until space returns; reads go on");
                s.disk_full = Some(why.clone());
            }
            return result;
        }
        if let Err(e) = &result {
            if !matches!(e, StorageError::Poisoned(_)) {
                let mut s = self.inner.state.borrow_mut();
                if s.poisoned.is_none() {
                    tracing::error!(dir = %self.inner.dir.display(), error = %e, "log write failed; refusing further writes");
                    s.poisoned = Some(e.to_string());
                    crate::poison::signal_offline();
                }
            }
        }
        result
    }

    /// Writes (and with `sync`, fdatasyncs) everything staged when it starts. Caller holds
    /// `flush_lock`.
    async fn flush_locked(&self, sync: bool) -> Result<(), StorageError> {
        self.inner.state.borrow().check_poisoned()?;
        let result = self.flush_inner(sync).await;
        if let Err(e) = &result {
            if sync && !matches!(e, StorageError::DiskFull(_) | StorageError::Poisoned(_)) {
                self.cut_back_to_synced(e).await;
            }
        }
        self.poison_on_error(result)
    }

    /// After a failed write or fdatasync: cuts every segment file back to what its last
    /// successful sync covered. Linux marks pages clean after a writeback error, so the bytes
    /// whose sync failed still read back from the page cache, a later fdatasync "succeeds"
    /// without writing them, and a broker restarted without a power cut would serve them as
    /// acknowledged and then lose them at the next power cut (found by the fault simulation).
    /// Cut off, they are gone at once, as a power cut would take them; the truncation is
    /// synced. A failure here is logged: the log is poisoned either way.
    async fn cut_back_to_synced(&self, cause: &StorageError) {
        let cuts: Vec<(Rc<crate::io::SegmentFile>, u64, Offset)> = {
            let s = self.inner.state.borrow();
            s.segments
                .iter()
                .filter(|g| g.written > g.synced)
                .filter_map(|g| g.file.clone().map(|f| (f, g.synced, g.base_offset)))
                .collect()
        };
        for (file, synced, base) in cuts {
            let cut = async {
                file.truncate(synced).await?;
                file.fdatasync().await
            };
            match cut.await {
                Ok(()) => {
                    tracing::warn!(dir = %self.inner.dir.display(), segment = base.0, bytes = synced, error = %cause, "cut the segment back to its last synced byte after a failed write or sync")
                }
                Err(e) => {
                    tracing::error!(dir = %self.inner.dir.display(), segment = base.0, error = %e, "could not cut the segment back to its last synced byte; unsynced bytes may read back after a restart")
                }
            }
        }
    }

    async fn flush_inner(&self, sync: bool) -> Result<(), StorageError> {
        self.inner.flushes.set(self.inner.flushes.get() + 1);
        // A replicated log without a high watermark checkpoint would reopen with its high
        // watermark at its log end (the rule for data dirs of single replicas): records it
        // fetched and never saw committed would be served as committed after a crash (found
        // by the fault simulation, replicated seed 125). Its first checkpoint is written
        // before the first bytes it syncs.
        let first_checkpoint = {
            let s = self.inner.state.borrow();
            s.replicated && s.hw_checkpointed.is_none()
        };
        if first_checkpoint {
            self.write_hw_checkpoint_locked().await?;
        }
        self.persist_epochs().await?;
        let (target_end, targets) = {
            let s = self.inner.state.borrow();
            let targets: Vec<(Offset, u64, bool)> = s
                .segments
                .iter()
                .filter(|g| {
                    g.size > g.written
                        || (sync && g.synced < g.written)
                        || (g.closed && !g.finalized)
                })
                .map(|g| (g.base_offset, g.size, g.closed))
                .collect();
            (s.log_end_offset, targets)
        };
        for (base, target_size, closed) in targets {
            self.unlink_txn_index_before_write(base).await?;
            self.write_segment(base, target_size).await?;
            if sync || closed {
                let file = self.segment_file(base)?;
                crate::io_depth::track(IoKind::Sync, file.fdatasync()).await?;
                if let Some(g) = self.inner.state.borrow_mut().segment_mut(base) {
                    g.synced = g.synced.max(target_size);
                }
            }
            if closed {
                self.finalize_segment(base).await?;
            }
        }
        // Every offset below `target_end` is in a closed (synced) segment or in the active one;
        // a pending snapshot is at a roll, so everything below it is synced now.
        self.write_due_snapshots(target_end).await?;
        let mut s = self.inner.state.borrow_mut();
        s.written_end = s.written_end.max(target_end);
        if sync {
            s.synced_end = s.synced_end.max(target_end);
        }
        Ok(())
    }

    fn segment_file(&self, base: Offset) -> Result<Rc<crate::io::SegmentFile>, StorageError> {
        self.inner
            .state
            .borrow()
            .segment(base)
            .and_then(|g| g.file.clone())
            .ok_or_else(|| {
                StorageError::Io(std::io::Error::other(format!(
                    "segment {} has no file",
                    base.0
                )))
            })
    }

    async fn persist_epochs(&self) -> Result<(), StorageError> {
        let text = {
            let s = self.inner.state.borrow();
            if !s.epochs_dirty {
                return Ok(());
            }
            s.epochs.encode()
        };
        self.inner
            .disk
            .write_file_atomic(
                &self.inner.dir.join(CHECKPOINT_FILE),
                text.clone().into_bytes(),
            )
            .await?;
        let mut s = self.inner.state.borrow_mut();
        if s.epochs.encode() == text {
            s.epochs_dirty = false;
        }
        Ok(())
    }

    /// Writes segment `base` until `written >= target_size`, block-aligned, in order.
    async fn write_segment(&self, base: Offset, target_size: u64) -> Result<(), StorageError> {
        loop {
            let needs_file = {
                let s = self.inner.state.borrow();
                match s.segment(base) {
                    Some(g) if g.written >= target_size => return Ok(()),
                    Some(g) => g.file.is_none(),
                    None => return Ok(()),
                }
            };
            if needs_file {
                let path = segment_path(&self.inner.dir, base, "log");
                let file = Rc::new(self.inner.disk.open_log_file(&path, true).await?);
                if let Some(g) = self.inner.state.borrow_mut().segment_mut(base) {
                    g.file.get_or_insert(file);
                }
                continue;
            }
            let Some(job) = self.prepare_write(base, target_size) else {
                return Ok(());
            };
            let len = job.buffer.len();
            if self.inner.fail_next_write.replace(false) {
                return Err(StorageError::Io(std::io::Error::other(
                    "injected write failure",
                )));
            }
            if self.inner.inject_disk_full.get() {
                return Err(StorageError::DiskFull("injected ENOSPC".into()));
            }
            // Bounded per shard (log.write.inflight.shard.max); held until the write completes.
            let _slot = crate::write_slots::acquire().await;
            let n = crate::io_depth::track(
                IoKind::Write,
                job.file.write_at(job.buffer, job.block_start),
            )
            .await
            .map_err(|e| {
                if is_enospc(&e) {
                    StorageError::DiskFull(format!("writing segment {}: {e}", base.0))
                } else {
                    StorageError::Io(e)
                }
            })?;
            if n != len {
                return Err(StorageError::Io(std::io::Error::other(format!(
                    "short write to segment {}: {n} of {len} bytes",
                    base.0
                ))));
            }
            let mut s = self.inner.state.borrow_mut();
            if let Some(g) = s.segment_mut(base) {
                g.pending.drain(..job.chunks);
                g.written = job.new_written;
                g.tail_block = job.new_tail_block;
            }
        }
    }

    fn prepare_write(&self, base: Offset, target_size: u64) -> Option<WriteJob> {
        let s = self.inner.state.borrow();
        let g = s.segment(base)?;
        let file = g.file.clone()?;
        let block_start = align_down(g.written);
        debug_assert_eq!(g.tail_block.len() as u64, g.written - block_start);
        let mut data_len = 0u64;
        let mut chunks = 0usize;
        for chunk in &g.pending {
            if chunks > 0 && (data_len + chunk.len() as u64 > s.config.write_bytes_max)
                || g.written + data_len >= target_size
            {
                break;
            }
            data_len += chunk.len() as u64;
            chunks += 1;
        }
        if chunks == 0 {
            return None;
        }
        let new_written = g.written + data_len;
        let buffer_len = (align_up(new_written) - block_start) as usize;
        let mut buffer = file.alloc_buffer(buffer_len);
        let out = buffer.as_bytes_mut();
        let mut at = g.tail_block.len();
        out[..at].copy_from_slice(&g.tail_block);
        for chunk in g.pending.iter().take(chunks) {
            out[at..at + chunk.len()].copy_from_slice(chunk);
            at += chunk.len();
        }
        out[at..].fill(0);
        let tail_from = (align_down(new_written) - block_start) as usize;
        let new_tail_block = out[tail_from..at].to_vec();
        Some(WriteJob {
            file,
            buffer,
            block_start,
            chunks,
            new_written,
            new_tail_block,
        })
    }

    /// A rolled segment whose bytes are all synced: cut the padding, write its indexes (the
    /// aborted transaction index last: it must list every marker of the file).
    async fn finalize_segment(&self, base: Offset) -> Result<(), StorageError> {
        let (file, size, index, time_index) = {
            let s = self.inner.state.borrow();
            let Some(g) = s.segment(base) else {
                return Ok(());
            };
            if g.written < g.size {
                return Ok(());
            }
            (
                g.file.clone(),
                g.size,
                g.index.encode(),
                g.time_index.encode(),
            )
        };
        if let Some(file) = file {
            file.truncate(size).await?;
            crate::io_depth::track(IoKind::Sync, file.fdatasync()).await?;
        }
        self.inner
            .disk
            .write_file(&segment_path(&self.inner.dir, base, "index"), index)
            .await?;
        self.inner
            .disk
            .write_file(
                &segment_path(&self.inner.dir, base, "timeindex"),
                time_index,
            )
            .await?;
        self.write_txn_index(base).await?;
        let own = self
            .inner
            .state
            .borrow_mut()
            .segment_mut(base)
            .and_then(|g| {
                g.finalized = true;
                g.file.take()
            });
        // From here reads open it through the shard's file cache.
        if let Some(f) = own {
            let _ = f.close_rc().await;
        }
        Ok(())
    }

    /// Bytes `[pos, pos + len)` of segment `base` (clamped to its size), from the file for
    /// what is written and from memory for what is staged.
    async fn read_range(&self, base: Offset, pos: u64, len: u64) -> Result<Bytes, StorageError> {
        let (file, memory, memory_from) = {
            let s = self.inner.state.borrow();
            let Some(g) = s.segment(base) else {
                return Ok(Bytes::new());
            };
            let end = (pos + len).min(g.size);
            if pos >= end {
                return Ok(Bytes::new());
            }
            let mut memory = BytesMut::new();
            let memory_from = g.copy_from_memory(pos, end, &mut memory);
            (g.file.clone().ok_or(g.finalized), memory, memory_from)
        };
        if pos >= memory_from {
            return Ok(memory.freeze());
        }
        let file = match file {
            Ok(f) => f,
            // A finalized segment keeps no file of its own: the shard's cache opens it.
            Err(true) => {
                crate::file_cache::get(
                    &self.inner.disk,
                    &segment_path(&self.inner.dir, base, "log"),
                )
                .await?
            }
            Err(false) => {
                return Err(StorageError::Io(std::io::Error::other(
                    "segment has no file".to_string(),
                )))
            }
        };
        let want = (memory_from - pos) as usize;
        let read = crate::io_depth::track(IoKind::Read, file.read_at(pos, want)).await?;
        if read.len() < want {
            return Err(StorageError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "short read in segment {}: {} of {want} bytes",
                    base.0,
                    read.len()
                ),
            )));
        }
        let mut out = BytesMut::with_capacity(want + memory.len());
        out.extend_from_slice(&read);
        out.extend_from_slice(&memory);
        Ok(out.freeze())
    }

    /// First batch at or after `pos` (a batch boundary) in segment `base` satisfying `pred`.
    async fn find_batch(
        &self,
        base: Offset,
        mut pos: u64,
        end: u64,
        pred: impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>, StorageError> {
        while pos < end {
            let window = self
                .read_range(base, pos, LOCATE_WINDOW_BYTES.min(end - pos))
                .await?;
            let mut off = 0usize;
            while off + HEADER_BYTES <= window.len() {
                let header = BatchHeader::parse(&window[off..]).ok_or_else(|| {
                    StorageError::CorruptMessage(format!(
                        "unreadable batch at position {} of segment {}",
                        pos + off as u64,
                        base.0
                    ))
                })?;
                if pred(&header) {
                    return Ok(Some((pos + off as u64, header)));
                }
                off += header.size;
            }
            if off == 0 {
                return Ok(None); // less than a header left: the segment ends torn
            }
            pos += off as u64;
        }
        Ok(None)
    }

    /// Whole batches from segment `base` starting at `start`, within `max_bytes` (at least
    /// one) and below `max_offset`.
    async fn read_batches(
        &self,
        base: Offset,
        start: u64,
        end: u64,
        max_bytes: usize,
        max_offset: Offset,
    ) -> Result<Bytes, StorageError> {
        let window_len = (max_bytes.max(HEADER_BYTES) as u64).min(end - start);
        let window = self.read_range(base, start, window_len).await?;
        let mut off = 0usize;
        while off + HEADER_BYTES <= window.len() {
            let Some(header) = BatchHeader::parse(&window[off..]) else {
                break;
            };
            if header.last_offset() >= max_offset.0 {
                break;
            }
            if off + header.size > window.len() {
                if off == 0 {
                    return self.read_range(base, start, header.size as u64).await;
                }
                break;
            }
            off += header.size;
        }
        Ok(window.slice(..off))
    }

    /// Whole batches starting with the one holding `fetch_offset`, below `max_offset`, within
    /// `max_bytes` but at least one batch (KIP-74).
    pub async fn read(
        &self,
        fetch_offset: Offset,
        max_bytes: usize,
        max_offset: Offset,
    ) -> Result<ReadResult, StorageError> {
        let (base, start_pos, end) = {
            let s = self.inner.state.borrow();
            let offsets = s.offsets();
            if fetch_offset < offsets.log_start_offset || fetch_offset > offsets.log_end_offset {
                return Err(StorageError::OffsetOutOfRange {
                    requested: fetch_offset,
                    log_start_offset: offsets.log_start_offset,
                    log_end_offset: offsets.log_end_offset,
                });
            }
            if fetch_offset == offsets.log_end_offset || fetch_offset >= max_offset {
                return Ok(result(Bytes::new(), offsets));
            }
            if let Some(records) = s.read_cache(fetch_offset, max_bytes, max_offset) {
                return Ok(result(records, offsets));
            }
            let g = &s.segments[s.segment_for(fetch_offset)];
            let start_pos = g.index.lookup(g.relative(fetch_offset)).0;
            (g.base_offset, start_pos, g.size)
        };
        let found = self
            .find_batch(base, start_pos, end, |h| h.last_offset() >= fetch_offset.0)
            .await?;
        let records = match found {
            Some((pos, _)) => {
                self.read_batches(base, pos, end, max_bytes, max_offset)
                    .await?
            }
            // Compaction can empty the end of a segment: the next batch is in a later one.
            None => self.read_after(base, max_bytes, max_offset).await?,
        };
        Ok(result(records, self.offsets()))
    }

    /// Whole batches from the first non-empty segment after segment `base`.
    async fn read_after(
        &self,
        base: Offset,
        max_bytes: usize,
        max_offset: Offset,
    ) -> Result<Bytes, StorageError> {
        let later: Vec<(Offset, u64)> = {
            let s = self.inner.state.borrow();
            s.segments
                .iter()
                .filter(|g| g.base_offset > base && g.size > 0)
                .map(|g| (g.base_offset, g.size))
                .collect()
        };
        for (b, size) in later {
            let records = self.read_batches(b, 0, size, max_bytes, max_offset).await?;
            if !records.is_empty() {
                return Ok(records);
            }
        }
        Ok(Bytes::new())
    }

    /// Kafka ListOffsets by timestamp: first record (by offset) with timestamp >= `ts_ms`.
    pub async fn offset_for_timestamp(
        &self,
        ts_ms: i64,
    ) -> Result<Option<(Offset, i64)>, StorageError> {
        let candidates: Vec<(Offset, u64, u64)> = {
            let s = self.inner.state.borrow();
            s.segments
                .iter()
                .filter(|g| g.max_timestamp_ms >= ts_ms && g.size > 0)
                .map(|g| {
                    let pos = g
                        .time_index
                        .lookup_before(ts_ms)
                        .map_or(BytePosition(0), |rel| g.index.lookup(rel));
                    (g.base_offset, pos.0, g.size)
                })
                .collect()
        };
        for (base, mut pos, end) in candidates {
            while let Some((at, header)) = self
                .find_batch(base, pos, end, |h| h.max_timestamp >= ts_ms)
                .await?
            {
                let batch = self.read_range(base, at, header.size as u64).await?;
                if let Some(r) = find_record(&batch, |r| r.timestamp_ms >= ts_ms)? {
                    return Ok(Some((Offset(r.offset), r.timestamp_ms)));
                }
                pos = at + header.size as u64;
            }
        }
        Ok(None)
    }

    /// Offset and timestamp of the (first) record with the largest timestamp.
    pub async fn max_timestamp(&self) -> Result<Option<(Offset, i64)>, StorageError> {
        let best = {
            let s = self.inner.state.borrow();
            let mut best: Option<&Segment> = None;
            for g in s.segments.iter().filter(|g| g.size > 0) {
                if best.is_none_or(|b| g.max_timestamp_ms > b.max_timestamp_ms) {
                    best = Some(g);
                }
            }
            match best {
                Some(g) if g.max_timestamp_ms >= 0 => {
                    let rel = g.relative(g.offset_of_max_timestamp);
                    Some((
                        g.base_offset,
                        g.index.lookup(rel).0,
                        g.size,
                        g.offset_of_max_timestamp,
                        g.max_timestamp_ms,
                    ))
                }
                _ => None,
            }
        };
        let Some((base, pos, end, offset, ts)) = best else {
            return Ok(None);
        };
        if let Some((at, header)) = self
            .find_batch(base, pos, end, |h| h.last_offset() >= offset.0)
            .await?
        {
            let batch = self.read_range(base, at, header.size as u64).await?;
            if let Some(r) = find_record(&batch, |r| r.timestamp_ms == ts)? {
                return Ok(Some((Offset(r.offset), ts)));
            }
        }
        Ok(Some((offset, ts)))
    }

    /// Number of flushes run so far (group commit shares one among concurrent commits).
    #[cfg(test)]
    pub(crate) fn flush_count(&self) -> u64 {
        self.inner.flushes.get()
    }

    /// Makes the next segment write fail with an I/O error (fault-injection seam for tests).
    #[cfg(test)]
    pub(crate) fn inject_write_failure(&self) {
        self.inner.fail_next_write.set(true);
    }

    /// Latest leader epoch known. `append` records a new epoch in memory (append is I/O-free);
    /// the `leader-epoch-checkpoint` is rewritten (temp file + rename) by the next flush, before
    /// that flush writes any data, so the file never lags durable batches. On open, epochs are
    /// also re-derived from the scanned batches' partitionLeaderEpoch and cut at log_end_offset.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.inner.state.borrow().epochs.latest()
    }

    /// Kafka OffsetForLeaderEpoch: (largest epoch <= `epoch`, its end offset).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        let s = self.inner.state.borrow();
        s.epochs.end_offset_for(epoch, s.log_end_offset)
    }
}

/// An offset kept as text in `path`; `None` if the file is missing or malformed.
async fn read_offset_file(disk: &Disk, path: &Path) -> Result<Option<Offset>, StorageError> {
    Ok(disk
        .read_file(path)
        .await?
        .and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse::<i64>().ok())
        .map(Offset))
}

/// Persists the log start offset (`log-start-offset`), replacing the file atomically.
async fn write_log_start(disk: &Disk, dir: &Path, offset: Offset) -> Result<(), StorageError> {
    disk.write_file_atomic(
        &dir.join(LOG_START_FILE),
        format!("{}\n", offset.0).into_bytes(),
    )
    .await
}

/// ENOSPC, as the kernel or glommio (which wraps the OS error with a message) reports it.
fn is_enospc(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == std::io::ErrorKind::StorageFull
}

/// Rewrites `batches` into the topic's `compression.type` codec where they differ (Kafka's
/// LogValidator recompression), and checks the rewritten batches against `max.message.bytes`
/// again, as Kafka does after recompressing.
fn recompress_for_topic(
    batches: &mut BytesMut,
    codec: u8,
    config: &LogConfig,
) -> Result<Option<crate::types::RecompressStats>, StorageError> {
    let started = std::time::Instant::now();
    let levels = crate::codec::CompressionLevels {
        gzip: config.compression_gzip_level,
        lz4: config.compression_lz4_level,
        zstd: config.compression_zstd_level,
    };
    let Some(out) = crate::codec::recompress(batches, codec, &levels)? else {
        return Ok(None);
    };
    let mut pos = 0usize;
    while let Some(header) = out.batches.get(pos..).and_then(BatchHeader::parse) {
        if header.size > config.max_message_bytes as usize {
            return Err(StorageError::MessageTooLarge {
                size: header.size,
                max: config.max_message_bytes,
            });
        }
        pos += header.size;
    }
    *batches = out.batches;
    Ok(Some(crate::types::RecompressStats {
        bytes_in: out.bytes_in,
        bytes_out: out.bytes_out,
        nanos: u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
    }))
}

/// The answer to a retry of `original` (Kafka answers it as if appended again).
fn duplicate_info(original: &BatchMetadata, log_start_offset: Offset) -> AppendInfo {
    AppendInfo {
        base_offset: Offset(original.first_offset),
        last_offset: Offset(original.last_offset),
        log_append_time_ms: if original.log_append_time {
            original.max_timestamp_ms
        } else {
            -1
        },
        log_start_offset,
        record_count: 0,
        duplicate: true,
        recompressed: None,
    }
}

fn result(records: Bytes, offsets: LogOffsets) -> ReadResult {
    ReadResult {
        records,
        high_watermark: offsets.high_watermark,
        last_stable_offset: offsets.last_stable_offset,
        log_start_offset: offsets.log_start_offset,
        log_end_offset: offsets.log_end_offset,
    }
}

/// Loads a closed segment's index files if they are trustworthy for a log of `log_bytes`.
async fn load_indexes(
    disk: &Disk,
    dir: &Path,
    base: Offset,
    log_bytes: u64,
) -> Result<Option<(OffsetIndex, TimeIndex)>, StorageError> {
    let Some(index) = disk.read_file(&segment_path(dir, base, "index")).await? else {
        return Ok(None);
    };
    let Some(time_index) = disk
        .read_file(&segment_path(dir, base, "timeindex"))
        .await?
    else {
        return Ok(None);
    };
    match (
        OffsetIndex::decode(&index, log_bytes),
        TimeIndex::decode(&time_index),
    ) {
        (Some(i), Some(t)) => Ok(Some((i, t))),
        _ => Ok(None),
    }
}

/// Opens one segment and recovers it: trusted indexes + tail scan for a closed segment (and
/// for the active one after a clean shutdown, `recovery::previous_stop_clean`: its indexes
/// were written by `close`), full scan (rebuilding indexes) otherwise. Truncates a torn tail;
/// a bad batch with valid batches after it fails with `CorruptSegment` and leaves the file as
/// it is. Counts the bytes it scanned in `scanned_bytes`.
#[allow(clippy::too_many_arguments)]
async fn recover_segment(
    disk: &Disk,
    dir: &Path,
    base: Offset,
    is_active: bool,
    gaps_allowed: bool,
    recovery_point: Offset,
    config: &LogConfig,
    epochs: &mut EpochCache,
    scanned_bytes: &mut u64,
) -> Result<Segment, StorageError> {
    // Closed segments were synced whole before the next one took data; in the active one,
    // what lies past the recovery point may be a torn unsynced write.
    let torn_from = if is_active {
        recovery_point.0.max(base.0)
    } else {
        i64::MAX
    };
    let path = segment_path(dir, base, "log");
    let file = Rc::new(disk.open_log_file(&path, false).await?);
    let file_size = file.file_size().await?;
    let mut seg = Segment::new(base, Some(file.clone()));
    let mut valid_end = None;
    let interval = config.index_interval_bytes;
    if !is_active || crate::recovery::previous_stop_clean() {
        if let Some((index, time_index)) = load_indexes(disk, dir, base, file_size).await? {
            let (start, expected) = index
                .entries
                .last()
                .map_or((0, base.0), |&(rel, pos)| (pos as u64, base.0 + rel as i64));
            seg.index = index;
            seg.time_index = time_index;
            if let Some((ts, rel)) = seg.time_index.last() {
                seg.max_timestamp_ms = ts;
                seg.offset_of_max_timestamp = Offset(base.0 + rel as i64);
            }
            let mut batches = 0usize;
            *scanned_bytes += file_size.saturating_sub(start);
            if is_active && file_size > 0 {
                // The roll by `segment.ms` counts from the first batch's timestamp.
                let first = file.read_at(0, HEADER_BYTES).await?;
                seg.first_batch_max_ts = BatchHeader::parse(&first)
                    .map(|h| h.max_timestamp)
                    .filter(|ts| *ts >= 0);
            }
            let scanned = scan_segment(
                &file,
                &path,
                start,
                file_size,
                expected,
                base.0,
                gaps_allowed,
                torn_from,
                |pos, h| {
                    batches += 1;
                    if is_active {
                        // Appends go on here: the index keeps its spacing.
                        let first = seg.first_batch_max_ts;
                        seg.note_batch(BytePosition(pos), h, interval);
                        seg.first_batch_max_ts = first.or(seg.first_batch_max_ts);
                    } else {
                        if h.max_timestamp > seg.max_timestamp_ms {
                            seg.max_timestamp_ms = h.max_timestamp;
                            seg.offset_of_max_timestamp = Offset(h.last_offset());
                        }
                        seg.next_offset = Offset(h.last_offset() + 1);
                    }
                    if h.leader_epoch >= 0 {
                        epochs.assign(LeaderEpoch(h.leader_epoch), Offset(h.base_offset));
                    }
                },
            )
            .await;
            let end = match scanned {
                // Nothing valid where the index points: the index, not the log, may be what
                // is wrong, so the full scan below decides.
                Err(StorageError::CorruptSegment { .. }) if batches == 0 => None,
                other => Some(other?),
            };
            if let Some(end) = end.filter(|_| batches > 0 || start == 0) {
                valid_end = Some(end);
            } else {
                tracing::warn!(dir = %dir.display(), base_offset = base.0, "index points past the valid log; rebuilding");
                seg = Segment::new(base, Some(file.clone()));
            }
        }
    }
    let rebuilt = valid_end.is_none();
    let valid_end = match valid_end {
        Some(end) => end,
        None => {
            if is_active {
                // The batches decide the epochs of the active segment, as Kafka's
                // `LogSegment.recover` truncates the cache to the segment's base first: the
                // checkpoint may name an epoch for records that are not there (it is written
                // before the data it covers), or records may be there that a truncation cut
                // and a failed sync never made durable (found by the fault simulation,
                // replicated seed 3333 with disk faults: a follower kept the old leader's
                // records under the new leader's epoch and never truncated them).
                epochs.truncate_from_end(base);
            }
            *scanned_bytes += file_size;
            scan_segment(
                &file,
                &path,
                0,
                file_size,
                base.0,
                base.0,
                gaps_allowed,
                torn_from,
                |pos, h| {
                    seg.note_batch(BytePosition(pos), h, interval);
                    if h.leader_epoch >= 0 {
                        epochs.assign(LeaderEpoch(h.leader_epoch), Offset(h.base_offset));
                    }
                },
            )
            .await?
        }
    };
    if valid_end < file_size && !is_active {
        // A closed segment was synced before any later segment took data: its tail cannot be
        // torn. Zero padding (a finalize cut short) is fine; anything else is corruption.
        let tail = file
            .read_at(valid_end, (file_size - valid_end) as usize)
            .await?;
        if let Some(i) = tail.iter().position(|&b| b != 0) {
            return Err(StorageError::CorruptSegment {
                segment: segment_path(dir, base, "log").display().to_string(),
                position: valid_end + i as u64,
                reason: "bytes after the last valid batch of a closed segment".to_string(),
            });
        }
    }
    // Its `.txnindex` was written after the last byte of the file (see `txns`): a file cut
    // short does not match it.
    let truncated = valid_end < file_size;
    if truncated {
        tracing::warn!(
            dir = %dir.display(),
            base_offset = base.0,
            valid_end,
            file_size,
            "truncating invalid tail of segment"
        );
        file.truncate(valid_end).await?;
        crate::io_depth::track(IoKind::Sync, file.fdatasync()).await?;
    }
    seg.size = valid_end;
    seg.written = valid_end;
    seg.synced = valid_end;
    if is_active {
        let block_start = align_down(valid_end);
        if valid_end > block_start {
            let tail = file
                .read_at(block_start, (valid_end - block_start) as usize)
                .await?;
            if (tail.len() as u64) < valid_end - block_start {
                return Err(StorageError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "short read of the last block",
                )));
            }
            seg.tail_block = tail.to_vec();
        }
    } else {
        seg.closed = true;
        seg.finalized = true;
        if rebuilt {
            seg.seal_time_index();
            disk.write_file(&segment_path(dir, base, "index"), seg.index.encode())
                .await?;
            disk.write_file(
                &segment_path(dir, base, "timeindex"),
                seg.time_index.encode(),
            )
            .await?;
        }
        // Closed segments keep no file open; reads go through the shard's file cache.
        if let Some(f) = seg.file.take() {
            drop(file);
            let _ = f.close_rc().await;
        }
    }
    if !truncated {
        if let Some(index) = txns::load_txn_index(disk, dir, base, seg.next_offset).await? {
            seg.txn_index = index;
            seg.txn_index_on_disk = true;
        }
    }
    Ok(seg)
}
