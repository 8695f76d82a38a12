//! A shard-local, one-shot event: many tasks wait, one call wakes them all. Used for
//! "new data on this partition" (fetch long-poll) and "first of several waits finished".

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

#[derive(Default)]
pub struct Event {
    fired: Cell<bool>,
    waiters: RefCell<Vec<futures_channel::oneshot::Sender<()>>>,
}

impl Event {
    pub fn new() -> Rc<Event> {
        Rc::new(Event::default())
    }

    pub fn fire(&self) {
        if self.fired.replace(true) {
            return;
        }
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            let _ = w.send(());
        }
    }

    pub fn is_fired(&self) -> bool {
        self.fired.get()
    }

    pub async fn wait(&self) {
        if self.fired.get() {
            return;
        }
        let (tx, rx) = futures_channel::oneshot::channel();
        self.waiters.borrow_mut().push(tx);
        let _ = rx.await;
    }

    /// Waits for the event or the timeout; true if the event fired.
    pub async fn wait_timeout(&self, timeout: Duration) -> bool {
        futures_lite::future::or(
            async {
                self.wait().await;
                true
            },
            async {
                glommio::timer::sleep(timeout).await;
                false
            },
        )
        .await
    }
}

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
