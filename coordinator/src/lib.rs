//! Kafka's coordinators as sans-I/O state machines, for the broker to drive.
//!
//! - [`group`]: the group coordinator: classic groups (JoinGroup, SyncGroup, Heartbeat,
//!   LeaveGroup), KIP-848 consumer groups (ConsumerGroupHeartbeat) with their server-side
//!   assignors, committed offsets, and the `__consumer_offsets` records that persist them.
//! - [`txn`]: the transaction coordinator and the `__transaction_state` records.
//! - what both share: [`internal_topics`] (the internal topics and the partition a group id or
//!   transactional id maps to) and [`runtime`] (a partition's load and whether it may serve,
//!   write-then-apply, the timer index).
//!
//! Nothing here opens a socket, reads a clock or touches a disk. Time comes in as `now_ms`;
//! records read back from a log come in as bytes (hostile: every decoder refuses malformed
//! input without panicking); what must be written (records to append, markers to send,
//! answers to parked requests) comes out as values. The broker (`keel-broker`'s `group` and
//! `txn` modules) owns the logs, the timers and the shards, and carries these out with Kafka's
//! write-then-apply rule: a change reaches memory only after its records are committed.

pub mod group;
pub mod internal_topics;
pub mod runtime;
#[cfg(test)]
pub(crate) mod testing;
pub mod txn;

pub use internal_topics::{partition_for, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
