//! The bytes the controller (`keel-raft`) reads from peers and from its own files: metadata
//! record batches (flatbuffers, `codec::decode_batch`) and their application to the cluster
//! image, the transport's frames (`[len u32 BE][JSON]`, `network::frame_len` and
//! `decode_frame` for `RpcRequest` / `RpcResponse`), the Raft log file's frames
//! (`LogStore::open`'s parse) and the state machine's snapshot.
//!
//! Input: a selector byte, then the bytes (mode 5: a u16 BE length, a snapshot of that length,
//! then a record batch applied on top of it). Nothing may panic; a batch that decodes must
//! encode and decode back to the same records.

#![no_main]

use std::sync::Arc;

use keel_raft::codec::{decode_batch, encode_batch};
use keel_raft::fuzzing::parse_log_frames;
use keel_raft::network::{decode_frame, frame_len, RpcRequest, RpcResponse};
use keel_raft::state_machine::{apply_entry, decode_snapshot};
use keel_raft::ClusterImage;
use libfuzzer_sys::fuzz_target;

/// The log index the fuzzed batches are applied at.
const APPLY_INDEX: u64 = 7;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    match selector % 6 {
        0 => record_batch(&Arc::new(ClusterImage::default()), bytes),
        1 => transport_frame::<RpcRequest>(bytes),
        2 => transport_frame::<RpcResponse>(bytes),
        3 => log_file(bytes),
        4 => {
            let _ = decode_snapshot(bytes);
        }
        _ => snapshot_then_batch(bytes),
    }
});

/// A batch as the state machine applies it: decode, round trip, apply all or none.
fn record_batch(image: &Arc<ClusterImage>, bytes: &[u8]) {
    let Ok(records) = decode_batch(bytes) else {
        return;
    };
    let again = decode_batch(&encode_batch(&records)).expect("encoded batch decodes");
    assert_eq!(again, records);
    let (next, _outcome) = image.apply(APPLY_INDEX, &records);
    assert_eq!(next.applied_index, APPLY_INDEX);
}

/// One transport frame: the length prefix as `read_frame` checks it, then the body.
fn transport_frame<T: serde::de::DeserializeOwned>(bytes: &[u8]) {
    let Some((prefix, body)) = bytes.split_first_chunk::<4>() else {
        return;
    };
    let Ok(len) = frame_len(*prefix) else {
        return;
    };
    if let Some(body) = body.get(..len) {
        let _ = decode_frame::<T>(body);
    }
}

/// The Raft log file at open: a valid prefix of frames, each entry applied in order.
fn log_file(bytes: &[u8]) {
    let (entries, valid_bytes) = parse_log_frames(bytes);
    assert!(valid_bytes <= bytes.len() as u64);
    let mut image = Arc::new(ClusterImage::default());
    let mut previous = None;
    for (entry, position) in &entries {
        assert!(previous.is_none_or(|p| p < *position) && *position < valid_bytes);
        previous = Some(*position);
        image = apply_entry(&image, entry).0;
    }
}

/// A snapshot as a follower installs it, then a batch applied to its image.
fn snapshot_then_batch(bytes: &[u8]) {
    let Some((len, rest)) = bytes.split_first_chunk::<2>() else {
        return;
    };
    let len = usize::from(u16::from_be_bytes(*len)).min(rest.len());
    let (snapshot, batch) = rest.split_at(len);
    if let Ok(file) = decode_snapshot(snapshot) {
        record_batch(&Arc::new(file.image), batch);
    }
}
