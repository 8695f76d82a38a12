//! InitProducerId (key 22), v0-5: a producer id and epoch for an idempotent producer. Ids come
//! from this broker's block, taken through the metadata log (`controller::allocate_producer_id`,
//! on shard 0), so they are unique across the cluster and restarts. Without a transactional
//! id, Kafka hands out a fresh id at epoch 0 every time, also to a producer that sends its
//! current id and epoch to bump it (KIP-360): so does Keel.
//!
//! With a `transactional_id`, the transaction's coordinator answers (`txn::coordinator`): a new
//! producer id the first time, else the same id at the next epoch (fencing the previous
//! producer, and aborting its open transaction first: CONCURRENT_TRANSACTIONS until that is
//! done); v3+ producers send the id and epoch they have, to bump after an error.
//!
//! Authorization, as Kafka's, before an id is taken or the coordinator asked: WRITE on the
//! transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; without one, IDEMPOTENT_WRITE
//! on the cluster or (KIP-679) WRITE on some topic, else CLUSTER_AUTHORIZATION_FAILED.

use std::rc::Rc;

use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId, RequestHeader,
};
use kafka_protocol::ResponseError;
use tracing::warn;

use super::ApiSupport;
use crate::controller;
use crate::errors::code;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator;
use keel_auth::acl::{Operation, ResourceType};
use keel_coordinator::txn::transaction_coordinator::{producer_fenced_compat, ProducerIdAndEpoch};

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::InitProducerId, 0, 5);

fn error(e: ResponseError) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(code(e))
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: InitProducerIdRequest,
    session: &Session,
) -> InitProducerIdResponse {
    let authz = Authz::of(shard, session);
    if let Some(txn_id) = req.transactional_id {
        let txn_id = txn_id.0.to_string();
        // Before the id is checked, as Kafka authorizes before its coordinator validates.
        if !authz.transactional_id(Operation::Write, &txn_id) {
            return error(ResponseError::TransactionalIdAuthorizationFailed);
        }
        if txn_id.is_empty() {
            return error(ResponseError::InvalidRequest);
        }
        let expected = (hdr.request_api_version >= 3 && req.producer_id.0 >= 0).then_some(
            ProducerIdAndEpoch {
                producer_id: req.producer_id.0,
                producer_epoch: req.producer_epoch,
            },
        );
        let timeout = req.transaction_timeout_ms;
        let id = txn_id.clone();
        let answer =
            coordinator::on_coordinator(ApiKey::InitProducerId, shard, &txn_id, move |s, p| {
                coordinator::init_producer_id(s, p, id, timeout, expected)
            })
            .await;
        let r = match answer {
            Ok(r) => r,
            Err(e) => {
                return InitProducerIdResponse::default()
                    .with_error_code(e.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
            }
        };
        return InitProducerIdResponse::default()
            .with_error_code(
                (producer_fenced_compat(
                    ApiKey::InitProducerId as i16,
                    hdr.request_api_version,
                    r.error,
                ))
                .code(),
            )
            .with_producer_id(ProducerId(r.producer_id))
            .with_producer_epoch(r.producer_epoch);
    }
    if !may_write_idempotently(&authz) {
        return error(ResponseError::ClusterAuthorizationFailed);
    }
    match controller::call(shard, controller::allocate_producer_id).await {
        Ok(Ok(id)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Ok(Err(e)) | Err(e) => {
            warn!(error = %e.message, "no producer id");
            InitProducerIdResponse::default()
                .with_error_code(e.code.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}

/// KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on any
/// topic (Kafka's `authorizeByResourceType`, so a prefixed ALLOW for topics not created yet
/// counts).
fn may_write_idempotently(authz: &Authz<'_>) -> bool {
    authz.cluster(Operation::IdempotentWrite) || authz.any(Operation::Write, ResourceType::Topic)
}
