//! What ties shards together: routing a request to the shard that owns its partition
//! ([`route`]), parking fetches until data arrives ([`parking`]), and each shard's timers
//! ([`timers`]).

pub mod parking;
pub mod route;
pub mod timers;
