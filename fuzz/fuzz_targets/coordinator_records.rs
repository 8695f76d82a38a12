//! The coordinators' records as they read them back from `__consumer_offsets` and
//! `__transaction_state` at load: bytes written by an earlier broker, or damaged on disk.
//!
//! The first byte selects the reader; the rest is split at the second byte (a key length) into
//! a key and a value where the reader takes both:
//! - 0: `group::records::walk_batches_with` over record batches (the loader's walk, on
//!   keel-vocab's batch codec), each record into `group::records::decode_record`.
//! - 1: `group::records::decode_record` (offset commits and classic group metadata).
//! - 2: `group::consumer_group_records::decode_record` and `record_group` (KIP-848 groups).
//! - 3: `txn::transaction_log::decode_record` (transaction log keys and values).
//!
//! All of them in `keel-coordinator`.
//!
//! Every reader answers `None` or "unreadable" on bad bytes; a panic here is a bug.

#![no_main]

use bytes::Bytes;
use keel_coordinator::group::{
    consumer_group_records as consumer_records, records as group_records,
};
use keel_coordinator::txn::transaction_log as txn_records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (key, value) = match rest.split_first() {
        Some((&n, tail)) => tail.split_at(usize::from(n).min(tail.len())),
        None => (&[][..], &[][..]),
    };
    match selector % 4 {
        0 => {
            let bytes = Bytes::copy_from_slice(rest);
            let mut unreadable = 0u64;
            let mut records = 0u64;
            let next = group_records::walk_batches_with(&bytes, &mut unreadable, |_, k, v| {
                records += 1;
                let _ = group_records::decode_record(k, v);
            });
            // Each batch is at least a header long: the walk cannot count more batches than fit.
            assert!(unreadable <= (bytes.len() / 61) as u64 + 1);
            let _ = (next, records);
        }
        1 => {
            let k = Some(Bytes::copy_from_slice(key));
            let v = (!value.is_empty()).then(|| Bytes::copy_from_slice(value));
            let _ = group_records::decode_record(k, v);
            let _ = group_records::decode_value(Bytes::copy_from_slice(value));
            let _ = group_records::decode_group_metadata_value(Bytes::copy_from_slice(value));
        }
        2 => {
            if let Some((k, v)) = consumer_records::decode_record(key, value) {
                // What decodes encodes back to bytes that decode the same.
                let again = consumer_records::decode_record(&k.encode(), &v.encode());
                assert_eq!(again, Some((k, v)));
            }
            let _ = consumer_records::record_group(&Bytes::copy_from_slice(key));
        }
        _ => {
            let v = (!value.is_empty()).then_some(value);
            let _ = txn_records::decode_record(Some(key), v);
            let _ = txn_records::decode_key(key);
            let _ = txn_records::decode_value(value);
        }
    }
});
