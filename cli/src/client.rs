//! The CLI's Kafka client, over keel-client's blocking transport (framing, hostile-answer
//! checks and version negotiation are keel-client's). Each connection starts with ApiVersions
//! (v0, which every broker answers) and from then on picks, per API, the highest version both
//! sides speak: the broker's advertised range intersected with the range this client knows
//! how to fill in. Requests go one at a time (no pipelining); every read has a timeout, so a
//! silent broker becomes an error, never a hang. Partition requests are routed to the
//! partition leader from Metadata, group requests to the group's coordinator from
//! FindCoordinator, and the controller's requests (AlterPartitionReassignments,
//! ListPartitionReassignments, UnregisterBroker) to the controller Metadata names (a KRaft
//! broker, Keel included, names itself and forwards).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};
use keel_client::blocking::{self, ConnectOptions, Security};
use keel_client::{ClientError, Versions};

use crate::error::{check, CliError, Result};
pub use crate::plan::ConfigOps;

const CLIENT_ID: &str = "keel-cli";
/// Largest response frame accepted (a fetch answers at most a few MiB).
const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the controller may take over a reassignment request (Kafka's admin default).
const REASSIGN_TIMEOUT_MS: i32 = 30_000;

/// One broker connection with the API versions it advertised.
pub struct Conn {
    conn: blocking::Conn,
    versions: Versions,
}

impl Conn {
    pub fn connect(addr: &str, request_timeout: Duration, security: &Security) -> Result<Conn> {
        let options = ConnectOptions {
            client_id: CLIENT_ID.to_string(),
            connect_timeout: CONNECT_TIMEOUT,
            request_timeout,
            response_bytes_max: RESPONSE_BYTES_MAX,
            security: security.clone(),
        };
        let conn = blocking::Conn::connect(addr, options).map_err(|e| match e {
            ClientError::Connect { addr, source } => CliError::Connect { addr, source },
            ClientError::Io { addr, source } => CliError::Io { addr, source },
            other => CliError::Protocol(other.to_string()),
        })?;
        let mut conn = Conn {
            conn,
            versions: Versions::default(),
        };
        let resp: ApiVersionsResponse =
            conn.send(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())?;
        check(resp.error_code, || format!("ApiVersions from {addr}"), None)?;
        conn.versions = Versions::from_response(&resp).unwrap_or_default();
        Ok(conn)
    }

    fn addr(&self) -> &str {
        self.conn.addr()
    }

    /// Whether the broker serves some version of `api` in `client_min..=client_max`.
    pub fn supports(&self, api: ApiKey, client_min: i16, client_max: i16) -> bool {
        self.version(api, client_min, client_max).is_ok()
    }

    /// The highest version of `api` both sides speak, within `client_min..=client_max`.
    pub fn version(&self, api: ApiKey, client_min: i16, client_max: i16) -> Result<i16> {
        self.versions
            .choose(self.addr(), api, client_min, client_max)
            .map_err(|_| CliError::Unsupported {
                addr: self.addr().to_string(),
                api: format!("{api:?}"),
                broker: match self.versions.advertised(api) {
                    Some((min, max)) => format!("v{min}-v{max}"),
                    None => "not advertised".into(),
                },
                client_min,
                client_max,
            })
    }

    /// Sends a request built for the negotiated version and waits for its response.
    pub fn call<Req, Resp>(
        &mut self,
        api: ApiKey,
        client_range: (i16, i16),
        build: impl Fn(i16) -> Req,
    ) -> Result<(i16, Resp)>
    where
        Req: Encodable + HeaderVersion + Message,
        Resp: Decodable,
    {
        let (cmin, cmax) = client_range;
        let version = self.version(
            api,
            cmin.max(Req::VERSIONS.min),
            cmax.min(Req::VERSIONS.max),
        )?;
        let req = build(version);
        match self.send(api, version, &req) {
            Ok(resp) => Ok((version, resp)),
            // Some brokers (tansu 0.6) answer flexible versions with tagged fields or null
            // arrays the version does not allow; the frame was read whole, so the connection
            // is still in step: ask once more at the highest non-flexible version both speak.
            Err(CliError::Decode(e)) if Req::header_version(version) >= 2 => {
                let lo = cmin.max(Req::VERSIONS.min);
                let older = (lo..version)
                    .rev()
                    .find(|&v| Req::header_version(v) < 2)
                    .and_then(|v| self.version(api, lo, v).ok());
                let Some(older) = older else {
                    return Err(CliError::Decode(e));
                };
                let resp = self.send(api, older, &build(older))?;
                Ok((older, resp))
            }
            Err(e) => Err(e),
        }
    }

    /// Sends a request that the broker does not answer (Produce with acks=0).
    pub fn send_oneway<Req: Encodable + HeaderVersion>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<()> {
        self.conn
            .send_oneway(api, version, req)
            .map_err(|e| self.error(e, api, version))
    }

    /// A transport failure, named in words a user can act on.
    fn error(&self, e: ClientError, api: ApiKey, version: i16) -> CliError {
        let addr = self.addr();
        match e {
            ClientError::Io { source, .. } => self.io(source),
            ClientError::FrameSize { size, .. } => CliError::Protocol(format!(
                "{addr}: bad response frame size {size} to {api:?} v{version}"
            )),
            ClientError::Header { reason, .. } => CliError::Protocol(format!(
                "{addr}: cannot decode response header of {api:?} v{version}: {reason}"
            )),
            ClientError::CorrelationId { expected, got } => CliError::Protocol(format!(
                "{addr}: response correlation id {got} for request {expected}"
            )),
            ClientError::Decode { reason, .. } => CliError::Decode(format!(
                "{addr}: cannot decode response of {api:?} v{version}: {reason}"
            )),
            ClientError::Encode { reason, .. } => {
                CliError::Protocol(format!("encoding {api:?} v{version}: {reason}"))
            }
            other => CliError::Protocol(other.to_string()),
        }
    }

    /// An I/O failure midway, named in words a user can act on.
    fn io(&self, source: std::io::Error) -> CliError {
        use std::io::ErrorKind;
        let source = match source.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => std::io::Error::new(
                ErrorKind::TimedOut,
                "no answer within the request timeout (--request-timeout-ms)",
            ),
            ErrorKind::UnexpectedEof => {
                std::io::Error::new(ErrorKind::UnexpectedEof, "the broker closed the connection")
            }
            _ => source,
        };
        CliError::Io {
            addr: self.addr().to_string(),
            source,
        }
    }

    fn send<Req: Encodable + HeaderVersion, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp> {
        self.conn
            .request(api, version, req)
            .map_err(|e| self.error(e, api, version))
    }
}

// ---- metadata as plain values ---------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Eligible leader replicas by (topic, partition).
pub type ElrByPartition = BTreeMap<(String, i32), Vec<i32>>;

#[derive(Clone, Debug, PartialEq)]
pub struct PartitionInfo {
    pub partition: i32,
    pub error_code: i16,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline: Vec<i32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: String,
    pub error_code: i16,
    pub internal: bool,
    /// Sorted by partition id.
    pub partitions: Vec<PartitionInfo>,
}

impl TopicInfo {
    pub fn replication_factor(&self) -> usize {
        self.partitions
            .first()
            .map(|p| p.replicas.len())
            .unwrap_or(0)
    }
}

/// A partition's reassignment in progress (KIP-455), as ListPartitionReassignments lists it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ongoing {
    /// Target replicas, then the ones being removed (Metadata's list while it lasts).
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// Reassignments in progress by (topic, partition).
pub type OngoingByPartition = BTreeMap<(String, i32), Ongoing>;

/// One partition's answer to AlterPartitionReassignments.
#[derive(Clone, Debug, PartialEq)]
pub struct ReassignResult {
    pub topic: String,
    pub partition: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInfo {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: Vec<BrokerInfo>,
    /// Sorted by name.
    pub topics: Vec<TopicInfo>,
}

impl ClusterInfo {
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.iter().find(|t| t.name == name)
    }
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Uuid printed Kafka's way (URL-safe base64 without padding), as kafka-topics.sh shows it.
fn topic_id_text(id: &uuid::Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    if bytes.iter().all(|b| *b == 0) {
        return String::new();
    }
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

// ---- the client: bootstrap, routing ----------------------------------------------------------

/// Connections to a cluster: the bootstrap broker, and brokers by node id as Metadata or
/// FindCoordinator name them.
pub struct Client {
    bootstrap: Conn,
    request_timeout: Duration,
    nodes: HashMap<i32, Conn>,
    /// node id -> "host:port", from the last Metadata.
    addrs: BTreeMap<i32, String>,
    /// The controller the last Metadata named (-1: none known).
    controller_id: i32,
    /// TLS and SASL for every connection (`--command-config`).
    security: Security,
}

impl Client {
    pub fn connect(
        bootstrap: &str,
        request_timeout: Duration,
        security: Security,
    ) -> Result<Client> {
        Ok(Client {
            bootstrap: Conn::connect(bootstrap, request_timeout, &security)?,
            request_timeout,
            nodes: HashMap::new(),
            addrs: BTreeMap::new(),
            controller_id: -1,
            security,
        })
    }

    /// The bootstrap connection, for cluster-wide requests any broker answers.
    pub fn any(&mut self) -> &mut Conn {
        &mut self.bootstrap
    }

    /// A connection to broker `node` (known from Metadata or FindCoordinator).
    pub fn node(&mut self, node: i32) -> Result<&mut Conn> {
        if !self.nodes.contains_key(&node) {
            let addr = self.addrs.get(&node).cloned().ok_or_else(|| {
                CliError::Protocol(format!("broker {node} is not in the cluster metadata"))
            })?;
            let conn = Conn::connect(&addr, self.request_timeout, &self.security)?;
            self.nodes.insert(node, conn);
        }
        Ok(self.nodes.get_mut(&node).expect("inserted above"))
    }

    /// Metadata for `topics` (None: every topic), remembering broker addresses for routing.
    pub fn metadata(&mut self, topics: Option<&[String]>) -> Result<ClusterInfo> {
        let (_, resp): (i16, MetadataResponse) =
            self.bootstrap.call(ApiKey::Metadata, (1, 12), |v| {
                let mut r = MetadataRequest::default();
                r.topics = topics.map(|ts| {
                    ts.iter()
                        .map(|t| {
                            let mut mt = metadata_request::MetadataRequestTopic::default();
                            mt.name = Some(topic_name(t));
                            mt
                        })
                        .collect()
                });
                if v >= 4 {
                    r.allow_auto_topic_creation = false;
                }
                r
            })?;
        let info = cluster_info(resp);
        for b in &info.brokers {
            self.addrs.insert(b.id, b.addr());
        }
        self.controller_id = info.controller_id;
        Ok(info)
    }

    /// The controller's connection (named by the last Metadata; asked for when none was
    /// read yet), or the bootstrap broker when no controller is known or reachable by address.
    fn controller(&mut self) -> Result<&mut Conn> {
        if self.controller_id < 0 {
            self.metadata(Some(&[][..]))?;
        }
        let id = self.controller_id;
        if id >= 0 && self.addrs.contains_key(&id) {
            return self.node(id);
        }
        Ok(&mut self.bootstrap)
    }

    /// Every reassignment in progress (ListPartitionReassignments v0, from the controller);
    /// `None` when the broker does not serve the API.
    pub fn list_reassignments(&mut self) -> Result<Option<OngoingByPartition>> {
        let conn = self.controller()?;
        if !conn.supports(ApiKey::ListPartitionReassignments, 0, 0) {
            return Ok(None);
        }
        let (_, resp): (i16, ListPartitionReassignmentsResponse) =
            conn.call(ApiKey::ListPartitionReassignments, (0, 0), |_| {
                ListPartitionReassignmentsRequest::default()
                    .with_timeout_ms(REASSIGN_TIMEOUT_MS)
                    .with_topics(None)
            })?;
        check(
            resp.error_code,
            || "list partition reassignments".into(),
            resp.error_message.map(|m| m.to_string()),
        )?;
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        let mut out = BTreeMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                out.insert(
                    (t.name.0.to_string(), p.partition_index),
                    Ongoing {
                        replicas: ids(&p.replicas),
                        adding: ids(&p.adding_replicas),
                        removing: ids(&p.removing_replicas),
                    },
                );
            }
        }
        Ok(Some(out))
    }

    /// Starts, replaces or (None) cancels each partition's reassignment
    /// (AlterPartitionReassignments v0-1, at the controller; v1 allows a change of replication
    /// factor, as v0 always did). A result per partition, in request order.
    pub fn alter_reassignments(
        &mut self,
        moves: &[(String, i32, Option<Vec<i32>>)],
    ) -> Result<Vec<ReassignResult>> {
        use alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
        // Grouped by topic, each topic once, in order of first appearance.
        let mut topics: Vec<ReassignableTopic> = Vec::new();
        for (topic, partition, replicas) in moves {
            let part = ReassignablePartition::default()
                .with_partition_index(*partition)
                .with_replicas(
                    replicas
                        .as_ref()
                        .map(|r| r.iter().map(|b| BrokerId(*b)).collect()),
                );
            match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
                Some(t) => t.partitions.push(part),
                None => topics.push(
                    ReassignableTopic::default()
                        .with_name(topic_name(topic))
                        .with_partitions(vec![part]),
                ),
            }
        }
        let (_, resp): (i16, AlterPartitionReassignmentsResponse) =
            self.controller()?
                .call(ApiKey::AlterPartitionReassignments, (0, 1), |_| {
                    AlterPartitionReassignmentsRequest::default()
                        .with_timeout_ms(REASSIGN_TIMEOUT_MS)
                        .with_allow_replication_factor_change(true)
                        .with_topics(topics.clone())
                })?;
        check(
            resp.error_code,
            || "alter partition reassignments".into(),
            resp.error_message.map(|m| m.to_string()),
        )?;
        let mut answered: BTreeMap<(String, i32), (i16, Option<String>)> = BTreeMap::new();
        for t in resp.responses {
            for p in t.partitions {
                answered.insert(
                    (t.name.0.to_string(), p.partition_index),
                    (
                        p.error_code,
                        p.error_message
                            .map(|m| m.to_string())
                            .filter(|m| !m.is_empty()),
                    ),
                );
            }
        }
        moves
            .iter()
            .map(|(topic, partition, _)| {
                let (error_code, error_message) = answered
                    .remove(&(topic.clone(), *partition))
                    .ok_or_else(|| {
                        CliError::Protocol(format!(
                            "AlterPartitionReassignments answered nothing for {topic}-{partition}"
                        ))
                    })?;
                Ok(ReassignResult {
                    topic: topic.clone(),
                    partition: *partition,
                    error_code,
                    error_message,
                })
            })
            .collect()
    }

    /// IncrementalAlterConfigs v0-1: per resource (Kafka's resource type, name, and
    /// (config, op, value) with op 0 SET, 1 DELETE), its (error code, message), in order.
    pub fn incremental_alter_configs(
        &mut self,
        resources: &[ConfigOps],
    ) -> Result<Vec<(i16, Option<String>)>> {
        use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        let req: Vec<AlterConfigsResource> = resources
            .iter()
            .map(|(ty, name, ops)| {
                AlterConfigsResource::default()
                    .with_resource_type(*ty)
                    .with_resource_name(str_bytes(name))
                    .with_configs(
                        ops.iter()
                            .map(|(k, op, v)| {
                                AlterableConfig::default()
                                    .with_name(str_bytes(k))
                                    .with_config_operation(*op)
                                    .with_value(v.as_deref().map(str_bytes))
                            })
                            .collect(),
                    )
            })
            .collect();
        let (_, resp): (i16, IncrementalAlterConfigsResponse) =
            self.any()
                .call(ApiKey::IncrementalAlterConfigs, (0, 1), |_| {
                    IncrementalAlterConfigsRequest::default().with_resources(req.clone())
                })?;
        Ok(resp
            .responses
            .into_iter()
            .map(|r| {
                (
                    r.error_code,
                    r.error_message
                        .map(|m| m.to_string())
                        .filter(|m| !m.is_empty()),
                )
            })
            .collect())
    }

    /// Removes broker `id`'s registration (UnregisterBroker v0, at the controller): its error
    /// code (0: done) and message.
    pub fn unregister_broker(&mut self, id: i32) -> Result<(i16, Option<String>)> {
        let (_, resp): (i16, UnregisterBrokerResponse) =
            self.controller()?
                .call(ApiKey::UnregisterBroker, (0, 0), |_| {
                    UnregisterBrokerRequest::default().with_broker_id(BrokerId(id))
                })?;
        Ok((
            resp.error_code,
            resp.error_message
                .map(|m| m.to_string())
                .filter(|m| !m.is_empty()),
        ))
    }

    /// Each partition's eligible leader replicas (KIP-966) by topic and partition, from
    /// DescribeTopicPartitions; `None` when the broker does not serve it (older brokers, or
    /// brokers without ELR).
    pub fn elr(&mut self, topics: &[String]) -> Result<Option<ElrByPartition>> {
        if !self
            .bootstrap
            .supports(ApiKey::DescribeTopicPartitions, 0, 0)
        {
            return Ok(None);
        }
        let mut out = BTreeMap::new();
        let mut cursor: Option<describe_topic_partitions_request::Cursor> = None;
        loop {
            let (_, resp): (i16, DescribeTopicPartitionsResponse) =
                self.bootstrap
                    .call(ApiKey::DescribeTopicPartitions, (0, 0), |_| {
                        DescribeTopicPartitionsRequest::default()
                            .with_topics(
                                topics
                                    .iter()
                                    .map(|t| {
                                        describe_topic_partitions_request::TopicRequest::default()
                                            .with_name(topic_name(t))
                                    })
                                    .collect(),
                            )
                            .with_cursor(cursor.clone())
                    })?;
            for t in &resp.topics {
                let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                for p in &t.partitions {
                    let elr = p
                        .eligible_leader_replicas
                        .as_ref()
                        .map(|v| v.iter().map(|b| b.0).collect())
                        .unwrap_or_default();
                    out.insert((name.clone(), p.partition_index), elr);
                }
            }
            match resp.next_cursor {
                Some(c) => {
                    cursor = Some(
                        describe_topic_partitions_request::Cursor::default()
                            .with_topic_name(c.topic_name)
                            .with_partition_index(c.partition_index),
                    )
                }
                None => return Ok(Some(out)),
            }
        }
    }

    /// Addresses of every broker known from the last Metadata, by node id.
    pub fn broker_ids(&self) -> Vec<i32> {
        self.addrs.keys().copied().collect()
    }

    /// The coordinator of consumer group `group`; its connection is then `node(id)`.
    pub fn group_coordinator(&mut self, group: &str) -> Result<i32> {
        let (version, resp): (i16, FindCoordinatorResponse) =
            self.bootstrap.call(ApiKey::FindCoordinator, (0, 4), |v| {
                let mut r = FindCoordinatorRequest::default();
                if v >= 4 {
                    r.coordinator_keys = vec![str_bytes(group)];
                } else {
                    r.key = str_bytes(group);
                }
                r
            })?;
        let context = || format!("find coordinator of group {group}");
        let (node, host, port) = if version >= 4 {
            let c = resp.coordinators.first().ok_or_else(|| {
                CliError::Protocol("FindCoordinator answered no coordinator".into())
            })?;
            check(
                c.error_code,
                context,
                c.error_message.as_ref().map(|m| m.to_string()),
            )?;
            (c.node_id.0, c.host.to_string(), c.port)
        } else {
            check(
                resp.error_code,
                context,
                resp.error_message.as_ref().map(|m| m.to_string()),
            )?;
            (resp.node_id.0, resp.host.to_string(), resp.port)
        };
        let addr = format!("{host}:{port}");
        if self.addrs.get(&node) != Some(&addr) {
            self.nodes.remove(&node);
            self.addrs.insert(node, addr);
        }
        Ok(node)
    }
}

fn cluster_info(resp: MetadataResponse) -> ClusterInfo {
    let mut brokers: Vec<BrokerInfo> = resp
        .brokers
        .into_iter()
        .map(|b| BrokerInfo {
            id: b.node_id.0,
            host: b.host.to_string(),
            port: b.port,
            rack: b.rack.map(|r| r.to_string()),
        })
        .collect();
    brokers.sort_by_key(|b| b.id);
    let mut topics: Vec<TopicInfo> = resp
        .topics
        .into_iter()
        .map(|t| {
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .into_iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    error_code: p.error_code,
                    leader: p.leader_id.0,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    offline: p.offline_replicas.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicInfo {
                name: t.name.map(|n| n.0.to_string()).unwrap_or_default(),
                topic_id: topic_id_text(&t.topic_id),
                error_code: t.error_code,
                internal: t.is_internal,
                partitions,
            }
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    ClusterInfo {
        cluster_id: resp.cluster_id.map(|c| c.to_string()),
        controller_id: resp.controller_id.0,
        brokers,
        topics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_as_kafka_base64() {
        let id = uuid::Uuid::from_bytes([
            0x6f, 0x0b, 0x1c, 0x5e, 0x2a, 0x4d, 0x4e, 0x8f, 0x9a, 0x3c, 0x11, 0x22, 0x33, 0x44,
            0x55, 0x66,
        ]);
        // java: Base64.getUrlEncoder().withoutPadding() of the same 16 bytes.
        assert_eq!(topic_id_text(&id), "bwscXipNTo-aPBEiM0RVZg");
        assert_eq!(topic_id_text(&uuid::Uuid::nil()), "");
    }
}
