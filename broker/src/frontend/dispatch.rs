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
    let hdr: RequestHeader = match decode_header(api, prefix.api_version, &mut frame) {
        Ok(h) => h,
        Err(e) => return Reply::Close(e),
    };
    match handlers::call(&shard, &hdr, api, &mut frame, &client_host).await {
        Ok(Some(answer)) => Reply::Frame(answer),
        Ok(None) => Reply::None,
        Err(e) => Reply::Close(e),
    }
}

fn reply(r: Result<Bytes, FrameError>) -> Reply {
    match r {
        Ok(f) => Reply::Frame(f),
        Err(e) => Reply::Close(e),
    }
}
