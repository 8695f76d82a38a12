//! LeaveGroup (key 13), v0-5: members leave a classic group, which rebalances without them.
//! v0-2 name one member (`member_id`), and its error is the answer's; v3+ name a batch
//! (`members`, by member id, or by `group.instance.id` alone when an administrator removes a
//! static member) and get one error each. Answered by the group's coordinator shard at once.
//! The v5 `reason` is only logged. READ on the group is required, as in Kafka:
//! GROUP_AUTHORIZATION_FAILED otherwise, in the top-level error code (all versions).

use std::rc::Rc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{ApiKey, LeaveGroupRequest, LeaveGroupResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::group::{self, membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_coordinator::group::classic_group::LeavingMember;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::LeaveGroup, 0, 5);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: LeaveGroupRequest,
    session: &Session,
) -> LeaveGroupResponse {
    let version = hdr.request_api_version;
    let group_id = req.group_id.0.to_string();
    let leaving: Vec<LeavingMember> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                if let Some(reason) = &m.reason {
                    tracing::debug!(group = %group_id, member = %m.member_id, reason = %reason, "leave");
                }
                LeavingMember {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
                }
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let outcome = if !Authz::of(shard, session).group(Operation::Read, &group_id) {
        Err(ErrorCode::of(ResponseError::GroupAuthorizationFailed))
    } else if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        let g = group_id.clone();
        let members = leaving.clone();
        group::on_coordinator(ApiKey::LeaveGroup, shard, &group_id, move |s, p| {
            membership::leave_group(s, p, g, members)
        })
        .await
    } else {
        Err(ErrorCode::of(ResponseError::InvalidGroupId))
    };
    let errors = match outcome {
        Ok(errors) => errors,
        Err(e) => return LeaveGroupResponse::default().with_error_code(e.code()),
    };
    if version < 3 {
        return LeaveGroupResponse::default()
            .with_error_code(errors.first().copied().unwrap_or(ErrorCode::NONE).code());
    }
    LeaveGroupResponse::default().with_members(
        leaving
            .into_iter()
            .zip(errors)
            .map(|(m, error)| {
                MemberResponse::default()
                    .with_member_id(str_bytes(m.member_id))
                    .with_group_instance_id(m.group_instance_id.map(str_bytes))
                    .with_error_code(error.code())
            })
            .collect(),
    )
}
