//! `keel-client`: the one Kafka client of Keel's tools and inter-broker calls.
//!
//! - [`core`]: sans-I/O. Encoding a request frame (size, header at the API's header version,
//!   body), reading a response frame as hostile bytes (bounded size, matching correlation id,
//!   decoding that cannot panic), and choosing each API's version from the broker's
//!   ApiVersions answer and the client's own range.
//! - [`security`]: how a connection secures itself, the same for both transports: TLS
//!   (rustls, its configuration read from PEM files), a SASL login (PLAIN, SCRAM-SHA-256/512,
//!   run as `core::sasl`'s steps), both or neither.
//! - [`blocking`]: one request at a time over `std::net` with timeouts (the `keel` CLI, the
//!   broker's integration tests).
//! - [`aio`] (feature `glommio`): on the glommio executor that opens it, a pipelined
//!   connection (keel-bench, replica fetchers) and a pool of request/response connections per
//!   target broker with connect and request timeouts (the broker's WriteTxnMarkers calls).
//! - [`error`]: [`ClientError`], why a request got no answer.
//! - [`testing`]: a one-shot TCP peer for tests of code that talks to a broker.
//!
//! Record batches are bytes here; their codec is `keel_vocab::records`.

#[cfg(feature = "glommio")]
pub mod aio;
pub mod blocking;
pub mod core;
pub mod error;
pub mod security;
pub mod testing;

pub use crate::core::{ClientVersions, Versions};
pub use error::ClientError;
pub use security::{SaslLogin, Security};
