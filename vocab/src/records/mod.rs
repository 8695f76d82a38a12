//! The one codec of Kafka's magic-2 record batches, for every crate that reads or writes them:
//! storage's log, the broker's tests, the `keel` CLI and keel-bench.
//!
//! - [`header`]: the fixed 61-byte header (field positions, [`BatchHeader`], CRC32C).
//! - [`compression`]: the record codecs, decompression capped for untrusted input.
//! - [`record`]: one `DefaultRecord` parsed from untrusted bytes, borrowed ([`RecordView`]).
//! - [`builder`]: writing records and batches ([`BatchBuilder`], [`frame_batch`]).
//! - [`fetched`]: a consumer's walk over a Fetch answer's batches and records.
//!
//! What only the log does with batches (validation against a topic's limits, stamping offsets
//! and LogAppendTime, recompression at KIP-390 levels, transaction markers' meaning) stays in
//! `keel-storage`.

pub mod builder;
pub mod compression;
pub mod fetched;
pub mod header;
pub mod record;

pub use builder::{
    end_txn_marker_batch, frame_batch, put_record, BatchBuilder, BatchFields, ProducerStamp,
};
pub use compression::{compress, decompress, Codec, DECOMPRESSED_BYTES_MAX};
pub use fetched::{
    for_each_committed_record, for_each_record, for_each_record_of, next_fetched_batch,
    FetchedRecord,
};
pub use header::*;
pub use record::{parse_record, parse_records, read_nullable_bytes, read_varlong, RecordView};

#[cfg(test)]
mod tests;
