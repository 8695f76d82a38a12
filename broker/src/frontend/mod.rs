//! The Kafka front end: a client connection ([`conn`]), its SASL authentication ([`sasl`]),
//! request framing ([`framing`]), the socket's reads and writes ([`io`]) and dispatch to
//! the handlers ([`dispatch`]).

pub mod conn;
pub mod dispatch;
pub mod framing;
pub mod io;
pub mod sasl;
