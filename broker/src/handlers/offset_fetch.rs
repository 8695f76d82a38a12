//! OffsetFetch (key 9), v0-9: a group's committed offsets. v0-7 ask for one group
//! (`group_id`, `topics`), v8+ for several (`groups`), each answered by its coordinator shard
//! (`group::fetch_offsets`), all concurrently. Null topics (v2+) means every partition the
//! group committed; a partition without a commit answers offset -1. A group-wide error goes
//! in the top-level (v2-7) or per-group (v8+) error code, and in v0-1 in every partition.
//!
//! v0 (before 0.8.2 it read ZooKeeper) is answered from the coordinator as v1, as Kafka 3.9 did.
//! `require_stable` (v7+): a partition whose offset a transaction committed and whose marker
//! has not been written yet answers UNSTABLE_OFFSET_COMMIT (the client retries), as Kafka.
//! v9's `member_id`/`member_epoch` (KIP-848 consumer groups) are checked against the group's
//! members, as Kafka does: UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH for the group.
//!
//! Authorization, as Kafka's, before the coordinator is asked: DESCRIBE on the group, else
//! GROUP_AUTHORIZATION_FAILED for that group; topics asked for that the session may not
//! DESCRIBE are not asked of the coordinator and answer TOPIC_AUTHORIZATION_FAILED per
//! partition; when every committed topic is fetched (null topics), those are left out.

use std::rc::Rc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, ApiSupport};
use crate::coordination::parking::join_all;
use crate::group::{self, CommittedOffset, FetchedTopic};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::OffsetFetch, 0, 9);

/// The topics a request asks for: `None` = every partition the group committed.
type Wanted = Option<Vec<(String, Vec<i32>)>>;

/// One group's answer: its offsets, or the error for the whole group.
type GroupAnswer = Result<Vec<FetchedTopic>, ErrorCode>;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: OffsetFetchRequest,
    session: &Session,
) -> OffsetFetchResponse {
    let authz = Authz::of(shard, session);
    let version = hdr.request_api_version;
    let require_stable = version >= 7 && req.require_stable;
    if version >= 8 {
        let queries: Vec<(String, Wanted, Member)> = req
            .groups
            .into_iter()
            .map(|g| {
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let member = (version >= 9).then(|| {
                    (
                        g.member_id.map(|m| m.to_string()).unwrap_or_default(),
                        g.member_epoch,
                    )
                });
                (g.group_id.0.to_string(), topics, member)
            })
            .collect();
        // (every topic fetched, topics refused) of each group, in request order.
        let mut refusals = Vec::with_capacity(queries.len());
        let runs: Vec<_> = queries
            .into_iter()
            .map(|(g, topics, member)| {
                let all = topics.is_none();
                let (asked, refused) = authorize(&authz, &g, topics);
                refusals.push((all, refused));
                let shard = shard.clone();
                async move {
                    let answer = match asked {
                        Ok(topics) => fetch_group(&shard, &g, topics, member, require_stable).await,
                        Err(e) => Err(e),
                    };
                    (g, answer)
                }
            })
            .collect();
        let groups = join_all(runs).await;
        return OffsetFetchResponse::default().with_groups(
            groups
                .into_iter()
                .zip(refusals)
                .map(|((g, a), (all, refused))| group_v8(g, complete(&authz, a, all, refused)))
                .collect(),
        );
    }
    let wanted: Wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let group_id = req.group_id.0.to_string();
    let all = wanted.is_none();
    let (asked, refused) = authorize(&authz, &group_id, wanted.clone());
    let answer = match asked {
        Ok(topics) => fetch_group(shard, &group_id, topics, None, require_stable).await,
        Err(e) => Err(e),
    };
    single_group(version, wanted, complete(&authz, answer, all, refused))
}

/// Topics asked for that the session may not DESCRIBE, with their partitions.
type Refused = Vec<(String, Vec<i32>)>;

/// What one group's query may ask of the coordinator (GROUP_AUTHORIZATION_FAILED without
/// DESCRIBE on the group), and the topics asked for that it may not.
fn authorize(
    authz: &Authz<'_>,
    group_id: &str,
    topics: Wanted,
) -> (Result<Wanted, ErrorCode>, Refused) {
    if !authz.group(Operation::Describe, group_id) {
        return (
            Err(ErrorCode::of(ResponseError::GroupAuthorizationFailed)),
            Vec::new(),
        );
    }
    match topics {
        None => (Ok(None), Vec::new()),
        Some(topics) => {
            let (allowed, refused) = topics
                .into_iter()
                .partition(|(t, _)| authz.topic(Operation::Describe, t));
            (Ok(Some(allowed)), refused)
        }
    }
}

/// The coordinator's answer as Kafka completes it: with every topic fetched (`all`), only
/// those the session may DESCRIBE; the refused topics after the rest, each partition
/// TOPIC_AUTHORIZATION_FAILED. A group-wide error stays alone.
fn complete(authz: &Authz<'_>, answer: GroupAnswer, all: bool, refused: Refused) -> GroupAnswer {
    let mut topics = answer?;
    if all {
        topics.retain(|(t, _)| authz.topic(Operation::Describe, t));
    }
    let failed = ErrorCode::of(ResponseError::TopicAuthorizationFailed);
    topics.extend(refused.into_iter().map(|(t, partitions)| {
        let parts = partitions.into_iter().map(|p| (p, None, failed)).collect();
        (t, parts)
    }));
    Ok(topics)
}

/// OffsetFetch v9's member id and epoch.
type Member = Option<(String, i32)>;

async fn fetch_group(
    shard: &Rc<BrokerShard>,
    group_id: &str,
    topics: Wanted,
    member: Member,
    require_stable: bool,
) -> GroupAnswer {
    if !keel_coordinator::group::group_metadata_manager::valid_group_id(group_id) {
        return Err(ErrorCode::of(ResponseError::InvalidGroupId));
    }
    let g = group_id.to_string();
    group::on_coordinator(ApiKey::OffsetFetch, shard, group_id, move |s, p| {
        group::fetch_offsets(s, p, g, topics, member, require_stable)
    })
    .await
}

/// (offset, leader epoch, metadata) of a partition: -1 and "" without a commit.
fn fields(o: Option<CommittedOffset>) -> (i64, i32, String) {
    match o {
        Some(o) => (o.offset, o.leader_epoch, o.metadata),
        None => (-1, -1, String::new()),
    }
}

fn group_v8(group_id: String, answer: GroupAnswer) -> OffsetFetchResponseGroup {
    let g = OffsetFetchResponseGroup::default().with_group_id(GroupId(str_bytes(group_id)));
    match answer {
        Err(e) => g.with_error_code(e.code()),
        Ok(topics) => g.with_topics(
            topics
                .into_iter()
                .map(|(name, parts)| {
                    OffsetFetchResponseTopics::default()
                        .with_name(topic_name(&name))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(index, o, error)| {
                                    let (offset, epoch, metadata) = fields(o);
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(index)
                                        .with_committed_offset(offset)
                                        .with_committed_leader_epoch(epoch)
                                        .with_metadata(Some(str_bytes(metadata)))
                                        .with_error_code(error.code())
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

fn single_group(version: i16, wanted: Wanted, answer: GroupAnswer) -> OffsetFetchResponse {
    let partition = |index: i32, o: Option<CommittedOffset>, error: i16| {
        let (offset, epoch, metadata) = fields(o);
        OffsetFetchResponsePartition::default()
            .with_partition_index(index)
            .with_committed_offset(offset)
            // committed_leader_epoch exists from v5.
            .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
            .with_metadata(Some(str_bytes(metadata)))
            .with_error_code(error)
    };
    let topic = |name: &str, parts: Vec<OffsetFetchResponsePartition>| {
        OffsetFetchResponseTopic::default()
            .with_name(topic_name(name))
            .with_partitions(parts)
    };
    match answer {
        Ok(topics) => OffsetFetchResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(name, parts)| {
                    let ps = parts
                        .into_iter()
                        .map(|(i, o, e)| partition(i, o, e.code()))
                        .collect();
                    topic(&name, ps)
                })
                .collect(),
        ),
        // v2+ carry a top-level error code; v1 only the partitions' codes.
        Err(e) if version >= 2 => OffsetFetchResponse::default().with_error_code(e.code()),
        Err(e) => OffsetFetchResponse::default().with_topics(
            wanted
                .unwrap_or_default()
                .into_iter()
                .map(|(name, parts)| {
                    let ps = parts
                        .into_iter()
                        .map(|i| partition(i, None, e.code()))
                        .collect();
                    topic(&name, ps)
                })
                .collect(),
        ),
    }
}
