//! keel-bench's own Kafka client, on glommio: connections with pipelined requests and
//! version negotiation, record-batch encoding and decoding with every codec, a batching
//! producer and a fetching consumer. It uses only what the target's ApiVersions allows.

pub mod admin;
pub mod batch;
pub mod conn;
pub mod txn;
