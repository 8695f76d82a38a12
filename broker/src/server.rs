//! One broker shard: its state, its start-up and shut-down.
//!
//! Each shard (one per core) owns the logs of the partitions the metadata image assigns to
//! it, accepts connections on the shared SO_REUSEPORT listener, and runs jobs other shards
//! send it over the mesh. Shard 0 also runs the controller and the admin HTTP endpoint.
//! All state here is shard-local (`Cell`/`RefCell`); borrows never live across `.await`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_shard::{shutdown_requested, Event, Mesh, ShardBoot};
use keel_storage::{FlushPolicy, Log, LogConfig, StorageError};
use tracing::{debug, error, info, warn};

use crate::config::BrokerConfig;
use crate::controller::Controller;
use crate::metadata::{partition_dir, MetadataImage, TopicMeta};
use crate::metrics::ShardCounters;
use crate::notify::DataWaiters;

/// Shards that have drained their connections during shutdown.
static DRAINED: AtomicUsize = AtomicUsize::new(0);

/// A partition whose log this shard owns.
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub topic_id: [u8; 16],
    pub log: Log,
    pub leader_epoch: Cell<i32>,
    /// Fetches waiting for the high watermark to move.
    pub waiters: DataWaiters,
    /// min.insync.replicas of the topic: acks=all needs that many in-sync replicas.
    pub min_insync_replicas: Cell<i32>,
    /// flush.policy=interval: sync period and last sync.
    flush_ms: Cell<u64>,
    last_sync: Cell<Instant>,
    syncing: Cell<bool>,
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
    image: RefCell<Arc<MetadataImage>>,
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
    pub groups: crate::group::GroupCoordinator,
    /// The transaction coordinators of the `__transaction_state` partitions this shard owns.
    pub txns: crate::txn::coordinator::TxnShard,
}

impl BrokerShard {
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(topic)
            .and_then(|m| m.get(&index))
            .cloned()
    }

    /// Why partition `index` of `topic` is offline on this shard (its log failed to open),
    /// or `None` if it is not.
    pub fn offline_reason(&self, topic: &str, index: i32) -> Option<String> {
        let topic_id = self.image.borrow().topic(topic)?.id;
        self.offline
            .borrow()
            .get(&(topic.to_string(), index))
            .filter(|o| o.topic_id == topic_id)
            .map(|o| o.reason.clone())
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
        let waiters = part.waiters.take();
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
    /// config changes, closes and deletes logs of deleted topics. Answers once done, so a
    /// controller that awaited every shard knows the topic is usable everywhere.
    pub async fn install_image(self: &Rc<Self>, image: Arc<MetadataImage>) {
        let node = self.config.node_id;
        let mut to_open: Vec<(Arc<TopicMeta>, i32, i32)> = Vec::new();
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
                            existing.leader_epoch.set(p.leader_epoch);
                        }
                        _ => to_open.push((topic.clone(), p.index, p.leader_epoch)),
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
        *self.image.borrow_mut() = image.clone();
        for part in to_close {
            let deleted = image
                .topic(&part.topic)
                .is_none_or(|t| t.id != part.topic_id);
            if let Err(e) = part.log.close().await {
                warn!(shard = self.id, topic = %part.topic, partition = part.index, error = %e, "closing log failed");
            }
            self.notify_data(&part);
            if deleted {
                let dir = part.log.dir();
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    warn!(dir = %dir.display(), error = %e, "removing deleted partition failed");
                } else {
                    info!(shard = self.id, topic = %part.topic, partition = part.index, "deleted partition log");
                }
            }
        }
        for (topic, index, epoch) in to_open {
            self.open_partition(&topic, index, epoch).await;
            // Opening a log does blocking directory work between its I/O; thousands opened in
            // one image (a topic of 10,000 partitions) held the reactor for 400 ms. Give the
            // other tasks their turn whenever the task queue's budget is spent.
            glommio::yield_if_needed().await;
        }
    }

    async fn open_partition(self: &Rc<Self>, topic: &TopicMeta, index: i32, leader_epoch: i32) {
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
                    "partition opened"
                );
                let part = Rc::new(Partition {
                    topic: topic.name.clone(),
                    index,
                    topic_id: topic.id,
                    log,
                    leader_epoch: Cell::new(leader_epoch),
                    waiters: DataWaiters::default(),
                    flush_ms: Cell::new(self.config.flush_ms(&topic.configs)),
                    min_insync_replicas: Cell::new(self.config.min_insync_replicas(&topic.configs)),
                    last_sync: Cell::new(Instant::now()),
                    syncing: Cell::new(false),
                });
                self.offline.borrow_mut().remove(&key);
                self.partitions
                    .borrow_mut()
                    .entry(topic.name.clone())
                    .or_default()
                    .insert(index, part.clone());
                if topic.name == crate::group::OFFSETS_TOPIC {
                    crate::group::start_load(self, part);
                } else if topic.name == crate::txn::TRANSACTION_STATE_TOPIC {
                    crate::txn::coordinator::start_load(self, part);
                }
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
                offline.insert(
                    key,
                    OfflinePartition {
                        topic_id: topic.id,
                        reason,
                        needs_operator: matches!(e, StorageError::CorruptSegment { .. }),
                    },
                );
            }
        }
    }

    /// Applies retention to every partition this shard owns, and expires their idempotent
    /// producers (`producer.id.expiration.ms`), every `log.retention.check.interval.ms`, until
    /// shutdown.
    async fn retention(self: Rc<Self>) {
        let interval = Duration::from_millis(self.config.retention_check_interval_ms());
        loop {
            let stop = futures_lite::future::or(
                async {
                    glommio::timer::sleep(interval).await;
                    false
                },
                async {
                    self.shutdown.wait().await;
                    true
                },
            )
            .await;
            if stop {
                return;
            }
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            for part in self.all_partitions() {
                match part.log.enforce_retention(now_ms).await {
                    Ok(out) if out.segments_deleted > 0 => info!(
                        shard = self.id,
                        topic = %part.topic,
                        partition = part.index,
                        segments = out.segments_deleted,
                        bytes = out.bytes_deleted,
                        log_start_offset = out.log_start_offset.0,
                        "retention deleted segments"
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        warn!(shard = self.id, topic = %part.topic, partition = part.index, error = %e, "retention failed")
                    }
                }
                let expired = part.log.expire_producers(now_ms);
                if expired > 0 {
                    debug!(shard = self.id, topic = %part.topic, partition = part.index, expired, "expired idempotent producers");
                }
                glommio::executor().yield_if_needed().await;
            }
        }
    }

    /// Compacts the `cleanup.policy=compact` partitions this shard owns, every
    /// `log.cleaner.backoff.ms`, until shutdown. Runs in the low-share task queue and yields
    /// inside each pass.
    async fn compaction(self: Rc<Self>) {
        let interval = Duration::from_millis(self.config.cleaner_backoff_ms());
        let map_bytes = self.config.cleaner_map_bytes();
        loop {
            let stop = futures_lite::future::or(
                async {
                    glommio::timer::sleep(interval).await;
                    false
                },
                async {
                    self.shutdown.wait().await;
                    true
                },
            )
            .await;
            if stop {
                return;
            }
            for part in self.all_partitions() {
                if !part.log.config().cleanup_compact {
                    continue;
                }
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                let started = Instant::now();
                match part.log.compact(now_ms, map_bytes).await {
                    Ok(Some(out)) => {
                        self.counters
                            .note_compaction(out.bytes_in, started.elapsed());
                        info!(
                            shard = self.id,
                            topic = %part.topic,
                            partition = part.index,
                            segments_in = out.segments_in,
                            segments_out = out.segments_out,
                            bytes_in = out.bytes_in,
                            bytes_out = out.bytes_out,
                            records_dropped = out.records_dropped,
                            cleaned_up_to = out.cleaned_up_to.0,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "compacted"
                        );
                        // Readers past the swapped range are unaffected; waiting fetches
                        // need no wake-up.
                    }
                    Ok(None) => {}
                    Err(e) => {
                        warn!(shard = self.id, topic = %part.topic, partition = part.index, error = %e, "compaction failed")
                    }
                }
                glommio::executor().yield_if_needed().await;
            }
        }
    }

    /// Periodic work: notice a shutdown request, sync flush.policy=interval logs, retry the
    /// writes of disk-full logs.
    async fn ticker(self: Rc<Self>) {
        let mut tick: u64 = 0;
        loop {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            if shutdown_requested() {
                self.shutdown.fire();
                return;
            }
            tick = tick.wrapping_add(1);
            for part in self.all_partitions() {
                // A disk-full log retries its staged writes once a second.
                if tick.is_multiple_of(20) && part.log.is_disk_full() && !part.syncing.get() {
                    part.syncing.set(true);
                    glommio::spawn_local(async move {
                        part.log.retry_stalled().await;
                        part.syncing.set(false);
                    })
                    .detach();
                    continue;
                }
                if part.log.config().flush_policy != FlushPolicy::Interval || part.syncing.get() {
                    continue;
                }
                if part.last_sync.get().elapsed() >= Duration::from_millis(part.flush_ms.get()) {
                    part.syncing.set(true);
                    let shard_id = self.id;
                    glommio::spawn_local(async move {
                        if let Err(e) = part.log.sync().await {
                            error!(shard = shard_id, topic = %part.topic, partition = part.index, error = %e, "periodic sync failed");
                        }
                        part.last_sync.set(Instant::now());
                        part.syncing.set(false);
                    })
                    .detach();
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

/// The body of one shard's executor.
pub async fn run_shard(boot: ShardBoot<BrokerShard>, config: Arc<BrokerConfig>) {
    let ShardBoot {
        shard_id,
        shard_count,
        mesh,
        receivers,
    } = boot;
    let (controller, doorbell) = if shard_id == 0 {
        match crate::controller::start(&config) {
            Ok((c, d)) => (Some(c), Some(d)),
            Err(e) => {
                error!(error = %format!("{e:#}"), "metadata node failed to start; shutting down");
                std::process::exit(1);
            }
        }
    } else {
        (None, None)
    };
    let shard = Rc::new(BrokerShard {
        id: shard_id,
        count: shard_count,
        mesh: mesh.clone(),
        config: config.clone(),
        image: RefCell::new(Arc::new(MetadataImage::default())),
        partitions: RefCell::new(HashMap::new()),
        offline: RefCell::new(HashMap::new()),
        shutdown: Event::default(),
        counters: ShardCounters::default(),
        controller,
        ready: Event::new(),
        fetch_waits: RefCell::new(HashMap::new()),
        next_fetch_wait: Cell::new(0),
        groups: crate::group::GroupCoordinator::default(),
        txns: crate::txn::coordinator::TxnShard::default(),
    });
    // Storage's per-shard limits: the tail caches' memory, the closed segments' open files.
    keel_storage::tail_budget::set_budget(config.tail_cache_shard_bytes);
    keel_storage::file_cache::set_capacity(config.closed_segment_files_shard_max);
    keel_storage::write_slots::set_max(config.write_inflight_shard_max);
    mesh.serve(receivers, shard.clone(), 4096);
    glommio::spawn_local(shard.clone().ticker()).detach();
    // Retention deletes files in the background: a task queue with a tenth of the default
    // shares, so produce and fetch on this shard go first.
    let background = glommio::executor().create_task_queue(
        glommio::Shares::Static(100),
        glommio::Latency::NotImportant,
        "retention",
    );
    shard.counters.name_queue(background, "retention");
    match glommio::spawn_local_into(shard.clone().compaction(), background) {
        Ok(task) => {
            task.detach();
        }
        Err(e) => error!(shard = shard_id, error = %e, "cannot start compaction"),
    }
    match glommio::spawn_local_into(shard.clone().retention(), background) {
        Ok(task) => {
            task.detach();
        }
        Err(e) => error!(shard = shard_id, error = %e, "cannot start retention"),
    }

    if let Some(doorbell) = doorbell {
        if let Err(e) = crate::controller::bootstrap(&shard, doorbell).await {
            error!(error = %e, "metadata bootstrap failed; shutting down");
            std::process::exit(1);
        }
        if let Some(addr) = config.admin {
            crate::admin::start(shard.clone(), addr);
        }
    }
    futures_lite::future::or(shard.ready.wait(), shard.shutdown.wait()).await;

    let listener = match keel_shard::listen_reuseport(config.listen, 1024) {
        Ok(l) => l,
        Err(e) => {
            error!(shard = shard_id, listen = %config.listen, error = %e, "cannot listen");
            std::process::exit(1);
        }
    };
    info!(shard = shard_id, listen = %config.listen, partitions = shard.partitions_owned(), "shard serving");
    let active = Rc::new(Cell::new(0usize));
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                let shard = shard.clone();
                let active = active.clone();
                active.set(active.get() + 1);
                glommio::spawn_local(async move {
                    crate::conn::serve(shard, stream).await;
                    active.set(active.get() - 1);
                })
                .detach();
            }
            Some(Err(e)) => {
                warn!(shard = shard_id, error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    drop(listener);
    info!(
        shard = shard_id,
        connections = active.get(),
        "shutting down: finishing in-flight requests"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while active.get() > 0 && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    DRAINED.fetch_add(1, Ordering::AcqRel);
    while DRAINED.load(Ordering::Acquire) < shard_count && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    for part in shard.all_partitions() {
        match part.log.close().await {
            Ok(()) => {}
            Err(e) => {
                error!(shard = shard_id, topic = %part.topic, partition = part.index, error = %e, "closing log failed")
            }
        }
    }
    if let Some(c) = &shard.controller {
        c.handle.shutdown();
    }
    info!(shard = shard_id, "shard stopped; logs synced");
}
