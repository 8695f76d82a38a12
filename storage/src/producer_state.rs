//! Per-partition producer state, Kafka's `ProducerStateManager`: for every producer that wrote
//! a batch carrying a producer id (an idempotent or transactional producer), its epoch, the
//! last five batches it appended and its last timestamp. Sans-I/O: `Log` calls `check` before
//! it stages an append, `record` once the batch has its offsets, and writes and reads the
//! snapshots this module encodes. Runs on the shard owning the partition.
//!
//! The rules follow Kafka 3.x/4.x (`UnifiedLog.analyzeAndValidateProducerState`,
//! `ProducerAppendInfo.checkProducerEpoch` / `checkSequence`), checked in this order:
//!
//! 1. A data batch whose epoch, first and last sequence equal one of its producer's last five
//!    batches is a duplicate (a retry): it is not appended again, and the producer is answered
//!    with the original batch's offsets (`Check::Duplicate`).
//! 2. An epoch older than the producer's is fenced: `INVALID_PRODUCER_EPOCH`.
//! 3. A new epoch must start at sequence 0, unless the producer has no epoch yet.
//! 4. Within an epoch the first sequence must follow the last one (`last + 1`, or 0 after
//!    `i32::MAX`); otherwise `OUT_OF_ORDER_SEQUENCE_NUMBER`.
//!
//! A producer this partition has no state for (never seen, expired, or its state lost with
//! deleted segments) is accepted at any sequence (KIP-360): since Kafka 2.5 Produce no longer
//! answers `UNKNOWN_PRODUCER_ID`, and neither does Keel.
//!
//! Transactions (Kafka `appendDataBatch` / `appendEndTxnMarker`): the first transactional
//! data batch of a producer opens its transaction (`current_txn_first_offset`); a
//! non-transactional data batch while one is open is `INVALID_TXN_STATE`. Control batches
//! (transaction markers) have no sequence: they are fenced by producer epoch, then by
//! coordinator epoch (a marker from a coordinator older than the producer's last one is
//! `TRANSACTION_COORDINATOR_FENCED`), then take both epochs, end the open transaction (a
//! [`CompletedTxn`] for the log: its aborted transaction index and last stable offset) and
//! move the last timestamp. The open transactions are also kept by first offset, so the
//! earliest is found at once (the last stable offset).
//!
//! Time here is the batch's `maxTimestamp` as stored (the broker's clock under LogAppendTime,
//! the producer's under CreateTime), as Kafka's `lastTimestamp`: replaying the log gives the
//! same state as the live appends did. Expiry (`producer.id.expiration.ms`) compares it with
//! the broker's clock.
//!
//! Snapshot format (Keel's own, version 1; all integers big-endian), in
//! `<offset, 20 digits>.snapshot`, holding the state after every batch below that offset:
//!
//! ```text
//! version u16 | crc32c u32 (Castagnoli, of every byte after it) | offset i64 | producers u32
//! per producer, ascending by id:
//!   producer_id i64 | epoch i16 | coordinator_epoch i32 | txn_first_offset i64 (-1: none)
//!   | last_timestamp_ms i64 | batches u8 (0..=5)
//!   per batch, oldest first:
//!     first_seq i32 | last_seq i32 | first_offset i64 | last_offset i64 | max_timestamp_ms i64
//!     | flags u8 (bit 0: LogAppendTime)
//! ```
//!
//! Unlike Kafka's (which keeps only each producer's last batch), it keeps all five, so a retry
//! of any of them is still a duplicate after a restart. Decoding trusts nothing: every length
//! is checked before use, and any inconsistency makes the snapshot corrupt (the log then falls
//! back to an older snapshot or to the log itself).

use std::collections::BTreeMap;

use keel_vocab::wire::Reader;

use crate::batch::{BatchHeader, NO_PRODUCER_EPOCH, NO_SEQUENCE};
use crate::error::StorageError;
use crate::records::{EndTxnMarker, MarkerType};
use crate::types::Offset;

/// Batches remembered per producer: Kafka's `NUM_BATCHES_TO_RETAIN`, matching the five
/// in-flight requests an idempotent producer may have.
pub const BATCHES_RETAINED: usize = 5;
/// Version written in, and the only one read from, snapshot files.
pub const SNAPSHOT_VERSION: u16 = 1;
/// version + crc + offset + producer count.
const SNAPSHOT_HEADER_BYTES: usize = 2 + 4 + 8 + 4;
/// One producer without its batches.
const PRODUCER_BYTES: usize = 8 + 2 + 4 + 8 + 8 + 1;
/// One batch of a producer.
const BATCH_BYTES: usize = 4 + 4 + 8 + 8 + 8 + 1;
const FLAG_LOG_APPEND_TIME: u8 = 1;

/// One of a producer's last batches (Kafka `BatchMetadata`). Offsets are inclusive.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch's maxTimestamp as stored.
    pub max_timestamp_ms: i64,
    /// The batch was stamped with the broker's time (LogAppendTime).
    pub log_append_time: bool,
}

/// What this partition knows of one producer (Kafka `ProducerStateEntry`). Plain values, no
/// allocation: checking an append copies it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProducerEntry {
    /// `NO_PRODUCER_EPOCH` (-1) until a batch gave it one.
    pub producer_epoch: i16,
    /// Oldest first; `batches[..batch_count]` are valid, all of `producer_epoch`.
    batches: [BatchMetadata; BATCHES_RETAINED],
    batch_count: u8,
    /// maxTimestamp of the producer's last batch (data or control).
    pub last_timestamp_ms: i64,
    /// Epoch of the transaction coordinator that wrote the last marker; -1 before any.
    pub coordinator_epoch: i32,
    /// First offset of the producer's open transaction.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    fn empty() -> ProducerEntry {
        ProducerEntry {
            producer_epoch: NO_PRODUCER_EPOCH,
            batches: [BatchMetadata::default(); BATCHES_RETAINED],
            batch_count: 0,
            last_timestamp_ms: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    /// The retained batches, oldest first.
    pub fn batches(&self) -> &[BatchMetadata] {
        &self.batches[..self.batch_count as usize]
    }

    /// Last sequence of the last batch, `NO_SEQUENCE` without one.
    pub fn last_seq(&self) -> i32 {
        self.batches().last().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    /// Kafka `maybeUpdateProducerEpoch`: a new epoch forgets the old epoch's batches.
    fn maybe_update_epoch(&mut self, epoch: i16) {
        if self.producer_epoch != epoch {
            self.producer_epoch = epoch;
            self.batch_count = 0;
        }
    }

    /// Kafka `addBatch`: keeps the last `BATCHES_RETAINED` batches of the current epoch.
    fn add_batch(&mut self, epoch: i16, batch: BatchMetadata) {
        self.maybe_update_epoch(epoch);
        if self.batch_count as usize == BATCHES_RETAINED {
            self.batches.copy_within(1.., 0);
            self.batch_count -= 1;
        }
        self.batches[self.batch_count as usize] = batch;
        self.batch_count += 1;
        self.last_timestamp_ms = batch.max_timestamp_ms;
    }

    /// Kafka `findDuplicateBatch`: a retained batch of the same epoch and sequence range.
    fn find_duplicate(&self, epoch: i16, first_seq: i32, last_seq: i32) -> Option<BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches()
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            .copied()
    }
}

/// Kafka `ProducerAppendInfo.inSequence`: `next` follows `last`, wrapping after `i32::MAX`.
fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// One producer as DescribeProducers reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Last sequence of its last batch, -1 when it has none.
    pub last_sequence: i32,
    pub last_timestamp_ms: i64,
    /// -1 before any transaction marker.
    pub coordinator_epoch: i32,
    /// First offset of its open transaction, -1 when none is open.
    pub current_txn_start_offset: i64,
}

/// What `check` decided for one batch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// Append it (then `record` it).
    Append,
    /// A retry of a batch already appended: do not append, answer with this one.
    Duplicate(BatchMetadata),
}

/// A transaction a marker ended (Kafka `CompletedTxn`). Offsets are inclusive.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// The producer state of one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: BTreeMap<i64, ProducerEntry>,
    /// The open transactions: first offset -> producer id (Kafka `ongoingTxns`). Holds
    /// exactly the producers with a `current_txn_first_offset`.
    ongoing: BTreeMap<i64, i64>,
}

impl ProducerStateManager {
    pub fn new() -> ProducerStateManager {
        ProducerStateManager::default()
    }

    // Public API only through the `fuzzing` re-export, which needs no `is_empty`.
    #[cfg_attr(feature = "fuzzing", allow(clippy::len_without_is_empty))]
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    #[cfg(test)]
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Checks one validated batch with a producer id (see the module docs) against the state;
    /// changes nothing. `Err` is `InvalidProducerEpoch`, `OutOfOrderSequence` or, for a data
    /// batch without a sequence, `InvalidRecord`.
    pub fn check(&self, h: &BatchHeader) -> Result<Check, StorageError> {
        debug_assert!(h.has_producer_id());
        let entry = self
            .producers
            .get(&h.producer_id)
            .copied()
            .unwrap_or_else(ProducerEntry::empty);
        let epoch = h.producer_epoch;
        if h.is_control() {
            return check_epoch(h, &entry).map(|()| Check::Append);
        }
        // Kafka's LogValidator: a batch with a producer id must carry a sequence.
        if h.base_sequence < 0 {
            return Err(StorageError::InvalidRecord(format!(
                "invalid sequence number {} in a record batch with producer id {}",
                h.base_sequence, h.producer_id
            )));
        }
        let first_seq = h.base_sequence;
        let last_seq = h.last_sequence();
        if let Some(original) = entry.find_duplicate(epoch, first_seq, last_seq) {
            return Ok(Check::Duplicate(original));
        }
        check_epoch(h, &entry)?;
        if epoch != entry.producer_epoch {
            if first_seq != 0 && entry.producer_epoch != NO_PRODUCER_EPOCH {
                return Err(StorageError::OutOfOrderSequence(format!(
                    "invalid sequence number for new epoch of producer {}: {epoch} (request \
                     epoch), {first_seq} (seq. number), {} (current producer epoch)",
                    h.producer_id, entry.producer_epoch
                )));
            }
        } else {
            let last = entry.last_seq();
            // No epoch yet: the producer is unknown here, any sequence goes (KIP-360).
            if !(entry.producer_epoch == NO_PRODUCER_EPOCH || in_sequence(last, first_seq)) {
                return Err(StorageError::OutOfOrderSequence(format!(
                    "out of order sequence number for producer {}: {first_seq} (incoming seq. \
                     number), {last} (current end sequence number)",
                    h.producer_id
                )));
            }
        }
        if !h.is_transactional() {
            if let Some(first) = entry.current_txn_first_offset {
                return Err(StorageError::InvalidTxnState(format!(
                    "expected a transactional write from producer {}: its transaction is open \
                     since offset {first}",
                    h.producer_id
                )));
            }
        }
        Ok(Check::Append)
    }

    /// Kafka `checkCoordinatorEpoch`: the marker `marker` of control batch `h` must come from
    /// a coordinator at least as new as the one that wrote the producer's last marker.
    pub fn check_marker(&self, h: &BatchHeader, marker: &EndTxnMarker) -> Result<(), StorageError> {
        let current = self
            .producers
            .get(&h.producer_id)
            .map_or(-1, |e| e.coordinator_epoch);
        if marker.coordinator_epoch < current {
            return Err(StorageError::TransactionCoordinatorFenced(format!(
                "invalid coordinator epoch for producer {}: {} (zombie), {current} (current)",
                h.producer_id, marker.coordinator_epoch
            )));
        }
        Ok(())
    }

    /// The epoch check alone (a batch the broker's own coordinator writes: its sequence is not
    /// the producer's, see `Log::append_from_coordinator`).
    pub fn check_epoch(&self, h: &BatchHeader) -> Result<(), StorageError> {
        let entry = self
            .producers
            .get(&h.producer_id)
            .copied()
            .unwrap_or_else(ProducerEntry::empty);
        check_epoch(h, &entry)
    }

    /// Applies one batch with a producer id, as stored (offsets assigned, timestamps
    /// stamped): after `check` accepted it, and when replaying the log at open. No checks, as
    /// Kafka's replay: the log is the truth.
    pub fn record(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        if h.is_control() {
            self.record_marker(h, None);
            return;
        }
        // Never accepted by `check`; a log written before sequences were checked may hold one.
        if h.base_sequence < 0 {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(ProducerEntry::empty);
        entry.add_batch(
            h.producer_epoch,
            BatchMetadata {
                first_seq: h.base_sequence,
                last_seq: h.last_sequence(),
                first_offset: h.base_offset,
                last_offset: h.last_offset(),
                max_timestamp_ms: h.max_timestamp,
                log_append_time: h.is_log_append_time(),
            },
        );
        if h.is_transactional() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(h.base_offset);
            self.ongoing.insert(h.base_offset, h.producer_id);
        }
    }

    /// Applies control batch `h` as stored, with its marker (`None` when the record does not
    /// read as one: a log written before markers were checked; the transaction ends without
    /// an outcome). Returns the transaction it ended, if one was open. No checks, as `record`.
    pub fn record_marker(
        &mut self,
        h: &BatchHeader,
        marker: Option<&EndTxnMarker>,
    ) -> Option<CompletedTxn> {
        // An empty control batch is what compaction leaves of a finished transaction.
        if !h.has_producer_id() || !h.is_control() || h.records_count == 0 {
            return None;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(ProducerEntry::empty);
        let open = entry.current_txn_first_offset.take();
        entry.maybe_update_epoch(h.producer_epoch);
        entry.last_timestamp_ms = h.max_timestamp;
        if let Some(m) = marker {
            entry.coordinator_epoch = m.coordinator_epoch;
        }
        let first_offset = open?;
        if self.ongoing.get(&first_offset) == Some(&h.producer_id) {
            self.ongoing.remove(&first_offset);
        }
        marker.map(|m| CompletedTxn {
            producer_id: h.producer_id,
            first_offset,
            last_offset: h.base_offset,
            aborted: m.kind == MarkerType::Abort,
        })
    }

    /// First offset of the earliest open transaction.
    pub fn first_ongoing_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// Kafka `removeExpiredProducers`: forgets producers without an open transaction whose
    /// last timestamp is at least `expiration_ms` before `now_ms`. Returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp_ms) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Forgets producers whose state may be stale: their last data batch lies below
    /// `offset` (or they have none). Used when the log was replayed over a compacted range,
    /// where compaction may have removed a producer's later batches.
    pub fn forget_below(&mut self, offset: Offset) -> usize {
        let before = self.producers.len();
        // An open transaction's batches lie past everything compaction touched (it stops at
        // the last stable offset): its producer's state is whole.
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || e.batches()
                    .last()
                    .is_some_and(|b| b.last_offset >= offset.0)
        });
        before - self.producers.len()
    }

    /// Every producer, ascending by id (DescribeProducers).
    pub fn producers(&self) -> Vec<ProducerInfo> {
        self.producers
            .iter()
            .map(|(&producer_id, e)| ProducerInfo {
                producer_id,
                producer_epoch: e.producer_epoch,
                last_sequence: e.last_seq(),
                last_timestamp_ms: e.last_timestamp_ms,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
            })
            .collect()
    }

    /// The snapshot of this state as of `offset` (see the module docs for the format).
    pub fn encode_snapshot(&self, offset: Offset) -> Vec<u8> {
        let batches: usize = self.producers.values().map(|e| e.batches().len()).sum();
        let mut out = Vec::with_capacity(
            SNAPSHOT_HEADER_BYTES + self.producers.len() * PRODUCER_BYTES + batches * BATCH_BYTES,
        );
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // the crc, below
        out.extend_from_slice(&offset.0.to_be_bytes());
        // At most one producer per append: the count fits a u32.
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (&id, e) in &self.producers {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.producer_epoch.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&e.last_timestamp_ms.to_be_bytes());
            out.push(e.batch_count);
            for b in e.batches() {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.max_timestamp_ms.to_be_bytes());
                out.push(if b.log_append_time {
                    FLAG_LOG_APPEND_TIME
                } else {
                    0
                });
            }
        }
        let crc = crc32c::crc32c(&out[6..]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a snapshot file's bytes: its offset and state. `Err` says why the bytes are not
    /// a valid snapshot (wrong version, CRC, length or an inconsistent field).
    pub fn decode_snapshot(bytes: &[u8]) -> Result<(Offset, ProducerStateManager), String> {
        if bytes.len() < SNAPSHOT_HEADER_BYTES {
            return Err(format!("{} bytes, shorter than a header", bytes.len()));
        }
        let mut r = Reader::new(bytes);
        let version = get(&mut r, Reader::u16)?;
        if version != SNAPSHOT_VERSION {
            return Err(format!("unknown version {version}"));
        }
        let stored = get(&mut r, Reader::u32)?;
        let crc = crc32c::crc32c(&bytes[6..]);
        if crc != stored {
            return Err(format!(
                "crc mismatch: stored {stored:#010x}, computed {crc:#010x}"
            ));
        }
        let offset = get(&mut r, Reader::i64)?;
        if offset < 0 {
            return Err(format!("negative offset {offset}"));
        }
        let count = get(&mut r, Reader::u32)? as usize;
        // Bound the count by the bytes left before trusting it.
        if count > r.remaining() / PRODUCER_BYTES {
            return Err(format!("{count} producers do not fit in the file"));
        }
        let mut producers = BTreeMap::new();
        let mut ongoing = BTreeMap::new();
        let mut previous = None;
        for _ in 0..count {
            let id = get(&mut r, Reader::i64)?;
            if id < 0 || previous.is_some_and(|p| p >= id) {
                return Err(format!("producer id {id} negative or out of order"));
            }
            previous = Some(id);
            let mut e = ProducerEntry::empty();
            e.producer_epoch = get(&mut r, Reader::i16)?;
            e.coordinator_epoch = get(&mut r, Reader::i32)?;
            let txn = get(&mut r, Reader::i64)?;
            if txn < -1 || txn >= offset {
                return Err(format!("producer {id}: transaction start {txn}"));
            }
            e.current_txn_first_offset = (txn >= 0).then_some(txn);
            if txn >= 0 && ongoing.insert(txn, id).is_some() {
                return Err(format!(
                    "producer {id}: transaction start {txn} taken twice"
                ));
            }
            e.last_timestamp_ms = get(&mut r, Reader::i64)?;
            let n = get(&mut r, Reader::u8)?;
            if n as usize > BATCHES_RETAINED {
                return Err(format!("producer {id} holds {n} batches"));
            }
            for i in 0..n as usize {
                let mut b = BatchMetadata {
                    first_seq: get(&mut r, Reader::i32)?,
                    last_seq: get(&mut r, Reader::i32)?,
                    first_offset: get(&mut r, Reader::i64)?,
                    last_offset: get(&mut r, Reader::i64)?,
                    max_timestamp_ms: get(&mut r, Reader::i64)?,
                    log_append_time: false,
                };
                let flags = get(&mut r, Reader::u8)?;
                b.log_append_time = flags == FLAG_LOG_APPEND_TIME;
                if flags & !FLAG_LOG_APPEND_TIME != 0
                    || b.first_seq < 0
                    || b.last_seq < 0
                    || b.first_offset < 0
                    || b.last_offset < b.first_offset
                    || b.last_offset >= offset
                {
                    return Err(format!("producer {id}: inconsistent batch {b:?}"));
                }
                e.batches[i] = b;
            }
            e.batch_count = n;
            producers.insert(id, e);
        }
        if r.remaining() != 0 {
            return Err(format!("{} bytes after the last producer", r.remaining()));
        }
        Ok((Offset(offset), ProducerStateManager { producers, ongoing }))
    }
}

/// Kafka `checkProducerEpoch`: an epoch older than the producer's is a zombie's.
fn check_epoch(h: &BatchHeader, entry: &ProducerEntry) -> Result<(), StorageError> {
    if h.producer_epoch < entry.producer_epoch {
        return Err(StorageError::InvalidProducerEpoch(format!(
            "epoch of producer {} is {}, which is smaller than the last seen epoch {}",
            h.producer_id, h.producer_epoch, entry.producer_epoch
        )));
    }
    Ok(())
}

/// One read off `r` ([`Reader`], the one reader of Kafka's encodings); a short read says
/// where.
fn get<'a, T>(
    r: &mut Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>) -> Option<T>,
) -> Result<T, String> {
    let at = r.position();
    read(r).ok_or_else(|| format!("truncated at byte {at}"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::batch::{CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT};

    /// A partition's producer state fed headers as `Log::append` feeds it: check, then record
    /// with the next offsets.
    struct Partition {
        state: ProducerStateManager,
        log_end_offset: i64,
    }

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, attributes: i16) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            size: 100,
            leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: count - 1,
            base_timestamp: 1_000,
            max_timestamp: 1_000,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    impl Partition {
        fn new() -> Partition {
            Partition {
                state: ProducerStateManager::new(),
                log_end_offset: 0,
            }
        }

        fn send_header(&mut self, mut h: BatchHeader) -> Result<Check, StorageError> {
            let check = self.state.check(&h)?;
            if check == Check::Append {
                h.base_offset = self.log_end_offset;
                self.state.record(&h);
                self.log_end_offset += i64::from(h.last_offset_delta) + 1;
            }
            Ok(check)
        }

        fn send(
            &mut self,
            pid: i64,
            epoch: i16,
            seq: i32,
            count: i32,
        ) -> Result<Check, StorageError> {
            self.send_header(header(pid, epoch, seq, count, 0))
        }

        fn control(&mut self, pid: i64, epoch: i16) -> Result<Check, StorageError> {
            self.send_header(header(pid, epoch, NO_SEQUENCE, 1, CONTROL_BIT))
        }
    }

    impl Partition {
        /// A marker of producer `pid`, checked and recorded as `Log::append` does.
        fn marker(
            &mut self,
            pid: i64,
            epoch: i16,
            kind: MarkerType,
            coordinator_epoch: i32,
        ) -> Result<Option<CompletedTxn>, StorageError> {
            let mut h = header(pid, epoch, NO_SEQUENCE, 1, CONTROL_BIT | TRANSACTIONAL_BIT);
            let m = EndTxnMarker {
                kind,
                coordinator_epoch,
            };
            self.state.check(&h)?;
            self.state.check_marker(&h, &m)?;
            h.base_offset = self.log_end_offset;
            self.log_end_offset += 1;
            Ok(self.state.record_marker(&h, Some(&m)))
        }
    }

    fn assert_out_of_order(r: Result<Check, StorageError>) {
        assert!(
            matches!(r, Err(StorageError::OutOfOrderSequence(_))),
            "expected OUT_OF_ORDER_SEQUENCE_NUMBER, got {r:?}"
        );
    }

    fn assert_fenced(r: Result<Check, StorageError>) {
        assert!(
            matches!(r, Err(StorageError::InvalidProducerEpoch(_))),
            "expected INVALID_PRODUCER_EPOCH, got {r:?}"
        );
    }

    #[test]
    fn in_order_batches_are_appended_and_remembered() {
        let mut p = Partition::new();
        assert_eq!(p.send(1, 0, 0, 3).unwrap(), Check::Append);
        assert_eq!(p.send(1, 0, 3, 2).unwrap(), Check::Append);
        assert_eq!(p.send(2, 0, 0, 1).unwrap(), Check::Append);
        assert_eq!(p.send(1, 0, 5, 1).unwrap(), Check::Append);
        let e = p.state.get(1).unwrap();
        assert_eq!(e.producer_epoch, 0);
        assert_eq!(e.last_seq(), 5);
        let offsets: Vec<(i64, i64)> = e
            .batches()
            .iter()
            .map(|b| (b.first_offset, b.last_offset))
            .collect();
        assert_eq!(offsets, vec![(0, 2), (3, 4), (6, 6)]);
        assert_eq!(p.state.get(2).unwrap().last_seq(), 0);
    }

    #[test]
    fn each_of_the_last_five_is_a_duplicate_with_its_original_offsets() {
        let mut p = Partition::new();
        // Seven batches of 2: sequences 0,2,..,12 at offsets 0,2,..,12.
        for i in 0..7 {
            assert_eq!(p.send(7, 3, i * 2, 2).unwrap(), Check::Append);
        }
        let end = p.log_end_offset;
        for i in 2..7 {
            match p.send(7, 3, i * 2, 2).unwrap() {
                Check::Duplicate(b) => {
                    assert_eq!((b.first_seq, b.last_seq), (i * 2, i * 2 + 1));
                    assert_eq!(
                        (b.first_offset, b.last_offset),
                        (i64::from(i) * 2, i64::from(i) * 2 + 1)
                    );
                }
                other => panic!("batch {i}: expected a duplicate, got {other:?}"),
            }
        }
        assert_eq!(p.log_end_offset, end, "duplicates are not appended");
        // Older than the last five: no longer known, and not in sequence.
        assert_out_of_order(p.send(7, 3, 2, 2));
        assert_out_of_order(p.send(7, 3, 0, 2));
        // Same first sequence, different length: not a duplicate.
        assert_out_of_order(p.send(7, 3, 12, 1));
        assert_eq!(p.send(7, 3, 14, 1).unwrap(), Check::Append);
    }

    #[test]
    fn a_gap_or_a_step_back_is_out_of_order() {
        let mut p = Partition::new();
        p.send(1, 0, 0, 2).unwrap();
        assert_out_of_order(p.send(1, 0, 3, 1));
        assert_out_of_order(p.send(1, 0, 1, 1));
        assert_eq!(p.send(1, 0, 2, 1).unwrap(), Check::Append);
    }

    #[test]
    fn an_older_epoch_is_fenced() {
        let mut p = Partition::new();
        p.send(1, 3, 0, 2).unwrap();
        assert_fenced(p.send(1, 2, 0, 2));
        assert_fenced(p.send(1, 2, 2, 1));
        assert_eq!(p.state.get(1).unwrap().producer_epoch, 3);
    }

    #[test]
    fn a_new_epoch_starts_at_sequence_zero() {
        let mut p = Partition::new();
        p.send(1, 0, 0, 2).unwrap();
        p.send(1, 0, 2, 2).unwrap();
        assert_out_of_order(p.send(1, 1, 5, 1));
        assert_out_of_order(p.send(1, 1, 4, 1));
        assert_eq!(p.send(1, 1, 0, 1).unwrap(), Check::Append);
        let e = p.state.get(1).unwrap();
        assert_eq!((e.producer_epoch, e.batches().len()), (1, 1));
        // A retry from the old epoch is fenced, not a duplicate.
        assert_fenced(p.send(1, 0, 2, 2));
        assert_eq!(p.send(1, 1, 1, 1).unwrap(), Check::Append);
    }

    #[test]
    fn an_unknown_producer_is_accepted_at_any_sequence() {
        let mut p = Partition::new();
        assert_eq!(p.send(9, 4, 1234, 3).unwrap(), Check::Append);
        assert_out_of_order(p.send(9, 4, 1238, 1));
        assert_eq!(p.send(9, 4, 1237, 1).unwrap(), Check::Append);
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        assert_eq!(header(1, 0, i32::MAX - 1, 4, 0).last_sequence(), 1);
        assert_eq!(header(1, 0, i32::MAX, 1, 0).last_sequence(), i32::MAX);
        assert_eq!(header(1, 0, i32::MAX, 2, 0).last_sequence(), 0);
        let mut p = Partition::new();
        p.send(1, 0, i32::MAX - 2, 3).unwrap();
        assert_eq!(p.state.get(1).unwrap().last_seq(), i32::MAX);
        assert_eq!(p.send(1, 0, 0, 2).unwrap(), Check::Append);
        // A batch across the wrap, and its retry.
        let mut q = Partition::new();
        q.send(2, 0, i32::MAX - 5, 4).unwrap();
        assert_eq!(q.send(2, 0, i32::MAX - 1, 4).unwrap(), Check::Append);
        assert_eq!(q.state.get(2).unwrap().last_seq(), 1);
        match q.send(2, 0, i32::MAX - 1, 4).unwrap() {
            Check::Duplicate(b) => {
                assert_eq!((b.first_seq, b.last_seq), (i32::MAX - 1, 1));
                assert_eq!((b.first_offset, b.last_offset), (4, 7));
            }
            other => panic!("expected a duplicate across the wrap, got {other:?}"),
        }
        assert_out_of_order(q.send(2, 0, 3, 1));
        assert_eq!(q.send(2, 0, 2, 1).unwrap(), Check::Append);
    }

    #[test]
    fn a_data_batch_with_a_producer_id_needs_a_sequence() {
        let mut p = Partition::new();
        let r = p.send(1, 0, NO_SEQUENCE, 1);
        assert!(matches!(r, Err(StorageError::InvalidRecord(_))), "{r:?}");
    }

    #[test]
    fn control_batches_are_fenced_by_epoch_and_take_it() {
        let mut p = Partition::new();
        p.send(1, 0, 0, 2).unwrap();
        assert_eq!(p.control(1, 1).unwrap(), Check::Append);
        let e = p.state.get(1).unwrap();
        assert_eq!((e.producer_epoch, e.last_seq()), (1, NO_SEQUENCE));
        // The epoch is new to data batches too: the next starts at 0.
        assert_out_of_order(p.send(1, 1, 2, 1));
        assert_eq!(p.send(1, 1, 0, 1).unwrap(), Check::Append);
        assert_fenced(p.control(1, 0));
        // An empty control batch (what compaction leaves of a transaction) changes nothing.
        let before = *p.state.get(1).unwrap();
        let mut empty = header(1, 5, NO_SEQUENCE, 1, CONTROL_BIT);
        empty.records_count = 0;
        p.send_header(empty).unwrap();
        assert_eq!(*p.state.get(1).unwrap(), before);
    }

    #[test]
    fn transactional_batches_open_a_transaction_and_markers_end_it() {
        let mut p = Partition::new();
        p.send(1, 0, 0, 1).unwrap();
        p.send_header(header(1, 0, 1, 2, TRANSACTIONAL_BIT))
            .unwrap();
        p.send_header(header(1, 0, 3, 1, TRANSACTIONAL_BIT))
            .unwrap();
        assert_eq!(p.state.get(1).unwrap().current_txn_first_offset, Some(1));
        // An open transaction keeps the producer, however old.
        assert_eq!(p.state.expire(i64::MAX, 1), 0);
        p.send_header(header(
            1,
            0,
            NO_SEQUENCE,
            1,
            CONTROL_BIT | TRANSACTIONAL_BIT,
        ))
        .unwrap();
        let info = &p.state.producers()[0];
        assert_eq!(info.current_txn_start_offset, -1);
        assert_eq!(info.last_sequence, 3);
        assert_eq!(p.state.expire(i64::MAX, 1), 1);
    }

    #[test]
    fn markers_complete_transactions_and_are_fenced_by_coordinator_epoch() {
        let mut p = Partition::new();
        p.send_header(header(1, 0, 0, 2, TRANSACTIONAL_BIT))
            .unwrap(); // 0..=1
        p.send_header(header(2, 0, 0, 1, TRANSACTIONAL_BIT))
            .unwrap(); // 2
        assert_eq!(p.state.first_ongoing_offset(), Some(0));
        let done = p.marker(1, 0, MarkerType::Abort, 3).unwrap(); // 3
        assert_eq!(
            done,
            Some(CompletedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 3,
                aborted: true,
            })
        );
        assert_eq!(p.state.first_ongoing_offset(), Some(2));
        assert_eq!(p.state.get(1).unwrap().coordinator_epoch, 3);
        // An older coordinator is fenced; the same or a newer one is not.
        let r = p.marker(1, 0, MarkerType::Commit, 2);
        assert!(
            matches!(r, Err(StorageError::TransactionCoordinatorFenced(_))),
            "{r:?}"
        );
        // No transaction open: nothing completes.
        assert_eq!(p.marker(1, 0, MarkerType::Commit, 3).unwrap(), None);
        let done = p.marker(2, 0, MarkerType::Commit, 0).unwrap().unwrap();
        assert!(!done.aborted);
        assert_eq!(p.state.first_ongoing_offset(), None);
    }

    #[test]
    fn a_non_transactional_batch_inside_an_open_transaction_is_refused() {
        let mut p = Partition::new();
        p.send_header(header(1, 0, 0, 1, TRANSACTIONAL_BIT))
            .unwrap();
        let r = p.send(1, 0, 1, 1);
        assert!(matches!(r, Err(StorageError::InvalidTxnState(_))), "{r:?}");
        // A retry of the transactional batch is still a duplicate; the next one goes in.
        assert!(matches!(
            p.send_header(header(1, 0, 0, 1, TRANSACTIONAL_BIT)),
            Ok(Check::Duplicate(_))
        ));
        p.send_header(header(1, 0, 1, 1, TRANSACTIONAL_BIT))
            .unwrap();
        p.marker(1, 0, MarkerType::Commit, 0).unwrap();
        assert_eq!(p.send(1, 0, 2, 1).unwrap(), Check::Append);
        // Other producers are not concerned.
        p.send_header(header(2, 0, 0, 1, TRANSACTIONAL_BIT))
            .unwrap();
        assert_eq!(p.send(3, 0, 0, 1).unwrap(), Check::Append);
    }

    #[test]
    fn producers_expire_by_their_last_timestamp() {
        let mut p = Partition::new();
        let mut h = header(1, 0, 0, 1, 0);
        h.max_timestamp = 1_000;
        p.send_header(h).unwrap();
        let mut h = header(2, 0, 0, 1, 0);
        h.max_timestamp = 5_000;
        p.send_header(h).unwrap();
        assert_eq!(p.state.expire(10_999, 10_000), 0);
        assert_eq!(p.state.expire(11_000, 10_000), 1, "at the limit it expires");
        let left = p.state.producers();
        assert_eq!(left.len(), 1);
        assert_eq!(
            left[0],
            ProducerInfo {
                producer_id: 2,
                producer_epoch: 0,
                last_sequence: 0,
                last_timestamp_ms: 5_000,
                coordinator_epoch: -1,
                current_txn_start_offset: -1,
            }
        );
        // Forgotten: its next batch goes at any sequence.
        assert_eq!(p.send(1, 0, 77, 1).unwrap(), Check::Append);
    }

    fn varied_state() -> (ProducerStateManager, Offset) {
        let mut p = Partition::new();
        for i in 0..7 {
            p.send(3, 1, i, 1).unwrap();
        }
        let mut h = header(5, 0, 10, 2, TIMESTAMP_TYPE_BIT);
        h.max_timestamp = 123_456;
        p.send_header(h).unwrap();
        p.send_header(header(8, 2, 0, 3, TRANSACTIONAL_BIT))
            .unwrap();
        p.control(11, 4).unwrap();
        (p.state, Offset(p.log_end_offset))
    }

    #[test]
    fn snapshots_round_trip() {
        let (state, end) = varied_state();
        let bytes = state.encode_snapshot(end);
        let (offset, decoded) = ProducerStateManager::decode_snapshot(&bytes).unwrap();
        assert_eq!(offset, end);
        assert_eq!(decoded, state);
        assert_eq!(decoded.get(3).unwrap().batches().len(), BATCHES_RETAINED);
        assert!(decoded.get(5).unwrap().batches()[0].log_append_time);
        assert_eq!(decoded.get(8).unwrap().current_txn_first_offset, Some(9));
        let empty = ProducerStateManager::new().encode_snapshot(Offset(0));
        assert_eq!(
            ProducerStateManager::decode_snapshot(&empty).unwrap(),
            (Offset(0), ProducerStateManager::new())
        );
    }

    #[test]
    fn damaged_snapshots_are_refused() {
        let (state, end) = varied_state();
        let bytes = state.encode_snapshot(end);
        for i in 0..bytes.len() {
            for bit in [0x01, 0x80] {
                let mut bad = bytes.clone();
                bad[i] ^= bit;
                assert!(
                    ProducerStateManager::decode_snapshot(&bad).is_err(),
                    "bit {bit:#x} of byte {i} flipped"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(ProducerStateManager::decode_snapshot(&bytes[..len]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(ProducerStateManager::decode_snapshot(&longer).is_err());
    }

    /// `body` (what follows the CRC) framed as a version-1 snapshot with a valid CRC.
    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = SNAPSHOT_VERSION.to_be_bytes().to_vec();
        out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    proptest! {
        #[test]
        fn garbage_snapshots_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = ProducerStateManager::decode_snapshot(&bytes);
            let _ = ProducerStateManager::decode_snapshot(&framed(&bytes));
        }

        #[test]
        fn damaged_fields_under_a_valid_crc_never_panic(
            at in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            let (state, end) = varied_state();
            let bytes = state.encode_snapshot(end);
            let mut body = bytes[6..].to_vec();
            let i = at.index(body.len());
            body[i] = value;
            if let Ok((offset, decoded)) = ProducerStateManager::decode_snapshot(&framed(&body)) {
                // Whatever decodes re-encodes to the same bytes.
                prop_assert_eq!(decoded.encode_snapshot(offset), framed(&body));
            }
        }
    }
}
