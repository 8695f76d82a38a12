//! ApiVersions (key 18), v0-4: the APIs and versions Keel answers. Built from each
//! handler's declared range. No feature tagged fields are sent: Debian's kcat (librdkafka
//! 2.0.2) mis-reads them, and Kafka leaves them out when empty too.

use std::rc::Rc;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};

use super::{ApiSupport, SUPPORTED};
use crate::security::Session;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ApiVersions, 0, 4);

pub fn response(error_code: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = SUPPORTED
        .iter()
        .map(|s| {
            let mut v = ApiVersion::default();
            v.api_key = s.key as i16;
            v.min_version = s.listed_min;
            v.max_version = s.max;
            v
        })
        .collect();
    r
}

pub async fn handle(
    _shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    _req: ApiVersionsRequest,
    _session: &Session,
) -> ApiVersionsResponse {
    response(0)
}
