//! One segment of a partition log: a `.log` file of record batches plus its in-memory sparse
//! indexes, and the write-side state that turns appended batches into aligned O_DIRECT writes.
//!
//! Byte positions within the file (all `u64`, logical, never padded):
//! `synced <= written <= size`; `[0, written)` is in the file, `[align_down(written), written)`
//! is also kept in `tail_block` (the partial last block that the next write rewrites), and
//! `[written, size)` is staged in `pending`, whole batches in order. Only the flusher moves
//! `written`/`synced`, and only one flush runs per log at a time. A `closed` segment takes no
//! more appends; once its staged bytes are synced it is `finalized`: the file is truncated to
//! `size` and its index files are written. The aborted transaction index (`txn_index`) lists
//! the ABORT markers in the segment; `txn_index_on_disk` says its `.txnindex` file is written
//! and matches the file's bytes (see `txn_index`). Runs on the shard owning the partition.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::io::SegmentFile;
use bytes::{Bytes, BytesMut};

use crate::batch::BatchHeader;
use crate::index::{OffsetIndex, TimeIndex};
use crate::txn_index::TxnIndex;
use crate::types::Offset;
use keel_vocab::BytePosition;

/// O_DIRECT alignment of positions and lengths for `.log` writes.
pub const BLOCK_BYTES: u64 = 4096;

pub fn align_down(v: u64) -> u64 {
    v & !(BLOCK_BYTES - 1)
}

pub fn align_up(v: u64) -> u64 {
    align_down(v + BLOCK_BYTES - 1)
}

/// `<dir>/<base offset, 20 digits>.<ext>`.
pub fn segment_path(dir: &Path, base_offset: Offset, ext: &str) -> PathBuf {
    dir.join(format!("{:020}.{ext}", base_offset.0))
}

pub struct Segment {
    pub base_offset: Offset,
    /// `None` until the flusher creates the file (a segment rolled by `append`, which cannot
    /// do I/O). While `None`, `written == 0` and every byte is in `pending`.
    pub file: Option<Rc<SegmentFile>>,
    /// Logical size in bytes, staged bytes included.
    pub size: u64,
    pub written: u64,
    pub synced: u64,
    pub tail_block: Vec<u8>,
    pub pending: VecDeque<Bytes>,
    pub index: OffsetIndex,
    pub time_index: TimeIndex,
    /// The ABORT markers in this segment.
    pub txn_index: TxnIndex,
    /// The `.txnindex` file exists and lists every marker written to the `.log` file: no
    /// byte may be written to the segment before the file is removed.
    pub txn_index_on_disk: bool,
    pub bytes_since_index: u64,
    /// Last offset + 1 of the batches in this segment; `base_offset` when empty.
    pub next_offset: Offset,
    /// Largest batch maxTimestamp seen, -1 when none.
    pub max_timestamp_ms: i64,
    /// Last offset of the first batch that reached `max_timestamp_ms`.
    pub offset_of_max_timestamp: Offset,
    /// Wall clock when this process appended the segment's first batch (`segment.ms` for
    /// batches without timestamps).
    pub created_ms: Option<i64>,
    /// Max timestamp of the segment's first batch: `segment.ms` is measured from it in record
    /// time, as Kafka does (so a restart does not roll a segment of old records).
    pub first_batch_max_ts: Option<i64>,
    pub closed: bool,
    pub finalized: bool,
}

impl Segment {
    pub fn new(base_offset: Offset, file: Option<Rc<SegmentFile>>) -> Segment {
        Segment {
            base_offset,
            file,
            size: 0,
            written: 0,
            synced: 0,
            tail_block: Vec::new(),
            pending: VecDeque::new(),
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            txn_index: TxnIndex::default(),
            txn_index_on_disk: false,
            bytes_since_index: 0,
            next_offset: base_offset,
            max_timestamp_ms: -1,
            offset_of_max_timestamp: base_offset,
            created_ms: None,
            first_batch_max_ts: None,
            closed: false,
            finalized: false,
        }
    }

    /// Offset relative to the base; callers roll before it could exceed `u32`.
    pub fn relative(&self, offset: Offset) -> u32 {
        let rel = offset.0 - self.base_offset.0;
        assert!(
            (0..=u32::MAX as i64).contains(&rel),
            "offset {offset:?} outside segment {:?}",
            self.base_offset
        );
        rel as u32
    }

    /// Updates indexes and summaries for a batch starting at `position` (both on append and
    /// when rebuilding by scanning, so the two produce identical indexes).
    pub fn note_batch(
        &mut self,
        position: BytePosition,
        header: &BatchHeader,
        index_interval_bytes: u32,
    ) {
        let last = Offset(header.last_offset());
        if header.max_timestamp > self.max_timestamp_ms {
            self.max_timestamp_ms = header.max_timestamp;
            self.offset_of_max_timestamp = last;
        }
        if self.bytes_since_index > index_interval_bytes as u64 {
            let rel = self.relative(Offset(header.base_offset));
            self.index.push(rel, position);
            let rel_max = self.relative(self.offset_of_max_timestamp);
            self.time_index.maybe_push(self.max_timestamp_ms, rel_max);
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.size as u64;
        self.next_offset = Offset(last.0 + 1);
        if self.first_batch_max_ts.is_none() && header.max_timestamp >= 0 {
            self.first_batch_max_ts = Some(header.max_timestamp);
        }
    }

    /// Adds the final time-index entry (the segment's max timestamp) before the indexes are
    /// written out, as Kafka does when a segment becomes inactive.
    pub fn seal_time_index(&mut self) {
        if self.max_timestamp_ms >= 0 && self.next_offset > self.base_offset {
            let rel = self.relative(self.offset_of_max_timestamp);
            self.time_index.maybe_push(self.max_timestamp_ms, rel);
        }
    }

    pub fn stage(&mut self, batch: Bytes) {
        self.size += batch.len() as u64;
        self.pending.push_back(batch);
    }

    /// Copies the in-memory part of `[pos, end)` (bytes at or after `align_down(written)`)
    /// into `out`; returns the first position copied (`end` when nothing is in memory).
    pub fn copy_from_memory(&self, pos: u64, end: u64, out: &mut BytesMut) -> u64 {
        let block_start = align_down(self.written);
        let from = pos.max(self.written).max(block_start);
        let mut cursor = block_start;
        for chunk in
            std::iter::once(&self.tail_block[..]).chain(self.pending.iter().map(|b| &b[..]))
        {
            let chunk_end = cursor + chunk.len() as u64;
            let lo = from.max(cursor);
            let hi = end.min(chunk_end);
            if lo < hi {
                out.extend_from_slice(&chunk[(lo - cursor) as usize..(hi - cursor) as usize]);
            }
            cursor = chunk_end;
            if cursor >= end {
                break;
            }
        }
        from.min(end)
    }
}
