//! The per-shard bound on segment writes in flight: each DMA `write_at` of a `.log` holds one
//! slot while it is submitted and until it completes. 0 (the default) means no bound. The
//! broker sets it once per shard from `log.write.inflight.shard.max` (which `keel serve` may
//! derive from the io-properties file: past the disk's saturating queue depth, more writes in
//! flight only queue in the device and delay the fdatasyncs behind them).
//!
//! Thread-local: each shard has its own slots, and a slot is never held across shards. A
//! write whose future is dropped midway gives its slot back with the permit.

use std::cell::RefCell;
use std::rc::Rc;

use glommio::sync::{Semaphore, StaticPermit};

thread_local! {
    static SLOTS: RefCell<Option<Rc<Semaphore>>> = const { RefCell::new(None) };
    static MAX: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Sets this shard's bound (0: none). Call before the shard writes.
pub fn set_max(writes: usize) {
    MAX.with(|m| m.set(writes));
    SLOTS.with(|s| *s.borrow_mut() = (writes > 0).then(|| Rc::new(Semaphore::new(writes as u64))));
}

/// This shard's bound (0: none).
pub fn max() -> usize {
    MAX.with(|m| m.get())
}

/// Waits for a slot; `None` when writes are not bounded. Hold the permit across the write.
pub async fn acquire() -> Option<StaticPermit> {
    let slots = SLOTS.with(|s| s.borrow().clone())?;
    // The semaphore is never closed, so acquiring cannot fail; if it ever did, the write
    // goes ahead unbounded rather than failing.
    slots.acquire_static_permit(1).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_writes_in_flight() {
        crate::test_util::run(|| async {
            assert!(acquire().await.is_none());
            set_max(2);
            assert_eq!(max(), 2);
            let a = acquire().await.expect("slot");
            let _b = acquire().await.expect("slot");
            let slots = SLOTS.with(|s| s.borrow().clone()).expect("bounded");
            assert_eq!(slots.available(), 0);
            drop(a);
            assert_eq!(slots.available(), 1);
            set_max(0);
            assert!(acquire().await.is_none());
        });
    }
}
