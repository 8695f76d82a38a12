//! The Raft state machine: applies committed record batches to the [`ClusterImage`] and
//! snapshots it.
//!
//! A snapshot is the image plus the last applied log id and membership, as JSON, in
//! `<dir>/snapshot.json` (replaced atomically). On open the snapshot is loaded; openraft then
//! re-applies the log entries after it as they are committed again. Each `apply` hands the
//! new image to the `on_image` callback (the bridge to shard 0), once per call.

// openraft's storage traits fix the error type (`StorageError`, large); helpers return it too.
#![allow(clippy::result_large_err)]

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::codec::decode_batch;
use crate::fs::{write_atomic, MetaFs, StdFs};
use crate::image::{codes, ClusterImage};
use crate::{Applied, ApplyOutcome, NodeId, TypeConfig};

const SNAPSHOT_FILE: &str = "snapshot.json";

type SE = StorageError<NodeId>;

/// Called with every newly applied image.
pub type ImageSink = Arc<dyn Fn(Arc<ClusterImage>) + Send + Sync>;

/// What a snapshot file holds.
#[derive(Serialize, Deserialize)]
pub struct SnapshotFile {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub snapshot_id: String,
    pub image: ClusterImage,
}

/// Encodes a snapshot.
pub fn encode_snapshot(file: &SnapshotFile) -> Vec<u8> {
    serde_json::to_vec(file).expect("image serializes")
}

/// Decodes a snapshot, rebuilding the image's derived indexes.
pub fn decode_snapshot(bytes: &[u8]) -> Result<SnapshotFile, String> {
    let mut file: SnapshotFile =
        serde_json::from_slice(bytes).map_err(|e| format!("bad metadata snapshot: {e}"))?;
    file.image.reindex();
    Ok(file)
}

/// Applies one entry's payload to `image`.
pub fn apply_entry(
    image: &Arc<ClusterImage>,
    entry: &Entry<TypeConfig>,
) -> (Arc<ClusterImage>, ApplyOutcome) {
    let index = entry.log_id.index;
    match &entry.payload {
        EntryPayload::Normal(p) => match decode_batch(&p.batch) {
            Ok(records) => image.apply(index, &records),
            Err(e) => (
                image.skip(index),
                ApplyOutcome::Rejected {
                    code: codes::INVALID_REQUEST,
                    message: e.to_string(),
                },
            ),
        },
        _ => (image.skip(index), ApplyOutcome::Applied),
    }
}

struct State {
    image: Arc<ClusterImage>,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
}

/// The state machine; clones share state.
#[derive(Clone)]
pub struct StateMachine {
    fs: Arc<dyn MetaFs>,
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    on_image: ImageSink,
}

fn io_err(e: impl std::fmt::Display) -> SE {
    StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string())).into()
}

impl StateMachine {
    /// Opens the state machine in `dir`, loading its snapshot if there is one.
    pub fn open(dir: &Path, on_image: ImageSink) -> Result<StateMachine, crate::RaftError> {
        StateMachine::open_on(Arc::new(StdFs), dir, on_image)
    }

    /// [`Self::open`] on `fs` (the I/O seam).
    pub fn open_on(
        fs: Arc<dyn MetaFs>,
        dir: &Path,
        on_image: ImageSink,
    ) -> Result<StateMachine, crate::RaftError> {
        fs.create_dir_all_durable(dir)?;
        let mut state = State {
            image: Arc::new(ClusterImage::default()),
            last_applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
            snapshots_built: 0,
        };
        if let Some(bytes) = fs.read(&dir.join(SNAPSHOT_FILE))? {
            let file = decode_snapshot(&bytes).map_err(crate::RaftError::Corrupt)?;
            let meta = SnapshotMeta {
                last_log_id: file.last_applied,
                last_membership: file.membership.clone(),
                snapshot_id: file.snapshot_id.clone(),
            };
            tracing::info!(
                applied_index = file.image.applied_index,
                topics = file.image.topics.len(),
                "metadata snapshot loaded"
            );
            state.image = Arc::new(file.image);
            state.last_applied = file.last_applied;
            state.membership = file.membership;
            state.snapshot = Some((meta, bytes));
        }
        let sm = StateMachine {
            fs,
            dir: dir.to_path_buf(),
            state: Arc::new(Mutex::new(state)),
            on_image,
        };
        (sm.on_image)(sm.image());
        Ok(sm)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The image applied last.
    pub fn image(&self) -> Arc<ClusterImage> {
        self.lock().image.clone()
    }

    /// Snapshots built by this process.
    pub fn snapshots_built(&self) -> u64 {
        self.lock().snapshots_built
    }

    /// The index of the current snapshot, if any.
    pub fn snapshot_index(&self) -> Option<u64> {
        self.lock()
            .snapshot
            .as_ref()
            .and_then(|(m, _)| m.last_log_id.map(|l| l.index))
    }

    fn store_snapshot(
        &self,
        meta: SnapshotMeta<NodeId, BasicNode>,
        bytes: Vec<u8>,
    ) -> Result<(), SE> {
        write_atomic(&*self.fs, &self.dir.join(SNAPSHOT_FILE), &bytes).map_err(io_err)?;
        self.lock().snapshot = Some((meta, bytes));
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SE> {
        let (file, meta) = {
            let mut s = self.lock();
            s.snapshots_built += 1;
            let snapshot_id = format!(
                "{}-{}",
                s.last_applied.map_or(0, |l| l.index),
                s.snapshots_built
            );
            let meta = SnapshotMeta {
                last_log_id: s.last_applied,
                last_membership: s.membership.clone(),
                snapshot_id: snapshot_id.clone(),
            };
            (
                SnapshotFile {
                    last_applied: s.last_applied,
                    membership: s.membership.clone(),
                    snapshot_id,
                    image: (*s.image).clone(),
                },
                meta,
            )
        };
        let bytes = encode_snapshot(&file);
        self.store_snapshot(meta.clone(), bytes.clone())?;
        tracing::info!(
            applied_index = file.image.applied_index,
            bytes = bytes.len(),
            "metadata snapshot written"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), SE> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, SE>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        let image = {
            let mut s = self.lock();
            for entry in entries {
                let (image, outcome) = apply_entry(&s.image, &entry);
                s.image = image;
                s.last_applied = Some(entry.log_id);
                if let EntryPayload::Membership(m) = &entry.payload {
                    s.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                }
                out.push(Applied {
                    index: entry.log_id.index,
                    outcome,
                });
            }
            s.image.clone()
        };
        if !out.is_empty() {
            (self.on_image)(image);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SE> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SE> {
        let bytes = snapshot.into_inner();
        let file = decode_snapshot(&bytes).map_err(io_err)?;
        self.store_snapshot(meta.clone(), bytes)?;
        let image = Arc::new(file.image);
        {
            let mut s = self.lock();
            s.image = image.clone();
            s.last_applied = meta.last_log_id;
            s.membership = meta.last_membership.clone();
        }
        tracing::info!(
            applied_index = image.applied_index,
            "metadata snapshot installed"
        );
        (self.on_image)(image);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SE> {
        let s = self.lock();
        Ok(s.snapshot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(bytes.clone())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_batch;
    use crate::records::{Record, RESOURCE_TOPIC};
    use openraft::CommittedLeaderId;
    use proptest::prelude::*;

    /// A small random metadata operation over a few names, ids and brokers, so that batches
    /// collide (existing names, missing topics, stale producer blocks) as often as they apply.
    fn record() -> impl Strategy<Value = Record> {
        let name = (0u8..4).prop_map(|i| format!("t{i}"));
        let id = (0u8..4).prop_map(|i| [i; 16]);
        prop_oneof![
            (1i32..4, any::<u8>(), prop::option::of("[a-c]")).prop_map(|(b, inc, rack)| {
                Record::BrokerRegistered {
                    broker_id: b,
                    incarnation_id: [inc; 16],
                    host: format!("h{b}"),
                    port: 9092 + b,
                    rack,
                    shard_count: 1,
                    inter_broker_host: None,
                    inter_broker_port: None,
                    inter_broker_shard_ports: Vec::new(),
                    previous_broker_epoch: -1,
                    listeners: Vec::new(),
                }
            }),
            (1i32..4).prop_map(|b| Record::BrokerFenced { broker_id: b }),
            (1i32..4).prop_map(|b| Record::BrokerUnfenced { broker_id: b }),
            (name.clone(), id.clone())
                .prop_map(|(name, topic_id)| Record::TopicCreated { name, topic_id }),
            (name.clone(), id.clone())
                .prop_map(|(name, topic_id)| Record::TopicDeleted { name, topic_id }),
            (id.clone(), 0i32..3, 0i32..5).prop_map(|(topic_id, partition, e)| {
                Record::PartitionCreated {
                    topic_id,
                    partition,
                    replicas: vec![1],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: e,
                }
            }),
            (
                id,
                0i32..3,
                prop::option::of(-1i32..3),
                prop::option::of(0i32..9)
            )
                .prop_map(|(topic_id, partition, leader, leader_epoch)| {
                    Record::PartitionChanged {
                        topic_id,
                        partition,
                        leader,
                        leader_epoch,
                        // A leader moves with its replica set, so the change can apply.
                        isr: leader.filter(|l| *l >= 0).map(|l| vec![l]),
                        replicas: leader.filter(|l| *l >= 0).map(|l| vec![l]),
                        expected_leader_epoch: None,
                        expected_partition_epoch: None,
                        elr: None,
                        last_known_elr: None,
                        adding_replicas: None,
                        removing_replicas: None,
                        original_replicas: None,
                    }
                }),
            (name, prop::option::of("[0-9]{1,3}")).prop_map(|(resource_name, value)| {
                Record::ConfigChanged {
                    resource_type: RESOURCE_TOPIC,
                    resource_name,
                    name: "retention.ms".into(),
                    value,
                }
            }),
            (0i64..3).prop_map(|k| Record::ProducerIdsAllocated {
                broker_id: 1,
                first_producer_id: k * 1000,
                block_size: 1000,
            }),
        ]
    }

    fn entries(batches: &[Vec<Record>]) -> Vec<Entry<TypeConfig>> {
        batches
            .iter()
            .enumerate()
            .map(|(i, b)| Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), i as u64 + 1),
                payload: EntryPayload::Normal(crate::Proposal {
                    batch: encode_batch(b),
                }),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Replaying the log from empty gives the same image as loading a snapshot taken at any
        /// point and replaying the tail.
        #[test]
        fn snapshot_plus_tail_equals_full_replay(
            batches in prop::collection::vec(prop::collection::vec(record(), 1..4), 0..40),
            cut in 0usize..40,
        ) {
            let log = entries(&batches);
            let cut = cut.min(log.len());
            let mut full = Arc::new(ClusterImage::default());
            let mut outcomes = Vec::new();
            for e in &log {
                let (next, outcome) = apply_entry(&full, e);
                full = next;
                outcomes.push(outcome);
            }
            let mut head = Arc::new(ClusterImage::default());
            for e in &log[..cut] {
                head = apply_entry(&head, e).0;
            }
            let bytes = encode_snapshot(&SnapshotFile {
                last_applied: log[..cut].last().map(|e| e.log_id),
                membership: StoredMembership::default(),
                snapshot_id: "t".into(),
                image: (*head).clone(),
            });
            let mut resumed = Arc::new(decode_snapshot(&bytes).unwrap().image);
            for (e, expected) in log[cut..].iter().zip(&outcomes[cut..]) {
                let (next, outcome) = apply_entry(&resumed, e);
                prop_assert_eq!(&outcome, expected);
                resumed = next;
            }
            prop_assert_eq!(&*resumed, &*full);
        }
    }
}
