//! The Kafka front end: a client connection ([`conn`]), its TLS handshake ([`handshake`]),
//! its SASL authentication ([`sasl`]),
//! request framing ([`framing`]), the socket's reads and writes ([`io`]), connection limits ([`limits`]) and dispatch to
//! the handlers ([`dispatch`]).

pub mod conn;
pub mod dispatch;
pub mod framing;
pub mod handshake;
pub mod io;
pub mod limits;
pub mod sasl;
