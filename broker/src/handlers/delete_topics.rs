//! DeleteTopics (key 20), v0-6: by name (all versions) or topic id (v6). The owners close
//! the partitions' logs and remove their directories before the answer.

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, ApiSupport};
use crate::controller;
use crate::errors::code;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DeleteTopics, 0, 6);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: DeleteTopicsRequest,
    session: &Session,
) -> DeleteTopicsResponse {
    let authz = Authz::of(shard, session);
    let image = shard.image();
    // (name if resolved, id as asked, error)
    let mut asked: Vec<(Option<String>, uuid::Uuid, Option<i16>)> = Vec::new();
    if hdr.request_api_version >= 6 {
        for t in req.topics {
            match t.name {
                Some(n) => {
                    let n = n.0.to_string();
                    let id = image.topic(&n).map(|t| t.uuid()).unwrap_or_default();
                    asked.push((Some(n), id, None));
                }
                None => match image.topic_by_id(t.topic_id.as_bytes()) {
                    Some(meta) => asked.push((Some(meta.name.clone()), t.topic_id, None)),
                    None => {
                        asked.push((None, t.topic_id, Some(code(ResponseError::UnknownTopicId))))
                    }
                },
            }
        }
    } else {
        for n in req.topic_names {
            let n = n.0.to_string();
            let id = image.topic(&n).map(|t| t.uuid()).unwrap_or_default();
            asked.push((Some(n), id, None));
        }
    }
    // Kafka: DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED (and an id the session may
    // not DESCRIBE is an unknown id).
    for (name, _, err) in asked.iter_mut().filter(|a| a.2.is_none()) {
        let Some(n) = name.as_deref() else { continue };
        if !authz.topic(Operation::Delete, n) {
            *err = Some(code(ResponseError::TopicAuthorizationFailed));
        }
    }
    let names: Vec<String> = asked
        .iter()
        .filter(|a| a.2.is_none())
        .filter_map(|a| a.0.clone())
        .collect();
    let n = names.len();
    let mut results =
        match controller::call(shard, move |s| controller::delete_topics(s, names)).await {
            Ok(r) => r.into_iter(),
            Err(e) => vec![Err(e); n].into_iter(),
        };
    let mut resp = DeleteTopicsResponse::default();
    for (name, id, err) in asked {
        let version = hdr.request_api_version;
        // topic_id exists from v6 (and a null name only there), error_message from v5.
        let name = if version >= 6 {
            name
        } else {
            name.or_else(|| Some(id.to_string()))
        };
        let mut r = DeletableTopicResult::default()
            .with_name(name.as_deref().map(topic_name))
            .with_topic_id(if version >= 6 { id } else { uuid::Uuid::nil() });
        match err {
            Some(code) => r.error_code = code,
            None => {
                if let Some(Err(e)) = results.next() {
                    r.error_code = e.code.code();
                    if version >= 5 {
                        r.error_message = Some(str_bytes(e.message));
                    }
                }
            }
        }
        resp.responses.push(r);
    }
    resp
}
