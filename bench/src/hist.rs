//! Latency histograms for publish and end-to-end latency.
//!
//! A [`LatencyHist`] records microseconds into an HDR histogram covering 1 µs ..= 1 hour at 3
//! significant digits (so any reported value is within 0.1% of a recorded one). Values above
//! an hour are clamped to an hour rather than rejected: a benchmark must never panic or drop a
//! sample because the broker was pathologically slow. Recording is allocation-free, so each
//! producer/consumer task keeps its own histogram and the runner merges them at the end
//! (or per reporting interval, clearing the interval histograms afterwards).
//!
//! Summaries are reported in milliseconds (f64), as in [`crate::result`].

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::result::{LatencySummary, PercentilePoint};

/// Lowest distinguishable latency, in microseconds.
pub const LATENCY_US_MIN: u64 = 1;
/// Highest trackable latency (one hour), in microseconds; larger values are clamped to it.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Significant decimal digits kept by the histogram.
const SIGNIFICANT_DIGITS: u8 = 3;
/// Steps per decade of the log-spaced tail of [`LatencyHist::percentile_points`].
const TAIL_STEPS_PER_DECADE: u32 = 20;
/// Decades of the tail: 90%, 99%, 99.9%, 99.99%, 99.999%.
const TAIL_DECADES: u32 = 5;

/// A latency histogram in microseconds.
#[derive(Clone, Debug)]
pub struct LatencyHist {
    hist: Histogram<u64>,
}

impl Default for LatencyHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHist {
    /// An empty histogram. Allocates its counts array once (about 200 KiB).
    pub fn new() -> Self {
        // The bounds are constants that hdrhistogram accepts; failure here is a programming error.
        let hist = Histogram::new_with_bounds(LATENCY_US_MIN, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Self { hist }
    }

    /// Records one latency in microseconds, clamped to [`LATENCY_US_MAX`].
    #[inline]
    pub fn record_us(&mut self, latency_us: u64) {
        self.hist.saturating_record(latency_us);
    }

    /// Records one latency, rounded down to whole microseconds and clamped to one hour.
    #[inline]
    pub fn record_duration(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.record_us(us);
    }

    /// Adds every sample of `other` to `self`.
    pub fn merge(&mut self, other: &LatencyHist) {
        // Both sides share the same bounds, so `add` cannot fail; fall back to a clamped
        // sample-by-sample copy anyway rather than panic or lose samples.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }

    /// Number of samples recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// True when nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Forgets every sample, keeping the allocation.
    pub fn clear(&mut self) {
        self.hist.reset();
    }

    /// The latency at `quantile` (0.0..=1.0) in milliseconds; 0 when empty.
    pub fn quantile_ms(&self, quantile: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        us_to_ms(self.hist.value_at_quantile(quantile.clamp(0.0, 1.0)))
    }

    /// The 99th percentile in milliseconds (0 when empty): the runner's per-interval figure,
    /// read from an interval histogram that it then clears.
    pub fn interval_p99_ms(&self) -> f64 {
        self.quantile_ms(0.99)
    }

    /// Count, mean and the standard percentiles, in milliseconds; all zeros when empty.
    pub fn summary(&self) -> LatencySummary {
        if self.hist.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.hist.len(),
            mean_ms: self.hist.mean() / 1000.0,
            p50_ms: self.quantile_ms(0.5),
            p90_ms: self.quantile_ms(0.9),
            p99_ms: self.quantile_ms(0.99),
            p999_ms: self.quantile_ms(0.999),
            p9999_ms: self.quantile_ms(0.9999),
            max_ms: us_to_ms(self.hist.max()),
        }
    }

    /// Points for an HDR percentile plot: 0, 10, .., 90, then log-spaced towards 99.999
    /// (20 steps per decade), then 100 (the maximum). The tail stops where fewer than one
    /// sample lies beyond the percentile, since such points would only repeat the maximum.
    /// Empty when nothing has been recorded.
    pub fn percentile_points(&self) -> Vec<PercentilePoint> {
        let count = self.hist.len();
        if count == 0 {
            return Vec::new();
        }
        let mut points = Vec::with_capacity(10 + (TAIL_DECADES * TAIL_STEPS_PER_DECADE) as usize);
        for tenth in 0..9 {
            let quantile = f64::from(tenth) / 10.0;
            points.push(self.point(quantile));
        }
        // The tail: quantile = 1 - 10^-(1 + step/20), from 0.9 up to 0.99999.
        for step in 0..=TAIL_DECADES.saturating_sub(1) * TAIL_STEPS_PER_DECADE {
            let exponent = 1.0 + f64::from(step) / f64::from(TAIL_STEPS_PER_DECADE);
            let beyond = 10f64.powf(-exponent);
            // The small slack keeps 10^-3 * 1000 (computed as 0.99999..) in.
            if beyond * (count as f64) < 1.0 - 1e-9 {
                break;
            }
            points.push(self.point(1.0 - beyond));
        }
        points.push(PercentilePoint {
            percentile: 100.0,
            latency_ms: us_to_ms(self.hist.max()),
        });
        points
    }

    fn point(&self, quantile: f64) -> PercentilePoint {
        PercentilePoint {
            percentile: quantile * 100.0,
            latency_ms: self.quantile_ms(quantile),
        }
    }
}

fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64) -> bool {
        // 3 significant digits: within 0.1%, plus a little slack for the bucket's upper edge.
        (actual - expected).abs() <= expected.abs() * 0.002 + 1e-9
    }

    #[test]
    fn empty_is_all_zeros() {
        let h = LatencyHist::new();
        assert_eq!(h.count(), 0);
        assert!(h.is_empty());
        assert_eq!(h.summary(), LatencySummary::default());
        assert!(h.percentile_points().is_empty());
        assert_eq!(h.interval_p99_ms(), 0.0);
    }

    #[test]
    fn known_values_give_their_percentiles() {
        let mut h = LatencyHist::new();
        // 1 ms, 2 ms, .., 10 s: value i * 1000 µs for i in 1..=10_000.
        for i in 1..=10_000u64 {
            h.record_us(i * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        assert!(close(s.mean_ms, 5000.5), "mean {}", s.mean_ms);
        assert!(close(s.p50_ms, 5000.0), "p50 {}", s.p50_ms);
        assert!(close(s.p90_ms, 9000.0), "p90 {}", s.p90_ms);
        assert!(close(s.p99_ms, 9900.0), "p99 {}", s.p99_ms);
        assert!(close(s.p999_ms, 9990.0), "p999 {}", s.p999_ms);
        assert!(close(s.p9999_ms, 9999.0), "p9999 {}", s.p9999_ms);
        assert!(close(s.max_ms, 10_000.0), "max {}", s.max_ms);
        assert!(close(h.interval_p99_ms(), 9900.0));
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = LatencyHist::new();
        for us in [1u64, 2, 3, 500, 999] {
            h.record_us(us);
        }
        let s = h.summary();
        assert_eq!(s.max_ms, 0.999);
        assert_eq!(s.p50_ms, 0.003);
        assert_eq!(h.quantile_ms(0.0), 0.001);
    }

    #[test]
    fn oversized_values_are_clamped_not_rejected() {
        let mut h = LatencyHist::new();
        h.record_us(u64::MAX);
        h.record_duration(Duration::from_secs(10 * 3600));
        h.record_duration(Duration::MAX);
        h.record_us(0);
        assert_eq!(h.count(), 4);
        assert!(close(h.summary().max_ms, 3_600_000.0));
    }

    #[test]
    fn record_duration_uses_microseconds() {
        let mut h = LatencyHist::new();
        h.record_duration(Duration::from_micros(1500));
        assert!(close(h.summary().max_ms, 1.5));
    }

    #[test]
    fn merge_adds_samples() {
        let mut a = LatencyHist::new();
        let mut b = LatencyHist::new();
        for i in 1..=100u64 {
            a.record_us(i * 10);
            b.record_us(i * 10 + 1000);
        }
        a.merge(&b);
        assert_eq!(a.count(), 200);
        assert_eq!(b.count(), 100);
        let s = a.summary();
        assert!(close(s.max_ms, 2.0));
        assert!(close(s.p50_ms, 1.0), "p50 {}", s.p50_ms);
        a.clear();
        assert_eq!(a.count(), 0);
        assert_eq!(a.summary(), LatencySummary::default());
    }

    #[test]
    fn percentile_points_are_monotonic_and_bounded_by_count() {
        let mut h = LatencyHist::new();
        for i in 1..=1000u64 {
            h.record_us(i);
        }
        let points = h.percentile_points();
        assert_eq!(points[0].percentile, 0.0);
        assert!(close(points[9].percentile, 90.0));
        let last = points.last().unwrap();
        assert_eq!(last.percentile, 100.0);
        assert!(close(last.latency_ms, 1.0));
        for pair in points.windows(2) {
            assert!(pair[0].percentile < pair[1].percentile, "{pair:?}");
            assert!(pair[0].latency_ms <= pair[1].latency_ms, "{pair:?}");
        }
        // 1000 samples support up to 99.9 (one sample beyond), not 99.99.
        let tail_max = points[points.len() - 2].percentile;
        assert!((99.89..=99.9001).contains(&tail_max), "{tail_max}");

        let mut many = LatencyHist::new();
        for i in 0..200_000u64 {
            many.record_us(i % 5000 + 1);
        }
        let points = many.percentile_points();
        // 9 tenths + 81 tail points (90 .. 99.999) + max.
        assert_eq!(points.len(), 9 + 81 + 1);
        assert!(close(points[points.len() - 2].percentile, 99.999));
    }

    #[test]
    fn single_sample_plots_min_and_max() {
        let mut h = LatencyHist::new();
        h.record_us(42);
        let points = h.percentile_points();
        assert!(points.len() >= 2);
        assert!(points.iter().all(|p| p.latency_ms == 0.042));
    }
}
