//! The shard's I/O queue depth: log writes, fdatasyncs and reads submitted to io_uring and
//! not yet completed, counted on the shard's own thread (no atomics). Besides the depth now,
//! the time integral of the depth is kept, so a reader that samples it twice gets the mean
//! depth over the interval (Little's law: mean depth = IOPS x mean latency).

use std::cell::Cell;
use std::future::Future;
use std::time::Instant;

/// What an I/O was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Write = 0,
    Sync = 1,
    Read = 2,
}

pub const KINDS: [(IoKind, &str); 3] = [
    (IoKind::Write, "write"),
    (IoKind::Sync, "fdatasync"),
    (IoKind::Read, "read"),
];

struct Depth {
    in_flight: Cell<u64>,
    since: Cell<Option<Instant>>,
    /// Sum of depth x seconds, in depth x nanoseconds.
    area_ns: Cell<u128>,
    ops: [Cell<u64>; 3],
    busy_ns: [Cell<u64>; 3],
}

thread_local! {
    static DEPTH: Depth = const {
        Depth {
            in_flight: Cell::new(0),
            since: Cell::new(None),
            area_ns: Cell::new(0),
            ops: [Cell::new(0), Cell::new(0), Cell::new(0)],
            busy_ns: [Cell::new(0), Cell::new(0), Cell::new(0)],
        }
    };
}

impl Depth {
    /// Adds the area since the last change and moves the depth by `delta`.
    fn step(&self, now: Instant, delta: i64) {
        if let Some(since) = self.since.get() {
            let dt = now.saturating_duration_since(since).as_nanos();
            self.area_ns
                .set(self.area_ns.get() + dt * u128::from(self.in_flight.get()));
        }
        self.since.set(Some(now));
        self.in_flight
            .set(self.in_flight.get().saturating_add_signed(delta));
    }
}

/// Counts `io` in the shard's queue depth while it is in flight.
pub async fn track<T>(kind: IoKind, io: impl Future<Output = T>) -> T {
    let start = Instant::now();
    DEPTH.with(|d| d.step(start, 1));
    // Decrements even if the future is dropped mid-flight.
    struct Done(IoKind, Instant);
    impl Drop for Done {
        fn drop(&mut self) {
            let now = Instant::now();
            let _ = DEPTH.try_with(|d| {
                d.step(now, -1);
                let k = self.0 as usize;
                d.ops[k].set(d.ops[k].get() + 1);
                d.busy_ns[k].set(
                    d.busy_ns[k].get() + now.saturating_duration_since(self.1).as_nanos() as u64,
                );
            });
        }
    }
    let _done = Done(kind, start);
    io.await
}

/// This thread's I/O depth figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct IoDepthStats {
    pub in_flight: u64,
    /// Integral of the depth over time, in depth x seconds.
    pub depth_seconds: f64,
    /// Completed I/Os, by [`IoKind`] index.
    pub ops: [u64; 3],
    /// Sum of the completed I/Os' latencies in seconds, by [`IoKind`] index.
    pub latency_seconds: [f64; 3],
}

pub fn stats() -> IoDepthStats {
    DEPTH.with(|d| {
        d.step(Instant::now(), 0);
        IoDepthStats {
            in_flight: d.in_flight.get(),
            depth_seconds: d.area_ns.get() as f64 / 1e9,
            ops: std::array::from_fn(|k| d.ops[k].get()),
            latency_seconds: std::array::from_fn(|k| d.busy_ns[k].get() as f64 / 1e9),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_in_flight_and_integrates() {
        let before = stats();
        futures_lite::future::block_on(async {
            let a = track(IoKind::Write, async {
                std::thread::sleep(std::time::Duration::from_millis(20));
                assert_eq!(stats().in_flight, before.in_flight + 1);
            });
            a.await;
        });
        let after = stats();
        assert_eq!(after.in_flight, before.in_flight);
        assert_eq!(after.ops[IoKind::Write as usize], before.ops[0] + 1);
        let area = after.depth_seconds - before.depth_seconds;
        assert!((0.015..1.0).contains(&area), "{area}");
        assert!(after.latency_seconds[0] - before.latency_seconds[0] >= 0.015);
    }
}
