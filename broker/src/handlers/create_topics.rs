//! CreateTopics (key 19), v0-7: partitions, replication factor (this single broker can
//! only hold 1), topic configs (validated), validate_only.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, ApiSupport};
use crate::config::TOPIC_CONFIGS;
use crate::controller::{self, OpError, TopicSpec};
use crate::errors::code;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::CreateTopics, 0, 7);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: CreateTopicsRequest,
    session: &Session,
) -> CreateTopicsResponse {
    let authz = Authz::of(shard, session);
    let on_cluster = authz.cluster(Operation::Create);
    let mut specs = Vec::new();
    let mut early: Vec<Option<OpError>> = Vec::new();
    let mut names = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        names.push(name.clone());
        let mut configs = BTreeMap::new();
        let mut err = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.to_string(), v.to_string());
                }
                None => {
                    err = Some(OpError::new(
                        ResponseError::InvalidConfig,
                        format!("null value for config {}", c.name.as_str()),
                    ))
                }
            }
        }
        let mut assignments: Vec<Vec<i32>> = Vec::new();
        if !t.assignments.is_empty() {
            let mut sorted: Vec<_> = t.assignments.iter().collect();
            sorted.sort_by_key(|a| a.partition_index);
            let dense = sorted
                .iter()
                .enumerate()
                .all(|(i, a)| a.partition_index == i as i32);
            let same_size = sorted.iter().all(|a| {
                !a.broker_ids.is_empty() && a.broker_ids.len() == sorted[0].broker_ids.len()
            });
            if !dense || !same_size {
                err = Some(OpError::new(
                    ResponseError::InvalidReplicaAssignment,
                    "assignments must cover partitions 0..N, each with the same number of replicas",
                ));
            } else if t.num_partitions != -1 || t.replication_factor != -1 {
                err = Some(OpError::new(
                    ResponseError::InvalidRequest,
                    "with assignments, numPartitions and replicationFactor must be -1",
                ));
            }
            assignments = sorted
                .iter()
                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                .collect();
        }
        let num_partitions = if t.assignments.is_empty() {
            t.num_partitions
        } else {
            t.assignments.len() as i32
        };
        if names.iter().filter(|n| **n == name).count() > 1 {
            err = Some(OpError::new(
                ResponseError::InvalidRequest,
                "topic named twice in one request",
            ));
        }
        // Kafka: CREATE on the cluster or on the topic.
        if err.is_none() && !on_cluster && !authz.topic(Operation::Create, &name) {
            err = Some(OpError::new(
                ResponseError::TopicAuthorizationFailed,
                format!("{} may not create topic {name}", session.principal),
            ));
        }
        early.push(err);
        specs.push(TopicSpec {
            name,
            num_partitions,
            replication_factor: t.replication_factor,
            configs,
            assignments,
        });
    }
    let to_create: Vec<TopicSpec> = specs
        .iter()
        .zip(&early)
        .filter(|(_, e)| e.is_none())
        .map(|(s, _)| s.clone())
        .collect();
    let validate_only = req.validate_only;
    let mut created = match controller::call(shard, move |s| {
        controller::create_topics(s, to_create, validate_only)
    })
    .await
    {
        Ok(r) => r.into_iter(),
        Err(e) => vec![Err(e); specs.len()].into_iter(),
    };
    let mut resp = CreateTopicsResponse::default();
    for (spec, err) in specs.iter().zip(early) {
        let result = match err {
            Some(e) => Err(e),
            None => created.next().unwrap_or_else(|| {
                Err(OpError::new(
                    ResponseError::UnknownServerError,
                    "lost result",
                ))
            }),
        };
        let version = hdr.request_api_version;
        let r = match result {
            // topic_id exists from v7; partitions, replication factor and configs from v5.
            Ok(t) if version < 5 => CreatableTopicResult::default().with_name(topic_name(&t.name)),
            Ok(t) => CreatableTopicResult::default()
                .with_name(topic_name(&t.name))
                .with_topic_id(if version >= 7 {
                    t.uuid()
                } else {
                    uuid::Uuid::nil()
                })
                .with_num_partitions(t.partitions.len() as i32)
                .with_replication_factor(t.replication_factor)
                .with_configs(Some(
                    TOPIC_CONFIGS
                        .iter()
                        .map(|k| {
                            let (v, from_topic) = shard.config.topic_value(&t.configs, k);
                            CreatableTopicConfigs::default()
                                .with_name(str_bytes(k.name))
                                .with_value(Some(str_bytes(v)))
                                .with_config_source(if from_topic { 1 } else { 5 })
                        })
                        .collect(),
                )),
            Err(e) => CreatableTopicResult::default()
                .with_name(topic_name(&spec.name))
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        };
        resp.topics.push(r);
    }
    let _ = code;
    resp
}
