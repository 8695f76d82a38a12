//! The controller's state on shard 0 ([`Controller`], held by the shard); the operations on it
//! are in [`super`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use futures_channel::oneshot;
use keel_raft::node::MetadataHandle;

/// Where each AlterPartition's answer goes: a result per request, or why none came.
pub(super) type AlterTickets = HashMap<
    u64,
    oneshot::Sender<Result<Vec<keel_raft::partition_change::AlterPartitionResult>, String>>,
>;

/// Where each ElectLeaders answer goes: the results per request entry and the log index of
/// the image holding the elections, or why none came.
pub(super) type ElectTickets = HashMap<
    u64,
    oneshot::Sender<
        Result<
            (
                Vec<keel_raft::partition_change::TopicElectionResults>,
                keel_raft::LogIndex,
            ),
            String,
        >,
    >,
>;

/// The metadata quorum as shard 0 sees it: the node's handle, the proposals awaiting their
/// answer, the image installed on every shard, and this broker's block of producer ids.
pub struct Controller {
    pub handle: Arc<MetadataHandle>,
    /// This run's broker incarnation: serving starts once the quorum registered it.
    pub(super) incarnation_id: [u8; 16],
    /// Proposals awaiting their answer, by ticket.
    pub(super) tickets: RefCell<HashMap<u64, oneshot::Sender<Result<keel_raft::Applied, String>>>>,
    /// AlterPartition requests awaiting their answer, by ticket.
    pub(super) alter_tickets: RefCell<AlterTickets>,
    /// ElectLeaders requests awaiting their answer, by ticket.
    pub(super) elect_tickets: RefCell<ElectTickets>,
    /// The Raft index of the image installed on every shard.
    pub(super) installed: Cell<u64>,
    pub(super) install_waiters: RefCell<Vec<(u64, oneshot::Sender<()>)>>,
    /// This broker's current block of producer ids: the next to hand out and the end
    /// (exclusive). Refilled through the metadata log, one allocation at a time.
    pub(super) producer_ids: Cell<(i64, i64)>,
    pub(super) producer_id_lock: glommio::sync::Semaphore,
    /// This broker's controlled shutdown: None while it runs, then whether the controller
    /// approved it (false: the broker was not registered).
    pub(super) shutdown_approved: Cell<Option<bool>>,
}
