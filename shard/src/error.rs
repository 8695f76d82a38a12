//! The shard runtime's one error type.

/// Errors of the thread-per-core runtime.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The target shard's mesh channel is closed: it is shutting down.
    #[error("shard {0} is not accepting work (shutting down)")]
    PeerClosed(usize),
    /// The job was dropped on the target shard before it answered.
    #[error("shard {0} dropped the call before answering")]
    Canceled(usize),
    /// A shard index outside `0..shard_count`.
    #[error("no shard {target} (shard count {count})")]
    NoSuchShard { target: usize, count: usize },
    /// Executor or mesh setup failed.
    #[error("runtime setup failed: {0}")]
    Setup(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
