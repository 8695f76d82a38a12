//! KIP-848 consumer groups (`group.protocol=consumer`) on the coordinator shard: the
//! operations behind ConsumerGroupHeartbeat and ConsumerGroupDescribe. The protocol is
//! [`ConsumerGroup`], a sans-I/O state machine; this file feeds it requests, the topics of the
//! current metadata image and the clock, and settles the group afterwards (its next deadline
//! goes to the shard's group timer, [`membership`](super::membership), which calls
//! [`ConsumerGroup::tick`]).
//!
//! A heartbeat never waits: the state machine answers every heartbeat at once, and a member
//! learns about changes on its next one. So nothing is parked, unlike classic JoinGroup.
//!
//! Like classic membership, a consumer group's membership is memory only; after the
//! coordinator restarts or its partition moves, members get UNKNOWN_MEMBER_ID and rejoin at
//! epoch 0, keeping their committed offsets.

use std::rc::Rc;

use kafka_protocol::ResponseError;
use tracing::info;

use super::membership::with_group;
use crate::config::BrokerConfig;
use crate::shard::BrokerShard;
use keel_coordinator::group::consumer_group::{
    Assignor, ConsumerGroup, ConsumerGroupConfig, GroupDescription, HeartbeatRequest,
    HeartbeatResponse, TopicsView,
};
use keel_vocab::ErrorCode;

/// The consumer group limits from the broker's settings.
pub fn consumer_group_config(c: &BrokerConfig) -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        session_timeout_ms: c.consumer_group_session_timeout_ms,
        heartbeat_interval_ms: c.consumer_group_heartbeat_interval_ms,
        group_size_max: c.consumer_group_size_max,
        default_assignor: Assignor::from_name(&c.consumer_group_assignor)
            .unwrap_or(Assignor::Uniform),
    }
}

/// The topics of the shard's current metadata image, as consumer groups see them (built once
/// per image version).
fn topics_view(shard: &BrokerShard) -> Rc<TopicsView> {
    let image = shard.image();
    let mut cached = shard.groups.topics_view.borrow_mut();
    if let Some((version, view)) = cached.as_ref() {
        if *version == image.version {
            return view.clone();
        }
    }
    let view: Rc<TopicsView> = Rc::new(
        image
            .topics
            .values()
            .map(|t| (t.name.clone(), (t.id, t.partitions.len() as i32)))
            .collect(),
    );
    *cached = Some((image.version, view.clone()));
    view
}

fn ready(shard: &BrokerShard, p: i32) -> Result<(), ErrorCode> {
    match super::ready(shard, p) {
        ErrorCode::NONE => Ok(()),
        e => Err(e),
    }
}

/// ConsumerGroupHeartbeat: the group's answer (its `error_code` may be set), or an error for
/// the whole request with its message. A group with a live classic membership is not a
/// consumer group (GROUP_ID_NOT_FOUND, as Kafka without online migration); an empty classic
/// group becomes a consumer group.
pub async fn heartbeat(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    request: HeartbeatRequest,
) -> Result<HeartbeatResponse, (ErrorCode, String)> {
    ready(&shard, p).map_err(|e| (e, String::new()))?;
    let config = consumer_group_config(&shard.config);
    let topics = topics_view(&shard);
    let name = group.clone();
    let shard_id = shard.id;
    let joining_or_leaving = request.member_epoch <= 0;
    with_group(&shard, p, &group, joining_or_leaving, move |g, now| {
        if g.live_classic_ref().is_some_and(|c| !c.is_empty()) {
            return Err((
                ErrorCode::of(ResponseError::GroupIdNotFound),
                format!("Group {name} is not a consumer group."),
            ));
        }
        let c = g
            .consumer
            .get_or_insert_with(|| ConsumerGroup::new(name.clone(), config));
        let epoch_before = c.group_epoch();
        super::membership::consumer_tick(shard_id, c, now);
        let response = c.heartbeat(request, &topics, now);
        if c.group_epoch() != epoch_before {
            info!(
                shard = shard_id,
                group = name,
                group_epoch = c.group_epoch(),
                members = c.member_count(),
                assignor = c.assignor().name(),
                "consumer group epoch bumped"
            );
        }
        if c.is_empty() && g.offsets.is_empty() && response.error_code != ErrorCode::NONE {
            // A refused first heartbeat leaves nothing behind.
            g.consumer = None;
        }
        Ok(response)
    })
    .unwrap_or_else(|| {
        Err((
            ErrorCode::of(ResponseError::UnknownMemberId),
            format!("The member is not in group {group}."),
        ))
    })
}

/// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for an unknown group and for one
/// that is not a consumer group (Kafka's answers).
pub async fn describe(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
) -> Result<GroupDescription, (ErrorCode, String)> {
    ready(&shard, p).map_err(|e| (e, String::new()))?;
    let not_found = |what: &str| {
        (
            ErrorCode::of(ResponseError::GroupIdNotFound),
            format!("Group {group} {what}."),
        )
    };
    let shard_id = shard.id;
    with_group(&shard, p, &group, false, |g, now| {
        if g.live_classic_ref().is_some_and(|c| !c.is_empty()) {
            return Err(not_found("is not a consumer group"));
        }
        let c = g.consumer.as_mut().ok_or_else(|| not_found("not found"))?;
        super::membership::consumer_tick(shard_id, c, now);
        Ok(c.describe())
    })
    .unwrap_or_else(|| Err(not_found("not found")))
}
