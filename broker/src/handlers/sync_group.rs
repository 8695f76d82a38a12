//! SyncGroup (key 14), v0-5: the leader hands out the assignment; every member gets its own.
//! The request goes to the group's coordinator shard (`group::membership::sync_group`); a
//! follower's SyncGroup that must wait for the leader's is parked there and waits on this
//! shard without blocking it. v3+ carry `group.instance.id`; v5 the protocol type and name,
//! checked against the group's and echoed in the answer. READ on the group is required, as in
//! Kafka (GROUP_AUTHORIZATION_FAILED).

use std::rc::Rc;

use kafka_protocol::messages::{ApiKey, RequestHeader, SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::group::{self, membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_coordinator::group::classic_group::{Completed, SyncRequest, SyncResponse};
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::SyncGroup, 0, 5);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: SyncGroupRequest,
    session: &Session,
) -> SyncGroupResponse {
    let version = hdr.request_api_version;
    let group_id = req.group_id.0.to_string();
    let response = if !Authz::of(shard, session).group(Operation::Read, &group_id) {
        SyncResponse::error(ErrorCode::of(ResponseError::GroupAuthorizationFailed))
    } else if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        let request = SyncRequest {
            member_id: req.member_id.to_string(),
            group_instance_id: req.group_instance_id.map(|i| i.to_string()),
            generation_id: req.generation_id,
            protocol_type: req.protocol_type.map(|t| t.to_string()),
            protocol_name: req.protocol_name.map(|n| n.to_string()),
            assignments: req
                .assignments
                .into_iter()
                .map(|a| (a.member_id.to_string(), a.assignment))
                .collect(),
        };
        sync(shard, group_id, request).await
    } else {
        SyncResponse::error(ErrorCode::of(ResponseError::InvalidGroupId))
    };
    let v5 = version >= 5;
    SyncGroupResponse::default()
        .with_error_code(response.error.code())
        .with_protocol_type(response.protocol_type.filter(|_| v5).map(str_bytes))
        .with_protocol_name(response.protocol_name.filter(|_| v5).map(str_bytes))
        .with_assignment(response.assignment)
}

/// Syncs on the coordinator shard and waits for the answer if the group parks the request.
async fn sync(shard: &Rc<BrokerShard>, group_id: String, request: SyncRequest) -> SyncResponse {
    let mut parking = membership::park(shard);
    let waiter = parking.waiter();
    let g = group_id.clone();
    let answer = group::on_coordinator(ApiKey::SyncGroup, shard, &group_id, move |s, p| {
        membership::sync_group(s, p, g, request, waiter)
    })
    .await;
    match answer {
        Ok(Some(response)) => response,
        Ok(None) => match parking.wait().await {
            Ok(Completed::Sync(response)) => response,
            Ok(Completed::Join(_)) => {
                SyncResponse::error(ErrorCode::of(ResponseError::UnknownServerError))
            }
            Err(e) => SyncResponse::error(e),
        },
        Err(e) => SyncResponse::error(e),
    }
}
