//! CreatePartitions (key 37), v0-3: grows a topic's partition count, placing the new
//! partitions as CreateTopics does or on the brokers the request's `assignments` name (checked
//! as Kafka's controller checks them); validate_only.

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, RequestHeader,
};

use super::{str_bytes, ApiSupport};
use crate::controller::{self, PartitionsRequest};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::CreatePartitions, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: CreatePartitionsRequest,
    session: &Session,
) -> CreatePartitionsResponse {
    // Kafka: ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED.
    let authz = Authz::of(shard, session);
    let mut resp = CreatePartitionsResponse::default();
    for t in req
        .topics
        .iter()
        .filter(|t| !authz.topic(Operation::Alter, &t.name))
    {
        resp.results.push(
            CreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(kafka_protocol::ResponseError::TopicAuthorizationFailed.code()),
        );
    }
    let asked: Vec<PartitionsRequest> = req
        .topics
        .iter()
        .filter(|t| authz.topic(Operation::Alter, &t.name))
        .map(|t| PartitionsRequest {
            topic: t.name.0.to_string(),
            count: t.count,
            assignments: t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|p| p.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let names: Vec<String> = asked.iter().map(|r| r.topic.clone()).collect();
    let n = asked.len();
    let validate_only = req.validate_only;
    let results = match controller::call(shard, move |s| {
        controller::create_partitions(s, asked, validate_only)
    })
    .await
    {
        Ok(r) => r,
        Err(e) => vec![Err(e); n],
    };
    for (name, r) in names.into_iter().zip(results) {
        let mut t = CreatePartitionsTopicResult::default().with_name(super::topic_name(&name));
        if let Err(e) = r {
            t.error_code = e.code.code();
            t.error_message = Some(str_bytes(e.message));
        }
        resp.results.push(t);
    }
    resp
}
