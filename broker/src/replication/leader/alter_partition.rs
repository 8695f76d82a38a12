//! The leader's AlterPartition queue (Kafka's AlterPartitionManager), one per shard: the ISR
//! changes this shard's leaders want (shrinks from the periodic check, expansions from
//! followers' fetches) travel to the controller as one AlterPartition request per round, with
//! an item per partition. A child of `leader`, whose `isr_change_done` takes each result.
//!
//! The queue's rules are storage's `replication::timers::IsrChangeQueue`, which the fault
//! simulation runs too: at most one request in flight per shard; changes submitted meanwhile
//! wait and go together in the next request, sent as soon as the one in flight is answered;
//! a change that got no answer goes again `ISR_CHANGE_RESEND_BACKOFF_MS` later if it is still
//! its partition's pending change. This module is the driver: a request is sent from a task
//! of its own, so every change submitted in one pass over the partitions (one ISR check) goes
//! in one request, and a glommio timer wakes the queue when a resend is due. Each item gets
//! its own result back (`leader::isr_change_done`).
//!
//! Runs on the shard that owns the partitions; no borrow lives across an `.await`. Dropping
//! the sending task (shutdown) drops its items unanswered: their partitions keep a pending
//! change until the next image with a newer partition epoch, or forever on a broker that
//! is stopping anyway.

use std::rc::Rc;
use std::time::Duration;

use keel_raft::partition_change::ALTER_PARTITION_BATCH_MAX;
use keel_storage::replication::timers::ISR_CHANGE_RESEND_BACKOFF_MS;
use tracing::debug;

use crate::shard::{BrokerShard, Partition};

/// A change of one of this shard's partitions (the queue itself is in `state`, which the
/// shard holds).
pub type AlterPartitionItem = crate::replication::state::AlterPartitionItem<Rc<Partition>>;

/// Queues `item` for the next AlterPartition request of `shard` and sends one unless a request
/// is in flight.
pub fn submit(shard: &Rc<BrokerShard>, item: AlterPartitionItem) {
    let key = (item.change.topic_id, item.change.partition);
    shard.alter_partition.queue.borrow_mut().submit(key, item);
    maybe_send(shard);
}

/// `item` got no answer: it goes again after the backoff if it is still its partition's
/// pending change then (and no newer change replaced it).
pub fn resend_later(shard: &Rc<BrokerShard>, item: AlterPartitionItem) {
    let key = (item.change.topic_id, item.change.partition);
    let now_ms = shard.clock.monotonic_ms();
    shard
        .alter_partition
        .queue
        .borrow_mut()
        .resend_later(key, item, now_ms);
    let shard = shard.clone();
    glommio::spawn_local(async move {
        glommio::timer::sleep(Duration::from_millis(ISR_CHANGE_RESEND_BACKOFF_MS as u64)).await;
        maybe_send(&shard);
    })
    .detach();
}

/// Starts the next request when none is in flight and changes wait (unsent, or due to go
/// again). The request takes what is there when its task runs (after the submitter's pass
/// yields), so changes submitted before then travel with it.
fn maybe_send(shard: &Rc<BrokerShard>) {
    {
        let mut queue = shard.alter_partition.queue.borrow_mut();
        if !queue.may_start(shard.clock.monotonic_ms()) {
            return;
        }
        queue.start();
    }
    let shard = shard.clone();
    glommio::spawn_local(async move {
        // glommio may run a new task at once: let the pass that submitted this change (an ISR
        // check over every partition) finish submitting before the request is cut.
        futures_lite::future::yield_now().await;
        let now_ms = shard.clock.monotonic_ms();
        let batch = shard.alter_partition.queue.borrow_mut().take_batch(
            now_ms,
            ALTER_PARTITION_BATCH_MAX,
            |item| super::still_pending(&item.part, &item.change),
        );
        if !batch.is_empty() {
            send(&shard, batch).await;
        }
        shard.alter_partition.queue.borrow_mut().answered();
        maybe_send(&shard);
    })
    .detach();
}

/// Sends one AlterPartition request with `batch` and hands each item its result.
async fn send(shard: &Rc<BrokerShard>, batch: Vec<AlterPartitionItem>) {
    let counters = &shard.counters;
    counters
        .alter_partition_requests
        .set(counters.alter_partition_requests.get() + 1);
    counters
        .alter_partition_partitions
        .set(counters.alter_partition_partitions.get() + batch.len() as u64);
    debug!(
        shard = shard.id,
        partitions = batch.len(),
        "sending AlterPartition"
    );
    let (items, changes): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|i| ((i.part, i.why), i.change))
        .unzip();
    let results = crate::controller::alter_partitions(shard, &changes).await;
    assert_eq!(
        results.len(),
        changes.len(),
        "a result per AlterPartition item"
    );
    for (((part, why), change), (answer, detail)) in items.into_iter().zip(changes).zip(results) {
        super::isr_change_done(shard, &part, &change, why, answer, &detail);
    }
}
