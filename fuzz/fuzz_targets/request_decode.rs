//! A Kafka request frame as the broker's connection hands it on (the bytes after the 4-byte
//! size), through the broker's own code: `frontend::dispatch::frame` (the API and version
//! checked against the handlers' table, the header decoded and detached), then
//! `handlers::decode_request` (the body decoded as its handler would, from the same table;
//! Produce's records split into views of the buffer as `produce::take_records` does). Produce's
//! record batches then go to `keel_storage::validate_batches` as the owner shard sends them.
//!
//! The broker runs the decoders inside `catch_unwind`; a fuzz build aborts on a panic instead,
//! so any panic here is a decoder bug to fix (in vendor/kafka-protocol or the broker).
//! Requests are not re-encoded: the broker never does, and kafka-protocol's encoders drop
//! unknown tagged fields whose tag is above `i32::MAX` while counting them (an upstream quirk
//! no Keel path meets).

#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceRequest};
use kafka_protocol::protocol::Decodable;
use keel_broker::frontend::dispatch::{frame, Framed};
use keel_broker::handlers;
use libfuzzer_sys::fuzz_target;

/// Largest frame the broker takes by default (`socket.request.max.bytes`, 100 MiB).
const REQUEST_BYTES_MAX: usize = 100 * 1024 * 1024;

fuzz_target!(|data: &[u8]| {
    if data.len() > REQUEST_BYTES_MAX {
        return;
    }
    let Framed::Request { api, hdr, body } = frame(Bytes::copy_from_slice(data)) else {
        return;
    };
    let version = hdr.request_api_version;
    let support = handlers::support(api).expect("a request's API is in the table");
    assert!(
        (support.listed_min..=support.max).contains(&version),
        "{api:?} v{version} passed the table's check"
    );
    if handlers::decode_request(api, version, body.clone()).is_err() || api != ApiKey::Produce {
        return;
    }
    let mut cursor = body;
    let Ok(produce) = ProduceRequest::decode(&mut cursor, version) else {
        panic!("Produce v{version} decoded once and not twice");
    };
    for topic in &produce.topic_data {
        for partition in &topic.partition_data {
            if let Some(records) = &partition.records {
                let _ = keel_storage::contains_control_batch(records);
                let _ = keel_storage::validate_batches(records, u32::MAX);
            }
        }
    }
});
