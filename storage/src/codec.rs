//! Record-batch codecs on the write side: Kafka's `compression.type` (topic and broker) and the
//! KIP-390 levels, and the recompression of a produced batch whose codec differs from the
//! topic's.
//!
//! With `compression.type=producer` (Kafka's default) batches are stored exactly as sent and
//! nothing here runs. Any other value makes the owner shard rewrite each data batch whose codec
//! differs: decompress the records section, compress it with the topic's codec and level, and
//! rewrite `attributes` (codec bits), `batchLength` and the CRC. Every other header field
//! (offsets, timestamps, producer id, epoch, sequence, transactional bit) and the records
//! themselves are kept, so offsets, idempotence and transactions see the same batch. Control
//! batches (transaction markers) are never rewritten, as in Kafka.
//!
//! Decompressed output is bounded by the reader in `records.rs` (a zip bomb is a corrupt
//! batch). Runs on the shard that owns the partition.

use std::io::Write;

use bytes::{BufMut, BytesMut};

use crate::batch::{
    compute_crc, validate_one, BatchHeader, ATTRIBUTES_AT, BATCH_LENGTH_AT, COMPRESSION_MASK,
    CRC_AT, HEADER_BYTES, LOG_OVERHEAD,
};
use crate::error::StorageError;
use crate::records::decompress;

pub use crate::compression_type::*;

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptMessage(msg.into())
}

/// Compresses a records section with Kafka codec `codec` (snappy is written raw, which every
/// Kafka client reads; lz4 as a standard frame of independent 64 KiB blocks, as Kafka writes).
pub fn compress(
    codec: u8,
    raw: &[u8],
    levels: &CompressionLevels,
) -> Result<Vec<u8>, StorageError> {
    Ok(match codec {
        CODEC_NONE => raw.to_vec(),
        CODEC_GZIP => {
            let level = match u32::try_from(levels.gzip) {
                Ok(l) if GZIP_LEVELS.contains(&levels.gzip) => flate2::Compression::new(l),
                _ => flate2::Compression::default(),
            };
            let mut e = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 2), level);
            e.write_all(raw)?;
            e.finish()?
        }
        CODEC_SNAPPY => snap::raw::Encoder::new()
            .compress_vec(raw)
            .map_err(|e| corrupt(format!("snappy: {e}")))?,
        CODEC_LZ4 => compress_lz4(raw, levels.lz4)?,
        CODEC_ZSTD => zstd::encode_all(raw, levels.zstd)?,
        other => return Err(corrupt(format!("unknown compression codec {other}"))),
    })
}

/// An LZ4 frame of independent 64 KiB blocks without content checksum, as Kafka writes, at
/// Kafka's `compression.lz4.level` (1-17). liblz4's frame API compresses levels 3-12 with LZ4 HC
/// (higher levels are capped at 12) and 1-2 in fast mode; lz4-java, Kafka's, uses HC at every
/// level. The frame is what every Kafka client reads.
fn compress_lz4(raw: &[u8], level: i32) -> Result<Vec<u8>, StorageError> {
    let level = u32::try_from(level.clamp(*LZ4_LEVELS.start(), *LZ4_LEVELS.end())).unwrap_or(9);
    let mut e = lz4::EncoderBuilder::new()
        .level(level)
        .block_size(lz4::BlockSize::Max64KB)
        .block_mode(lz4::BlockMode::Independent)
        .checksum(lz4::ContentChecksum::NoChecksum)
        .build(Vec::with_capacity(raw.len() / 2))?;
    e.write_all(raw)?;
    let (out, result) = e.finish();
    result?;
    Ok(out)
}

/// Whether any batch in `batches` (validated) carries codec `codec`. Reads headers only.
pub fn any_batch_with_codec(batches: &[u8], codec: u8) -> bool {
    let mut pos = 0usize;
    while let Some(header) = batches.get(pos..).and_then(BatchHeader::parse) {
        if header.compression() == codec {
            return true;
        }
        pos += header.size;
    }
    false
}

/// What [`recompress`] did.
#[derive(Debug, Default)]
pub struct Recompressed {
    /// The rewritten batches, all of them (those already in the codec copied as they are).
    pub batches: BytesMut,
    /// Bytes of the batches that were rewritten, before and after.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Rewrites every data batch of `batches` (validated, in order) whose codec is not `codec`;
/// `None` when none needs it, so the common case copies nothing.
pub fn recompress(
    batches: &[u8],
    codec: u8,
    levels: &CompressionLevels,
) -> Result<Option<Recompressed>, StorageError> {
    let needs = |h: &BatchHeader| !h.is_control() && h.compression() != codec;
    let mut pos = 0usize;
    let mut any = false;
    while let Some(header) = batches.get(pos..).and_then(BatchHeader::parse) {
        any |= needs(&header);
        pos += header.size;
    }
    if !any {
        return Ok(None);
    }
    let mut out = Recompressed {
        batches: BytesMut::with_capacity(batches.len()),
        ..Recompressed::default()
    };
    let mut pos = 0usize;
    while pos < batches.len() {
        let header = validate_one(&batches[pos..], u32::MAX)?;
        let batch = &batches[pos..pos + header.size];
        pos += header.size;
        if !needs(&header) {
            out.batches.put_slice(batch);
            continue;
        }
        let section = &batch[HEADER_BYTES..];
        let raw = match header.compression() {
            CODEC_NONE => std::borrow::Cow::Borrowed(section),
            from => std::borrow::Cow::Owned(decompress(from, section)?),
        };
        let payload = compress(codec, &raw, levels)?;
        let batch_length = i32::try_from(HEADER_BYTES - LOG_OVERHEAD + payload.len())
            .map_err(|_| corrupt("recompressed batch longer than i32::MAX"))?;
        let attributes = (header.attributes & !COMPRESSION_MASK) | i16::from(codec);
        let at = out.batches.len();
        out.batches.put_slice(&batch[..HEADER_BYTES]);
        out.batches.put_slice(&payload);
        let new = &mut out.batches[at..];
        new[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
        new[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
        let crc = compute_crc(new);
        new[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        debug_assert!(validate_one(new, u32::MAX).is_ok());
        out.bytes_in += header.size as u64;
        out.bytes_out += (HEADER_BYTES + payload.len()) as u64;
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{batch, keyed_batch};

    fn records_of(batches: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(h) = BatchHeader::parse(&batches[pos..]) {
            let section = &batches[pos + HEADER_BYTES..pos + h.size];
            out.push((
                h.compression(),
                decompress(h.compression(), section).unwrap(),
            ));
            pos += h.size;
            if pos >= batches.len() {
                break;
            }
        }
        out
    }

    #[test]
    fn every_codec_to_every_codec_keeps_the_records() {
        let records = [
            (Some("k1"), Some("v1")),
            (Some("k2"), None),
            (None, Some("v3")),
        ];
        for from in [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let original = keyed_batch(&records, 1_000, from);
            let (_, raw) = records_of(&original)[0].clone();
            for to in [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
                let levels = CompressionLevels::default();
                let result = recompress(&original, to, &levels).unwrap();
                if from == to {
                    assert!(result.is_none(), "{from}->{to} copies nothing");
                    continue;
                }
                let result = result.expect("rewritten");
                let h = validate_one(&result.batches, u32::MAX).expect("valid batch");
                let old = BatchHeader::parse(&original).unwrap();
                assert_eq!(h.compression(), to);
                assert_eq!(
                    (
                        h.base_timestamp,
                        h.max_timestamp,
                        h.records_count,
                        h.last_offset_delta
                    ),
                    (
                        old.base_timestamp,
                        old.max_timestamp,
                        old.records_count,
                        old.last_offset_delta
                    )
                );
                assert_eq!(
                    h.attributes & !COMPRESSION_MASK,
                    old.attributes & !COMPRESSION_MASK
                );
                assert_eq!(records_of(&result.batches), vec![(to, raw.clone())]);
                assert_eq!(result.bytes_in, original.len() as u64);
                assert_eq!(result.bytes_out, result.batches.len() as u64);
            }
        }
    }

    #[test]
    fn only_batches_in_another_codec_are_rewritten() {
        let mut both = batch(3, 0, 100);
        both.extend_from_slice(&keyed_batch(&[(Some("a"), Some("b"))], 5, CODEC_ZSTD));
        let result = recompress(&both, CODEC_ZSTD, &CompressionLevels::default())
            .unwrap()
            .expect("the uncompressed batch is rewritten");
        let codecs: Vec<u8> = records_of(&result.batches).iter().map(|r| r.0).collect();
        assert_eq!(codecs, vec![CODEC_ZSTD, CODEC_ZSTD]);
        assert!(any_batch_with_codec(&both, CODEC_ZSTD));
        assert!(!any_batch_with_codec(&batch(3, 0, 10), CODEC_ZSTD));
    }

    #[test]
    fn levels_change_the_output() {
        let raw: Vec<u8> = (0..200_000u32)
            .map(|i| (i % 251) as u8 ^ (i / 7) as u8)
            .collect();
        let fast = CompressionLevels {
            gzip: 1,
            zstd: 1,
            ..CompressionLevels::default()
        };
        let best = CompressionLevels {
            gzip: 9,
            zstd: 19,
            ..CompressionLevels::default()
        };
        for codec in [CODEC_GZIP, CODEC_ZSTD] {
            let a = compress(codec, &raw, &fast).unwrap();
            let b = compress(codec, &raw, &best).unwrap();
            assert_ne!(
                a, b,
                "codec {codec}: levels 1 and 9/19 give different bytes"
            );
            assert_eq!(decompress(codec, &a).unwrap(), raw);
            assert_eq!(decompress(codec, &b).unwrap(), raw);
        }
    }

    #[test]
    fn compression_type_names_are_kafkas() {
        for (name, codec) in [
            ("producer", None),
            ("uncompressed", Some(CODEC_NONE)),
            ("gzip", Some(CODEC_GZIP)),
            ("snappy", Some(CODEC_SNAPPY)),
            ("lz4", Some(CODEC_LZ4)),
            ("zstd", Some(CODEC_ZSTD)),
        ] {
            assert_eq!(name.parse::<CompressionType>().unwrap().codec(), codec);
        }
        assert!("none".parse::<CompressionType>().is_err());
        assert!("GZIP".parse::<CompressionType>().is_err());
    }
}
