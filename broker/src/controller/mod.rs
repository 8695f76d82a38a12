//! The broker's side of the metadata controller, on shard 0.
//!
//! Metadata changes are proposed as record batches to the Raft quorum (crate `keel-raft`,
//! through [`MetadataHandle`]); the quorum's leader commits them, and every broker applies
//! them to its image. Here, shard 0: checks a request against the current image, places
//! partitions on live brokers, builds the records, proposes them (each topic as its own batch,
//! all concurrently), and answers once the committed change is installed on every shard of
//! this broker, so a client that created a topic here can use it here at once. The image is
//! checked again when the batch is applied (`ClusterImage::apply`), so two brokers creating
//! one name at once get one winner and one TOPIC_ALREADY_EXISTS.
//!
//! Committed images arrive through the handle's event queue; a task reads its doorbell
//! socket (io_uring), builds this broker's view of the newest image and installs it on every
//! shard, in order. Handlers on other shards reach the controller with [`call`].

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures_channel::oneshot;
use futures_lite::AsyncReadExt;
use kafka_protocol::ResponseError;
use keel_raft::network::BrokerRegistration;
use keel_raft::node::{Event, LeaderRebalance, MetadataHandle, NodeConfig};
use keel_raft::partition_change::{AlterPartitionRequest, IsrMember};
use keel_raft::partition_change::{ElectLeadersRequest, TopicElectionResults};
use keel_raft::records::{RESOURCE_BROKER, RESOURCE_TOPIC};
use keel_raft::{ApplyOutcome, ClusterImage, Record};
use keel_storage::replication::IsrChangeAnswer;
use tracing::{info, warn};

use crate::config::{validate_dynamic_broker_config, validate_topic_config, BrokerConfig};
use crate::coordination::parking::join_all;
use crate::metadata::{validate_topic_name, LegacyImage, MetadataImage, TopicMeta};
use crate::shard::BrokerShard;

/// One ISR change a leader proposes (defined with the replication state the shard holds).
pub use crate::replication::state::IsrChange;
use keel_vocab::ErrorCode;
pub use state::Controller;

pub mod reassignment;
pub mod security;
mod shutdown;
pub mod state;

use shutdown::take_clean_shutdown_epoch;
pub use shutdown::{controlled_shutdown, record_clean_shutdown};

/// Most partitions a topic may have.
const MAX_PARTITIONS: i32 = 100_000;
/// The metadata file of the single-node version before Raft.
const LEGACY_FILE: &str = "keel-metadata.json";

/// A controller failure for one item: Kafka error code and message.
#[derive(Debug, Clone)]
pub struct OpError {
    pub code: ErrorCode,
    pub message: String,
}

impl OpError {
    pub fn new(e: ResponseError, message: impl Into<String>) -> Self {
        OpError {
            code: ErrorCode::of(e),
            message: message.into(),
        }
    }
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    /// -1 = broker default.
    pub num_partitions: i32,
    /// -1 = broker default.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// Manual replica assignment per partition (empty = placed by the controller).
    pub assignments: Vec<Vec<i32>>,
}

/// How a config change applies.
#[derive(Debug, Clone)]
pub enum ConfigChange {
    /// AlterConfigs: the topic's overrides become exactly these.
    Replace(BTreeMap<String, String>),
    /// IncrementalAlterConfigs: (name, op, value) with Kafka's ops 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
    Incremental(Vec<(String, i8, Option<String>)>),
}

/// The metadata node's settings from the broker's; `shard_count` is the running shard count.
fn node_config(config: &BrokerConfig, shard_count: usize) -> NodeConfig {
    let node_id = config.node_id as u64;
    let mut voters = config.controller_quorum.clone();
    if voters.is_empty() {
        // A lone broker is a one-voter quorum; it needs no listener.
        voters.insert(
            node_id,
            config
                .controller_listen
                .map_or_else(|| "127.0.0.1:0".to_string(), |a| a.to_string()),
        );
    }
    // The controller's elections fall back to this node's static settings, as Kafka's do.
    keel_raft::partition_change::set_static_defaults(
        [
            keel_raft::partition_change::MIN_INSYNC_REPLICAS,
            keel_raft::partition_change::UNCLEAN_LEADER_ELECTION_ENABLE,
        ]
        .iter()
        .filter_map(|k| config.values.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect(),
    );
    NodeConfig {
        node_id,
        dir: config.data_dir.join("__cluster_metadata-0"),
        fs: std::sync::Arc::new(keel_raft::fs::StdFs),
        voters,
        controller_listen: config.controller_listen,
        tls: config.controller_tls.clone(),
        broker: BrokerRegistration {
            broker_id: config.node_id,
            incarnation_id: *uuid::Uuid::new_v4().as_bytes(),
            host: config.advertise_host.clone(),
            port: i32::from(config.advertise_port),
            rack: config.rack.clone(),
            controller_addr: config.controller_listen.map(|a| a.to_string()),
            shard_count: i32::try_from(shard_count).unwrap_or(i32::MAX),
            inter_broker_host: Some(config.inter_broker_host.clone()),
            inter_broker_port: Some(i32::from(config.inter_broker_port)),
            inter_broker_shard_ports: config
                .inter_broker_shard_ports
                .iter()
                .map(|p| i32::from(*p))
                .collect(),
            previous_broker_epoch: take_clean_shutdown_epoch(&config.data_dir),
            listeners: config
                .listeners
                .iter()
                .map(|l| keel_raft::records::ListenerEndpoint {
                    name: l.name.clone(),
                    host: l.advertised_host.clone(),
                    port: i32::from(l.advertised_port),
                })
                .collect(),
        },
        heartbeat_interval: Duration::from_millis(config.broker_heartbeat_interval_ms),
        session_timeout: Duration::from_millis(config.broker_session_timeout_ms),
        election_timeout_min: Duration::from_millis(500),
        election_timeout_max: Duration::from_millis(1000),
        snapshot_entries: config.metadata_snapshot_entries,
        snapshot_interval: Duration::from_millis(config.metadata_snapshot_interval_ms),
        propose_timeout: Duration::from_secs(10),
        leader_rebalance: config
            .auto_leader_rebalance_enable
            .then(|| LeaderRebalance {
                check_interval: Duration::from_secs(config.leader_imbalance_check_interval_seconds),
                imbalance_percentage: config.leader_imbalance_per_broker_percentage,
            }),
    }
}

/// Sends `changes` to the controller as one AlterPartition request (through shard 0's
/// metadata node) and waits for its answer: an answer per change, in order, with words for the
/// log. Committed carries the partition epoch the change was committed with (the image that
/// carries it is installed or on its way); Refused that partition's error code; NoAnswer
/// says none came back (a timeout, an unreachable controller), so the change may have been
/// committed or not.
pub async fn alter_partitions(
    shard: &Rc<BrokerShard>,
    changes: &[IsrChange],
) -> Vec<(IsrChangeAnswer, String)> {
    let node_id = shard.config.node_id;
    let own_epoch = shard
        .image()
        .cluster
        .brokers
        .get(&node_id)
        .map_or(-1, |b| b.broker_epoch);
    let requests: Vec<AlterPartitionRequest> = changes
        .iter()
        .map(|change| AlterPartitionRequest {
            topic_id: change.topic_id,
            partition: change.partition,
            leader_id: node_id,
            leader_epoch: change.leader_epoch,
            partition_epoch: change.partition_epoch,
            new_isr: change
                .new_isr
                .iter()
                .map(|(broker_id, epoch)| IsrMember {
                    broker_id: *broker_id,
                    broker_epoch: if *broker_id == node_id {
                        own_epoch
                    } else {
                        *epoch
                    },
                })
                .collect(),
        })
        .collect();
    let count = requests.len();
    let answer = call(shard, move |s| async move {
        let ctl = controller(&s);
        let (tx, rx) = oneshot::channel();
        let ticket = ctl.handle.alter_partition(requests);
        ctl.alter_tickets.borrow_mut().insert(ticket, tx);
        match rx.await {
            Ok(Ok(results)) => Ok(results),
            Ok(Err(why)) => Err(OpError::new(ResponseError::UnknownServerError, why)),
            Err(_) => Err(OpError::new(
                ResponseError::UnknownServerError,
                "the metadata node went away",
            )),
        }
    })
    .await
    .and_then(|r| r);
    let results = match answer {
        Ok(results) if results.len() == count => results,
        Ok(results) => {
            let why = format!(
                "the controller answered {} of {count} partitions",
                results.len()
            );
            return vec![(IsrChangeAnswer::NoAnswer, why); count];
        }
        Err(e) => return vec![(IsrChangeAnswer::NoAnswer, e.message); count],
    };
    results
        .into_iter()
        .map(|r| {
            if r.error_code == 0 {
                let epoch = r.partition_epoch;
                return (
                    IsrChangeAnswer::Committed {
                        partition_epoch: epoch,
                    },
                    format!("committed at partition epoch {epoch}"),
                );
            }
            (
                IsrChangeAnswer::Refused { code: r.error_code },
                format!(
                    "controller refused the ISR change with {:?} (its view: leader {} epoch {}, partition epoch {}, ISR {:?})",
                    ErrorCode::from_code(r.error_code),
                    r.leader_id,
                    r.leader_epoch,
                    r.partition_epoch,
                    r.isr
                ),
            )
        })
        .collect()
}

/// Runs `f` on shard 0 (the controller), inline when already there.
pub async fn call<R, F, Fut>(shard: &Rc<BrokerShard>, f: F) -> Result<R, OpError>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = R> + 'static,
{
    if shard.id == 0 {
        return Ok(f(shard.clone()).await);
    }
    shard
        .mesh
        .call(0, f)
        .await
        .map_err(|e| OpError::new(ResponseError::UnknownServerError, e.to_string()))
}

/// Reports replicas of this broker whose logs are offline to the controller (through shard
/// 0's metadata node; see `MetadataHandle::report_offline_replicas`).
pub async fn report_offline_replicas(
    shard: &Rc<BrokerShard>,
    replicas: Vec<([u8; 16], i32)>,
) -> Result<(), OpError> {
    call(shard, move |s| async move {
        controller(&s).handle.report_offline_replicas(replicas);
    })
    .await
}

fn controller(shard: &BrokerShard) -> &Controller {
    shard
        .controller
        .as_ref()
        .expect("controller runs on shard 0")
}

/// Starts the metadata node and returns the controller for shard 0.
pub fn start(
    config: &BrokerConfig,
    shard_count: usize,
) -> Result<(Controller, std::os::unix::net::UnixStream)> {
    std::fs::create_dir_all(&config.data_dir)?;
    let (reader, writer) = std::os::unix::net::UnixStream::pair().context("doorbell socket")?;
    let cfg = node_config(config, shard_count);
    let incarnation_id = cfg.broker.incarnation_id;
    info!(
        node_id = cfg.node_id,
        voters = ?cfg.voters,
        controller_listen = ?cfg.controller_listen,
        controller_tls = cfg.tls.is_some(),
        "starting the metadata quorum node"
    );
    let traffic = cfg.controller_listen.is_some() || cfg.voters.len() > 1;
    if traffic && cfg.tls.is_none() {
        warn!(
            "the controller listener is PLAINTEXT: anyone who reaches it can propose metadata \
             records; map it to SSL in listener.security.protocol.map for mutual TLS"
        );
    }
    let handle = MetadataHandle::start(cfg, writer).context("starting the metadata node")?;
    Ok((
        Controller {
            handle: Arc::new(handle),
            incarnation_id,
            tickets: RefCell::new(HashMap::new()),
            alter_tickets: RefCell::new(HashMap::new()),
            elect_tickets: RefCell::new(HashMap::new()),
            installed: Cell::new(0),
            install_waiters: RefCell::new(Vec::new()),
            producer_ids: Cell::new((0, 0)),
            producer_id_lock: glommio::sync::Semaphore::new(1),
            shutdown_approved: Cell::new(None),
        },
        reader,
    ))
}

/// On shard 0: follows the metadata node's events, waits until this broker is registered,
/// migrates a pre-Raft data dir, then lets every shard serve.
pub async fn bootstrap(
    shard: &Rc<BrokerShard>,
    doorbell: std::os::unix::net::UnixStream,
) -> Result<()> {
    // SAFETY: the fd is owned by `doorbell`, which we give up here.
    let stream = unsafe { glommio::net::UnixStream::from_raw_fd(doorbell.into_raw_fd()) };
    glommio::spawn_local(follow_events(shard.clone(), stream)).detach();
    let node_id = shard.config.node_id;
    let started = std::time::Instant::now();
    let mut warned = false;
    let registered = |image: &MetadataImage| {
        image
            .cluster
            .brokers
            .get(&node_id)
            .is_some_and(|b| b.incarnation_id == controller(shard).incarnation_id && !b.fenced)
    };
    while !registered(&shard.image()) {
        if !warned && started.elapsed() > Duration::from_secs(5) {
            warn!("waiting for the metadata quorum to register this broker");
            warned = true;
        }
        if shard.shutdown.is_fired() {
            return Ok(());
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    // Serving starts once that image is installed everywhere (every partition log opened).
    while controller(shard).installed.get() < shard.image().version {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    migrate_legacy(shard).await?;
    info!(
        version = shard.image().version,
        topics = shard.image().topics.len(),
        brokers = shard.image().brokers.len(),
        "metadata ready"
    );
    for target in 0..shard.count {
        if target == shard.id {
            shard.ready.fire();
        } else {
            shard
                .mesh
                .call(target, |s| async move { s.ready.fire() })
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    Ok(())
}

/// Reads the doorbell and handles the metadata node's events until shutdown.
async fn follow_events(shard: Rc<BrokerShard>, mut doorbell: glommio::net::UnixStream) {
    let ctl = controller(&shard);
    let mut buf = [0u8; 256];
    loop {
        let mut newest: Option<Arc<ClusterImage>> = None;
        for event in ctl.handle.drain_events() {
            match event {
                Event::Image(img) => newest = Some(img),
                Event::Done { ticket, result } => {
                    if let Some(tx) = ctl.tickets.borrow_mut().remove(&ticket) {
                        let _ = tx.send(result);
                    }
                }
                Event::AlterPartitionDone { ticket, result } => {
                    if let Some(tx) = ctl.alter_tickets.borrow_mut().remove(&ticket) {
                        let _ = tx.send(result);
                    }
                }
                Event::ControlledShutdownDone { approved } => {
                    ctl.shutdown_approved.set(Some(approved))
                }
                Event::ElectLeadersDone { ticket, result } => {
                    if let Some(tx) = ctl.elect_tickets.borrow_mut().remove(&ticket) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
        if let Some(cluster) = newest {
            if cluster.applied_index >= ctl.installed.get() || ctl.installed.get() == 0 {
                let index = cluster.applied_index;
                let image = MetadataImage::from_cluster(cluster, &shard.image(), shard.count);
                if let Err(e) = publish(&shard, image).await {
                    warn!(error = %e.message, "installing metadata image failed");
                }
                ctl.installed.set(index);
                let ready: Vec<oneshot::Sender<()>> = {
                    let mut waiters = ctl.install_waiters.borrow_mut();
                    let (done, wait): (Vec<_>, Vec<_>) =
                        waiters.drain(..).partition(|(i, _)| *i <= index);
                    *waiters = wait;
                    done.into_iter().map(|(_, tx)| tx).collect()
                };
                for tx in ready {
                    let _ = tx.send(());
                }
            }
            continue;
        }
        match doorbell.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Installs `image` on every shard and waits for all of them.
async fn publish(shard: &Rc<BrokerShard>, image: MetadataImage) -> Result<(), OpError> {
    let image = Arc::new(image);
    let mut installs = Vec::new();
    for target in 0..shard.count {
        let image = image.clone();
        let shard = shard.clone();
        installs.push(async move {
            if target == shard.id {
                shard.install_image(image).await;
                crate::replication::apply_image(&shard).await;
                Ok(())
            } else {
                shard
                    .mesh
                    .call(target, move |s| async move {
                        s.install_image(image).await;
                        crate::replication::apply_image(&s).await;
                    })
                    .await
            }
        });
    }
    for r in join_all(installs).await {
        r.map_err(|e| OpError::new(ResponseError::UnknownServerError, e.to_string()))?;
    }
    Ok(())
}

/// Waits until the image of log index `index` (or a later one) is installed on every shard.
async fn wait_installed(ctl: &Controller, index: u64) {
    if ctl.installed.get() < index {
        let (tx, rx) = oneshot::channel();
        ctl.install_waiters.borrow_mut().push((index, tx));
        let _ = rx.await;
    }
}

/// ElectLeaders (on shard 0): the controller decides and commits the elections; the answer,
/// per request entry, comes once the image holding them is installed on every shard here, so
/// the client's next Metadata from this broker names the new leaders.
pub async fn elect_leaders(
    shard: Rc<BrokerShard>,
    request: ElectLeadersRequest,
) -> Result<Vec<TopicElectionResults>, OpError> {
    let ctl = controller(&shard);
    let (tx, rx) = oneshot::channel();
    let ticket = ctl.handle.elect_leaders(request);
    ctl.elect_tickets.borrow_mut().insert(ticket, tx);
    match rx.await {
        Ok(Ok((results, index))) => {
            wait_installed(ctl, index).await;
            Ok(results)
        }
        Ok(Err(why)) => Err(OpError::new(
            ResponseError::RequestTimedOut,
            format!("leader election not committed: {why}"),
        )),
        Err(_) => Err(OpError::new(
            ResponseError::UnknownServerError,
            "the metadata node went away",
        )),
    }
}

/// Proposes one record batch and waits until it is committed and (if applied) installed here.
async fn propose(shard: &Rc<BrokerShard>, records: Vec<Record>) -> Result<(), OpError> {
    let ctl = controller(shard);
    let (tx, rx) = oneshot::channel();
    let ticket = ctl.handle.propose(&records);
    ctl.tickets.borrow_mut().insert(ticket, tx);
    let applied = match rx.await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => {
            return Err(OpError::new(
                ResponseError::RequestTimedOut,
                format!("metadata change not committed: {e}"),
            ))
        }
        Err(_) => {
            return Err(OpError::new(
                ResponseError::UnknownServerError,
                "metadata node stopped",
            ))
        }
    };
    if ctl.installed.get() < applied.index {
        let (tx, rx) = oneshot::channel();
        ctl.install_waiters.borrow_mut().push((applied.index, tx));
        let _ = rx.await;
    }
    match applied.outcome {
        ApplyOutcome::Applied => Ok(()),
        ApplyOutcome::Rejected { code, message } => Err(OpError {
            code: ErrorCode::from_code(code),
            message,
        }),
    }
}

/// Moves the topics of a pre-Raft data dir (`keel-metadata.json`) into the Raft log, keeping
/// their ids, partitions, leader epochs (+1: a new term) and configs, then renames the file.
async fn migrate_legacy(shard: &Rc<BrokerShard>) -> Result<()> {
    let path = shard.config.data_dir.join(LEGACY_FILE);
    let Some(legacy) = LegacyImage::load(&path)? else {
        return Ok(());
    };
    let node = shard.config.node_id;
    for t in legacy.topics.values() {
        let mut records = vec![Record::TopicCreated {
            name: t.name.clone(),
            topic_id: t.id,
        }];
        for p in &t.partitions {
            records.push(Record::PartitionCreated {
                topic_id: t.id,
                partition: p.index,
                replicas: vec![node],
                isr: vec![node],
                leader: node,
                leader_epoch: p.leader_epoch + 1,
            });
        }
        for (k, v) in &t.configs {
            records.push(Record::ConfigChanged {
                resource_type: RESOURCE_TOPIC,
                resource_name: t.name.clone(),
                name: k.clone(),
                value: Some(v.clone()),
            });
        }
        match propose(shard, records).await {
            Ok(()) => {
                info!(topic = %t.name, partitions = t.partitions.len(), "migrated topic into the metadata log")
            }
            Err(e) if e.code == ErrorCode::of(ResponseError::TopicAlreadyExists) => {}
            Err(e) => anyhow::bail!(
                "migrating topic {} from {}: {}",
                t.name,
                path.display(),
                e.message
            ),
        }
    }
    let done = path.with_extension("json.migrated");
    std::fs::rename(&path, &done)?;
    info!(from = %path.display(), to = %done.display(), "pre-Raft metadata migrated");
    Ok(())
}

fn new_topic_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

fn check_spec(
    config: &BrokerConfig,
    image: &MetadataImage,
    spec: &TopicSpec,
) -> Result<(i32, i16), OpError> {
    validate_topic_name(&spec.name)
        .map_err(|m| OpError::new(ResponseError::InvalidTopicException, m))?;
    if image.topic(&spec.name).is_some() {
        return Err(OpError::new(
            ResponseError::TopicAlreadyExists,
            format!("Topic '{}' already exists.", spec.name),
        ));
    }
    let partitions = if spec.num_partitions == -1 {
        config.num_partitions
    } else {
        spec.num_partitions
    };
    if !(1..=MAX_PARTITIONS).contains(&partitions) {
        return Err(OpError::new(
            ResponseError::InvalidPartitions,
            "Number of partitions must be between 1 and 100000.",
        ));
    }
    let rf = if !spec.assignments.is_empty() {
        spec.assignments[0].len() as i16
    } else if spec.replication_factor == -1 {
        config.default_replication_factor
    } else {
        spec.replication_factor
    };
    check_replication_factor(image, rf)?;
    for (k, v) in &spec.configs {
        validate_topic_config(k, v)
            .map_err(|e| OpError::new(ResponseError::InvalidConfig, format!("{e:#}")))?;
    }
    Ok((partitions, rf))
}

fn check_replication_factor(image: &MetadataImage, rf: i16) -> Result<(), OpError> {
    if rf < 1 {
        return Err(OpError::new(
            ResponseError::InvalidReplicationFactor,
            "Replication factor must be larger than 0.",
        ));
    }
    let live = image.brokers.len();
    if live < rf as usize {
        return Err(OpError::new(
            ResponseError::InvalidReplicationFactor,
            format!("Replication factor: {rf} larger than available brokers: {live}."),
        ));
    }
    Ok(())
}

/// Places `count` new partitions of `rf` replicas on live brokers: each partition's leader
/// is the live broker leading the fewest partitions so far (existing and new), its followers
/// the next brokers in a rack-alternating order (so replicas spread over racks when brokers
/// have them).
pub fn place_replicas(image: &MetadataImage, count: i32, rf: i16) -> Vec<Vec<i32>> {
    let mut by_rack: BTreeMap<Option<String>, Vec<i32>> = BTreeMap::new();
    for b in image.brokers.values() {
        by_rack.entry(b.rack.clone()).or_default().push(b.id);
    }
    // Rack-alternating order: first broker of each rack, then the second of each, ...
    let mut order: Vec<i32> = Vec::new();
    let depth = by_rack.values().map(Vec::len).max().unwrap_or(0);
    for i in 0..depth {
        for ids in by_rack.values() {
            if let Some(id) = ids.get(i) {
                order.push(*id);
            }
        }
    }
    if order.is_empty() {
        return Vec::new();
    }
    let mut led: HashMap<i32, usize> = order.iter().map(|id| (*id, 0)).collect();
    for t in image.topics.values() {
        for p in &t.partitions {
            if let Some(n) = led.get_mut(&p.leader) {
                *n += 1;
            }
        }
    }
    (0..count)
        .map(|_| {
            let (pos, leader) = order
                .iter()
                .enumerate()
                .min_by_key(|(pos, id)| (led[id], *pos))
                .map(|(pos, id)| (pos, *id))
                .expect("order is not empty");
            *led.get_mut(&leader).expect("leader is live") += 1;
            (0..rf as usize)
                .map(|k| order[(pos + k) % order.len()])
                .collect()
        })
        .collect()
}

fn partition_records(topic_id: [u8; 16], first: i32, replicas: Vec<Vec<i32>>) -> Vec<Record> {
    let partitions = replicas.into_iter().map(|r| (r.clone(), r)).collect();
    new_partition_records(topic_id, first, partitions)
}

/// A partition to create: its replicas and its ISR.
type NewPartition = (Vec<i32>, Vec<i32>);

/// Records creating partitions `first..` of a topic from their (replicas, ISR); each leads
/// with the first replica in its ISR.
fn new_partition_records(
    topic_id: [u8; 16],
    first: i32,
    partitions: Vec<NewPartition>,
) -> Vec<Record> {
    partitions
        .into_iter()
        .enumerate()
        .map(|(i, (replicas, isr))| Record::PartitionCreated {
            topic_id,
            partition: first + i as i32,
            leader: replicas
                .iter()
                .copied()
                .find(|r| isr.contains(r))
                .unwrap_or(-1),
            isr,
            replicas,
            leader_epoch: 0,
        })
        .collect()
}

/// Checks a manual assignment: every replica a live broker, no duplicates.
fn check_assignments(image: &MetadataImage, assignments: &[Vec<i32>]) -> Result<(), OpError> {
    for a in assignments {
        let mut seen = a.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != a.len() || a.iter().any(|b| !image.brokers.contains_key(b)) {
            return Err(OpError::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "replica assignment {a:?} names a broker that is not live or names one twice"
                ),
            ));
        }
    }
    Ok(())
}

/// A topic as it will be created, and the records that create it.
type TopicPlan = (Arc<TopicMeta>, Vec<Record>);

/// Creates topics; each result is the new topic or why not. Nothing changes when
/// `validate_only`.
pub async fn create_topics(
    shard: Rc<BrokerShard>,
    specs: Vec<TopicSpec>,
    validate_only: bool,
) -> Vec<Result<Arc<TopicMeta>, OpError>> {
    let image = shard.image();
    let mut plans: Vec<Result<TopicPlan, OpError>> = Vec::new();
    for spec in &specs {
        plans.push((|| {
            let (partitions, rf) = check_spec(&shard.config, &image, spec)?;
            let replicas = if spec.assignments.is_empty() {
                place_replicas(&image, partitions, rf)
            } else {
                check_assignments(&image, &spec.assignments)?;
                spec.assignments.clone()
            };
            let id = new_topic_id();
            let mut records = vec![Record::TopicCreated {
                name: spec.name.clone(),
                topic_id: id,
            }];
            records.extend(partition_records(id, 0, replicas.clone()));
            for (k, v) in &spec.configs {
                records.push(Record::ConfigChanged {
                    resource_type: RESOURCE_TOPIC,
                    resource_name: spec.name.clone(),
                    name: k.clone(),
                    value: Some(v.clone()),
                });
            }
            let planned = Arc::new(TopicMeta {
                name: spec.name.clone(),
                id,
                partitions: replicas
                    .iter()
                    .enumerate()
                    .map(|(i, r)| crate::metadata::PartitionMeta {
                        index: i as i32,
                        shard: keel_shard::shard_for_partition(id, i as i32, shard.count).0,
                        leader_epoch: 0,
                        leader: r[0],
                        replicas: r.clone(),
                        isr: r.clone(),
                        elr: Vec::new(),
                        partition_epoch: 0,
                    })
                    .collect(),
                replication_factor: rf,
                configs: spec.configs.clone(),
            });
            Ok((planned, records))
        })());
    }
    if validate_only {
        return plans.into_iter().map(|p| p.map(|(t, _)| t)).collect();
    }
    let runs = plans.into_iter().map(|plan| {
        let shard = shard.clone();
        async move {
            let (planned, records) = plan?;
            propose(&shard, records).await?;
            let topic = shard
                .image()
                .topic(&planned.name)
                .cloned()
                .unwrap_or(planned);
            info!(topic = %topic.name, partitions = topic.partitions.len(), "topic created");
            Ok(topic)
        }
    });
    join_all(runs.collect::<Vec<_>>()).await
}

/// Deletes topics by name.
pub async fn delete_topics(
    shard: Rc<BrokerShard>,
    names: Vec<String>,
) -> Vec<Result<Arc<TopicMeta>, OpError>> {
    let image = shard.image();
    let runs = names.into_iter().map(|name| {
        let shard = shard.clone();
        let topic = image.topic(&name).cloned();
        async move {
            let topic = topic.ok_or_else(|| {
                OpError::new(
                    ResponseError::UnknownTopicOrPartition,
                    "This server does not host this topic-partition.",
                )
            })?;
            propose(
                &shard,
                vec![Record::TopicDeleted {
                    name: topic.name.clone(),
                    topic_id: topic.id,
                }],
            )
            .await?;
            info!(topic = %topic.name, "topic deleted");
            Ok(topic)
        }
    });
    join_all(runs.collect::<Vec<_>>()).await
}

/// Producer ids a broker takes from the metadata log at a time (Kafka's block size).
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;
/// Tries at taking a block when other brokers take theirs at the same moment.
const PRODUCER_ID_BLOCK_TRIES: usize = 10;

/// A producer id no broker handed out before (on shard 0): from this broker's block, taking a
/// new block of [`PRODUCER_ID_BLOCK_SIZE`] through the metadata log when it runs out, so ids
/// are unique across the cluster and across restarts (a restarted broker takes a new block;
/// the rest of its old one is never used).
pub async fn allocate_producer_id(shard: Rc<BrokerShard>) -> Result<i64, OpError> {
    let ctl = controller(&shard);
    let _permit = ctl.producer_id_lock.acquire_permit(1).await.map_err(|e| {
        OpError::new(
            ResponseError::UnknownServerError,
            format!("producer id lock: {e}"),
        )
    })?;
    let (next, end) = ctl.producer_ids.get();
    if next < end {
        ctl.producer_ids.set((next + 1, end));
        return Ok(next);
    }
    let mut last_error = None;
    for _ in 0..PRODUCER_ID_BLOCK_TRIES {
        let first = shard.image().cluster.next_producer_id;
        if first > i64::MAX - i64::from(PRODUCER_ID_BLOCK_SIZE) {
            return Err(OpError::new(
                ResponseError::UnknownServerError,
                "producer ids exhausted",
            ));
        }
        let record = Record::ProducerIdsAllocated {
            broker_id: shard.config.node_id,
            first_producer_id: first,
            block_size: PRODUCER_ID_BLOCK_SIZE,
        };
        match propose(&shard, vec![record]).await {
            Ok(()) => {
                let end = first + i64::from(PRODUCER_ID_BLOCK_SIZE);
                ctl.producer_ids.set((first + 1, end));
                info!(first, end, "took a block of producer ids");
                return Ok(first);
            }
            // Another broker took that block first: the image has moved on; take the next.
            Err(e) if e.code == ErrorCode::of(ResponseError::InvalidRequest) => {
                last_error = Some(e)
            }
            Err(e) => return Err(e),
        }
    }
    Err(last_error
        .unwrap_or_else(|| OpError::new(ResponseError::UnknownServerError, "no producer id block")))
}

/// Creates an internal, compacted topic (`__consumer_offsets`, `__transaction_state`) with
/// replication factor 1 if it does not exist yet; a concurrent creation is a success.
pub async fn ensure_internal_topic(
    shard: &Rc<BrokerShard>,
    name: &str,
    partitions: i32,
    segment_bytes: i64,
    replication_factor: i16,
    min_insync_replicas: Option<i32>,
) -> Result<(), OpError> {
    if shard.image().topic(name).is_some() {
        return Ok(());
    }
    let live = shard.image().brokers.len().clamp(1, i16::MAX as usize) as i16;
    let rf = replication_factor.min(live);
    if rf < replication_factor {
        warn_internal_rf(name, rf, replication_factor);
    }
    let mut configs = BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), segment_bytes.to_string()),
    ]);
    if let Some(min) = min_insync_replicas {
        configs.insert(
            "min.insync.replicas".to_string(),
            min.min(i32::from(rf)).to_string(),
        );
    }
    let spec = TopicSpec {
        name: name.to_string(),
        num_partitions: partitions,
        replication_factor: rf,
        configs,
        assignments: Vec::new(),
    };
    let results = call(shard, move |s| create_topics(s, vec![spec], false)).await?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) if e.code == ErrorCode::of(ResponseError::TopicAlreadyExists) => Ok(()),
        Some(Err(e)) => Err(e),
        None => Err(OpError::new(
            ResponseError::UnknownServerError,
            "the controller gave no answer",
        )),
    }
}

fn warn_internal_rf(name: &str, rf: i16, wanted: i16) {
    warn!(
        topic = name,
        replication_factor = rf,
        wanted,
        "internal topic has fewer replicas than its replication factor setting (fewer brokers were alive when it was created); reassign its partitions to raise it"
    );
}

/// On shard 0, every `interval`: repeats the warning for internal topics whose replication
/// factor is below their setting.
pub async fn warn_short_internal_topics(shard: Rc<BrokerShard>, interval: Duration) {
    while shard.sleep_unless_shutdown(interval).await {
        let image = shard.image();
        for (name, wanted) in [
            (
                keel_coordinator::OFFSETS_TOPIC,
                shard.config.offsets_topic_replication_factor,
            ),
            (
                keel_coordinator::TRANSACTION_STATE_TOPIC,
                shard.config.transaction_state_log_replication_factor,
            ),
        ] {
            if let Some(t) = image.topic(name) {
                if t.replication_factor < wanted {
                    warn_internal_rf(name, t.replication_factor, wanted);
                }
            }
        }
    }
}

/// The topic, or UNKNOWN_TOPIC_OR_PARTITION with Kafka's message.
fn known_topic<'a>(image: &'a MetadataImage, name: &str) -> Result<&'a Arc<TopicMeta>, OpError> {
    image.topic(name).ok_or_else(|| {
        OpError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("The topic '{name}' does not exist."),
        )
    })
}

/// One topic's CreatePartitions request: the new partition count and, optionally, the
/// replicas of each new partition (Kafka's manual assignment; None: placed as CreateTopics
/// places them).
pub struct PartitionsRequest {
    pub topic: String,
    pub count: i32,
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// Grows each named topic to the given partition count, on the brokers the request assigns
/// or on the ones `place_replicas` picks.
pub async fn create_partitions(
    shard: Rc<BrokerShard>,
    requests: Vec<PartitionsRequest>,
    validate_only: bool,
) -> Vec<Result<(), OpError>> {
    let image = shard.image();
    let runs = requests.into_iter().map(|r| {
        let shard = shard.clone();
        let image = image.clone();
        async move {
            let topic = known_topic(&image, &r.topic)?;
            let current = topic.partitions.len() as i32;
            let count = r.count;
            if count <= current {
                let msg = if count == current {
                    format!("Topic already has {current} partitions.")
                } else {
                    format!("Topic currently has {current} partitions, which is higher than the requested {count}.")
                };
                return Err(OpError::new(ResponseError::InvalidPartitions, msg));
            }
            if count > MAX_PARTITIONS {
                return Err(OpError::new(
                    ResponseError::InvalidPartitions,
                    format!("Number of partitions must be at most {MAX_PARTITIONS}."),
                ));
            }
            let rf = topic.replication_factor.max(1);
            let partitions = match &r.assignments {
                Some(assignments) => {
                    manual_partitions(&image.cluster, current, count, rf, assignments)?
                }
                None => {
                    check_replication_factor(&image, rf)?;
                    place_replicas(&image, count - current, rf)
                        .into_iter()
                        .map(|replicas| (replicas.clone(), replicas))
                        .collect()
                }
            };
            if validate_only {
                return Ok(());
            }
            propose(&shard, new_partition_records(topic.id, current, partitions)).await
        }
    });
    join_all(runs.collect::<Vec<_>>()).await
}

/// Checks a CreatePartitions request's manual assignment as Kafka's controller does: one
/// replica list per new partition, each of the topic's replication factor, no broker twice,
/// every broker registered, and at least one of them unfenced (INVALID_REPLICA_ASSIGNMENT
/// otherwise, with Kafka's message). Each new partition's (replicas, ISR): its unfenced
/// replicas are its ISR, the first of them its leader.
fn manual_partitions(
    cluster: &ClusterImage,
    current: i32,
    count: i32,
    rf: i16,
    assignments: &[Vec<i32>],
) -> Result<Vec<NewPartition>, OpError> {
    let invalid = |m: String| OpError::new(ResponseError::InvalidReplicaAssignment, m);
    let additional = (count - current) as usize;
    if assignments.len() != additional {
        return Err(invalid(format!(
            "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
            assignments.len()
        )));
    }
    assignments
        .iter()
        .enumerate()
        .map(|(i, replicas)| {
            if replicas.is_empty() {
                return Err(invalid(
                    "The manual partition assignment includes an empty replica list.".into(),
                ));
            }
            let mut sorted = replicas.clone();
            sorted.sort_unstable();
            for (k, id) in sorted.iter().enumerate() {
                if !cluster.brokers.contains_key(id) {
                    return Err(invalid(format!(
                        "The manual partition assignment includes broker {id}, but no such broker is registered."
                    )));
                }
                if k > 0 && sorted[k - 1] == *id {
                    return Err(invalid(format!(
                        "The manual partition assignment includes the broker {id} more than once."
                    )));
                }
            }
            if replicas.len() != rf as usize {
                return Err(invalid(format!(
                    "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                    replicas.len()
                )));
            }
            let isr: Vec<i32> = replicas
                .iter()
                .copied()
                .filter(|id| cluster.brokers.get(id).is_some_and(|b| !b.fenced))
                .collect();
            if isr.is_empty() {
                return Err(invalid(format!(
                    "All brokers specified in the manual partition assignment for partition {} are fenced or in controlled shutdown.",
                    current as usize + i
                )));
            }
            Ok((replicas.clone(), isr))
        })
        .collect()
}

/// Changes topic config overrides.
pub async fn alter_topic_configs(
    shard: Rc<BrokerShard>,
    changes: Vec<(String, ConfigChange)>,
    validate_only: bool,
) -> Vec<Result<(), OpError>> {
    let image = shard.image();
    let runs = changes.into_iter().map(|(name, change)| {
        let shard = shard.clone();
        let image = image.clone();
        async move {
            let topic = known_topic(&image, &name)?;
            let scope = (RESOURCE_TOPIC, name.as_str());
            let check: Validator = validate_topic_config;
            alter_overrides(&shard, scope, &topic.configs, &change, check, validate_only).await
        }
    });
    join_all(runs.collect::<Vec<_>>()).await
}

/// Changes the dynamic config overrides of brokers (resource name: a broker id, or `""` for
/// the cluster-wide default); see `config::DYNAMIC_BROKER_KEYS`.
pub async fn alter_broker_configs(
    shard: Rc<BrokerShard>,
    changes: Vec<(String, ConfigChange)>,
    validate_only: bool,
) -> Vec<Result<(), OpError>> {
    let image = shard.image();
    let runs = changes.into_iter().map(|(name, change)| {
        let shard = shard.clone();
        let image = image.clone();
        async move {
            if !name.is_empty() && name.parse::<i32>().is_err() {
                return Err(OpError::new(
                    ResponseError::InvalidRequest,
                    format!(
                        "broker resource {name:?} is neither a broker id nor \"\" (every broker)"
                    ),
                ));
            }
            let empty = BTreeMap::new();
            let current = image.cluster.broker_configs.get(&name).unwrap_or(&empty);
            let scope = (RESOURCE_BROKER, name.as_str());
            let check: Validator = validate_dynamic_broker_config;
            alter_overrides(&shard, scope, current, &change, check, validate_only).await
        }
    });
    join_all(runs.collect::<Vec<_>>()).await
}

/// Checks one config's name and value.
type Validator = fn(&str, &str) -> Result<()>;

/// Applies `change` to one resource's overrides (`scope`: Kafka's resource type and name),
/// each value checked by `check`, and commits what differs (nothing under `validate_only`).
async fn alter_overrides(
    shard: &Rc<BrokerShard>,
    scope: (i8, &str),
    current: &BTreeMap<String, String>,
    change: &ConfigChange,
    check: Validator,
    validate_only: bool,
) -> Result<(), OpError> {
    let next = apply_change(current, change, check)?;
    if validate_only || next == *current {
        return Ok(());
    }
    propose(shard, config_records(scope.0, scope.1, current, &next)).await
}

/// The records that take resource `name`'s overrides from `current` to `next`: each set or
/// changed value, then each removed one.
fn config_records(
    resource_type: i8,
    name: &str,
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
) -> Vec<Record> {
    let changed = next
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| (k, Some(v.clone())));
    let removed = current
        .keys()
        .filter(|k| !next.contains_key(*k))
        .map(|k| (k, None));
    changed
        .chain(removed)
        .map(|(k, value)| Record::ConfigChanged {
            resource_type,
            resource_name: name.to_string(),
            name: k.clone(),
            value,
        })
        .collect()
}

/// The configs whose values are comma-separated lists (APPEND and SUBTRACT apply to them).
const LIST_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
];

fn apply_change(
    current: &BTreeMap<String, String>,
    change: &ConfigChange,
    validate: Validator,
) -> Result<BTreeMap<String, String>, OpError> {
    let invalid = |m: String| OpError::new(ResponseError::InvalidConfig, m);
    let next = match change {
        ConfigChange::Replace(all) => all.clone(),
        ConfigChange::Incremental(ops) => {
            let mut next = current.clone();
            for (name, op, value) in ops {
                match op {
                    0 => {
                        let v = value
                            .clone()
                            .ok_or_else(|| invalid(format!("no value to SET for {name}")))?;
                        next.insert(name.clone(), v);
                    }
                    1 => {
                        next.remove(name);
                    }
                    2 | 3 => {
                        if !LIST_CONFIGS.contains(&name.as_str()) {
                            return Err(invalid(format!(
                                "{name} is not a list config; APPEND/SUBTRACT apply to lists"
                            )));
                        }
                        let v = value.clone().unwrap_or_default();
                        let mut items: Vec<String> = next
                            .get(name)
                            .map(|s| {
                                s.split(',')
                                    .map(|x| x.trim().to_string())
                                    .filter(|x| !x.is_empty())
                                    .collect()
                            })
                            .unwrap_or_default();
                        for item in v.split(',').map(str::trim).filter(|x| !x.is_empty()) {
                            if *op == 2 && !items.iter().any(|x| x == item) {
                                items.push(item.to_string());
                            } else if *op == 3 {
                                items.retain(|x| x != item);
                            }
                        }
                        if items.is_empty() {
                            next.remove(name);
                        } else {
                            next.insert(name.clone(), items.join(","));
                        }
                    }
                    other => {
                        return Err(OpError::new(
                            ResponseError::InvalidRequest,
                            format!("unknown config operation {other}"),
                        ))
                    }
                }
            }
            next
        }
    };
    for (k, v) in &next {
        validate(k, v).map_err(|e| invalid(format!("{e:#}")))?;
    }
    Ok(next)
}

#[cfg(test)]
mod tests;
