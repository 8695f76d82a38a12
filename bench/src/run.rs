//! Running one workload against one target: create the topics, start producers and
//! consumers on glommio executors, measure, report live, and collect the result.
//!
//! Latency is honest: at a fixed rate every message has an intended send time from its
//! producer's schedule, and publish latency (ack) and end-to-end latency (consumer receipt)
//! count from that time, so a stalled producer's backlog shows up as latency (no
//! coordinated omission). Warm-up traffic is sent but not measured. Everything is bounded:
//! producers stop at the end of the measured phase or at `max_messages`, consumers drain for
//! at most `DRAIN_MAX` after that. CPU (keel-bench's own, and the target's from
//! `/proc/PID/stat` or its /metrics) is read at both ends of the measured phase, the interval
//! whose bytes the result counts.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context, Result};
use glommio::sync::Semaphore;
use glommio::{LocalExecutorBuilder, Placement};
use kafka_protocol::messages::*;
use keel_client::Security;
use keel_vocab::records::{for_each_committed_record, BatchBuilder, Codec, ProducerStamp};

use crate::checker::{Acks, Ledger, MessageId, Pass};
use crate::client::admin::{self, ClusterMap, Connections};
use crate::client::batch::Sequences;
use crate::client::conn::{self, Conn};
use crate::client::txn::{self, ProducerIdentity};
use crate::cpu::{self, CpuTimes};
use crate::hist::LatencyHist;
use crate::keys::{KeyDistribution, KeyGen};
use crate::payload::{PayloadGen, PayloadHeader, PayloadSource};
use crate::result::{ProbeResult, RunResult, TargetCpu, TimelinePoint};
use crate::schedule::Schedule;
use crate::scrape::{self, Scrape};
use crate::verify::Verifier;
use crate::workload::Workload;

/// Longest the consumers keep draining after the producers stopped.
const DRAIN_MAX: Duration = Duration::from_secs(15);
/// With linger.ms = 0, how often a producer waiting for a free in-flight slot looks again.
const SLOT_POLL: Duration = Duration::from_micros(100);
/// Io_uring registered memory per bench executor (the tool does no direct I/O).
const IO_MEMORY: usize = 64 * 1024;
/// Kafka consumer defaults.
const FETCH_MAX_BYTES: i32 = 50 * 1024 * 1024;
const PARTITION_FETCH_MAX_BYTES: i32 = 1024 * 1024;
const FETCH_MAX_WAIT_MS: i32 = 100;
/// A transactional producer's transaction.timeout.ms (Kafka's default).
const TRANSACTION_TIMEOUT_MS: i32 = 60_000;

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub target: String,
    pub bootstrap: String,
    /// How every connection of the run secures itself (TLS, SASL login).
    pub security: Security,
    /// The security as the report names it (`SASL_SSL, SCRAM-SHA-512 as admin`).
    pub security_label: String,
    pub workload: Workload,
    /// Executor threads for producers and consumers.
    pub threads: usize,
    /// Keel's admin address for /metrics (per-shard profile, process CPU), if any.
    pub metrics: Option<String>,
    /// The target's process id when it runs on this machine: its CPU from /proc/PID/stat
    /// (takes precedence over /metrics for the process's CPU).
    pub target_pid: Option<u32>,
    pub verify: bool,
    pub probe: Option<ProbeResult>,
    /// Print a live line every `live_every`.
    pub live: bool,
    pub live_every: Duration,
}

/// Counters shared by all executor threads (plain atomics: this is the tool, not the broker),
/// and how their connections secure themselves.
#[derive(Default)]
struct Shared {
    security: Security,
    stop: AtomicBool,
    consumers_go: AtomicBool,
    /// Messages acknowledged (or sent, for acks=0), all phases.
    acked_total: AtomicU64,
    producers_done: AtomicU64,
    /// Producers in the run: consumers drain until all of them are done.
    producers_total: AtomicU64,
    /// Messages consumed per group, all phases.
    consumed_by_group: Vec<AtomicU64>,
    // Measured phase only:
    produced_records: AtomicU64,
    produced_bytes: AtomicU64,
    consumed_records: AtomicU64,
    consumed_bytes: AtomicU64,
    /// Records read while the measured phase ran, whenever they were sent (a backlog too).
    fetched_records: AtomicU64,
    fetched_bytes: AtomicU64,
    errors: AtomicU64,
    error_samples: Mutex<Vec<String>>,
    /// Publish latency of the current live interval.
    interval: Mutex<LatencyHist>,
    /// `--verify`: where each record was acknowledged and read. Locked once per batch
    /// acknowledged and once per partition of a fetch answer.
    ledger: Mutex<Ledger>,
}

impl Shared {
    fn error(&self, measured: bool, e: impl std::fmt::Display) {
        if measured {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let mut s = self.error_samples.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() < 5 {
            s.push(e.to_string());
        }
    }
}

/// Times of the run, as Instants and as Unix microseconds.
#[derive(Clone, Copy)]
struct Clock {
    base: Instant,
    base_unix_us: u64,
    measure_start: Instant,
    end: Instant,
}

impl Clock {
    fn unix_us(&self, t: Instant) -> u64 {
        self.base_unix_us + t.saturating_duration_since(self.base).as_micros() as u64
    }
    fn measured(&self, intended: Instant) -> bool {
        intended >= self.measure_start && intended < self.end
    }
}

/// The counters read at each end of the measured phase: keel-bench's own CPU, and the
/// target's (its /proc/PID/stat, its /metrics) when asked for.
#[derive(Clone)]
struct CpuMark {
    tool: CpuTimes,
    pid: Option<CpuTimes>,
    scrape: Option<Scrape>,
}

/// Reads the counters now. A target that does not answer leaves its part None (warned): the
/// run goes on without those figures.
fn cpu_mark(opts: &RunOptions, target: bool) -> CpuMark {
    let tool = cpu::this_process();
    if !target {
        return CpuMark {
            tool,
            pid: None,
            scrape: None,
        };
    }
    let pid = opts.target_pid.and_then(|pid| match cpu::read_pid(pid) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!("target CPU of pid {pid}: {e:#}");
            None
        }
    });
    let scrape = opts
        .metrics
        .as_deref()
        .and_then(|addr| match scrape::fetch(addr) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("target metrics: {e:#}");
                None
            }
        });
    CpuMark { tool, pid, scrape }
}

/// The target's CPU between two marks: from its pid when both reads worked, else from its
/// /metrics' process families.
fn target_cpu(pid: Option<u32>, start: &CpuMark, end: &CpuMark) -> Option<TargetCpu> {
    if let (Some(pid), Some(before), Some(after)) = (pid, start.pid, end.pid) {
        let d = after.since(&before);
        return Some(TargetCpu {
            source: format!("/proc/{pid}/stat"),
            total_s: d.total_s(),
            user_s: Some(d.user_s),
            system_s: Some(d.system_s),
        });
    }
    match (&start.scrape, &end.scrape) {
        (Some(before), Some(after)) => scrape::process_cpu(before, after),
        _ => None,
    }
}

fn now_unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// What each executor thread hands back.
#[derive(Default)]
struct ThreadResult {
    publish: LatencyHist,
    e2e: LatencyHist,
    verifier: Verifier,
}

/// Kafka's default partitioner hash (murmur2), so keyed records land where a Java producer
/// would put them.
pub fn murmur2(data: &[u8]) -> u32 {
    let seed: u32 = 0x9747_b28c;
    let m: u32 = 0x5bd1_e995;
    let r = 24;
    let mut h: u32 = seed ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= u32::from(tail[2]) << 16;
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(m);
        }
        2 => {
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(m);
        }
        1 => {
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(m);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h
}

/// One producer's static setup.
#[derive(Clone)]
struct ProducerSpec {
    id: u32,
    topic_index: u32,
    topic: String,
    partitions: i32,
    rate: f64,
    start: Instant,
}

/// One consumer's static setup: a group member reading some partitions of one topic.
#[derive(Clone)]
struct ConsumerSpec {
    group: u32,
    topic_index: u32,
    topic: String,
    partitions: Vec<i32>,
}

/// A batch being filled, with what we need to account for its records when acked.
struct Pending {
    builder: BatchBuilder,
    /// (sequence, intended send time) per record.
    meta: Vec<(u64, Instant)>,
    created: Option<Instant>,
}

struct ProducerCtx {
    spec: ProducerSpec,
    w: Rc<Workload>,
    codec: Codec,
    clock: Clock,
    shared: Arc<Shared>,
    cluster: Rc<ClusterMap>,
    conns: Connections,
    in_flight: RefCell<BTreeMap<String, Rc<Semaphore>>>,
    publish: Rc<RefCell<LatencyHist>>,
    verifier: Rc<RefCell<Verifier>>,
    verify: bool,
    outstanding: Rc<Cell<u64>>,
    /// Idempotent or transactional: the producer id and epoch from InitProducerId.
    identity: Cell<Option<ProducerIdentity>>,
    /// Idempotent: the next base sequence of each partition.
    sequences: RefCell<Sequences>,
    /// Transactional: the open transaction.
    txn: Option<TxnState>,
}

/// (sequence, intended send time) of each record of a batch.
type RecordMeta = Vec<(u64, Instant)>;

/// A transactional producer's state.
struct TxnState {
    transactional_id: String,
    /// Connection to the transaction coordinator.
    coordinator: RefCell<Option<Rc<Conn>>>,
    /// Partitions added to the open transaction.
    added: RefCell<Vec<bool>>,
    /// Records of the open transaction acknowledged by their partitions (partition, base
    /// offset, records), awaiting the commit.
    acked: RefCell<Vec<(i32, i64, RecordMeta)>>,
    /// A batch of the open transaction failed: it is aborted instead of committed.
    failed: Cell<bool>,
}

impl ProducerCtx {
    /// InitProducerId (after FindCoordinator, for a transactional producer).
    async fn init_producer(&self) -> Result<()> {
        if !self.w.is_idempotent() {
            return Ok(());
        }
        let addr = self
            .cluster
            .leader_addr(&self.spec.topic, 0)
            .ok_or_else(|| anyhow!("no leader for {}/0", self.spec.topic))?
            .to_string();
        let conn = self.conns.get(&addr).await?;
        let identity = match &self.txn {
            None => txn::init_producer_id(&conn, None, 0).await?,
            Some(t) => {
                let coordinator =
                    txn::find_transaction_coordinator(&conn, &t.transactional_id).await?;
                let coordinator = self.conns.get(&coordinator).await?;
                let identity = txn::init_producer_id(
                    &coordinator,
                    Some(&t.transactional_id),
                    TRANSACTION_TIMEOUT_MS,
                )
                .await?;
                *t.coordinator.borrow_mut() = Some(coordinator);
                identity
            }
        };
        self.identity.set(Some(identity));
        Ok(())
    }

    fn coordinator(&self, t: &TxnState) -> Result<Rc<Conn>> {
        t.coordinator
            .borrow()
            .clone()
            .ok_or_else(|| anyhow!("no transaction coordinator"))
    }

    /// Adds the partitions not yet in the open transaction (AddPartitionsToTxn).
    async fn add_to_txn(&self, partitions: &[i32]) -> Result<()> {
        let (Some(t), Some(identity)) = (&self.txn, self.identity.get()) else {
            return Ok(());
        };
        let new: Vec<i32> = partitions
            .iter()
            .copied()
            .filter(|&p| !t.added.borrow().get(p as usize).copied().unwrap_or(false))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let coordinator = self.coordinator(t)?;
        txn::add_partitions_to_txn(
            &coordinator,
            &t.transactional_id,
            identity,
            &self.spec.topic,
            &new,
        )
        .await?;
        let mut added = t.added.borrow_mut();
        for p in new {
            if let Some(slot) = added.get_mut(p as usize) {
                *slot = true;
            }
        }
        Ok(())
    }

    /// Sends every pending batch, waits for their answers, and ends the open transaction:
    /// commit, or abort if a batch failed. Committed records count as published now.
    async fn end_txn(self: &Rc<Self>, pending: &mut [Pending]) -> Result<()> {
        let (Some(t), Some(identity)) = (&self.txn, self.identity.get()) else {
            return Ok(());
        };
        for p in 0..pending.len() as i32 {
            self.dispatch(p, pending).await?;
        }
        // Every in-flight slot free = every batch of the transaction answered.
        let sems: Vec<Rc<Semaphore>> = self.in_flight.borrow().values().cloned().collect();
        let slots = u64::from(self.w.max_in_flight.max(1));
        for sem in sems {
            let _all = sem
                .acquire_permit(slots)
                .await
                .map_err(|e| anyhow!("{e}"))?;
        }
        if !t.added.borrow().iter().any(|&a| a) {
            return Ok(()); // nothing written since the last commit
        }
        let commit = !t.failed.get();
        let coordinator = self.coordinator(t)?;
        let ended = txn::end_txn(&coordinator, &t.transactional_id, identity, commit).await;
        t.added.borrow_mut().iter_mut().for_each(|a| *a = false);
        t.failed.set(false);
        let acked = std::mem::take(&mut *t.acked.borrow_mut());
        match ended {
            Ok(()) if commit => {
                for (p, base_offset, meta) in acked {
                    self.record_acked(&meta, p, base_offset);
                }
            }
            Ok(()) => {}
            Err(e) => {
                let measured = acked
                    .iter()
                    .any(|(_, _, m)| m.first().is_some_and(|m| self.clock.measured(m.1)));
                self.shared
                    .error(measured, format!("{e:#} ({})", t.transactional_id));
            }
        }
        Ok(())
    }

    fn semaphore(&self, addr: &str) -> Rc<Semaphore> {
        self.in_flight
            .borrow_mut()
            .entry(addr.to_string())
            .or_insert_with(|| Rc::new(Semaphore::new(u64::from(self.w.max_in_flight.max(1)))))
            .clone()
    }

    /// Whether the connection to partition `p`'s leader has a free in-flight slot now.
    fn slot_free(&self, p: i32) -> bool {
        self.cluster
            .leader_addr(&self.spec.topic, p)
            .is_some_and(|addr| self.semaphore(addr).available() > 0)
    }

    /// Sends one request to the leader of partition `p` holding the pending batch of every
    /// partition that broker leads (as Kafka's sender drains a ready node), after waiting for
    /// an in-flight slot on that connection (backpressure).
    async fn dispatch(self: &Rc<Self>, p: i32, pending: &mut [Pending]) -> Result<()> {
        let addr = self
            .cluster
            .leader_addr(&self.spec.topic, p)
            .ok_or_else(|| anyhow!("no leader for {}/{p}", self.spec.topic))?
            .to_string();
        let mut parts = Vec::new();
        let mut metas = Vec::new();
        for (i, b) in pending.iter_mut().enumerate() {
            let i = i as i32;
            if b.builder.is_empty()
                || self.cluster.leader_addr(&self.spec.topic, i) != Some(addr.as_str())
            {
                continue;
            }
            let stamp = self.identity.get().map(|id| ProducerStamp {
                producer_id: id.producer_id,
                epoch: id.epoch,
                base_sequence: self
                    .sequences
                    .borrow_mut()
                    .take(i as usize, b.builder.len() as i32),
                transactional: self.txn.is_some(),
            });
            let records = b.builder.finish_stamped(self.codec, stamp)?;
            b.created = None;
            metas.push((i, std::mem::take(&mut b.meta)));
            parts.push(
                produce_request::PartitionProduceData::default()
                    .with_index(i)
                    .with_records(Some(records)),
            );
        }
        if parts.is_empty() {
            return Ok(());
        }
        if self.txn.is_some() {
            let partitions: Vec<i32> = metas.iter().map(|(p, _)| *p).collect();
            self.add_to_txn(&partitions).await?;
        }
        let conn = self.conns.get(&addr).await?;
        let sem = self.semaphore(&addr);
        let permit = sem
            .acquire_static_permit(1)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let req = ProduceRequest::default()
            .with_transactional_id(
                self.txn
                    .as_ref()
                    .map(|t| TransactionalId(t.transactional_id.as_str().to_string().into())),
            )
            .with_acks(self.w.acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                .with_name(admin::topic_name(&self.spec.topic))
                .with_partition_data(parts)]);
        let version = conn.version(ApiKey::Produce)?;
        let this = self.clone();
        self.outstanding.set(self.outstanding.get() + 1);
        if self.w.acks == 0 {
            let sent = conn
                .send(ApiKey::Produce, version, &req, false)
                .await
                .map(|_| ());
            drop(permit);
            self.outstanding.set(self.outstanding.get() - 1);
            let err = sent.err().map(|e| format!("{e:#}"));
            for (p, meta) in metas {
                self.account(meta, err.clone(), p, -1);
            }
            return Ok(());
        }
        let sent = conn.send(ApiKey::Produce, version, &req, true).await;
        glommio::spawn_local(async move {
            let outcome: Result<ProduceResponse> = async { Ok(sent?.response().await?) }.await;
            drop(permit);
            this.outstanding.set(this.outstanding.get() - 1);
            for (p, meta) in metas {
                let mut base_offset = -1;
                let err = match &outcome {
                    Err(e) => Some(format!("produce to {}: {e:#}", this.spec.topic)),
                    Ok(resp) => {
                        let part = resp
                            .responses
                            .iter()
                            .flat_map(|t| t.partition_responses.iter())
                            .find(|r| r.index == p);
                        match part {
                            None => Some(format!(
                                "produce to {}/{p}: no answer for the partition",
                                this.spec.topic
                            )),
                            Some(r) if r.error_code != 0 => Some(format!(
                                "produce to {}/{p}: error {} {}",
                                this.spec.topic,
                                r.error_code,
                                r.error_message.as_ref().map(|m| m.as_str()).unwrap_or("")
                            )),
                            Some(r) => {
                                base_offset = r.base_offset;
                                None
                            }
                        }
                    }
                };
                this.account(meta, err, p, base_offset);
            }
        })
        .detach();
        Ok(())
    }

    /// A batch's answer: an error, or its records published at `base_offset` on (negative:
    /// unknown, as for acks=0) (for a transactional producer: acknowledged by the partition,
    /// published when the transaction commits).
    fn account(&self, meta: Vec<(u64, Instant)>, error: Option<String>, p: i32, base_offset: i64) {
        let measured_first = meta.first().is_some_and(|m| self.clock.measured(m.1));
        match (error, &self.txn) {
            (Some(e), txn) => {
                if let Some(t) = txn {
                    t.failed.set(true);
                }
                self.shared.error(measured_first, e)
            }
            (None, Some(t)) => t.acked.borrow_mut().push((p, base_offset, meta)),
            (None, None) => self.record_acked(&meta, p, base_offset),
        }
    }

    /// Counts published records and their latency (from each one's intended send time). The
    /// records of a batch sit at `base_offset`, `base_offset + 1`, .. in `meta`'s order.
    fn record_acked(&self, meta: &[(u64, Instant)], p: i32, base_offset: i64) {
        if self.verify {
            let acks = Acks::from_produce(self.w.acks);
            let tp = (self.spec.topic_index, p);
            let mut ledger = self.shared.ledger.lock().unwrap_or_else(|e| e.into_inner());
            for (i, &(seq, _)) in meta.iter().enumerate() {
                let offset = if base_offset < 0 {
                    -1
                } else {
                    base_offset + i as i64
                };
                ledger.acknowledged(MessageId::new(self.spec.id, seq), tp, offset, acks);
            }
        }
        let now = Instant::now();
        let bytes_each = u64::from(self.w.message_size);
        self.shared
            .acked_total
            .fetch_add(meta.len() as u64, Ordering::Relaxed);
        let mut publish = self.publish.borrow_mut();
        let mut interval = self
            .shared
            .interval
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut n = 0u64;
        for &(seq, intended) in meta {
            if self.verify {
                self.verifier
                    .borrow_mut()
                    .ack((self.spec.topic_index, p), self.spec.id, seq);
            }
            if self.clock.measured(intended) {
                let us = now.saturating_duration_since(intended).as_micros() as u64;
                publish.record_us(us);
                interval.record_us(us);
                n += 1;
            }
        }
        if n > 0 {
            self.shared.produced_records.fetch_add(n, Ordering::Relaxed);
            self.shared
                .produced_bytes
                .fetch_add(bytes_each * n, Ordering::Relaxed);
        }
    }
}

fn oldest_pending(pending: &[Pending]) -> Option<(Instant, i32)> {
    pending
        .iter()
        .enumerate()
        .filter_map(|(p, b)| b.created.map(|c| (c, p as i32)))
        .min()
}

async fn producer(ctx: Rc<ProducerCtx>) -> Result<()> {
    let w = ctx.w.clone();
    let n = ctx.spec.partitions;
    let mut schedule = Schedule::new(ctx.spec.rate, ctx.spec.start);
    let dist: KeyDistribution = w.key_distribution.parse().map_err(|e| anyhow!("{e}"))?;
    let mut keys = KeyGen::new(
        dist,
        u64::from(w.key_count),
        w.seed ^ u64::from(ctx.spec.id) << 32,
    );
    let source = match &w.payload_file {
        Some(f) => PayloadSource::File(f.into()),
        None => PayloadSource::Random {
            compressibility: w.payload_compressibility,
        },
    };
    let mut payload = PayloadGen::with_seed(
        w.message_size as usize,
        &source,
        w.seed.wrapping_add(u64::from(ctx.spec.id)),
    )?;
    let mut pending: Vec<Pending> = (0..n)
        .map(|_| Pending {
            builder: BatchBuilder::new(),
            meta: Vec::new(),
            created: None,
        })
        .collect();
    let linger = Duration::from_millis(w.linger_ms);
    let mut key = Vec::with_capacity(32);
    let mut value = Vec::with_capacity(w.message_size as usize);
    let mut sticky = (ctx.spec.id as i32) % n;
    let mut seq: u64 = 0;
    ctx.init_producer().await?;
    // Records in the open transaction.
    let mut in_txn: u64 = 0;
    // Records this producer sent for the measured phase (what `max_messages` bounds).
    let mut measured: u64 = 0;
    let end = ctx.clock.end;
    // The oldest non-empty batch: when its linger expires, its leader's batches go out.
    let mut oldest: Option<(Instant, i32)> = None;
    while !ctx.shared.stop.load(Ordering::Relaxed) {
        if w.max_messages > 0 && measured >= w.max_messages {
            break;
        }
        let intended = match schedule.next_send() {
            Some(t) => t,
            None => Instant::now(),
        };
        if intended >= end {
            break;
        }
        // Wait for the intended time, sending lingering batches meanwhile.
        loop {
            let now = Instant::now();
            if let Some((created, p)) = oldest {
                // linger.ms = 0 sends as soon as the connection has a free slot, as Kafka's
                // sender does; records accumulate into the batch while every slot is busy.
                let ready = if w.linger_ms == 0 {
                    ctx.slot_free(p)
                } else {
                    now >= created + linger
                };
                if ready {
                    ctx.dispatch(p, &mut pending).await?;
                    oldest = oldest_pending(&pending);
                    if p == sticky {
                        sticky = (sticky + 1) % n;
                    }
                    continue;
                }
            }
            if now >= intended {
                break;
            }
            let wake = match oldest {
                None => intended,
                Some(_) if w.linger_ms == 0 => (now + SLOT_POLL).min(intended),
                Some((c, _)) => (c + linger).min(intended),
            };
            glommio::timer::sleep(wake.saturating_duration_since(now)).await;
        }
        if intended >= ctx.clock.measure_start {
            measured += 1;
        }
        let has_key = keys.next_key(&mut key);
        let p = if has_key {
            (murmur2(&key) & 0x7fff_ffff) as i32 % n
        } else {
            sticky
        };
        let header = PayloadHeader {
            producer_id: ctx.spec.id,
            sequence: seq,
            sent_unix_us: ctx.clock.unix_us(intended),
        };
        payload.fill(&header, &mut value);
        let b = &mut pending[p as usize];
        if b.created.is_none() {
            let now = Instant::now();
            b.created = Some(now);
            if oldest.is_none() {
                oldest = Some((now, p));
            }
        }
        b.builder.push(
            (ctx.clock.unix_us(intended) / 1000) as i64,
            has_key.then_some(key.as_slice()),
            &value,
        );
        b.meta.push((seq, intended));
        seq += 1;
        if b.builder.size() >= w.batch_size as usize || (w.linger_ms == 0 && ctx.slot_free(p)) {
            ctx.dispatch(p, &mut pending).await?;
            oldest = oldest_pending(&pending);
            if !has_key {
                sticky = (sticky + 1) % n;
            }
        }
        if w.is_transactional() {
            in_txn += 1;
            if in_txn >= w.transaction_records {
                ctx.end_txn(&mut pending).await?;
                in_txn = 0;
                oldest = None;
                if !has_key {
                    sticky = (sticky + 1) % n;
                }
            }
        }
        // Unlimited rate: yield now and then so acks and other tasks run.
        if seq % 64 == 0 {
            glommio::executor().yield_if_needed().await;
        }
    }
    // The last, partial transaction commits too.
    ctx.end_txn(&mut pending).await?;
    for p in 0..n {
        ctx.dispatch(p, &mut pending).await?;
    }
    // Wait for outstanding acks (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    while ctx.outstanding.get() > 0 && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// What a consumer task records into, shared with its executor thread.
struct ConsumerSinks {
    e2e: Rc<RefCell<LatencyHist>>,
    verifier: Rc<RefCell<Verifier>>,
    verify: bool,
    message_size: u32,
    /// Fetch with isolation level read_committed (and skip aborted transactions).
    read_committed: bool,
}

async fn consumer(
    spec: ConsumerSpec,
    clock: Clock,
    shared: Arc<Shared>,
    cluster: Rc<ClusterMap>,
    sinks: ConsumerSinks,
) -> Result<()> {
    let ConsumerSinks {
        e2e,
        verifier,
        verify,
        message_size,
        read_committed,
    } = sinks;
    while !shared.consumers_go.load(Ordering::Relaxed) {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    // Group partitions by leader; fetch each leader's partitions in one request.
    let conns = Connections::new(shared.security.clone());
    let mut by_leader: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for &p in &spec.partitions {
        let addr = cluster
            .leader_addr(&spec.topic, p)
            .ok_or_else(|| anyhow!("no leader for {}/{p}", spec.topic))?;
        by_leader.entry(addr.to_string()).or_default().push(p);
    }
    let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
    for (addr, parts) in &by_leader {
        let conn = conns.get(addr).await?;
        for (p, o) in parts
            .iter()
            .zip(admin::list_offsets(&conn, &spec.topic, parts, -2).await?)
        {
            offsets.insert(*p, o);
        }
    }
    // `--verify`: each partition's reading is one full pass from where it started.
    let mut passes: BTreeMap<i32, Pass> = offsets
        .iter()
        .map(|(&p, &o)| (p, Pass::new(spec.group, (spec.topic_index, p), o)))
        .collect();
    let group_count = &shared.consumed_by_group[spec.group as usize];
    let mut drain_deadline: Option<Instant> = None;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_MAX);
            let producers_done = shared.producers_done.load(Ordering::Relaxed);
            let acked = shared.acked_total.load(Ordering::Relaxed);
            let all_done = producers_done >= shared.producers_total.load(Ordering::Relaxed);
            if (all_done && group_count.load(Ordering::Relaxed) >= acked)
                || Instant::now() >= deadline
            {
                break;
            }
        }
        for (addr, parts) in &by_leader {
            let conn = conns.get(addr).await?;
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(FETCH_MAX_WAIT_MS)
                .with_min_bytes(1)
                .with_max_bytes(FETCH_MAX_BYTES)
                .with_session_epoch(-1)
                .with_isolation_level(i8::from(read_committed))
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(admin::topic_name(&spec.topic))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|&p| {
                                fetch_request::FetchPartition::default()
                                    .with_partition(p)
                                    .with_fetch_offset(offsets[&p])
                                    .with_partition_max_bytes(PARTITION_FETCH_MAX_BYTES)
                                    .with_current_leader_epoch(-1)
                            })
                            .collect(),
                    )]);
            let resp: FetchResponse = match conn.request(ApiKey::Fetch, &req).await {
                Ok(r) => r,
                Err(e) => {
                    shared.error(true, format!("fetch from {addr}: {e:#}"));
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if resp.error_code != 0 {
                shared.error(
                    true,
                    format!("fetch from {addr}: error {}", resp.error_code),
                );
                continue;
            }
            let now_us = now_unix_us();
            for t in &resp.responses {
                for pd in &t.partitions {
                    let p = pd.partition_index;
                    if pd.error_code != 0 {
                        shared.error(
                            true,
                            format!("fetch {}/{p}: error {}", spec.topic, pd.error_code),
                        );
                        continue;
                    }
                    let Some(records) = &pd.records else { continue };
                    let fetch_offset = offsets[&p];
                    let mut seen = 0u64;
                    let mut measured = 0u64;
                    let mut e2e = e2e.borrow_mut();
                    let mut verifier = verifier.borrow_mut();
                    let mut reads: Vec<(MessageId, i64)> = Vec::new();
                    let mut pass = passes.get_mut(&p);
                    let aborted: Vec<(i64, i64)> = pd
                        .aborted_transactions
                        .iter()
                        .flatten()
                        .map(|a| (a.producer_id.0, a.first_offset))
                        .collect();
                    let next = for_each_committed_record(records, &aborted, |r| {
                        if r.offset < fetch_offset {
                            return; // earlier records of the first batch
                        }
                        seen += 1;
                        if let (true, Some(pass)) = (verify, pass.as_mut()) {
                            pass.saw(r.offset);
                        }
                        let Some(h) = r.value.and_then(PayloadHeader::parse) else {
                            return;
                        };
                        if verify {
                            reads.push((MessageId::new(h.producer_id, h.sequence), r.offset));
                            verifier.consumed(
                                spec.group,
                                (spec.topic_index, p),
                                h.producer_id,
                                h.sequence,
                            );
                        }
                        let sent = h.sent_unix_us;
                        if sent >= clock.unix_us(clock.measure_start)
                            && sent < clock.unix_us(clock.end)
                        {
                            e2e.record_us(now_us.saturating_sub(sent));
                            measured += 1;
                        }
                    });
                    match next {
                        Ok(Some(next)) => {
                            offsets.insert(p, next.max(fetch_offset));
                        }
                        Ok(None) => {}
                        Err(e) => shared.error(true, format!("decoding {}/{p}: {e:#}", spec.topic)),
                    }
                    if !reads.is_empty() {
                        let mut ledger = shared.ledger.lock().unwrap_or_else(|e| e.into_inner());
                        for (id, offset) in reads {
                            ledger.read(spec.group, id, (spec.topic_index, p), offset);
                        }
                    }
                    group_count.fetch_add(seen, Ordering::Relaxed);
                    if seen > 0
                        && now_us >= clock.unix_us(clock.measure_start)
                        && now_us < clock.unix_us(clock.end)
                    {
                        shared.fetched_records.fetch_add(seen, Ordering::Relaxed);
                        shared
                            .fetched_bytes
                            .fetch_add(seen * u64::from(message_size), Ordering::Relaxed);
                    }
                    if measured > 0 {
                        shared
                            .consumed_records
                            .fetch_add(measured, Ordering::Relaxed);
                        shared
                            .consumed_bytes
                            .fetch_add(measured * u64::from(message_size), Ordering::Relaxed);
                    }
                }
            }
        }
    }
    if verify {
        let mut ledger = shared.ledger.lock().unwrap_or_else(|e| e.into_inner());
        for (p, pass) in passes {
            ledger.add_pass(pass, offsets[&p]);
        }
    }
    Ok(())
}

/// Runs one executor thread's producers and consumers.
async fn thread_main(
    producers: Vec<ProducerSpec>,
    consumers: Vec<ConsumerSpec>,
    w: Rc<Workload>,
    clock: Clock,
    shared: Arc<Shared>,
    cluster: Rc<ClusterMap>,
    verify: bool,
) -> ThreadResult {
    let publish = Rc::new(RefCell::new(LatencyHist::new()));
    let e2e = Rc::new(RefCell::new(LatencyHist::new()));
    let verifier = Rc::new(RefCell::new(Verifier::new()));
    let codec: Codec = match w.compression.parse() {
        Ok(c) => c,
        Err(e) => {
            shared.error(true, e);
            return ThreadResult::default();
        }
    };
    let mut tasks = Vec::new();
    for spec in producers {
        let partitions = spec.partitions.max(0) as usize;
        let txn = w.is_transactional().then(|| TxnState {
            transactional_id: format!("{}-txn-{}", spec.topic, spec.id),
            coordinator: RefCell::new(None),
            added: RefCell::new(vec![false; partitions]),
            acked: RefCell::new(Vec::new()),
            failed: Cell::new(false),
        });
        let ctx = Rc::new(ProducerCtx {
            spec,
            w: w.clone(),
            codec,
            clock,
            shared: shared.clone(),
            cluster: cluster.clone(),
            conns: Connections::new(shared.security.clone()),
            in_flight: RefCell::new(BTreeMap::new()),
            publish: publish.clone(),
            verifier: verifier.clone(),
            verify,
            outstanding: Rc::new(Cell::new(0)),
            identity: Cell::new(None),
            sequences: RefCell::new(Sequences::new(partitions)),
            txn,
        });
        let shared = shared.clone();
        tasks.push(glommio::spawn_local(async move {
            if let Err(e) = producer(ctx).await {
                shared.error(true, format!("producer: {e:#}"));
            }
            shared.producers_done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for spec in consumers {
        let (shared, cluster, e2e, verifier) = (
            shared.clone(),
            cluster.clone(),
            e2e.clone(),
            verifier.clone(),
        );
        let size = w.message_size;
        let read_committed = w.is_transactional();
        tasks.push(glommio::spawn_local(async move {
            let s = shared.clone();
            let sinks = ConsumerSinks {
                e2e,
                verifier,
                verify,
                message_size: size,
                read_committed,
            };
            if let Err(e) = consumer(spec, clock, shared, cluster, sinks).await {
                s.error(true, format!("consumer: {e:#}"));
            }
        }));
    }
    for t in tasks {
        t.await;
    }
    let publish = publish.borrow().clone();
    let e2e = e2e.borrow().clone();
    let verifier = std::mem::take(&mut *verifier.borrow_mut());
    ThreadResult {
        publish,
        e2e,
        verifier,
    }
}

/// Runs `f` on a one-off glommio executor (admin work from the main thread).
fn on_executor<T: Send + 'static>(
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> Result<T> {
    let handle = LocalExecutorBuilder::new(Placement::Unbound)
        .name("keel-bench-admin")
        .io_memory(IO_MEMORY)
        .spawn(move || async move { f().await })
        .map_err(|e| anyhow!("starting an executor: {e}"))?;
    handle.join().map_err(|e| anyhow!("executor failed: {e}"))
}

/// Connects, checks the APIs the workload needs, creates the topics.
fn setup(bootstrap: &str, security: &Security, w: &Workload) -> Result<ClusterMap> {
    let bootstrap = bootstrap.to_string();
    let security = security.clone();
    let names = w.topic_names();
    let partitions = w.partitions_per_topic as i32;
    let configs = w.topic_configs.clone();
    let replication_factor = w.replication_factor;
    let create = w.create_topics;
    let mut apis = vec![
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::Metadata,
        ApiKey::ListOffsets,
    ];
    if w.is_idempotent() {
        apis.push(ApiKey::InitProducerId);
    }
    if w.is_transactional() {
        apis.extend([
            ApiKey::FindCoordinator,
            ApiKey::AddPartitionsToTxn,
            ApiKey::EndTxn,
        ]);
    }
    on_executor(move || {
        Box::pin(async move {
            let conn = conn::connect(&bootstrap, &security).await?;
            for api in apis {
                conn.version(api)?;
            }
            if !create {
                return admin::existing_topics(&conn, &names, partitions).await;
            }
            conn.version(ApiKey::CreateTopics)?;
            admin::create_topics(&conn, &names, partitions, replication_factor, &configs).await
        })
    })?
}

fn teardown(bootstrap: &str, security: &Security, w: &Workload) -> Result<()> {
    let bootstrap = bootstrap.to_string();
    let security = security.clone();
    let names = w.topic_names();
    on_executor(move || {
        Box::pin(async move {
            let conn = conn::connect(&bootstrap, &security).await?;
            admin::delete_topics(&conn, &names).await
        })
    })?
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Runs the workload's phases on `threads` executors; returns the measured result. CPU
/// counters (the tool's, and the target's unless `quiet`, which the maximum-rate probe is)
/// are read when the measured phase starts and when it ends, so CPU and bytes cover the same
/// interval (work on records that straddle an end is counted at one end and not the other,
/// which evens out over a steady phase).
fn run_phase(
    opts: &RunOptions,
    w: &Workload,
    cluster: &ClusterMap,
    quiet: bool,
) -> Result<RunResult> {
    let threads = opts.threads.max(1);
    let topics = w.topic_names();
    let start = Instant::now() + Duration::from_millis(200);
    let clock = Clock {
        base: start,
        base_unix_us: now_unix_us() + 200_000,
        measure_start: start + Duration::from_secs_f64(w.warmup_s),
        end: start + Duration::from_secs_f64(w.warmup_s + w.duration_s),
    };
    let shared = Arc::new(Shared {
        consumed_by_group: (0..w.consumer_groups.max(1))
            .map(|_| AtomicU64::new(0))
            .collect(),
        consumers_go: AtomicBool::new(w.backlog_s <= 0.0),
        producers_total: AtomicU64::new(topics.len() as u64 * u64::from(w.producers_per_topic)),
        security: opts.security.clone(),
        ..Default::default()
    });
    // Lay producers and consumers over the threads.
    let mut producers: Vec<Vec<ProducerSpec>> = vec![Vec::new(); threads];
    let mut consumers: Vec<Vec<ConsumerSpec>> = vec![Vec::new(); threads];
    let total_producers = topics.len() as u32 * w.producers_per_topic;
    let mut pid = 0u32;
    for (ti, topic) in topics.iter().enumerate() {
        for _ in 0..w.producers_per_topic {
            let s = Schedule::for_producer(w.producer_rate as f64, total_producers, pid, start);
            producers[pid as usize % threads].push(ProducerSpec {
                id: pid,
                topic_index: ti as u32,
                topic: topic.clone(),
                partitions: w.partitions_per_topic as i32,
                rate: s.rate_per_s(),
                start: s.start(),
            });
            pid += 1;
        }
    }
    let mut cid = 0usize;
    for g in 0..w.consumer_groups {
        for (ti, topic) in topics.iter().enumerate() {
            let c = w.consumers_per_topic.max(1);
            for j in 0..c {
                let parts: Vec<i32> = (0..w.partitions_per_topic as i32)
                    .filter(|p| *p as u32 % c == j)
                    .collect();
                if parts.is_empty() || w.consumers_per_topic == 0 {
                    continue;
                }
                consumers[cid % threads].push(ConsumerSpec {
                    group: g,
                    topic_index: ti as u32,
                    topic: topic.clone(),
                    partitions: parts,
                });
                cid += 1;
            }
        }
    }
    let mut handles = Vec::new();
    for (i, (ps, cs)) in producers.into_iter().zip(consumers).enumerate() {
        let (w, shared, cluster, verify) =
            (w.clone(), shared.clone(), cluster.clone(), opts.verify);
        let h = LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("keel-bench-{i}"))
            .io_memory(IO_MEMORY)
            .spawn(move || async move {
                thread_main(ps, cs, Rc::new(w), clock, shared, Rc::new(cluster), verify).await
            })
            .map_err(|e| anyhow!("starting executor {i}: {e}"))?;
        handles.push(h);
    }
    // Live reporting, backlog release and the stop signal, from this thread.
    let total = clock.end.saturating_duration_since(start);
    let mut timeline = Vec::new();
    let mut last = (Instant::now(), 0u64, 0u64, 0u64, 0u64);
    let backlog_release = start + Duration::from_secs_f64(w.backlog_s.max(0.0));
    let mut start_mark: Option<CpuMark> = None;
    // Per interval: the target's stage histograms and this process's CPU, to explain a window
    // whose p99 grew (`windows::explain`). A failed scrape leaves that window without stages.
    let stages_of = |opts: &RunOptions| {
        opts.metrics
            .as_deref()
            .filter(|_| !quiet)
            .and_then(|addr| crate::scrape::fetch_stages(addr).ok())
    };
    let mut last_stages = stages_of(opts);
    let mut last_tool = cpu::this_process();
    loop {
        let now = Instant::now();
        if now >= clock.end {
            break;
        }
        if !shared.consumers_go.load(Ordering::Relaxed) && now >= backlog_release {
            shared.consumers_go.store(true, Ordering::Relaxed);
        }
        if w.max_messages > 0
            && shared.producers_done.load(Ordering::Relaxed) >= u64::from(total_producers)
        {
            break;
        }
        let wake = now
            + opts
                .live_every
                .min(clock.end.saturating_duration_since(now))
                .max(Duration::from_millis(10));
        // The start mark is read at the measured phase's start, not at the next live line.
        if start_mark.is_none() && clock.measure_start < wake {
            std::thread::sleep(
                clock
                    .measure_start
                    .saturating_duration_since(Instant::now()),
            );
            start_mark = Some(cpu_mark(opts, !quiet));
        }
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let cur = (
            now,
            shared.produced_records.load(Ordering::Relaxed),
            shared.produced_bytes.load(Ordering::Relaxed),
            shared.consumed_records.load(Ordering::Relaxed),
            shared.consumed_bytes.load(Ordering::Relaxed),
        );
        // Counters count only the measured phase: the first interval starts at its start.
        let dt = cur
            .0
            .duration_since(last.0.max(clock.measure_start))
            .as_secs_f64()
            .max(1e-9);
        let p99 = {
            let mut h = shared.interval.lock().unwrap_or_else(|e| e.into_inner());
            let p = h.interval_p99_ms();
            h.clear();
            p
        };
        let tool = cpu::this_process();
        let tool_cores =
            tool.since(&last_tool).total_s() / cur.0.duration_since(last.0).as_secs_f64().max(1e-9);
        last_tool = tool;
        let stages_now = stages_of(opts);
        let stages = match (&last_stages, &stages_now) {
            (Some(before), Some(after)) => crate::windows::window(before, after),
            _ => Vec::new(),
        };
        last_stages = stages_now;
        let point = TimelinePoint {
            tool_cores,
            stages,
            t_s: now
                .saturating_duration_since(clock.measure_start)
                .as_secs_f64(),
            produce_records_per_s: (cur.1 - last.1) as f64 / dt,
            produce_mb_per_s: (cur.2 - last.2) as f64 / dt / 1e6,
            consume_records_per_s: (cur.3 - last.3) as f64 / dt,
            consume_mb_per_s: (cur.4 - last.4) as f64 / dt / 1e6,
            publish_p99_ms: p99,
        };
        last = cur;
        let measuring = now >= clock.measure_start;
        if opts.live && !quiet {
            let done =
                now.saturating_duration_since(start).as_secs_f64() / total.as_secs_f64().max(1e-9);
            let bar: String = (0..20)
                .map(|i| if (i as f64) < done * 20.0 { '#' } else { '.' })
                .collect();
            let phase = if measuring { "measure" } else { "warm-up" };
            eprintln!(
                "[{bar}] {:>5.1}s {phase:<7} {}: produce {} rec/s {:.1} MB/s | consume {} rec/s {:.1} MB/s | p99 {:.2} ms | errors {}",
                now.saturating_duration_since(start).as_secs_f64(),
                opts.target,
                fmt_rate(point.produce_records_per_s),
                point.produce_mb_per_s,
                fmt_rate(point.consume_records_per_s),
                point.consume_mb_per_s,
                point.publish_p99_ms,
                shared.errors.load(Ordering::Relaxed),
            );
            let _ = std::io::stderr().flush();
        }
        if measuring && point.t_s > 0.0 {
            timeline.push(point);
        }
    }
    let end_mark = cpu_mark(opts, !quiet);
    // No start mark: the phase ended before it began (max_messages), nothing was measured.
    let start_mark = start_mark.unwrap_or_else(|| end_mark.clone());
    let tool_cpu = end_mark.tool.since(&start_mark.tool);
    let shards = match (&start_mark.scrape, &end_mark.scrape) {
        (Some(before), Some(after)) => Some(scrape::delta(&before.shards, &after.shards)),
        _ => None,
    };
    let target_cpu = target_cpu(opts.target_pid, &start_mark, &end_mark);
    shared.consumers_go.store(true, Ordering::Relaxed);
    shared.stop.store(true, Ordering::Relaxed);
    let measured_s = Instant::now()
        .saturating_duration_since(clock.measure_start)
        .as_secs_f64()
        .min(w.duration_s)
        .max(1e-9);
    let mut publish = LatencyHist::new();
    let mut e2e = LatencyHist::new();
    let mut verifier = Verifier::new();
    for h in handles {
        let r = h
            .join()
            .map_err(|e| anyhow!("bench executor failed: {e}"))?;
        publish.merge(&r.publish);
        e2e.merge(&r.e2e);
        verifier.merge(&r.verifier);
    }
    let produced_records = shared.produced_records.load(Ordering::Relaxed);
    let produced_bytes = shared.produced_bytes.load(Ordering::Relaxed);
    let consumed_records = shared.consumed_records.load(Ordering::Relaxed);
    let consumed_bytes = shared.consumed_bytes.load(Ordering::Relaxed);
    let fetched_records = shared.fetched_records.load(Ordering::Relaxed);
    let fetched_bytes = shared.fetched_bytes.load(Ordering::Relaxed);
    Ok(RunResult {
        target: opts.target.clone(),
        bootstrap: opts.bootstrap.clone(),
        security: opts.security_label.clone(),
        workload: w.summary(),
        started_unix_ms: clock.unix_us(clock.measure_start) / 1000,
        measured_s,
        produced_records,
        produced_bytes,
        consumed_records,
        consumed_bytes,
        produce_records_per_s: produced_records as f64 / measured_s,
        produce_mb_per_s: produced_bytes as f64 / measured_s / 1e6,
        consume_records_per_s: consumed_records as f64 / measured_s,
        consume_mb_per_s: consumed_bytes as f64 / measured_s / 1e6,
        fetched_records,
        fetched_bytes,
        fetch_mb_per_s: fetched_bytes as f64 / measured_s / 1e6,
        errors: shared.errors.load(Ordering::Relaxed),
        error_samples: shared
            .error_samples
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default(),
        publish_latency: publish.summary(),
        e2e_latency: e2e.summary(),
        publish_percentiles: publish.percentile_points(),
        e2e_percentiles: e2e.percentile_points(),
        timeline,
        verify: opts.verify.then(|| {
            let mut summary = verifier.summary(w.consumer_groups.max(1));
            summary.ledger = shared
                .ledger
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .report();
            summary
        }),
        shards,
        probe: opts.probe.clone(),
        machine_cores: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
        tool_cpu_s: tool_cpu.total_s(),
        tool_cpu_user_s: tool_cpu.user_s,
        tool_cpu_system_s: tool_cpu.system_s,
        tool_threads: threads as u32,
        target_cpu,
    })
}

/// Runs the whole workload against one target.
pub fn run(opts: &RunOptions) -> Result<RunResult> {
    let mut w = opts.workload.clone();
    w.validate()?;
    let cluster = setup(&opts.bootstrap, &opts.security, &w)
        .with_context(|| format!("setting up {} ({})", opts.target, opts.bootstrap))?;
    if w.rate_fraction_of_max > 0.0 {
        let mut probe = w.clone();
        probe.producer_rate = 0;
        probe.warmup_s = 1.0;
        probe.duration_s = 5.0;
        probe.max_messages = 0;
        probe.backlog_s = 0.0;
        if opts.live {
            eprintln!(
                "measuring {}'s maximum rate for {:.0} s ...",
                opts.target, probe.duration_s
            );
        }
        let quiet_opts = RunOptions {
            verify: false,
            ..opts.clone()
        };
        let max = run_phase(&quiet_opts, &probe, &cluster, true)?;
        w.producer_rate = ((max.produce_records_per_s * w.rate_fraction_of_max) as u64).max(1);
        if opts.live {
            eprintln!(
                "max {:.0} rec/s; running at {:.0}% = {} rec/s",
                max.produce_records_per_s,
                w.rate_fraction_of_max * 100.0,
                w.producer_rate
            );
        }
        teardown(&opts.bootstrap, &opts.security, &w)?;
        setup(&opts.bootstrap, &opts.security, &w)?;
    }
    let result = run_phase(opts, &w, &cluster, false)?;
    if w.delete_topics_after && w.create_topics {
        teardown(&opts.bootstrap, &opts.security, &w)?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::murmur2;

    #[test]
    fn murmur2_matches_kafka() {
        // Values from Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21") as i32, -973_932_308);
        assert_eq!(murmur2(b"foobar") as i32, -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985_981_536);
        assert_eq!(
            murmur2(b"a-little-bit-longer-string") as i32,
            -1_486_304_829
        );
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32,
            -58_897_971
        );
        assert_eq!(murmur2(b"abc") as i32, 479_470_107);
    }
}
