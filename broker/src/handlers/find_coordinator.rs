//! FindCoordinator (key 10), v0-6: which broker coordinates a group. Group `g` is coordinated
//! by the leader of partition `abs(java_hashcode(g)) % partitions` of `__consumer_offsets`
//! (see `group`); the first FindCoordinator of the cluster creates that topic. v4 asks for
//! several keys at once (`coordinator_keys`) and answers each in `coordinators`; v5 (may answer
//! TRANSACTION_ABORTABLE) and v6 (share-group keys, KIP-932) have v4's fields.
//!
//! Key type 0 is a group; 1 a transactional id, coordinated by the leader of its partition of
//! `__transaction_state` (same hash; created by the first such lookup); any other key type
//! (2, a share group: Keel has none) is INVALID_REQUEST.
//!
//! Authorization, as Kafka's, per key and before the coordinator's topic is looked up or
//! created: DESCRIBE on the group (key type 0), else GROUP_AUTHORIZATION_FAILED; DESCRIBE on
//! the transactional id (1), else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::errors::{code, NONE};
use crate::group::{self, OFFSETS_TOPIC};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn;
use keel_auth::acl::Operation;
use keel_coordinator::TRANSACTION_STATE_TOPIC;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::FindCoordinator, 0, 6);

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// The answer for one key.
struct Found {
    node_id: i32,
    host: String,
    port: i32,
    error: i16,
    message: Option<String>,
}

fn not_found(e: ResponseError, message: impl Into<String>) -> Found {
    Found {
        node_id: -1,
        host: String::new(),
        port: -1,
        error: code(e),
        message: Some(message.into()),
    }
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: FindCoordinatorRequest,
    session: &Session,
) -> FindCoordinatorResponse {
    let listener: &str = &session.listener;
    let version = hdr.request_api_version;
    let keys: Vec<String> = if version >= 4 {
        req.coordinator_keys.iter().map(|k| k.to_string()).collect()
    } else {
        vec![req.key.to_string()]
    };
    let authz = Authz::of(shard, session);
    let refusals: Vec<Option<Found>> = keys
        .iter()
        .map(|key| refusal(&authz, req.key_type, key))
        .collect();
    let allowed: Vec<String> = keys
        .iter()
        .zip(&refusals)
        .filter(|(_, r)| r.is_none())
        .map(|(key, _)| key.clone())
        .collect();
    // Every key refused: the coordinator topics are not even looked up.
    let looked_up = if !keys.is_empty() && allowed.is_empty() {
        Vec::new()
    } else {
        find(shard, req.key_type, &allowed, listener).await
    };
    let mut looked_up = looked_up.into_iter();
    let found: Vec<Found> = refusals
        .into_iter()
        .map(|r| {
            r.or_else(|| looked_up.next())
                .unwrap_or_else(|| not_found(ResponseError::UnknownServerError, "no answer"))
        })
        .collect();
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = keys
            .into_iter()
            .zip(found)
            .map(|(key, f)| {
                Coordinator::default()
                    .with_key(str_bytes(key))
                    .with_node_id(BrokerId(f.node_id))
                    .with_host(str_bytes(f.host))
                    .with_port(f.port)
                    .with_error_code(f.error)
                    .with_error_message(f.message.map(str_bytes))
            })
            .collect();
        return resp;
    }
    let f = found
        .into_iter()
        .next()
        .unwrap_or_else(|| not_found(ResponseError::UnknownServerError, "no answer"));
    resp.with_error_code(f.error)
        // error_message exists from v1.
        .with_error_message(if version >= 1 {
            f.message.map(str_bytes)
        } else {
            None
        })
        .with_node_id(BrokerId(f.node_id))
        .with_host(str_bytes(f.host))
        .with_port(f.port)
}

/// The answer for a key the session may not DESCRIBE, `None` if it may.
fn refusal(authz: &Authz<'_>, key_type: i8, key: &str) -> Option<Found> {
    let refused = match key_type {
        KEY_TYPE_GROUP if !authz.group(Operation::Describe, key) => {
            ResponseError::GroupAuthorizationFailed
        }
        KEY_TYPE_TRANSACTION if !authz.transactional_id(Operation::Describe, key) => {
            ResponseError::TransactionalIdAuthorizationFailed
        }
        _ => return None,
    };
    Some(not_found(refused, refused.to_string()))
}

/// The coordinator of each key, in order.
async fn find(
    shard: &Rc<BrokerShard>,
    key_type: i8,
    keys: &[String],
    listener: &str,
) -> Vec<Found> {
    match key_type {
        KEY_TYPE_GROUP => find_groups(shard, keys, listener).await,
        KEY_TYPE_TRANSACTION => find_transactions(shard, keys, listener).await,
        other => keys
            .iter()
            .map(|_| {
                not_found(
                    ResponseError::InvalidRequest,
                    format!("unknown coordinator key type {other}"),
                )
            })
            .collect(),
    }
}

/// The coordinator of each transactional id: the leader of its `__transaction_state`
/// partition, creating the topic first if it does not exist.
async fn find_transactions(shard: &Rc<BrokerShard>, ids: &[String], listener: &str) -> Vec<Found> {
    if let Err(e) = txn::coordinator::ensure_topic(shard).await {
        tracing::warn!(error = %e.message, "creating {TRANSACTION_STATE_TOPIC} failed");
        return ids
            .iter()
            .map(|_| {
                not_found(
                    ResponseError::CoordinatorNotAvailable,
                    format!("cannot create {TRANSACTION_STATE_TOPIC}: {}", e.message),
                )
            })
            .collect();
    }
    let partitions: Vec<i32> = ids
        .iter()
        .map(|t| txn::coordinator::txn_partition(shard, t))
        .collect();
    leaders(shard, TRANSACTION_STATE_TOPIC, &partitions, listener)
}

/// The live leader of each partition of an internal topic, at its endpoint of `listener`.
fn leaders(shard: &BrokerShard, topic: &str, partitions: &[i32], listener: &str) -> Vec<Found> {
    let image = shard.image();
    partitions
        .iter()
        .map(|&p| {
            let leader = image.partition(topic, p).map_or(-1, |m| m.leader);
            let endpoint = image
                .brokers
                .get(&leader)
                .and_then(|b| b.endpoint(listener).map(|(host, port)| (b.id, host, port)));
            match endpoint {
                Some((node_id, host, port)) => Found {
                    node_id,
                    host: host.to_string(),
                    port,
                    error: NONE,
                    message: None,
                },
                None => not_found(
                    ResponseError::CoordinatorNotAvailable,
                    format!("partition {p} of {topic} has no live leader"),
                ),
            }
        })
        .collect()
}

/// The coordinator of each group: the leader of its `__consumer_offsets` partition, creating
/// the topic first if it does not exist.
async fn find_groups(shard: &Rc<BrokerShard>, groups: &[String], listener: &str) -> Vec<Found> {
    if let Err(e) = group::ensure_offsets_topic(shard).await {
        tracing::warn!(error = %e.message, "creating {OFFSETS_TOPIC} failed");
        return groups
            .iter()
            .map(|_| {
                not_found(
                    ResponseError::CoordinatorNotAvailable,
                    format!("cannot create {OFFSETS_TOPIC}: {}", e.message),
                )
            })
            .collect();
    }
    let partitions: Vec<i32> = groups
        .iter()
        .map(|g| group::group_partition(shard, g))
        .collect();
    leaders(shard, OFFSETS_TOPIC, &partitions, listener)
}
