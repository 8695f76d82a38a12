//! The glommio transport: connections owned by the executor (shard) that opened them, never
//! sent across threads. Framing and the checks on answers are [`crate::core`]'s; each
//! connection secures itself (TLS, SASL login) as its [`crate::Security`] says before its
//! first request.
//!
//! - [`pipelined`]: one connection with many requests in flight, answered in order
//!   (keel-bench's producers and consumers, the broker's replica fetchers).
//! - [`pool`]: request/response over a few reusable connections per target broker, with
//!   connect and request timeouts (inter-broker calls: WriteTxnMarkers).
//! - [`stream`]: the plain or TLS byte stream, and making a connected socket ready (TLS
//!   handshake, SASL login).

pub mod pipelined;
pub mod pool;
pub mod stream;

pub use pipelined::{Identity, InFlight, PipelinedConn};
pub use pool::{Pool, PoolConfig};
