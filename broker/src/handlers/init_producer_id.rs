//! InitProducerId (key 22), v0-5: a producer id and epoch for an idempotent producer. Ids come
//! from this broker's block, taken through the metadata log (`controller::allocate_producer_id`,
//! on shard 0), so they are unique across the cluster and restarts. Without a transactional
//! id, Kafka hands out a fresh id at epoch 0 every time, also to a producer that sends its
//! current id and epoch to bump it (KIP-360): so does Keel.
//!
//! Transactional producers (a `transactional_id`) need the transaction coordinator, which Keel
//! does not have yet: they get COORDINATOR_NOT_AVAILABLE with that message, so no client
//! believes it runs transactions.

use std::rc::Rc;

use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId, RequestHeader,
};
use kafka_protocol::ResponseError;
use tracing::warn;

use super::ApiSupport;
use crate::controller;
use crate::errors::code;
use crate::server::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport {
    key: ApiKey::InitProducerId,
    min: 0,
    max: 5,
};

fn error(e: ResponseError) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(code(e))
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if req.transactional_id.is_some() {
        return error(ResponseError::CoordinatorNotAvailable);
    }
    match controller::call(shard, controller::allocate_producer_id).await {
        Ok(Ok(id)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Ok(Err(e)) | Err(e) => {
            warn!(error = %e.message, "no producer id");
            InitProducerIdResponse::default()
                .with_error_code(e.code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}
