//! Per-shard counters: plain `Cell`s bumped on the shard's own thread, read by the admin
//! endpoint through the mesh and summed there. No atomics on the hot path.
//!
//! Besides counters: request latency histograms by API and stage (fixed buckets, merged
//! across shards when rendered), glommio's executor and task-queue run times (glommio hands
//! out deltas and resets them; the shard accumulates them here), the shard's I/O queue depth
//! (`keel_storage::io_depth`) and each owned partition's offsets and size.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

const API_SLOTS: usize = 96;

pub struct ShardCounters {
    requests: [Cell<u64>; API_SLOTS],
    requests_unknown_api: Cell<u64>,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    connections_open: Cell<u64>,
    connections_total: Cell<u64>,
    pub produce_records: Cell<u64>,
    pub produce_batches: Cell<u64>,
    /// Record bytes read for consumers' fetches (as leader or follower; followers' fetches
    /// are `replica_served_bytes`), and the part read as a follower (KIP-392).
    pub fetch_bytes: Cell<u64>,
    pub fetch_follower_bytes: Cell<u64>,
    /// Consumers' partition fetches answered with `preferred_read_replica` instead of records:
    /// by a leader naming a follower in the client's rack, by a follower out of the ISR
    /// naming the leader.
    pub fetch_preferred_read_replica: Cell<u64>,
    pub fetch_follower_redirects: Cell<u64>,
    /// Produce work on the owner shard: partition appends, time validating and appending
    /// (CPU), and time waiting for the commit (write + fdatasync under flush.policy=group).
    pub produce_appends: Cell<u64>,
    pub produce_append_ns: Cell<u64>,
    pub produce_commit_ns: Cell<u64>,
    /// `compression.type` rewrites on the owner shard: bytes of the rewritten batches as
    /// produced and as stored, and the time spent (the CPU cost of recompression).
    pub recompressed_bytes_in: Cell<u64>,
    pub recompressed_bytes_out: Cell<u64>,
    pub recompress_ns: Cell<u64>,
    /// Compaction passes: bytes read (segments cleaned) and time spent.
    pub compacted_bytes: Cell<u64>,
    pub compaction_ns: Cell<u64>,
    /// Replication: the leader's ISR changes proposed, the followers' fetched bytes and
    /// truncations (those below the high watermark apart).
    pub isr_shrinks: Cell<u64>,
    pub isr_expands: Cell<u64>,
    /// AlterPartition requests this shard sent the controller and the partitions they carried
    /// (one request carries every change queued while the previous one was in flight), and
    /// the changes the controller refused (Kafka's `FailedIsrUpdatesPerSec`).
    pub alter_partition_requests: Cell<u64>,
    pub alter_partition_partitions: Cell<u64>,
    pub failed_isr_updates: Cell<u64>,
    pub replica_fetch_bytes: Cell<u64>,
    /// Record bytes this shard's leaders served to followers.
    pub replica_served_bytes: Cell<u64>,
    pub replica_truncations: Cell<u64>,
    pub replica_truncations_below_hw: Cell<u64>,
    /// Client quotas: answers throttled and the throttle time they carried, by quota type
    /// (produce, fetch, request; see `crate::quota`).
    quota_throttled: [Cell<u64>; 3],
    quota_throttle_ms: [Cell<u64>; 3],
    /// Latency histograms by (API key, stage).
    latency: RefCell<HashMap<(i16, Stage), Histogram>>,
    /// glommio's run times, accumulated (glommio resets them on every read).
    started: Instant,
    busy_ns: Cell<u64>,
    tasks: Cell<u64>,
    /// Task queues by glommio index: name, run time, times selected.
    queues: RefCell<BTreeMap<usize, QueueTotals>>,
}

#[derive(Debug, Clone, Default)]
struct QueueTotals {
    name: String,
    busy_ns: u64,
    selected: u64,
}

/// Where a request's time goes. `Total` is the whole request, from its frame being read to
/// its response being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Frame read, until the request's task first runs.
    QueueWait,
    /// Round trip to the owner shard, less the work done there.
    Hop,
    /// Validating and appending batches to the log (owner shard, CPU).
    Append,
    /// Waiting for the append to be committed: written, and fdatasync'ed under
    /// flush.policy=group.
    Flush,
    /// Writing the response to the socket.
    ResponseWrite,
    Total,
}

// No replication_wait stage: Keel does not replicate partition data yet (acks=all is
// answered once the leader's log is committed), so there is no wait to measure.
impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::QueueWait => "queue_wait",
            Stage::Hop => "hop",
            Stage::Append => "append",
            Stage::Flush => "flush",
            Stage::ResponseWrite => "response_write",
            Stage::Total => "total",
        }
    }
}

/// Upper bounds of the latency buckets, in seconds (Prometheus `le`), 5 us to 10 s.
pub const BUCKETS_S: [f64; 20] = [
    0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A fixed-bucket latency histogram; `buckets[i]` counts samples in
/// `(BUCKETS_S[i-1], BUCKETS_S[i]]`, the last slot those above every bound.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: [u64; BUCKETS_S.len() + 1],
    pub count: u64,
    pub sum_s: f64,
}

impl Histogram {
    pub fn record(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS_S.partition_point(|&b| b < s);
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_s += s;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum_s += other.sum_s;
    }
}

impl Default for ShardCounters {
    fn default() -> Self {
        ShardCounters {
            requests: std::array::from_fn(|_| Cell::new(0)),
            requests_unknown_api: Cell::new(0),
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            connections_open: Cell::new(0),
            connections_total: Cell::new(0),
            produce_records: Cell::new(0),
            produce_batches: Cell::new(0),
            fetch_bytes: Cell::new(0),
            fetch_follower_bytes: Cell::new(0),
            fetch_preferred_read_replica: Cell::new(0),
            fetch_follower_redirects: Cell::new(0),
            produce_appends: Cell::new(0),
            produce_append_ns: Cell::new(0),
            produce_commit_ns: Cell::new(0),
            recompressed_bytes_in: Cell::new(0),
            recompressed_bytes_out: Cell::new(0),
            recompress_ns: Cell::new(0),
            compacted_bytes: Cell::new(0),
            compaction_ns: Cell::new(0),
            isr_shrinks: Cell::new(0),
            isr_expands: Cell::new(0),
            alter_partition_requests: Cell::new(0),
            alter_partition_partitions: Cell::new(0),
            failed_isr_updates: Cell::new(0),
            replica_fetch_bytes: Cell::new(0),
            replica_served_bytes: Cell::new(0),
            replica_truncations: Cell::new(0),
            replica_truncations_below_hw: Cell::new(0),
            quota_throttled: Default::default(),
            quota_throttle_ms: Default::default(),
            latency: RefCell::new(HashMap::new()),
            started: Instant::now(),
            busy_ns: Cell::new(0),
            tasks: Cell::new(0),
            queues: RefCell::new(BTreeMap::new()),
        }
    }
}

fn bump(c: &Cell<u64>, n: u64) {
    c.set(c.get().wrapping_add(n));
}

impl ShardCounters {
    pub fn count_request(&self, api: Option<ApiKey>) {
        match api.map(|a| a as i16 as usize).filter(|&i| i < API_SLOTS) {
            Some(i) => bump(&self.requests[i], 1),
            None => bump(&self.requests_unknown_api, 1),
        }
    }
    /// An answer a client quota of type `t` throttled by `ms`.
    pub fn quota_throttled(&self, t: crate::quota::QuotaType, ms: u64) {
        bump(&self.quota_throttled[t as usize], 1);
        bump(&self.quota_throttle_ms[t as usize], ms);
    }
    pub fn add_bytes_in(&self, n: usize) {
        bump(&self.bytes_in, n as u64);
    }
    pub fn add_bytes_out(&self, n: usize) {
        bump(&self.bytes_out, n as u64);
    }
    pub fn connection_opened(&self) {
        bump(&self.connections_open, 1);
        bump(&self.connections_total, 1);
    }
    pub fn connection_closed(&self) {
        self.connections_open
            .set(self.connections_open.get().saturating_sub(1));
    }

    /// Records `d` for `api` (a raw API key) at `stage`.
    pub fn record(&self, api: i16, stage: Stage, d: Duration) {
        self.latency
            .borrow_mut()
            .entry((api, stage))
            .or_default()
            .record(d);
    }

    /// Names a task queue in the metrics (glommio's stats carry only its index).
    pub fn name_queue(&self, handle: glommio::TaskQueueHandle, name: &str) {
        self.queues
            .borrow_mut()
            .entry(handle.index())
            .or_default()
            .name = name.to_string();
    }

    /// Adds glommio's run times since the last call to the totals. Must run on the shard.
    fn sample_executor(&self) {
        let ex = glommio::executor();
        let stats = ex.executor_stats();
        bump(&self.busy_ns, stats.total_runtime().as_nanos() as u64);
        bump(&self.tasks, stats.tasks_executed());
        let mut queues = self.queues.borrow_mut();
        for q in ex.all_task_queue_stats(Vec::new()) {
            let t = queues.entry(q.index().index()).or_default();
            if t.name.is_empty() {
                t.name = if q.index().index() == 0 {
                    "default".into()
                } else {
                    format!("tq{}", q.index().index())
                };
            }
            t.busy_ns += q.runtime().as_nanos() as u64;
            t.selected += q.queue_selected();
        }
    }

    pub fn note_compaction(&self, bytes_in: u64, elapsed: std::time::Duration) {
        bump(&self.compacted_bytes, bytes_in);
        bump(&self.compaction_ns, elapsed.as_nanos() as u64);
    }

    /// A `Send` copy of the counters, to carry to the shard that renders metrics.
    /// Must run on the shard (it reads the shard's executor).
    pub fn snapshot(&self) -> CountersSnapshot {
        self.sample_executor();
        let uptime = self.started.elapsed().as_secs_f64();
        let busy_s = self.busy_ns.get() as f64 / 1e9;
        let io = keel_storage::io_depth::stats();
        CountersSnapshot {
            busy_s,
            idle_s: (uptime - busy_s).max(0.0),
            tasks_executed: self.tasks.get(),
            task_queues: self
                .queues
                .borrow()
                .values()
                .map(|q| TaskQueueSnapshot {
                    name: q.name.clone(),
                    busy_s: q.busy_ns as f64 / 1e9,
                    idle_s: (uptime - q.busy_ns as f64 / 1e9).max(0.0),
                    selected: q.selected,
                })
                .collect(),
            latency: self
                .latency
                .borrow()
                .iter()
                .map(|(k, h)| (*k, h.clone()))
                .collect(),
            io_in_flight: io.in_flight,
            io_depth_seconds: io.depth_seconds,
            io_ops: io.ops,
            io_latency_s: io.latency_seconds,
            requests: (0..API_SLOTS)
                .filter_map(|i| {
                    let n = self.requests[i].get();
                    (n > 0).then_some((i as i16, n))
                })
                .collect(),
            requests_unknown_api: self.requests_unknown_api.get(),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            connections_open: self.connections_open.get(),
            connections_total: self.connections_total.get(),
            produce_records: self.produce_records.get(),
            produce_batches: self.produce_batches.get(),
            fetch_bytes: self.fetch_bytes.get(),
            fetch_follower_bytes: self.fetch_follower_bytes.get(),
            fetch_preferred_read_replica: self.fetch_preferred_read_replica.get(),
            fetch_follower_redirects: self.fetch_follower_redirects.get(),
            produce_appends: self.produce_appends.get(),
            produce_append_s: self.produce_append_ns.get() as f64 / 1e9,
            produce_commit_s: self.produce_commit_ns.get() as f64 / 1e9,
            recompressed_bytes_in: self.recompressed_bytes_in.get(),
            recompressed_bytes_out: self.recompressed_bytes_out.get(),
            recompress_s: self.recompress_ns.get() as f64 / 1e9,
            compacted_bytes: self.compacted_bytes.get(),
            compaction_s: self.compaction_ns.get() as f64 / 1e9,
            isr_shrinks: self.isr_shrinks.get(),
            isr_expands: self.isr_expands.get(),
            alter_partition_requests: self.alter_partition_requests.get(),
            alter_partition_partitions: self.alter_partition_partitions.get(),
            failed_isr_updates: self.failed_isr_updates.get(),
            replica_fetch_bytes: self.replica_fetch_bytes.get(),
            replica_served_bytes: self.replica_served_bytes.get(),
            replica_truncations: self.replica_truncations.get(),
            replica_truncations_below_hw: self.replica_truncations_below_hw.get(),
            quota_throttled: self.quota_throttled.each_ref().map(Cell::get),
            quota_throttle_ms: self.quota_throttle_ms.each_ref().map(Cell::get),
            cpu: thread_cpu(),
            ..Default::default()
        }
    }
}

/// User and system CPU seconds, as the kernel accounts them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CpuSeconds {
    pub user_s: f64,
    pub system_s: f64,
}

fn cpu_of(who: libc::c_int) -> CpuSeconds {
    // SAFETY: an all-zero rusage is a valid value, and getrusage writes only into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local struct; `who` is one of the RUSAGE_* constants.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return CpuSeconds::default();
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    CpuSeconds {
        user_s: secs(usage.ru_utime),
        system_s: secs(usage.ru_stime),
    }
}

/// The calling thread's CPU time (a shard's, when called on the shard).
pub fn thread_cpu() -> CpuSeconds {
    cpu_of(libc::RUSAGE_THREAD)
}

/// The whole process's CPU time: every shard, the metadata thread, glommio's helper threads.
pub fn process_cpu() -> CpuSeconds {
    cpu_of(libc::RUSAGE_SELF)
}

/// Prometheus' standard `process_cpu_seconds_total`, and the same split by mode.
pub fn render_process_cpu(cpu: CpuSeconds) -> String {
    format!(
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
         # TYPE process_cpu_seconds_total counter\n\
         process_cpu_seconds_total {}\n\
         # HELP keel_process_cpu_seconds_total The process's CPU time by mode (user, system): every thread, shards and others.\n\
         # TYPE keel_process_cpu_seconds_total counter\n\
         keel_process_cpu_seconds_total{{mode=\"user\"}} {}\n\
         keel_process_cpu_seconds_total{{mode=\"system\"}} {}\n",
        cpu.user_s + cpu.system_s,
        cpu.user_s,
        cpu.system_s
    )
}

#[derive(Debug, Default, Clone)]
pub struct CountersSnapshot {
    pub requests: Vec<(i16, u64)>,
    pub requests_unknown_api: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Client quotas' throttled answers and their throttle time, by quota type.
    pub quota_throttled: [u64; 3],
    pub quota_throttle_ms: [u64; 3],
    pub connections_open: u64,
    pub connections_total: u64,
    pub produce_records: u64,
    pub produce_batches: u64,
    pub fetch_bytes: u64,
    pub fetch_follower_bytes: u64,
    pub fetch_preferred_read_replica: u64,
    pub fetch_follower_redirects: u64,
    pub cross_shard_hops: u64,
    pub cross_shard_jobs: u64,
    pub partitions_owned: u64,
    /// Seconds the shard's executor spent running tasks and polling I/O (not parked), and
    /// the rest of its uptime.
    pub busy_s: f64,
    pub idle_s: f64,
    pub tasks_executed: u64,
    pub task_queues: Vec<TaskQueueSnapshot>,
    pub latency: Vec<((i16, Stage), Histogram)>,
    /// The shard thread's kernel thread id (for `perf top -t`).
    pub thread_id: i64,
    /// The kernel's name of the thread (`keel-shard-N`).
    pub thread_name: String,
    pub io_in_flight: u64,
    pub io_depth_seconds: f64,
    pub io_ops: [u64; 3],
    pub io_latency_s: [f64; 3],
    pub partitions: Vec<PartitionSnapshot>,
    /// Times the stall detector caught a task holding the reactor past its budget.
    pub reactor_stalls: u64,
    pub produce_appends: u64,
    pub produce_append_s: f64,
    pub produce_commit_s: f64,
    pub recompressed_bytes_in: u64,
    pub recompressed_bytes_out: u64,
    pub recompress_s: f64,
    pub compacted_bytes: u64,
    pub compaction_s: f64,
    /// Bytes in the shard's tail caches, and batches the shard budget evicted.
    pub tail_cache_bytes: u64,
    pub tail_cache_evictions: u64,
    /// Closed segment files open in the shard's file cache.
    pub segment_files_open: u64,
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    pub alter_partition_requests: u64,
    pub alter_partition_partitions: u64,
    pub failed_isr_updates: u64,
    pub replica_fetch_bytes: u64,
    pub replica_served_bytes: u64,
    pub replica_truncations: u64,
    pub replica_truncations_below_hw: u64,
    /// The shard thread's CPU time, read on the shard (getrusage RUSAGE_THREAD).
    pub cpu: CpuSeconds,
}

#[derive(Debug, Default, Clone)]
pub struct TaskQueueSnapshot {
    pub name: String,
    pub busy_s: f64,
    pub idle_s: f64,
    pub selected: u64,
}

#[derive(Debug, Default, Clone)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub last_stable_offset: i64,
    pub size_bytes: u64,
    pub segments: u64,
    /// Replication, on the broker that leads the partition (`None` elsewhere): replicas,
    /// ISR size, min.insync.replicas, and per follower (broker id, lag in records, ms since it
    /// was last caught up).
    pub leader: Option<LeaderSnapshot>,
}

#[derive(Debug, Default, Clone)]
pub struct LeaderSnapshot {
    pub replicas: u32,
    pub isr: u32,
    pub min_insync_replicas: i32,
    pub followers: Vec<(i32, i64, i64)>,
}

/// A label value, escaped as the text format wants.
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn api_name(key: i16) -> String {
    ApiKey::try_from(key)
        .map(|k| format!("{k:?}"))
        .unwrap_or_else(|_| key.to_string())
}

/// Renders every shard's counters in Prometheus text format.
pub fn render(shards: &[CountersSnapshot]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut family =
        |name: &str, kind: &str, help: &str, value: &dyn Fn(&CountersSnapshot) -> f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (i, s) in shards.iter().enumerate() {
                let _ = writeln!(out, "{name}{{shard=\"{i}\"}} {}", value(s));
            }
        };
    family(
        "keel_bytes_in_total",
        "counter",
        "Request bytes read from clients.",
        &|s| s.bytes_in as f64,
    );
    family(
        "keel_bytes_out_total",
        "counter",
        "Response bytes written to clients.",
        &|s| s.bytes_out as f64,
    );
    family(
        "keel_cross_shard_hops_total",
        "counter",
        "Calls this shard sent to the owner shard of a partition (or to the controller).",
        &|s| s.cross_shard_hops as f64,
    );
    family(
        "keel_cross_shard_jobs_total",
        "counter",
        "Calls this shard ran for other shards.",
        &|s| s.cross_shard_jobs as f64,
    );
    family(
        "keel_partitions_owned",
        "gauge",
        "Partitions whose log this shard owns.",
        &|s| s.partitions_owned as f64,
    );
    family(
        "keel_connections",
        "gauge",
        "Open client connections.",
        &|s| s.connections_open as f64,
    );
    family(
        "keel_connections_total",
        "counter",
        "Client connections accepted.",
        &|s| s.connections_total as f64,
    );
    family(
        "keel_produce_records_total",
        "counter",
        "Records appended.",
        &|s| s.produce_records as f64,
    );
    family(
        "keel_produce_batches_total",
        "counter",
        "Record batches appended.",
        &|s| s.produce_batches as f64,
    );
    family(
        "keel_fetch_bytes_total",
        "counter",
        "Record bytes read for consumers' fetches, as leader or follower (followers' fetches are keel_replica_served_bytes_total).",
        &|s| s.fetch_bytes as f64,
    );
    family(
        "keel_fetch_follower_bytes_total",
        "counter",
        "Record bytes read for consumers' fetches of partitions this broker follows (KIP-392).",
        &|s| s.fetch_follower_bytes as f64,
    );
    family(
        "keel_fetch_preferred_read_replica_total",
        "counter",
        "Consumers' partition fetches a leader answered with preferred_read_replica, a follower in the client's rack, instead of records (KIP-392).",
        &|s| s.fetch_preferred_read_replica as f64,
    );
    family(
        "keel_fetch_follower_redirects_total",
        "counter",
        "Consumers' partition fetches a follower out of the ISR answered with preferred_read_replica = the leader.",
        &|s| s.fetch_follower_redirects as f64,
    );
    family(
        "keel_shard_tasks_total",
        "counter",
        "Tasks the shard's executor ran.",
        &|s| s.tasks_executed as f64,
    );
    family(
        "keel_reactor_stalls_total",
        "counter",
        "Tasks that held the shard's reactor past their task queue's budget plus reactor.stall.threshold.ms.",
        &|s| s.reactor_stalls as f64,
    );
    family(
        "keel_requests_unknown_api_total",
        "counter",
        "Requests with an unknown API key.",
        &|s| s.requests_unknown_api as f64,
    );
    family(
        "keel_shard_busy_seconds_total",
        "counter",
        "Time the shard's executor ran tasks or polled I/O (not parked).",
        &|s| s.busy_s,
    );
    family(
        "keel_produce_append_seconds_total",
        "counter",
        "Owner-shard time validating and appending produced batches.",
        &|s| s.produce_append_s,
    );
    family(
        "keel_produce_commit_seconds_total",
        "counter",
        "Owner-shard time produce requests waited for their commit (write, and fdatasync under flush.policy=group).",
        &|s| s.produce_commit_s,
    );
    family(
        "keel_produce_recompressed_bytes_in_total",
        "counter",
        "Bytes of batches compression.type rewrote into the topic's codec, as produced.",
        &|s| s.recompressed_bytes_in as f64,
    );
    family(
        "keel_produce_recompressed_bytes_out_total",
        "counter",
        "Bytes of batches compression.type rewrote into the topic's codec, as stored.",
        &|s| s.recompressed_bytes_out as f64,
    );
    family(
        "keel_produce_recompress_seconds_total",
        "counter",
        "Time the owner shard spent recompressing batches for compression.type.",
        &|s| s.recompress_s,
    );
    family(
        "keel_tail_cache_bytes",
        "gauge",
        "Bytes of recent batches cached in memory (within log.tail.cache.shard.bytes).",
        &|s| s.tail_cache_bytes as f64,
    );
    family(
        "keel_tail_cache_evictions_total",
        "counter",
        "Cached batches evicted to keep the shard within its tail-cache budget.",
        &|s| s.tail_cache_evictions as f64,
    );
    family(
        "keel_segment_files_open",
        "gauge",
        "Closed segment files open in the shard's file cache.",
        &|s| s.segment_files_open as f64,
    );
    family(
        "keel_isr_shrinks_total",
        "counter",
        "ISR shrinks this shard's leaders proposed (a follower fell behind replica.lag.time.max.ms).",
        &|s| s.isr_shrinks as f64,
    );
    family(
        "keel_isr_expands_total",
        "counter",
        "ISR expansions this shard's leaders proposed (a follower caught up).",
        &|s| s.isr_expands as f64,
    );
    family(
        "keel_alter_partition_requests_total",
        "counter",
        "AlterPartition requests this shard sent the controller (at most one in flight; each carries every ISR change queued meanwhile).",
        &|s| s.alter_partition_requests as f64,
    );
    family(
        "keel_alter_partition_partitions_total",
        "counter",
        "Partition ISR changes carried by this shard's AlterPartition requests.",
        &|s| s.alter_partition_partitions as f64,
    );
    family(
        "keel_failed_isr_updates_total",
        "counter",
        "ISR changes the controller refused (Kafka's FailedIsrUpdatesPerSec).",
        &|s| s.failed_isr_updates as f64,
    );
    family(
        "keel_replica_fetch_bytes_total",
        "counter",
        "Record bytes this shard's followers fetched from their leaders and appended.",
        &|s| s.replica_fetch_bytes as f64,
    );
    family(
        "keel_replica_served_bytes_total",
        "counter",
        "Record bytes this shard's leaders served to their followers' fetches.",
        &|s| s.replica_served_bytes as f64,
    );
    family(
        "keel_replica_truncations_total",
        "counter",
        "Follower logs truncated to where they agree with the leader.",
        &|s| s.replica_truncations as f64,
    );
    family(
        "keel_replica_truncations_below_high_watermark_total",
        "counter",
        "Follower truncations below the follower's high watermark (records it had counted as committed).",
        &|s| s.replica_truncations_below_hw as f64,
    );
    family(
        "keel_compacted_bytes_total",
        "counter",
        "Segment bytes read by compaction passes.",
        &|s| s.compacted_bytes as f64,
    );
    family(
        "keel_compaction_seconds_total",
        "counter",
        "Time spent in compaction passes (wall, yielding included).",
        &|s| s.compaction_s,
    );
    family(
        "keel_produce_appends_total",
        "counter",
        "Partition appends of produce requests (owner shard).",
        &|s| s.produce_appends as f64,
    );
    let _ = writeln!(
        out,
        "# HELP keel_requests_total Kafka requests received, by API.\n# TYPE keel_requests_total counter"
    );
    for (i, s) in shards.iter().enumerate() {
        for (key, n) in &s.requests {
            let api = api_name(*key);
            let _ = writeln!(
                out,
                "keel_requests_total{{shard=\"{i}\",api=\"{api}\"}} {n}"
            );
        }
    }
    render_quotas(&mut out, shards);
    render_shard_details(&mut out, shards);
    render_partitions(&mut out, shards);
    render_replication(&mut out, shards);
    render_latency(&mut out, shards);
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A family with one or more series per shard: `series` gives each series' labels after
/// `shard` (empty, or starting with a comma) and its value.
fn per_shard(
    out: &mut String,
    shards: &[CountersSnapshot],
    (name, kind, help): (&str, &str, &str),
    series: impl Fn(&CountersSnapshot) -> Vec<(String, f64)>,
) {
    use std::fmt::Write;
    header(out, name, kind, help);
    for (i, s) in shards.iter().enumerate() {
        for (labels, value) in series(s) {
            let _ = writeln!(out, "{name}{{shard=\"{i}\"{labels}}} {value}");
        }
    }
}

/// Client quota throttling by quota type (Kafka's `throttle-time` sensors, summed).
fn render_quotas(out: &mut String, shards: &[CountersSnapshot]) {
    let by_type = |f: fn(&CountersSnapshot, usize) -> f64| {
        move |s: &CountersSnapshot| {
            crate::quota::QUOTA_TYPES
                .iter()
                .map(|t| (format!(",quota_type=\"{}\"", t.label()), f(s, *t as usize)))
                .collect()
        }
    };
    per_shard(
        out,
        shards,
        (
            "keel_quota_throttled_responses_total",
            "counter",
            "Answers a client quota throttled (throttle_time_ms > 0, the connection muted), by quota type.",
        ),
        by_type(|s, t| s.quota_throttled[t] as f64),
    );
    per_shard(
        out,
        shards,
        (
            "keel_quota_throttle_time_ms_total",
            "counter",
            "Throttle time client quotas gave answers, in milliseconds, by quota type.",
        ),
        by_type(|s, t| s.quota_throttle_ms[t] as f64),
    );
}

/// Idle time, thread ids, task queues and I/O depth, per shard.
fn render_shard_details(out: &mut String, shards: &[CountersSnapshot]) {
    let one = |v: f64| vec![(String::new(), v)];
    let by_queue = |f: fn(&TaskQueueSnapshot) -> f64| {
        move |s: &CountersSnapshot| {
            s.task_queues
                .iter()
                .map(|q| (format!(",queue=\"{}\"", label(&q.name)), f(q)))
                .collect()
        }
    };
    let by_op = |f: fn(&CountersSnapshot, usize) -> f64| {
        move |s: &CountersSnapshot| {
            keel_storage::io_depth::KINDS
                .iter()
                .map(|(k, name)| (format!(",op=\"{name}\""), f(s, *k as usize)))
                .collect()
        }
    };
    per_shard(
        out,
        shards,
        (
            "keel_shard_idle_seconds_total",
            "counter",
            "Time the shard's executor was parked or spinning with nothing to run (its uptime less busy time).",
        ),
        |s| one(s.idle_s),
    );
    per_shard(
        out,
        shards,
        (
            "keel_shard_cpu_seconds_total",
            "counter",
            "CPU time of the shard's thread by mode (user, system), as the kernel accounts it: unlike busy time, it counts parking and waking and excludes time the thread was runnable but not running.",
        ),
        |s| {
            vec![
                (",mode=\"user\"".to_string(), s.cpu.user_s),
                (",mode=\"system\"".to_string(), s.cpu.system_s),
            ]
        },
    );
    per_shard(
        out,
        shards,
        (
            "keel_shard_info",
            "gauge",
            "The shard's thread: its kernel thread id (perf top -t TID) and name.",
        ),
        |s| {
            vec![(
                format!(
                    ",thread_id=\"{}\",thread_name=\"{}\"",
                    s.thread_id,
                    label(&s.thread_name)
                ),
                1.0,
            )]
        },
    );
    per_shard(
        out,
        shards,
        (
            "keel_task_queue_busy_seconds_total",
            "counter",
            "Time each glommio task queue of the shard ran tasks.",
        ),
        by_queue(|q| q.busy_s),
    );
    per_shard(
        out,
        shards,
        (
            "keel_task_queue_idle_seconds_total",
            "counter",
            "Time each glommio task queue of the shard did not run (the shard's uptime less the queue's busy time).",
        ),
        by_queue(|q| q.idle_s),
    );
    per_shard(
        out,
        shards,
        (
            "keel_task_queue_runs_total",
            "counter",
            "Times the shard's scheduler picked each task queue to run.",
        ),
        by_queue(|q| q.selected as f64),
    );
    per_shard(
        out,
        shards,
        (
            "keel_io_queue_depth",
            "gauge",
            "Log writes, fdatasyncs and reads the shard has in flight in io_uring now.",
        ),
        |s| one(s.io_in_flight as f64),
    );
    per_shard(
        out,
        shards,
        (
            "keel_io_queue_depth_seconds_total",
            "counter",
            "Integral of the shard's I/O queue depth over time: its rate is the mean depth.",
        ),
        |s| one(s.io_depth_seconds),
    );
    per_shard(
        out,
        shards,
        (
            "keel_io_operations_total",
            "counter",
            "Log I/Os the shard completed, by kind.",
        ),
        by_op(|s, k| s.io_ops[k] as f64),
    );
    per_shard(
        out,
        shards,
        (
            "keel_io_latency_seconds_total",
            "counter",
            "Summed latency of the log I/Os the shard completed, by kind.",
        ),
        by_op(|s, k| s.io_latency_s[k]),
    );
}

/// Offsets and size of every partition a shard owns.
fn render_partitions(out: &mut String, shards: &[CountersSnapshot]) {
    use std::fmt::Write;
    type Field = fn(&PartitionSnapshot) -> f64;
    let families: [(&str, &str, Field); 6] = [
        (
            "keel_partition_log_start_offset",
            "The partition's log start offset.",
            |p| p.log_start_offset as f64,
        ),
        (
            "keel_partition_high_watermark",
            "The partition's high watermark.",
            |p| p.high_watermark as f64,
        ),
        (
            "keel_partition_log_end_offset",
            "The partition's log end offset.",
            |p| p.log_end_offset as f64,
        ),
        (
            "keel_partition_last_stable_offset",
            "The partition's last stable offset (read_committed consumers read up to it).",
            |p| p.last_stable_offset as f64,
        ),
        (
            "keel_partition_size_bytes",
            "Bytes of the partition's segment files.",
            |p| p.size_bytes as f64,
        ),
        (
            "keel_partition_segments",
            "Segments of the partition's log.",
            |p| p.segments as f64,
        ),
    ];
    for (name, help, field) in families {
        header(out, name, "gauge", help);
        for (i, s) in shards.iter().enumerate() {
            for p in &s.partitions {
                let _ = writeln!(
                    out,
                    "{name}{{topic=\"{}\",partition=\"{}\",shard=\"{i}\"}} {}",
                    label(&p.topic),
                    p.partition,
                    field(p)
                );
            }
        }
    }
}

/// Replication state of the partitions this broker leads: under-replicated (ISR smaller than
/// the replicas), under min ISR, and each follower's lag.
fn render_replication(out: &mut String, shards: &[CountersSnapshot]) {
    use std::fmt::Write;
    let led = || {
        shards
            .iter()
            .flat_map(|s| s.partitions.iter())
            .filter_map(|p| p.leader.as_ref().map(|l| (p, l)))
    };
    let under_replicated = led().filter(|(_, l)| l.isr < l.replicas).count();
    let under_min_isr = led()
        .filter(|(_, l)| (l.isr as i32) < l.min_insync_replicas)
        .count();
    header(
        out,
        "keel_under_replicated_partitions",
        "gauge",
        "Partitions this broker leads whose ISR is smaller than their replica set.",
    );
    let _ = writeln!(out, "keel_under_replicated_partitions {under_replicated}");
    header(
        out,
        "keel_under_min_isr_partitions",
        "gauge",
        "Partitions this broker leads whose ISR is below min.insync.replicas (acks=all refused).",
    );
    let _ = writeln!(out, "keel_under_min_isr_partitions {under_min_isr}");
    header(
        out,
        "keel_follower_lag_records",
        "gauge",
        "Records a follower is behind this leader's log end, per partition and follower.",
    );
    for (p, l) in led() {
        for (follower, lag, _) in &l.followers {
            let _ = writeln!(
                out,
                "keel_follower_lag_records{{topic=\"{}\",partition=\"{}\",follower=\"{follower}\"}} {lag}",
                label(&p.topic),
                p.partition
            );
        }
    }
    header(
        out,
        "keel_follower_lag_ms",
        "gauge",
        "Milliseconds since a follower last had every record of this leader, per partition and follower.",
    );
    for (p, l) in led() {
        for (follower, _, ms) in &l.followers {
            let _ = writeln!(
                out,
                "keel_follower_lag_ms{{topic=\"{}\",partition=\"{}\",follower=\"{follower}\"}} {ms}",
                label(&p.topic),
                p.partition
            );
        }
    }
}

/// Latency histograms by API and stage, merged across shards.
fn render_latency(out: &mut String, shards: &[CountersSnapshot]) {
    use std::fmt::Write;
    let mut merged: BTreeMap<(i16, Stage), Histogram> = BTreeMap::new();
    for s in shards {
        for (k, h) in &s.latency {
            merged.entry(*k).or_default().merge(h);
        }
    }
    let families = [
        (
            "keel_request_latency_seconds",
            "Whole requests, from the frame read to the response written, by API.",
            true,
        ),
        (
            "keel_request_stage_seconds",
            "Time requests spent in each stage (queue_wait, hop, append, flush, response_write), by API.",
            false,
        ),
    ];
    for (name, help, total) in families {
        header(out, name, "histogram", help);
        for ((api, stage), h) in &merged {
            if (*stage == Stage::Total) != total {
                continue;
            }
            let labels = if total {
                format!("api=\"{}\"", api_name(*api))
            } else {
                format!("api=\"{}\",stage=\"{}\"", api_name(*api), stage.name())
            };
            let mut cumulative = 0;
            for (i, bound) in BUCKETS_S.iter().enumerate() {
                cumulative += h.buckets[i];
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum_s);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
        }
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
