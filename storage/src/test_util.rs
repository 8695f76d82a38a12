//! Test helpers: a glommio executor per test (memlock raised, small io_memory) and a builder
//! of valid magic-2 record batches, uncompressed or compressed with any Kafka codec.

use std::future::Future;

use bytes::BytesMut;
use keel_vocab::records::{end_txn_marker_batch, frame_batch, put_record, BatchFields, Codec};

use crate::batch::{compute_crc, CRC_AT};

/// Runs `f` on a fresh glommio executor (tests run as root: raise RLIMIT_MEMLOCK first), then
/// closes the files it left in the shard's file cache.
pub fn run<T, F: Future<Output = T>>(f: impl FnOnce() -> F) -> T {
    let limit = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall on a stack value; failure only means the default limit stays.
    unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit);
    }
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor")
        .run(async move {
            let out = f().await;
            crate::file_cache::close_all_now().await;
            out
        })
}

/// A record to write: timestamp delta, key, value.
type TestRecord<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>);

/// One uncompressed records section of `records`, offset deltas 0, 1, ... in order.
fn records_section(records: &[TestRecord<'_>]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for (i, (ts_delta, key, value)) in records.iter().enumerate() {
        put_record(&mut out, *ts_delta, i as i64, *key, *value, &[]);
    }
    out.to_vec()
}

/// A plain producer's batch (base offset 0, leader epoch -1, no producer id) around
/// `section`, compressed as `codec` says.
fn plain_batch(section: &[u8], codec: u8, count: usize, base_ts: i64, max_ts: i64) -> BytesMut {
    let fields = BatchFields {
        base_offset: 0,
        leader_epoch: -1,
        attributes: (codec & 0x07) as i16,
        last_offset_delta: count as i32 - 1,
        base_timestamp: base_ts,
        max_timestamp: max_ts,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: count as i32,
    };
    frame_batch(&fields, &compress(codec, section))
}

pub const GZIP: u8 = 1;
pub const SNAPPY: u8 = 2;
pub const LZ4: u8 = 3;
pub const ZSTD: u8 = 4;
/// Not a Kafka code: snappy with the xerial framing Java clients use (attribute code 2).
pub const SNAPPY_XERIAL: u8 = 0x12;

/// Encodes records `(timestamp_ms, value)` as Kafka's record format (key null, no headers).
pub fn encode_records(base_ts: i64, records: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let records: Vec<TestRecord<'_>> = records
        .iter()
        .map(|(ts, value)| (ts - base_ts, None, Some(value.as_slice())))
        .collect();
    records_section(&records)
}

/// `raw` compressed as a producer writes it (keel-vocab's codec), or for [`SNAPPY`] raw (as
/// the broker's recompression writes it) and for [`SNAPPY_XERIAL`] in xerial blocks of 100
/// bytes (many blocks from a small batch).
fn compress(codec: u8, raw: &[u8]) -> Vec<u8> {
    let producer = |codec| keel_vocab::records::compress(codec, raw).unwrap();
    match codec {
        0 => raw.to_vec(),
        GZIP => producer(Codec::Gzip),
        SNAPPY => snap::raw::Encoder::new().compress_vec(raw).unwrap(),
        SNAPPY_XERIAL => {
            let mut out = b"\x82SNAPPY\0".to_vec();
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            for block in raw.chunks(100) {
                let c = snap::raw::Encoder::new().compress_vec(block).unwrap();
                out.extend_from_slice(&(c.len() as u32).to_be_bytes());
                out.extend_from_slice(&c);
            }
            out
        }
        LZ4 => producer(Codec::Lz4),
        ZSTD => producer(Codec::Zstd),
        other => panic!("unknown codec {other}"),
    }
}

/// A valid magic-2 batch (baseOffset 0, epoch -1) of `records` `(timestamp_ms, value)`,
/// compressed with `codec` (0 = none).
pub fn batch_with(records: &[(i64, Vec<u8>)], codec: u8) -> BytesMut {
    assert!(!records.is_empty());
    let base_ts = records[0].0;
    let max_ts = records.iter().map(|r| r.0).max().unwrap();
    plain_batch(
        &encode_records(base_ts, records),
        codec,
        records.len(),
        base_ts,
        max_ts,
    )
}

/// An uncompressed batch of `count` records with timestamps `ts, ts+1, ...` and values of
/// `value_bytes` bytes.
pub fn batch(count: usize, ts: i64, value_bytes: usize) -> BytesMut {
    let records: Vec<(i64, Vec<u8>)> = (0..count)
        .map(|i| (ts + i as i64, vec![b'a' + (i % 26) as u8; value_bytes]))
        .collect();
    batch_with(&records, 0)
}

/// Headers of every batch in `bytes`: (base offset, last offset, size).
pub fn batches_in(bytes: &[u8]) -> Vec<(i64, i64, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let h = crate::batch::BatchHeader::parse(&bytes[pos..]).expect("batch header");
        assert!(pos + h.size <= bytes.len(), "partial batch in read result");
        out.push((h.base_offset, h.last_offset(), h.size));
        pos += h.size;
    }
    out
}

/// A valid magic-2 batch of keyed records `(key, value)` (value `None` = tombstone), all with
/// timestamp `ts`, compressed with `codec`.
pub fn keyed_batch(records: &[(Option<&str>, Option<&str>)], ts: i64, codec: u8) -> BytesMut {
    assert!(!records.is_empty());
    let records: Vec<TestRecord<'_>> = records
        .iter()
        .map(|(k, v)| (0, k.map(str::as_bytes), v.map(str::as_bytes)))
        .collect();
    plain_batch(&records_section(&records), codec, records.len(), ts, ts)
}

/// `b` (a batch from [`batch`] or [`batch_with`]) as an idempotent producer's: producer id,
/// epoch and base sequence set, `attributes` bits added (transactional, control), CRC
/// recomputed.
pub fn with_producer(
    mut b: BytesMut,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    attributes: i16,
) -> BytesMut {
    use crate::batch::{ATTRIBUTES_AT, BASE_SEQUENCE_AT, PRODUCER_EPOCH_AT, PRODUCER_ID_AT};
    b[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&producer_id.to_be_bytes());
    b[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&producer_epoch.to_be_bytes());
    b[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let attrs = i16::from_be_bytes([b[ATTRIBUTES_AT], b[ATTRIBUTES_AT + 1]]) | attributes;
    b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attrs.to_be_bytes());
    let crc = compute_crc(&b);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

/// An uncompressed batch of `count` records (timestamp `ts`) from producer `producer_id` at
/// `producer_epoch`, starting at sequence `base_sequence`.
pub fn producer_batch(
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    count: usize,
    ts: i64,
) -> BytesMut {
    let records: Vec<(i64, Vec<u8>)> = (0..count).map(|_| (ts, b"v".to_vec())).collect();
    with_producer(
        batch_with(&records, 0),
        producer_id,
        producer_epoch,
        base_sequence,
        0,
    )
}

/// Kafka's `EndTransactionMarker` for producer `producer_id` at `producer_epoch`: a
/// transactional control batch of one record, key = version 0 + type (0 abort, 1 commit),
/// value = version 0 + `coordinator_epoch`, timestamp `ts`.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    ts: i64,
) -> BytesMut {
    BytesMut::from(
        &end_txn_marker_batch(
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            ts,
            -1,
        )[..],
    )
}

/// An uncompressed transactional batch of `count` records (timestamp `ts`) from producer
/// `producer_id` at `producer_epoch`, starting at sequence `base_sequence`.
pub fn txn_batch(
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    count: usize,
    ts: i64,
) -> BytesMut {
    let records: Vec<(i64, Vec<u8>)> = (0..count).map(|_| (ts, b"t".to_vec())).collect();
    with_producer(
        batch_with(&records, 0),
        producer_id,
        producer_epoch,
        base_sequence,
        crate::batch::TRANSACTIONAL_BIT,
    )
}
