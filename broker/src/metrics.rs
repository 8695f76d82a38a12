//! Per-shard counters: plain `Cell`s bumped on the shard's own thread, read by the admin
//! endpoint through the mesh and summed there. No atomics on the hot path.

use std::cell::Cell;

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
    pub fetch_bytes: Cell<u64>,
    /// Produce work on the owner shard: partition appends, time validating and appending
    /// (CPU), and time waiting for the commit (write + fdatasync under flush.policy=group).
    pub produce_appends: Cell<u64>,
    pub produce_append_ns: Cell<u64>,
    pub produce_commit_ns: Cell<u64>,
    /// Compaction passes: bytes read (segments cleaned) and time spent.
    pub compacted_bytes: Cell<u64>,
    pub compaction_ns: Cell<u64>,
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
            produce_appends: Cell::new(0),
            produce_append_ns: Cell::new(0),
            produce_commit_ns: Cell::new(0),
            compacted_bytes: Cell::new(0),
            compaction_ns: Cell::new(0),
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

    pub fn note_compaction(&self, bytes_in: u64, elapsed: std::time::Duration) {
        bump(&self.compacted_bytes, bytes_in);
        bump(&self.compaction_ns, elapsed.as_nanos() as u64);
    }

    /// A `Send` copy of the counters, to carry to the shard that renders metrics.
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
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
            produce_appends: self.produce_appends.get(),
            produce_append_s: self.produce_append_ns.get() as f64 / 1e9,
            produce_commit_s: self.produce_commit_ns.get() as f64 / 1e9,
            compacted_bytes: self.compacted_bytes.get(),
            compaction_s: self.compaction_ns.get() as f64 / 1e9,
            ..Default::default()
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct CountersSnapshot {
    pub requests: Vec<(i16, u64)>,
    pub requests_unknown_api: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connections_open: u64,
    pub connections_total: u64,
    pub produce_records: u64,
    pub produce_batches: u64,
    pub fetch_bytes: u64,
    pub cross_shard_hops: u64,
    pub cross_shard_jobs: u64,
    pub partitions_owned: u64,
    /// Seconds the shard's executor spent running tasks and polling I/O (not parked).
    pub busy_s: f64,
    pub tasks_executed: u64,
    /// Times the stall detector caught a task holding the reactor past its budget.
    pub reactor_stalls: u64,
    pub produce_appends: u64,
    pub produce_append_s: f64,
    pub produce_commit_s: f64,
    pub compacted_bytes: u64,
    pub compaction_s: f64,
    /// Bytes in the shard's tail caches, and batches the shard budget evicted.
    pub tail_cache_bytes: u64,
    pub tail_cache_evictions: u64,
    /// Closed segment files open in the shard's file cache.
    pub segment_files_open: u64,
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
        "Record bytes returned by Fetch.",
        &|s| s.fetch_bytes as f64,
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
            let api = ApiKey::try_from(*key)
                .map(|k| format!("{k:?}"))
                .unwrap_or_else(|_| key.to_string());
            let _ = writeln!(
                out,
                "keel_requests_total{{shard=\"{i}\",api=\"{api}\"}} {n}"
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_per_shard_lines() {
        let c = ShardCounters::default();
        c.count_request(Some(ApiKey::Produce));
        c.count_request(Some(ApiKey::Produce));
        c.add_bytes_in(10);
        let mut s = c.snapshot();
        s.partitions_owned = 3;
        let text = render(&[s, CountersSnapshot::default()]);
        assert!(
            text.contains("keel_requests_total{shard=\"0\",api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(text.contains("keel_bytes_in_total{shard=\"0\"} 10"));
        assert!(text.contains("keel_partitions_owned{shard=\"0\"} 3"));
        assert!(text.contains("keel_partitions_owned{shard=\"1\"} 0"));
    }
}
