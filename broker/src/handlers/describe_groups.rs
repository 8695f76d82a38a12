//! DescribeGroups (key 15), v0-5: state, protocol and members of groups, each answered by its
//! coordinator shard (`group::membership::describe_group`), all concurrently. Members'
//! metadata and assignments are shown only while the group is `Stable`, as Kafka does. A
//! group this coordinator does not know is `Dead` with no error (GROUP_ID_NOT_FOUND is v6's
//! answer, not offered). v3+ report authorized operations when asked: those of READ, DESCRIBE
//! and DELETE the session is allowed (all three without an authorizer).
//!
//! A group the session may not DESCRIBE is answered GROUP_AUTHORIZATION_FAILED with nothing
//! else filled in (Kafka's `groupError`), and its coordinator is not asked.

use std::rc::Rc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{
    ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::coordination::parking::join_all;
use crate::errors::NONE;
use crate::group::{self, membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::{Operation, ResourceType};
use keel_coordinator::group::classic_group::GroupDescription;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeGroups, 0, 5);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: DescribeGroupsRequest,
    session: &Session,
) -> DescribeGroupsResponse {
    let authz = Authz::of(shard, session);
    let version = hdr.request_api_version;
    let operations_asked = version >= 3 && req.include_authorized_operations;
    let asks = req.groups.into_iter().map(|g| {
        let shard = shard.clone();
        let group_id = g.0.to_string();
        let allowed = authz.group(Operation::Describe, &group_id);
        async move {
            let answer = if !allowed {
                Err(ErrorCode::of(ResponseError::GroupAuthorizationFailed))
            } else if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
                let gid = group_id.clone();
                group::on_coordinator(ApiKey::DescribeGroups, &shard, &group_id, move |s, p| {
                    membership::describe_group(s, p, gid)
                })
                .await
            } else {
                Err(ErrorCode::of(ResponseError::InvalidGroupId))
            };
            (group_id, allowed, answer)
        }
    });
    let groups = join_all(asks.collect())
        .await
        .into_iter()
        .map(|(group_id, allowed, answer)| {
            let operations = if operations_asked && allowed {
                authz.operations(ResourceType::Group, &group_id, crate::acl::GROUP_OPERATIONS)
            } else {
                crate::acl::OMITTED
            };
            described(version, group_id, answer, operations)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

fn described(
    version: i16,
    group_id: String,
    answer: Result<GroupDescription, ErrorCode>,
    operations: i32,
) -> DescribedGroup {
    let g = DescribedGroup::default()
        .with_group_id(GroupId(str_bytes(group_id)))
        .with_authorized_operations(operations);
    let d = match answer {
        Ok(d) => d,
        Err(e) => return g.with_error_code(e.code()),
    };
    let members = d
        .members
        .into_iter()
        .map(|m| {
            DescribedGroupMember::default()
                .with_member_id(str_bytes(m.member_id))
                .with_group_instance_id(m.group_instance_id.filter(|_| version >= 4).map(str_bytes))
                .with_client_id(str_bytes(m.client_id))
                .with_client_host(str_bytes(m.client_host))
                .with_member_metadata(m.metadata)
                .with_member_assignment(m.assignment)
        })
        .collect();
    g.with_error_code(NONE)
        .with_group_state(str_bytes(d.state.as_str()))
        .with_protocol_type(str_bytes(d.protocol_type))
        .with_protocol_data(str_bytes(d.protocol))
        .with_members(members)
}
