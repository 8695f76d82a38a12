//! Kafka's request and response frames: a 4-byte big-endian size, then a header (request
//! header v0-v2, response header v0-v1, as each API's version says), then the body.
//!
//! Answers are hostile: a size outside `4..=max` is refused before anything is allocated, the
//! correlation id must be the request's, and decoding runs inside `catch_unwind`, so a body
//! that would make a generated decoder panic is an error like any other malformed answer.

use std::fmt::Display;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::error::ClientError;

/// The whole request frame: size, header (at `Req`'s header version for `version`), body.
pub fn encode_request<Req: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    req: &Req,
) -> Result<BytesMut, ClientError> {
    let encode_err = |reason: String| ClientError::Encode {
        api,
        version,
        reason,
    };
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut buf = BytesMut::with_capacity(1024);
    buf.put_i32(0);
    header
        .encode(&mut buf, Req::header_version(version))
        .map_err(|e| encode_err(e.to_string()))?;
    req.encode(&mut buf, version)
        .map_err(|e| encode_err(e.to_string()))?;
    let size =
        i32::try_from(buf.len() - 4).map_err(|_| encode_err("request too large".to_string()))?;
    buf[0..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// A response frame's size from its 4-byte prefix: at least a correlation id, at most `max`.
pub fn frame_size(prefix: [u8; 4], max: usize) -> Result<usize, ClientError> {
    let size = i32::from_be_bytes(prefix);
    match usize::try_from(size) {
        Ok(s) if (4..=max).contains(&s) => Ok(s),
        _ => Err(ClientError::FrameSize { size, max }),
    }
}

/// The correlation id a response frame (after its size) starts with; `None` if shorter.
pub fn response_correlation_id(frame: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(0..4)?.try_into().ok()?))
}

/// Runs a decoder; an error or a panic is the reason the answer is refused.
fn guarded<T, E: Display>(f: impl FnOnce() -> Result<T, E>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err("decoder panicked".to_string()),
    }
}

/// Decodes a response frame (after its size) to request `correlation_id` of `api` at
/// `version`: the header, then the body.
pub fn decode_response<Resp: Decodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<Resp, ClientError> {
    let header_version = api.response_header_version(version);
    let header =
        guarded(|| ResponseHeader::decode(&mut body, header_version)).map_err(|reason| {
            ClientError::Header {
                api,
                version,
                reason,
            }
        })?;
    if header.correlation_id != correlation_id {
        return Err(ClientError::CorrelationId {
            expected: correlation_id,
            got: header.correlation_id,
        });
    }
    guarded(|| Resp::decode(&mut body, version)).map_err(|reason| ClientError::Decode {
        api,
        version,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{
        ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    };

    const MAX: usize = 1 << 20;

    /// A response frame as a broker writes it (after the size).
    fn answer<R: Encodable>(api: ApiKey, version: i16, correlation_id: i32, r: &R) -> Bytes {
        Bytes::from(crate::testing::response_frame(
            api,
            version,
            correlation_id,
            r,
        ))
        .slice(4..)
    }

    #[test]
    fn request_frames_carry_size_header_and_body() {
        for version in [0i16, 9, 12] {
            let frame = encode_request(
                ApiKey::Metadata,
                version,
                77,
                "keel-test",
                &MetadataRequest::default(),
            )
            .unwrap();
            let size = i32::from_be_bytes(frame[0..4].try_into().unwrap()) as usize;
            assert_eq!(size, frame.len() - 4);
            let mut body = frame.freeze().slice(4..);
            let header =
                RequestHeader::decode(&mut body, ApiKey::Metadata.request_header_version(version))
                    .unwrap();
            assert_eq!(
                (
                    header.request_api_key,
                    header.request_api_version,
                    header.correlation_id
                ),
                (ApiKey::Metadata as i16, version, 77)
            );
            assert_eq!(header.client_id.as_deref(), Some("keel-test"));
            MetadataRequest::decode(&mut body, version).unwrap();
            assert!(body.is_empty(), "v{version}: nothing after the body");
        }
    }

    #[test]
    fn a_good_answer_decodes_at_its_header_version() {
        // ApiVersions answers with header v0 even at flexible versions; Metadata v12 with v1.
        let r = ApiVersionsResponse::default().with_error_code(35);
        let got: ApiVersionsResponse = decode_response(
            ApiKey::ApiVersions,
            3,
            5,
            answer(ApiKey::ApiVersions, 3, 5, &r),
        )
        .unwrap();
        assert_eq!(got.error_code, 35);
        let m = MetadataResponse::default().with_controller_id(3.into());
        let got: MetadataResponse =
            decode_response(ApiKey::Metadata, 12, 6, answer(ApiKey::Metadata, 12, 6, &m)).unwrap();
        assert_eq!(got.controller_id.0, 3);
    }

    #[test]
    fn frame_sizes_outside_the_bound_are_refused() {
        for size in [i32::MIN, -1, 0, 3, MAX as i32 + 1, i32::MAX] {
            assert!(
                matches!(
                    frame_size(size.to_be_bytes(), MAX),
                    Err(ClientError::FrameSize { .. })
                ),
                "{size}"
            );
        }
        assert_eq!(frame_size(4i32.to_be_bytes(), MAX).unwrap(), 4);
        assert_eq!(frame_size((MAX as i32).to_be_bytes(), MAX).unwrap(), MAX);
    }

    #[test]
    fn a_wrong_correlation_id_is_refused() {
        let r = ApiVersionsResponse::default();
        let got = decode_response::<ApiVersionsResponse>(
            ApiKey::ApiVersions,
            0,
            6,
            answer(ApiKey::ApiVersions, 0, 5, &r),
        );
        assert!(
            matches!(
                got,
                Err(ClientError::CorrelationId {
                    expected: 6,
                    got: 5
                })
            ),
            "{got:?}"
        );
        assert_eq!(response_correlation_id(&[0, 0, 0, 5, 1]), Some(5));
        assert_eq!(response_correlation_id(&[0, 0, 5]), None);
    }

    #[test]
    fn truncated_and_garbage_answers_are_errors_not_panics() {
        let m = MetadataResponse::default()
            .with_cluster_id(Some(StrBytes::from_static_str("c")))
            .with_brokers(vec![Default::default(); 3])
            .with_topics(vec![Default::default(); 2]);
        let good = answer(ApiKey::Metadata, 12, 5, &m);
        assert!(decode_response::<MetadataResponse>(ApiKey::Metadata, 12, 5, good.clone()).is_ok());
        for cut in 0..good.len() {
            let got =
                decode_response::<MetadataResponse>(ApiKey::Metadata, 12, 5, good.slice(..cut));
            assert!(got.is_err(), "cut at {cut}");
        }
        for fill in [0x00u8, 0x7f, 0x80, 0xff] {
            for len in 0..96 {
                let garbage = Bytes::from(vec![fill; len]);
                let _ = decode_response::<MetadataResponse>(ApiKey::Metadata, 12, 0, garbage);
                let garbage = Bytes::from(vec![fill; len]);
                let _ = decode_response::<ApiVersionsResponse>(ApiKey::ApiVersions, 3, 0, garbage);
            }
        }
        // An ApiVersions request is not an answer to anything.
        let frame = encode_request(
            ApiKey::ApiVersions,
            3,
            1,
            "x",
            &ApiVersionsRequest::default(),
        )
        .unwrap()
        .freeze();
        let _ = decode_response::<MetadataResponse>(ApiKey::Metadata, 12, 1, frame.slice(4..));
    }
}
