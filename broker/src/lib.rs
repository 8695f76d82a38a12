//! Keel's broker: a Kafka-compatible, thread-per-core streaming log broker.
//!
//! The `keel` binary ([`startup::main`]) is a thin wrapper around this library. Modules:
//! - [`startup`]: the command line, process limits, one executor per shard, accept and drain.
//! - [`frontend`]: a client connection, Kafka framing, and dispatch to the handlers.
//! - [`handlers`]: one file per Kafka API, each declaring the versions it supports.
//! - [`shard`]: one shard's state (its partitions, metadata image, waiting fetches).
//! - [`coordination`]: routing to the owner shard over the mesh, parking of waiting fetches,
//!   the shard's timers.
//! - [`controller`] and [`metadata`]: the metadata quorum's glue and the installed image.
//! - [`group`] and [`txn`]: the group and transaction coordinators.
//! - [`replication`]: partition replication (the leader's follower state and high
//!   watermark, the followers' fetchers).
//! - [`ops`]: admin HTTP, metrics, profiles, stall reports, I/O sizing, host checks.
//! - [`config`]: every setting, its Kafka name, default and documentation.

pub mod acl;
pub mod config;
pub mod controller;
pub mod coordination;
pub mod errors;
pub mod frontend;
pub mod group;
pub mod handlers;
pub mod metadata;
pub mod ops;
pub mod quota;
pub mod replication;
pub mod security;
pub mod shard;
pub mod startup;
pub mod tls;
pub mod txn;
