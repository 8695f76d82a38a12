//! keel-bench: a Kafka-protocol load generator and latency recorder for any
//! Kafka-compatible broker, with side-by-side comparison and machine probes.

pub mod checker;
pub mod client;
pub mod cpu;
pub mod floor;
pub mod hist;
pub mod keys;
pub mod message_set;
pub mod payload;
pub mod probe;
pub mod report;
pub mod result;
pub mod run;
pub mod schedule;
pub mod scrape;
pub mod security;
pub mod setups;
pub mod verify;
pub mod windows;
pub mod workload;
