//! A shard-local, one-shot event: many tasks wait, one call wakes them all. Shutdown, "new
//! data on this partition" (fetch long-poll) and "first of several waits finished" are all
//! one of these. Not `Send`: it lives and fires on one shard.

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

    pub fn is_fired(&self) -> bool {
        self.fired.get()
    }

    /// Wakes every waiter, now and later. Idempotent.
    pub fn fire(&self) {
        if self.fired.replace(true) {
            return;
        }
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            let _ = w.send(());
        }
    }

    /// Resolves when the event fires (at once if it already has).
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
