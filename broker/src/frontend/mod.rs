//! The Kafka front end: a client connection ([`conn`]), request framing ([`framing`]) and
//! dispatch to the handlers ([`dispatch`]).

pub mod conn;
pub mod dispatch;
pub mod framing;
