//! DescribeCluster (key 60), v0-1: this broker, as cluster member and controller.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, RequestHeader,
};

use super::{str_bytes, ApiSupport};
use crate::security::Session;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeCluster, 0, 1);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeClusterRequest,
    session: &Session,
) -> DescribeClusterResponse {
    let listener: &str = &session.listener;
    let c = &shard.config;
    let image = shard.image();
    DescribeClusterResponse::default()
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(str_bytes(c.cluster_id.clone()))
        .with_controller_id(BrokerId(c.node_id))
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            crate::security::Authz::of(shard, session).operations(
                keel_auth::acl::ResourceType::Cluster,
                keel_auth::acl::CLUSTER_NAME,
                crate::acl::CLUSTER_OPERATIONS,
            )
        } else {
            crate::acl::OMITTED
        })
        .with_brokers(
            image
                .brokers
                .values()
                // Each broker at its endpoint of the listener asked on (none: left out).
                .filter_map(|b| {
                    let (host, port) = b.endpoint(listener)?;
                    Some(
                        DescribeClusterBroker::default()
                            .with_broker_id(BrokerId(b.id))
                            .with_host(str_bytes(host.to_string()))
                            .with_port(port)
                            .with_rack(b.rack.clone().map(str_bytes)),
                    )
                })
                .collect(),
        )
}
