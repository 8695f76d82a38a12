//! The Kafka front end: a client connection ([`conn`]), its SASL authentication ([`sasl`]),
//! request framing ([`framing`]) and dispatch to the handlers ([`dispatch`]).

pub mod conn;
pub mod dispatch;
pub mod framing;
pub mod sasl;
