//! The files `keel-storage` reads back at `Log::open`, as the disk may hold them after a crash
//! or tampering: producer-state snapshots, `.index`, `.timeindex`, `.txnindex` and the
//! `leader-epoch-checkpoint`. Each decoder must refuse bad bytes without a panic, and what it
//! accepts must encode back to the same file (the text checkpoint: to the same cache).
//!
//! Input: a selector byte (low 3 bits: which file; bit 7: rewrite the snapshot's CRC so the
//! fuzzer gets past it), then the file's bytes; the index kinds take their segment bounds
//! from the first 8 or 16 bytes.

#![no_main]

use keel_storage::fuzzing::{EpochCache, OffsetIndex, ProducerStateManager, TimeIndex, TxnIndex};
use keel_storage::{LeaderEpoch, Offset};
use libfuzzer_sys::fuzz_target;

/// One `.txnindex` entry (txn_index.rs).
const TXN_ENTRY_BYTES: usize = 34;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, file)) = data.split_first() else {
        return;
    };
    match selector & 7 {
        0 => producer_snapshot(file, selector & 0x80 != 0),
        1 => offset_index(file),
        2 => time_index(file),
        3 => txn_index(file),
        4 => epoch_checkpoint(file),
        _ => {}
    }
});

fn producer_snapshot(file: &[u8], fix_crc: bool) {
    let mut file = file.to_vec();
    if fix_crc && file.len() >= 6 {
        // version u16 | crc32c u32 of every byte after it | ...
        let crc = crc32c::crc32c(&file[6..]);
        file[2..6].copy_from_slice(&crc.to_be_bytes());
    }
    let Ok((offset, state)) = ProducerStateManager::decode_snapshot(&file) else {
        return;
    };
    assert!(offset.0 >= 0);
    assert_eq!(
        state.encode_snapshot(offset),
        file,
        "snapshot does not re-encode"
    );
    let producers = state.producers();
    assert_eq!(producers.len(), state.len());
    if let Some(first) = state.first_ongoing_offset() {
        assert!(
            first < offset.0,
            "open transaction at {first} past snapshot {offset:?}"
        );
    }
}

fn offset_index(b: &[u8]) {
    let Some((log_bytes, file)) = split_u64(b) else {
        return;
    };
    let Some(index) = OffsetIndex::decode(file, log_bytes) else {
        return;
    };
    assert_eq!(index.encode(), file);
    for &(relative_offset, position) in &index.entries {
        assert!(u64::from(position) < log_bytes);
        assert_eq!(index.lookup(relative_offset).0, u64::from(position));
    }
}

fn time_index(file: &[u8]) {
    let Some(index) = TimeIndex::decode(file) else {
        return;
    };
    assert_eq!(index.encode(), file);
    // Timestamps strictly increase: the entry before each is the last one older than it.
    let mut previous = None;
    for &(timestamp_ms, relative_offset) in &index.entries {
        assert_eq!(index.lookup_before(timestamp_ms), previous);
        previous = Some(relative_offset);
    }
}

fn txn_index(b: &[u8]) {
    let Some((base_offset, rest)) = split_u64(b) else {
        return;
    };
    let Some((next_offset, file)) = split_u64(rest) else {
        return;
    };
    let (base_offset, next_offset) = (Offset(base_offset as i64), Offset(next_offset as i64));
    let Some(index) = TxnIndex::decode(file, base_offset, next_offset) else {
        return;
    };
    assert_eq!(index.encode(), file);
    let mut found = Vec::new();
    index.collect(Offset(0), Offset(i64::MAX), &mut found);
    assert_eq!(found.len() * TXN_ENTRY_BYTES, file.len());
}

fn epoch_checkpoint(b: &[u8]) {
    let text = String::from_utf8_lossy(b);
    let Some(cache) = EpochCache::decode(&text) else {
        return;
    };
    assert_eq!(EpochCache::decode(&cache.encode()).as_ref(), Some(&cache));
    let _ = cache.latest();
    if let Some(latest) = cache.latest() {
        let _ = cache.end_offset_for(latest, Offset(i64::MAX));
        let _ = cache.end_offset_for(LeaderEpoch(latest.0.saturating_sub(1)), Offset(0));
    }
}

/// A big-endian u64 prefix and the rest.
fn split_u64(b: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = b.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), rest))
}
