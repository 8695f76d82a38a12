//! Fetch long-poll waiters per partition, and running futures side by side on a shard.

use std::cell::RefCell;
use std::rc::Rc;

use keel_shard::Event;

/// Waiters for "the high watermark moved" on one partition. Each notify wakes everyone
/// registered so far; a waiter registers a fresh [`Event`].
#[derive(Default)]
pub struct DataWaiters {
    waiters: RefCell<Vec<Rc<Event>>>,
}

impl DataWaiters {
    pub fn register(&self, event: Rc<Event>) {
        let mut w = self.waiters.borrow_mut();
        // Bound the list: drop events that already fired (their fetch has moved on).
        if w.len() >= 64 {
            w.retain(|e| !e.is_fired());
        }
        w.push(event);
    }

    pub fn notify(&self) {
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for e in waiters {
            e.fire();
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
