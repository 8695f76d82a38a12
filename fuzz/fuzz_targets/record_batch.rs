//! Record batches as a Produce request or a segment file hands them to `keel-storage`:
//! header and CRC validation (`validate_batches`, `validate_one`), the record walks
//! (`find_record`, `end_txn_marker`, the compaction parser behind `unkeyed_records`,
//! `build_offset_map` and `clean_segment`), the header-only scans, decompression and
//! recompression; and keel-coordinator's `walk_batches_with`, with which the group and
//! transaction coordinators read their own logs back.
//!
//! Input: one control byte, then the batches. Control bit 0 rewrites every batch's CRC and bit 1
//! stretches the first batch's `batchLength` over the whole input, so the fuzzer reaches the
//! record walks instead of stopping at the checksum; bits 2-4 pick the codec to recompress to.
//! Nothing may panic, and what the validator accepts must hold together: sizes inside the
//! input, a matching CRC, and compaction and recompression output that validates again.

#![no_main]

use bytes::Bytes;
use keel_coordinator::group::records::walk_batches_with;
use keel_storage::compact::{build_offset_map, clean_segment, AbortedTxns, CleanParams, OffsetMap};
use keel_storage::fuzzing::{
    compute_crc, decompress, find_record, unkeyed_records, validate_one, BatchHeader,
    BATCH_LENGTH_AT, CRC_AT, HEADER_BYTES, LOG_OVERHEAD,
};
use keel_storage::{
    codec, contains_control_batch, end_offset_of, end_txn_marker, validate_batches,
};
use libfuzzer_sys::fuzz_target;

/// Decompressed sections above this are not recompressed again (time per input, not safety:
/// `decompress` bounds its own output).
const ROUND_TRIP_BYTES_MAX: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let mut batches = rest.to_vec();
    if control & 2 != 0 {
        stretch_first_batch(&mut batches);
    }
    if control & 1 != 0 {
        fix_crcs(&mut batches);
    }
    let codec_to = (control >> 2) & 7;

    scan_headers(&batches, codec_to);
    walk_validated(&batches);
    compact(&batches);
    recompress(&batches, codec_to);
    // The coordinators' reader of their own logs (keel-coordinator's `walk_batches_with`, on
    // keel-vocab's codec).
    let batches = Bytes::from(batches);
    let mut unreadable = 0u64;
    let _ = walk_batches_with(&batches, &mut unreadable, |_, _, _| {});
});

/// Sets the first batch's `batchLength` so that it ends where the input ends.
fn stretch_first_batch(b: &mut [u8]) {
    if b.len() >= HEADER_BYTES {
        let len = i32::try_from(b.len() - LOG_OVERHEAD).unwrap_or(i32::MAX);
        b[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// Rewrites the CRC of every batch whose header and length fit in `b`.
fn fix_crcs(b: &mut [u8]) {
    let mut pos = 0usize;
    while let Some(h) = b.get(pos..).and_then(BatchHeader::parse) {
        let Some(end) = pos.checked_add(h.size).filter(|&end| end <= b.len()) else {
            return;
        };
        let crc = compute_crc(&b[pos..end]);
        b[pos + CRC_AT..pos + CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        pos = end;
    }
}

/// The header-only scans the broker runs before validation: on any bytes, no panic.
fn scan_headers(b: &[u8], codec_to: u8) {
    let _ = end_offset_of(b);
    let _ = contains_control_batch(b);
    let _ = codec::any_batch_with_codec(b, codec_to);
}

/// Every batch `validate_one` accepts, walked as the log walks it.
fn walk_validated(b: &[u8]) {
    let whole = validate_batches(b, u32::MAX);
    let mut pos = 0usize;
    let mut batch_count = 0u32;
    while pos < b.len() {
        let Ok(h) = validate_one(&b[pos..], u32::MAX) else {
            break;
        };
        assert!(h.size >= HEADER_BYTES && h.size <= b.len() - pos, "{h:?}");
        let batch = &b[pos..pos + h.size];
        assert_eq!(compute_crc(batch), h.crc);
        assert!(h.records_count >= 0 && h.last_offset_delta >= 0);
        assert!(h.last_offset() >= h.base_offset);
        // A batch that fits under a limit of its own size is accepted at that limit.
        assert!(validate_one(batch, h.size as u32).is_ok());
        let _ = find_record(batch, |_| false);
        let _ = end_txn_marker(batch);
        if let Ok(raw) = decompress(h.compression(), &batch[HEADER_BYTES..]) {
            round_trip(h.compression(), &raw);
        }
        batch_count += 1;
        pos += h.size;
    }
    match whole {
        Ok(summary) => {
            assert_eq!(pos, b.len(), "validate_batches accepted a partial walk");
            assert_eq!(summary.batch_count, batch_count);
        }
        Err(_) => assert!(pos < b.len() || b.is_empty()),
    }
}

/// What compresses with a codec decompresses to the same bytes.
fn round_trip(codec_id: u8, raw: &[u8]) {
    if raw.len() > ROUND_TRIP_BYTES_MAX {
        return;
    }
    let levels = codec::CompressionLevels::default();
    if let Ok(packed) = codec::compress(codec_id, raw, &levels) {
        let back = decompress(codec_id, &packed).expect("own compressed output decompresses");
        assert_eq!(back, raw);
    }
}

/// The cleaner over `b` as one segment: its output validates and counts add up.
fn compact(b: &[u8]) {
    let _ = unkeyed_records(b, 8);
    let mut map = OffsetMap::new();
    let mapped = build_offset_map(&mut map, b, &AbortedTxns::NONE);
    for horizon in [i64::MIN, i64::MAX] {
        let params = CleanParams {
            delete_horizon_ms: horizon,
            aborted: &AbortedTxns::NONE,
        };
        let Ok(outcome) = clean_segment(b, &map, &params) else {
            continue;
        };
        assert!(mapped.is_ok(), "cleaned a segment the map builder refused");
        assert_eq!(outcome.bytes_in, b.len() as u64);
        if !outcome.bytes.is_empty() {
            validate_batches(&outcome.bytes, u32::MAX).expect("cleaned batches validate");
        }
        // Cleaning the output again with the same map changes nothing more.
        let again = clean_segment(&outcome.bytes, &map, &params).expect("clean output re-cleans");
        assert_eq!(again.records_kept, outcome.records_kept);
    }
}

/// Recompression of whatever validates: the output validates and holds no other codec.
fn recompress(b: &[u8], codec_to: u8) {
    let levels = codec::CompressionLevels::default();
    if let Ok(Some(out)) = codec::recompress(b, codec_to, &levels) {
        validate_batches(&out.batches, u32::MAX).expect("recompressed batches validate");
    }
}
