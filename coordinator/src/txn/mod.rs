//! The transaction coordinator, one `__transaction_state` partition at a time.
//!
//! - [`transaction_coordinator`]: InitProducerId with a `transactional.id`,
//!   AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions
//!   over one partition's transactional ids ([`transaction_coordinator::TransactionCoordinator`]):
//!   requests and time go in; records to append and markers to write come out;
//! - [`transaction_metadata`]: one transactional id as the coordinator holds it (Kafka's
//!   `TransactionMetadata`), with [`transaction_state`]'s [`TxnState`];
//! - [`transaction_log`]: Kafka's `TransactionLogKey` / `TransactionLogValue` records, the
//!   contents of `__transaction_state`, with panic-free decoders.

pub mod transaction_coordinator;
pub mod transaction_log;
pub mod transaction_metadata;
pub mod transaction_state;

pub use transaction_state::TxnState;
