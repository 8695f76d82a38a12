//! The sans-I/O core of the client: bytes in, bytes out, no sockets, no clocks.
//!
//! - [`frame`]: a request frame from a header and a body; a response frame read back as
//!   hostile bytes.
//! - [`versions`]: what the broker serves (from ApiVersions), what a client speaks, and the
//!   version chosen between them.
//! - [`sasl`]: a SASL login (PLAIN, SCRAM-SHA-256/512) as steps: the request to send next,
//!   the broker's answer checked, until logged in.

pub mod frame;
pub mod sasl;
pub mod versions;

pub use frame::{decode_response, encode_request, frame_size, response_correlation_id};
pub use sasl::{SaslExchange, SaslStep, SASL_AUTHENTICATE_VERSION, SASL_HANDSHAKE_VERSION};
pub use versions::{ClientVersions, Versions};
