//! Fetch long-poll waiters per partition, and running futures side by side on a shard.

use std::cell::RefCell;

/// A fetch waiting for new data: the shard it waits on and its token there. The owner
/// wakes it with a mesh notification (never a cross-thread waker).
pub type DataWaiter = (usize, u64);

/// Most waiters one partition keeps; past that the oldest are dropped (their fetches still
/// end at their deadline and re-read, so nothing is lost but a prompt wake-up).
const WAITERS_MAX: usize = 1024;

/// Waiters for "the high watermark moved" on one partition. Each notify wakes everyone
/// registered so far.
#[derive(Default)]
pub struct DataWaiters {
    waiters: RefCell<Vec<DataWaiter>>,
}

impl DataWaiters {
    pub fn register(&self, waiter: DataWaiter) {
        let mut w = self.waiters.borrow_mut();
        if w.len() >= WAITERS_MAX {
            w.drain(..WAITERS_MAX / 2);
        }
        w.push(waiter);
    }

    /// Takes every waiter registered so far; the caller wakes them.
    pub fn take(&self) -> Vec<DataWaiter> {
        std::mem::take(&mut *self.waiters.borrow_mut())
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
