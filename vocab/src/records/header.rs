//! The fixed 61-byte header of a magic-2 record batch: where each field sits, reading it from
//! untrusted bytes, and the CRC32C that covers everything from `attributes` to the end.
//! Records are never walked here. A header is only built from at least [`HEADER_BYTES`] bytes
//! whose length field is at least [`MIN_BATCH_LENGTH`]; the batch itself may still run past
//! the buffer, which every caller checks against [`BatchHeader::size`].

pub const BASE_OFFSET_AT: usize = 0;
pub const BATCH_LENGTH_AT: usize = 8;
pub const LEADER_EPOCH_AT: usize = 12;
pub const MAGIC_AT: usize = 16;
pub const CRC_AT: usize = 17;
pub const ATTRIBUTES_AT: usize = 21;
pub const LAST_OFFSET_DELTA_AT: usize = 23;
pub const BASE_TIMESTAMP_AT: usize = 27;
pub const MAX_TIMESTAMP_AT: usize = 35;
pub const PRODUCER_ID_AT: usize = 43;
pub const PRODUCER_EPOCH_AT: usize = 51;
pub const BASE_SEQUENCE_AT: usize = 53;
pub const RECORDS_COUNT_AT: usize = 57;
/// Bytes before the records: the whole fixed header.
pub const HEADER_BYTES: usize = 61;
/// baseOffset + batchLength: what `batchLength` does not count.
pub const LOG_OVERHEAD: usize = 12;
/// Smallest legal batchLength: the header after the length field.
pub const MIN_BATCH_LENGTH: i32 = (HEADER_BYTES - LOG_OVERHEAD) as i32;
pub const MAGIC_V2: i8 = 2;
pub const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
pub const COMPRESSION_MASK: i16 = 0x07;
/// Attributes bit 4: the batch belongs to a transaction.
pub const TRANSACTIONAL_BIT: i16 = 1 << 4;
/// Attributes bit 5: a control batch (transaction marker), written by a coordinator.
pub const CONTROL_BIT: i16 = 1 << 5;
/// Kafka `RecordBatch.NO_PRODUCER_ID`: a batch of a producer that is not idempotent.
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Kafka `RecordBatch.NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;

/// Kafka's codec numbers (the low three bits of a batch's `attributes`).
pub const CODEC_NONE: u8 = 0;
pub const CODEC_GZIP: u8 = 1;
pub const CODEC_SNAPPY: u8 = 2;
pub const CODEC_LZ4: u8 = 3;
pub const CODEC_ZSTD: u8 = 4;

pub fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
pub fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
pub fn be_u32(b: &[u8], at: usize) -> u32 {
    be_i32(b, at) as u32
}
pub fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

/// The fixed header fields. Only built from at least `HEADER_BYTES` bytes whose length field
/// has been checked (`batch_len >= MIN_BATCH_LENGTH`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Whole batch size in bytes: `LOG_OVERHEAD + batchLength`.
    pub size: usize,
    pub leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// `NO_PRODUCER_ID` (-1), or any negative value, unless the producer is idempotent.
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Sequence number of the first record; `NO_SEQUENCE` without a producer id.
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header at the start of `b`. `None` if `b` is shorter than a header or the
    /// length field is below the minimum (such bytes can never start a valid batch).
    pub fn parse(b: &[u8]) -> Option<BatchHeader> {
        if b.len() < HEADER_BYTES {
            return None;
        }
        let batch_length = be_i32(b, BATCH_LENGTH_AT);
        if batch_length < MIN_BATCH_LENGTH {
            return None;
        }
        Some(BatchHeader {
            base_offset: be_i64(b, BASE_OFFSET_AT),
            size: LOG_OVERHEAD + batch_length as usize,
            leader_epoch: be_i32(b, LEADER_EPOCH_AT),
            magic: b[MAGIC_AT] as i8,
            crc: be_u32(b, CRC_AT),
            attributes: be_i16(b, ATTRIBUTES_AT),
            last_offset_delta: be_i32(b, LAST_OFFSET_DELTA_AT),
            base_timestamp: be_i64(b, BASE_TIMESTAMP_AT),
            max_timestamp: be_i64(b, MAX_TIMESTAMP_AT),
            producer_id: be_i64(b, PRODUCER_ID_AT),
            producer_epoch: be_i16(b, PRODUCER_EPOCH_AT),
            base_sequence: be_i32(b, BASE_SEQUENCE_AT),
            records_count: be_i32(b, RECORDS_COUNT_AT),
        })
    }

    /// Offset of the last record (inclusive).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(self.last_offset_delta as i64)
    }

    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Kafka `RecordBatch.hasProducerId`: the batch comes from an idempotent (or
    /// transactional) producer, and its sequence numbers are checked.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }

    /// Sequence number of the last record (Kafka `DefaultRecordBatch.lastSequence`):
    /// `NO_SEQUENCE` when the batch has none, else the base sequence plus lastOffsetDelta,
    /// wrapping past `i32::MAX` to 0.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// Kafka `DefaultRecordBatch.incrementSequence`: sequences run from 0 to `i32::MAX` and then
/// start again at 0. `sequence` and `increment` are non-negative.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// CRC32C of a whole batch as stored in its header (attributes to the end). `batch` is at
/// least [`HEADER_BYTES`] long.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_AT..])
}
