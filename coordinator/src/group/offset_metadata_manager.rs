//! Committed offsets (Kafka's `OffsetMetadataManager`): the [`CommittedOffset`] of each
//! (group, topic, partition), how a commit or a deletion changes a group map
//! ([`apply_change`], for live state and replay alike), and the records a commit writes
//! ([`commit_changes`]).

use std::collections::HashMap;

use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;

use super::group_metadata_manager::GroupEntry;
use super::records::{OffsetChange, OffsetKey};

/// One committed offset, as OffsetCommit stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 = unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    /// The coordinator's clock when the commit was written.
    pub commit_timestamp_ms: i64,
}

/// A commit to a group without a live classic membership: only a "simple" one passes; a
/// member's commit names a member the coordinator does not know.
pub fn check_simple_commit(member_id: &str, generation_id: i32) -> i16 {
    if generation_id == -1 && member_id.is_empty() {
        ErrorCode::NONE.code()
    } else {
        ErrorCode::of(ResponseError::UnknownMemberId).code()
    }
}

/// Applies one change to a group map (live state and replay alike). A group left without
/// offsets or members is forgotten.
pub fn apply_change(
    groups: &mut HashMap<String, GroupEntry>,
    partition: i32,
    change: OffsetChange,
) {
    match change {
        OffsetChange::Commit(k, v) => {
            groups
                .entry(k.group)
                .or_insert_with(|| GroupEntry::new(partition))
                .offsets
                .insert((k.topic, k.partition), v);
        }
        OffsetChange::Delete(k) => {
            let Some(g) = groups.get_mut(&k.group) else {
                return;
            };
            g.offsets.remove(&(k.topic, k.partition));
            if g.is_forgettable() {
                groups.remove(&k.group);
            }
        }
    }
}

/// The commit records of a group's offsets, (topic, partition, offset, leader epoch,
/// metadata) each, stamped `now`.
pub fn commit_changes(
    group: &str,
    offsets: Vec<(String, i32, i64, i32, String)>,
    now: i64,
) -> Vec<OffsetChange> {
    offsets
        .into_iter()
        .map(|(topic, partition, offset, leader_epoch, metadata)| {
            OffsetChange::Commit(
                OffsetKey {
                    group: group.to_string(),
                    topic,
                    partition,
                },
                CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: now,
                },
            )
        })
        .collect()
}
