//! Fixed-rate send schedules that do not hide coordinated omission.
//!
//! A producer at rate r sends message i at the *intended* time `start + i / r`, and its
//! latency is measured from that time, not from when the sender got round to it. If the broker
//! stalls, the sender falls behind; the next calls to [`Schedule::next_send`] then return times
//! already in the past (no message is skipped), the sender catches up as fast as it can, and
//! the backlog shows up as latency, as a real client's users would see it.
//!
//! Intended times are computed from the index, never by adding intervals, so they do not drift.
//! A whole workload's rate is split evenly over its producers, and producer k of n starts
//! k/n of one producer's interval late, so that together they send evenly spaced messages
//! instead of n at once. One `Schedule` per producer task; plain data, no clock reads inside.

use std::time::{Duration, Instant};

/// The intended send times of one producer.
#[derive(Clone, Debug)]
pub struct Schedule {
    start: Instant,
    /// Messages per second; 0 = unlimited.
    rate_per_s: f64,
    /// Index of the next message.
    next_index: u64,
}

impl Schedule {
    /// A schedule sending from `start` at `rate_per_s`. A rate of 0 (or negative, or not
    /// finite) means unlimited: the producer sends as fast as the broker lets it.
    pub fn new(rate_per_s: f64, start: Instant) -> Self {
        let rate_per_s = if rate_per_s.is_finite() && rate_per_s > 0.0 {
            rate_per_s
        } else {
            0.0
        };
        Self {
            start,
            rate_per_s,
            next_index: 0,
        }
    }

    /// Producer `index` of `producers` sharing `total_rate`: its share of the rate, starting
    /// at `start` plus its stagger offset.
    pub fn for_producer(total_rate: f64, producers: u32, index: u32, start: Instant) -> Self {
        let rate = per_producer(total_rate, producers);
        Self::new(rate, start + start_offset(rate, index, producers))
    }

    pub fn is_unlimited(&self) -> bool {
        self.rate_per_s == 0.0
    }

    /// Messages per second; 0 when unlimited.
    pub fn rate_per_s(&self) -> f64 {
        self.rate_per_s
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    /// Messages handed out so far.
    pub fn issued(&self) -> u64 {
        self.next_index
    }

    /// The intended send time of message `index`; None when unlimited.
    pub fn intended(&self, index: u64) -> Option<Instant> {
        if self.is_unlimited() {
            return None;
        }
        let nanos = (index as f64 * 1e9 / self.rate_per_s).round();
        // Saturate far in the future rather than overflow (about 584 years of nanoseconds).
        let nanos = if nanos < u64::MAX as f64 {
            nanos as u64
        } else {
            u64::MAX
        };
        Some(self.start + Duration::from_nanos(nanos))
    }

    /// The intended send time of the next message, even if it is already in the past; None
    /// when unlimited (send now and measure from the actual send time).
    #[inline]
    pub fn next_send(&mut self) -> Option<Instant> {
        let at = self.intended(self.next_index)?;
        self.next_index += 1;
        Some(at)
    }

    /// The intended time of the next message without consuming it.
    pub fn peek(&self) -> Option<Instant> {
        self.intended(self.next_index)
    }

    /// How many messages were due by `now` but not yet handed out (0 when unlimited).
    pub fn behind(&self, now: Instant) -> u64 {
        if self.is_unlimited() || now < self.start {
            return 0;
        }
        let due = (now - self.start).as_secs_f64() * self.rate_per_s;
        // Message i is due at i / rate, so floor(due) + 1 messages are due by now.
        let due = due.floor() as u64 + 1;
        due.saturating_sub(self.next_index)
    }
}

/// Each of `producers`' share of `total_rate`; 0 (unlimited) when the total is 0 or there are
/// no producers.
pub fn per_producer(total_rate: f64, producers: u32) -> f64 {
    if producers == 0 || !(total_rate.is_finite() && total_rate > 0.0) {
        return 0.0;
    }
    total_rate / f64::from(producers)
}

/// How late producer `index` of `producers`, each at `rate_per_producer`, should start:
/// `index / producers` of one interval, so the producers interleave evenly. Zero when
/// unlimited.
pub fn start_offset(rate_per_producer: f64, index: u32, producers: u32) -> Duration {
    if producers == 0 || !(rate_per_producer.is_finite() && rate_per_producer > 0.0) {
        return Duration::ZERO;
    }
    let fraction = f64::from(index % producers) / f64::from(producers);
    let nanos = (fraction * 1e9 / rate_per_producer).round();
    Duration::from_nanos(if nanos < u64::MAX as f64 {
        nanos as u64
    } else {
        u64::MAX
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_exact_multiples() {
        let start = Instant::now();
        let mut s = Schedule::new(1000.0, start);
        assert!(!s.is_unlimited());
        for i in 0..10_000u64 {
            assert_eq!(s.next_send(), Some(start + Duration::from_millis(i)));
        }
        assert_eq!(s.issued(), 10_000);

        // A rate that is not a divisor of 1e9 still lands on the rounded exact multiple.
        let mut s = Schedule::new(3.0, start);
        s.next_send();
        assert_eq!(
            s.next_send(),
            Some(start + Duration::from_nanos(333_333_333))
        );
        assert_eq!(
            s.next_send(),
            Some(start + Duration::from_nanos(666_666_667))
        );
        assert_eq!(s.next_send(), Some(start + Duration::from_secs(1)));
        // No drift after many messages.
        assert_eq!(
            s.intended(3_000_000),
            Some(start + Duration::from_secs(1_000_000))
        );
    }

    #[test]
    fn a_late_caller_gets_every_past_time() {
        let start = Instant::now() - Duration::from_secs(10);
        let mut s = Schedule::new(100.0, start);
        let now = Instant::now();
        assert!(s.behind(now) >= 1000);
        let mut previous = None;
        for i in 0..1000u64 {
            let at = s.next_send().unwrap();
            assert!(at < now, "message {i} is in the past");
            assert_eq!(at, start + Duration::from_millis(i * 10));
            if let Some(p) = previous {
                assert!(at > p);
            }
            previous = Some(at);
        }
        assert_eq!(s.issued(), 1000);
    }

    #[test]
    fn behind_counts_due_messages() {
        let start = Instant::now();
        let mut s = Schedule::new(10.0, start);
        assert_eq!(s.behind(start), 1);
        assert_eq!(s.behind(start + Duration::from_millis(250)), 3);
        s.next_send();
        s.next_send();
        assert_eq!(s.behind(start + Duration::from_millis(250)), 1);
        assert_eq!(s.peek(), Some(start + Duration::from_millis(200)));
        assert_eq!(
            s.behind(start.checked_sub(Duration::from_secs(1)).unwrap_or(start)),
            0
        );
    }

    #[test]
    fn unlimited_returns_none() {
        let start = Instant::now();
        for rate in [0.0, -5.0, f64::NAN, f64::INFINITY] {
            let mut s = Schedule::new(rate, start);
            assert!(s.is_unlimited(), "{rate}");
            assert_eq!(s.next_send(), None);
            assert_eq!(s.peek(), None);
            assert_eq!(s.behind(Instant::now()), 0);
        }
    }

    #[test]
    fn rate_splits_over_producers_with_staggered_starts() {
        assert_eq!(per_producer(1000.0, 4), 250.0);
        assert_eq!(per_producer(0.0, 4), 0.0);
        assert_eq!(per_producer(1000.0, 0), 0.0);
        assert_eq!(start_offset(250.0, 0, 4), Duration::ZERO);
        assert_eq!(start_offset(250.0, 1, 4), Duration::from_millis(1));
        assert_eq!(start_offset(250.0, 3, 4), Duration::from_millis(3));
        assert_eq!(start_offset(0.0, 3, 4), Duration::ZERO);

        // Together, 4 producers at 1000/s send one message every millisecond.
        let start = Instant::now();
        let mut all: Vec<Instant> = (0..4)
            .flat_map(|k| {
                let mut s = Schedule::for_producer(1000.0, 4, k, start);
                (0..25).map(move |_| s.next_send().unwrap())
            })
            .collect();
        all.sort();
        for (i, at) in all.iter().enumerate() {
            let expected = start + Duration::from_millis(i as u64);
            let error = if *at > expected {
                *at - expected
            } else {
                expected - *at
            };
            assert!(error <= Duration::from_nanos(1), "message {i}: {error:?}");
        }
    }
}
