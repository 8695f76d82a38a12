//! DeleteAcls (key 31, v0-3): removes every stored binding each filter selects, through the
//! controller, and answers each filter with the bindings it removed. A filter with an unknown
//! code is INVALID_REQUEST.

use std::rc::Rc;

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{ApiKey, DeleteAclsRequest, DeleteAclsResponse, RequestHeader};
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;

use super::{str_bytes, ApiSupport};
use crate::controller::{self, OpError};
use crate::security::acl_filter_of;
use crate::security::{acl_admin_refusal, Session};
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DeleteAcls, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DeleteAclsRequest,
    session: &Session,
) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    if let Some(refused) = acl_admin_refusal(shard, session, Operation::Alter) {
        resp.filter_results = req
            .filters
            .iter()
            .map(|_| {
                DeleteAclsFilterResult::default()
                    .with_error_code(refused.0.code())
                    .with_error_message(Some(str_bytes(refused.1.clone())))
            })
            .collect();
        return resp;
    }
    for f in req.filters {
        let filter = acl_filter_of!(f);
        let result = match filter {
            Err(why) => Err(OpError::new(ResponseError::InvalidRequest, why)),
            Ok(filter) => {
                controller::call(shard, move |s| controller::security::delete_acls(s, filter))
                    .await
                    .and_then(|r| r)
            }
        };
        let mut r = DeleteAclsFilterResult::default();
        match result {
            Err(e) => {
                r.error_code = e.code.code();
                r.error_message = Some(str_bytes(e.message));
            }
            Ok(deleted) => {
                r.matching_acls = deleted
                    .into_iter()
                    .map(|a| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(a.resource_type)
                            .with_resource_name(str_bytes(a.resource_name))
                            .with_pattern_type(a.pattern_type)
                            .with_principal(str_bytes(a.principal))
                            .with_host(str_bytes(a.host))
                            .with_operation(a.operation)
                            .with_permission_type(a.permission_type)
                    })
                    .collect()
            }
        }
        resp.filter_results.push(r);
    }
    resp
}
