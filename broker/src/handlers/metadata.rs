//! Metadata (key 3), v0-12: the live brokers, a controller id, topics with each partition's
//! leader, leader epoch, replicas and ISR, from this broker's copy of the committed metadata
//! image. As KRaft brokers do, the controller id given to clients is a live broker (this
//! one): clients send admin requests to it and it forwards them to the quorum. Unknown topics
//! are created when both the request and `auto.create.topics.enable` allow it.

use std::rc::Rc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, MetadataRequest, MetadataResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, ApiSupport};
use crate::controller::{self, TopicSpec};
use crate::errors::code;
use crate::metadata::{validate_topic_name, MetadataImage, TopicMeta};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::{Operation, ResourceType};

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::Metadata, 0, 12);

/// Creates those of `names` that do not exist (and have legal names), with broker defaults;
/// `__consumer_offsets` is created as the group coordinators need it.
pub async fn auto_create(shard: &Rc<BrokerShard>, names: &[String]) {
    let image = shard.image();
    if image.topic(keel_coordinator::OFFSETS_TOPIC).is_none()
        && names.iter().any(|n| n == keel_coordinator::OFFSETS_TOPIC)
    {
        if let Err(e) = crate::group::ensure_offsets_topic(shard).await {
            tracing::warn!(error = %e.message, "auto-create failed");
        }
    }
    let missing: Vec<TopicSpec> = names
        .iter()
        .filter(|n| {
            n.as_str() != keel_coordinator::OFFSETS_TOPIC
                && n.as_str() != keel_coordinator::TRANSACTION_STATE_TOPIC
        })
        .filter(|n| image.topic(n).is_none() && validate_topic_name(n).is_ok())
        .map(|n| TopicSpec {
            name: n.clone(),
            num_partitions: -1,
            replication_factor: -1,
            configs: Default::default(),
            assignments: Vec::new(),
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    match controller::call(shard, move |s| controller::create_topics(s, missing, false)).await {
        Ok(results) => {
            for r in results.into_iter().filter_map(Result::err) {
                if r.code != keel_vocab::ErrorCode::of(ResponseError::TopicAlreadyExists) {
                    tracing::warn!(error = %r.message, "auto-create failed");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e.message, "auto-create failed"),
    }
}

/// A topic's entry; `operations` is its `authorized_operations` field (asked from v8 on).
pub fn topic_response(
    image: &MetadataImage,
    t: &TopicMeta,
    version: i16,
    operations: i32,
) -> MetadataResponseTopic {
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&t.name)))
        // topic_id exists from v10, leader_epoch from v7.
        .with_topic_id(if version >= 10 {
            t.uuid()
        } else {
            uuid::Uuid::nil()
        })
        .with_is_internal(
            t.name == keel_coordinator::OFFSETS_TOPIC
                || t.name == keel_coordinator::TRANSACTION_STATE_TOPIC,
        )
        .with_topic_authorized_operations(operations)
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| {
                    MetadataResponsePartition::default()
                        .with_error_code(if p.leader < 0 {
                            code(ResponseError::LeaderNotAvailable)
                        } else {
                            0
                        })
                        .with_partition_index(p.index)
                        .with_leader_id(BrokerId(p.leader))
                        .with_leader_epoch(if version >= 7 { p.leader_epoch } else { -1 })
                        .with_replica_nodes(ids(&p.replicas))
                        .with_isr_nodes(ids(&p.isr))
                        // From v5: replicas not registered or whose log is offline.
                        .with_offline_replicas(if version >= 5 {
                            ids(&image.offline_replicas(t, p))
                        } else {
                            Vec::new()
                        })
                })
                .collect(),
        )
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: MetadataRequest,
    session: &Session,
) -> MetadataResponse {
    let listener: &str = &session.listener;
    let version = hdr.request_api_version;
    let topic_operations = version >= 8 && req.include_topic_authorized_operations;
    // Cluster operations are asked in Metadata v8-10; later versions use DescribeCluster.
    let cluster_operations =
        (8..=10).contains(&version) && req.include_cluster_authorized_operations;
    // v0 asks for all topics with an empty list; v1+ with null.
    let wanted: Option<Vec<(Option<String>, uuid::Uuid)>> = match req.topics {
        None => None,
        Some(ts) if ts.is_empty() && version == 0 => None,
        Some(ts) => Some(
            ts.into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect(),
        ),
    };
    let authz = Authz::of(shard, session);
    let allow_create =
        shard.config.auto_create_topics_enable && (version < 4 || req.allow_auto_topic_creation);
    if let (Some(w), true) = (&wanted, allow_create) {
        // Kafka: auto-creation needs CREATE on the cluster or on the topic (and DESCRIBE to
        // see it after).
        let on_cluster = authz.cluster(Operation::Create);
        let names: Vec<String> = w
            .iter()
            .filter_map(|(n, _)| n.clone())
            .filter(|n| on_cluster || authz.topic(Operation::Create, n))
            .collect();
        auto_create(shard, &names).await;
    }
    let operations_of = |name: &str| {
        if topic_operations {
            authz.operations(ResourceType::Topic, name, crate::acl::TOPIC_OPERATIONS)
        } else {
            crate::acl::OMITTED
        }
    };
    let image = shard.image();
    let mut resp = MetadataResponse::default()
        .with_brokers(
            image
                .brokers
                .values()
                // Each broker at its endpoint of the listener the request came in on; one
                // without that listener is left out, as Kafka does.
                .filter_map(|b| {
                    let (host, port) = b.endpoint(listener)?;
                    Some(
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(b.id))
                            .with_host(str_bytes(host.to_string()))
                            .with_port(port)
                            // rack exists from v1.
                            .with_rack(if version >= 1 {
                                b.rack.clone().map(str_bytes)
                            } else {
                                None
                            }),
                    )
                })
                .collect(),
        )
        // cluster_id exists from v2.
        .with_cluster_id((version >= 2).then(|| str_bytes(shard.config.cluster_id.clone())))
        .with_controller_id(BrokerId(shard.config.node_id))
        .with_cluster_authorized_operations(if cluster_operations {
            authz.operations(
                ResourceType::Cluster,
                keel_auth::acl::CLUSTER_NAME,
                crate::acl::CLUSTER_OPERATIONS,
            )
        } else {
            crate::acl::OMITTED
        });
    match wanted {
        None => {
            // All topics: those the session may not DESCRIBE are left out (Kafka).
            resp.topics = image
                .topics
                .values()
                .filter(|t| authz.topic(Operation::Describe, &t.name))
                .map(|t| topic_response(&image, t, version, operations_of(&t.name)))
                .collect()
        }
        Some(w) => {
            for (name, id) in w {
                let found = match &name {
                    Some(n) => image.topic(n),
                    None => image.topic_by_id(id.as_bytes()),
                };
                // A topic asked for by name that the session may not DESCRIBE is answered
                // TOPIC_AUTHORIZATION_FAILED, whether it exists or not (Kafka).
                let described = match (&name, found) {
                    (Some(n), _) => authz.topic(Operation::Describe, n),
                    (None, Some(t)) => authz.topic(Operation::Describe, &t.name),
                    (None, None) => true,
                };
                let found = found.filter(|_| described);
                let t = match found {
                    Some(t) => topic_response(&image, t, version, operations_of(&t.name)),
                    None if !described => MetadataResponseTopic::default()
                        .with_name(name.as_deref().map(topic_name))
                        .with_topic_id(if version >= 10 && name.is_none() {
                            id
                        } else {
                            uuid::Uuid::nil()
                        })
                        .with_error_code(code(ResponseError::TopicAuthorizationFailed)),
                    None => {
                        let err = match &name {
                            Some(n) if validate_topic_name(n).is_err() => {
                                ResponseError::InvalidTopicException
                            }
                            Some(_) => ResponseError::UnknownTopicOrPartition,
                            None => ResponseError::UnknownTopicId,
                        };
                        MetadataResponseTopic::default()
                            .with_name(name.as_deref().map(topic_name))
                            .with_topic_id(if version >= 10 { id } else { uuid::Uuid::nil() })
                            .with_error_code(code(err))
                    }
                };
                resp.topics.push(t);
            }
        }
    }
    resp
}
