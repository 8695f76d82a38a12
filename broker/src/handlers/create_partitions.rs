//! CreatePartitions (key 37), v0-3: grows a topic's partition count; validate_only.

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, RequestHeader,
};

use super::{str_bytes, ApiSupport};
use crate::controller;
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::CreatePartitions, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let asked: Vec<(String, i32)> = req
        .topics
        .iter()
        .map(|t| (t.name.0.to_string(), t.count))
        .collect();
    let n = asked.len();
    let validate_only = req.validate_only;
    let call_asked = asked.clone();
    let results = match controller::call(shard, move |s| {
        controller::create_partitions(s, call_asked, validate_only)
    })
    .await
    {
        Ok(r) => r,
        Err(e) => vec![Err(e); n],
    };
    let mut resp = CreatePartitionsResponse::default();
    for ((name, _), r) in asked.into_iter().zip(results) {
        let mut t = CreatePartitionsTopicResult::default().with_name(super::topic_name(&name));
        if let Err(e) = r {
            t.error_code = e.code.code();
            t.error_message = Some(str_bytes(e.message));
        }
        resp.results.push(t);
    }
    resp
}
