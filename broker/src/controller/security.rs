//! Users' SCRAM credentials, ACLs and client quotas, the controller's side (issue 19), on
//! shard 0: the handlers check a request as Kafka does, then these propose the records
//! (`UserScramCredentialChanged`/`Removed`, `AclCreated`/`AclRemoved`,
//! `ClientQuotaChanged`); the image checks
//! them again when they are applied, so a concurrent change that made a proposal stale
//! rejects it whole.

use std::rc::Rc;

use keel_auth::acl::AclFilter;
use keel_raft::records::AclEntry;
use keel_raft::Record;

use super::{propose, OpError};
use crate::shard::BrokerShard;

/// Proposes records as one batch: one user's credential changes, or an AlterClientQuotas
/// request's quota changes.
pub async fn propose_batch(shard: Rc<BrokerShard>, records: Vec<Record>) -> Result<(), OpError> {
    propose(&shard, records).await
}

/// `keel serve --add-scram`: writes each user's credential if the image has none for that
/// mechanism (so a restart with the same flags changes nothing, and a password changed since
/// with AlterUserScramCredentials stays). Retried while the quorum has no leader yet.
pub async fn add_bootstrap_users(shard: Rc<BrokerShard>) {
    for user in shard.config.add_scram.clone() {
        let mech = user.mechanism;
        for attempt in 0..60 {
            let present = shard
                .image()
                .cluster
                .scram_credentials
                .get(&user.name)
                .is_some_and(|m| m.contains_key(&mech.kafka_type()));
            if present {
                tracing::info!(user = %user.name, mechanism = mech.name(), "--add-scram: the user already has a credential; left as it is");
                break;
            }
            let salt = keel_auth::scram::random_nonce(32).into_bytes();
            let salted = keel_auth::scram::salted_password(
                mech,
                user.password.as_bytes(),
                &salt,
                user.iterations,
            );
            let c = keel_auth::scram::credential(mech, &salted, &salt, user.iterations);
            let record = Record::UserScramCredentialChanged {
                name: user.name.clone(),
                mechanism: mech.kafka_type(),
                salt: c.salt,
                stored_key: c.stored_key,
                server_key: c.server_key,
                iterations: user.iterations as i32,
            };
            let done = crate::controller::call(&shard, move |s| propose_batch(s, vec![record]))
                .await
                .and_then(|r| r);
            match done {
                Ok(()) => {
                    tracing::info!(user = %user.name, mechanism = mech.name(), "--add-scram: user written to the metadata log");
                    break;
                }
                Err(e) if attempt < 59 => {
                    tracing::debug!(user = %user.name, error = %e.message, "--add-scram: retrying");
                    if !shard
                        .sleep_unless_shutdown(std::time::Duration::from_secs(1))
                        .await
                    {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!(user = %user.name, error = %e.message, "--add-scram: the user could not be written")
                }
            }
        }
    }
}

/// Creates an ACL binding under a new id; a binding already stored is not stored twice
/// (Kafka answers success).
pub async fn create_acl(shard: Rc<BrokerShard>, acl: AclEntry) -> Result<(), OpError> {
    if shard.image().cluster.acls.values().any(|a| *a == acl) {
        return Ok(());
    }
    let id = *uuid::Uuid::new_v4().as_bytes();
    propose(&shard, vec![Record::AclCreated { id, acl }]).await
}

/// Deletes every binding the filter matches, in one batch; returns them.
pub async fn delete_acls(
    shard: Rc<BrokerShard>,
    filter: AclFilter,
) -> Result<Vec<AclEntry>, OpError> {
    let image = shard.image();
    let mut matched = Vec::new();
    let mut records = Vec::new();
    for (key, acl) in &image.cluster.acls {
        if crate::security::matches(&filter, acl) {
            let id = id_of(key);
            records.push(Record::AclRemoved { id });
            matched.push(acl.clone());
        }
    }
    if !records.is_empty() {
        propose(&shard, records).await?;
    }
    Ok(matched)
}

/// The id behind an image key (`keel_raft::image::acl_key`, 32 hex digits).
fn id_of(key: &str) -> [u8; 16] {
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = key
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or_default();
    }
    id
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_round_trip_through_image_keys() {
        let id: [u8; 16] = *b"\x00\x01\x7f\x80\xff0123456789a";
        assert_eq!(super::id_of(&keel_raft::image::acl_key(&id)), id);
    }
}
