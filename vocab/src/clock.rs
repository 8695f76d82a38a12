//! The clocks, in Kafka's unit (milliseconds): the wall clock that stamps records and expires
//! what is old, and a monotonic one for sessions and timeouts.
//!
//! Code that stamps, expires or times out takes a [`Clock`]; tests pass a [`ManualClock`].

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Milliseconds on a clock that never goes back (sessions, rebalance timeouts); its origin
    /// is arbitrary, so only differences mean anything.
    fn monotonic_ms(&self) -> i64;
}

/// The system's wall clock; 0 if it reads before 1970.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// Since the first call in this process.
    fn monotonic_ms(&self) -> i64 {
        static START: OnceLock<Instant> = OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: Cell<i64>,
}

impl ManualClock {
    pub fn new(now_ms: i64) -> ManualClock {
        ManualClock {
            now_ms: Cell::new(now_ms),
        }
    }

    pub fn set(&self, now_ms: i64) {
        self.now_ms.set(now_ms);
    }

    pub fn advance(&self, ms: i64) {
        self.now_ms.set(self.now_ms.get().saturating_add(ms));
    }
}

/// One time for both clocks: tests move it as they need.
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.get()
    }

    fn monotonic_ms(&self) -> i64 {
        self.now_ms.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_after_2020_and_manual_clock_moves_when_told() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
        let c = ManualClock::new(5);
        c.advance(10);
        assert_eq!(c.now_ms(), 15);
        assert_eq!(c.monotonic_ms(), 15);
        let a = SystemClock.monotonic_ms();
        assert!(SystemClock.monotonic_ms() >= a);
        c.set(-1);
        assert_eq!(c.now_ms(), -1);
    }
}
