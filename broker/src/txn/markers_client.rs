//! The inter-broker WriteTxnMarkers client: how a transaction coordinator has another broker
//! append a transaction's COMMIT or ABORT markers to the partitions that broker leads (Kafka's
//! `TransactionMarkerChannelManager`, without its queues: the caller retries).
//!
//! One request (WriteTxnMarkers v1, header client id `keel-broker-<node id>`) carries one
//! transaction's marker for every partition of the transaction that the target broker leads;
//! the answer is one error code per partition, in the caller's order. A partition the answer
//! leaves out gets UNKNOWN_SERVER_ERROR, so the caller retries it.
//!
//! Runs on the shard of the coordinator that asks, which owns its [`MarkerClients`]. This file
//! builds the request and maps the answer; connections, framing, the checks on hostile answers
//! and the timeouts are keel-client's [`Pool`] (a few idle connections per target broker,
//! answers bounded by [`RESPONSE_BYTES_MAX`], connecting by [`CONNECT_TIMEOUT_MS`], the whole
//! exchange by [`REQUEST_TIMEOUT_MS`]; a future dropped midway closes its connection).

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::ResponseError;
use keel_client::aio::{Pool, PoolConfig};
use keel_client::{ClientError, Security};

use crate::errors::code;
use crate::metadata::BrokerMeta;

/// The WriteTxnMarkers version sent (the only one Keel serves).
const API_VERSION: i16 = 1;
/// How long connecting to a broker may take.
pub const CONNECT_TIMEOUT_MS: u64 = 3_000;
/// How long one request may take, from its first byte sent to its answer's last byte read
/// (the markers are appended and committed before the answer).
pub const REQUEST_TIMEOUT_MS: u64 = 15_000;
/// The largest answer frame read (a WriteTxnMarkers answer is a few bytes per partition).
pub const RESPONSE_BYTES_MAX: usize = 1 << 20;
/// Idle connections kept per target broker.
const IDLE_CONNECTIONS_PER_BROKER_MAX: usize = 2;

const POOL: PoolConfig = PoolConfig {
    connect_timeout_ms: CONNECT_TIMEOUT_MS,
    request_timeout_ms: REQUEST_TIMEOUT_MS,
    response_bytes_max: RESPONSE_BYTES_MAX,
    idle_per_target_max: IDLE_CONNECTIONS_PER_BROKER_MAX,
};

/// One transaction's marker, as WriteTxnMarkers carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// Why a whole request failed (no per-partition answer).
#[derive(Debug, thiserror::Error)]
pub enum MarkerClientError {
    #[error("connecting to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("talking to {addr}: {reason}")]
    Io { addr: String, reason: String },
    #[error("{addr} did not answer within {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    #[error("bad answer from {addr}: {reason}")]
    BadResponse { addr: String, reason: String },
    #[error("encoding the request failed: {0}")]
    Encode(String),
}

impl MarkerClientError {
    /// The Kafka error code the coordinator logs and retries on.
    pub fn code(&self) -> i16 {
        code(match self {
            MarkerClientError::Connect { .. } => ResponseError::BrokerNotAvailable,
            MarkerClientError::Io { .. } => ResponseError::NetworkException,
            MarkerClientError::Timeout { .. } => ResponseError::RequestTimedOut,
            MarkerClientError::BadResponse { .. } | MarkerClientError::Encode(_) => {
                ResponseError::UnknownServerError
            }
        })
    }

    fn from_client(addr: SocketAddr, e: ClientError) -> MarkerClientError {
        let addr = addr.to_string();
        match e {
            ClientError::Connect { source, .. } => MarkerClientError::Connect {
                addr,
                reason: source.to_string(),
            },
            ClientError::Io { source, .. } => MarkerClientError::Io {
                addr,
                reason: source.to_string(),
            },
            ClientError::Timeout { timeout_ms, .. } => {
                MarkerClientError::Timeout { addr, timeout_ms }
            }
            ClientError::Encode { reason, .. } => MarkerClientError::Encode(reason),
            other => MarkerClientError::BadResponse {
                addr,
                reason: other.to_string(),
            },
        }
    }
}

/// One shard's connections to other brokers, for markers: a pool made at the first marker,
/// secured as the inter-broker listener says.
#[derive(Default)]
pub struct MarkerClients {
    pool: std::cell::OnceCell<Pool>,
}

impl MarkerClients {
    /// Sends `marker` for `partitions` (all led by `broker`, as this broker last saw) to its
    /// endpoint of `listener` (the inter-broker listener) and returns one error code per
    /// partition, in order. The connections secure themselves with `security` (the broker's
    /// `inter_broker_security`; the same on every call).
    pub async fn write_markers(
        &self,
        node_id: i32,
        (broker, listener, security): (&BrokerMeta, &str, &Security),
        marker: Marker,
        partitions: &[(String, i32)],
    ) -> Result<Vec<i16>, MarkerClientError> {
        let addr = resolve(broker, listener)?;
        let response: WriteTxnMarkersResponse = self
            .pool
            .get_or_init(|| Pool::new(POOL, security.clone()))
            .request(
                broker.id,
                addr,
                &client_id(node_id),
                ApiKey::WriteTxnMarkers,
                API_VERSION,
                &request(marker, partitions),
            )
            .await
            .map_err(|e| MarkerClientError::from_client(addr, e))?;
        Ok(error_codes(&response, marker.producer_id, partitions))
    }
}

fn client_id(node_id: i32) -> String {
    format!("keel-broker-{node_id}")
}

/// The broker's address on `listener`. A host that is not an IP address is resolved with the
/// system resolver, which blocks this shard for as long as it takes (brokers register
/// addresses).
fn resolve(broker: &BrokerMeta, listener: &str) -> Result<SocketAddr, MarkerClientError> {
    let Some((host, port)) = broker.endpoint(listener) else {
        return Err(MarkerClientError::Connect {
            addr: format!("broker {}", broker.id),
            reason: format!("it has no listener named {listener}"),
        });
    };
    let text = format!("{host}:{port}");
    let err = |reason: String| MarkerClientError::Connect {
        addr: text.clone(),
        reason,
    };
    let port = u16::try_from(port).map_err(|_| err("bad port".to_string()))?;
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?
        .next()
        .ok_or_else(|| err("the host has no address".to_string()))
}

/// The request: one marker, its partitions by topic in first-seen order (the answer is
/// matched by name and index, not position).
fn request(marker: Marker, partitions: &[(String, i32)]) -> WriteTxnMarkersRequest {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for (topic, partition) in partitions {
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partition_indexes.push(*partition),
            None => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(crate::frontend::framing::topic_name(topic))
                    .with_partition_indexes(vec![*partition]),
            ),
        }
    }
    WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(marker.producer_id))
        .with_producer_epoch(marker.producer_epoch)
        .with_transaction_result(marker.commit)
        .with_topics(topics)
        .with_coordinator_epoch(marker.coordinator_epoch)])
}

/// One error code per requested partition, in order, from the answer's entries for
/// `producer_id`; a partition the answer does not name gets UNKNOWN_SERVER_ERROR.
fn error_codes(
    response: &WriteTxnMarkersResponse,
    producer_id: i64,
    partitions: &[(String, i32)],
) -> Vec<i16> {
    let mut by_partition: HashMap<(&str, i32), i16> = HashMap::new();
    for m in response
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == producer_id)
    {
        for t in &m.topics {
            for p in &t.partitions {
                by_partition.insert((t.name.0.as_str(), p.partition_index), p.error_code);
            }
        }
    }
    partitions
        .iter()
        .map(|(topic, partition)| {
            by_partition
                .get(&(topic.as_str(), *partition))
                .copied()
                .unwrap_or_else(|| code(ResponseError::UnknownServerError))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    use std::time::Duration;

    const MARKER: Marker = Marker {
        producer_id: 7,
        producer_epoch: 3,
        commit: true,
        coordinator_epoch: 2,
    };

    fn parts() -> Vec<(String, i32)> {
        vec![
            ("a".to_string(), 0),
            ("b".to_string(), 4),
            ("a".to_string(), 2),
        ]
    }

    fn answer(producer_id: i64, entries: &[(&str, i32, i16)]) -> WriteTxnMarkersResponse {
        let mut m = WritableTxnMarkerResult::default().with_producer_id(ProducerId(producer_id));
        for (topic, partition, error) in entries {
            m.topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(crate::frontend::framing::topic_name(topic))
                    .with_partitions(vec![WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(*partition)
                        .with_error_code(*error)]),
            );
        }
        WriteTxnMarkersResponse::default().with_markers(vec![m])
    }

    fn response_frame(correlation_id: i32, r: &WriteTxnMarkersResponse) -> Vec<u8> {
        crate::frontend::framing::encode_response(ApiKey::WriteTxnMarkers, 1, correlation_id, r)
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    #[test]
    fn request_round_trips_through_the_server_decoder() {
        let frame = keel_client::core::encode_request(
            ApiKey::WriteTxnMarkers,
            API_VERSION,
            9,
            &client_id(4),
            &request(MARKER, &parts()),
        )
        .unwrap()
        .freeze();
        let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(size, frame.len() - 4);
        let mut body = frame.slice(4..);
        let hdr =
            crate::frontend::framing::decode_header(ApiKey::WriteTxnMarkers, 1, &mut body).unwrap();
        assert_eq!(hdr.correlation_id, 9);
        assert_eq!(hdr.client_id.as_deref(), Some("keel-broker-4"));
        let req: WriteTxnMarkersRequest =
            crate::frontend::framing::decode_body(ApiKey::WriteTxnMarkers, 1, &mut body).unwrap();
        let m = &req.markers[0];
        assert_eq!(
            (
                m.producer_id.0,
                m.producer_epoch,
                m.transaction_result,
                m.coordinator_epoch
            ),
            (7, 3, true, 2)
        );
        let topics: Vec<(&str, Vec<i32>)> = m
            .topics
            .iter()
            .map(|t| (t.name.0.as_str(), t.partition_indexes.clone()))
            .collect();
        assert_eq!(topics, vec![("a", vec![0, 2]), ("b", vec![4])]);
    }

    #[test]
    fn answers_map_back_by_name_and_index() {
        let r = answer(7, &[("a", 2, 52), ("b", 4, 0), ("a", 0, 6)]);
        assert_eq!(error_codes(&r, 7, &parts()), vec![6, 0, 52]);
        // Missing partitions, or another producer's entries, are not an answer.
        let r = answer(8, &[("a", 0, 0), ("b", 4, 0), ("a", 2, 0)]);
        assert_eq!(error_codes(&r, 7, &parts()), vec![-1, -1, -1]);
        assert_eq!(
            error_codes(&answer(7, &[("b", 4, 0)]), 7, &parts()),
            vec![-1, 0, -1]
        );
    }

    #[test]
    fn hostile_answers_are_errors_not_panics() {
        use bytes::Bytes;
        use keel_client::core::frame_size;
        let check_response_size =
            |size: i32| frame_size(size.to_be_bytes(), RESPONSE_BYTES_MAX).map_err(|_| ());
        let decode_response = |body: Bytes, correlation_id: i32| {
            keel_client::core::decode_response::<WriteTxnMarkersResponse>(
                ApiKey::WriteTxnMarkers,
                API_VERSION,
                correlation_id,
                body,
            )
        };
        for size in [i32::MIN, -1, 0, 3, RESPONSE_BYTES_MAX as i32 + 1, i32::MAX] {
            assert!(check_response_size(size).is_err(), "{size}");
        }
        assert_eq!(check_response_size(4), Ok(4));
        let good = response_frame(5, &answer(7, &[("a", 0, 0)]));
        assert!(decode_response(Bytes::from(good[4..].to_vec()), 5).is_ok());
        assert!(decode_response(Bytes::from(good[4..].to_vec()), 6).is_err());
        for cut in 0..good.len() - 4 {
            let _ = decode_response(Bytes::from(good[4..4 + cut].to_vec()), 5);
        }
        for fill in [0x00u8, 0x7f, 0xff] {
            for len in 0..64 {
                let _ = decode_response(Bytes::from(vec![fill; len]), 0);
            }
        }
    }

    fn run<T>(f: impl std::future::Future<Output = T> + 'static) -> T
    where
        T: 'static,
    {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor")
            .run(f)
    }

    /// A one-shot server: reads one request frame, answers with `reply(correlation_id)`.
    fn fake_broker(
        reply: impl FnOnce(i32) -> Vec<u8> + Send + 'static,
    ) -> (BrokerMeta, std::thread::JoinHandle<()>) {
        // Held open a moment so the client reads what it was sent.
        let (addr, server) = keel_client::testing::one_shot_peer(reply, Duration::from_millis(200));
        let port = addr.port();
        let broker = BrokerMeta {
            id: 2,
            host: "127.0.0.1".to_string(),
            port: i32::from(port),
            rack: None,
            listeners: Vec::new(),
        };
        (broker, server)
    }

    #[test]
    fn a_good_answer_and_hostile_ones_over_tcp() {
        let (broker, server) =
            fake_broker(|c| response_frame(c, &answer(7, &[("a", 0, 0), ("b", 4, 52)])));
        let r = run(async move {
            MarkerClients::default()
                .write_markers(
                    1,
                    (&broker, "PLAINTEXT", &Security::PLAINTEXT),
                    MARKER,
                    &parts(),
                )
                .await
        });
        server.join().unwrap();
        assert_eq!(r.unwrap(), vec![0, 52, -1]);

        // A frame size far past the bound is refused before any allocation.
        let (broker, server) = fake_broker(|_| i32::MAX.to_be_bytes().to_vec());
        let r = run(async move {
            MarkerClients::default()
                .write_markers(
                    1,
                    (&broker, "PLAINTEXT", &Security::PLAINTEXT),
                    MARKER,
                    &parts(),
                )
                .await
        });
        server.join().unwrap();
        assert!(
            matches!(r, Err(MarkerClientError::BadResponse { .. })),
            "{r:?}"
        );

        // Garbage of the announced size.
        let (broker, server) = fake_broker(|_| {
            let mut f = 40i32.to_be_bytes().to_vec();
            f.extend_from_slice(&[0xff; 40]);
            f
        });
        let r = run(async move {
            MarkerClients::default()
                .write_markers(
                    1,
                    (&broker, "PLAINTEXT", &Security::PLAINTEXT),
                    MARKER,
                    &parts(),
                )
                .await
        });
        server.join().unwrap();
        assert!(
            matches!(r, Err(MarkerClientError::BadResponse { .. })),
            "{r:?}"
        );

        // The peer closes mid-frame.
        let (broker, server) = fake_broker(|_| 100i32.to_be_bytes().to_vec());
        let r = run(async move {
            MarkerClients::default()
                .write_markers(
                    1,
                    (&broker, "PLAINTEXT", &Security::PLAINTEXT),
                    MARKER,
                    &parts(),
                )
                .await
        });
        server.join().unwrap();
        assert!(matches!(r, Err(MarkerClientError::Io { .. })), "{r:?}");

        // Nobody listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let broker = BrokerMeta {
            id: 3,
            host: "127.0.0.1".to_string(),
            port: i32::from(port),
            rack: None,
            listeners: Vec::new(),
        };
        let r = run(async move {
            MarkerClients::default()
                .write_markers(
                    1,
                    (&broker, "PLAINTEXT", &Security::PLAINTEXT),
                    MARKER,
                    &parts(),
                )
                .await
        });
        assert!(matches!(r, Err(MarkerClientError::Connect { .. })), "{r:?}");
    }
}
