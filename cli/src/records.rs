//! Record batches for the CLI: building an uncompressed magic-2 batch for Produce, and reading
//! the batches of a Fetch answer (any codec). Fetch answers may end in a partial batch (the
//! broker cuts at the byte limit); that tail is skipped, and the next fetch starts after the
//! last whole batch. The bytes come from the network: every length is checked and
//! decompressed output is capped.

use std::io::Read;

use bytes::{Buf, Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::error::{CliError, Result};

/// Upper bound on one batch's decompressed records.
const DECOMPRESSED_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// baseOffset (8) + batchLength (4).
const LOG_OVERHEAD: usize = 12;
/// Offsets inside a batch of fields this file reads itself.
const MAGIC_AT: usize = 16;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BATCH_HEADER_BYTES: usize = 61;
const CONTROL_FLAG: i16 = 1 << 5;
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\0";

/// A record to produce.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewRecord {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// A record read back, with where it sits.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumedRecord {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// One uncompressed magic-2 batch (no producer id, create-time timestamps). Brokers take
/// exactly one batch per partition in a Produce request (v3+).
pub fn encode_batch(records: &[NewRecord], timestamp_ms: i64) -> Result<Bytes> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // kafka-protocol's encoder starts a new batch wherever `offset - sequence`
            // changes, and writes the first record's sequence as the batch's base sequence:
            // so -1 (no producer id) there, and the same step as the offsets after it.
            sequence: i as i32 - 1,
            timestamp: timestamp_ms,
            key: r.key.clone().map(Bytes::from),
            value: r.value.clone().map(Bytes::from),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        StrBytes::from_string(k.clone()),
                        Some(Bytes::from(v.clone())),
                    )
                })
                .collect::<IndexMap<_, _>>(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options)
        .map_err(|e| CliError::Protocol(format!("encoding a record batch: {e}")))?;
    Ok(buf.freeze())
}

/// What one partition's fetched bytes held.
#[derive(Debug, Default)]
pub struct FetchedRecords {
    /// Data records at or after the fetch offset, in offset order.
    pub records: Vec<ConsumedRecord>,
    /// Where the next fetch starts: one past the last whole batch (control batches included).
    pub next_offset: Option<i64>,
}

/// Reads every whole batch in `bytes`, keeping data records with offset >= `fetch_offset`.
pub fn decode_fetched(partition: i32, fetch_offset: i64, bytes: &Bytes) -> Result<FetchedRecords> {
    let mut out = FetchedRecords::default();
    let mut pos = 0usize;
    while bytes.len() - pos >= LOG_OVERHEAD {
        let at = |i: usize| pos + i;
        let batch_length = i32::from_be_bytes(bytes[at(8)..at(12)].try_into().expect("4 bytes"));
        if batch_length < 0 {
            return Err(corrupt(format!("negative batch length {batch_length}")));
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if bytes.len() - pos < total {
            break; // a partial batch at the end of the answer
        }
        if total < BATCH_HEADER_BYTES {
            return Err(corrupt(format!(
                "batch of {total} bytes is shorter than its header"
            )));
        }
        let batch = bytes.slice(pos..pos + total);
        pos += total;
        let base_offset = i64::from_be_bytes(batch[0..8].try_into().expect("8 bytes"));
        let magic = batch[MAGIC_AT] as i8;
        if magic != 2 {
            return Err(corrupt(format!(
                "record batch magic {magic} at offset {base_offset} (only magic 2 is read)"
            )));
        }
        let attributes = i16::from_be_bytes(
            batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2]
                .try_into()
                .expect("2 bytes"),
        );
        let last_offset_delta = i32::from_be_bytes(
            batch[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
                .try_into()
                .expect("4 bytes"),
        );
        out.next_offset = Some(base_offset + last_offset_delta as i64 + 1);
        if attributes & CONTROL_FLAG != 0 {
            continue; // transaction markers are not data
        }
        let mut buf = batch;
        let set = RecordBatchDecoder::decode_with_custom_compression(
            &mut buf,
            Some(|data: &mut Bytes, compression| decompress(compression, data)),
        )
        .map_err(|e| corrupt(format!("batch at offset {base_offset}: {e}")))?;
        for r in set.records {
            if r.offset < fetch_offset {
                continue;
            }
            out.records.push(ConsumedRecord {
                partition,
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            });
        }
    }
    Ok(out)
}

fn corrupt(msg: String) -> CliError {
    CliError::Protocol(format!("corrupt fetch answer: {msg}"))
}

/// The records section of a compressed batch, decompressed (kafka-protocol's codecs are not
/// built into this workspace; the same codecs as `keel-storage`'s reader). `anyhow` only
/// because kafka-protocol's decompressor hook is typed with it.
fn decompress(compression: Compression, data: &mut Bytes) -> anyhow::Result<Bytes> {
    let data = data.chunk();
    let mut out = Vec::new();
    let capped = |r: &mut dyn Read, out: &mut Vec<u8>| {
        r.take(DECOMPRESSED_BYTES_MAX).read_to_end(out).map(|_| ())
    };
    match compression {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => capped(&mut flate2::read::MultiGzDecoder::new(data), &mut out)?,
        Compression::Lz4 => capped(&mut lz4_flex::frame::FrameDecoder::new(data), &mut out)?,
        Compression::Zstd => capped(&mut zstd::stream::read::Decoder::new(data)?, &mut out)?,
        Compression::Snappy => out = decompress_snappy(data)?,
    }
    Ok(Bytes::from(out))
}

fn snappy_raw(data: &[u8], out: &mut Vec<u8>) -> anyhow::Result<()> {
    let len = snap::raw::decompress_len(data)?;
    if (out.len() + len) as u64 > DECOMPRESSED_BYTES_MAX {
        return Err(anyhow::anyhow!("snappy: decompressed size too large"));
    }
    let start = out.len();
    out.resize(start + len, 0);
    snap::raw::Decoder::new().decompress(data, &mut out[start..])?;
    Ok(())
}

/// Raw snappy, or the xerial framing the Java client writes.
fn decompress_snappy(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        snappy_raw(data, &mut out)?;
        return Ok(out);
    }
    let mut pos = 16.min(data.len());
    while pos < data.len() {
        if data.len() - pos < 4 {
            return Err(anyhow::anyhow!("snappy: truncated xerial block length"));
        }
        let len = (&data[pos..pos + 4]).get_u32() as usize;
        pos += 4;
        if len > data.len() - pos {
            return Err(anyhow::anyhow!("snappy: truncated xerial block"));
        }
        snappy_raw(&data[pos..pos + len], &mut out)?;
        pos += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Vec<NewRecord> {
        (0..3)
            .map(|i| NewRecord {
                key: (i != 1).then(|| format!("k{i}").into_bytes()),
                value: Some(format!("v{i}").into_bytes()),
                headers: vec![("h".into(), format!("{i}").into_bytes())],
            })
            .collect()
    }

    /// A batch as a broker stores it: base offset stamped in.
    fn at_offset(batch: &Bytes, base_offset: i64) -> Vec<u8> {
        let mut b = batch.to_vec();
        b[0..8].copy_from_slice(&base_offset.to_be_bytes());
        b
    }

    #[test]
    fn batches_round_trip_and_skip_a_partial_tail() {
        let batch = encode_batch(&three(), 1_000).unwrap();
        let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone()).unwrap();
        assert_eq!(info.len(), 1, "one batch: brokers take one per partition");
        assert_eq!(
            (
                info[0].record_count,
                info[0].base_sequence,
                info[0].producer_id
            ),
            (3, -1, -1)
        );
        let mut answer = at_offset(&batch, 10);
        answer.extend_from_slice(&at_offset(&batch, 13));
        // A partial third batch: the broker cut at its byte limit.
        answer.extend_from_slice(&at_offset(&batch, 16)[..30]);
        let answer = Bytes::from(answer);

        let got = decode_fetched(4, 11, &answer).unwrap();
        assert_eq!(got.next_offset, Some(16));
        let offsets: Vec<i64> = got.records.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            vec![11, 12, 13, 14, 15],
            "offset 10 is before the fetch offset"
        );
        let r = &got.records[0];
        assert_eq!(r.partition, 4);
        assert_eq!(r.key, None);
        assert_eq!(r.value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(
            r.headers,
            vec![("h".to_string(), Some(Bytes::from_static(b"1")))]
        );
        assert_eq!(r.timestamp, 1_000);
        assert_eq!(got.records[1].key.as_deref(), Some(&b"k2"[..]));

        let empty = decode_fetched(0, 0, &Bytes::new()).unwrap();
        assert!(empty.records.is_empty());
        assert_eq!(empty.next_offset, None);
    }

    #[test]
    fn compressed_batches_decode() {
        use kafka_protocol::records::RecordBatchEncoder;
        let records: Vec<Record> = {
            let set = RecordBatchDecoder::decode(&mut encode_batch(&three(), 5).unwrap()).unwrap();
            set.records
        };
        for (compression, compress) in [
            (
                Compression::Lz4,
                Box::new(|raw: &[u8]| {
                    let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                    std::io::Write::write_all(&mut e, raw).unwrap();
                    e.finish().unwrap()
                }) as Box<dyn Fn(&[u8]) -> Vec<u8>>,
            ),
            (
                Compression::Zstd,
                Box::new(|raw: &[u8]| zstd::encode_all(raw, 1).unwrap()),
            ),
            (
                Compression::Snappy,
                Box::new(|raw: &[u8]| snap::raw::Encoder::new().compress_vec(raw).unwrap()),
            ),
            (
                Compression::Gzip,
                Box::new(|raw: &[u8]| {
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    std::io::Write::write_all(&mut e, raw).unwrap();
                    e.finish().unwrap()
                }),
            ),
        ] {
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode_with_custom_compression(
                &mut buf,
                records.iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression,
                },
                Some(|raw: &mut BytesMut, out: &mut BytesMut, _| {
                    out.extend_from_slice(&compress(raw));
                    Ok(())
                }),
            )
            .unwrap();
            let got = decode_fetched(0, 0, &buf.freeze()).unwrap();
            let values: Vec<_> = got
                .records
                .iter()
                .map(|r| r.value.clone().unwrap())
                .collect();
            assert_eq!(values, vec!["v0", "v1", "v2"], "{compression:?}");
        }
    }

    #[test]
    fn hostile_lengths_are_errors_not_panics() {
        let mut b = encode_batch(&three(), 1).unwrap().to_vec();
        b[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(decode_fetched(0, 0, &Bytes::from(b)).is_err());
        let mut b = vec![0u8; 12];
        b[8..12].copy_from_slice(&10i32.to_be_bytes());
        b.extend_from_slice(&[0u8; 10]);
        assert!(decode_fetched(0, 0, &Bytes::from(b)).is_err());
        let mut b = encode_batch(&three(), 1).unwrap().to_vec();
        let last = b.len() - 1;
        b[last] ^= 0xff; // the CRC no longer matches
        assert!(decode_fetched(0, 0, &Bytes::from(b)).is_err());
    }
}
