//! Record batches for the CLI, on keel-vocab's one batch codec: building an uncompressed
//! magic-2 batch for Produce, and reading the batches of a Fetch answer (any codec). Fetch
//! answers may end in a partial batch (the broker cuts at the byte limit); that tail is
//! skipped, and the next fetch starts after the last whole batch. The bytes come from the
//! network: the codec checks every length and the CRC, and caps decompressed output.

use bytes::Bytes;
use keel_vocab::records::{for_each_record, BatchBuilder, Codec};

use crate::error::{CliError, Result};

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
    let mut batch = BatchBuilder::new();
    for r in records {
        let headers: Vec<(&[u8], Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_bytes(), Some(v.as_slice())))
            .collect();
        batch.push_record(timestamp_ms, r.key.as_deref(), r.value.as_deref(), &headers);
    }
    batch
        .finish(Codec::None)
        .map_err(|e| CliError::Protocol(format!("encoding a record batch: {e}")))
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
    let mut bad_header = None;
    out.next_offset = for_each_record(bytes, |r| {
        if r.offset < fetch_offset {
            return;
        }
        let mut headers = Vec::new();
        for (k, v) in r.headers() {
            match String::from_utf8(k.to_vec()) {
                Ok(k) => headers.push((k, v.map(Bytes::copy_from_slice))),
                Err(_) => bad_header = Some(r.offset),
            }
        }
        out.records.push(ConsumedRecord {
            partition,
            offset: r.offset,
            timestamp: r.timestamp_ms,
            key: r.key.map(Bytes::copy_from_slice),
            value: r.value.map(Bytes::copy_from_slice),
            headers,
        });
    })
    .map_err(|e| corrupt(e.to_string()))?;
    if let Some(offset) = bad_header {
        return Err(corrupt(format!(
            "record at offset {offset}: a header key is not UTF-8"
        )));
    }
    Ok(out)
}

fn corrupt(msg: String) -> CliError {
    CliError::Protocol(format!("corrupt fetch answer: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    };

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
