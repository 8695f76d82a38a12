//! CreateAcls (key 30, v0-3): stores ACL bindings in the metadata log (v0 is LITERAL only).
//! Each creation is checked as Kafka checks it (INVALID_REQUEST for an ANY or unknown code, a
//! MATCH pattern, an empty name, a principal that is not `Type:name`, a cluster resource other
//! than `kafka-cluster`) and answered on its own. Not enforced until an authorizer is
//! configured (issue 19).

use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{ApiKey, CreateAclsRequest, CreateAclsResponse, RequestHeader};
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;

use super::{str_bytes, ApiSupport};
use crate::controller::{self, OpError};
use crate::security::new_acl;
use crate::security::{acl_admin_refusal, Session};
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::CreateAcls, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: CreateAclsRequest,
    session: &Session,
) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    // Kafka: no authorizer, no ACLs (SECURITY_DISABLED); else ALTER on the cluster.
    if let Some(refused) = acl_admin_refusal(shard, session, Operation::Alter) {
        resp.results = req
            .creations
            .iter()
            .map(|_| {
                AclCreationResult::default()
                    .with_error_code(refused.0.code())
                    .with_error_message(Some(str_bytes(refused.1.clone())))
            })
            .collect();
        return resp;
    }
    for c in req.creations {
        let entry = new_acl(
            c.resource_type,
            &c.resource_name,
            c.resource_pattern_type,
            &c.principal,
            &c.host,
            c.operation,
            c.permission_type,
        );
        let result = match entry {
            Err(why) => Err(OpError::new(ResponseError::InvalidRequest, why)),
            Ok(acl) => controller::call(shard, move |s| controller::security::create_acl(s, acl))
                .await
                .and_then(|r| r),
        };
        let mut r = AclCreationResult::default();
        if let Err(e) = result {
            r.error_code = e.code.code();
            r.error_message = Some(str_bytes(e.message));
        }
        resp.results.push(r);
    }
    resp
}
