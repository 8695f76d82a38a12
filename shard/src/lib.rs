//! keel-shard: the thread-per-core runtime.
//!
//! One glommio executor is pinned per core; each runs one shard that alone owns its state.
//! Shards talk only through a bounded channel mesh ([`Mesh`]): a job sent to another shard
//! runs there, against that shard's state, and its result comes back over a oneshot. This
//! crate knows nothing of Kafka: the broker supplies the shard state type.

mod error;
mod event;
mod listen;
mod mesh;
mod placement;
mod runtime;
mod shutdown;

pub use error::ShardError;
pub use event::Event;
pub use listen::listen_reuseport;
pub use mesh::{Job, Mesh, MeshCounters, Message, Reply};
pub use placement::{shard_for_partition, ShardId};
pub use runtime::{
    launch, memlock_limit, raise_memlock_limit, reactor_stalls, shard_of_thread_name,
    RuntimeConfig, ShardBoot,
};
pub use shutdown::{
    install_signal_handlers, request_stop, shutdown_requested, stop_requested,
    take_shutdown_doorbell,
};
