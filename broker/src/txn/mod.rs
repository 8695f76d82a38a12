//! Transaction coordination on a shard: the broker's half of Kafka's transaction coordinator
//! for transactional producers (InitProducerId with a `transactional.id`, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions).
//!
//! The coordinator itself is sans-I/O, in `keel-coordinator`
//! ([`keel_coordinator::txn::transaction_coordinator::TransactionCoordinator`]: requests and time
//! go in, records to append and markers to write come out). Transactional id `t` is coordinated
//! by partition `keel_coordinator::partition_for(t, partitions)` of `__transaction_state`, on the
//! broker that leads it, on the shard that owns its log there. Here:
//!
//! - [`coordinator`]: the shard's coordinators ([`coordinator::TxnShard`]): loading a partition,
//!   appending and committing the coordinator's records before its state changes, writing
//!   markers, the timer;
//! - [`shard_state`]: the state the shard holds for them ([`shard_state::TxnShard`]);
//! - [`markers_client`]: the inter-broker WriteTxnMarkers client, for markers of partitions
//!   led by other brokers.

pub mod coordinator;
pub mod markers_client;
pub mod shard_state;
