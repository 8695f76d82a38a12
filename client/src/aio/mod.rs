//! The glommio transport: connections owned by the executor (shard) that opened them, never
//! sent across threads. Framing and the checks on answers are [`crate::core`]'s.
//!
//! - [`pipelined`]: one connection with many requests in flight, answered in order
//!   (keel-bench's producers and consumers).
//! - [`pool`]: request/response over a few reusable connections per target broker, with
//!   connect and request timeouts (inter-broker calls: WriteTxnMarkers, replica fetchers).

pub mod pipelined;
pub mod pool;

pub use pipelined::{Identity, InFlight, PipelinedConn};
pub use pool::{Pool, PoolConfig};
