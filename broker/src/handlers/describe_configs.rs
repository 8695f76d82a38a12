//! DescribeConfigs (key 32, v0-4; v0 reports is_default instead of a config source): topic
//! configs with their sources and synonyms, and the (static) broker configs. Changes are
//! AlterConfigs' and IncrementalAlterConfigs'.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    ApiKey, DescribeConfigsRequest, DescribeConfigsResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::config::{BROKER_KEYS, DYNAMIC_BROKER_KEYS, TOPIC_CONFIGS};
use crate::errors::code;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeConfigs, 0, 4);

/// Kafka's config resource types.
pub(super) const TOPIC: i8 = 2;
pub(super) const BROKER: i8 = 4;
// Kafka's config sources.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
/// Kafka's DYNAMIC_BROKER_CONFIG and DYNAMIC_DEFAULT_BROKER_CONFIG.
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_DEFAULT: i8 = 5;

/// Kafka's ConfigType for a config name.
fn config_type(name: &str) -> i8 {
    match name {
        "cleanup.policy" | "log.cleanup.policy" => 7,
        "max.message.bytes"
        | "min.insync.replicas"
        | "segment.bytes"
        | "message.max.bytes"
        | "log.segment.bytes"
        | "num.partitions"
        | "node.id"
        | "socket.request.max.bytes"
        | "log.write.inflight.shard.max"
        | "smp" => 3,
        "default.replication.factor" => 4,
        "auto.create.topics.enable" => 1,
        "flush.ms"
        | "retention.bytes"
        | "retention.ms"
        | "segment.ms"
        | "log.retention.ms"
        | "log.retention.bytes"
        | "log.roll.ms"
        | "log.flush.interval.ms"
        | "io.memory.bytes"
        | "io.latency.goal.us"
        | "log.write.buffer.bytes" => 5,
        _ => 2,
    }
}

fn wanted(keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>, name: &str) -> bool {
    keys.as_ref()
        .is_none_or(|k| k.is_empty() || k.iter().any(|k| k.as_str() == name))
}

fn describe_topic(
    shard: &BrokerShard,
    name: &str,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
    synonyms: bool,
) -> DescribeConfigsResult {
    let base = DescribeConfigsResult::default()
        .with_resource_type(TOPIC)
        .with_resource_name(str_bytes(name));
    let image = shard.image();
    let Some(topic) = image.topic(name) else {
        return base
            .with_error_code(code(ResponseError::UnknownTopicOrPartition))
            .with_error_message(Some(str_bytes(format!("Topic '{name}' does not exist."))));
    };
    let cfg = &shard.config;
    let configs = TOPIC_CONFIGS
        .iter()
        .filter(|k| wanted(keys, k.name))
        .map(|k| {
            let (value, from_topic) = cfg.topic_value(&topic.configs, k);
            let broker_source = if cfg.explicit.contains_key(k.broker_key) {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            let mut r = DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k.name))
                .with_value(Some(str_bytes(value)))
                .with_config_source(if from_topic {
                    SOURCE_TOPIC
                } else {
                    broker_source
                })
                .with_config_type(config_type(k.name));
            if synonyms {
                if from_topic {
                    r.synonyms.push(
                        DescribeConfigsSynonym::default()
                            .with_name(str_bytes(k.name))
                            .with_value(Some(str_bytes(value)))
                            .with_source(SOURCE_TOPIC),
                    );
                }
                r.synonyms.push(
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(k.broker_key))
                        .with_value(Some(str_bytes(cfg.topic_default(k))))
                        .with_source(broker_source),
                );
            }
            r
        })
        .collect();
    base.with_configs(configs)
}

fn describe_broker(
    shard: &BrokerShard,
    name: &str,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
) -> DescribeConfigsResult {
    let base = DescribeConfigsResult::default()
        .with_resource_type(BROKER)
        .with_resource_name(str_bytes(name));
    let cfg = &shard.config;
    if !name.is_empty() && name != cfg.node_id.to_string() {
        return base
            .with_error_code(code(ResponseError::InvalidRequest))
            .with_error_message(Some(str_bytes(format!(
                "this is broker {}, not {name}",
                cfg.node_id
            ))));
    }
    let image = shard.image();
    let dynamic = |scope: &str, key: &str| {
        image
            .cluster
            .broker_configs
            .get(scope)
            .and_then(|c| c.get(key))
            .cloned()
    };
    let configs = BROKER_KEYS
        .iter()
        .filter(|k| wanted(keys, k.name))
        .map(|k| {
            let is_dynamic = DYNAMIC_BROKER_KEYS.contains(&k.name);
            let (value, source) =
                if let Some(v) = dynamic(&cfg.node_id.to_string(), k.name).filter(|_| is_dynamic) {
                    (v, SOURCE_DYNAMIC_BROKER)
                } else if let Some(v) = dynamic("", k.name).filter(|_| is_dynamic) {
                    (v, SOURCE_DYNAMIC_DEFAULT_BROKER)
                } else if cfg.explicit.contains_key(k.name) {
                    (
                        cfg.values.get(k.name).cloned().unwrap_or_default(),
                        SOURCE_STATIC_BROKER,
                    )
                } else {
                    (
                        cfg.values.get(k.name).cloned().unwrap_or_default(),
                        SOURCE_DEFAULT,
                    )
                };
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k.name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(!is_dynamic)
                .with_config_source(source)
                .with_config_type(config_type(k.name))
                .with_documentation(Some(str_bytes(k.doc)))
        })
        .collect();
    base.with_configs(configs)
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: DescribeConfigsRequest,
    session: &Session,
) -> DescribeConfigsResponse {
    let version = hdr.request_api_version;
    let authz = Authz::of(shard, session);
    let mut resp = DescribeConfigsResponse::default();
    for r in req.resources {
        let name = r.resource_name.to_string();
        // Kafka: DESCRIBE_CONFIGS on the topic, or on the cluster for a broker.
        let refused = match r.resource_type {
            TOPIC if !authz.topic(Operation::DescribeConfigs, &name) => {
                Some(ResponseError::TopicAuthorizationFailed)
            }
            BROKER if !authz.cluster(Operation::DescribeConfigs) => {
                Some(ResponseError::ClusterAuthorizationFailed)
            }
            _ => None,
        };
        let result = match r.resource_type {
            _ if refused.is_some() => DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
                .with_error_code(code(refused.unwrap_or(ResponseError::UnknownServerError))),
            TOPIC => describe_topic(shard, &name, &r.configuration_keys, req.include_synonyms),
            BROKER => describe_broker(shard, &name, &r.configuration_keys),
            other => DescribeConfigsResult::default()
                .with_resource_type(other)
                .with_resource_name(r.resource_name.clone())
                .with_error_code(code(ResponseError::InvalidRequest))
                .with_error_message(Some(str_bytes(format!(
                    "resource type {other} is not supported"
                )))),
        };
        let mut result = result;
        if version == 0 {
            // v0 has no config_source, only is_default.
            for c in &mut result.configs {
                c.is_default = c.config_source == SOURCE_DEFAULT;
            }
        }
        if version < 3 {
            // config_type and documentation exist from v3.
            for c in &mut result.configs {
                c.config_type = 0;
                c.documentation = Some(Default::default());
            }
        }
        resp.results.push(result);
    }
    resp
}
