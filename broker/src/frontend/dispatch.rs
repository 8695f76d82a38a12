//! Dispatch of one request frame: the API and version are checked against the handlers'
//! table before anything is decoded; unknown APIs and versions get Kafka's answers.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};

use crate::frontend::conn::Reply;
use crate::frontend::framing::{
    decode_header, encode_response, peek_prefix, unsupported_frame, FrameError,
};
use crate::handlers::{self, api_versions};
use crate::shard::BrokerShard;

/// Handles one request frame (header and body, without the size prefix). `client_host` is the
/// client's address as Kafka shows it to group members ("/127.0.0.1").
pub async fn handle_frame(shard: Rc<BrokerShard>, mut frame: Bytes, client_host: Rc<str>) -> Reply {
    let Some(prefix) = peek_prefix(&frame) else {
        return Reply::Close(FrameError::Header(
            "frame shorter than a request header".into(),
        ));
    };
    let Ok(api) = ApiKey::try_from(prefix.api_key) else {
        shard.counters.count_request(None);
        return Reply::FrameThenClose(unsupported_frame(prefix.correlation_id));
    };
    shard.counters.count_request(Some(api));
    // Versions listed but refused (Produce v0-2) are decoded so that the handler can answer
    // each partition with UNSUPPORTED_VERSION instead of closing the connection.
    let supported =
        handlers::support(api).filter(|s| (s.listed_min..=s.max).contains(&prefix.api_version));
    if api == ApiKey::ApiVersions && supported.is_none() {
        // Kafka's rule: an ApiVersions request at an unknown version gets a v0 answer with
        // UNSUPPORTED_VERSION and the full list, so the client can pick a version.
        return reply(encode_response(
            api,
            0,
            prefix.correlation_id,
            &api_versions::response(kafka_protocol::ResponseError::UnsupportedVersion.code()),
        ));
    }
    if supported.is_none() {
        return Reply::FrameThenClose(unsupported_frame(prefix.correlation_id));
    }
    let mut hdr: RequestHeader = match decode_header(api, prefix.api_version, &mut frame) {
        Ok(h) => h,
        Err(e) => return Reply::Close(e),
    };
    detach(&mut hdr);
    match handlers::call(&shard, &hdr, api, &mut frame, &client_host).await {
        Ok(Some(answer)) => Reply::Frame(answer),
        Ok(None) => Reply::None,
        Err(e) => Reply::Close(e),
    }
}

/// Makes the header keep no view of the frame, so that a handler that takes the body whole
/// (Produce) holds the frame's only reference and can reuse its buffer.
fn detach(hdr: &mut RequestHeader) {
    hdr.client_id = hdr
        .client_id
        .take()
        .map(|c| kafka_protocol::protocol::StrBytes::from_string(c.to_string()));
    for value in hdr.unknown_tagged_fields.values_mut() {
        *value = Bytes::copy_from_slice(value);
    }
}

fn reply(r: Result<Bytes, FrameError>) -> Reply {
    match r {
        Ok(f) => Reply::Frame(f),
        Err(e) => Reply::Close(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    /// After the header is decoded and detached, the body is the frame's only view.
    #[test]
    fn a_detached_header_leaves_the_body_unique() {
        let mut hdr = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(9)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("producer-1")));
        hdr.unknown_tagged_fields
            .insert(5, Bytes::from_static(b"tag"));
        let mut buf = BytesMut::new();
        hdr.encode(&mut buf, 2).unwrap();
        buf.extend_from_slice(b"the body");
        let mut frame = BytesMut::from(&buf[..]).freeze();
        let mut decoded = decode_header(ApiKey::Produce, 9, &mut frame).unwrap();
        assert!(!frame.is_unique(), "the decoded header shares the frame");
        detach(&mut decoded);
        assert!(frame.is_unique());
        assert_eq!(&frame[..], b"the body");
        assert_eq!(decoded.client_id.as_deref(), Some("producer-1"));
        assert_eq!(
            decoded.unknown_tagged_fields[&5],
            Bytes::from_static(b"tag")
        );
    }
}
