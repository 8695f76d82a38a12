//! What ties shards together: routing a request to the shard that owns its partition
//! ([`route`]) or to the shard of a group's or transaction's coordinator ([`coordinators`]),
//! parking fetches until data arrives ([`parking`]), and each shard's timers ([`timers`]).

pub mod coordinators;
pub mod parking;
pub mod route;
pub mod timers;
