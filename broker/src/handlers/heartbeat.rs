//! Heartbeat (key 12), v0-4: a member says it is alive; the error tells it to rejoin
//! (REBALANCE_IN_PROGRESS) or that it is gone (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
//! FENCED_INSTANCE_ID). Answered by the group's coordinator shard at once. v3+ carry
//! `group.instance.id`. READ on the group is required, as in Kafka (GROUP_AUTHORIZATION_FAILED).

use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::ApiSupport;
use crate::errors::code;
use crate::group::{self, membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::Heartbeat, 0, 4);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: HeartbeatRequest,
    session: &Session,
) -> HeartbeatResponse {
    let group_id = req.group_id.0.to_string();
    if !Authz::of(shard, session).group(Operation::Read, &group_id) {
        return HeartbeatResponse::default()
            .with_error_code(code(ResponseError::GroupAuthorizationFailed));
    }
    if !keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        return HeartbeatResponse::default().with_error_code(code(ResponseError::InvalidGroupId));
    }
    let member_id = req.member_id.to_string();
    let instance_id = req.group_instance_id.map(|i| i.to_string());
    let generation_id = req.generation_id;
    let g = group_id.clone();
    let error = group::on_coordinator(ApiKey::Heartbeat, shard, &group_id, move |s, p| {
        membership::heartbeat(s, p, g, member_id, instance_id, generation_id)
    })
    .await
    .unwrap_or_else(|e| e);
    HeartbeatResponse::default().with_error_code(error.code())
}
