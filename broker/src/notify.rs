//! Fetch long-poll waiters per partition, and running futures side by side on a shard.

use std::cell::RefCell;

/// A fetch waiting for new data, possibly on another shard: a `Send` sender that the
/// partition's owner signals once. The fetch holds the receiver; when it finishes (data,
/// deadline or shutdown) it drops it, and the owner prunes the closed sender.
pub type DataWaiter = futures_channel::mpsc::UnboundedSender<()>;

/// Waiters for "the high watermark moved" on one partition. Each notify wakes everyone
/// registered so far. The list is bounded by pruning waiters whose fetch has moved on.
#[derive(Default)]
pub struct DataWaiters {
    waiters: RefCell<Vec<DataWaiter>>,
}

impl DataWaiters {
    pub fn register(&self, waiter: DataWaiter) {
        let mut w = self.waiters.borrow_mut();
        if w.len() >= 64 {
            w.retain(|tx| !tx.is_closed());
        }
        w.push(waiter);
    }

    pub fn notify(&self) {
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for tx in waiters {
            let _ = tx.unbounded_send(());
        }
    }
}

/// Runs the futures concurrently as tasks on this shard and returns their outputs in order.
pub async fn join_all<T: 'static>(
    futs: Vec<impl std::future::Future<Output = T> + 'static>,
) -> Vec<T> {
    let tasks: Vec<_> = futs.into_iter().map(glommio::spawn_local).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await);
    }
    out
}
