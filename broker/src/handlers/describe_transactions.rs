//! DescribeTransactions (key 65), v0: the state of transactional ids (state, producer id and
//! epoch, timeout, start time, the partitions of the open transaction), each answered by its
//! coordinator (`txn::coordinator::describe`). An id this broker does not coordinate gets
//! NOT_COORDINATOR; an unknown one TRANSACTIONAL_ID_NOT_FOUND.
//!
//! As in Kafka, an id the session may not DESCRIBE gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED
//! (its coordinator is not asked), and the answer names only the topics the session may
//! DESCRIBE.

use std::rc::Rc;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, RequestHeader,
    TransactionalId,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, ApiSupport};
use crate::coordination::parking::join_all;
use crate::errors::NONE;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator;
use keel_auth::acl::Operation;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeTransactions, 0, 0);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeTransactionsRequest,
    session: &Session,
) -> DescribeTransactionsResponse {
    let authz = Authz::of(shard, session);
    let asks = req.transactional_ids.into_iter().map(|id| {
        let shard = shard.clone();
        let id = id.0.to_string();
        let allowed = authz.transactional_id(Operation::Describe, &id);
        async move {
            if !allowed {
                let refused = ErrorCode::of(ResponseError::TransactionalIdAuthorizationFailed);
                return (id, Err(refused));
            }
            let tid = id.clone();
            let answer = coordinator::on_coordinator(
                ApiKey::DescribeTransactions,
                &shard,
                &id,
                move |s, p| coordinator::describe(s, p, tid),
            )
            .await;
            (id, answer)
        }
    });
    let states = join_all(asks.collect())
        .await
        .into_iter()
        .map(|(id, answer)| {
            let t =
                TransactionState::default().with_transactional_id(TransactionalId(str_bytes(id)));
            match answer {
                Err(e) => t.with_error_code(e.code()).with_producer_id(ProducerId(-1)),
                Ok(d) => t
                    .with_error_code(NONE)
                    .with_transaction_state(str_bytes(d.state.name()))
                    .with_transaction_timeout_ms(d.transaction_timeout_ms)
                    .with_transaction_start_time_ms(d.transaction_start_time_ms)
                    .with_producer_id(ProducerId(d.producer_id))
                    .with_producer_epoch(d.producer_epoch)
                    .with_topics(
                        d.topics
                            .into_iter()
                            .filter(|(topic, _)| authz.topic(Operation::Describe, topic))
                            .map(|(topic, partitions)| {
                                TopicData::default()
                                    .with_topic(topic_name(&topic))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
