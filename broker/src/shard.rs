//! One broker shard's state: the partitions it owns, the metadata image it serves from, its
//! waiting fetches and coordinators.
//!
//! Each shard (one per core) owns the logs of the partitions the metadata image assigns to
//! it and runs jobs other shards send it over the mesh. Shard 0 also holds the controller.
//! All state here is shard-local (`Cell`/`RefCell`); borrows never live across `.await`.
//! Start-up and shut-down are in [`crate::startup`], the timers in
//! [`crate::coordination::timers`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use keel_shard::{Event, Mesh};
use keel_storage::{Log, LogConfig, StorageError};
use keel_vocab::Clock;
use tracing::{error, info, warn};

use crate::config::BrokerConfig;
use crate::controller::state::Controller;
use crate::coordination::parking::DataWaiters;
use crate::metadata::{partition_dir, MetadataImage, PartitionMeta, TopicMeta};
use crate::ops::metrics::ShardCounters;
use crate::replication::state::AlterPartitionManager;
use crate::replication::state::{PartitionReplication, ReplicaFetchers, ReplicationQuotas};

/// A partition whose log this shard owns.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub topic_id: [u8; 16],
    pub log: Log,
    pub leader_epoch: Cell<i32>,
    /// This broker's id (what `is_leader` compares the image's leader with).
    pub node_id: i32,
    /// Leader, replicas, ISR and the followers' progress (see `replication`).
    pub replication: PartitionReplication,
    /// Fetches waiting for the high watermark to move.
    pub waiters: DataWaiters,
    /// min.insync.replicas of the topic: acks=all needs that many in-sync replicas.
    pub min_insync_replicas: Cell<i32>,
    /// flush.policy=interval: sync period and last sync.
    pub(crate) flush_ms: Cell<u64>,
    pub(crate) last_sync: Cell<Instant>,
    pub(crate) syncing: Cell<bool>,
}

impl Partition {
    /// Whether this broker leads the partition and has taken up that leadership
    /// (`replication::apply_image` recorded the epoch, its start offset and the followers):
    /// the owner checks it at every append and read, whatever the routing shard saw. Between
    /// installing an image that names this broker leader and taking the role up (an await on
    /// the leader-epoch checkpoint's fdatasync) it does not serve as leader: an append then
    /// would be stamped with the previous epoch, and ListOffsets would judge KIP-207's epoch
    /// start by the previous one (Kafka holds the partition's lock through `makeLeader`).
    pub fn is_leader(&self) -> bool {
        self.with_assignment(|a| self.replication.local.borrow().is_leader(a))
    }

    /// Runs `f` on the partition as the installed image has it.
    pub fn with_assignment<R>(
        &self,
        f: impl FnOnce(&keel_storage::replication::Assignment<'_>) -> R,
    ) -> R {
        self.replication.with_assignment(self.leader_epoch.get(), f)
    }

    /// Whether the installed image names this broker the partition's leader, taken up or not.
    pub fn leads_per_image(&self) -> bool {
        self.replication.leader.get() == self.node_id
    }

    fn take_assignment(&self, p: &PartitionMeta) {
        // Before any request can reach it: a replicated log's high watermark follows the
        // ISR, never its own flushes.
        self.log.set_replicated(p.replicas.len() > 1);
        self.leader_epoch.set(p.leader_epoch);
        self.replication.set_from_image(
            p.leader,
            p.leader_epoch,
            &p.replicas,
            &p.isr,
            &p.elr,
            p.partition_epoch,
        );
    }
}

/// A partition this shard owns whose log could not be opened.
struct OfflinePartition {
    /// The topic it was opened for (a topic deleted and created again is opened afresh).
    topic_id: [u8; 16],
    reason: String,
    /// A corrupt segment: only an operator can repair it, so later metadata images do not
    /// retry the open (the broker picks the repair up at its next start). Other failures are
    /// retried with every image.
    needs_operator: bool,
}

pub struct BrokerShard {
    pub id: usize,
    pub count: usize,
    pub mesh: Rc<Mesh<BrokerShard>>,
    pub config: Arc<BrokerConfig>,
    /// This shard's own copy of the installed image: requests clone an `Rc` (no atomic
    /// refcount shared between cores is touched per request).
    image: RefCell<Rc<MetadataImage>>,
    partitions: RefCell<HashMap<String, HashMap<i32, Rc<Partition>>>>,
    /// Owned partitions whose log failed to open, by (topic, index): requests for them get
    /// KAFKA_STORAGE_ERROR rather than NOT_LEADER_OR_FOLLOWER.
    offline: RefCell<HashMap<(String, i32), OfflinePartition>>,
    pub shutdown: Event,
    pub counters: ShardCounters,
    /// Present on shard 0 only.
    pub controller: Option<Controller>,
    /// Fires once the first metadata image is installed.
    pub ready: Rc<Event>,
    /// Fetches of this shard waiting for data, by token (see `handlers::fetch`).
    fetch_waits: RefCell<HashMap<u64, Rc<Event>>>,
    next_fetch_wait: Cell<u64>,
    /// The consumer groups of the `__consumer_offsets` partitions this shard owns.
    pub groups: crate::group::shard_state::GroupCoordinator,
    /// The transaction coordinators of the `__transaction_state` partitions this shard owns.
    pub txns: crate::txn::shard_state::TxnShard,
    /// The wall clock everything on this shard stamps and expires by.
    pub clock: Rc<dyn Clock>,
    /// The fetchers of the partitions this shard follows (see `replication::fetcher`).
    pub replica_fetchers: ReplicaFetchers,
    /// This shard's share of the replication throttles (see `replication::throttle`).
    pub replication_quotas: ReplicationQuotas,
    /// The ISR changes this shard's leaders send the controller, one request at a time (see
    /// `replication::leader::alter_partition`).
    pub alter_partition: AlterPartitionManager<Rc<Partition>>,
    /// What starts when this broker becomes the leader of a partition of an internal topic
    /// (the coordinator loads its state from it), and what runs when that leadership leaves
    /// (the coordinator forgets it); set by [`crate::startup`], so that this module does not
    /// depend on the coordinators that depend on it.
    loaders: Vec<(&'static str, PartitionLoader, PartitionUnloader)>,
    /// The task queue of authentication work (PLAIN's PBKDF2), at a tenth of the default
    /// shares; set at start (see [`crate::startup`]).
    auth_queue: std::cell::OnceCell<glommio::TaskQueueHandle>,
    /// With `authorizer.class.name` set: the ACLs of the installed image, indexed, with the
    /// static settings; rebuilt when an image changes the ACLs.
    authorizer: RefCell<Option<Rc<keel_auth::acl::Authorizer>>>,
    /// The client quotas of the installed image, indexed; rebuilt when an image changes them.
    quota_index: RefCell<Rc<crate::quota::QuotaIndex>>,
    /// The broker's quota rates, shared by every shard (see [`crate::quota`]).
    pub quota_sensors: Arc<crate::quota::Sensors>,
}

/// Starts loading a coordinator's state from a partition this broker now leads.
pub type PartitionLoader = fn(&Rc<BrokerShard>, Rc<Partition>);
/// Drops a coordinator's state of a partition this broker no longer leads (Kafka's
/// `onResignation`).
pub type PartitionUnloader = fn(&Rc<BrokerShard>, &Partition);

impl BrokerShard {
    /// A shard with no partitions and an empty metadata image; `controller` on shard 0 only;
    /// `loaders` by internal topic name. Called once per shard, by `startup::run_shard`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: usize,
        count: usize,
        mesh: Rc<Mesh<BrokerShard>>,
        config: Arc<BrokerConfig>,
        controller: Option<Controller>,
        clock: Rc<dyn Clock>,
        loaders: Vec<(&'static str, PartitionLoader, PartitionUnloader)>,
        quota_sensors: Arc<crate::quota::Sensors>,
    ) -> Rc<Self> {
        Rc::new(BrokerShard {
            id,
            count,
            mesh,
            config,
            image: RefCell::new(Rc::new(MetadataImage::default())),
            partitions: RefCell::new(HashMap::new()),
            offline: RefCell::new(HashMap::new()),
            shutdown: Event::default(),
            counters: ShardCounters::default(),
            controller,
            ready: Event::new(),
            fetch_waits: RefCell::new(HashMap::new()),
            next_fetch_wait: Cell::new(0),
            groups: crate::group::shard_state::GroupCoordinator::default(),
            txns: crate::txn::shard_state::TxnShard::default(),
            clock,
            replica_fetchers: ReplicaFetchers::default(),
            replication_quotas: ReplicationQuotas::default(),
            alter_partition: AlterPartitionManager::default(),
            loaders,
            auth_queue: std::cell::OnceCell::new(),
            authorizer: RefCell::new(None),
            quota_index: RefCell::new(Rc::default()),
            quota_sensors,
        })
    }

    /// The authorizer, when `authorizer.class.name` is set (`None`: every request is
    /// allowed). Until the first image is installed it allows super users only.
    pub fn authorizer(&self) -> Option<Rc<keel_auth::acl::Authorizer>> {
        let settings = self.config.authorizer.as_ref()?;
        let current = self.authorizer.borrow().clone();
        current.or_else(|| {
            Some(Rc::new(keel_auth::acl::Authorizer {
                index: keel_auth::acl::AclIndex::default(),
                super_users: settings.super_users.iter().cloned().collect(),
                allow_if_no_acl: false,
            }))
        })
    }

    /// The task queue authentication work runs in, once the shard has started.
    pub fn auth_queue(&self) -> Option<glommio::TaskQueueHandle> {
        self.auth_queue.get().copied()
    }

    /// Sets the authentication task queue (once, at start).
    pub fn set_auth_queue(&self, queue: glommio::TaskQueueHandle) {
        let _ = self.auth_queue.set(queue);
    }

    /// Sleeps for `interval`; `false` if the shard began shutting down first (the caller's
    /// periodic loop then ends).
    pub async fn sleep_unless_shutdown(&self, interval: std::time::Duration) -> bool {
        self.sleep_or_wake_unless_shutdown(interval, None).await
    }

    /// Sleeps for `interval` or until `wake` fires (a timer woken early for a nearer
    /// deadline); `false` if the shard began shutting down first.
    pub async fn sleep_or_wake_unless_shutdown(
        &self,
        interval: std::time::Duration,
        wake: Option<&Event>,
    ) -> bool {
        futures_lite::future::or(
            async {
                futures_lite::future::or(glommio::timer::sleep(interval), async {
                    match wake {
                        Some(w) => w.wait().await,
                        None => std::future::pending().await,
                    }
                })
                .await;
                true
            },
            async {
                self.shutdown.wait().await;
                false
            },
        )
        .await
    }

    pub fn image(&self) -> Rc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// The client quotas of the installed image.
    pub fn quota_index(&self) -> Rc<crate::quota::QuotaIndex> {
        self.quota_index.borrow().clone()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(topic)
            .and_then(|m| m.get(&index))
            .cloned()
    }

    /// Why partition `index` of `topic` is offline on this shard (its log failed to open, or
    /// a failed write or sync poisoned it), or `None` if it is not. Requests for an offline
    /// replica get KAFKA_STORAGE_ERROR whoever leads, as Kafka's do.
    pub fn offline_reason(&self, topic: &str, index: i32) -> Option<String> {
        if let Some(why) = self.partition(topic, index).and_then(|p| p.log.poisoned()) {
            return Some(why);
        }
        let topic_id = self.image.borrow().topic(topic)?.id;
        self.offline
            .borrow()
            .get(&(topic.to_string(), index))
            .filter(|o| o.topic_id == topic_id)
            .map(|o| o.reason.clone())
    }

    /// This shard's replicas that stay offline until the broker restarts, by topic id: those
    /// whose log is poisoned and those whose log is corrupt (an open failure that later
    /// images retry is not among them).
    pub fn offline_replicas(&self) -> Vec<([u8; 16], i32)> {
        let mut out: Vec<([u8; 16], i32)> = self
            .offline
            .borrow()
            .iter()
            .filter(|(_, o)| o.needs_operator)
            .map(|((_, index), o)| (o.topic_id, *index))
            .collect();
        out.extend(
            self.all_partitions()
                .into_iter()
                .filter(|p| p.log.poisoned().is_some())
                .map(|p| (p.topic_id, p.index)),
        );
        out
    }

    /// Registers a waiting fetch; its token goes to the owners of the partitions it reads.
    pub fn add_fetch_wait(&self) -> (u64, Rc<Event>) {
        let token = self.next_fetch_wait.get();
        self.next_fetch_wait.set(token.wrapping_add(1));
        let event = Event::new();
        self.fetch_waits.borrow_mut().insert(token, event.clone());
        (token, event)
    }

    pub fn remove_fetch_wait(&self, token: u64) {
        self.fetch_waits.borrow_mut().remove(&token);
    }

    /// Wakes a waiting fetch of this shard (an owner saw new data).
    pub fn wake_fetch(&self, token: u64) {
        let event = self.fetch_waits.borrow().get(&token).cloned();
        if let Some(e) = event {
            e.fire();
        }
    }

    /// New data on `part`: wake every fetch waiting for it, here or (by mesh
    /// notification) on other shards.
    pub fn notify_data(self: &Rc<Self>, part: &Partition) {
        let mut waiters = part.waiters.take();
        waiters.extend(part.replication.follower_waiters.take());
        self.wake(waiters);
    }

    /// Data appended on `part` (not yet durable, the high watermark unmoved): wake only the
    /// followers' fetches waiting for it.
    pub fn notify_followers(self: &Rc<Self>, part: &Partition) {
        let waiters = part.replication.follower_waiters.take();
        self.wake(waiters);
    }

    fn wake(self: &Rc<Self>, waiters: Vec<crate::coordination::parking::DataWaiter>) {
        if waiters.is_empty() {
            return;
        }
        let mut remote: HashMap<usize, Vec<u64>> = HashMap::new();
        for (shard, token) in waiters {
            if shard == self.id {
                self.wake_fetch(token);
            } else {
                remote.entry(shard).or_default().push(token);
            }
        }
        for (target, tokens) in remote {
            let mesh = self.mesh.clone();
            glommio::spawn_local(async move {
                let _ = mesh
                    .notify(target, move |s: Rc<BrokerShard>| {
                        for t in tokens {
                            s.wake_fetch(t);
                        }
                    })
                    .await;
            })
            .detach();
        }
    }

    /// Starts loading the coordinator of `part` (an internal topic's partition this broker
    /// just began to lead); other topics have none.
    pub fn run_loader(self: &Rc<Self>, part: &Rc<Partition>) {
        if let Some((_, load, _)) = self.loaders.iter().find(|(t, _, _)| *t == part.topic) {
            load(self, part.clone());
        }
    }

    /// This broker stopped leading `part`: its coordinator, if it has one, forgets it.
    pub fn run_unloader(self: &Rc<Self>, part: &Partition) {
        if let Some((_, _, unload)) = self.loaders.iter().find(|(t, _, _)| *t == part.topic) {
            unload(self, part);
        }
    }

    pub fn partitions_owned(&self) -> usize {
        self.partitions.borrow().values().map(HashMap::len).sum()
    }

    pub fn all_partitions(&self) -> Vec<Rc<Partition>> {
        self.partitions
            .borrow()
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// Installs a new metadata image: opens logs of partitions this shard now owns, applies
    /// config changes, closes and deletes the logs of deleted topics and of partitions this
    /// broker no longer replicates (a reassignment moved them away; placement never moves a
    /// partition between shards). Answers once done, so a
    /// controller that awaited every shard knows the topic is usable everywhere.
    pub async fn install_image(self: &Rc<Self>, image: Arc<MetadataImage>) {
        let node = self.config.node_id;
        let mut to_open: Vec<(Arc<TopicMeta>, PartitionMeta)> = Vec::new();
        let mut to_close: Vec<Rc<Partition>> = Vec::new();
        {
            let mut owned = self.partitions.borrow_mut();
            for topic in image.topics.values() {
                let log_config = self.config.log_config(&topic.configs);
                let flush_ms = self.config.flush_ms(&topic.configs);
                for p in topic
                    .partitions
                    .iter()
                    .filter(|p| p.shard as usize == self.id && p.replicas.contains(&node))
                {
                    match owned.get(&topic.name).and_then(|m| m.get(&p.index)) {
                        Some(existing) if existing.topic_id == topic.id => {
                            if log_config.retention_ms == 0
                                && existing.log.config().retention_ms != 0
                            {
                                warn_retention_zero(&topic.name, p.index);
                            }
                            existing.log.set_config(log_config.clone());
                            existing.flush_ms.set(flush_ms);
                            existing
                                .min_insync_replicas
                                .set(self.config.min_insync_replicas(&topic.configs));
                            existing.take_assignment(p);
                        }
                        _ => to_open.push((topic.clone(), p.clone())),
                    }
                }
            }
            for (name, parts) in owned.iter_mut() {
                let keep: Vec<i32> = parts
                    .iter()
                    .filter(|(idx, part)| {
                        image
                            .topic(name)
                            .filter(|t| t.id == part.topic_id)
                            .and_then(|t| t.partitions.get(**idx as usize))
                            .is_some_and(|p| {
                                p.shard as usize == self.id && p.replicas.contains(&node)
                            })
                    })
                    .map(|(idx, _)| *idx)
                    .collect();
                let gone: Vec<i32> = parts
                    .keys()
                    .filter(|i| !keep.contains(i))
                    .copied()
                    .collect();
                for idx in gone {
                    if let Some(p) = parts.remove(&idx) {
                        to_close.push(p);
                    }
                }
            }
            owned.retain(|_, m| !m.is_empty());
        }
        // The shard's own copy: the topics' `Arc`s are cloned once here, never per request.
        let previous = std::mem::replace(
            &mut *self.image.borrow_mut(),
            Rc::new(MetadataImage::clone(&image)),
        );
        if previous.cluster.client_quotas != image.cluster.client_quotas {
            *self.quota_index.borrow_mut() = Rc::new(crate::quota::QuotaIndex::new(
                image.version,
                &image.cluster.client_quotas,
            ));
        }
        if let Some(settings) = &self.config.authorizer {
            let stale =
                self.authorizer.borrow().is_none() || previous.cluster.acls != image.cluster.acls;
            if stale {
                let acls: Vec<_> = image
                    .cluster
                    .acls
                    .values()
                    .filter_map(crate::acl::acl_of)
                    .collect();
                *self.authorizer.borrow_mut() = Some(Rc::new(keel_auth::acl::Authorizer {
                    index: keel_auth::acl::AclIndex::new(&acls),
                    super_users: settings.super_users.iter().cloned().collect(),
                    allow_if_no_acl: settings.allow_everyone_if_no_acl_found,
                }));
            }
        }
        for part in to_close {
            let topic_deleted = image
                .topic(&part.topic)
                .is_none_or(|t| t.id != part.topic_id);
            if let Err(e) = part.log.close().await {
                warn!(shard = self.id, topic = %part.topic, partition = part.index, error = %e, "closing log failed");
            }
            self.notify_data(&part);
            let dir = part.log.dir();
            // Renamed away now, unlinked by the deleter thread: a log of several GB takes
            // hundreds of ms to unlink, which here would stall every partition of the shard.
            match keel_storage::trash::remove_dir_later(&dir) {
                Err(e) => {
                    warn!(dir = %dir.display(), error = %e, "removing a partition's log failed")
                }
                Ok(doomed) if topic_deleted => {
                    info!(shard = self.id, topic = %part.topic, partition = part.index, renamed = %doomed.display(), "deleted partition log (its files are unlinked in the background)")
                }
                Ok(doomed) => {
                    info!(shard = self.id, topic = %part.topic, partition = part.index, renamed = %doomed.display(), "deleted the log of a replica reassigned away (its files are unlinked in the background)")
                }
            }
        }
        for (topic, meta) in to_open {
            self.open_partition(&topic, &meta).await;
            // Opening a log does blocking directory work between its I/O; thousands opened in
            // one image (a topic of 10,000 partitions) held the reactor for 400 ms. Give the
            // other tasks their turn whenever the task queue's budget is spent.
            glommio::yield_if_needed().await;
        }
    }

    async fn open_partition(self: &Rc<Self>, topic: &TopicMeta, meta: &PartitionMeta) {
        let (index, leader_epoch) = (meta.index, meta.leader_epoch);
        let key = (topic.name.clone(), index);
        if self
            .offline
            .borrow()
            .get(&key)
            .is_some_and(|o| o.topic_id == topic.id && o.needs_operator)
        {
            return; // stays offline: already reported
        }
        let dir = partition_dir(&self.config.data_dir, &topic.name, index);
        let log_config: LogConfig = self.config.log_config(&topic.configs);
        if log_config.retention_ms == 0 {
            warn_retention_zero(&topic.name, index);
        }
        match Log::open(&dir, log_config).await {
            Ok(log) => {
                let offsets = log.offsets();
                info!(
                    shard = self.id,
                    topic = %topic.name,
                    partition = index,
                    epoch = leader_epoch,
                    log_start_offset = offsets.log_start_offset.0,
                    log_end_offset = offsets.log_end_offset.0,
                    recovery_scanned_bytes = log.recovery_scanned_bytes(),
                    "partition opened"
                );
                let part = Rc::new(Partition {
                    topic: topic.name.clone(),
                    index,
                    topic_id: topic.id,
                    log,
                    leader_epoch: Cell::new(leader_epoch),
                    node_id: self.config.node_id,
                    replication: PartitionReplication::new(self.config.node_id),
                    waiters: DataWaiters::default(),
                    flush_ms: Cell::new(self.config.flush_ms(&topic.configs)),
                    min_insync_replicas: Cell::new(self.config.min_insync_replicas(&topic.configs)),
                    last_sync: Cell::new(Instant::now()),
                    syncing: Cell::new(false),
                });
                part.take_assignment(meta);
                self.offline.borrow_mut().remove(&key);
                self.partitions
                    .borrow_mut()
                    .entry(topic.name.clone())
                    .or_default()
                    .insert(index, part);
                // Its coordinator loads when this broker takes up leadership (see
                // `replication::apply_image`).
            }
            Err(e) => {
                let reason = e.to_string();
                let mut offline = self.offline.borrow_mut();
                let reported = offline
                    .get(&key)
                    .is_some_and(|o| o.topic_id == topic.id && o.reason == reason);
                if !reported {
                    error!(
                        shard = self.id,
                        topic = %topic.name,
                        partition = index,
                        dir = %dir.display(),
                        error = %reason,
                        "cannot open partition log; the partition is offline"
                    );
                }
                let needs_operator = matches!(e, StorageError::CorruptSegment { .. });
                offline.insert(
                    key,
                    OfflinePartition {
                        topic_id: topic.id,
                        reason,
                        needs_operator,
                    },
                );
                drop(offline);
                if needs_operator {
                    // Offline until an operator repairs it: the controller moves its leadership.
                    keel_storage::poison::signal_offline();
                }
            }
        }
    }
}

/// retention.ms=0 is honoured (every closed segment goes at the next check) but is rarely
/// meant, so it is said at warn level.
fn warn_retention_zero(topic: &str, partition: i32) {
    warn!(
        topic,
        partition, "retention.ms=0: every closed segment is deleted at the next retention check"
    );
}
