"""`/metrics` of the real keel binary, read by the Prometheus project's own text-format parser
(prometheus_client.parser, which rejects malformed exposition), after real client traffic:
kafka-python produces keyed records with headers (acks=all), consumes them in a group that
commits part of them. Every family of issue 8's list is checked on content:

* per shard: requests by API, bytes in/out, cross-shard hops, busy and idle time of the shard
  and of each glommio task queue, I/O queue depth (now and its time integral), reactor stalls;
* per partition: log start, high watermark, log end, size, segments;
* per API: latency histograms of whole requests and by stage (queue_wait, hop, append, flush,
  response_write), with cumulative buckets;
* per group: lag.
The family names are also those the Grafana dashboard (ops/grafana/keel-dashboard.json) queries.
"""

import json
import os
import re

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from conftest import unique
from kutil import admin, producer

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "..", "..", "ops", "grafana", "keel-dashboard.json")
PARTITIONS = 4
PER_PARTITION = [30, 20, 10, 5]


def families(text):
    """{family name: Metric} from the official parser (counters lose their _total suffix)."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams, family, sample_name=None, **labels):
    f = fams[family]
    out = []
    for s in f.samples:
        if sample_name is not None and s.name != sample_name:
            continue
        if all(s.labels.get(k) == str(v) for k, v in labels.items()):
            out.append(s)
    return out


def total(fams, family, sample_name=None, **labels):
    return sum(s.value for s in samples(fams, family, sample_name, **labels))


def test_metrics_families_after_client_traffic(keel_factory):
    b = keel_factory(name="keel-metrics")
    topic = unique("metrics")
    group = unique("metrics-group")
    a = admin(b.bootstrap)
    try:
        r = a.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1}})
        assert r["topics"][0]["error_code"] == 0, r
    finally:
        a.close()
    prod = producer(b.bootstrap)
    try:
        for p, n in enumerate(PER_PARTITION):
            for i in range(n):
                prod.send(topic, key=b"k%d-%d" % (p, i), value=b"v" * 100, partition=p,
                          headers=[("h", b"x")])
        prod.flush(timeout=60)
    finally:
        prod.close(timeout=10)
    cons = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=15000,
                         fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        cons.assign(tps)
        got = 0
        for _ in range(200):
            for recs in cons.poll(timeout_ms=200).values():
                got += len(recs)
            if got >= sum(PER_PARTITION):
                break
        assert got == sum(PER_PARTITION)
        # Commit half of each partition: lag = the other half.
        cons.commit({TopicPartition(topic, p): OffsetAndMetadata(n // 2, "", -1)
                     for p, n in enumerate(PER_PARTITION)})
    finally:
        cons.close()

    text = b.metrics_text()
    fams = families(text)

    # --- per shard ---------------------------------------------------------------------
    shards = {s.labels["shard"] for s in samples(fams, "keel_bytes_in")}
    assert shards == {"0", "1"}, shards
    produce_requests = total(fams, "keel_requests", api="Produce")
    assert produce_requests >= 1
    assert total(fams, "keel_requests", api="Fetch") >= 1
    assert total(fams, "keel_requests", api="OffsetCommit") == 1
    # 65 records of 100-byte values went in; fetches sent them back out.
    assert total(fams, "keel_bytes_in") > 65 * 100
    assert total(fams, "keel_bytes_out") > 65 * 100
    assert total(fams, "keel_fetch_bytes") > 65 * 100
    for name in ("keel_shard_busy_seconds", "keel_shard_idle_seconds"):
        by_shard = {s.labels["shard"]: s.value for s in samples(fams, name)}
        assert set(by_shard) == {"0", "1"} and all(v > 0 for v in by_shard.values()), (name, by_shard)
    info = samples(fams, "keel_shard_info")
    assert sorted((s.labels["shard"], s.labels["thread_name"]) for s in info) == [
        ("0", "keel-shard-0"), ("1", "keel-shard-1")]
    # Each thread id is a thread of the broker process.
    for s in info:
        assert os.path.exists("/proc/%d/task/%s" % (b.proc.pid, s.labels["thread_id"])), s
    for shard in ("0", "1"):
        queues = {s.labels["queue"]: s.value
                  for s in samples(fams, "keel_task_queue_busy_seconds", shard=shard)}
        assert set(queues) >= {"default", "retention"}, queues
        assert queues["default"] > 0, queues
        idle = {s.labels["queue"]: s.value
                for s in samples(fams, "keel_task_queue_idle_seconds", shard=shard)}
        assert set(idle) == set(queues) and all(v > 0 for v in idle.values()), idle
        assert total(fams, "keel_task_queue_runs", shard=shard, queue="default") > 0
    # Every partition's log end is fdatasync'ed (flush.policy=group) before acks=all answers.
    assert total(fams, "keel_io_operations", op="fdatasync") >= PARTITIONS
    assert total(fams, "keel_io_operations", op="write") >= PARTITIONS
    assert total(fams, "keel_io_latency_seconds", op="fdatasync") > 0
    assert total(fams, "keel_io_queue_depth_seconds") > 0
    depth = samples(fams, "keel_io_queue_depth")
    assert len(depth) == 2 and all(s.value >= 0 for s in depth)
    stalls = samples(fams, "keel_reactor_stalls")
    assert len(stalls) == 2 and all(s.value >= 0 for s in stalls)
    # Partitions sit on both shards, so some requests crossed to the owner.
    assert total(fams, "keel_cross_shard_hops") > 0

    # --- per partition -----------------------------------------------------------------
    owners = set()
    for p, n in enumerate(PER_PARTITION):
        sel = dict(topic=topic, partition=p)
        assert total(fams, "keel_partition_log_start_offset", **sel) == 0
        assert total(fams, "keel_partition_high_watermark", **sel) == n
        assert total(fams, "keel_partition_log_end_offset", **sel) == n
        assert total(fams, "keel_partition_last_stable_offset", **sel) == n
        assert total(fams, "keel_partition_segments", **sel) == 1
        assert total(fams, "keel_partition_size_bytes", **sel) > n * 100
        owners |= {s.labels["shard"] for s in samples(fams, "keel_partition_high_watermark", **sel)}
    assert owners == {"0", "1"}, owners

    # --- per API latency ---------------------------------------------------------------
    lat = fams["keel_request_latency_seconds"]
    assert lat.type == "histogram"
    produce_count = total(fams, "keel_request_latency_seconds", "keel_request_latency_seconds_count",
                          api="Produce")
    assert produce_count == produce_requests
    check_buckets(fams, "keel_request_latency_seconds", api="Produce")
    stage = fams["keel_request_stage_seconds"]
    assert stage.type == "histogram"
    stages = {(s.labels["api"], s.labels["stage"]) for s in stage.samples}
    for api, st in [("Produce", "queue_wait"), ("Produce", "append"), ("Produce", "flush"),
                    ("Produce", "response_write"), ("Fetch", "queue_wait"),
                    ("Fetch", "response_write"), ("Metadata", "queue_wait")]:
        assert (api, st) in stages, (api, st, sorted(stages))
        check_buckets(fams, "keel_request_stage_seconds", api=api, stage=st)
    # Each Produce request reached its partitions' owners: one append per owner group.
    assert total(fams, "keel_request_stage_seconds", "keel_request_stage_seconds_count",
                 api="Produce", stage="append") >= produce_requests
    assert ("Produce", "hop") in stages or ("Fetch", "hop") in stages, sorted(stages)
    # The flush stage waited for fdatasync: its time is at least the syncs' own latency share.
    assert total(fams, "keel_request_stage_seconds", "keel_request_stage_seconds_sum",
                 api="Produce", stage="flush") > 0

    # --- per group ---------------------------------------------------------------------
    for p, n in enumerate(PER_PARTITION):
        sel = dict(group=group, topic=topic, partition=p)
        assert total(fams, "keel_group_committed_offset", **sel) == n // 2
        assert total(fams, "keel_group_lag", **sel) == n - n // 2
    assert total(fams, "keel_group_lag_sum", group=group) == sum(n - n // 2 for n in PER_PARTITION)

    # --- the dashboard queries only families that exist ---------------------------------
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for panel in dash["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 12
    names = set(re.findall(r"\bkeel_[a-z_]+", " ".join(exprs)))
    exposed = {s.name for f in fams.values() for s in f.samples}
    missing = sorted(n for n in names if n not in exposed)
    assert not missing, missing


def check_buckets(fams, family, **labels):
    """Buckets are cumulative, end with +Inf equal to _count, and _sum is positive."""
    bucket = [s for s in samples(fams, family, family + "_bucket", **labels)]
    assert bucket, (family, labels)
    bounds = [float(s.labels["le"]) for s in bucket]
    assert bounds == sorted(bounds) and bounds[-1] == float("inf")
    values = [s.value for s in bucket]
    assert values == sorted(values), values
    count = total(fams, family, family + "_count", **labels)
    assert values[-1] == count > 0
    assert total(fams, family, family + "_sum", **labels) > 0


def test_admin_endpoint_is_read_only(keel):
    """The admin HTTP port answers GET only: any other method gets 400 and changes nothing."""
    import http.client
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        conn = http.client.HTTPConnection("127.0.0.1", keel.admin_port, timeout=5)
        conn.request(method, "/metrics", body=b"x=1")
        r = conn.getresponse()
        assert (r.status, r.read()) == (400, b"only GET is supported\n"), method
        conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", keel.admin_port, timeout=5)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    assert r.status == 200 and b"keel_" in r.read()
    conn.close()
