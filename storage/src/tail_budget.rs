//! The per-shard memory budget of the partitions' tail caches.
//!
//! Each partition caches its most recent batches (at most `tail_cache_bytes` of its own), and
//! all partitions of a shard together stay within the shard's budget: when an append takes
//! the shard over it, the oldest cached batches of the whole shard are evicted (by insertion
//! order, across partitions) down to 90% of the budget. Thread-local: each shard has its own.
//! Evicted batches are still on disk; consumers reading them go to the segment files.

use std::cell::{Cell, RefCell};
use std::rc::Weak;

/// Default shard budget when the broker sets none.
pub const DEFAULT_BUDGET_BYTES: usize = 256 << 20;

thread_local! {
    static LIMIT: Cell<usize> = const { Cell::new(DEFAULT_BUDGET_BYTES) };
    static USED: Cell<usize> = const { Cell::new(0) };
    static SEQ: Cell<u64> = const { Cell::new(0) };
    static EVICTED: Cell<u64> = const { Cell::new(0) };
    /// Every log of the shard that may hold cached batches.
    static LOGS: RefCell<Vec<Weak<dyn Evict>>> = const { RefCell::new(Vec::new()) };
}

/// A log whose cache the budget can shrink.
pub(crate) trait Evict {
    /// The insertion number of its oldest cached batch, if it can be looked at now.
    fn oldest(&self) -> Option<u64>;
    /// Evicts its oldest cached batch; returns the bytes freed (0 if it could not).
    fn evict_oldest(&self) -> usize;
}

/// Sets this shard's budget in bytes.
pub fn set_budget(bytes: usize) {
    LIMIT.with(|l| l.set(bytes));
}

/// (bytes cached now, budget, batches evicted by the budget) on this shard.
pub fn stats() -> (usize, usize, u64) {
    (
        USED.with(Cell::get),
        LIMIT.with(Cell::get),
        EVICTED.with(Cell::get),
    )
}

pub(crate) fn register(log: Weak<dyn Evict>) {
    LOGS.with(|l| l.borrow_mut().push(log));
}

/// The next insertion number.
pub(crate) fn next_seq() -> u64 {
    SEQ.with(|s| {
        let n = s.get() + 1;
        s.set(n);
        n
    })
}

pub(crate) fn add(bytes: usize) {
    USED.with(|u| u.set(u.get() + bytes));
}

pub(crate) fn release(bytes: usize) {
    USED.with(|u| u.set(u.get().saturating_sub(bytes)));
}

/// If the shard is over budget, evicts its oldest cached batches down to 90% of it. Call
/// with no log's state borrowed.
pub(crate) fn enforce() {
    let limit = LIMIT.with(Cell::get);
    if USED.with(Cell::get) <= limit {
        return;
    }
    let target = limit / 10 * 9;
    let mut logs: Vec<(u64, std::rc::Rc<dyn Evict>)> = LOGS.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(|w| w.strong_count() > 0);
        l.iter()
            .filter_map(|w| w.upgrade())
            .filter_map(|log| log.oldest().map(|seq| (seq, log)))
            .collect()
    });
    // Oldest first, one batch at a time, re-ranking the log it came from.
    logs.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
    while USED.with(Cell::get) > target {
        let Some((_, log)) = logs.pop() else {
            break;
        };
        let freed = log.evict_oldest();
        if freed == 0 {
            continue;
        }
        EVICTED.with(|e| e.set(e.get() + 1));
        if let Some(seq) = log.oldest() {
            let at = logs.partition_point(|(s, _)| *s > seq);
            logs.insert(at, (seq, log));
        }
    }
}
