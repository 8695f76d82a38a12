//! Authentication's CPU work (TLS handshakes, PLAIN's PBKDF2) runs on the shard's `auth` task
//! queue, paced so that a burst of it hands the shard back to produce and fetch after each
//! expensive step.
//!
//! glommio switches task queues only when its preempt timer fires (`io.latency.goal.us`, 100 ms
//! by default) or a queue yields. The `auth` queue's lower shares decide who runs next at such a
//! switch, not how long the `auth` queue keeps the shard: a burst of 500 handshakes, each a
//! millisecond of RSA and key exchange, would hold it for whole timer slices, and a slice that
//! the kernel stretches (another process takes the core) fires the stall detector. So once the
//! paced work on this thread has run [`PACE`] since the queue last yielded, the queue yields:
//! the scheduler then weighs the queues' shares at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::shard::BrokerShard;

/// Paced work this long (on one thread, summed over its polls) makes its task queue yield.
pub const PACE: Duration = Duration::from_micros(250);

thread_local! {
    /// Paced work run on this thread since its queue was last told to yield.
    static RUN_SINCE_YIELD: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Runs `work` on the shard's `auth` queue (inline where the shard has none, as in unit
/// tests), paced ([`Paced`]). `Err` when the queue refused the task.
pub async fn run<T: 'static>(
    shard: &BrokerShard,
    work: impl Future<Output = T> + 'static,
) -> Result<T, String> {
    let work = Paced::new(work);
    match shard.auth_queue() {
        Some(queue) => match glommio::spawn_local_into(work, queue) {
            Ok(task) => Ok(task.await),
            Err(e) => Err(format!("the auth task queue is gone: {e}")),
        },
        None => Ok(work.await),
    }
}

/// `inner`, with its task queue told to yield once paced work has run [`PACE`].
pub struct Paced<F> {
    inner: Pin<Box<F>>,
}

impl<F: Future> Paced<F> {
    pub fn new(inner: F) -> Self {
        Paced {
            inner: Box::pin(inner),
        }
    }
}

impl<F: Future> Future for Paced<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        let run = RUN_SINCE_YIELD.with(|r| {
            let run = r.get() + started.elapsed();
            r.set(if run >= PACE { Duration::ZERO } else { run });
            run
        });
        if run >= PACE {
            // Marks the running queue to yield once this task returns; its one Pending (it wakes
            // this task) is dropped here: a spurious poll at worst.
            let executor = glommio::executor();
            let mut yielding = std::pin::pin!(executor.yield_task_queue_now());
            let _ = yielding.as_mut().poll(cx);
        }
        polled
    }
}
