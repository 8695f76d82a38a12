//! A broker's registration request (what the controller turns into `BrokerRegistered`):
//! its own module, so that both the transport (`network`) and the controller's logic
//! (`partition_change`) use it without depending on each other.

use serde::{Deserialize, Serialize};

/// A broker's registration: who it is and where clients and controllers reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub broker_id: i32,
    pub incarnation_id: [u8; 16],
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// This node's controller listener, so the leader can add it as a learner.
    pub controller_addr: Option<String>,
    /// Shard (core) count; 0 = unknown. Defaults keep frames of older nodes readable.
    #[serde(default)]
    pub shard_count: i32,
    /// The inter-broker listener; `None` = the client listener.
    #[serde(default)]
    pub inter_broker_host: Option<String>,
    #[serde(default)]
    pub inter_broker_port: Option<i32>,
    /// One inter-broker port per shard when the broker steers by port; empty = none.
    #[serde(default)]
    pub inter_broker_shard_ports: Vec<i32>,
    /// The broker epoch the previous incarnation shut down cleanly with (KIP-841/903), -1 if it
    /// did not or is unknown: then it leaves every ISR it was in (KIP-966).
    #[serde(default = "no_broker_epoch")]
    pub previous_broker_epoch: i64,
    /// Every listener as the broker advertises it; empty = only `host`/`port`.
    #[serde(default)]
    pub listeners: Vec<ListenerEndpoint>,
}

/// One advertised listener of a broker (Kafka's endpoint): its name, host and port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerEndpoint {
    pub name: String,
    pub host: String,
    pub port: i32,
}

fn no_broker_epoch() -> i64 {
    -1
}
