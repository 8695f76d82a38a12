//! DescribeAcls (key 29, v0-3): the stored ACL bindings a filter selects (ANY, MATCH,
//! LITERAL, PREFIXED as Kafka's `AclBindingFilter`), grouped by resource pattern, from this
//! shard's image. A filter with an unknown code is INVALID_REQUEST.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{ApiKey, DescribeAclsRequest, DescribeAclsResponse, RequestHeader};
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;

use super::{str_bytes, ApiSupport};
use crate::security::{acl_admin_refusal, acl_filter_of, matches, Session};
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeAcls, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeAclsRequest,
    session: &Session,
) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    if let Some(refused) = acl_admin_refusal(shard, session, Operation::Describe) {
        resp.error_code = refused.0.code();
        resp.error_message = Some(str_bytes(refused.1));
        return resp;
    }
    let filter = match acl_filter_of!(req) {
        Ok(f) => f,
        Err(why) => {
            resp.error_code = ResponseError::InvalidRequest.code();
            resp.error_message = Some(str_bytes(why));
            return resp;
        }
    };
    let image = shard.image();
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for acl in image.cluster.acls.values() {
        if matches(&filter, acl) {
            by_resource
                .entry((
                    acl.resource_type,
                    acl.resource_name.clone(),
                    acl.pattern_type,
                ))
                .or_default()
                .push(
                    AclDescription::default()
                        .with_principal(str_bytes(acl.principal.clone()))
                        .with_host(str_bytes(acl.host.clone()))
                        .with_operation(acl.operation)
                        .with_permission_type(acl.permission_type),
                );
        }
    }
    resp.resources = by_resource
        .into_iter()
        .map(|((rt, name, pt), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(rt)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pt)
                .with_acls(acls)
        })
        .collect();
    resp
}
