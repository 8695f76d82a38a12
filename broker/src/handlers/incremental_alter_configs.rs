//! IncrementalAlterConfigs (key 44, v0-1): sets, deletes, appends to and subtracts from a
//! topic's config overrides, through the controller as AlterConfigs does.

use std::rc::Rc;

use kafka_protocol::messages::{
    incremental_alter_configs_response, ApiKey, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, RequestHeader,
};

use super::alter_configs::alter;
use super::{str_bytes, ApiSupport};
use crate::controller::ConfigChange;
use crate::security::Session;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::IncrementalAlterConfigs, 0, 1);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: IncrementalAlterConfigsRequest,
    session: &Session,
) -> IncrementalAlterConfigsResponse {
    let asked = req
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.config_operation,
                        c.value.as_ref().map(|v| v.to_string()),
                    )
                })
                .collect();
            (
                r.resource_type,
                r.resource_name.to_string(),
                ConfigChange::Incremental(ops),
            )
        })
        .collect();
    let mut resp = IncrementalAlterConfigsResponse::default();
    for (ty, name, r) in alter(shard, asked, req.validate_only, session).await {
        let mut out = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(ty)
            .with_resource_name(str_bytes(name));
        if let Err(e) = r {
            out.error_code = e.code.code();
            out.error_message = Some(str_bytes(e.message));
        }
        resp.responses.push(out);
    }
    resp
}
