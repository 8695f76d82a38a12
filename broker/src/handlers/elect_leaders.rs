//! ElectLeaders (key 43), v0-2: preferred (v0 always) or unclean (v1+ `election_type` 1)
//! leader elections of the named partitions, or of every partition when `topic_partitions`
//! is null. The controller decides and commits them (`keel_raft::partition_change::
//! elect_leaders`, through shard 0's metadata node); the answer comes once the new leaders
//! are installed on this broker. Errors are Kafka's per partition: ELECTION_NOT_NEEDED,
//! PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
//! UNKNOWN_TOPIC_OR_PARTITION; an unknown election type is INVALID_REQUEST at the top level
//! (v1+) and for every partition, as Kafka's error response is. `timeout_ms` is not used: the
//! controller's own bound (10 s) applies, and REQUEST_TIMED_OUT says it passed.

use std::rc::Rc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse, RequestHeader};
use kafka_protocol::ResponseError;
use keel_raft::partition_change::{self, ElectionType, TopicElectionResults, TopicPartitions};
use keel_vocab::ErrorCode;

use super::{str_bytes, topic_name, ApiSupport};
use crate::controller;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ElectLeaders, 0, 2);

/// Most partition entries one request may name (each gets a result): bounds what a client can
/// make the controller hold and answer. Kafka bounds one operation to 10,000 records.
pub const PARTITIONS_MAX: usize = 100_000;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: ElectLeadersRequest,
    session: &Session,
) -> ElectLeadersResponse {
    let version = hdr.request_api_version;
    let topics: Option<Vec<TopicPartitions>> = req.topic_partitions.map(|ts| {
        ts.into_iter()
            .map(|t| TopicPartitions {
                topic: t.topic.0.to_string(),
                partitions: t.partitions,
            })
            .collect()
    });
    // v0 has no election type: it is a preferred election.
    let election_type = if version == 0 {
        Some(ElectionType::Preferred)
    } else {
        ElectionType::from_wire(req.election_type)
    };
    let Some(election_type) = election_type else {
        let message = format!("Unknown election type {}", req.election_type);
        return error_response(version, topics.as_deref(), invalid_request(), message);
    };
    if !Authz::of(shard, session).cluster(Operation::Alter) {
        let code = ErrorCode::of(ResponseError::ClusterAuthorizationFailed);
        let message = format!("{} may not ALTER the cluster", session.principal);
        return error_response(version, topics.as_deref(), code, message);
    }
    let named: usize = topics.iter().flatten().map(|t| t.partitions.len()).sum();
    if named > PARTITIONS_MAX {
        let message = format!("{named} partitions named; at most {PARTITIONS_MAX} per request");
        return error_response(version, None, invalid_request(), message);
    }
    let request = partition_change::ElectLeadersRequest {
        election_type,
        topics: topics.clone(),
    };
    let answer = controller::call(shard, move |s| controller::elect_leaders(s, request))
        .await
        .and_then(|r| r);
    match answer {
        Ok(results) => response(version, 0, results),
        Err(e) => error_response(version, topics.as_deref(), e.code, e.message),
    }
}

fn invalid_request() -> ErrorCode {
    ErrorCode::of(ResponseError::InvalidRequest)
}

/// The answer: `error_code` at the top level (v1+; v0 has no such field) and each topic's
/// results.
fn response(
    version: i16,
    error_code: i16,
    results: Vec<TopicElectionResults>,
) -> ElectLeadersResponse {
    let mut resp = ElectLeadersResponse::default();
    if version >= 1 {
        resp.error_code = error_code;
    }
    resp.replica_election_results = results
        .into_iter()
        .map(|t| {
            ReplicaElectionResult::default()
                .with_topic(topic_name(&t.topic))
                .with_partition_result(
                    t.partitions
                        .into_iter()
                        .map(|p| {
                            PartitionResult::default()
                                .with_partition_id(p.partition)
                                .with_error_code(p.error_code)
                                .with_error_message(p.error_message.map(str_bytes))
                        })
                        .collect(),
                )
        })
        .collect();
    resp
}

/// Kafka's error response (`ElectLeadersRequest.getErrorResponse`): the code at the top level
/// and for every partition named.
fn error_response(
    version: i16,
    topics: Option<&[TopicPartitions]>,
    code: ErrorCode,
    message: String,
) -> ElectLeadersResponse {
    let results = topics
        .unwrap_or_default()
        .iter()
        .map(|t| TopicElectionResults {
            topic: t.topic.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| partition_change::PartitionElectionResult {
                    partition: *p,
                    error_code: code.code(),
                    error_message: Some(message.clone()),
                })
                .collect(),
        })
        .collect();
    response(version, code.code(), results)
}
