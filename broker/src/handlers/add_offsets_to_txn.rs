//! AddOffsetsToTxn (key 25), v0-3: a transactional producer adds a group's offsets to its
//! transaction (before TxnOffsetCommit): the coordinator adds the group's `__consumer_offsets`
//! partition to the transaction, so it gets the transaction's marker.
//!
//! Authorization, as Kafka's, before anything else: WRITE on the transactional id, else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED; READ on the group, else GROUP_AUTHORIZATION_FAILED.

use std::rc::Rc;

use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::ApiSupport;
use crate::errors::code;
use crate::group;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator::{self, error_of, op};
use keel_auth::acl::Operation;
use keel_coordinator::txn::transaction_coordinator::producer_fenced_compat;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AddOffsetsToTxn, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: AddOffsetsToTxnRequest,
    session: &Session,
) -> AddOffsetsToTxnResponse {
    let authz = Authz::of(shard, session);
    let group_id = req.group_id.0.to_string();
    let txn_id = req.transactional_id.0.to_string();
    let refusal = if !authz.transactional_id(Operation::Write, &txn_id) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !authz.group(Operation::Read, &group_id) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    if let Some(e) = refusal {
        return AddOffsetsToTxnResponse::default().with_error_code(code(e));
    }
    if !keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(code(ResponseError::InvalidGroupId));
    }
    if group::ensure_offsets_topic(shard).await.is_err() {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(code(ResponseError::CoordinatorNotAvailable));
    }
    let offsets_partition = group::group_partition(shard, &group_id);
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    let id = txn_id.clone();
    let answer = coordinator::on_coordinator(
        ApiKey::AddOffsetsToTxn,
        shard,
        &txn_id,
        move |s, p| async move {
            Ok(coordinator::run(&s, p, |c, now| {
                op(c.add_offsets(&id, pid, epoch, offsets_partition, now))
            })
            .await)
        },
    )
    .await;
    let e = error_of(answer.and_then(|a| a));
    AddOffsetsToTxnResponse::default().with_error_code(
        (producer_fenced_compat(ApiKey::AddOffsetsToTxn as i16, hdr.request_api_version, e)).code(),
    )
}
