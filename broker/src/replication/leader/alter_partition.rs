//! The leader's AlterPartition queue (Kafka's AlterPartitionManager), one per shard: the ISR
//! changes this shard's leaders want (shrinks from the periodic check, expansions from
//! followers' fetches) travel to the controller as one AlterPartition request per round, with
//! an item per partition. A child of `leader`, whose `isr_change_done` takes each result.
//!
//! At most one request is in flight per shard; changes submitted meanwhile wait in `unsent`
//! and go together in the next request, sent as soon as the one in flight is answered. A
//! request is sent from a task of its own, so every change submitted in one pass over the
//! partitions (one ISR check) goes in one request. A partition has at most one change here
//! (its leader marks it pending and proposes no other until it ends); a newer one for the same
//! partition replaces an unsent older one, which the image that cleared the older one's
//! pending state had made stale. Each item gets its own result back (`leader::isr_change_done`).
//!
//! Runs on the shard that owns the partitions; no borrow lives across an `.await`. Dropping
//! the sending task (shutdown) drops its items unanswered: their partitions keep a pending
//! change until the next image with a newer partition epoch, or forever on a broker that
//! is stopping anyway.

use std::collections::BTreeMap;
use std::rc::Rc;

use keel_raft::partition_change::ALTER_PARTITION_BATCH_MAX;
use tracing::debug;

use crate::shard::{BrokerShard, Partition};

/// A change of one of this shard's partitions (the queue itself is in `state`, which the
/// shard holds).
pub type AlterPartitionItem = crate::replication::state::AlterPartitionItem<Rc<Partition>>;

/// Queues `item` for the next AlterPartition request of `shard` and sends one unless a request
/// is in flight.
pub fn submit(shard: &Rc<BrokerShard>, item: AlterPartitionItem) {
    let key = (item.change.topic_id, item.change.partition);
    shard.alter_partition.unsent.borrow_mut().insert(key, item);
    maybe_send(shard);
}

/// Starts the next request when none is in flight and changes wait. The request takes what
/// is unsent when its task runs (after the submitter's pass yields), so changes submitted
/// before then travel with it.
fn maybe_send(shard: &Rc<BrokerShard>) {
    let manager = &shard.alter_partition;
    if manager.in_flight.get() || manager.unsent.borrow().is_empty() {
        return;
    }
    manager.in_flight.set(true);
    let shard = shard.clone();
    glommio::spawn_local(async move {
        // glommio may run a new task at once: let the pass that submitted this change (an ISR
        // check over every partition) finish submitting before the request is cut.
        futures_lite::future::yield_now().await;
        let batch = take_batch(
            &mut shard.alter_partition.unsent.borrow_mut(),
            ALTER_PARTITION_BATCH_MAX,
        );
        if !batch.is_empty() {
            send(&shard, batch).await;
        }
        shard.alter_partition.in_flight.set(false);
        maybe_send(&shard);
    })
    .detach();
}

/// Takes the first `max` unsent items, in key order (the controller bounds one request at
/// `ALTER_PARTITION_BATCH_MAX`); the rest wait for the next request.
fn take_batch<K: Ord, V>(unsent: &mut BTreeMap<K, V>, max: usize) -> Vec<V> {
    let mut batch = Vec::with_capacity(unsent.len().min(max));
    while batch.len() < max {
        match unsent.pop_first() {
            Some((_, item)) => batch.push(item),
            None => break,
        }
    }
    batch
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_unsent_items_in_order_up_to_the_bound_and_leaves_the_rest() {
        let mut unsent: BTreeMap<([u8; 16], i32), &str> = BTreeMap::new();
        assert!(take_batch(&mut unsent, 2).is_empty());
        unsent.insert(([2; 16], 0), "b0");
        unsent.insert(([1; 16], 1), "a1");
        unsent.insert(([1; 16], 0), "a0");
        // A newer change of a partition replaces its unsent one.
        unsent.insert(([2; 16], 0), "b0-newer");
        assert_eq!(take_batch(&mut unsent, 2), vec!["a0", "a1"]);
        assert_eq!(unsent.len(), 1);
        assert_eq!(take_batch(&mut unsent, 2), vec!["b0-newer"]);
        assert!(unsent.is_empty());
    }
}
