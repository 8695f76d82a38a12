//! Keel's cluster metadata on Raft: a KRaft-style controller quorum.
//!
//! The controller's log holds batches of metadata [`records::Record`]s (flatbuffers on the
//! log), applied in order to an immutable [`image::ClusterImage`]. Every broker runs a node of
//! this group: the voters listed in `--controller-quorum`, and every other broker as a learner
//! that the leader adds when the broker joins. A single broker is a one-voter group: one code
//! path serves one node and many.
//!
//! Why openraft 0.9 on tokio: openraft is the maintained successor of async-raft (which lost
//! committed entries on log truncation, among about two dozen bugs fixed since). The 0.9 line
//! is openraft's stable release; 0.10 (which can run on other runtimes) is still alpha. So the
//! Raft core runs on a tokio current-thread runtime confined to one OS thread,
//! `keel-metadata`, that owns the Raft log, the vote, the snapshots and the controller's TCP
//! transport. The broker's shard 0 talks to it through [`node::MetadataHandle`]: commands go
//! in over a channel, and results and committed images come back over a queue plus a
//! socketpair "doorbell" the shard reads with io_uring, so no task of one runtime is ever
//! woken from the other's thread.

pub mod codec;
pub mod error;
pub mod fs;
mod generated;
pub mod image;
pub mod log_store;
pub mod network;
pub mod node;
pub mod partition_change;
pub mod records;
pub mod registration;
pub mod state_machine;

use std::io::Cursor;

/// The decoders of untrusted bytes that are private to the crate, for the fuzz targets in
/// `fuzz/` (feature `fuzzing`; nothing else turns it on), re-exported unchanged.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use crate::TypeConfig;

    /// `LogStore::open`'s parse of the Raft log file: the entries with their byte positions,
    /// and the length of the valid prefix.
    pub fn parse_log_frames(bytes: &[u8]) -> (Vec<(openraft::Entry<TypeConfig>, u64)>, u64) {
        crate::log_store::parse_frames(bytes)
    }
}

pub use error::{RaftError, RecordError};
pub use image::ClusterImage;
pub use records::Record;

/// A Raft log index (1-based; 0 is the initial membership entry).
pub type LogIndex = u64;
/// A node id: the broker's `node.id`.
pub type NodeId = u64;

/// What one proposed batch did when applied: Ok, or the Kafka error code and message that
/// rejected it (the image is unchanged then).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ApplyOutcome {
    Applied,
    Rejected { code: i16, message: String },
}

/// A log entry's application payload: one record batch, flatbuffers-encoded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Proposal {
    #[serde(with = "bytes_as_hex")]
    pub batch: Vec<u8>,
}

/// The answer for one applied entry: its outcome and log index.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Applied {
    pub index: LogIndex,
    pub outcome: ApplyOutcome,
}

openraft::declare_raft_types!(
    /// Keel's Raft type configuration.
    pub TypeConfig:
        D = Proposal,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Entries in JSON (log file, RPC) keep their batch as hex rather than a number array.
mod bytes_as_hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        let mut out = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            out.push_str(&format!("{b:02x}"));
        }
        s.serialize_str(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        if text.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd hex length"));
        }
        (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| serde::de::Error::custom("bad hex"))
            })
            .collect()
    }
}
