//! Who hears that a log went offline on this thread (a shard): a failed write, fdatasync or
//! truncation poisoned it. The broker registers one listener per shard, which wakes the task
//! that reports offline replicas to the controller, so nothing polls for them.

use std::cell::RefCell;
use std::rc::Rc;

thread_local! {
    static LISTENER: RefCell<Option<Rc<dyn Fn()>>> = const { RefCell::new(None) };
}

/// Sets (or with `None` removes) this thread's listener.
pub fn set_offline_listener(listener: Option<Rc<dyn Fn()>>) {
    LISTENER.with(|l| *l.borrow_mut() = listener);
}

/// Tells this thread's listener that a log went offline. Logs call it as they are poisoned;
/// the broker also calls it for a log that would not open. The listener must not touch the
/// log (it runs inside the log's state borrow): it only wakes a task.
pub fn signal_offline() {
    let listener = LISTENER.with(|l| l.borrow().clone());
    if let Some(f) = listener {
        f();
    }
}
