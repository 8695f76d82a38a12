//! DeleteGroups (key 42), v0-2: deletes groups without members, with their committed offsets
//! (tombstones in `__consumer_offsets`, durable before the answer). Each group is answered by
//! its coordinator shard (`group::membership::delete_group`), all concurrently:
//! NON_EMPTY_GROUP for a group with members, GROUP_ID_NOT_FOUND for one the coordinator does
//! not know, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as for every group request.
//! A group the session may not DELETE gets GROUP_AUTHORIZATION_FAILED and its coordinator is
//! not asked, as in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, GroupId, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::coordination::parking::join_all;
use crate::group::{self, membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DeleteGroups, 0, 2);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DeleteGroupsRequest,
    session: &Session,
) -> DeleteGroupsResponse {
    let authz = Authz::of(shard, session);
    let mut names: Vec<String> = req.groups_names.iter().map(|g| g.0.to_string()).collect();
    // A group named twice is deleted (and answered) once, as Kafka does.
    let mut seen = std::collections::HashSet::new();
    names.retain(|g| seen.insert(g.clone()));
    let asks = names.into_iter().map(|group_id| {
        let shard = shard.clone();
        let allowed = authz.group(Operation::Delete, &group_id);
        async move {
            let outcome = if !allowed {
                Err(ErrorCode::of(ResponseError::GroupAuthorizationFailed))
            } else if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
                let gid = group_id.clone();
                group::on_coordinator(ApiKey::DeleteGroups, &shard, &group_id, move |s, p| {
                    membership::delete_group(s, p, gid)
                })
                .await
            } else {
                Err(ErrorCode::of(ResponseError::InvalidGroupId))
            };
            (group_id, outcome)
        }
    });
    let results = join_all(asks.collect())
        .await
        .into_iter()
        .map(|(group_id, outcome)| {
            DeletableGroupResult::default()
                .with_group_id(GroupId(str_bytes(group_id)))
                .with_error_code(outcome.err().unwrap_or(ErrorCode::NONE).code())
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
