//! Cross-shard calls over glommio's channel mesh.
//!
//! A call is a `Send` closure that runs on the target shard against that shard's state and
//! returns its answer over a oneshot. The mesh channels are bounded: a full channel makes the
//! caller wait (backpressure), never drops. Jobs a shard accepted run as tasks, at most
//! `max_inflight_jobs` at a time; past that the shard stops draining its channels, so the
//! senders wait in turn.
//!
//! If the caller's future is dropped midway the job still runs on the target (it may already
//! have appended); only its answer is discarded.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use glommio::channels::channel_mesh::{Receivers, Senders};
use glommio::sync::Semaphore;

use crate::ShardError;

type JobFuture = Pin<Box<dyn Future<Output = ()>>>;
/// A unit of work sent to a shard: runs there against its state `S`.
pub type Job<S> = Box<dyn FnOnce(Rc<S>) -> JobFuture + Send>;

/// Plain per-shard counters of mesh traffic (summed by whoever reads metrics).
#[derive(Default, Debug, Clone, Copy)]
pub struct MeshCounters {
    /// Calls this shard sent to another shard.
    pub hops_out: u64,
    /// Calls this shard ran for another shard.
    pub jobs_in: u64,
}

/// This shard's end of the mesh.
pub struct Mesh<S: 'static> {
    shard_id: usize,
    shard_count: usize,
    senders: Senders<Job<S>>,
    hops_out: Cell<u64>,
    jobs_in: Cell<u64>,
}

impl<S: 'static> Mesh<S> {
    pub fn new(senders: Senders<Job<S>>) -> Self {
        Mesh {
            shard_id: senders.peer_id(),
            shard_count: senders.nr_consumers(),
            senders,
            hops_out: Cell::new(0),
            jobs_in: Cell::new(0),
        }
    }

    pub fn shard_id(&self) -> usize {
        self.shard_id
    }

    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    pub fn counters(&self) -> MeshCounters {
        MeshCounters {
            hops_out: self.hops_out.get(),
            jobs_in: self.jobs_in.get(),
        }
    }

    /// Runs `f` on shard `target` with that shard's state and returns its answer. Must not be
    /// called with `target == shard_id()`: local work runs inline, the caller decides.
    pub async fn call<R, F, Fut>(&self, target: usize, f: F) -> Result<R, ShardError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        if target >= self.shard_count {
            return Err(ShardError::NoSuchShard {
                target,
                count: self.shard_count,
            });
        }
        assert_ne!(target, self.shard_id, "a shard does not call itself");
        let (tx, rx) = futures_channel::oneshot::channel();
        let job: Job<S> = Box::new(move |state: Rc<S>| {
            Box::pin(async move {
                let answer = f(state).await;
                let _ = tx.send(answer);
            })
        });
        self.hops_out.set(self.hops_out.get() + 1);
        if self.senders.send_to(target, job).await.is_err() {
            return Err(ShardError::PeerClosed(target));
        }
        rx.await.map_err(|_| ShardError::Canceled(target))
    }

    /// Starts one task per peer that drains its channel and runs the jobs against `state`.
    pub fn serve(
        self: &Rc<Self>,
        mut receivers: Receivers<Job<S>>,
        state: Rc<S>,
        max_inflight_jobs: u64,
    ) {
        let limit = Rc::new(Semaphore::new(max_inflight_jobs.max(1)));
        for (peer, receiver) in receivers.streams() {
            let state = state.clone();
            let limit = limit.clone();
            let mesh = self.clone();
            glommio::spawn_local(async move {
                while let Some(job) = receiver.recv().await {
                    let Ok(permit) = limit.acquire_static_permit(1).await else {
                        break;
                    };
                    mesh.jobs_in.set(mesh.jobs_in.get() + 1);
                    let fut = job(state.clone());
                    glommio::spawn_local(async move {
                        fut.await;
                        drop(permit);
                    })
                    .detach();
                }
                tracing::debug!(peer, "mesh channel closed");
            })
            .detach();
        }
    }
}
