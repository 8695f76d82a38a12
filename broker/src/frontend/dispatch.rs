//! Dispatch of one request frame: the API and version are checked against the handlers'
//! table before anything is decoded; unknown APIs and versions get Kafka's answers.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};

use crate::frontend::framing::{
    decode_header, encode_response, peek_prefix, unsupported_frame, Frame, FrameError,
};
use crate::handlers::{self, api_versions};
use crate::security::Session;
use crate::shard::BrokerShard;

/// What a request task yields: a frame to send, nothing (acks=0), or "close now".
pub enum Reply {
    Frame(Frame),
    None,
    Close(FrameError),
    /// Send this frame, then close (unsupported API or version).
    FrameThenClose(Frame),
}

/// What a request frame is, before any handler runs.
pub enum Framed {
    /// A request Keel answers: its API, its header (detached from the frame) and its body.
    Request {
        api: ApiKey,
        hdr: RequestHeader,
        body: Bytes,
    },
    /// An API or version Keel does not answer: Kafka's answer, then the connection closes.
    /// `api` is the key when Keel knows it.
    Unsupported {
        api: Option<ApiKey>,
        correlation_id: i32,
    },
    /// ApiVersions at a version Keel does not know: answered at v0 with the full list.
    ApiVersionsFallback { correlation_id: i32 },
    /// A frame too short or a header that does not decode: the connection closes.
    Malformed(FrameError),
}

/// Reads one request frame (header and body, without the size prefix) as far as the dispatch
/// needs: the API and version are checked against the handlers' table before anything is
/// decoded. No I/O and no shard: the fuzz targets call it as the connection does.
pub fn frame(mut frame: Bytes) -> Framed {
    let Some(prefix) = peek_prefix(&frame) else {
        return Framed::Malformed(FrameError::Header(
            "frame shorter than a request header".into(),
        ));
    };
    let Ok(api) = ApiKey::try_from(prefix.api_key) else {
        return Framed::Unsupported {
            api: None,
            correlation_id: prefix.correlation_id,
        };
    };
    // Versions listed but refused (Produce v0-2) are decoded so that the handler can answer
    // each partition with UNSUPPORTED_VERSION instead of closing the connection.
    let supported =
        handlers::support(api).filter(|s| (s.listed_min..=s.max).contains(&prefix.api_version));
    if supported.is_none() {
        let correlation_id = prefix.correlation_id;
        return if api == ApiKey::ApiVersions {
            Framed::ApiVersionsFallback { correlation_id }
        } else {
            Framed::Unsupported {
                api: Some(api),
                correlation_id,
            }
        };
    }
    match decode_header(api, prefix.api_version, &mut frame) {
        Ok(mut hdr) => {
            detach(&mut hdr);
            Framed::Request {
                api,
                hdr,
                body: frame,
            }
        }
        Err(e) => Framed::Malformed(e),
    }
}

/// Handles one request frame (header and body, without the size prefix) of the connection
/// `session` describes.
pub async fn handle_frame(
    shard: Rc<BrokerShard>,
    frame_bytes: Bytes,
    session: Rc<Session>,
) -> Reply {
    match frame(frame_bytes) {
        Framed::Malformed(e) => Reply::Close(e),
        Framed::Unsupported {
            api,
            correlation_id,
        } => {
            shard.counters.count_request(api);
            Reply::FrameThenClose(unsupported_frame(correlation_id).into())
        }
        Framed::ApiVersionsFallback { correlation_id } => {
            api_versions_fallback(&shard, correlation_id)
        }
        Framed::Request { api, hdr, mut body } => {
            shard.counters.count_request(Some(api));
            match handlers::call(&shard, &hdr, api, &mut body, &session).await {
                Ok(Some(answer)) => Reply::Frame(answer),
                Ok(None) => Reply::None,
                Err(e) => Reply::Close(e),
            }
        }
    }
}

/// Kafka's rule: an ApiVersions request at an unknown version gets a v0 answer with
/// UNSUPPORTED_VERSION and the full list, so the client can pick a version.
pub fn api_versions_fallback(shard: &BrokerShard, correlation_id: i32) -> Reply {
    shard.counters.count_request(Some(ApiKey::ApiVersions));
    reply(encode_response(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &api_versions::response(kafka_protocol::ResponseError::UnsupportedVersion.code()),
    ))
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

fn reply(r: Result<Frame, FrameError>) -> Reply {
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

    fn header_bytes(api: i16, version: i16) -> BytesMut {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api)
            .with_request_api_version(version)
            .with_correlation_id(9)
            .encode(&mut buf, 1)
            .unwrap();
        buf
    }

    #[test]
    fn frames_are_sorted_before_any_handler_runs() {
        assert!(matches!(
            frame(Bytes::from_static(b"\x00")),
            Framed::Malformed(_)
        ));
        let unknown = header_bytes(30_000, 0).freeze();
        assert!(matches!(
            frame(unknown),
            Framed::Unsupported {
                api: None,
                correlation_id: 9
            }
        ));
        let too_new = header_bytes(ApiKey::Fetch as i16, 99).freeze();
        assert!(matches!(
            frame(too_new),
            Framed::Unsupported {
                api: Some(ApiKey::Fetch),
                correlation_id: 9
            }
        ));
        let versions = header_bytes(ApiKey::ApiVersions as i16, 99).freeze();
        assert!(matches!(
            frame(versions),
            Framed::ApiVersionsFallback { correlation_id: 9 }
        ));
        let mut produce = header_bytes(ApiKey::Produce as i16, 7);
        produce.extend_from_slice(b"\xff\xff");
        let Framed::Request { api, hdr, body } = frame(produce.freeze()) else {
            panic!("a Produce v7 frame is a request");
        };
        assert_eq!((api, hdr.request_api_version), (ApiKey::Produce, 7));
        // Two bytes are no Produce body: an error for the connection, not a panic.
        assert!(handlers::decode_request(api, 7, body).is_err());
    }
}
