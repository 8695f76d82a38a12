//! Metadata records to and from their bytes on the Raft log: one log entry holds one
//! `RecordBatch` flatbuffer (`raft/schema/metadata.fbs`, code in `src/generated/`).
//!
//! Runs on the metadata thread: the controller encodes what it proposes, the state machine
//! decodes what it applies, and so does a node reading its log or a snapshot after a restart.
//!
//! Invariants: `decode_batch(&encode_batch(rs))` gives back `rs` for every `rs`. Decoding treats
//! the bytes as hostile and never panics: the flatbuffers verifier runs first (bounds, UTF-8,
//! union consistency, depth and table-count limits), then every field a record cannot do without
//! is checked, so a missing one is a [`RecordError::Field`] naming the entry and the field. Unset
//! optional fields (`Option` in [`Record`]) are absent in the buffer, never a sentinel value.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, Vector, WIPOffset};

use crate::error::RecordError;
use crate::generated::metadata as fb;
use crate::records::{AclEntry, ListenerEndpoint, QuotaEntityPart, QuotaValue, Record, TopicId};

/// Encodes one batch. Infallible for any records, except that the flatbuffers builder panics
/// past 2 GiB: callers must bound what they put in one batch.
pub fn encode_batch(records: &[Record]) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let entries: Vec<_> = records.iter().map(|r| encode_entry(&mut fbb, r)).collect();
    let entries = fbb.create_vector(&entries);
    let batch = fb::RecordBatch::create(
        &mut fbb,
        &fb::RecordBatchArgs {
            entries: Some(entries),
        },
    );
    fbb.finish(batch, None);
    fbb.finished_data().to_vec()
}

/// Decodes one batch; any defect in any record fails the whole batch (it is applied all or
/// none).
pub fn decode_batch(bytes: &[u8]) -> Result<Vec<Record>, RecordError> {
    let batch = flatbuffers::root::<fb::RecordBatch>(bytes)
        .map_err(|e| RecordError::Invalid(e.to_string()))?;
    let entries = batch
        .entries()
        .ok_or_else(|| RecordError::Invalid("record batch has no `entries`".to_string()))?;
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| decode_entry(index, entry))
        .collect()
}

fn encode_entry<'b>(fbb: &mut FlatBufferBuilder<'b>, record: &Record) -> WIPOffset<fb::Entry<'b>> {
    let (record_type, table) = encode_record(fbb, record);
    fb::Entry::create(
        fbb,
        &fb::EntryArgs {
            record_type,
            record: Some(table),
        },
    )
}

fn encode_record<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    record: &Record,
) -> (fb::Record, WIPOffset<UnionWIPOffset>) {
    match record {
        Record::BrokerRegistered {
            broker_id,
            incarnation_id,
            host,
            port,
            rack,
            shard_count,
            inter_broker_host,
            inter_broker_port,
            inter_broker_shard_ports,
            previous_broker_epoch,
            listeners,
        } => {
            let endpoints: Vec<_> = listeners
                .iter()
                .map(|l| {
                    let args = fb::EndpointArgs {
                        name: Some(fbb.create_string(&l.name)),
                        host: Some(fbb.create_string(&l.host)),
                        port: l.port,
                    };
                    fb::Endpoint::create(fbb, &args)
                })
                .collect();
            let listeners = (!endpoints.is_empty()).then(|| fbb.create_vector(&endpoints));
            let args = fb::BrokerRegisteredArgs {
                broker_id: *broker_id,
                incarnation_id: Some(&fb::Uuid::new(incarnation_id)),
                host: Some(fbb.create_string(host)),
                port: *port,
                rack: rack.as_deref().map(|r| fbb.create_string(r)),
                shard_count: *shard_count,
                inter_broker_host: inter_broker_host.as_deref().map(|h| fbb.create_string(h)),
                inter_broker_port: *inter_broker_port,
                // Empty is written as absent: it decodes the same, and old records match.
                inter_broker_shard_ports: (!inter_broker_shard_ports.is_empty())
                    .then(|| fbb.create_vector(inter_broker_shard_ports)),
                previous_broker_epoch: *previous_broker_epoch,
                listeners,
            };
            let table = fb::BrokerRegistered::create(fbb, &args);
            (fb::Record::BrokerRegistered, table.as_union_value())
        }
        Record::BrokerFenced { broker_id } => {
            let args = fb::BrokerFencedArgs {
                broker_id: *broker_id,
            };
            let table = fb::BrokerFenced::create(fbb, &args);
            (fb::Record::BrokerFenced, table.as_union_value())
        }
        Record::BrokerUnregistered {
            broker_id,
            broker_epoch,
        } => {
            let args = fb::BrokerUnregisteredArgs {
                broker_id: *broker_id,
                broker_epoch: *broker_epoch,
            };
            let table = fb::BrokerUnregistered::create(fbb, &args);
            (fb::Record::BrokerUnregistered, table.as_union_value())
        }
        Record::BrokerUnfenced { broker_id } => {
            let args = fb::BrokerUnfencedArgs {
                broker_id: *broker_id,
            };
            let table = fb::BrokerUnfenced::create(fbb, &args);
            (fb::Record::BrokerUnfenced, table.as_union_value())
        }
        Record::TopicCreated { name, topic_id } => {
            let args = fb::TopicCreatedArgs {
                name: Some(fbb.create_string(name)),
                topic_id: Some(&fb::Uuid::new(topic_id)),
            };
            let table = fb::TopicCreated::create(fbb, &args);
            (fb::Record::TopicCreated, table.as_union_value())
        }
        Record::TopicDeleted { name, topic_id } => {
            let args = fb::TopicDeletedArgs {
                name: Some(fbb.create_string(name)),
                topic_id: Some(&fb::Uuid::new(topic_id)),
            };
            let table = fb::TopicDeleted::create(fbb, &args);
            (fb::Record::TopicDeleted, table.as_union_value())
        }
        Record::PartitionCreated {
            topic_id,
            partition,
            replicas,
            isr,
            leader,
            leader_epoch,
        } => {
            let args = fb::PartitionCreatedArgs {
                topic_id: Some(&fb::Uuid::new(topic_id)),
                partition: *partition,
                replicas: Some(fbb.create_vector(replicas)),
                isr: Some(fbb.create_vector(isr)),
                leader: *leader,
                leader_epoch: *leader_epoch,
            };
            let table = fb::PartitionCreated::create(fbb, &args);
            (fb::Record::PartitionCreated, table.as_union_value())
        }
        Record::PartitionChanged {
            topic_id,
            partition,
            leader,
            leader_epoch,
            isr,
            replicas,
            expected_leader_epoch,
            expected_partition_epoch,
            elr,
            last_known_elr,
            adding_replicas,
            removing_replicas,
            original_replicas,
        } => {
            let args = fb::PartitionChangedArgs {
                topic_id: Some(&fb::Uuid::new(topic_id)),
                partition: *partition,
                leader: *leader,
                leader_epoch: *leader_epoch,
                isr: isr.as_deref().map(|v| fbb.create_vector(v)),
                replicas: replicas.as_deref().map(|v| fbb.create_vector(v)),
                expected_leader_epoch: *expected_leader_epoch,
                expected_partition_epoch: *expected_partition_epoch,
                elr: elr.as_deref().map(|v| fbb.create_vector(v)),
                last_known_elr: last_known_elr.as_deref().map(|v| fbb.create_vector(v)),
                adding_replicas: adding_replicas.as_deref().map(|v| fbb.create_vector(v)),
                removing_replicas: removing_replicas.as_deref().map(|v| fbb.create_vector(v)),
                original_replicas: original_replicas.as_deref().map(|v| fbb.create_vector(v)),
            };
            let table = fb::PartitionChanged::create(fbb, &args);
            (fb::Record::PartitionChanged, table.as_union_value())
        }
        Record::ConfigChanged {
            resource_type,
            resource_name,
            name,
            value,
        } => {
            let args = fb::ConfigChangedArgs {
                resource_type: *resource_type,
                resource_name: Some(fbb.create_string(resource_name)),
                name: Some(fbb.create_string(name)),
                value: value.as_deref().map(|v| fbb.create_string(v)),
            };
            let table = fb::ConfigChanged::create(fbb, &args);
            (fb::Record::ConfigChanged, table.as_union_value())
        }
        Record::ProducerIdsAllocated {
            broker_id,
            first_producer_id,
            block_size,
        } => {
            let args = fb::ProducerIdsAllocatedArgs {
                broker_id: *broker_id,
                first_producer_id: *first_producer_id,
                block_size: *block_size,
            };
            let table = fb::ProducerIdsAllocated::create(fbb, &args);
            (fb::Record::ProducerIdsAllocated, table.as_union_value())
        }
        Record::UserScramCredentialChanged {
            name,
            mechanism,
            salt,
            stored_key,
            server_key,
            iterations,
        } => {
            let args = fb::UserScramCredentialChangedArgs {
                name: Some(fbb.create_string(name)),
                mechanism: *mechanism,
                salt: Some(fbb.create_vector(salt)),
                stored_key: Some(fbb.create_vector(stored_key)),
                server_key: Some(fbb.create_vector(server_key)),
                iterations: *iterations,
            };
            let table = fb::UserScramCredentialChanged::create(fbb, &args);
            (
                fb::Record::UserScramCredentialChanged,
                table.as_union_value(),
            )
        }
        Record::UserScramCredentialRemoved { name, mechanism } => {
            let args = fb::UserScramCredentialRemovedArgs {
                name: Some(fbb.create_string(name)),
                mechanism: *mechanism,
            };
            let table = fb::UserScramCredentialRemoved::create(fbb, &args);
            (
                fb::Record::UserScramCredentialRemoved,
                table.as_union_value(),
            )
        }
        Record::AclCreated { id, acl } => {
            let args = fb::AclCreatedArgs {
                id: Some(&fb::Uuid::new(id)),
                resource_type: acl.resource_type,
                resource_name: Some(fbb.create_string(&acl.resource_name)),
                pattern_type: acl.pattern_type,
                principal: Some(fbb.create_string(&acl.principal)),
                host: Some(fbb.create_string(&acl.host)),
                operation: acl.operation,
                permission_type: acl.permission_type,
            };
            let table = fb::AclCreated::create(fbb, &args);
            (fb::Record::AclCreated, table.as_union_value())
        }
        Record::AclRemoved { id } => {
            let args = fb::AclRemovedArgs {
                id: Some(&fb::Uuid::new(id)),
            };
            let table = fb::AclRemoved::create(fbb, &args);
            (fb::Record::AclRemoved, table.as_union_value())
        }
        Record::ClientQuotaChanged { entity, key, value } => {
            let parts: Vec<_> = entity
                .iter()
                .map(|p| {
                    let args = fb::QuotaEntityPartArgs {
                        entity_type: Some(fbb.create_string(&p.entity_type)),
                        entity_name: p.entity_name.as_deref().map(|n| fbb.create_string(n)),
                    };
                    fb::QuotaEntityPart::create(fbb, &args)
                })
                .collect();
            let args = fb::ClientQuotaChangedArgs {
                entity: Some(fbb.create_vector(&parts)),
                key: Some(fbb.create_string(key)),
                value: value.map_or(0.0, |v| v.0),
                remove: value.is_none(),
            };
            let table = fb::ClientQuotaChanged::create(fbb, &args);
            (fb::Record::ClientQuotaChanged, table.as_union_value())
        }
        Record::ReplicasOffline {
            broker_id,
            broker_epoch,
            replicas,
        } => {
            let replicas: Vec<fb::TopicPartition> = replicas
                .iter()
                .map(|(topic_id, partition)| {
                    fb::TopicPartition::new(&fb::Uuid::new(topic_id), *partition)
                })
                .collect();
            let args = fb::ReplicasOfflineArgs {
                broker_id: *broker_id,
                broker_epoch: *broker_epoch,
                replicas: Some(fbb.create_vector(&replicas)),
            };
            let table = fb::ReplicasOffline::create(fbb, &args);
            (fb::Record::ReplicasOffline, table.as_union_value())
        }
    }
}

/// Reads fields of entry `index`, turning an absent required one into an error that names it.
struct Fields {
    index: usize,
}

impl Fields {
    fn error(&self, what: impl Into<String>) -> RecordError {
        RecordError::Field {
            index: self.index,
            what: what.into(),
        }
    }

    fn table<T>(&self, table: Option<T>) -> Result<T, RecordError> {
        table.ok_or_else(|| self.error("union type set but its table is missing"))
    }

    fn string(&self, field: &str, value: Option<&str>) -> Result<String, RecordError> {
        value
            .map(str::to_owned)
            .ok_or_else(|| self.error(format!("missing `{field}`")))
    }

    /// A `Uuid` struct is 16 bytes by its type, and the verifier checked they are in bounds.
    fn uuid(&self, field: &str, value: Option<&fb::Uuid>) -> Result<TopicId, RecordError> {
        value
            .map(|uuid| uuid.0)
            .ok_or_else(|| self.error(format!("missing `{field}`")))
    }

    fn bytes(&self, field: &str, value: Option<Vector<'_, u8>>) -> Result<Vec<u8>, RecordError> {
        value
            .map(|v| v.bytes().to_vec())
            .ok_or_else(|| self.error(format!("missing `{field}`")))
    }

    fn int_list(
        &self,
        field: &str,
        value: Option<Vector<'_, i32>>,
    ) -> Result<Vec<i32>, RecordError> {
        value
            .map(|v| v.iter().collect())
            .ok_or_else(|| self.error(format!("missing `{field}`")))
    }
}

fn decode_entry(index: usize, entry: fb::Entry<'_>) -> Result<Record, RecordError> {
    let f = Fields { index };
    let record = match entry.record_type() {
        fb::Record::BrokerRegistered => {
            let r = f.table(entry.record_as_broker_registered())?;
            Record::BrokerRegistered {
                broker_id: r.broker_id(),
                incarnation_id: f.uuid("incarnation_id", r.incarnation_id())?,
                host: f.string("host", r.host())?,
                port: r.port(),
                rack: r.rack().map(str::to_owned),
                shard_count: r.shard_count(),
                inter_broker_host: r.inter_broker_host().map(str::to_owned),
                inter_broker_port: r.inter_broker_port(),
                inter_broker_shard_ports: r
                    .inter_broker_shard_ports()
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
                previous_broker_epoch: r.previous_broker_epoch(),
                listeners: match r.listeners() {
                    None => Vec::new(),
                    Some(v) => v
                        .iter()
                        .map(|e| {
                            Ok(ListenerEndpoint {
                                name: f.string("listeners.name", e.name())?,
                                host: f.string("listeners.host", e.host())?,
                                port: e.port(),
                            })
                        })
                        .collect::<Result<_, RecordError>>()?,
                },
            }
        }
        fb::Record::BrokerFenced => {
            let r = f.table(entry.record_as_broker_fenced())?;
            Record::BrokerFenced {
                broker_id: r.broker_id(),
            }
        }
        fb::Record::BrokerUnfenced => {
            let r = f.table(entry.record_as_broker_unfenced())?;
            Record::BrokerUnfenced {
                broker_id: r.broker_id(),
            }
        }
        fb::Record::BrokerUnregistered => {
            let r = f.table(entry.record_as_broker_unregistered())?;
            Record::BrokerUnregistered {
                broker_id: r.broker_id(),
                broker_epoch: r.broker_epoch(),
            }
        }
        fb::Record::TopicCreated => {
            let r = f.table(entry.record_as_topic_created())?;
            Record::TopicCreated {
                name: f.string("name", r.name())?,
                topic_id: f.uuid("topic_id", r.topic_id())?,
            }
        }
        fb::Record::TopicDeleted => {
            let r = f.table(entry.record_as_topic_deleted())?;
            Record::TopicDeleted {
                name: f.string("name", r.name())?,
                topic_id: f.uuid("topic_id", r.topic_id())?,
            }
        }
        fb::Record::PartitionCreated => {
            let r = f.table(entry.record_as_partition_created())?;
            Record::PartitionCreated {
                topic_id: f.uuid("topic_id", r.topic_id())?,
                partition: r.partition(),
                replicas: f.int_list("replicas", r.replicas())?,
                isr: f.int_list("isr", r.isr())?,
                leader: r.leader(),
                leader_epoch: r.leader_epoch(),
            }
        }
        fb::Record::PartitionChanged => {
            let r = f.table(entry.record_as_partition_changed())?;
            Record::PartitionChanged {
                topic_id: f.uuid("topic_id", r.topic_id())?,
                partition: r.partition(),
                leader: r.leader(),
                leader_epoch: r.leader_epoch(),
                isr: r.isr().map(|v| v.iter().collect()),
                replicas: r.replicas().map(|v| v.iter().collect()),
                expected_leader_epoch: r.expected_leader_epoch(),
                expected_partition_epoch: r.expected_partition_epoch(),
                elr: r.elr().map(|v| v.iter().collect()),
                last_known_elr: r.last_known_elr().map(|v| v.iter().collect()),
                adding_replicas: r.adding_replicas().map(|v| v.iter().collect()),
                removing_replicas: r.removing_replicas().map(|v| v.iter().collect()),
                original_replicas: r.original_replicas().map(|v| v.iter().collect()),
            }
        }
        fb::Record::ConfigChanged => {
            let r = f.table(entry.record_as_config_changed())?;
            Record::ConfigChanged {
                resource_type: r.resource_type(),
                resource_name: f.string("resource_name", r.resource_name())?,
                name: f.string("name", r.name())?,
                value: r.value().map(str::to_owned),
            }
        }
        fb::Record::ProducerIdsAllocated => {
            let r = f.table(entry.record_as_producer_ids_allocated())?;
            Record::ProducerIdsAllocated {
                broker_id: r.broker_id(),
                first_producer_id: r.first_producer_id(),
                block_size: r.block_size(),
            }
        }
        fb::Record::UserScramCredentialChanged => {
            let r = f.table(entry.record_as_user_scram_credential_changed())?;
            Record::UserScramCredentialChanged {
                name: f.string("name", r.name())?,
                mechanism: r.mechanism(),
                salt: f.bytes("salt", r.salt())?,
                stored_key: f.bytes("stored_key", r.stored_key())?,
                server_key: f.bytes("server_key", r.server_key())?,
                iterations: r.iterations(),
            }
        }
        fb::Record::UserScramCredentialRemoved => {
            let r = f.table(entry.record_as_user_scram_credential_removed())?;
            Record::UserScramCredentialRemoved {
                name: f.string("name", r.name())?,
                mechanism: r.mechanism(),
            }
        }
        fb::Record::AclCreated => {
            let r = f.table(entry.record_as_acl_created())?;
            Record::AclCreated {
                id: f.uuid("id", r.id())?,
                acl: AclEntry {
                    resource_type: r.resource_type(),
                    resource_name: f.string("resource_name", r.resource_name())?,
                    pattern_type: r.pattern_type(),
                    principal: f.string("principal", r.principal())?,
                    host: f.string("host", r.host())?,
                    operation: r.operation(),
                    permission_type: r.permission_type(),
                },
            }
        }
        fb::Record::AclRemoved => {
            let r = f.table(entry.record_as_acl_removed())?;
            Record::AclRemoved {
                id: f.uuid("id", r.id())?,
            }
        }
        fb::Record::ClientQuotaChanged => {
            let r = f.table(entry.record_as_client_quota_changed())?;
            let parts = r.entity().ok_or_else(|| f.error("missing `entity`"))?;
            Record::ClientQuotaChanged {
                entity: parts
                    .iter()
                    .map(|p| {
                        Ok(QuotaEntityPart {
                            entity_type: f.string("entity.entity_type", p.entity_type())?,
                            entity_name: p.entity_name().map(str::to_owned),
                        })
                    })
                    .collect::<Result<_, RecordError>>()?,
                key: f.string("key", r.key())?,
                value: (!r.remove()).then(|| QuotaValue(r.value())),
            }
        }
        fb::Record::ReplicasOffline => {
            let r = f.table(entry.record_as_replicas_offline())?;
            let replicas = r.replicas().ok_or_else(|| f.error("missing `replicas`"))?;
            Record::ReplicasOffline {
                broker_id: r.broker_id(),
                broker_epoch: r.broker_epoch(),
                replicas: replicas
                    .iter()
                    .map(|tp| (tp.topic_id().0, tp.partition()))
                    .collect(),
            }
        }
        fb::Record::NONE => return Err(f.error("entry holds no record")),
        // The verifier accepts union tags it does not know (a newer writer's record type).
        other => return Err(f.error(format!("unknown record type {}", other.0))),
    };
    Ok(record)
}

#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::option;
    use proptest::prelude::*;

    use super::*;
    use crate::records::{RESOURCE_BROKER, RESOURCE_TOPIC};

    const TOPIC: TopicId = [7; 16];

    /// Every variant, each optional field both unset and set.
    fn every_variant() -> Vec<Record> {
        vec![
            Record::BrokerRegistered {
                broker_id: 1,
                incarnation_id: [0xab; 16],
                host: "broker-1.example".to_string(),
                port: 9092,
                rack: None,
                shard_count: 0,
                inter_broker_host: None,
                inter_broker_port: None,
                inter_broker_shard_ports: vec![],
                previous_broker_epoch: -1,
                listeners: Vec::new(),
            },
            Record::BrokerRegistered {
                broker_id: 2,
                incarnation_id: *b"0123456789abcdef",
                host: String::new(),
                port: -1,
                rack: Some("rack-a".to_string()),
                shard_count: 8,
                inter_broker_host: Some("10.0.0.2".to_string()),
                inter_broker_port: Some(9093),
                inter_broker_shard_ports: vec![19093, 19094],
                previous_broker_epoch: 42,
                listeners: vec![
                    ListenerEndpoint {
                        name: "PLAINTEXT".into(),
                        host: "broker-2.example".into(),
                        port: 9092,
                    },
                    ListenerEndpoint {
                        name: "REPLICATION".into(),
                        host: String::new(),
                        port: -1,
                    },
                ],
            },
            Record::BrokerRegistered {
                broker_id: 3,
                incarnation_id: [0; 16],
                host: "h".to_string(),
                port: 0,
                rack: Some(String::new()),
                shard_count: -1,
                inter_broker_host: Some(String::new()),
                inter_broker_port: Some(0),
                inter_broker_shard_ports: vec![],
                previous_broker_epoch: 0,
                listeners: Vec::new(),
            },
            Record::BrokerFenced { broker_id: 1 },
            Record::BrokerUnfenced {
                broker_id: i32::MAX,
            },
            Record::TopicCreated {
                name: "orders".to_string(),
                topic_id: TOPIC,
            },
            Record::TopicDeleted {
                name: "orders".to_string(),
                topic_id: TOPIC,
            },
            Record::PartitionCreated {
                topic_id: TOPIC,
                partition: 0,
                replicas: vec![1, 2, 3],
                isr: vec![1, 2],
                leader: 1,
                leader_epoch: 0,
            },
            Record::PartitionCreated {
                topic_id: TOPIC,
                partition: 1,
                replicas: vec![],
                isr: vec![],
                leader: -1,
                leader_epoch: 5,
            },
            Record::PartitionChanged {
                topic_id: TOPIC,
                partition: 0,
                leader: None,
                leader_epoch: None,
                isr: None,
                replicas: None,
                expected_leader_epoch: None,
                expected_partition_epoch: None,
                elr: None,
                last_known_elr: None,
                adding_replicas: None,
                removing_replicas: None,
                original_replicas: None,
            },
            Record::PartitionChanged {
                topic_id: TOPIC,
                partition: 0,
                leader: Some(-1),
                leader_epoch: Some(0),
                isr: Some(vec![]),
                replicas: Some(vec![2, 3]),
                expected_leader_epoch: Some(0),
                expected_partition_epoch: Some(-1),
                elr: Some(vec![]),
                last_known_elr: Some(vec![3]),
                adding_replicas: Some(vec![3]),
                removing_replicas: Some(vec![]),
                original_replicas: Some(vec![2]),
            },
            Record::BrokerUnregistered {
                broker_id: 2,
                broker_epoch: 17,
            },
            Record::ConfigChanged {
                resource_type: RESOURCE_TOPIC,
                resource_name: "orders".to_string(),
                name: "retention.ms".to_string(),
                value: Some("86400000".to_string()),
            },
            Record::ConfigChanged {
                resource_type: RESOURCE_BROKER,
                resource_name: "1".to_string(),
                name: "log.retention.bytes".to_string(),
                value: None,
            },
            Record::ConfigChanged {
                resource_type: RESOURCE_TOPIC,
                resource_name: "t".to_string(),
                name: "cleanup.policy".to_string(),
                value: Some(String::new()),
            },
            Record::ProducerIdsAllocated {
                broker_id: 1,
                first_producer_id: i64::MAX - 1000,
                block_size: 1000,
            },
            Record::UserScramCredentialChanged {
                name: "alice".to_string(),
                mechanism: 2,
                salt: vec![1, 2, 3],
                stored_key: vec![4; 64],
                server_key: vec![5; 64],
                iterations: 8192,
            },
            Record::UserScramCredentialRemoved {
                name: "bob".to_string(),
                mechanism: 1,
            },
            Record::AclCreated {
                id: [9; 16],
                acl: AclEntry {
                    resource_type: 2,
                    resource_name: "orders-".to_string(),
                    pattern_type: 4,
                    principal: "User:alice".to_string(),
                    host: "*".to_string(),
                    operation: 3,
                    permission_type: 3,
                },
            },
            Record::AclRemoved { id: [9; 16] },
            Record::ClientQuotaChanged {
                entity: vec![
                    QuotaEntityPart {
                        entity_type: "user".to_string(),
                        entity_name: Some("alice".to_string()),
                    },
                    QuotaEntityPart {
                        entity_type: "client-id".to_string(),
                        entity_name: None,
                    },
                ],
                key: "producer_byte_rate".to_string(),
                value: Some(QuotaValue(1048576.0)),
            },
            Record::ClientQuotaChanged {
                entity: vec![QuotaEntityPart {
                    entity_type: "client-id".to_string(),
                    entity_name: Some("app".to_string()),
                }],
                key: "request_percentage".to_string(),
                value: None,
            },
            Record::ReplicasOffline {
                broker_id: 3,
                broker_epoch: 41,
                replicas: vec![(TOPIC, 0), ([8; 16], 7)],
            },
        ]
    }

    #[test]
    fn every_variant_round_trips_alone_and_together() {
        let records = every_variant();
        for record in &records {
            let one = std::slice::from_ref(record);
            assert_eq!(decode_batch(&encode_batch(one)).unwrap(), one);
        }
        assert_eq!(decode_batch(&encode_batch(&records)).unwrap(), records);
    }

    #[test]
    fn empty_batch_round_trips() {
        assert_eq!(decode_batch(&encode_batch(&[])).unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode_batch(&[]).is_err());
        assert!(decode_batch(&[0; 3]).is_err());
        assert!(decode_batch(&[0xff; 64]).is_err());
        assert!(decode_batch(b"not a flatbuffer at all").is_err());
    }

    /// A cut into the data is an error. The only prefixes that may decode are those that lose
    /// just the trailing alignment padding (zeros), and those decode to the same records.
    #[test]
    fn every_truncation_is_an_error_or_loses_only_padding() {
        let records = every_variant();
        let bytes = encode_batch(&records);
        for len in 0..bytes.len() {
            if let Ok(decoded) = decode_batch(&bytes[..len]) {
                assert!(
                    bytes[len..].iter().all(|&b| b == 0),
                    "prefix of {len} of {} bytes cut data yet decoded",
                    bytes.len()
                );
                assert_eq!(decoded, records);
            }
        }
    }

    /// A batch of one entry whose record is built by `record` (bypassing `encode_batch`).
    fn batch_of(
        record: impl FnOnce(
            &mut FlatBufferBuilder<'static>,
        ) -> (fb::Record, Option<WIPOffset<UnionWIPOffset>>),
    ) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let (record_type, record) = record(&mut fbb);
        let entry = fb::Entry::create(
            &mut fbb,
            &fb::EntryArgs {
                record_type,
                record,
            },
        );
        let entries = fbb.create_vector(&[entry]);
        let batch = fb::RecordBatch::create(
            &mut fbb,
            &fb::RecordBatchArgs {
                entries: Some(entries),
            },
        );
        fbb.finish(batch, None);
        fbb.finished_data().to_vec()
    }

    fn assert_field_error(bytes: &[u8], needle: &str) {
        match decode_batch(bytes) {
            Err(RecordError::Field { index: 0, what }) => {
                assert!(
                    what.contains(needle),
                    "{what:?} does not mention {needle:?}"
                )
            }
            other => panic!("expected a field error about {needle:?}, got {other:?}"),
        }
    }

    #[test]
    fn missing_required_fields_are_field_errors() {
        let no_name = batch_of(|fbb| {
            let args = fb::TopicCreatedArgs {
                name: None,
                topic_id: Some(&fb::Uuid::new(&TOPIC)),
            };
            let t = fb::TopicCreated::create(fbb, &args);
            (fb::Record::TopicCreated, Some(t.as_union_value()))
        });
        assert_field_error(&no_name, "name");

        let no_topic_id = batch_of(|fbb| {
            let args = fb::TopicDeletedArgs {
                name: Some(fbb.create_string("t")),
                topic_id: None,
            };
            let t = fb::TopicDeleted::create(fbb, &args);
            (fb::Record::TopicDeleted, Some(t.as_union_value()))
        });
        assert_field_error(&no_topic_id, "topic_id");

        let no_host = batch_of(|fbb| {
            let args = fb::BrokerRegisteredArgs {
                broker_id: 1,
                incarnation_id: Some(&fb::Uuid::new(&TOPIC)),
                host: None,
                port: 9092,
                ..Default::default()
            };
            let t = fb::BrokerRegistered::create(fbb, &args);
            (fb::Record::BrokerRegistered, Some(t.as_union_value()))
        });
        assert_field_error(&no_host, "host");

        let no_isr = batch_of(|fbb| {
            let args = fb::PartitionCreatedArgs {
                topic_id: Some(&fb::Uuid::new(&TOPIC)),
                replicas: Some(fbb.create_vector(&[1])),
                ..Default::default()
            };
            let t = fb::PartitionCreated::create(fbb, &args);
            (fb::Record::PartitionCreated, Some(t.as_union_value()))
        });
        assert_field_error(&no_isr, "isr");

        let no_config_name = batch_of(|fbb| {
            let args = fb::ConfigChangedArgs {
                resource_type: RESOURCE_TOPIC,
                resource_name: Some(fbb.create_string("t")),
                name: None,
                value: None,
            };
            let t = fb::ConfigChanged::create(fbb, &args);
            (fb::Record::ConfigChanged, Some(t.as_union_value()))
        });
        assert_field_error(&no_config_name, "name");
    }

    /// Bytes written before `BrokerRegistered` and `PartitionChanged` gained fields (log
    /// entries and snapshots outlive the binary): built with only the old fields, as the old
    /// schema's builder wrote them, they decode with every new field at its "absent" value;
    /// and a record with those values encodes to the very same bytes.
    #[test]
    fn records_written_by_the_old_schema_decode() {
        let old_registered = batch_of(|fbb| {
            let host = fbb.create_string("h1");
            let rack = fbb.create_string("r1");
            let t = fb::BrokerRegistered::create(
                fbb,
                &fb::BrokerRegisteredArgs {
                    broker_id: 1,
                    incarnation_id: Some(&fb::Uuid::new(&[9; 16])),
                    host: Some(host),
                    port: 9092,
                    rack: Some(rack),
                    ..Default::default()
                },
            );
            (fb::Record::BrokerRegistered, Some(t.as_union_value()))
        });
        let registered = Record::BrokerRegistered {
            broker_id: 1,
            incarnation_id: [9; 16],
            host: "h1".to_string(),
            port: 9092,
            rack: Some("r1".to_string()),
            shard_count: 0,
            inter_broker_host: None,
            inter_broker_port: None,
            inter_broker_shard_ports: vec![],
            previous_broker_epoch: -1,
            listeners: Vec::new(),
        };
        assert_eq!(
            decode_batch(&old_registered).unwrap(),
            vec![registered.clone()]
        );

        let old_changed = batch_of(|fbb| {
            let isr = fbb.create_vector(&[1, 2]);
            let t = fb::PartitionChanged::create(
                fbb,
                &fb::PartitionChangedArgs {
                    topic_id: Some(&fb::Uuid::new(&TOPIC)),
                    partition: 3,
                    leader: Some(1),
                    leader_epoch: Some(4),
                    isr: Some(isr),
                    replicas: None,
                    ..Default::default()
                },
            );
            (fb::Record::PartitionChanged, Some(t.as_union_value()))
        });
        let changed = Record::PartitionChanged {
            topic_id: TOPIC,
            partition: 3,
            leader: Some(1),
            leader_epoch: Some(4),
            isr: Some(vec![1, 2]),
            replicas: None,
            expected_leader_epoch: None,
            expected_partition_epoch: None,
            elr: None,
            last_known_elr: None,
            adding_replicas: None,
            removing_replicas: None,
            original_replicas: None,
        };
        assert_eq!(decode_batch(&old_changed).unwrap(), vec![changed.clone()]);

        // New fields at their absent values add nothing to the buffer: the same bytes.
        assert_eq!(encode_batch(&[registered]), old_registered);
        assert_eq!(encode_batch(&[changed]), old_changed);
    }

    #[test]
    fn entry_without_record_or_with_unknown_type_is_a_field_error() {
        assert_field_error(&batch_of(|_| (fb::Record::NONE, None)), "no record");
        let unknown = batch_of(|fbb| {
            let t = fb::BrokerFenced::create(fbb, &fb::BrokerFencedArgs { broker_id: 1 });
            (fb::Record(200), Some(t.as_union_value()))
        });
        assert_field_error(&unknown, "unknown record type 200");
    }

    #[test]
    fn batch_without_entries_is_invalid() {
        let mut fbb = FlatBufferBuilder::new();
        let batch = fb::RecordBatch::create(&mut fbb, &fb::RecordBatchArgs { entries: None });
        fbb.finish(batch, None);
        assert!(matches!(
            decode_batch(fbb.finished_data()),
            Err(RecordError::Invalid(_))
        ));
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        let ids = || vec(any::<i32>(), 0..6);
        prop_oneof![
            (
                (
                    any::<i32>(),
                    any::<[u8; 16]>(),
                    ".{0,20}",
                    any::<i32>(),
                    option::of(".{0,8}")
                ),
                (
                    any::<i32>(),
                    option::of(".{0,8}"),
                    any::<Option<i32>>(),
                    ids(),
                    any::<i64>()
                ),
            )
                .prop_map(
                    |(
                        (broker_id, incarnation_id, host, port, rack),
                        (
                            shard_count,
                            inter_broker_host,
                            inter_broker_port,
                            inter_broker_shard_ports,
                            previous_broker_epoch,
                        ),
                    )| {
                        Record::BrokerRegistered {
                            broker_id,
                            incarnation_id,
                            host,
                            port,
                            rack,
                            shard_count,
                            inter_broker_host,
                            inter_broker_port,
                            inter_broker_shard_ports,
                            previous_broker_epoch,
                            listeners: Vec::new(),
                        }
                    }
                ),
            any::<i32>().prop_map(|broker_id| Record::BrokerFenced { broker_id }),
            any::<i32>().prop_map(|broker_id| Record::BrokerUnfenced { broker_id }),
            (any::<i32>(), any::<i64>()).prop_map(|(broker_id, broker_epoch)| {
                Record::BrokerUnregistered {
                    broker_id,
                    broker_epoch,
                }
            }),
            (".{0,20}", any::<TopicId>())
                .prop_map(|(name, topic_id)| Record::TopicCreated { name, topic_id }),
            (".{0,20}", any::<TopicId>())
                .prop_map(|(name, topic_id)| Record::TopicDeleted { name, topic_id }),
            (
                any::<TopicId>(),
                any::<i32>(),
                ids(),
                ids(),
                any::<i32>(),
                any::<i32>()
            )
                .prop_map(
                    |(topic_id, partition, replicas, isr, leader, leader_epoch)| {
                        Record::PartitionCreated {
                            topic_id,
                            partition,
                            replicas,
                            isr,
                            leader,
                            leader_epoch,
                        }
                    }
                ),
            (
                (
                    any::<TopicId>(),
                    any::<i32>(),
                    any::<Option<i32>>(),
                    any::<Option<i32>>(),
                    option::of(ids()),
                    option::of(ids()),
                ),
                (
                    any::<Option<i32>>(),
                    any::<Option<i32>>(),
                    option::of(ids()),
                    option::of(ids()),
                    option::of(ids()),
                    option::of(ids()),
                    option::of(ids()),
                ),
            )
                .prop_map(
                    |(
                        (topic_id, partition, leader, leader_epoch, isr, replicas),
                        (
                            expected_leader_epoch,
                            expected_partition_epoch,
                            elr,
                            last_known_elr,
                            adding_replicas,
                            removing_replicas,
                            original_replicas,
                        ),
                    )| {
                        Record::PartitionChanged {
                            topic_id,
                            partition,
                            leader,
                            leader_epoch,
                            isr,
                            replicas,
                            expected_leader_epoch,
                            expected_partition_epoch,
                            elr,
                            last_known_elr,
                            adding_replicas,
                            removing_replicas,
                            original_replicas,
                        }
                    }
                ),
            (any::<i8>(), ".{0,12}", ".{0,12}", option::of(".{0,12}")).prop_map(
                |(resource_type, resource_name, name, value)| Record::ConfigChanged {
                    resource_type,
                    resource_name,
                    name,
                    value,
                }
            ),
            (any::<i32>(), any::<i64>(), any::<i32>()).prop_map(
                |(broker_id, first_producer_id, block_size)| Record::ProducerIdsAllocated {
                    broker_id,
                    first_producer_id,
                    block_size,
                }
            ),
            (
                any::<i32>(),
                any::<i64>(),
                vec((any::<TopicId>(), any::<i32>()), 0..4)
            )
                .prop_map(|(broker_id, broker_epoch, replicas)| {
                    Record::ReplicasOffline {
                        broker_id,
                        broker_epoch,
                        replicas,
                    }
                }),
        ]
    }

    proptest! {
        #[test]
        fn random_batches_round_trip(records in vec(arb_record(), 0..12)) {
            prop_assert_eq!(decode_batch(&encode_batch(&records)).unwrap(), records);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
            let _ = decode_batch(&bytes);
        }

        /// Corrupting a valid batch reaches deeper than random bytes: past the root offset and
        /// into vtables, vector lengths and union tags.
        #[test]
        fn corrupted_batches_never_panic(
            records in vec(arb_record(), 1..6),
            flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = encode_batch(&records);
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let _ = decode_batch(&bytes);
            let _ = decode_batch(&bytes[..cut.index(bytes.len())]);
        }
    }
}
