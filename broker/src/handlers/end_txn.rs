//! EndTxn (key 26), v0-3: a transactional producer commits or aborts its transaction. The
//! coordinator writes its decision (PrepareCommit / PrepareAbort) and answers; the markers go
//! to every partition of the transaction afterwards, and the transaction completes once they
//! are written (`txn::coordinator`). v4+ (transactions V2, KIP-890) is not offered.
//! WRITE on the transactional id is required, as in Kafka (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, EndTxnRequest, EndTxnResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::ApiSupport;
use crate::errors::code;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator::{self, error_of, op};
use keel_auth::acl::Operation;
use keel_coordinator::txn::transaction_coordinator::producer_fenced_compat;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::EndTxn, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: EndTxnRequest,
    session: &Session,
) -> EndTxnResponse {
    let txn_id = req.transactional_id.0.to_string();
    if !Authz::of(shard, session).transactional_id(Operation::Write, &txn_id) {
        return EndTxnResponse::default()
            .with_error_code(code(ResponseError::TransactionalIdAuthorizationFailed));
    }
    let (pid, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let id = txn_id.clone();
    let answer =
        coordinator::on_coordinator(ApiKey::EndTxn, shard, &txn_id, move |s, p| async move {
            Ok(coordinator::run(&s, p, |c, now| op(c.end_txn(&id, pid, epoch, commit, now))).await)
        })
        .await;
    let e = error_of(answer.and_then(|a| a));
    EndTxnResponse::default().with_error_code(
        (producer_fenced_compat(ApiKey::EndTxn as i16, hdr.request_api_version, e)).code(),
    )
}
