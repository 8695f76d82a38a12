//! UnregisterBroker (key 64), v0: removes a broker's registration through the controller
//! (`controller::reassignment::unregister_broker`): it is fenced first — out of every ISR, its
//! leadership moved — then forgotten. A broker that runs again registers anew. Meant for a
//! broker that was decommissioned (`keel cluster decommission`).

use std::rc::Rc;

use kafka_protocol::messages::{
    ApiKey, RequestHeader, UnregisterBrokerRequest, UnregisterBrokerResponse,
};

use super::{str_bytes, ApiSupport};
use crate::controller;
use crate::controller::reassignment::unregister_broker;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::UnregisterBroker, 0, 0);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: UnregisterBrokerRequest,
    session: &Session,
) -> UnregisterBrokerResponse {
    if !Authz::of(shard, session).cluster(Operation::Alter) {
        return UnregisterBrokerResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let id = req.broker_id.0;
    let result = controller::call(shard, move |s| unregister_broker(s, id))
        .await
        .and_then(|r| r);
    let mut resp = UnregisterBrokerResponse::default();
    if let Err(e) = result {
        resp.error_code = e.code.code();
        resp.error_message = Some(str_bytes(e.message));
    }
    resp
}
