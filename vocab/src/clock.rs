//! The wall clock, in Kafka's unit (milliseconds since the Unix epoch).
//!
//! Code that stamps or expires things takes a [`Clock`]; tests pass a [`ManualClock`].

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
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

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
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
        c.set(-1);
        assert_eq!(c.now_ms(), -1);
    }
}
