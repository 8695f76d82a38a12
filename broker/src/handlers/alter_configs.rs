//! AlterConfigs (key 33, v0-2): replaces a topic's config overrides, or a broker's dynamic
//! ones (a broker id, or "" for every broker; `config::DYNAMIC_BROKER_KEYS`). Changes go
//! through the controller, which validates every value before anything changes.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::{
    alter_configs_response, AlterConfigsRequest, AlterConfigsResponse, ApiKey, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::describe_configs::{BROKER, TOPIC};
use super::{str_bytes, ApiSupport};
use crate::controller::{self, ConfigChange, OpError};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AlterConfigs, 0, 2);

/// Sends topic and broker changes to the controller; other resources are refused. Answers in
/// order: (resource type, name, result).
pub(super) async fn alter(
    shard: &Rc<BrokerShard>,
    asked: Vec<(i8, String, ConfigChange)>,
    validate_only: bool,
    session: &Session,
) -> Vec<(i8, String, Result<(), OpError>)> {
    // Kafka: ALTER_CONFIGS on the topic, or on the cluster for a broker's configs.
    let authz = Authz::of(shard, session);
    let allowed: Vec<bool> = asked
        .iter()
        .map(|(ty, name, _)| match *ty {
            TOPIC => authz.topic(Operation::AlterConfigs, name),
            BROKER => authz.cluster(Operation::AlterConfigs),
            _ => true,
        })
        .collect();
    let topics: Vec<(String, ConfigChange)> = asked
        .iter()
        .zip(&allowed)
        .filter(|(a, ok)| a.0 == TOPIC && **ok)
        .map(|(a, _)| (a.1.clone(), a.2.clone()))
        .collect();
    let brokers: Vec<(String, ConfigChange)> = asked
        .iter()
        .zip(&allowed)
        .filter(|(a, ok)| a.0 == BROKER && **ok)
        .map(|(a, _)| (a.1.clone(), a.2.clone()))
        .collect();
    let n = topics.len();
    let mut results = match controller::call(shard, move |s| {
        controller::alter_topic_configs(s, topics, validate_only)
    })
    .await
    {
        Ok(r) => r.into_iter(),
        Err(e) => vec![Err(e); n].into_iter(),
    };
    let n = brokers.len();
    let mut broker_results = match controller::call(shard, move |s| {
        controller::alter_broker_configs(s, brokers, validate_only)
    })
    .await
    {
        Ok(r) => r.into_iter(),
        Err(e) => vec![Err(e); n].into_iter(),
    };
    asked
        .into_iter()
        .zip(allowed)
        .map(|((ty, name, _), allowed)| {
            let r = if !allowed {
                let (code, what) = if ty == TOPIC {
                    (
                        ResponseError::TopicAuthorizationFailed,
                        format!("topic {name}"),
                    )
                } else {
                    (
                        ResponseError::ClusterAuthorizationFailed,
                        "the cluster".into(),
                    )
                };
                Err(OpError::new(
                    code,
                    format!("{} may not alter the configs of {what}", session.principal),
                ))
            } else if ty == TOPIC {
                results.next().unwrap_or_else(|| {
                    Err(OpError::new(
                        ResponseError::UnknownServerError,
                        "lost result",
                    ))
                })
            } else if ty == BROKER {
                broker_results.next().unwrap_or_else(|| {
                    Err(OpError::new(
                        ResponseError::UnknownServerError,
                        "lost result",
                    ))
                })
            } else {
                Err(OpError::new(
                    ResponseError::InvalidRequest,
                    format!("resource type {ty} is not supported"),
                ))
            };
            (ty, name, r)
        })
        .collect()
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: AlterConfigsRequest,
    session: &Session,
) -> AlterConfigsResponse {
    let asked = req
        .resources
        .iter()
        .map(|r| {
            let all: BTreeMap<String, String> = r
                .configs
                .iter()
                .filter_map(|c| {
                    c.value
                        .as_ref()
                        .map(|v| (c.name.to_string(), v.to_string()))
                })
                .collect();
            (
                r.resource_type,
                r.resource_name.to_string(),
                ConfigChange::Replace(all),
            )
        })
        .collect();
    let mut resp = AlterConfigsResponse::default();
    for (ty, name, r) in alter(shard, asked, req.validate_only, session).await {
        let mut out = alter_configs_response::AlterConfigsResourceResponse::default()
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
