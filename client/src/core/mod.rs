//! The sans-I/O core of the client: bytes in, bytes out, no sockets, no clocks.
//!
//! - [`frame`]: a request frame from a header and a body; a response frame read back as
//!   hostile bytes.
//! - [`versions`]: what the broker serves (from ApiVersions), what a client speaks, and the
//!   version chosen between them.

pub mod frame;
pub mod versions;

pub use frame::{decode_response, encode_request, frame_size, response_correlation_id};
pub use versions::{ClientVersions, Versions};
