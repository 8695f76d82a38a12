//! keel-bench's connections: keel-client's pipelined glommio connection, with the bench's
//! identity and the range of versions of each API it can fill in.

use std::rc::Rc;

use kafka_protocol::messages::ApiKey;
use keel_client::aio::{Identity, PipelinedConn};
use keel_client::{ClientError, ClientVersions, Security};

pub type Conn = PipelinedConn;

/// The versions of each API this client can speak (it names topics, never topic ids).
/// Fetch stops at v11, the last non-flexible version: some brokers put tagged fields into
/// v12 responses that only later versions define, which `kafka-protocol`'s strict decoder
/// refuses (real clients skip them); v11 carries everything a consumer needs.
pub const VERSIONS: ClientVersions = ClientVersions(&[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 11),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 5),
    // Key type 1 (transaction) needs v1; v4 asks for many keys at once.
    (ApiKey::FindCoordinator, 1, 3),
    (ApiKey::InitProducerId, 0, 4),
    // v4 is the broker-to-broker form (many transactions per request).
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
]);

pub const IDENTITY: Identity = Identity {
    client_id: "keel-bench",
    software_name: "keel-bench",
    software_version: env!("CARGO_PKG_VERSION"),
    versions: VERSIONS,
};

/// Connects to `addr`, secures the connection as `security` says (TLS, SASL login) and
/// negotiates versions.
pub async fn connect(addr: &str, security: &Security) -> Result<Rc<Conn>, ClientError> {
    PipelinedConn::connect(addr, IDENTITY, security).await
}
