//! Committed offsets (Kafka's `OffsetMetadataManager`): which commits a group accepts
//! ([`check_member`]), how a commit or a deletion changes a group map ([`apply_change`], for
//! live state and replay alike), and the records a commit writes ([`commit_changes`]).

use std::collections::HashMap;

use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;

use super::group_metadata_manager::GroupEntry;
pub use super::records::CommittedOffset;
use super::records::{OffsetChange, OffsetKey};

/// A commit to a group without a live classic membership: only a "simple" one passes; a
/// member's commit names a member the coordinator does not know.
pub fn check_simple_commit(member_id: &str, generation_id: i32) -> ErrorCode {
    if generation_id == -1 && member_id.is_empty() {
        ErrorCode::NONE
    } else {
        ErrorCode::of(ResponseError::UnknownMemberId)
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

/// Whether a commit by `member_id` at `generation_id` may write offsets of `group`: NONE, or
/// the Kafka error code. A group with a live classic membership decides
/// ([`ClassicGroup::can_commit`]: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
/// REBALANCE_IN_PROGRESS; a commit outside any generation while the group is `Empty`). A group
/// without one takes only "simple" commits (generation -1, no member id). The caller settles
/// the group afterwards (`can_commit` applies due timeouts, which may answer waiting requests).
pub fn check_member(
    group: &mut GroupEntry,
    member_id: &str,
    generation_id: i32,
    instance_id: Option<&str>,
    now_ms: i64,
) -> ErrorCode {
    if let Some(c) = group.consumer.as_mut() {
        c.tick(now_ms);
    }
    if let Some(c) = group.active_consumer() {
        return c.can_commit(member_id, generation_id);
    }
    match group.live_classic() {
        Some(c) => c.can_commit(member_id, instance_id, generation_id, now_ms),
        None => check_simple_commit(member_id, generation_id),
    }
}
