//! AlterClientQuotas (key 49, v0-1): sets and removes client quotas, as Kafka's
//! `ClientQuotaControlManager`: per entity, every op is checked (entity types `user` and
//! `client-id`, each once, names not empty; keys `producer_byte_rate`, `consumer_byte_rate`
//! (whole numbers) and `request_percentage`; a key twice is INVALID_REQUEST), values that do
//! not change and removals of quotas that are not there write nothing, and the records of
//! every valid entity are one metadata batch. `validate_only` writes nothing. Needs
//! ALTER_CONFIGS on the cluster.

use std::collections::HashSet;
use std::rc::Rc;

use kafka_protocol::messages::alter_client_quotas_request::EntryData as RequestEntry;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;
use keel_raft::image::{check_client_quota, quota_entity_key, ClusterImage};
use keel_raft::records::{QuotaEntityPart, QuotaValue};
use keel_raft::Record;

use super::{str_bytes, ApiSupport};
use crate::controller::{self, OpError};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AlterClientQuotas, 0, 1);

fn parts_of(entry: &RequestEntry) -> Vec<QuotaEntityPart> {
    entry
        .entity
        .iter()
        .map(|e| QuotaEntityPart {
            entity_type: e.entity_type.to_string(),
            entity_name: e.entity_name.as_ref().map(|n| n.to_string()),
        })
        .collect()
}

/// The records one entry writes against `image`, or why it is refused.
fn records_of(image: &ClusterImage, entry: &RequestEntry) -> Result<Vec<Record>, OpError> {
    let invalid = |m: String| OpError::new(ResponseError::InvalidRequest, m);
    let entity = parts_of(entry);
    let current = image.client_quotas.get(&quota_entity_key(&entity));
    let mut keys = HashSet::new();
    let mut records = Vec::new();
    if entry.ops.is_empty() {
        // The entity is still checked (Kafka validates it before looking at the ops).
        check_client_quota(&entity, "request_percentage", None).map_err(invalid)?;
    }
    for op in &entry.ops {
        let key = op.key.to_string();
        if !keys.insert(key.clone()) {
            return Err(invalid(format!(
                "Duplicate quota key {key} not updating quota for this entity"
            )));
        }
        let value = (!op.remove).then_some(op.value);
        check_client_quota(&entity, &key, value).map_err(invalid)?;
        let stored = current.and_then(|c| c.values.get(&key)).copied();
        let change = match value {
            None => stored.is_some(),
            Some(v) => stored != Some(QuotaValue(v)),
        };
        if change {
            records.push(Record::ClientQuotaChanged {
                entity: entity.clone(),
                key,
                value: value.map(QuotaValue),
            });
        }
    }
    Ok(records)
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: AlterClientQuotasRequest,
    session: &Session,
) -> AlterClientQuotasResponse {
    let allowed = Authz::of(shard, session).cluster(Operation::AlterConfigs);
    let image = shard.image();
    let mut seen = HashSet::new();
    let mut outcomes: Vec<Result<(), OpError>> = Vec::with_capacity(req.entries.len());
    let mut batch = Vec::new();
    for entry in &req.entries {
        let outcome = if !allowed {
            Err(OpError::new(
                ResponseError::ClusterAuthorizationFailed,
                "Cluster authorization failed.",
            ))
        } else if !seen.insert(quota_entity_key(&parts_of(entry))) {
            Err(OpError::new(
                ResponseError::InvalidRequest,
                "Ignoring duplicate entity",
            ))
        } else {
            records_of(&image.cluster, entry).map(|records| batch.extend(records))
        };
        outcomes.push(outcome);
    }
    if !req.validate_only && !batch.is_empty() {
        let committed = controller::call(shard, move |s| {
            controller::security::propose_batch(s, batch)
        })
        .await
        .and_then(|r| r);
        if let Err(e) = committed {
            for o in outcomes.iter_mut().filter(|o| o.is_ok()) {
                *o = Err(e.clone());
            }
        }
    }
    let entries = req
        .entries
        .iter()
        .zip(outcomes)
        .map(|(entry, outcome)| {
            let mut out = EntryData::default().with_entity(
                entry
                    .entity
                    .iter()
                    .map(|e| {
                        EntityData::default()
                            .with_entity_type(e.entity_type.clone())
                            .with_entity_name(e.entity_name.clone())
                    })
                    .collect(),
            );
            if let Err(e) = outcome {
                out.error_code = e.code.code();
                out.error_message = Some(str_bytes(e.message));
            }
            out
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}
