//! The group coordinator, one `__consumer_offsets` partition's groups at a time.
//!
//! - [`group_metadata_manager`]: every group's [`GroupEntry`] (memberships and offsets) and
//!   the membership records;
//! - [`offset_metadata_manager`]: which commits a group accepts, committed offsets and the
//!   records that change them;
//! - [`group_coordinator_shard`]: the replay of a partition's log into groups at load;
//! - [`classic_group`]: a classic group's membership (JoinGroup, SyncGroup, Heartbeat,
//!   LeaveGroup) as a state machine, with [`classic_group_member`]'s members;
//! - [`consumer_group`]: a KIP-848 consumer group (ConsumerGroupHeartbeat), with the
//!   server-side [`assignor`]s and [`topic_regex`] subscriptions;
//! - [`records`] and [`consumer_group_records`]: Kafka's `__consumer_offsets` record formats.

pub mod assignor;
pub mod classic_group;
pub mod classic_group_member;
pub mod consumer_group;
pub mod consumer_group_records;
pub mod group_coordinator_shard;
pub mod group_metadata_manager;
pub mod offset_metadata_manager;
pub mod records;
pub mod topic_regex;

pub use group_metadata_manager::{GroupEntry, Waiter};
pub use records::CommittedOffset;
