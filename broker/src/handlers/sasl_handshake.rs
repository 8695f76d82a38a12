//! SaslHandshake (key 17, v0-1) outside authentication: on a PLAINTEXT listener, or again on
//! an authenticated connection. Kafka answers ILLEGAL_SASL_STATE (its `KafkaApis`); the
//! handshake itself is [`crate::frontend::sasl`]'s.

use std::rc::Rc;

use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::ResponseError;

use super::ApiSupport;
use crate::security::Session;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::SaslHandshake, 0, 1);

pub async fn handle(
    _shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    _req: SaslHandshakeRequest,
    _session: &Session,
) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code())
}
