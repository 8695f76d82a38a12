//! The controller transport: Raft RPCs between voters and learners, and brokers' requests to
//! the controller leader, over TCP on each node's controller listener.
//!
//! A frame is `[len u32 BE][JSON]`; requests and responses alternate on one connection. Frames
//! over `FRAME_BYTES_MAX` close the connection. A client keeps one connection per peer and
//! drops it on any error; the next call reconnects. Every call has a deadline. Runs on the
//! `keel-metadata` thread (tokio).
//!
//! With [`ControllerTls`] (the controller listener mapped to SSL) every connection is mutual
//! TLS: a node presents its own certificate when it connects, and the listener verifies the
//! peer's against its truststore and admits it only if its principal is a super user, before
//! it reads any frame.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::partition_change::{AlterPartitionRequest, AlterPartitionResult};
use crate::partition_change::{ElectLeadersRequest, TopicElectionResults};
use crate::records::TopicId;
pub use crate::registration::BrokerRegistration;
use crate::{Applied, LogIndex, NodeId, Proposal, TypeConfig};

/// Largest frame read from a peer.
pub const FRAME_BYTES_MAX: usize = 128 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A peer that has not finished its TLS handshake by then is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Admits a verified peer by its leaf certificate: its principal, or why it is refused.
pub type AdmitPeer = dyn Fn(&CertificateDer<'_>) -> Result<String, String> + Send + Sync;

/// Mutual TLS for the controller transport: the listener's server config (it must require
/// client certificates), the client config this node connects with (its own certificate),
/// and the check a peer's certificate must pass.
#[derive(Clone)]
pub struct ControllerTls {
    pub server: Arc<rustls::ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
    pub admit: Arc<AdmitPeer>,
}

impl std::fmt::Debug for ControllerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerTls").finish_non_exhaustive()
    }
}

/// A controller connection's byte stream, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Io for T {}

/// Accepts one controller connection: with `tls`, the handshake (bounded by
/// [`TLS_HANDSHAKE_TIMEOUT`]) and the peer's admission; returns the stream and the peer's
/// principal (`None` without TLS), or why the connection is dropped.
pub async fn accept(
    stream: TcpStream,
    tls: Option<&ControllerTls>,
) -> Result<(Box<dyn Io>, Option<String>), String> {
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok((Box::new(stream), None));
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
    let stream = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake failed: {e}"))?;
    let leaf = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or_else(|| "no client certificate".to_string())?;
    let principal = (tls.admit)(leaf)?;
    Ok((Box::new(stream), Some(principal)))
}

/// Requests to the controller leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ControllerRequest {
    /// Commit this record batch.
    Propose(Proposal),
    Register(BrokerRegistration),
    /// A broker's heartbeat. With `want_shutdown` (Kafka's `WantShutDown`, on SIGTERM) the
    /// controller moves the broker's leadership away and takes it out of the ISRs (a
    /// controlled shutdown), and answers `should_shut_down` once it leads nothing.
    Heartbeat {
        broker_id: i32,
        broker_epoch: i64,
        #[serde(default)]
        want_shutdown: bool,
        /// This broker's replicas whose logs went offline (Kafka's `OfflineLogDirs`, KIP-858,
        /// per partition): the controller moves their leadership away and takes them out of
        /// the ISR and ELR. Every heartbeat names them all, until the broker restarts.
        #[serde(default)]
        offline_replicas: Vec<(TopicId, i32)>,
    },
    /// ISR changes from partition leaders (Kafka's AlterPartition), answered per partition.
    AlterPartition(Vec<AlterPartitionRequest>),
    /// Kafka's ElectLeaders: preferred or unclean elections of the named partitions (or all).
    ElectLeaders(ElectLeadersRequest),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ControllerResponse {
    Applied(Applied),
    Registered {
        broker_epoch: i64,
    },
    /// The heartbeat was accepted; `fenced` says whether the broker is still fenced, and
    /// `should_shut_down` (to a heartbeat that wants to shut down) that its controlled
    /// shutdown is done: it leads nothing and is out of every ISR it could leave.
    HeartbeatOk {
        fenced: bool,
        #[serde(default)]
        should_shut_down: bool,
    },
    /// One result per AlterPartition request, in order.
    AlterPartition(Vec<AlterPartitionResult>),
    /// The answer to ElectLeaders, per request entry, once its elections are committed:
    /// `index` is the log index of the image that holds them (to wait for before answering).
    ElectLeaders {
        results: Vec<TopicElectionResults>,
        index: LogIndex,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize, thiserror::Error)]
pub enum ControllerError {
    #[error("not the controller; leader is {leader:?}")]
    NotLeader {
        leader: Option<NodeId>,
        leader_addr: Option<String>,
    },
    /// The broker must register again (unknown broker or an old broker epoch).
    #[error("broker is not registered with this epoch")]
    StaleBrokerEpoch,
    #[error("{0}")]
    Failed(String),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Controller(ControllerRequest),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Controller(Result<ControllerResponse, ControllerError>),
}

/// Reads one frame; `Ok(None)` on a clean end of stream.
pub async fn read_frame<T: serde::de::DeserializeOwned>(
    stream: &mut (impl AsyncRead + Unpin + ?Sized),
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut buf = vec![0u8; frame_len(len)?];
    stream.read_exact(&mut buf).await?;
    decode_frame(&buf).map(Some)
}

/// The body length a frame's 4-byte prefix declares, refused past `FRAME_BYTES_MAX` before
/// anything is allocated for it.
pub fn frame_len(prefix: [u8; 4]) -> std::io::Result<usize> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("controller frame of {len} bytes exceeds {FRAME_BYTES_MAX}"),
        ));
    }
    Ok(len)
}

/// Decodes a frame's body (the JSON after the prefix); hostile bytes are an `InvalidData`
/// error.
pub fn decode_frame<T: serde::de::DeserializeOwned>(body: &[u8]) -> std::io::Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

pub async fn write_frame<T: Serialize>(
    stream: &mut (impl AsyncWrite + Unpin + ?Sized),
    msg: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    stream.write_all(&out).await?;
    // Under TLS, records the socket did not take yet stay in rustls until a flush (a no-op on
    // plain TCP): without it a large frame's tail would wait for the next frame.
    stream.flush().await
}

/// One peer's connection, opened on demand (with TLS when `tls` is set).
pub struct PeerClient {
    pub addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    stream: Option<Box<dyn Io>>,
}

/// Why a call failed: unreachable (connect failed) or broken mid-call.
#[derive(Debug)]
pub enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl CallError {
    fn io(&self) -> &std::io::Error {
        match self {
            CallError::Unreachable(e) | CallError::Network(e) => e,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.io())
    }
}

impl PeerClient {
    pub fn new(addr: String, tls: Option<Arc<rustls::ClientConfig>>) -> Self {
        PeerClient {
            addr,
            tls,
            stream: None,
        }
    }

    /// Opens the connection (TCP, then TLS when configured) within `timeout`.
    async fn connect(&self, timeout: Duration) -> std::io::Result<Box<dyn Io>> {
        let timed_out = || {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connecting to {}", self.addr),
            )
        };
        let s = tokio::time::timeout(timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| timed_out())??;
        let _ = s.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return Ok(Box::new(s));
        };
        let host = self
            .addr
            .rsplit_once(':')
            .map_or(self.addr.as_str(), |(h, _)| h)
            .trim_matches(['[', ']']);
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: {e}", self.addr),
            )
        })?;
        let connector = tokio_rustls::TlsConnector::from(tls.clone());
        let s = tokio::time::timeout(
            TLS_HANDSHAKE_TIMEOUT.min(timeout),
            connector.connect(name, s),
        )
        .await
        .map_err(|_| timed_out())??;
        Ok(Box::new(s))
    }

    /// Sends `req` and reads the answer within `timeout`.
    pub async fn call(
        &mut self,
        req: &RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, CallError> {
        if self.stream.is_none() {
            let s = self
                .connect(CONNECT_TIMEOUT.min(timeout))
                .await
                .map_err(CallError::Unreachable)?;
            self.stream = Some(s);
        }
        let stream = self.stream.as_mut().expect("connected above");
        let result = tokio::time::timeout(timeout, async {
            write_frame(stream, req).await?;
            read_frame::<RpcResponse>(stream).await?.ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "peer closed")
            })
        })
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("call to {} timed out", self.addr),
            ))
        });
        if result.is_err() {
            self.stream = None;
        }
        result.map_err(CallError::Network)
    }
}

/// Creates a [`PeerClient`] per replication target, with TLS when `tls` is set.
pub struct Network {
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, _target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient::new(node.addr.clone(), self.tls.clone())
    }
}

fn rpc_error<E: std::error::Error>(e: CallError) -> RPCError<NodeId, BasicNode, E> {
    match e {
        CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "peer answered a different RPC",
    )))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .call(&RpcRequest::AppendEntries(rpc), option.hard_ttl())
            .await
            .map_err(rpc_error)?
        {
            RpcResponse::AppendEntries(r) => {
                r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
            }
            _ => Err(unexpected()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self
            .call(&RpcRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await
            .map_err(rpc_error)?
        {
            RpcResponse::InstallSnapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
            }
            _ => Err(unexpected()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .call(&RpcRequest::Vote(rpc), option.hard_ttl())
            .await
            .map_err(rpc_error)?
        {
            RpcResponse::Vote(r) => {
                r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
            }
            _ => Err(unexpected()),
        }
    }
}
