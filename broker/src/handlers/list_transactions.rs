//! ListTransactions (key 66), v0-1: the transactional ids this broker coordinates, gathered
//! from every shard's coordinators, filtered by state (unknown state names are listed back in
//! `unknown_state_filters`, as Kafka does) and producer id. v1's duration filter keeps the
//! transactions open longer than it (milliseconds; -1 = no filter). Only the ids the session
//! may DESCRIBE are listed, without an error, as in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ApiKey, ListTransactionsRequest, ListTransactionsResponse, ProducerId, RequestHeader,
    TransactionalId,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::coordination::parking::join_all;
use crate::errors::{code, NONE};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator;
use keel_auth::acl::Operation;
use keel_coordinator::txn::transaction_coordinator::TxnState;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ListTransactions, 0, 1);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: ListTransactionsRequest,
    session: &Session,
) -> ListTransactionsResponse {
    let mut states = Vec::new();
    let mut unknown = Vec::new();
    for name in &req.state_filters {
        match TxnState::from_name(name) {
            Some(s) => states.push(s),
            None => unknown.push(name.clone()),
        }
    }
    if !unknown.is_empty() && states.is_empty() {
        // Only unknown states asked for: nothing can match.
        return ListTransactionsResponse::default().with_unknown_state_filters(unknown);
    }
    let pids: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let duration = if hdr.request_api_version >= 1 {
        req.duration_filter
    } else {
        -1
    };
    let asks = (0..shard.count).map(|target| {
        let shard = shard.clone();
        let (states, pids) = (states.clone(), pids.clone());
        async move {
            let work = move |s: Rc<BrokerShard>| async move {
                coordinator::list_local(&s, &states, &pids, duration)
            };
            if target == shard.id {
                return Some(work(shard.clone()).await);
            }
            shard.mesh.call(target, work).await.ok()
        }
    });
    let mut error = NONE;
    let mut listed = Vec::new();
    for answer in join_all(asks.collect()).await {
        match answer {
            Some((e, l)) => {
                if e != ErrorCode::from_code(NONE) {
                    error = e.code();
                }
                listed.extend(l);
            }
            None => error = code(ResponseError::CoordinatorNotAvailable),
        }
    }
    let authz = Authz::of(shard, session);
    listed.retain(|t| authz.transactional_id(Operation::Describe, &t.transactional_id));
    listed.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    ListTransactionsResponse::default()
        .with_error_code(error)
        .with_unknown_state_filters(unknown)
        .with_transaction_states(
            listed
                .into_iter()
                .map(|t| {
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(str_bytes(t.transactional_id)))
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_transaction_state(str_bytes(t.state.name()))
                })
                .collect(),
        )
}
