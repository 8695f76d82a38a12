//! `keel-vocab`: the words every Keel crate shares, each defined once, at the bottom of the
//! crate graph.
//!
//! - [`ids`]: [`TopicPartition`], [`TopicIdPartition`], [`TopicId`], [`Offset`],
//!   [`LeaderEpoch`], [`ProducerId`], [`ProducerEpoch`].
//! - [`error`]: [`ErrorCode`], Kafka's error codes with their names and retriability, from
//!   the one table kafka-protocol generates from Kafka's own list.
//! - [`wire`]: the one reader ([`wire::Reader`]) and writers of Kafka's internal encodings
//!   (big-endian integers, varints, strings, compact strings and arrays, tagged fields), as
//!   the coordinators' records and storage's snapshots use them. Every read of untrusted
//!   bytes is bounded and answers `None` past the end, never a panic.
//! - [`records`]: the one codec of magic-2 record batches (header, CRC, records, compression,
//!   building and a consumer's walk), shared by storage, the clients and the tests.
//! - [`clock`]: the wall clock, passed in as a [`Clock`] rather than read ad hoc.

pub mod clock;
pub mod error;
pub mod ids;
pub mod records;
pub mod wire;

pub use clock::{Clock, SystemClock};
pub use error::{ErrorCode, RecordsError};
pub use ids::{
    BytePosition, LeaderEpoch, Offset, ProducerEpoch, ProducerId, TopicId, TopicIdPartition,
    TopicPartition,
};
