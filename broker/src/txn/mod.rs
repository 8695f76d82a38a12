//! Transaction coordination: Kafka's transaction coordinator for transactional producers
//! (InitProducerId with a `transactional.id`, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//! DescribeTransactions, ListTransactions).
//!
//! Transactional id `t` is coordinated by partition `p = abs(java_hashcode(t)) % partitions`
//! of the internal topic `__transaction_state` (Kafka's `Utils.abs(transactionalId.hashCode) %
//! transaction.state.log.num.partitions`, the same rule as groups: `group::partition_for`), on
//! the broker that leads `p`, on the shard that owns `p`'s log there.
//!
//! - [`records`]: Kafka's `TransactionLogKey` / `TransactionLogValue` records, the contents of
//!   `__transaction_state`, with panic-free decoders;
//! - [`markers_client`]: the inter-broker WriteTxnMarkers client, for markers of partitions
//!   led by other brokers;
//! - [`state`]: the coordinator of one `__transaction_state` partition as a sans-I/O state
//!   machine ([`state::TransactionCoordinator`]): requests and time go in, records to append
//!   and transaction markers to write come out, and the shard carries them out.

pub mod coordinator;
pub mod markers_client;
pub mod records;
pub mod state;

/// The internal topic that holds the transactions' state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
