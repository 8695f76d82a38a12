//! Cross-shard calls over glommio's channel mesh.
//!
//! A call is a `Send` closure that runs on the target shard against that shard's state. Its
//! answer comes back over the mesh too, as a [`Message::Reply`] that completes a oneshot on
//! the caller's own thread. Nothing wakes a task from another thread: glommio's foreign-waker
//! path double-freed under load (a process abort seen in benchmarks), and STYLE keeps
//! cross-core traffic on the mesh anyway.
//!
//! The mesh channels are bounded: a full channel makes the sender wait (backpressure), never
//! drops. Calls a shard accepted run as tasks, at most `max_inflight_jobs` at a time; past that
//! the shard stops draining its channels, so the senders wait in turn. Replies run inline on
//! the receiving shard and need no slot, so answers always get through.
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
/// A unit of work sent to a shard: runs there as a task against its state `S`, with that
/// shard's mesh to answer through.
pub type Job<S> = Box<dyn FnOnce(Rc<S>, Rc<Mesh<S>>) -> JobFuture + Send>;
/// A short completion run inline on the receiving shard (an answer, a wake-up).
pub type Reply<S> = Box<dyn FnOnce(Rc<S>) + Send>;

/// What travels between shards.
pub enum Message<S: 'static> {
    /// A job to run; `counted` is false for an observer's call, which neither side counts.
    Call {
        job: Job<S>,
        counted: bool,
    },
    Reply(Reply<S>),
}

/// Plain per-shard counters of mesh traffic (summed by whoever reads metrics).
#[derive(Default, Debug, Clone, Copy)]
pub struct MeshCounters {
    /// Calls this shard sent to another shard (an observer's calls are not counted).
    pub hops_out: u64,
    /// Counted calls this shard ran for another shard.
    pub jobs_in: u64,
}

/// This shard's end of the mesh.
pub struct Mesh<S: 'static> {
    shard_id: usize,
    shard_count: usize,
    senders: Senders<Message<S>>,
    hops_out: Cell<u64>,
    jobs_in: Cell<u64>,
}

impl<S: 'static> Mesh<S> {
    pub fn new(senders: Senders<Message<S>>) -> Self {
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

    fn check_target(&self, target: usize) -> Result<(), ShardError> {
        if target >= self.shard_count {
            return Err(ShardError::NoSuchShard {
                target,
                count: self.shard_count,
            });
        }
        assert_ne!(target, self.shard_id, "a shard does not message itself");
        Ok(())
    }

    /// Runs `f` on shard `target` with that shard's state and returns its answer. Must not be
    /// called with `target == shard_id()`: local work runs inline, the caller decides.
    pub async fn call<R, F, Fut>(&self, target: usize, f: F) -> Result<R, ShardError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        self.check_target(target)?;
        self.hops_out.set(self.hops_out.get() + 1);
        self.call_inner(target, f, true).await
    }

    /// [`Mesh::call`] for an observer (a metrics scrape, a profile): the call is counted in
    /// neither `hops_out` nor the target's `jobs_in`, so reading the counters does not change
    /// what they measure.
    pub async fn call_uncounted<R, F, Fut>(&self, target: usize, f: F) -> Result<R, ShardError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        self.check_target(target)?;
        self.call_inner(target, f, false).await
    }

    async fn call_inner<R, F, Fut>(
        &self,
        target: usize,
        f: F,
        counted: bool,
    ) -> Result<R, ShardError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        let caller = self.shard_id;
        // Completed on this thread only, by the Reply the target sends back.
        let (tx, rx) = futures_channel::oneshot::channel();
        let job: Job<S> = Box::new(move |state: Rc<S>, mesh: Rc<Mesh<S>>| {
            Box::pin(async move {
                let answer = f(state).await;
                let reply: Reply<S> = Box::new(move |_| {
                    let _ = tx.send(answer);
                });
                if mesh
                    .senders
                    .send_to(caller, Message::Reply(reply))
                    .await
                    .is_err()
                {
                    tracing::debug!(caller, "caller shard gone; answer dropped");
                }
            })
        });
        if self
            .senders
            .send_to(target, Message::Call { job, counted })
            .await
            .is_err()
        {
            return Err(ShardError::PeerClosed(target));
        }
        rx.await.map_err(|_| ShardError::Canceled(target))
    }

    /// Runs `f` inline on shard `target` (no answer): a notification.
    pub async fn notify(
        &self,
        target: usize,
        f: impl FnOnce(Rc<S>) + Send + 'static,
    ) -> Result<(), ShardError> {
        self.check_target(target)?;
        self.senders
            .send_to(target, Message::Reply(Box::new(f)))
            .await
            .map_err(|_| ShardError::PeerClosed(target))
    }

    /// Starts one task per peer that drains its channel: calls run as tasks against `state`
    /// (at most `max_inflight_jobs` at once), replies run inline.
    pub fn serve(
        self: &Rc<Self>,
        mut receivers: Receivers<Message<S>>,
        state: Rc<S>,
        max_inflight_jobs: u64,
    ) {
        let limit = Rc::new(Semaphore::new(max_inflight_jobs.max(1)));
        for (peer, receiver) in receivers.streams() {
            let state = state.clone();
            let limit = limit.clone();
            let mesh = self.clone();
            glommio::spawn_local(async move {
                while let Some(msg) = receiver.recv().await {
                    match msg {
                        Message::Reply(f) => f(state.clone()),
                        Message::Call { job, counted } => {
                            let Ok(permit) = limit.acquire_static_permit(1).await else {
                                break;
                            };
                            if counted {
                                mesh.jobs_in.set(mesh.jobs_in.get() + 1);
                            }
                            let fut = job(state.clone(), mesh.clone());
                            glommio::spawn_local(async move {
                                fut.await;
                                drop(permit);
                            })
                            .detach();
                        }
                    }
                }
                tracing::debug!(peer, "mesh channel closed");
            })
            .detach();
        }
    }
}
