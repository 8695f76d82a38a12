//! The result of one benchmark run, as written to the JSON file and read by the reports.
//! Latencies are in milliseconds (f64), rates per second, sizes in bytes.

use serde::{Deserialize, Serialize};

use crate::checker::LedgerReport;

/// Percentiles of one latency histogram.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub p9999_ms: f64,
    pub max_ms: f64,
}

/// One point of an HDR percentile plot: the percentile (0..100) and the latency there.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PercentilePoint {
    pub percentile: f64,
    pub latency_ms: f64,
}

/// Throughput and latency over one reporting interval.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TimelinePoint {
    /// Seconds since the measured phase began (end of the interval).
    pub t_s: f64,
    pub produce_records_per_s: f64,
    pub produce_mb_per_s: f64,
    pub consume_records_per_s: f64,
    pub consume_mb_per_s: f64,
    pub publish_p99_ms: f64,
    /// Cores keel-bench itself kept busy over the interval (its user + system CPU / wall time).
    #[serde(default)]
    pub tool_cores: f64,
    /// The target's request stages over the interval (with `--metrics` on a Keel broker).
    #[serde(default)]
    pub stages: Vec<StageWindow>,
}

/// One stage over one window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StageWindow {
    pub api: String,
    pub stage: String,
    pub count: u64,
    pub mean_ms: f64,
    /// The upper bound of the bucket holding the window's 99th percentile (the last finite
    /// bound when it lies above every bound).
    pub p99_ms: f64,
}

/// What `--verify` found.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct VerifySummary {
    /// Messages the broker acknowledged.
    pub acked: u64,
    /// Distinct acknowledged messages seen by every consumer group.
    pub consumed: u64,
    /// Acknowledged but never consumed (summed over consumer groups).
    pub lost: u64,
    /// Consumed more than once by one group.
    pub duplicated: u64,
    /// Consumed out of per-partition send order.
    pub reordered: u64,
    /// Where each record was acknowledged and read (partition, offset): the offset checker's
    /// counts and first examples (absent from results written before it existed).
    #[serde(default)]
    pub ledger: LedgerReport,
}

/// Per-shard counters from Keel's /metrics, the difference between after and before the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ShardDelta {
    pub shard: u32,
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cross_shard_hops: u64,
    pub partitions_owned: u64,
    /// Seconds the shard's executor was busy (not parked), when the target reports it.
    pub busy_s: f64,
    /// Produce stages on the owner shard (Keel only): partition appends, seconds spent
    /// validating + appending, and seconds requests waited for their commit (write + fsync).
    #[serde(default)]
    pub produce_appends: u64,
    #[serde(default)]
    pub produce_append_s: f64,
    #[serde(default)]
    pub produce_commit_s: f64,
    /// CPU seconds the shard's thread used in user and in system mode
    /// (`keel_shard_cpu_seconds_total`); None when the target does not export them.
    #[serde(default)]
    pub cpu_user_s: Option<f64>,
    #[serde(default)]
    pub cpu_system_s: Option<f64>,
}

/// CPU seconds the target broker's process used during the measured phase.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TargetCpu {
    /// Where the figures come from: "/metrics" or "/proc/PID/stat".
    pub source: String,
    /// User + system.
    pub total_s: f64,
    /// The split by mode, when the source gives it (`process_cpu_seconds_total` alone does not).
    pub user_s: Option<f64>,
    pub system_s: Option<f64>,
}

/// The floor: what a minimal server (one glommio core: receive length-prefixed frames,
/// O_DIRECT append, group-commit fdatasync, acknowledge, send the bytes to a reader) spends
/// in CPU to move the same bytes in the same frames as the run (`keel-bench probe --floor`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FloorResult {
    /// Bytes per produce frame (the workload's batch in whole records).
    pub frame_bytes: u64,
    /// The producer's pace in bytes/s; 0 = as fast as the acknowledgements allow.
    pub rate_bytes_per_s: u64,
    /// Bytes the producer was to send.
    pub bytes_asked: u64,
    /// Bytes the server received from the producer.
    pub bytes_received: u64,
    /// Bytes the server sent to the reader (equal to `bytes_received` in a complete run).
    pub bytes_sent_to_reader: u64,
    /// Bytes appended to the file and made durable (fdatasync'ed).
    pub bytes_written: u64,
    /// The file's size after the last commit (trimmed to `bytes_written`), before removal.
    pub file_bytes: u64,
    /// Produce frames received.
    pub frames: u64,
    /// Group commits (fdatasyncs).
    pub commits: u64,
    /// From the first frame to the last byte sent to the reader.
    pub elapsed_s: f64,
    /// The core the server was pinned to (None: the affinity mask could not be read).
    pub core: Option<u32>,
    /// The server's CPU seconds in user and system mode over `elapsed_s`: its thread, plus
    /// the io_uring workers it started (fdatasync runs there), which count as system time.
    pub user_s: f64,
    pub system_s: f64,
    /// Of `system_s`, the io_uring workers' share.
    pub io_worker_s: f64,
    /// The producer stopped early at the probe's time limit (`bytes_received` < `bytes_asked`).
    pub time_limited: bool,
}

impl FloorResult {
    /// Bytes moved: received from the producer plus sent to the reader.
    pub fn bytes_moved(&self) -> u64 {
        self.bytes_received
            .saturating_add(self.bytes_sent_to_reader)
    }
}

/// The machine's own limits (`keel-bench probe`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeResult {
    /// Directory probed (the data disk).
    pub dir: String,
    /// Sequential O_DIRECT write bandwidth.
    pub disk_write_mb_per_s: f64,
    /// 4 KiB write + fdatasync latency.
    pub fdatasync: LatencySummary,
    /// Loopback TCP bandwidth, one stream.
    pub loopback_mb_per_s: f64,
    /// Loopback TCP round trip of a small message.
    pub loopback_rtt: LatencySummary,
    /// The CPU floor for the run's workload shape (absent from results before it existed,
    /// and from `keel-bench probe` without `--floor`).
    #[serde(default)]
    pub floor: Option<FloorResult>,
}

/// The workload as run, for the report header.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkloadSummary {
    pub name: String,
    pub topics: u32,
    pub partitions_per_topic: u32,
    pub message_size: u32,
    pub producers_per_topic: u32,
    pub consumers_per_topic: u32,
    pub acks: i16,
    pub compression: String,
    pub batch_size: u32,
    pub linger_ms: u64,
    /// Records per second over all producers; 0 = as fast as possible.
    pub target_rate: u64,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// Idempotent (or transactional) producers.
    #[serde(default)]
    pub idempotent: bool,
    /// Records per transaction; 0 = no transactions.
    #[serde(default)]
    pub transaction_records: u64,
}

/// One run against one target.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    /// The target's name (`compare NAME=HOST:PORT`), or "target".
    pub target: String,
    pub bootstrap: String,
    /// How the run's connections were secured: Kafka's security protocol, and the SASL
    /// mechanism and user or the client certificate where there are (`PLAINTEXT` in results
    /// written before keel-bench spoke TLS).
    #[serde(default = "plaintext")]
    pub security: String,
    pub workload: WorkloadSummary,
    /// Unix time the measured phase started, in ms.
    pub started_unix_ms: u64,
    /// Length of the measured phase.
    pub measured_s: f64,
    pub produced_records: u64,
    pub produced_bytes: u64,
    pub consumed_records: u64,
    pub consumed_bytes: u64,
    pub produce_records_per_s: f64,
    pub produce_mb_per_s: f64,
    pub consume_records_per_s: f64,
    pub consume_mb_per_s: f64,
    /// Records (and their bytes) the consumers read while the measured phase ran, whenever
    /// they were sent: with a backlog (`backlog_s`), how fast the consumers drained it. The
    /// `consumed_*` figures count records sent in the measured phase instead, as the
    /// end-to-end latency does.
    #[serde(default)]
    pub fetched_records: u64,
    #[serde(default)]
    pub fetched_bytes: u64,
    #[serde(default)]
    pub fetch_mb_per_s: f64,
    pub errors: u64,
    /// A few error messages, for the report.
    pub error_samples: Vec<String>,
    pub publish_latency: LatencySummary,
    pub e2e_latency: LatencySummary,
    pub publish_percentiles: Vec<PercentilePoint>,
    pub e2e_percentiles: Vec<PercentilePoint>,
    pub timeline: Vec<TimelinePoint>,
    pub verify: Option<VerifySummary>,
    pub shards: Option<Vec<ShardDelta>>,
    pub probe: Option<ProbeResult>,
    /// Cores of the machine the benchmark ran on.
    pub machine_cores: u32,
    /// CPU seconds (user + system) keel-bench itself used during the measured phase: on a
    /// small machine the tool shares the cores with the broker.
    #[serde(default)]
    pub tool_cpu_s: f64,
    /// `tool_cpu_s` by mode.
    #[serde(default)]
    pub tool_cpu_user_s: f64,
    #[serde(default)]
    pub tool_cpu_system_s: f64,
    /// Executor threads keel-bench's producers and consumers ran on (0: not recorded).
    #[serde(default)]
    pub tool_threads: u32,
    /// The target's CPU during the measured phase, from `--target-pid` or its /metrics.
    #[serde(default)]
    pub target_cpu: Option<TargetCpu>,
}

impl RunResult {
    /// Bytes moved in the measured phase: produced plus consumed record bytes.
    pub fn bytes_moved(&self) -> u64 {
        self.produced_bytes.saturating_add(self.consumed_bytes)
    }

    /// The floor measured for this run's workload, if any.
    pub fn floor(&self) -> Option<&FloorResult> {
        self.probe.as_ref().and_then(|p| p.floor.as_ref())
    }
}

/// A `compare` run: the same workload against several targets, in rounds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CompareResult {
    pub workload: WorkloadSummary,
    pub rounds: u32,
    /// Every run, in the order they ran (target names repeat, one per round).
    pub runs: Vec<RunResult>,
    pub probe: Option<ProbeResult>,
    pub machine_cores: u32,
}

/// A `setups` run: connection setups (TCP connect, TLS handshake, SASL login, ApiVersions)
/// per second, in all and per shard of the target.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SetupResult {
    pub target: String,
    pub bootstrap: String,
    /// As in [`RunResult::security`].
    pub security: String,
    /// Setups that completed, and those that failed (each counts once, not retried).
    pub setups: u64,
    pub failures: u64,
    pub error_samples: Vec<String>,
    /// Setups in flight at once, over `tool_threads` executor threads.
    pub concurrency: u32,
    pub tool_threads: u32,
    /// From the first connect to the last setup's end.
    pub elapsed_s: f64,
    pub setups_per_s: f64,
    /// The target's shards, and where that came from: "/metrics" (shards exporting
    /// counters) or "--shards".
    pub shards: u32,
    pub shards_source: String,
    pub setups_per_s_per_shard: f64,
    /// One setup, from the TCP connect to ApiVersions' answer.
    pub setup_latency: LatencySummary,
    /// The target's CPU over the run (`--target-pid`, else /metrics), and per setup.
    pub target_cpu: Option<TargetCpu>,
    pub target_cpu_ms_per_setup: Option<f64>,
    /// The target's shard threads' CPU (from /metrics), per setup.
    pub shard_cpu_ms_per_setup: Option<f64>,
    /// keel-bench's own CPU over the run, and per setup (SCRAM's PBKDF2 runs on the client).
    pub tool_cpu_s: f64,
    pub tool_cpu_ms_per_setup: f64,
    pub machine_cores: u32,
}

fn plaintext() -> String {
    "PLAINTEXT".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_written_before_the_cpu_fields_still_load() {
        let r = RunResult {
            shards: Some(vec![ShardDelta::default()]),
            probe: Some(ProbeResult::default()),
            ..Default::default()
        };
        let mut v = serde_json::to_value(&r).unwrap();
        let top = v.as_object_mut().unwrap();
        for key in [
            "tool_cpu_user_s",
            "tool_cpu_system_s",
            "tool_threads",
            "target_cpu",
        ] {
            assert!(top.remove(key).is_some(), "{key}");
        }
        assert!(v["probe"]
            .as_object_mut()
            .unwrap()
            .remove("floor")
            .is_some());
        let shard = v["shards"][0].as_object_mut().unwrap();
        for key in ["cpu_user_s", "cpu_system_s"] {
            assert!(shard.remove(key).is_some(), "{key}");
        }
        let back: RunResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
