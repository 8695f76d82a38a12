//! JoinGroup (key 11), v0-9: a member joins (or rejoins) a classic group. The request goes to
//! the group's coordinator shard (`group::membership::join_group`), which answers at once or
//! parks it until the rebalance completes; a parked JoinGroup waits on this shard without
//! blocking it. v4+ members without a member id first get one with MEMBER_ID_REQUIRED (the
//! state machine's handshake); v5+ carry `group.instance.id` (static members).
//!
//! v0 has no rebalance timeout: the session timeout stands in, as in Kafka. The v8 `reason` is
//! only logged. Fields a version lacks are left out of the answer: `protocol_type` (v7+),
//! `skip_assignment` (v9), members' instance ids (v5+); `protocol_name` is "" rather than null
//! before v7. A static leader told to skip the assignment (v9) gets no members before v9.
//!
//! READ on the group is required, as in Kafka: GROUP_AUTHORIZATION_FAILED otherwise, with an
//! empty member id (Kafka's error answer), before the group id is checked.

use std::rc::Rc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{ApiKey, JoinGroupRequest, JoinGroupResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::group::{self, membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_coordinator::group::classic_group::{Completed, JoinRequest, JoinResponse};
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::JoinGroup, 0, 9);

/// `client_host` is the client's address as Kafka shows it ("/127.0.0.1").
pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: JoinGroupRequest,
    session: &Session,
) -> JoinGroupResponse {
    let client_host: &str = &session.client_host;
    let version = hdr.request_api_version;
    let group_id = req.group_id.0.to_string();
    let member_id = req.member_id.to_string();
    if let Some(reason) = &req.reason {
        tracing::debug!(group = %group_id, member = %member_id, reason = %reason, "join");
    }
    let response = if !Authz::of(shard, session).group(Operation::Read, &group_id) {
        JoinResponse::error(ErrorCode::of(ResponseError::GroupAuthorizationFailed), "")
    } else if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        let request = JoinRequest {
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id.map(|i| i.to_string()),
            client_id: hdr
                .client_id
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_default(),
            client_host: client_host.to_string(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: if version >= 1 {
                req.rebalance_timeout_ms
            } else {
                req.session_timeout_ms
            },
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            require_known_member_id: version >= 4,
        };
        join(shard, group_id, request).await
    } else {
        JoinResponse::error(ErrorCode::of(ResponseError::InvalidGroupId), &member_id)
    };
    encode(version, response)
}

/// Joins on the coordinator shard and waits for the answer if the group parks the request.
async fn join(shard: &Rc<BrokerShard>, group_id: String, request: JoinRequest) -> JoinResponse {
    let member_id = request.member_id.clone();
    let mut parking = membership::park(shard);
    let waiter = parking.waiter();
    let g = group_id.clone();
    let answer = group::on_coordinator(ApiKey::JoinGroup, shard, &group_id, move |s, p| {
        membership::join_group(s, p, g, request, waiter)
    })
    .await;
    match answer {
        Ok(Some(response)) => response,
        Ok(None) => match parking.wait().await {
            Ok(Completed::Join(response)) => response,
            Ok(Completed::Sync(_)) => {
                JoinResponse::error(ErrorCode::of(ResponseError::UnknownServerError), &member_id)
            }
            Err(e) => JoinResponse::error(e, &member_id),
        },
        Err(e) => JoinResponse::error(e, &member_id),
    }
}

fn encode(version: i16, r: JoinResponse) -> JoinGroupResponse {
    // Before v9 a leader cannot be told to skip the assignment: it gets no members, so it
    // assigns nothing, and its SyncGroup in a Stable group returns the assignment it holds.
    let skip_unsupported = r.skip_assignment && version < 9;
    let members = r
        .members
        .into_iter()
        .filter(|_| !skip_unsupported)
        .map(|m| {
            JoinGroupResponseMember::default()
                .with_member_id(str_bytes(m.member_id))
                .with_group_instance_id(m.group_instance_id.filter(|_| version >= 5).map(str_bytes))
                .with_metadata(m.metadata)
        })
        .collect();
    let protocol_name = match r.protocol_name {
        None if version < 7 => Some(String::new()),
        name => name,
    };
    JoinGroupResponse::default()
        .with_error_code(r.error.code())
        .with_generation_id(r.generation_id)
        .with_protocol_type(r.protocol_type.filter(|_| version >= 7).map(str_bytes))
        .with_protocol_name(protocol_name.map(str_bytes))
        .with_leader(str_bytes(r.leader))
        .with_skip_assignment(r.skip_assignment && version >= 9)
        .with_member_id(str_bytes(r.member_id))
        .with_members(members)
}
