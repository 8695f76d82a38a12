//! Kafka's `compression.type` (topic and broker) and the KIP-390 levels: the settings that
//! decide whether and how [`crate::codec`] rewrites a produced batch. Settings only: a
//! partition's `LogConfig` holds them without depending on the code that compresses.

use std::str::FromStr;

/// Kafka's codec numbers (the low three bits of a batch's `attributes`).
pub use keel_vocab::records::{CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};

/// Kafka's `compression.type`: the codec a topic stores its batches in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CompressionType {
    /// Keep each batch's codec as the producer sent it (Kafka's default).
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl CompressionType {
    /// The codec batches are rewritten to; `None` for `producer`.
    pub fn codec(self) -> Option<u8> {
        match self {
            CompressionType::Producer => None,
            CompressionType::Uncompressed => Some(CODEC_NONE),
            CompressionType::Gzip => Some(CODEC_GZIP),
            CompressionType::Snappy => Some(CODEC_SNAPPY),
            CompressionType::Lz4 => Some(CODEC_LZ4),
            CompressionType::Zstd => Some(CODEC_ZSTD),
        }
    }
}

impl FromStr for CompressionType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "producer" => CompressionType::Producer,
            "uncompressed" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            other => {
                return Err(format!(
                    "unknown compression type {other:?} (expected \
                     uncompressed|zstd|lz4|snappy|gzip|producer)"
                ))
            }
        })
    }
}

/// KIP-390 compression levels (`compression.gzip.level`, `compression.lz4.level`,
/// `compression.zstd.level`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CompressionLevels {
    /// 1-9, or -1 for zlib's default (6).
    pub gzip: i32,
    /// 1-17 (LZ4 HC from 3; see `compress_lz4`).
    pub lz4: i32,
    /// zstd's range, -131072 to 22.
    pub zstd: i32,
}

/// Kafka's ranges and defaults of the levels.
pub const GZIP_LEVELS: std::ops::RangeInclusive<i32> = 1..=9;
pub const GZIP_LEVEL_DEFAULT: i32 = -1;
pub const LZ4_LEVELS: std::ops::RangeInclusive<i32> = 1..=17;
pub const LZ4_LEVEL_DEFAULT: i32 = 9;
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -131_072..=22;
pub const ZSTD_LEVEL_DEFAULT: i32 = 3;

impl Default for CompressionLevels {
    fn default() -> Self {
        CompressionLevels {
            gzip: GZIP_LEVEL_DEFAULT,
            lz4: LZ4_LEVEL_DEFAULT,
            zstd: ZSTD_LEVEL_DEFAULT,
        }
    }
}
