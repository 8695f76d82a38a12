//! ListGroups (key 16), v0-5: every group this broker coordinates, gathered from every shard
//! over the mesh (`group::membership::list_groups`). v4+ filter by state (`states_filter`,
//! case-insensitive) and report each group's state; v5 filter by type (`types_filter`) and
//! report it ("classic" or "consumer", KIP-848's names). A group that only commits offsets is listed as
//! `Empty` with protocol type "". While a coordinator partition loads, the answer carries
//! COORDINATOR_LOAD_IN_PROGRESS with the groups already loaded, as Kafka's does.
//!
//! As in Kafka, a session allowed DESCRIBE on the cluster sees every group; any other only the
//! groups it may DESCRIBE (no error).

use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    ApiKey, GroupId, ListGroupsRequest, ListGroupsResponse, RequestHeader,
};

use super::{str_bytes, ApiSupport};
use crate::group::membership;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ListGroups, 0, 5);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: ListGroupsRequest,
    session: &Session,
) -> ListGroupsResponse {
    let authz = Authz::of(shard, session);
    let every_group = authz.cluster(Operation::Describe);
    let version = hdr.request_api_version;
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|t| t.to_lowercase()).collect();
    let (error, groups) = membership::list_groups(shard).await;
    let listed = groups
        .into_iter()
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .filter(|g| every_group || authz.group(Operation::Describe, &g.group_id))
        .map(|g| {
            let mut l = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type));
            if version >= 4 {
                l = l.with_group_state(str_bytes(g.state));
            }
            if version >= 5 {
                l = l.with_group_type(str_bytes(g.group_type));
            }
            l
        })
        .collect();
    ListGroupsResponse::default()
        .with_error_code(error.code())
        .with_groups(listed)
}
