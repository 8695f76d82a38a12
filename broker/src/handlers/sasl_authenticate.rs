//! SaslAuthenticate (key 36, v0-2) outside authentication: on a PLAINTEXT listener, or again
//! on an authenticated connection (re-authentication, KIP-368, is not supported). Kafka
//! answers ILLEGAL_SASL_STATE; the exchange itself is [`crate::frontend::sasl`]'s.

use std::rc::Rc;

use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::security::Session;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::SaslAuthenticate, 0, 2);

pub async fn handle(
    _shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    _req: SaslAuthenticateRequest,
    _session: &Session,
) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(ResponseError::IllegalSaslState.code())
        .with_error_message(Some(str_bytes(
            "SaslAuthenticate outside a SASL handshake (a PLAINTEXT listener, or a connection \
             already authenticated)",
        )))
}
