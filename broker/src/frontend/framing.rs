//! Kafka framing and headers: the edge where bytes from the socket become typed requests.
//!
//! Every byte here is hostile. A frame is a 4-byte big-endian size and that many bytes; the
//! size is bounded by `socket.request.max.bytes`. Decoding uses `kafka-protocol` at the
//! version the client named, inside `catch_unwind` so that a decoder bug on crafted input
//! closes one connection instead of the shard.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes is outside 8..={max} (socket.request.max.bytes)")]
    BadSize { size: i64, max: usize },
    #[error("malformed request header: {0}")]
    Header(String),
    #[error("malformed {api:?} v{version} request: {reason}")]
    Body {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("encoding {api:?} v{version} response failed: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// Checks a frame size read off the wire.
pub fn check_frame_size(size: i32, max: usize) -> Result<usize, FrameError> {
    if size < 8 || size as i64 > max as i64 {
        return Err(FrameError::BadSize {
            size: size as i64,
            max,
        });
    }
    Ok(size as usize)
}

/// The fixed start of every request header: api key, api version, correlation id.
#[derive(Debug, Clone, Copy)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

pub fn peek_prefix(frame: &[u8]) -> Option<HeaderPrefix> {
    if frame.len() < 8 {
        return None;
    }
    Some(HeaderPrefix {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        api_version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    })
}

fn guarded<T>(f: impl FnOnce() -> anyhow::Result<T>) -> Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err("decoder panicked".to_string()),
    }
}

/// Decodes the request header of a known API; `frame` is advanced past it.
pub fn decode_header(
    api: ApiKey,
    version: i16,
    frame: &mut Bytes,
) -> Result<RequestHeader, FrameError> {
    let header_version = api.request_header_version(version);
    guarded(|| RequestHeader::decode(frame, header_version)).map_err(FrameError::Header)
}

/// Decodes a request body at `version`.
pub fn decode_body<T: Decodable>(
    api: ApiKey,
    version: i16,
    body: &mut Bytes,
) -> Result<T, FrameError> {
    guarded(|| T::decode(body, version)).map_err(|reason| FrameError::Body {
        api,
        version,
        reason,
    })
}

/// Encodes a whole response frame (size prefix, header, body).
pub fn encode_response<T: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, FrameError> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let err = |reason: String| FrameError::Encode {
        api,
        version,
        reason,
    };
    header
        .encode(&mut buf, T::header_version(version))
        .map_err(|e| err(e.to_string()))?;
    body.encode(&mut buf, version)
        .map_err(|e| err(e.to_string()))?;
    let size = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// A bare error answer for a request Keel cannot decode at all (unknown API key, or a
/// version outside what Keel supports): v0 response header and an UNSUPPORTED_VERSION error
/// code. The connection is closed after it, as Kafka does.
pub fn unsupported_frame(correlation_id: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(10);
    buf.put_i32(6);
    buf.put_i32(correlation_id);
    buf.put_i16(kafka_protocol::ResponseError::UnsupportedVersion.code());
    buf.freeze()
}

/// Topic name as a `TopicName` for responses.
pub fn topic_name(s: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(
        s.to_string(),
    ))
}

pub fn str_bytes(s: impl Into<String>) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ApiVersionsResponse;

    #[test]
    fn frame_bounds() {
        assert!(check_frame_size(-1, 100).is_err());
        assert!(check_frame_size(7, 100).is_err());
        assert!(check_frame_size(101, 100).is_err());
        assert_eq!(check_frame_size(100, 100).unwrap(), 100);
    }

    #[test]
    fn garbage_header_is_an_error_not_a_panic() {
        for len in 0..64 {
            let mut b = Bytes::from(vec![0xffu8; len]);
            let _ = decode_header(ApiKey::Metadata, 12, &mut b);
        }
        let mut b = Bytes::from_static(&[0, 0, 0, 1]);
        assert!(decode_header(ApiKey::Produce, 9, &mut b).is_err());
    }

    #[test]
    fn response_frame_has_size_and_correlation_id() {
        let r = ApiVersionsResponse::default();
        let f = encode_response(ApiKey::ApiVersions, 3, 77, &r).unwrap();
        let size = i32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        assert_eq!(size, f.len() - 4);
        assert_eq!(i32::from_be_bytes([f[4], f[5], f[6], f[7]]), 77);
    }
}
