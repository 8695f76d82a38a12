//! Users' SCRAM credentials and ACLs, the controller's side (issue 19), on shard 0: the
//! handlers check a request as Kafka does, then these propose the records
//! (`UserScramCredentialChanged`/`Removed`, `AclCreated`/`AclRemoved`); the image checks
//! them again when they are applied, so a concurrent change that made a proposal stale
//! rejects it whole.

use std::rc::Rc;

use keel_auth::acl::AclFilter;
use keel_raft::records::AclEntry;
use keel_raft::Record;

use super::{propose, OpError};
use crate::shard::BrokerShard;

/// Proposes one user's credential changes as one batch.
pub async fn alter_user(shard: Rc<BrokerShard>, records: Vec<Record>) -> Result<(), OpError> {
    propose(&shard, records).await
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
