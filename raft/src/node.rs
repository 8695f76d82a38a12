//! One node of the metadata quorum, on its own thread `keel-metadata` (tokio current-thread
//! runtime): the openraft instance, the controller listener, the controller's leader-side
//! logic (registration, heartbeats, fencing) and this broker's own lifecycle (register, then
//! heartbeat).
//!
//! The broker's shard 0 drives it through [`MetadataHandle`]: `propose` queues a record batch
//! and returns a ticket; the answer (`Event::Done`) and every newly applied image
//! (`Event::Image`) come back through an event queue, and one byte on the doorbell socket says
//! there is something to drain. The shard never blocks on this thread and this thread never
//! wakes a shard task directly.
//!
//! Fencing: the leader remembers when each broker last heartbeated (in memory; a new leader
//! starts every broker's clock afresh) and fences a broker silent for longer than
//! `session_timeout`: it leaves the ISRs and its partitions elect a new leader from the rest
//! of the ISR (or the ELR), else go offline (leader -1), each change with a new leader epoch.
//! A heartbeat from a fenced broker of the same epoch unfences it; it leads again only the
//! offline partitions whose ISR (or ELR) holds it. A broker that registers again (a restart)
//! gets a new broker epoch; without a clean shutdown before it leaves the ISRs (KIP-841/966).
//! The decisions are pure functions in [`crate::partition_change`]; each partition change
//! carries the epochs it was computed from, so one computed from a stale image is rejected
//! when applied and retried (next heartbeat, next fencing round, next registration attempt).
//!
//! AlterPartition ([`MetadataHandle::alter_partition`]) and controlled shutdown are handled
//! here too: the broker's shard 0 sends the ISR changes of its partitions in one batch and
//! gets a result per partition; after `begin_controlled_shutdown` this broker's heartbeats ask
//! to shut down (Kafka's `WantShutDown`), the controller moves its leadership away, takes it
//! out of the ISRs and fences it, then answers `should_shut_down`, which comes back as
//! `Event::ControlledShutdownDone` (also when no controller answers for a few election
//! timeouts: nobody could take the leadership over).
//!
//! Preferred leaders: ElectLeaders ([`MetadataHandle::elect_leaders`]) is decided here on the
//! latest image and answered once committed, and while `leader_rebalance` is set the leader
//! moves leadership back to preferred replicas every check interval (Kafka's
//! `auto.leader.rebalance.enable`), one decision at a time like the others.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError as OpenRaftError};
use openraft::{BasicNode, Raft, ServerState, SnapshotPolicy};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::codec::encode_batch;
use crate::image::ClusterImage;
use crate::log_store::LogStore;
use crate::network::{
    accept, read_frame, write_frame, BrokerRegistration, ControllerError, ControllerRequest,
    ControllerResponse, Network, PeerClient, RpcRequest, RpcResponse,
};
use crate::partition_change::{
    alter_partitions, controlled_shutdown_records, fence_records, offline_replica_records,
    registration_records, unfence_records, AlterPartitionRequest, AlterPartitionResult, Unclean,
    ALTER_PARTITION_BATCH_MAX,
};
use crate::partition_change::{
    elect_leaders, leader_rebalance_records, ElectLeadersRequest, TopicElectionResults,
    LEADER_REBALANCE_ELECTIONS_MAX,
};
use crate::records::{Record, TopicId};
use crate::state_machine::StateMachine;
use crate::{Applied, ApplyOutcome, LogIndex, NodeId, Proposal, RaftError, TypeConfig};

/// How a node is set up.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub node_id: NodeId,
    /// `<data.dir>/__cluster_metadata-0`.
    pub dir: PathBuf,
    /// The file system the metadata log, vote and snapshots live on (the I/O seam): `StdFs`
    /// in production, the disk model in the Raft group's power-loss test.
    pub fs: Arc<dyn crate::fs::MetaFs>,
    /// The voters and their controller addresses (`--controller-quorum`).
    pub voters: BTreeMap<NodeId, String>,
    /// Where this node accepts controller traffic; `None` for a lone voter.
    pub controller_listen: Option<SocketAddr>,
    /// Mutual TLS on the controller transport, both ways; `None`: plaintext.
    pub tls: Option<crate::network::ControllerTls>,
    pub broker: BrokerRegistration,
    pub heartbeat_interval: Duration,
    pub session_timeout: Duration,
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// Snapshot after this many entries since the last one.
    pub snapshot_entries: u64,
    /// And at least this often when anything was applied since.
    pub snapshot_interval: Duration,
    /// How long a proposal may wait for a controller leader.
    pub propose_timeout: Duration,
    /// The automatic preferred-leader rebalance this node runs while it leads the quorum
    /// (`auto.leader.rebalance.enable`); None = off.
    pub leader_rebalance: Option<LeaderRebalance>,
}

/// Kafka's `leader.imbalance.check.interval.seconds` and
/// `leader.imbalance.per.broker.percentage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderRebalance {
    pub check_interval: Duration,
    pub imbalance_percentage: u32,
}

/// What comes back to the broker.
#[derive(Debug)]
pub enum Event {
    /// A newly applied image.
    Image(Arc<ClusterImage>),
    /// The answer to `propose` ticket: applied (possibly rejected) or failed.
    Done {
        ticket: u64,
        result: Result<Applied, String>,
    },
    /// The answer to an `alter_partition` ticket: a result per request, in order, or why the
    /// controller gave none.
    AlterPartitionDone {
        ticket: u64,
        result: Result<Vec<AlterPartitionResult>, String>,
    },
    /// This broker's controlled shutdown is over: `approved` when the controller moved its
    /// leadership away and took it out of the ISRs; false when the broker is not registered
    /// (yet, or the controller forgot its epoch), so it had nothing to hand over.
    ControlledShutdownDone { approved: bool },
    /// The answer to an `elect_leaders` ticket: the results per request entry and the log
    /// index of the image holding the elections, or why the controller gave none.
    ElectLeadersDone {
        ticket: u64,
        result: Result<(Vec<TopicElectionResults>, LogIndex), String>,
    },
}

/// The quorum as this node sees it (admin HTTP).
#[derive(Clone, Debug, Default, Serialize)]
pub struct QuorumStatus {
    pub node_id: NodeId,
    pub state: String,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub committed_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// On the leader: each member's matched index and its lag behind the leader's log.
    pub replication: Vec<ReplicaLag>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplicaLag {
    pub node_id: NodeId,
    pub voter: bool,
    pub matched_index: Option<u64>,
    pub lag: Option<u64>,
}

struct Bell {
    events: Mutex<VecDeque<Event>>,
    doorbell: UnixStream,
}

impl Bell {
    fn push(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(event);
        // Non-blocking: when the socket buffer is full, the reader has bytes to wake it anyway.
        let _ = (&self.doorbell).write(&[1]);
    }
}

enum Command {
    Propose {
        ticket: u64,
        batch: Vec<u8>,
    },
    AlterPartition {
        ticket: u64,
        requests: Vec<AlterPartitionRequest>,
    },
    BeginControlledShutdown,
    ReplicasOffline(Vec<(TopicId, i32)>),
    ElectLeaders {
        ticket: u64,
        request: ElectLeadersRequest,
    },
    Shutdown(std::sync::mpsc::Sender<()>),
}

/// The broker's side of the metadata node.
pub struct MetadataHandle {
    commands: mpsc::UnboundedSender<Command>,
    bell: Arc<Bell>,
    quorum: Arc<Mutex<QuorumStatus>>,
    next_ticket: AtomicU64,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MetadataHandle {
    /// Starts the node's thread. `doorbell` is the writing end of a socket pair whose other
    /// end the caller reads. Returns once the log, vote and snapshot are loaded and Raft runs.
    pub fn start(cfg: NodeConfig, doorbell: UnixStream) -> Result<MetadataHandle, RaftError> {
        doorbell.set_nonblocking(true)?;
        let bell = Arc::new(Bell {
            events: Mutex::new(VecDeque::new()),
            doorbell,
        });
        let quorum = Arc::new(Mutex::new(QuorumStatus {
            node_id: cfg.node_id,
            ..Default::default()
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let bell = bell.clone();
            let quorum = quorum.clone();
            std::thread::Builder::new()
                .name("keel-metadata".into())
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready_tx.send(Err(RaftError::Io(e)));
                            return;
                        }
                    };
                    rt.block_on(run(cfg, bell, quorum, rx, ready_tx));
                })?
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(MetadataHandle {
                commands: tx,
                bell,
                quorum,
                next_ticket: AtomicU64::new(1),
                thread: Mutex::new(Some(thread)),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(RaftError::Stopped)
            }
        }
    }

    /// Queues a record batch for the controller; the answer comes as `Event::Done` with the
    /// returned ticket.
    pub fn propose(&self, records: &[Record]) -> u64 {
        let batch = encode_batch(records);
        self.submit(
            |ticket| Command::Propose { ticket, batch },
            |ticket, why| Event::Done {
                ticket,
                result: Err(why),
            },
        )
    }

    /// Queues ISR changes of partitions this broker leads (Kafka's AlterPartition, KIP-903
    /// broker epochs per member) for the controller; the answer comes as
    /// `Event::AlterPartitionDone` with the returned ticket, one result per request. A
    /// precondition the controller finds stale is that partition's error code; the others
    /// still commit.
    pub fn alter_partition(&self, requests: Vec<AlterPartitionRequest>) -> u64 {
        self.submit(
            |ticket| Command::AlterPartition { ticket, requests },
            |ticket, why| Event::AlterPartitionDone {
                ticket,
                result: Err(why),
            },
        )
    }

    /// Queues an ElectLeaders request for the controller; the answer comes as
    /// `Event::ElectLeadersDone` with the returned ticket, once the elections are committed.
    pub fn elect_leaders(&self, request: ElectLeadersRequest) -> u64 {
        self.submit(
            |ticket| Command::ElectLeaders { ticket, request },
            |ticket, why| Event::ElectLeadersDone {
                ticket,
                result: Err(why),
            },
        )
    }

    /// Sends a ticketed command to the node; when the node has stopped, the answer the caller
    /// waits for is queued at once (`stopped`), so no ticket goes unanswered.
    fn submit(
        &self,
        command: impl FnOnce(u64) -> Command,
        stopped: impl FnOnce(u64, String) -> Event,
    ) -> u64 {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        if self.commands.send(command(ticket)).is_err() {
            self.bell
                .push(stopped(ticket, "metadata node stopped".into()));
        }
        ticket
    }

    /// Takes every queued event.
    pub fn drain_events(&self) -> Vec<Event> {
        self.bell
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect()
    }

    pub fn quorum(&self) -> QuorumStatus {
        self.quorum
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Starts this broker's controlled shutdown (Kafka's `beginControlledShutdown`): its
    /// heartbeats ask to shut down, and `Event::ControlledShutdownDone` comes back once the
    /// controller has moved its leadership away and taken it out of the ISRs. The broker keeps
    /// serving meanwhile; how long it waits is its own choice.
    pub fn begin_controlled_shutdown(&self) {
        let _ = self.commands.send(Command::BeginControlledShutdown);
    }

    /// Reports replicas of this broker whose logs went offline (a failed write or sync, a log
    /// that would not open): from the next heartbeat on, which follows at once, the controller
    /// moves their leadership to other replicas and takes them out of the ISR and ELR; they
    /// stay offline until this broker restarts. Reporting one twice changes nothing.
    pub fn report_offline_replicas(&self, replicas: Vec<(TopicId, i32)>) {
        let _ = self.commands.send(Command::ReplicasOffline(replicas));
    }

    /// Stops this broker's registration and heartbeats and Raft, and joins the thread (bounded
    /// wait). A broker that did not complete a controlled shutdown first is fenced by the
    /// session timeout.
    pub fn shutdown(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.commands.send(Command::Shutdown(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// Shared by the node's tasks.
struct Ctx {
    cfg: NodeConfig,
    raft: Raft<TypeConfig>,
    sm: StateMachine,
    /// Leader side: when each broker last heartbeated.
    last_seen: Mutex<HashMap<i32, Instant>>,
    /// Leader side: brokers that shut down under control, by the broker epoch they stopped
    /// at; a late heartbeat of that epoch does not unfence them.
    shut_down: Mutex<HashMap<i32, i64>>,
    /// This broker's current broker epoch (-1 until registered).
    broker_epoch: AtomicI64,
    /// Set on shutdown: this broker's lifecycle stops registering and heartbeating.
    stopping: AtomicBool,
    /// Set by `begin_controlled_shutdown`: heartbeats ask to shut down.
    want_shutdown: AtomicBool,
    /// Wakes the lifecycle's heartbeat wait (a controlled shutdown begins, a replica went
    /// offline).
    lifecycle_wake: tokio::sync::Notify,
    /// This broker's replicas whose logs went offline; every heartbeat names them.
    offline_replicas: Mutex<std::collections::BTreeSet<(TopicId, i32)>>,
    /// Events back to the broker.
    bell: Arc<Bell>,
    /// Held from reading the image to committing the records decided on it (registration,
    /// unfencing, fencing, AlterPartition, controlled shutdown), so the controller's decisions
    /// are made one at a time on the latest image, as Kafka's single controller thread does;
    /// the records' epoch preconditions remain the guard against an image that lags.
    decide: tokio::sync::Mutex<()>,
    /// Clients to other nodes' controller listeners, by address.
    peers: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<PeerClient>>>>,
}

async fn run(
    cfg: NodeConfig,
    bell: Arc<Bell>,
    quorum: Arc<Mutex<QuorumStatus>>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    ready: std::sync::mpsc::Sender<Result<(), RaftError>>,
) {
    let ctx = match setup(&cfg, bell.clone()).await {
        Ok(ctx) => Arc::new(ctx),
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    if let Some(addr) = cfg.controller_listen {
        match TcpListener::bind(addr).await {
            Ok(listener) => {
                info!(%addr, "controller listener bound");
                tokio::spawn(serve(listener, ctx.clone()));
            }
            Err(e) => {
                let _ = ready.send(Err(RaftError::Config(format!(
                    "cannot listen for controller traffic on {addr}: {e}"
                ))));
                return;
            }
        }
    }
    let _ = ready.send(Ok(()));
    tokio::spawn(watch_metrics(ctx.clone(), quorum));
    tokio::spawn(fence_silent_brokers(ctx.clone()));
    tokio::spawn(broker_lifecycle(ctx.clone()));
    tokio::spawn(snapshot_by_time(ctx.clone()));
    tokio::spawn(balance_partition_leaders(ctx.clone()));
    while let Some(cmd) = commands.recv().await {
        match cmd {
            Command::Propose { ticket, batch } => {
                let ctx = ctx.clone();
                let bell = bell.clone();
                tokio::spawn(async move {
                    let deadline = Instant::now() + ctx.cfg.propose_timeout;
                    let result = controller_call(
                        &ctx,
                        ControllerRequest::Propose(Proposal { batch }),
                        deadline,
                    )
                    .await;
                    let result = match result {
                        Ok(ControllerResponse::Applied(a)) => Ok(a),
                        Ok(other) => Err(format!("unexpected controller answer {other:?}")),
                        Err(e) => Err(e.to_string()),
                    };
                    bell.push(Event::Done { ticket, result });
                });
            }
            Command::AlterPartition { ticket, requests } => {
                let ctx = ctx.clone();
                let bell = bell.clone();
                tokio::spawn(async move {
                    let deadline = Instant::now() + ctx.cfg.propose_timeout;
                    let result = controller_call(
                        &ctx,
                        ControllerRequest::AlterPartition(requests),
                        deadline,
                    )
                    .await;
                    let result = match result {
                        Ok(ControllerResponse::AlterPartition(r)) => Ok(r),
                        Ok(other) => Err(format!("unexpected controller answer {other:?}")),
                        Err(e) => Err(e.to_string()),
                    };
                    bell.push(Event::AlterPartitionDone { ticket, result });
                });
            }
            Command::BeginControlledShutdown => {
                ctx.want_shutdown.store(true, Ordering::Relaxed);
                ctx.lifecycle_wake.notify_one();
            }
            Command::ReplicasOffline(replicas) => {
                let mut offline = ctx
                    .offline_replicas
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let before = offline.len();
                offline.extend(replicas);
                if offline.len() > before {
                    ctx.lifecycle_wake.notify_one();
                }
            }
            Command::ElectLeaders { ticket, request } => {
                let ctx = ctx.clone();
                let bell = bell.clone();
                tokio::spawn(async move {
                    let deadline = Instant::now() + ctx.cfg.propose_timeout;
                    let result =
                        controller_call(&ctx, ControllerRequest::ElectLeaders(request), deadline)
                            .await;
                    let result = match result {
                        Ok(ControllerResponse::ElectLeaders { results, index }) => {
                            Ok((results, index))
                        }
                        Ok(other) => Err(format!("unexpected controller answer {other:?}")),
                        Err(e) => Err(e.to_string()),
                    };
                    bell.push(Event::ElectLeadersDone { ticket, result });
                });
            }
            Command::Shutdown(done) => {
                ctx.stopping.store(true, Ordering::Relaxed);
                let _ = ctx.raft.shutdown().await;
                let _ = done.send(());
                break;
            }
        }
    }
}

async fn setup(cfg: &NodeConfig, bell: Arc<Bell>) -> Result<Ctx, RaftError> {
    let log = LogStore::open_on(cfg.fs.clone(), &cfg.dir)?;
    let sink_bell = bell.clone();
    let sm = StateMachine::open_on(
        cfg.fs.clone(),
        &cfg.dir,
        Arc::new(move |image| sink_bell.push(Event::Image(image))),
    )?;
    let config = openraft::Config {
        cluster_name: "keel".into(),
        heartbeat_interval: 100,
        election_timeout_min: cfg.election_timeout_min.as_millis() as u64,
        election_timeout_max: cfg.election_timeout_max.as_millis() as u64,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.snapshot_entries.max(1)),
        // Keep some entries after a snapshot for slow followers, never more than a
        // snapshot's worth.
        max_in_snapshot_log_to_keep: cfg.snapshot_entries.clamp(1, 100),
        purge_batch_size: 1,
        ..Default::default()
    }
    .validate()
    .map_err(|e| RaftError::Config(e.to_string()))?;
    let network = Network {
        tls: cfg.tls.as_ref().map(|t| t.client.clone()),
    };
    let raft = Raft::new(cfg.node_id, Arc::new(config), network, log, sm.clone())
        .await
        .map_err(|e| RaftError::Config(format!("starting raft: {e}")))?;
    if cfg.voters.contains_key(&cfg.node_id)
        && !raft
            .is_initialized()
            .await
            .map_err(|e| RaftError::Config(e.to_string()))?
    {
        let members: BTreeMap<NodeId, BasicNode> = cfg
            .voters
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => {
                info!(voters = ?cfg.voters.keys().collect::<Vec<_>>(), "metadata quorum initialized")
            }
            Err(e) => info!(error = %e, "metadata quorum already initialized"),
        }
    }
    Ok(Ctx {
        cfg: cfg.clone(),
        raft,
        sm,
        last_seen: Mutex::new(HashMap::new()),
        shut_down: Mutex::new(HashMap::new()),
        broker_epoch: AtomicI64::new(-1),
        stopping: AtomicBool::new(false),
        want_shutdown: AtomicBool::new(false),
        lifecycle_wake: tokio::sync::Notify::new(),
        offline_replicas: Mutex::new(std::collections::BTreeSet::new()),
        bell,
        decide: tokio::sync::Mutex::new(()),
        peers: tokio::sync::Mutex::new(HashMap::new()),
    })
}

/// Accepts controller connections; each is served request by request. With TLS a peer is
/// admitted (its certificate verified, its principal a super user) before any frame is read.
async fn serve(listener: TcpListener, ctx: Arc<Ctx>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut stream = match accept(stream, ctx.cfg.tls.as_ref()).await {
                Ok((stream, principal)) => {
                    if let Some(p) = principal {
                        debug!(%peer, principal = %p, "controller peer admitted");
                    }
                    stream
                }
                Err(why) => {
                    warn!(%peer, why = %why, "controller connection refused");
                    return;
                }
            };
            loop {
                let req = match read_frame::<RpcRequest>(&mut stream).await {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(e) => {
                        warn!(%peer, error = %e, "bad controller frame; closing connection");
                        return;
                    }
                };
                let resp = match req {
                    RpcRequest::AppendEntries(r) => {
                        RpcResponse::AppendEntries(ctx.raft.append_entries(r).await)
                    }
                    RpcRequest::Vote(r) => RpcResponse::Vote(ctx.raft.vote(r).await),
                    RpcRequest::InstallSnapshot(r) => {
                        RpcResponse::InstallSnapshot(ctx.raft.install_snapshot(r).await)
                    }
                    RpcRequest::Controller(r) => {
                        RpcResponse::Controller(handle_controller(&ctx, r).await)
                    }
                };
                if write_frame(&mut stream, &resp).await.is_err() {
                    return;
                }
            }
        });
    }
}

fn leader_hint(ctx: &Ctx) -> ControllerError {
    let m = ctx.raft.metrics().borrow().clone();
    let leader = m.current_leader;
    let leader_addr = leader.and_then(|l| {
        m.membership_config
            .membership()
            .get_node(&l)
            .map(|n| n.addr.clone())
            .or_else(|| ctx.cfg.voters.get(&l).cloned())
    });
    ControllerError::NotLeader {
        leader,
        leader_addr,
    }
}

fn is_leader(ctx: &Ctx) -> bool {
    ctx.raft.metrics().borrow().current_leader == Some(ctx.cfg.node_id)
}

/// Commits `records` through Raft on this (leader) node.
async fn write(ctx: &Ctx, batch: Vec<u8>) -> Result<Applied, ControllerError> {
    match ctx.raft.client_write(Proposal { batch }).await {
        Ok(resp) => Ok(resp.data),
        Err(OpenRaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(leader_hint(ctx)),
        Err(e) => Err(ControllerError::Failed(e.to_string())),
    }
}

async fn write_records(ctx: &Ctx, records: &[Record]) -> Result<Applied, ControllerError> {
    write(ctx, encode_batch(records)).await
}

/// Leader side of a broker's request.
async fn handle_controller(
    ctx: &Ctx,
    req: ControllerRequest,
) -> Result<ControllerResponse, ControllerError> {
    if !is_leader(ctx) {
        return Err(leader_hint(ctx));
    }
    match req {
        ControllerRequest::Propose(p) => write(ctx, p.batch).await.map(ControllerResponse::Applied),
        ControllerRequest::Register(reg) => {
            let node_id = reg.broker_id as NodeId;
            if let Some(addr) = &reg.controller_addr {
                let known = ctx
                    .raft
                    .metrics()
                    .borrow()
                    .membership_config
                    .membership()
                    .get_node(&node_id)
                    .is_some();
                if !known {
                    info!(node_id, %addr, "adding broker as a metadata learner");
                    ctx.raft
                        .add_learner(node_id, BasicNode::new(addr), false)
                        .await
                        .map_err(|e| ControllerError::Failed(format!("adding learner: {e}")))?;
                }
            }
            let decide = ctx.decide.lock().await;
            let image = current_image(ctx).await?;
            let records = registration_records(&image, &reg, Unclean::TopicConfig);
            let applied = write_records(ctx, &records).await?;
            drop(decide);
            if let ApplyOutcome::Rejected { message, .. } = applied.outcome {
                return Err(ControllerError::Failed(message));
            }
            ctx.last_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(reg.broker_id, Instant::now());
            info!(
                broker_id = reg.broker_id,
                broker_epoch = applied.index,
                "broker registered"
            );
            Ok(ControllerResponse::Registered {
                broker_epoch: applied.index as i64,
            })
        }
        ControllerRequest::Heartbeat {
            broker_id,
            broker_epoch,
            want_shutdown,
            offline_replicas,
        } => {
            let image = ctx.sm.image();
            let fenced = match image.brokers.get(&broker_id) {
                Some(b) if b.broker_epoch == broker_epoch => b.fenced,
                _ => return Err(ControllerError::StaleBrokerEpoch),
            };
            ctx.last_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(broker_id, Instant::now());
            if !offline_replicas.is_empty() {
                take_replicas_offline(ctx, broker_id, broker_epoch, &offline_replicas).await?;
            }
            if want_shutdown {
                return controlled_shutdown(ctx, broker_id, broker_epoch).await;
            }
            let retired = ctx
                .shut_down
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&broker_id)
                == Some(&broker_epoch);
            if retired {
                return Ok(ControllerResponse::HeartbeatOk {
                    fenced,
                    should_shut_down: true,
                });
            }
            if fenced {
                let _decide = ctx.decide.lock().await;
                let image = current_image(ctx).await?;
                let records = unfence_records(&image, broker_id, Unclean::TopicConfig);
                let applied = write_records(ctx, &records).await?;
                if applied.outcome == ApplyOutcome::Applied {
                    info!(broker_id, "broker unfenced");
                }
            }
            Ok(ControllerResponse::HeartbeatOk {
                fenced: false,
                should_shut_down: false,
            })
        }
        ControllerRequest::AlterPartition(requests) => {
            if requests.len() > ALTER_PARTITION_BATCH_MAX {
                return Err(ControllerError::Failed(format!(
                    "AlterPartition of {} partitions exceeds {ALTER_PARTITION_BATCH_MAX}",
                    requests.len()
                )));
            }
            handle_alter_partition(ctx, &requests)
                .await
                .map(ControllerResponse::AlterPartition)
        }
        ControllerRequest::ElectLeaders(request) => handle_elect_leaders(ctx, &request).await,
    }
}

/// The image for a controller decision: this node is confirmed leader and has applied every
/// committed entry (a new leader may not have yet), so the decision sees the latest state.
async fn current_image(ctx: &Ctx) -> Result<Arc<ClusterImage>, ControllerError> {
    match ctx.raft.ensure_linearizable().await {
        Ok(_) => Ok(ctx.sm.image()),
        Err(OpenRaftError::APIError(CheckIsLeaderError::ForwardToLeader(_))) => {
            Err(leader_hint(ctx))
        }
        Err(e) => Err(ControllerError::Failed(e.to_string())),
    }
}

/// How often the leader recomputes and rewrites a batch whose preconditions a concurrent
/// change made stale, before giving up.
const WRITE_ATTEMPTS: usize = 3;

/// Commits the valid ISR changes of `requests` in one batch. A batch rejected at apply (a
/// concurrent change made a precondition stale) is recomputed on the newer image, where the
/// stale request gets its own error code, and written again.
async fn handle_alter_partition(
    ctx: &Ctx,
    requests: &[AlterPartitionRequest],
) -> Result<Vec<AlterPartitionResult>, ControllerError> {
    let _decide = ctx.decide.lock().await;
    let mut last_rejection = None;
    for _ in 0..WRITE_ATTEMPTS {
        let image = current_image(ctx).await?;
        let (results, records) = alter_partitions(&image, requests);
        if records.is_empty() {
            return Ok(results);
        }
        match write_records(ctx, &records).await?.outcome {
            ApplyOutcome::Applied => return Ok(results),
            ApplyOutcome::Rejected { code, message } => last_rejection = Some((code, message)),
        }
    }
    let (code, message) = last_rejection.unwrap_or_default();
    warn!(code, %message, "AlterPartition batch kept being rejected");
    let image = ctx.sm.image();
    let (mut results, _) = alter_partitions(&image, requests);
    for r in results.iter_mut().filter(|r| r.error_code == 0) {
        r.error_code = code;
    }
    Ok(results)
}

/// ElectLeaders on the leader: decides every named partition on the current image, commits
/// the elections in one batch and answers with the index of the image that holds them. A
/// batch rejected at apply (a concurrent change made a precondition stale) is decided again
/// on the newer image.
async fn handle_elect_leaders(
    ctx: &Ctx,
    request: &ElectLeadersRequest,
) -> Result<ControllerResponse, ControllerError> {
    let _decide = ctx.decide.lock().await;
    let mut last_rejection = String::new();
    for _ in 0..WRITE_ATTEMPTS {
        let image = current_image(ctx).await?;
        let (results, records) = elect_leaders(&image, request);
        if records.is_empty() {
            return Ok(ControllerResponse::ElectLeaders {
                results,
                index: image.applied_index,
            });
        }
        let applied = write_records(ctx, &records).await?;
        match applied.outcome {
            ApplyOutcome::Applied => {
                info!(
                    election = ?request.election_type,
                    elected = records.len(),
                    "leaders elected (ElectLeaders)"
                );
                return Ok(ControllerResponse::ElectLeaders {
                    results,
                    index: applied.index,
                });
            }
            ApplyOutcome::Rejected { message, .. } => last_rejection = message,
        }
    }
    Err(ControllerError::Failed(format!(
        "ElectLeaders raced other partition changes; try again ({last_rejection})"
    )))
}

/// On the leader, when `leader_rebalance` is set: every check interval, moves leadership back
/// to preferred replicas where a broker's imbalance is above the percentage (see
/// [`leader_rebalance_records`]), at most `LEADER_REBALANCE_ELECTIONS_MAX` elections a round;
/// a round that reaches the bound runs again at once. A rejected batch (a concurrent change)
/// waits for the next round.
async fn balance_partition_leaders(ctx: Arc<Ctx>) {
    let Some(rebalance) = ctx.cfg.leader_rebalance else {
        return;
    };
    let mut again_now = false;
    loop {
        if !again_now {
            tokio::time::sleep(rebalance.check_interval).await;
        }
        again_now = false;
        if ctx.stopping.load(Ordering::Relaxed) || !is_leader(&ctx) {
            continue;
        }
        let decide = ctx.decide.lock().await;
        let written = match current_image(&ctx).await {
            Ok(image) => {
                let records = leader_rebalance_records(
                    &image,
                    rebalance.imbalance_percentage,
                    LEADER_REBALANCE_ELECTIONS_MAX,
                );
                if records.is_empty() {
                    continue;
                }
                again_now = records.len() >= LEADER_REBALANCE_ELECTIONS_MAX;
                write_records(&ctx, &records)
                    .await
                    .map(|a| (a, records.len()))
            }
            Err(e) => Err(e),
        };
        drop(decide);
        match written {
            Ok((
                Applied {
                    outcome: ApplyOutcome::Rejected { message, .. },
                    ..
                },
                _,
            )) => {
                again_now = false;
                warn!(%message, "leader rebalance rejected; retrying next round");
            }
            Ok((_, elected)) => info!(elected, "leadership moved back to preferred replicas"),
            Err(e) => {
                again_now = false;
                warn!(error = %e, "leader rebalance failed");
            }
        }
    }
}

/// Leader side of a heartbeat that wants to shut down (Kafka's controlled shutdown, KRaft's
/// way): the first one commits the broker's controlled-shutdown records (leadership moved to
/// other ISR or ELR members, the broker out of the ISRs — into the ELR where that leaves the
/// ISR below min ISR, KIP-966 — and fenced); every one answers `should_shut_down` once the
/// records are committed and the broker leads nothing. A batch that raced another change is
/// recomputed; one still refused is tried again at the next heartbeat.
async fn controlled_shutdown(
    ctx: &Ctx,
    broker_id: i32,
    broker_epoch: i64,
) -> Result<ControllerResponse, ControllerError> {
    let is_retired = || {
        ctx.shut_down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&broker_id)
            == Some(&broker_epoch)
    };
    if !is_retired() {
        let _decide = ctx.decide.lock().await;
        for _ in 0..WRITE_ATTEMPTS {
            let image = current_image(ctx).await?;
            let records =
                controlled_shutdown_records(&image, broker_id, broker_epoch, Unclean::TopicConfig)
                    .map_err(|_| ControllerError::StaleBrokerEpoch)?;
            if write_records(ctx, &records).await?.outcome == ApplyOutcome::Applied {
                ctx.shut_down
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(broker_id, broker_epoch);
                info!(broker_id, broker_epoch, "broker in controlled shutdown");
                break;
            }
        }
    }
    let image = ctx.sm.image();
    let leads = image
        .topics
        .values()
        .flat_map(|t| &t.partitions)
        .any(|p| p.leader == broker_id);
    Ok(ControllerResponse::HeartbeatOk {
        fenced: image.brokers.get(&broker_id).is_none_or(|b| b.fenced),
        should_shut_down: is_retired() && !leads,
    })
}

/// Leader side of a heartbeat naming offline replicas: records those not recorded yet
/// (`offline_replica_records`: leadership moved, out of the ISR and ELR). A batch that raced
/// another change is recomputed; one still refused is tried again at the next heartbeat.
async fn take_replicas_offline(
    ctx: &Ctx,
    broker_id: i32,
    broker_epoch: i64,
    replicas: &[(TopicId, i32)],
) -> Result<(), ControllerError> {
    let recorded = |image: &ClusterImage| {
        image.brokers.get(&broker_id).is_some_and(|b| {
            replicas
                .iter()
                .all(|(topic_id, partition)| b.is_offline(topic_id, *partition))
        })
    };
    if recorded(&ctx.sm.image()) {
        return Ok(());
    }
    let _decide = ctx.decide.lock().await;
    for _ in 0..WRITE_ATTEMPTS {
        let image = current_image(ctx).await?;
        let records = match offline_replica_records(
            &image,
            broker_id,
            broker_epoch,
            replicas,
            Unclean::TopicConfig,
        ) {
            Ok(Some(records)) => records,
            Ok(None) => return Ok(()),
            Err(_) => return Err(ControllerError::StaleBrokerEpoch),
        };
        if write_records(ctx, &records).await?.outcome == ApplyOutcome::Applied {
            warn!(
                broker_id,
                replicas = records.len() - 1,
                "replicas offline: their logs failed; leadership moved away"
            );
            return Ok(());
        }
    }
    Ok(())
}

/// How long a controller request waits for a voter's connection that another call holds
/// before it tries the next voter (it comes back to the leader's hint next round).
const CONNECTION_WAIT: Duration = Duration::from_millis(500);

/// How often a broker waiting for its controlled shutdown's approval heartbeats.
const CONTROLLED_SHUTDOWN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(50);

/// On the leader: fences brokers whose heartbeats stopped.
async fn fence_silent_brokers(ctx: Arc<Ctx>) {
    let mut was_leader = false;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let leader = is_leader(&ctx);
        if !leader {
            was_leader = false;
            continue;
        }
        let image = ctx.sm.image();
        let now = Instant::now();
        let silent: Vec<i32> = {
            let mut seen = ctx.last_seen.lock().unwrap_or_else(|p| p.into_inner());
            if !was_leader {
                // A new leader gives every broker a full session from now.
                seen.clear();
                for id in image.brokers.keys() {
                    seen.insert(*id, now);
                }
            }
            image
                .live_brokers()
                .filter(|b| {
                    seen.get(&b.broker_id)
                        .is_none_or(|t| now.duration_since(*t) > ctx.cfg.session_timeout)
                })
                .map(|b| b.broker_id)
                .collect()
        };
        was_leader = true;
        for broker_id in silent {
            // Each on the image the previous fencing left: its preconditions must be current.
            let decide = ctx.decide.lock().await;
            let written = match current_image(&ctx).await {
                Ok(image) => {
                    let records = fence_records(&image, broker_id, Unclean::TopicConfig);
                    write_records(&ctx, &records).await
                }
                Err(e) => Err(e),
            };
            drop(decide);
            match written {
                Ok(Applied {
                    outcome: ApplyOutcome::Rejected { message, .. },
                    ..
                }) => warn!(broker_id, %message, "fencing rejected; retrying next round"),
                Ok(_) => warn!(
                    broker_id,
                    session_timeout_ms = ctx.cfg.session_timeout.as_millis() as u64,
                    "broker fenced: no heartbeat within the session timeout"
                ),
                Err(e) => warn!(broker_id, error = %e, "fencing failed"),
            }
        }
    }
}

/// Sends `req` to the controller leader (itself when leading), following leader hints and
/// retrying until `deadline`.
async fn controller_call(
    ctx: &Ctx,
    req: ControllerRequest,
    deadline: Instant,
) -> Result<ControllerResponse, ControllerError> {
    let mut hint: Option<String> = None;
    let mut last_err = ControllerError::NotLeader {
        leader: None,
        leader_addr: None,
    };
    while Instant::now() < deadline {
        if is_leader(ctx) {
            match handle_controller(ctx, req.clone()).await {
                Err(e @ ControllerError::NotLeader { .. }) => last_err = e,
                other => return other,
            }
        }
        let mut targets: Vec<String> = Vec::new();
        if let ControllerError::NotLeader {
            leader_addr: Some(a),
            ..
        } = leader_hint(ctx)
        {
            targets.push(a);
        }
        if let Some(h) = hint.take() {
            targets.push(h);
        }
        targets.extend(
            ctx.cfg
                .voters
                .iter()
                .filter(|(id, _)| **id != ctx.cfg.node_id)
                .map(|(_, a)| a.clone()),
        );
        targets.dedup();
        for addr in targets {
            let timeout = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            let client = peer(ctx, &addr).await;
            // The connection serves one call at a time, and waiting for it is bounded: a call
            // to a voter that stopped answering (a SIGSTOPped former leader) holds it until its
            // own deadline, and a heartbeat queued behind it went unanswered that long, so the
            // new leader fenced this broker (CI pre-check: replication_operations, 10 s behind
            // an AlterPartition). Now it tries the next voter, and the leader's hint next round.
            let wait = timeout.min(CONNECTION_WAIT);
            let answer = match tokio::time::timeout(wait, client.lock()).await {
                Ok(mut c) => {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(100));
                    c.call(&RpcRequest::Controller(req.clone()), left).await
                }
                Err(_) => Err(crate::network::CallError::Network(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the connection is busy with another call",
                ))),
            };
            match answer {
                Ok(RpcResponse::Controller(Err(ControllerError::NotLeader {
                    leader_addr,
                    leader,
                }))) => {
                    if let Some(a) = leader_addr.clone() {
                        hint = Some(a);
                    }
                    last_err = ControllerError::NotLeader {
                        leader,
                        leader_addr,
                    };
                    if hint.is_some() {
                        break;
                    }
                }
                Ok(RpcResponse::Controller(r)) => return r,
                Ok(_) => last_err = ControllerError::Failed("unexpected answer".into()),
                Err(e) => last_err = ControllerError::Failed(format!("{addr}: {e}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(match last_err {
        ControllerError::NotLeader { .. } => {
            ControllerError::Failed("no metadata quorum leader answered in time".into())
        }
        e => e,
    })
}

async fn peer(ctx: &Ctx, addr: &str) -> Arc<tokio::sync::Mutex<PeerClient>> {
    ctx.peers
        .lock()
        .await
        .entry(addr.to_string())
        .or_insert_with(|| {
            let tls = ctx.cfg.tls.as_ref().map(|t| t.client.clone());
            Arc::new(tokio::sync::Mutex::new(PeerClient::new(
                addr.to_string(),
                tls,
            )))
        })
        .clone()
}

/// This broker's registration and heartbeats, for as long as the node runs.
async fn broker_lifecycle(ctx: Arc<Ctx>) {
    let mut reg = ctx.cfg.broker.clone();
    if ctx.cfg.voters.contains_key(&ctx.cfg.node_id) {
        // Voters are members already; only learners need adding.
        reg.controller_addr = None;
    }
    let mut warned = Instant::now() - Duration::from_secs(60);
    let mut approved = false;
    let mut unreachable_since: Option<Instant> = None;
    while !ctx.stopping.load(Ordering::Relaxed) {
        if ctx.want_shutdown.load(Ordering::Relaxed) {
            // Not registered (yet, or the controller forgot this epoch): nothing to hand over,
            // and registering now would unfence a broker that is going away.
            if !approved {
                ctx.bell
                    .push(Event::ControlledShutdownDone { approved: false });
            }
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let epoch =
            match controller_call(&ctx, ControllerRequest::Register(reg.clone()), deadline).await {
                Ok(ControllerResponse::Registered { broker_epoch }) => broker_epoch,
                other => {
                    if warned.elapsed() > Duration::from_secs(10) {
                        warn!(answer = ?other, "broker registration not accepted yet; retrying");
                        warned = Instant::now();
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
        ctx.broker_epoch.store(epoch, Ordering::Relaxed);
        loop {
            let want_shutdown = ctx.want_shutdown.load(Ordering::Relaxed);
            let interval = if want_shutdown && !approved {
                // Kafka's broker heartbeats at once while it waits for the approval.
                CONTROLLED_SHUTDOWN_HEARTBEAT_INTERVAL
            } else {
                ctx.cfg.heartbeat_interval
            };
            let _ = tokio::time::timeout(interval, ctx.lifecycle_wake.notified()).await;
            if ctx.stopping.load(Ordering::Relaxed) {
                return;
            }
            let want_shutdown = ctx.want_shutdown.load(Ordering::Relaxed);
            let deadline = Instant::now() + ctx.cfg.heartbeat_interval.max(Duration::from_secs(1));
            let offline_replicas: Vec<(TopicId, i32)> = ctx
                .offline_replicas
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .copied()
                .collect();
            let hb = ControllerRequest::Heartbeat {
                broker_id: reg.broker_id,
                broker_epoch: epoch,
                want_shutdown,
                offline_replicas,
            };
            match controller_call(&ctx, hb, deadline).await {
                Ok(ControllerResponse::HeartbeatOk {
                    should_shut_down: true,
                    ..
                }) if want_shutdown && !approved => {
                    approved = true;
                    info!(broker_epoch = epoch, "controlled shutdown approved");
                    ctx.bell
                        .push(Event::ControlledShutdownDone { approved: true });
                }
                Ok(_) => unreachable_since = None,
                Err(ControllerError::StaleBrokerEpoch) => {
                    warn!("controller does not know this broker epoch; registering again");
                    break;
                }
                Err(e) => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    // No controller long enough for an election to have found one: nobody
                    // can take the leadership over (the quorum lost its majority, say), so
                    // waiting longer only delays the stop.
                    let give_up = (ctx.cfg.election_timeout_max * 3).max(Duration::from_secs(2));
                    if want_shutdown && !approved && since.elapsed() >= give_up {
                        approved = true;
                        warn!(error = %e, "no controller answers; stopping without a controlled shutdown");
                        ctx.bell
                            .push(Event::ControlledShutdownDone { approved: false });
                    }
                    if warned.elapsed() > Duration::from_secs(10) {
                        warn!(error = %e, "heartbeat failed");
                        warned = Instant::now();
                    }
                }
            }
        }
    }
}

/// Snapshots at least every `snapshot_interval` when anything was applied since the last.
async fn snapshot_by_time(ctx: Arc<Ctx>) {
    loop {
        tokio::time::sleep(ctx.cfg.snapshot_interval).await;
        let applied = ctx.sm.image().applied_index;
        if applied > ctx.sm.snapshot_index().unwrap_or(0) {
            let _ = ctx.raft.trigger().snapshot().await;
        }
    }
}

/// Keeps `QuorumStatus` current and logs leader changes.
async fn watch_metrics(ctx: Arc<Ctx>, quorum: Arc<Mutex<QuorumStatus>>) {
    let mut rx = ctx.raft.metrics();
    let mut last_leader = None;
    loop {
        let m = rx.borrow_and_update().clone();
        if m.current_leader != last_leader {
            info!(leader = ?m.current_leader, term = m.current_term, "metadata quorum leader");
            last_leader = m.current_leader;
        }
        let membership = m.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        let last = m.last_log_index;
        let replication: Vec<ReplicaLag> = m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .map(|(id, matched)| {
                        let matched_index = matched.map(|l| l.index);
                        ReplicaLag {
                            node_id: *id,
                            voter: voters.contains(id),
                            matched_index,
                            lag: last.map(|l| l.saturating_sub(matched_index.unwrap_or(0))),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        // openraft 0.9 does not publish the commit index: on the leader it is what a majority
        // of voters has matched; elsewhere the applied index is the best lower bound.
        let committed_index = if replication.is_empty() {
            m.last_applied.map(|l| l.index)
        } else {
            let mut matched: Vec<u64> = replication
                .iter()
                .filter(|r| r.voter)
                .map(|r| r.matched_index.unwrap_or(0))
                .collect();
            matched.sort_unstable_by(|a, b| b.cmp(a));
            matched.get(voters.len() / 2).copied()
        };
        {
            let mut q = quorum.lock().unwrap_or_else(|p| p.into_inner());
            *q = QuorumStatus {
                node_id: ctx.cfg.node_id,
                state: match m.state {
                    ServerState::Leader => "leader",
                    ServerState::Follower => "follower",
                    ServerState::Candidate => "candidate",
                    ServerState::Learner => "learner",
                    ServerState::Shutdown => "shutdown",
                }
                .into(),
                voters,
                learners,
                leader: m.current_leader,
                term: m.current_term,
                last_log_index: m.last_log_index,
                committed_index,
                applied_index: m.last_applied.map(|l| l.index),
                snapshot_index: m.snapshot.map(|l| l.index),
                purged_index: m.purged.map(|l| l.index),
                replication,
            };
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}
