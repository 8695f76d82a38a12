//! DescribeConfigs (key 32, v0-4; v0 reports is_default instead of a config source), AlterConfigs (key 33, v0-2) and IncrementalAlterConfigs
//! (key 44, v0-1) for topic configs; DescribeConfigs also lists the (static) broker configs.
//! Changes go through the controller, which validates every value before anything changes.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, ApiKey, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::config::{BROKER_KEYS, TOPIC_CONFIGS};
use crate::controller::{self, ConfigChange, OpError};
use crate::errors::code;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeConfigs, 0, 4);
pub const ALTER_SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AlterConfigs, 0, 2);
pub const INCREMENTAL_ALTER_SUPPORT: ApiSupport =
    ApiSupport::new(ApiKey::IncrementalAlterConfigs, 0, 1);

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
// Kafka's config sources.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
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
    let configs = BROKER_KEYS
        .iter()
        .filter(|k| wanted(keys, k.name))
        .map(|k| {
            let value = cfg.values.get(k.name).cloned().unwrap_or_default();
            let source = if cfg.explicit.contains_key(k.name) {
                SOURCE_STATIC_BROKER
            } else {
                SOURCE_DEFAULT
            };
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(k.name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(true)
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
) -> DescribeConfigsResponse {
    let version = hdr.request_api_version;
    let mut resp = DescribeConfigsResponse::default();
    for r in req.resources {
        let name = r.resource_name.to_string();
        let result = match r.resource_type {
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

/// Sends topic changes to the controller; non-topic resources are refused. Answers in order:
/// (resource type, name, result).
async fn alter(
    shard: &Rc<BrokerShard>,
    asked: Vec<(i8, String, ConfigChange)>,
    validate_only: bool,
) -> Vec<(i8, String, Result<(), OpError>)> {
    let topics: Vec<(String, ConfigChange)> = asked
        .iter()
        .filter(|a| a.0 == TOPIC)
        .map(|a| (a.1.clone(), a.2.clone()))
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
    asked
        .into_iter()
        .map(|(ty, name, _)| {
            let r = if ty == TOPIC {
                results.next().unwrap_or_else(|| {
                    Err(OpError::new(
                        ResponseError::UnknownServerError,
                        "lost result",
                    ))
                })
            } else if ty == BROKER {
                Err(OpError::new(
                    ResponseError::InvalidRequest,
                    "Keel's broker configs are static: set them in the config file or flags",
                ))
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

pub async fn handle_alter(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: AlterConfigsRequest,
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
    for (ty, name, r) in alter(shard, asked, req.validate_only).await {
        let mut out = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(ty)
            .with_resource_name(str_bytes(name));
        if let Err(e) = r {
            out.error_code = e.code;
            out.error_message = Some(str_bytes(e.message));
        }
        resp.responses.push(out);
    }
    resp
}

pub async fn handle_incremental(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: IncrementalAlterConfigsRequest,
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
    for (ty, name, r) in alter(shard, asked, req.validate_only).await {
        let mut out = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(ty)
            .with_resource_name(str_bytes(name));
        if let Err(e) = r {
            out.error_code = e.code;
            out.error_message = Some(str_bytes(e.message));
        }
        resp.responses.push(out);
    }
    resp
}
