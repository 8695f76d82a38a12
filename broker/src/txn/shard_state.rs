//! The state a shard holds for the transaction coordinators of the `__transaction_state`
//! partitions it owns ([`TxnShard`], a field of the shard). The operations on it, which need
//! the shard's logs and tasks, are in [`super::coordinator`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use keel_coordinator::runtime::PartitionLoad;
use keel_coordinator::txn::transaction_coordinator::TransactionCoordinator;
use keel_shard::Event;

use super::markers_client::MarkerClients;

/// One `__transaction_state` partition this shard coordinates: its load and its coordinator.
pub(super) struct TxnPartition {
    pub(super) load: PartitionLoad,
    pub(super) coordinator: TransactionCoordinator,
}

/// The transaction coordinators of one shard: one per `__transaction_state` partition it owns.
#[derive(Default)]
pub struct TxnShard {
    pub(super) partitions: RefCell<HashMap<i32, TxnPartition>>,
    pub(super) next_load_id: Cell<u64>,
    pub(super) timer_started: Cell<bool>,
    pub(super) timer_wake: RefCell<Rc<Event>>,
    /// Connections to the other brokers, for the markers of their partitions.
    pub(super) markers: MarkerClients,
}
