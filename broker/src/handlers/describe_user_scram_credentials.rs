//! DescribeUserScramCredentials (key 50, v0): each user's SCRAM mechanisms and iteration
//! counts, from this shard's image (never a salt or a key). No users (null or empty) lists
//! every user with a credential; a user asked for twice gets DUPLICATE_RESOURCE, a user
//! without credentials RESOURCE_NOT_FOUND, as Kafka answers.

use std::collections::HashMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    ApiKey, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_raft::image::ScramCredentialInfo;
use std::collections::BTreeMap;

use super::{str_bytes, ApiSupport};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeUserScramCredentials, 0, 0);

fn described(
    user: &str,
    creds: &BTreeMap<i8, ScramCredentialInfo>,
) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(str_bytes(user.to_string()))
        .with_credential_infos(
            creds
                .iter()
                .map(|(m, c)| {
                    CredentialInfo::default()
                        .with_mechanism(*m)
                        .with_iterations(c.iterations)
                })
                .collect(),
        )
}

fn failed(user: &str, e: ResponseError, message: String) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(str_bytes(user.to_string()))
        .with_error_code(e.code())
        .with_error_message(Some(str_bytes(message)))
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeUserScramCredentialsRequest,
    session: &Session,
) -> DescribeUserScramCredentialsResponse {
    if !Authz::of(shard, session).cluster(Operation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let image = shard.image();
    let users = &image.cluster.scram_credentials;
    let mut resp = DescribeUserScramCredentialsResponse::default();
    let asked: Vec<String> = req
        .users
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.name.to_string())
        .collect();
    if asked.is_empty() {
        resp.results = users.iter().map(|(u, c)| described(u, c)).collect();
        return resp;
    }
    let mut times: HashMap<&str, usize> = HashMap::new();
    for u in &asked {
        *times.entry(u.as_str()).or_default() += 1;
    }
    let mut done = std::collections::HashSet::new();
    for u in &asked {
        if !done.insert(u.as_str()) {
            continue;
        }
        resp.results.push(if times[u.as_str()] > 1 {
            failed(
                u,
                ResponseError::DuplicateResource,
                format!("Cannot describe SCRAM credentials for the same user twice in a single request: {u}"),
            )
        } else if let Some(c) = users.get(u) {
            described(u, c)
        } else {
            failed(
                u,
                ResponseError::ResourceNotFound,
                format!("Attempt to describe a user credential that does not exist: {u}"),
            )
        });
    }
    resp
}
