//! Kafka framing and headers: the edge where bytes from the socket become typed requests.
//!
//! Every byte here is hostile. A frame is a 4-byte big-endian size and that many bytes; the
//! size is bounded by `socket.request.max.bytes`. Decoding uses `kafka-protocol` at the
//! version the client named, inside `catch_unwind` so that a decoder bug on crafted input
//! closes one connection instead of the shard.

use std::any::Any;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, FetchResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes is outside 8..={max} (socket.request.max.bytes)")]
    BadSize { size: i64, max: usize },
    #[error("malformed request header: {0}")]
    Header(String),
    /// A request refused in a way Kafka answers by closing the connection (an unauthorized
    /// acks=0 produce: there is no answer to carry the error).
    #[error("{0}")]
    Refused(String),
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

/// A response frame as the buffers to send, in order: its size prefix, header and body. The
/// record batches of a Fetch answer are not copied into it: each batch run of at least
/// [`SHARED_MIN`] bytes is a part of its own, the stored buffer itself, and the connection
/// sends all the parts with one `sendmsg`.
#[derive(Debug, Clone)]
pub struct Frame {
    first: Bytes,
    rest: Vec<Bytes>,
}

impl Frame {
    /// Bytes in the frame, its size prefix included.
    pub fn len(&self) -> usize {
        self.first.len() + self.rest.iter().map(Bytes::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffers, in the order they are sent.
    pub fn parts(&self) -> impl Iterator<Item = &Bytes> {
        std::iter::once(&self.first).chain(&self.rest)
    }

    /// The frame as one buffer (copied together when it has several parts).
    pub fn to_bytes(&self) -> Bytes {
        if self.rest.is_empty() {
            return self.first.clone();
        }
        let mut all = BytesMut::with_capacity(self.len());
        for part in self.parts() {
            all.extend_from_slice(part);
        }
        all.freeze()
    }
}

impl From<Bytes> for Frame {
    fn from(first: Bytes) -> Self {
        Frame {
            first,
            rest: Vec::new(),
        }
    }
}

/// Record batch runs shorter than this are copied into the frame: another buffer in the
/// `sendmsg` costs more than copying a little.
pub const SHARED_MIN: usize = 1024;

/// Encodes a whole response frame (size prefix, header, body), sized before it is written so
/// that the buffer is allocated once. A Fetch answer's records are referenced, not copied
/// (see [`Frame`]).
pub fn encode_response<T: Encodable + HeaderVersion + Any>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Frame, FrameError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = T::header_version(version);
    let err = |reason: String| FrameError::Encode {
        api,
        version,
        reason,
    };
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + body.compute_size(version)?))
        .map_err(|e| err(e.to_string()))?;
    let prefix = i32::try_from(size).map_err(|_| err(format!("{size} bytes is too long")))?;
    let shared = shared_records(body);
    let shared_len: usize = shared.iter().map(Bytes::len).sum();
    let mut buf = PartsBuf {
        cur: BytesMut::with_capacity(4 + size.saturating_sub(shared_len)),
        parts: Vec::new(),
        shared: &shared,
        next: 0,
        done: 0,
    };
    buf.put_i32(prefix);
    header
        .encode(&mut buf, header_version)
        .map_err(|e| err(e.to_string()))?;
    body.encode(&mut buf, version)
        .map_err(|e| err(e.to_string()))?;
    let frame = buf.finish();
    if frame.len() != size + 4 {
        return Err(err(format!(
            "{} bytes encoded, {size} computed",
            frame.len() - 4
        )));
    }
    Ok(frame)
}

/// The record batch runs of a Fetch answer worth sending from where they are stored, in the
/// order the encoder writes them; none for other answers.
fn shared_records(body: &dyn Any) -> Vec<Bytes> {
    let Some(fetch) = body.downcast_ref::<FetchResponse>() else {
        return Vec::new();
    };
    fetch
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_ref())
        .filter(|r| r.len() >= SHARED_MIN)
        .cloned()
        .collect()
}

/// The encoder's buffer: bytes are written to `cur`; a slice that is one of `shared` (the same
/// address and length, in order) ends `cur`'s part and becomes a part of its own.
struct PartsBuf<'a> {
    cur: BytesMut,
    parts: Vec<Bytes>,
    shared: &'a [Bytes],
    /// The first of `shared` not yet met.
    next: usize,
    /// Bytes in `parts`.
    done: usize,
}

impl PartsBuf<'_> {
    fn shared_at(&mut self, src: &[u8]) -> Option<Bytes> {
        let i = self.shared[self.next..]
            .iter()
            .position(|s| s.as_ptr() == src.as_ptr() && s.len() == src.len())?;
        self.next += i + 1;
        Some(self.shared[self.next - 1].clone())
    }

    fn push(&mut self, part: Bytes) {
        self.done += part.len();
        self.parts.push(part);
    }

    fn finish(mut self) -> Frame {
        if self.parts.is_empty() {
            return Frame::from(self.cur.freeze());
        }
        if !self.cur.is_empty() {
            let last = self.cur.split().freeze();
            self.push(last);
        }
        let mut parts = self.parts.into_iter();
        let first = parts.next().unwrap_or_default();
        Frame {
            first,
            rest: parts.collect(),
        }
    }
}

// SAFETY: every method but `put_slice` forwards to `cur`, a `BytesMut`, so its contract holds;
// `put_slice` either copies through `cur` or appends whole buffers to `parts`.
unsafe impl BufMut for PartsBuf<'_> {
    fn remaining_mut(&self) -> usize {
        self.cur.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's promise for `self` is the same promise for `cur`.
        unsafe { self.cur.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut bytes::buf::UninitSlice {
        self.cur.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if self.next < self.shared.len() {
            if let Some(part) = self.shared_at(src) {
                if !self.cur.is_empty() {
                    let before = self.cur.split().freeze();
                    self.push(before);
                }
                self.push(part);
                return;
            }
        }
        self.cur.extend_from_slice(src);
    }
}

// Message encoders only append; `seek` and `range` (for record batch encoding, which never
// writes into a response) work within the current part.
impl ByteBufMut for PartsBuf<'_> {
    fn offset(&self) -> usize {
        self.done + self.cur.len()
    }

    fn seek(&mut self, offset: usize) {
        self.cur.resize(offset.saturating_sub(self.done), 0);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        let start = r.start.saturating_sub(self.done);
        let end = r.end.saturating_sub(self.done);
        &mut self.cur[start..end]
    }
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

    /// A Fetch answer's long record runs are parts of their own, the very buffers it held; short
    /// ones are copied; the parts together are byte for byte what a plain encoding gives.
    #[test]
    fn fetch_records_are_referenced_not_copied() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let long_a = Bytes::from(vec![b'a'; SHARED_MIN]);
        let short = Bytes::from(vec![b'b'; SHARED_MIN - 1]);
        let long_c = Bytes::from(vec![b'c'; 3 * SHARED_MIN]);
        let part = |i: i32, r: Option<&Bytes>| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(10 + i as i64)
                .with_records(r.cloned())
        };
        let resp = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default()
                .with_topic(topic_name("t1"))
                .with_partitions(vec![part(0, Some(&long_a)), part(1, Some(&short))]),
            FetchableTopicResponse::default()
                .with_topic(topic_name("t2"))
                .with_partitions(vec![part(0, None), part(1, Some(&long_c))]),
        ]);
        for version in [4, 12, 16] {
            let frame = encode_response(ApiKey::Fetch, version, 5, &resp).unwrap();
            let parts: Vec<&Bytes> = frame.parts().collect();
            // Flexible versions end with tagged fields after the last records; v4 ends with them.
            let tail = usize::from(version >= 12);
            assert_eq!(
                parts.len(),
                4 + tail,
                "v{version}: head, a, middle, c, tail"
            );
            assert_eq!(parts[1].as_ptr(), long_a.as_ptr());
            assert_eq!(parts[3].as_ptr(), long_c.as_ptr());
            assert_eq!(parts[3].len(), long_c.len());

            let mut plain = BytesMut::new();
            plain.put_i32(0);
            ResponseHeader::default()
                .with_correlation_id(5)
                .encode(&mut plain, FetchResponse::header_version(version))
                .unwrap();
            resp.encode(&mut plain, version).unwrap();
            let size = (plain.len() - 4) as i32;
            plain[..4].copy_from_slice(&size.to_be_bytes());
            assert_eq!(frame.to_bytes(), plain.freeze(), "v{version}");
            assert_eq!(frame.len(), frame.to_bytes().len());
        }
        // Other answers stay one buffer.
        let r = ApiVersionsResponse::default();
        assert_eq!(
            encode_response(ApiKey::ApiVersions, 3, 1, &r)
                .unwrap()
                .parts()
                .count(),
            1
        );
    }

    #[test]
    fn response_frame_has_size_and_correlation_id() {
        let r = ApiVersionsResponse::default();
        let f = encode_response(ApiKey::ApiVersions, 3, 77, &r)
            .unwrap()
            .to_bytes();
        let size = i32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        assert_eq!(size, f.len() - 4);
        assert_eq!(i32::from_be_bytes([f[4], f[5], f[6], f[7]]), 77);
    }
}
