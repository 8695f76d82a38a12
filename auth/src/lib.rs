//! `keel-auth`: the SASL mechanisms Keel speaks, as pure state machines with no I/O.
//!
//! - [`scram`]: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them
//!   (KIP-84): credentials stored as salt, StoredKey, ServerKey and an iteration count between
//!   4096 and 16384 (Kafka's `UserScramCredentialRecord`), never the password or the salted
//!   password; the server side for the broker and the client side for Keel's own clients.
//! - [`plain`]: PLAIN's single message (RFC 4616).
//! - [`oauthbearer`]: OAUTHBEARER (RFC 7628) with Kafka's unsecured JWT validator: the
//!   client's initial response, the token's checks against a clock value passed in, the
//!   error challenge.
//! - [`jaas`]: Kafka's `sasl.jaas.config` login module entries and their options.
//! - [`acl`]: Kafka's ACL model (resources, patterns, operations, ALLOW and DENY), its filters,
//!   and `StandardAuthorizer`'s rule over an index of the ACLs.
//!
//! The broker's SASL requests (SaslHandshake, SaslAuthenticate) will drive these (issue 19);
//! the digests, HMAC, PBKDF2 and random nonces come from `ring`, the crypto provider rustls
//! uses too, and constant-time comparison from `subtle`.

pub mod acl;
pub mod jaas;
pub mod oauthbearer;
pub mod plain;
pub mod scram;
