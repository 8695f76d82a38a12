//! Kafka's record codecs: decompressing a batch's records section (gzip, snappy raw and
//! xerial-framed, lz4 frame, zstd), for every reader of untrusted batches, and compressing one
//! as a producer writes it ([`Codec`], [`compress`]). Decompressed output is capped at
//! [`DECOMPRESSED_BYTES_MAX`]: a zip bomb is a corrupt batch, never unbounded memory.
//!
//! The broker's recompression to a topic's `compression.type` at KIP-390 levels is storage's
//! (`storage/src/codec.rs`): it writes with liblz4's HC mode, which no client needs.

use std::io::{Read, Write};

use super::header::{CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};
use crate::error::RecordsError;

/// Upper bound on one batch's decompressed records; a larger output is treated as corrupt.
pub const DECOMPRESSED_BYTES_MAX: u64 = 256 * 1024 * 1024;
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\0";
const XERIAL_HEADER_BYTES: usize = 16;
/// Blocks of the xerial framing a producer writes.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;
/// Most output per input byte of a raw snappy block: its densest element is a 3-byte copy of
/// 64 bytes (64 / 3 < 22).
const SNAPPY_EXPANSION_MAX: usize = 22;

fn corrupt(msg: impl Into<String>) -> RecordsError {
    RecordsError::Corrupt(msg.into())
}

/// Kafka's compression codecs, by attribute bits, as a producer picks one.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    /// Every codec, in attribute order.
    pub const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Codec, String> {
        Ok(match s {
            "none" => Codec::None,
            "gzip" => Codec::Gzip,
            "snappy" => Codec::Snappy,
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            other => {
                return Err(format!(
                    "unknown compression {other:?} (none, gzip, snappy, lz4, zstd)"
                ))
            }
        })
    }
}

/// Compresses a records section as a producer does: gzip at its fastest level, snappy in the
/// xerial framing the Java client writes, an lz4 frame, zstd at level 1.
pub fn compress(codec: Codec, raw: &[u8]) -> std::io::Result<Vec<u8>> {
    Ok(match codec {
        Codec::None => raw.to_vec(),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(raw)?;
            e.finish()?
        }
        Codec::Snappy => {
            // Xerial framing: magic, version, compat, then [u32 BE length][raw block]s.
            let mut out = Vec::with_capacity(raw.len() / 2 + 32);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in raw.chunks(XERIAL_BLOCK_BYTES) {
                let c = enc.compress_vec(chunk).map_err(std::io::Error::other)?;
                out.extend_from_slice(&(c.len() as i32).to_be_bytes());
                out.extend_from_slice(&c);
            }
            out
        }
        Codec::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(raw)?;
            e.finish().map_err(std::io::Error::other)?
        }
        Codec::Zstd => zstd::bulk::compress(raw, 1)?,
    })
}

/// Decompresses the records section of a batch with compression code `codec` (attributes 0-2).
pub fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    match codec {
        CODEC_NONE => out.extend_from_slice(data),
        CODEC_GZIP => {
            flate2::read::MultiGzDecoder::new(data)
                .take(DECOMPRESSED_BYTES_MAX)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("gzip: {e}")))?;
        }
        CODEC_SNAPPY => out = decompress_snappy(data)?,
        CODEC_LZ4 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .take(DECOMPRESSED_BYTES_MAX)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("lz4: {e}")))?;
        }
        CODEC_ZSTD => {
            zstd::stream::read::Decoder::new(data)
                .map_err(|e| corrupt(format!("zstd: {e}")))?
                .take(DECOMPRESSED_BYTES_MAX)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
        }
        other => return Err(corrupt(format!("unknown compression codec {other}"))),
    }
    Ok(out)
}

fn snappy_raw(data: &[u8], out: &mut Vec<u8>) -> Result<(), RecordsError> {
    let len = snap::raw::decompress_len(data).map_err(|e| corrupt(format!("snappy: {e}")))?;
    if (out.len() + len) as u64 > DECOMPRESSED_BYTES_MAX {
        return Err(corrupt("snappy: decompressed size too large"));
    }
    // The output is allocated and zeroed at the size the block claims: a claim no block of
    // this many bytes can reach is refused first (a 6-byte block claiming 256 MiB cost that
    // much memory and time on every read, found by the record_batch fuzz target).
    if len > data.len().saturating_mul(SNAPPY_EXPANSION_MAX) {
        return Err(corrupt(format!(
            "snappy: {len} bytes claimed by a {}-byte block",
            data.len()
        )));
    }
    let start = out.len();
    out.resize(start + len, 0);
    snap::raw::Decoder::new()
        .decompress(data, &mut out[start..])
        .map_err(|e| corrupt(format!("snappy: {e}")))?;
    Ok(())
}

fn decompress_snappy(data: &[u8]) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        snappy_raw(data, &mut out)?;
        return Ok(out);
    }
    // Xerial framing: 16-byte header, then blocks of [u32 BE length][raw snappy block].
    let mut pos = XERIAL_HEADER_BYTES.min(data.len());
    while pos < data.len() {
        if data.len() - pos < 4 {
            return Err(corrupt("snappy: truncated xerial block length"));
        }
        let len =
            u32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]) as usize;
        pos += 4;
        if len > data.len() - pos {
            return Err(corrupt("snappy: truncated xerial block"));
        }
        snappy_raw(&data[pos..pos + len], &mut out)?;
        pos += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let raw: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in Codec::ALL {
            let packed = compress(codec, &raw).unwrap();
            assert_eq!(decompress(codec as u8, &packed).unwrap(), raw, "{codec:?}");
        }
        // Raw snappy, as the broker's recompression writes it, reads too.
        let packed = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
        assert_eq!(decompress(CODEC_SNAPPY, &packed).unwrap(), raw);
        assert!(decompress(5, &raw).is_err());
    }

    #[test]
    fn snappy_claims_past_the_densest_block_are_corrupt() {
        let zeros = vec![0u8; 1 << 20];
        let packed = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
        assert_eq!(decompress(CODEC_SNAPPY, &packed).unwrap(), zeros);
        let mut claim = Vec::new();
        let mut len = 200u64 << 20;
        while len >= 0x80 {
            claim.push((len as u8) | 0x80);
            len >>= 7;
        }
        claim.push(len as u8);
        claim.extend_from_slice(&[0, 0]);
        let err = decompress(CODEC_SNAPPY, &claim).unwrap_err().to_string();
        assert!(err.contains("claimed by a 6-byte block"), "{err}");
    }
}
