//! AddPartitionsToTxn (key 24), v0-3: a transactional producer adds partitions to its open
//! transaction (opening one) before producing to them. Answered by the transaction's
//! coordinator once the new state is written (`txn::coordinator`). A partition that does not
//! exist gets UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka
//! answers; otherwise every partition carries the coordinator's answer. v4+ (batched, for
//! brokers verifying transactions, KIP-890) is not offered.
//!
//! Authorization, as Kafka's, before the coordinator is asked: WRITE on the transactional id,
//! else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition; WRITE on each topic, else
//! TOPIC_AUTHORIZATION_FAILED for its partitions, and then (as for an unknown partition) none
//! is added: the others get OPERATION_NOT_ATTEMPTED. (v4+, were it offered, would need
//! CLUSTER_ACTION on the cluster instead.)

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{topic_name, ApiSupport};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator::{self, error_of, op};
use keel_auth::acl::Operation;
use keel_coordinator::txn::transaction_coordinator::producer_fenced_compat;
use keel_vocab::ErrorCode;
use keel_vocab::TopicPartition;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AddPartitionsToTxn, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: AddPartitionsToTxnRequest,
    session: &Session,
) -> AddPartitionsToTxnResponse {
    let authz = Authz::of(shard, session);
    let version = hdr.request_api_version;
    let txn_id = req.v3_and_below_transactional_id.0.to_string();
    let wanted: Vec<(String, Vec<i32>)> = req
        .v3_and_below_topics
        .iter()
        .map(|t| (t.name.0.to_string(), t.partitions.clone()))
        .collect();
    let image = shard.image();
    let exists = |t: &str, p: i32| image.partition(t, p).is_some();
    let txn_allowed = authz.transactional_id(Operation::Write, &txn_id);
    // Topics the session may not WRITE (checked only once the transactional id is allowed).
    let refused: Vec<&str> = wanted
        .iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| txn_allowed && !authz.topic(Operation::Write, t))
        .collect();
    let any_unknown = wanted
        .iter()
        .any(|(t, ps)| ps.iter().any(|&p| !exists(t, p)));
    // The coordinator's answer for every partition, when they all exist and may be written.
    let coordinator_error = if !txn_allowed {
        Some(ErrorCode::of(
            ResponseError::TransactionalIdAuthorizationFailed,
        ))
    } else if any_unknown || !refused.is_empty() {
        None
    } else {
        let (pid, epoch) = (
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
        );
        let partitions: Vec<TopicPartition> = wanted
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter().map(|&p| TopicPartition {
                    topic: t.clone(),
                    partition: p,
                })
            })
            .collect();
        let id = txn_id.clone();
        let answer = coordinator::on_coordinator(
            ApiKey::AddPartitionsToTxn,
            shard,
            &txn_id,
            move |s, p| async move {
                Ok(coordinator::run(&s, p, |c, now| {
                    op(c.add_partitions(&id, pid, epoch, &partitions, now))
                })
                .await)
            },
        )
        .await;
        Some(producer_fenced_compat(
            ApiKey::AddPartitionsToTxn as i16,
            version,
            error_of(answer.and_then(|a| a)),
        ))
    };
    let error_for = |t: &str, p: i32| match coordinator_error {
        Some(e) => e,
        None if refused.contains(&t) => ErrorCode::of(ResponseError::TopicAuthorizationFailed),
        None if exists(t, p) => ErrorCode::of(ResponseError::OperationNotAttempted),
        None => ErrorCode::of(ResponseError::UnknownTopicOrPartition),
    };
    let results = wanted
        .iter()
        .map(|(t, ps)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name(t))
                .with_results_by_partition(
                    ps.iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code((error_for(t, p)).code())
                        })
                        .collect(),
                )
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}
