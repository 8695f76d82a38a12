//! Writing magic-2 record batches: [`put_record`] appends one `DefaultRecord`, [`frame_batch`]
//! puts the 61-byte header (CRC32C included) before a records section, and [`BatchBuilder`]
//! fills a batch record by record for a producer (the CLI, keel-bench, tests) and compresses
//! it. A batch leaves here with base offset 0: the broker assigns offsets on append.

use bytes::{BufMut, Bytes, BytesMut};

use super::compression::{compress, Codec};
use super::header::{
    compute_crc, CONTROL_BIT, CRC_AT, HEADER_BYTES, LOG_OVERHEAD, MAGIC_V2, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID, NO_SEQUENCE, TRANSACTIONAL_BIT,
};
use crate::wire::put_varlong;

/// The header fields of a batch, as [`frame_batch`] writes them (length and CRC are computed).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchFields {
    pub base_offset: i64,
    pub leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

/// The whole batch: header, then `section` (the records, compressed as `attributes` say).
pub fn frame_batch(fields: &BatchFields, section: &[u8]) -> BytesMut {
    let mut b = BytesMut::with_capacity(HEADER_BYTES + section.len());
    b.put_i64(fields.base_offset);
    b.put_i32((HEADER_BYTES - LOG_OVERHEAD + section.len()) as i32);
    b.put_i32(fields.leader_epoch);
    b.put_i8(MAGIC_V2);
    b.put_u32(0); // crc, below
    b.put_i16(fields.attributes);
    b.put_i32(fields.last_offset_delta);
    b.put_i64(fields.base_timestamp);
    b.put_i64(fields.max_timestamp);
    b.put_i64(fields.producer_id);
    b.put_i16(fields.producer_epoch);
    b.put_i32(fields.base_sequence);
    b.put_i32(fields.records_count);
    b.put_slice(section);
    let crc = compute_crc(&b);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

fn varlong_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn nullable_len(b: Option<&[u8]>) -> usize {
    match b {
        Some(b) => varlong_len(b.len() as i64) + b.len(),
        None => varlong_len(-1),
    }
}

fn put_nullable(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_varlong(out, b.len() as i64);
            out.put_slice(b);
        }
        None => put_varlong(out, -1),
    }
}

/// Appends one `DefaultRecord` (attributes 0) to a records section.
pub fn put_record(
    out: &mut BytesMut,
    timestamp_delta: i64,
    offset_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&[u8], Option<&[u8]>)],
) {
    let headers_len: usize = headers
        .iter()
        .map(|(k, v)| nullable_len(Some(k)) + nullable_len(*v))
        .sum();
    let body_len = 1
        + varlong_len(timestamp_delta)
        + varlong_len(offset_delta)
        + nullable_len(key)
        + nullable_len(value)
        + varlong_len(headers.len() as i64)
        + headers_len;
    put_varlong(out, body_len as i64);
    out.put_u8(0);
    put_varlong(out, timestamp_delta);
    put_varlong(out, offset_delta);
    put_nullable(out, key);
    put_nullable(out, value);
    put_varlong(out, headers.len() as i64);
    for (k, v) in headers {
        put_nullable(out, Some(k));
        put_nullable(out, *v);
    }
}

/// What an idempotent or transactional producer writes into a batch's header: its producer
/// id and epoch, the partition's base sequence of the batch's first record, and whether the
/// batch is part of a transaction. A plain producer writes none (-1, -1, -1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProducerStamp {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
}

/// A batch being filled for one partition. Records are encoded as they are pushed into a
/// reusable buffer; `finish` compresses and frames them.
pub struct BatchBuilder {
    records: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    leader_epoch: i32,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    pub fn new() -> Self {
        BatchBuilder {
            records: BytesMut::with_capacity(16 * 1024),
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
            leader_epoch: -1,
        }
    }

    /// The partitionLeaderEpoch written into the header (-1, none, unless set); the broker
    /// overwrites it on append.
    pub fn with_leader_epoch(mut self, leader_epoch: i32) -> Self {
        self.leader_epoch = leader_epoch;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Uncompressed bytes of the records so far.
    pub fn size(&self) -> usize {
        self.records.len()
    }

    /// Appends a record with a value and no headers.
    pub fn push(&mut self, timestamp_ms: i64, key: Option<&[u8]>, value: &[u8]) {
        self.push_record(timestamp_ms, key, Some(value), &[]);
    }

    /// Appends a record; its offset delta is its position in the batch.
    pub fn push_record(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp_ms;
            self.max_timestamp = timestamp_ms;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let timestamp_delta = timestamp_ms - self.base_timestamp;
        put_record(
            &mut self.records,
            timestamp_delta,
            i64::from(self.count),
            key,
            value,
            headers,
        );
        self.count += 1;
    }

    /// Compresses and frames the batch; the builder is empty afterwards.
    pub fn finish(&mut self, codec: Codec) -> std::io::Result<Bytes> {
        self.finish_stamped(codec, None)
    }

    /// As [`BatchBuilder::finish`], with an idempotent or transactional producer's stamp.
    pub fn finish_stamped(
        &mut self,
        codec: Codec,
        stamp: Option<ProducerStamp>,
    ) -> std::io::Result<Bytes> {
        self.finish_with(codec, stamp, false)
    }

    /// As [`BatchBuilder::finish_stamped`]; `control` marks a control batch (a transaction
    /// marker, as a coordinator writes it).
    pub fn finish_with(
        &mut self,
        codec: Codec,
        stamp: Option<ProducerStamp>,
        control: bool,
    ) -> std::io::Result<Bytes> {
        let (producer_id, producer_epoch, base_sequence, transactional) = match stamp {
            Some(s) => (s.producer_id, s.epoch, s.base_sequence, s.transactional),
            None => (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, false),
        };
        let mut attributes = codec as i16;
        if transactional {
            attributes |= TRANSACTIONAL_BIT;
        }
        if control {
            attributes |= CONTROL_BIT;
        }
        let section = compress(codec, &self.records)?;
        let fields = BatchFields {
            base_offset: 0,
            leader_epoch: self.leader_epoch,
            attributes,
            last_offset_delta: self.count - 1,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count: self.count,
        };
        let batch = frame_batch(&fields, &section);
        self.records.clear();
        self.count = 0;
        Ok(batch.freeze())
    }
}

/// Kafka's `EndTransactionMarker` as a coordinator writes it: an uncompressed transactional
/// control batch of one record, key = version 0 + type (0 abort, 1 commit), value = version 0
/// + `coordinator_epoch`, at `timestamp_ms`, with leader epoch `leader_epoch`.
pub fn end_txn_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    timestamp_ms: i64,
    leader_epoch: i32,
) -> Bytes {
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let mut section = BytesMut::new();
    put_record(
        &mut section,
        0,
        0,
        Some(&[0, 0, 0, u8::from(commit)]),
        Some(&value),
        &[],
    );
    let fields = BatchFields {
        base_offset: 0,
        leader_epoch,
        attributes: CONTROL_BIT | TRANSACTIONAL_BIT,
        last_offset_delta: 0,
        base_timestamp: timestamp_ms,
        max_timestamp: timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence: NO_SEQUENCE,
        records_count: 1,
    };
    frame_batch(&fields, &section).freeze()
}
