//! One partition's part of a Fetch as the owner shard reads it, for a consumer or for a
//! follower (`leader::serve_fetch`): what is asked and what comes back. Shared by the Fetch
//! handler and replication, below both.
//!
//! A consumer's Fetch from v11 carries its rack (`rack_id`, KIP-392): it may then be served by
//! a follower, and the answer may name another replica to read from instead
//! (`preferred_read_replica`, see `selector`).

use bytes::Bytes;
use keel_storage::LogOffsets;

/// Who sent a replica fetch: a broker and the broker epoch it fetches with (v15+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaFetch {
    pub broker_id: i32,
    pub broker_epoch: i64,
}

#[derive(Clone, Copy)]
pub struct FetchPart {
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
    /// isolation_level=1: read up to the last stable offset, with the aborted transactions.
    pub read_committed: bool,
    /// The epoch of the last batch the follower holds (-1: none or a consumer).
    pub last_fetched_epoch: i32,
    /// The follower's log start offset (-1 for a consumer).
    pub log_start_offset: i64,
    /// A follower's fetch: who sent it.
    pub replica: Option<ReplicaFetch>,
    /// A consumer's Fetch v11+ (Kafka's `FetchParams.fetchOnlyLeader` false): a follower may
    /// serve it, up to its own high watermark.
    pub follower_read: bool,
}

/// What a consumer's Fetch v11+ says about the client (Kafka's `ClientMetadata`): its rack and
/// the listener it connected to (the replicas it may be sent to are those serving it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientMetadata {
    /// `rack_id` (the consumer's `client.rack`); empty = none.
    pub rack_id: String,
    pub listener: String,
}

#[derive(Clone, Debug)]
pub struct PartData {
    pub error: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub records: Bytes,
    /// read_committed: (producer id, first offset) of the aborted transactions meeting the
    /// batches read; `None` for read_uncommitted.
    pub aborted: Option<Vec<(i64, i64)>>,
    /// A follower whose log diverged: (epoch, end offset) to truncate to (Fetch v12+).
    pub diverging: Option<(i32, i64)>,
    /// KIP-392: the broker the consumer should fetch this partition from next (no records
    /// come with it); -1 = none.
    pub preferred_read_replica: i32,
}

impl PartData {
    /// An answer with no records: `error` and the partition's offsets.
    pub fn empty(error: i16, offsets: &LogOffsets) -> PartData {
        PartData {
            error,
            high_watermark: offsets.high_watermark.0,
            last_stable_offset: offsets.last_stable_offset.0,
            log_start_offset: offsets.log_start_offset.0,
            records: Bytes::new(),
            aborted: None,
            diverging: None,
            preferred_read_replica: -1,
        }
    }

    /// KIP-392's redirect: no records, error NONE, the partition's offsets, and the replica to
    /// read from next (Kafka's answer when a preferred read replica is chosen).
    pub fn read_elsewhere(replica: i32, offsets: &LogOffsets) -> PartData {
        let mut d = PartData::empty(0, offsets);
        d.preferred_read_replica = replica;
        d
    }
}

pub fn failed(error: i16) -> PartData {
    PartData {
        error,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: Bytes::new(),
        aborted: None,
        diverging: None,
        preferred_read_replica: -1,
    }
}
