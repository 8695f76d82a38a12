//! A sampled rate shared by every shard of the broker (Kafka's `Rate` over a `SampledStat`):
//! the amounts recorded in the last `windows` windows of `window_ms`, divided by the time
//! they span. A client quota holds per broker, as in Kafka, so the connections of one client
//! on different shards record into the same rate.
//!
//! Each window is one `AtomicU64`: its epoch (the window's number since `base`) in the high
//! 32 bits and the amount recorded in it in the low 32 (saturating: 4 GiB per window). A
//! record is one compare-and-swap on the current window's slot; a slot still holding an older
//! epoch is restarted by whoever records first. No lock is taken and no shard waits for
//! another. These atomics are touched only by requests of clients that have a quota.
//!
//! Windows are aligned on multiples of `window_ms` since `base` (when the sensor was made).
//! The span a rate is measured over is `(windows - 1)` whole windows plus the elapsed part of
//! the current one (Kafka's `Rate.windowSize`), but for a sensor younger than that, the time
//! since it was made, and at least one window. Kafka pads a young sensor's span to
//! `windows - 1` windows instead, which lets a new client send ten seconds' worth at once and
//! then nothing for ten seconds; here a new client's first burst is one window's worth, and
//! its rate tracks the quota from the start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A sampled rate over `windows` windows of `window_ms`, in units per second.
#[derive(Debug)]
pub struct SharedRate {
    slots: Box<[AtomicU64]>,
    window_ms: u64,
    base: Instant,
}

fn pack(epoch: u64, amount: u64) -> u64 {
    (epoch << 32) | amount.min(u64::from(u32::MAX))
}

fn unpack(slot: u64) -> (u64, u64) {
    (slot >> 32, slot & u64::from(u32::MAX))
}

impl SharedRate {
    /// `windows` at least 2 and `window_ms` at least 1 (the config keys' bounds).
    pub fn new(windows: usize, window_ms: u64, base: Instant) -> SharedRate {
        assert!(windows >= 2 && window_ms >= 1);
        SharedRate {
            slots: (0..windows).map(|_| AtomicU64::new(0)).collect(),
            window_ms,
            base,
        }
    }

    /// The current window's epoch, and the milliseconds elapsed in it.
    fn epoch(&self, now: Instant) -> (u64, u64) {
        let ms = now.saturating_duration_since(self.base).as_millis() as u64;
        // Epoch 0 is reserved for "never used": the first window is 1.
        (
            (ms / self.window_ms + 1) & u64::from(u32::MAX),
            ms % self.window_ms,
        )
    }

    /// Adds `amount` to the current window.
    pub fn record(&self, now: Instant, amount: u64) {
        let (epoch, _) = self.epoch(now);
        let slot = &self.slots[(epoch as usize) % self.slots.len()];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let (e, value) = unpack(current);
            let next = if e == epoch {
                pack(e, value.saturating_add(amount))
            } else if e < epoch {
                pack(epoch, amount)
            } else {
                // Another shard's clock is a hair ahead and already started the next round of
                // this slot: count the amount there rather than lose it.
                pack(e, value.saturating_add(amount))
            };
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// The amounts of the windows still in the span, summed.
    fn total(&self, now: Instant) -> u64 {
        let (epoch, _) = self.epoch(now);
        let oldest = epoch.saturating_sub(self.slots.len() as u64 - 1);
        self.slots
            .iter()
            .map(|s| unpack(s.load(Ordering::Relaxed)))
            .filter(|(e, _)| *e >= oldest && *e != 0)
            .map(|(_, v)| v)
            .sum()
    }

    /// The span the rate is measured over, in milliseconds (see the module's comment).
    pub fn span_ms(&self, now: Instant) -> f64 {
        let (_, into) = self.epoch(now);
        let full = (self.slots.len() as u64 - 1) * self.window_ms + into;
        let age = now.saturating_duration_since(self.base).as_millis() as u64;
        full.min(age).max(self.window_ms) as f64
    }

    /// The rate in units per second, with `extra` more recorded now.
    pub fn measure_with(&self, now: Instant, extra: u64) -> f64 {
        (self.total(now) + extra) as f64 * 1000.0 / self.span_ms(now)
    }

    /// Whether nothing was recorded in the span (the sensor may be dropped).
    pub fn idle(&self, now: Instant) -> bool {
        self.total(now) == 0
    }
}

/// Kafka's `QuotaUtils.throttleTime`: the delay that brings an observed rate `observed` down
/// to `limit` if nothing more is recorded, `(O - T) / T * W`; 0 within the quota. A quota of
/// 0 (or less) allows nothing: anything recorded waits out the whole span.
pub fn throttle_ms(observed: f64, limit: f64, span_ms: f64) -> u64 {
    if observed <= limit {
        return 0;
    }
    if limit <= 0.0 {
        return span_ms.round() as u64;
    }
    ((observed - limit) / limit * span_ms).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_young_sensor_is_measured_over_its_age_and_at_least_one_window() {
        let base = Instant::now();
        let r = SharedRate::new(11, 1000, base);
        let t = base + Duration::from_millis(500);
        r.record(t, 1000);
        assert_eq!(r.span_ms(t), 1000.0, "at least one window");
        assert_eq!(r.measure_with(t, 0), 1000.0);
        let t = base + Duration::from_millis(4000);
        assert_eq!(r.span_ms(t), 4000.0, "its age");
        assert_eq!(r.measure_with(t, 3000), 1000.0);
        // Past windows - 1 windows: ten whole windows and the current one's elapsed part.
        let t = base + Duration::from_millis(12_250);
        assert_eq!(r.span_ms(t), 10_250.0);
    }

    #[test]
    fn windows_leave_the_span_after_windows_windows() {
        let base = Instant::now();
        let r = SharedRate::new(3, 100, base);
        r.record(base, 300);
        r.record(base + Duration::from_millis(150), 200);
        let t = base + Duration::from_millis(250);
        assert_eq!(r.measure_with(t, 0), 500.0 * 1000.0 / 250.0);
        // At 300 ms the first window (0-99 ms) has left the 3-window span.
        let t = base + Duration::from_millis(300);
        assert_eq!(r.measure_with(t, 0), 200.0 * 1000.0 / 200.0);
        // A slot reused by a later window starts over.
        r.record(t, 7);
        assert_eq!(r.measure_with(t, 0), 207.0 * 1000.0 / 200.0);
        assert!(!r.idle(t));
        assert!(r.idle(base + Duration::from_millis(1000)));
    }

    #[test]
    fn records_from_many_threads_are_all_counted() {
        let base = Instant::now();
        let r = std::sync::Arc::new(SharedRate::new(11, 60_000, base));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        r.record(base, 3);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(r.total(base), 120_000);
    }

    #[test]
    fn an_amount_past_u32_saturates_the_window() {
        let base = Instant::now();
        let r = SharedRate::new(2, 1000, base);
        r.record(base, u64::MAX);
        r.record(base, 5);
        assert_eq!(r.total(base), u64::from(u32::MAX));
    }

    #[test]
    fn throttle_time_is_kafkas() {
        // 2x the quota over 10 s needs 10 s more to come down to it.
        assert_eq!(throttle_ms(2000.0, 1000.0, 10_000.0), 10_000);
        assert_eq!(throttle_ms(1100.0, 1000.0, 10_500.0), 1050);
        assert_eq!(throttle_ms(999.0, 1000.0, 10_000.0), 0);
        assert_eq!(throttle_ms(5.0, 0.0, 10_000.0), 10_000);
        assert_eq!(throttle_ms(0.0, 0.0, 10_000.0), 0);
    }
}
