//! A Kafka request frame as the broker's connection loop hands it on (the bytes after the
//! 4-byte size): the fixed header prefix, the request header at the version the API key names,
//! then the body at the header's version (broker/src/protocol.rs `peek_prefix`,
//! `decode_header`, `decode_body`; broker/src/handlers/mod.rs `handle_frame`). Produce's record
//! batches then go to `keel_storage::validate_batches` as the produce handler sends them.
//!
//! Until the broker is a library this calls `kafka-protocol` the way those functions do, for
//! every API key it knows (a superset of what the broker accepts), at any version (outside the
//! valid range must be an error). The broker runs the decoders inside `catch_unwind`; a fuzz
//! build aborts on a panic instead, so any panic here is a decoder bug to fix in
//! vendor/kafka-protocol. Requests are not re-encoded: the broker never does, and
//! kafka-protocol's encoders drop unknown tagged fields whose tag is above `i32::MAX` while
//! counting them (an upstream quirk no Keel path meets).

#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;

/// Largest frame the broker takes by default (`socket.request.max.bytes`, 100 MiB).
const REQUEST_BYTES_MAX: usize = 100 * 1024 * 1024;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 || data.len() > REQUEST_BYTES_MAX {
        return;
    }
    let api_key = i16::from_be_bytes([data[0], data[1]]);
    let api_version = i16::from_be_bytes([data[2], data[3]]);
    let Ok(api) = ApiKey::try_from(api_key) else {
        return;
    };
    let mut frame = Bytes::copy_from_slice(data);
    let Ok(header) = RequestHeader::decode(&mut frame, api.request_header_version(api_version))
    else {
        return;
    };
    assert_eq!(header.request_api_key, api_key);
    assert_eq!(header.request_api_version, api_version);
    let version = header.request_api_version;
    let Ok(request) = RequestKind::decode(api, &mut frame, version) else {
        return;
    };
    let range = api.valid_versions();
    assert!(
        (range.min..=range.max).contains(&version),
        "{api:?} decoded at v{version}, outside {range:?}"
    );
    if let RequestKind::Produce(produce) = &request {
        for topic in &produce.topic_data {
            for partition in &topic.partition_data {
                if let Some(records) = &partition.records {
                    let _ = keel_storage::contains_control_batch(records);
                    let _ = keel_storage::validate_batches(records, u32::MAX);
                }
            }
        }
    }
});
