//! The Kafka front end: a client connection ([`conn`]), its TLS handshake ([`handshake`]),
//! its SASL authentication ([`sasl`]),
//! request framing ([`framing`]), the socket's reads and writes ([`io`]), connection limits ([`limits`]), dispatch to
//! the handlers ([`dispatch`]) and the client quotas' charge on each request ([`throttle`]).

pub mod auth_queue;
pub mod conn;
pub mod dispatch;
pub mod framing;
pub mod handshake;
pub mod io;
pub mod limits;
pub mod sasl;
pub mod throttle;
