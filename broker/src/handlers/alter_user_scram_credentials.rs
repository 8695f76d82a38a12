//! AlterUserScramCredentials (key 51, v0): sets and deletes users' SCRAM credentials. The
//! client sends the salted password (PBKDF2 runs on its side); the broker keeps only the
//! salt, StoredKey, ServerKey and iterations derived from it (`keel_auth::scram`), through
//! the controller. Checked per user as Kafka checks them: an unknown mechanism is
//! UNSUPPORTED_SASL_MECHANISM, an iteration count outside 4096-16384, an empty name or salt
//! or a salted password of the wrong length UNACCEPTABLE_CREDENTIAL, one credential altered
//! twice DUPLICATE_RESOURCE, deleting one that is not there RESOURCE_NOT_FOUND. Each user's
//! changes are one metadata batch: all of them or none.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_auth::scram::{self, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use keel_raft::Record;

use super::{str_bytes, ApiSupport};
use crate::controller::{self, OpError};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AlterUserScramCredentials, 0, 0);

/// One user's requested changes, or why they are refused.
#[derive(Default)]
struct UserChanges {
    records: Vec<Record>,
    error: Option<OpError>,
}

impl UserChanges {
    fn refuse(&mut self, e: ResponseError, message: String) {
        self.error.get_or_insert(OpError::new(e, message));
    }
}

/// The users in the order the request first names them, with their changes.
#[derive(Default)]
struct Changes {
    order: Vec<String>,
    users: HashMap<String, UserChanges>,
    seen: HashSet<(String, i8)>,
}

impl Changes {
    fn user(&mut self, name: &str) -> &mut UserChanges {
        self.users.entry(name.to_string()).or_default()
    }

    /// `name`'s changes, and whether `mechanism` was already altered for it.
    fn entry(&mut self, name: &str, mechanism: i8) -> (bool, &mut UserChanges) {
        if !self.users.contains_key(name) {
            self.order.push(name.to_string());
        }
        let twice = !self.seen.insert((name.to_string(), mechanism));
        (twice, self.users.entry(name.to_string()).or_default())
    }
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: AlterUserScramCredentialsRequest,
    session: &Session,
) -> AlterUserScramCredentialsResponse {
    if !Authz::of(shard, session).cluster(Operation::Alter) {
        // Kafka: every user named, CLUSTER_AUTHORIZATION_FAILED.
        let names = req
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string()));
        let mut seen = std::collections::BTreeSet::new();
        return AlterUserScramCredentialsResponse::default().with_results(
            names
                .filter(|n| seen.insert(n.clone()))
                .map(|n| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(n))
                        .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                })
                .collect(),
        );
    }
    let image = shard.image();
    let stored = &image.cluster.scram_credentials;
    let mut changes = Changes::default();
    // A credential altered twice refuses its user first, before any other check (as Kafka).
    for (name, mechanism) in req
        .deletions
        .iter()
        .map(|d| (d.name.as_str(), d.mechanism))
        .chain(
            req.upsertions
                .iter()
                .map(|u| (u.name.as_str(), u.mechanism)),
        )
    {
        let (twice, u) = changes.entry(name, mechanism);
        if twice {
            u.refuse(
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request".into(),
            );
        }
    }
    for d in &req.deletions {
        let name = d.name.as_str();
        let u = changes.user(name);
        if Mechanism::from_kafka_type(d.mechanism).is_none() {
            u.refuse(
                ResponseError::UnsupportedSaslMechanism,
                format!("Unknown SCRAM mechanism {}", d.mechanism),
            );
        } else if !stored
            .get(name)
            .is_some_and(|m| m.contains_key(&d.mechanism))
        {
            u.refuse(
                ResponseError::ResourceNotFound,
                "Attempt to delete a user credential that does not exist".into(),
            );
        }
        u.records.push(Record::UserScramCredentialRemoved {
            name: name.to_string(),
            mechanism: d.mechanism,
        });
    }
    for up in &req.upsertions {
        let name = up.name.as_str();
        let u = changes.user(name);
        let Some(mech) = Mechanism::from_kafka_type(up.mechanism) else {
            u.refuse(
                ResponseError::UnsupportedSaslMechanism,
                format!("Unknown SCRAM mechanism {}", up.mechanism),
            );
            continue;
        };
        let unacceptable = if name.is_empty() {
            Some("Username must not be empty".to_string())
        } else if up.iterations < MIN_ITERATIONS as i32 {
            Some(format!(
                "Too few iterations: {} (at least {MIN_ITERATIONS})",
                up.iterations
            ))
        } else if up.iterations > MAX_ITERATIONS as i32 {
            Some(format!(
                "Too many iterations: {} (at most {MAX_ITERATIONS})",
                up.iterations
            ))
        } else if up.salt.is_empty() {
            Some("The salt must not be empty".to_string())
        } else if up.salted_password.len() != mech.digest_len() {
            Some(format!(
                "The salted password must be {} bytes for {}",
                mech.digest_len(),
                mech.name()
            ))
        } else {
            None
        };
        if let Some(why) = unacceptable {
            u.refuse(ResponseError::UnacceptableCredential, why);
            continue;
        }
        let c = scram::credential(mech, &up.salted_password, &up.salt, up.iterations as u32);
        u.records.push(Record::UserScramCredentialChanged {
            name: name.to_string(),
            mechanism: up.mechanism,
            salt: c.salt,
            stored_key: c.stored_key,
            server_key: c.server_key,
            iterations: up.iterations,
        });
    }
    let mut resp = AlterUserScramCredentialsResponse::default();
    for name in changes.order {
        let u = changes.users.remove(&name).unwrap_or_default();
        let result = match u.error {
            Some(e) => Err(e),
            None => controller::call(shard, move |s| {
                controller::security::propose_batch(s, u.records)
            })
            .await
            .and_then(|r| r),
        };
        let mut r = AlterUserScramCredentialsResult::default().with_user(str_bytes(name));
        if let Err(e) = result {
            r.error_code = e.code.code();
            r.error_message = Some(str_bytes(e.message));
        }
        resp.results.push(r);
    }
    resp
}
