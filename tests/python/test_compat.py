"""Client compatibility against the real keel binary, as clients nobody on the project wrote see
it: Debian's kcat (librdkafka 2.0.2) compresses only when ApiVersions lists Produce from v0;
topic and broker `compression.type` rewrite batches into the topic's codec; zstd needs Produce v7
and Fetch v10; per-record errors (KIP-467) fail exactly the offending records in librdkafka
(confluent-kafka); the first rebalance of a classic group waits
`group.initial.rebalance.delay.ms` so members starting together get one assignment each; and
`authorized_operations` lists every operation valid for the resource, as Kafka does without an
authorizer.

Stored codecs are read from the partition's segment file: what is on disk, not what a client
decoded."""

import glob
import os
import shutil
import struct
import subprocess
import threading
import time

import pytest
import zstandard
from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)
from kafka import KafkaProducer
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType

import kwire
from conftest import unique
from kutil import admin, consume_all

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
UNSUPPORTED_COMPRESSION_TYPE = 76
UNSUPPORTED_VERSION = 35
INVALID_CONFIG = 40


# -- helpers ----------------------------------------------------------------------------------
def stored_batches(broker, topic, partition=0):
    """[(base_offset, codec name, records_count)] of every batch in the partition's segments."""
    out = []
    pattern = os.path.join(broker.data_dir, "%s-%d" % (topic, partition), "*.log")
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length <= 0:
                break  # zero padding after the last batch
            attributes = struct.unpack_from(">h", data, pos + 21)[0]
            count = struct.unpack_from(">i", data, pos + 57)[0]
            out.append((base, CODECS[attributes & 7], count))
            pos += 12 + length
    return out


def wait_stored(broker, topic, n_records, partition=0, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while True:
        batches = stored_batches(broker, topic, partition)
        if sum(b[2] for b in batches) >= n_records:
            return batches
        assert time.monotonic() < deadline, "only %s stored" % batches
        time.sleep(0.1)


def kcat(bootstrap, *args, input=None, timeout=60):
    p = subprocess.run([KCAT, "-b", bootstrap] + list(args), input=input, capture_output=True,
                       timeout=timeout)
    assert p.returncode == 0, "kcat %s failed: %s" % (args, p.stderr.decode()[-2000:])
    return p


def create(bootstrap, topic, partitions=1, configs=None):
    """CreateTopics (kafka-python); returns the topic's error code."""
    a = admin(bootstrap)
    try:
        r = a.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1,
                                     "configs": configs or {}}}, raise_errors=False)
    finally:
        a.close()
    return r["topics"][0]["error_code"]


def api_versions(bootstrap):
    """{api_key: (min, max)} from an ApiVersions v0 answer."""
    with kwire.Conn(bootstrap) as c:
        body = c.call(18, 0, b"")
    r = kwire.Reader(body)
    assert r.i16() == 0
    return {r.i16(): (r.i16(), r.i16()) for _ in range(r.i32())}


def zstd_batch(records, base_timestamp):
    """A magic-2 zstd batch of (key, value) records."""
    raw = b"".join(kwire.record(i, 0, k, v) for i, (k, v) in enumerate(records))
    recs = zstandard.ZstdCompressor().compress(raw)
    after_crc = (kwire.i16(4) + kwire.i32(len(records) - 1) + kwire.i64(base_timestamp)
                 + kwire.i64(base_timestamp) + kwire.i64(-1) + kwire.i16(-1) + kwire.i32(-1)
                 + kwire.i32(len(records)) + recs)
    after_len = kwire.i32(-1) + kwire.i8(2) + kwire.u32(kwire.crc32c(after_crc)) + after_crc
    return kwire.i64(0) + kwire.i32(len(after_len)) + after_len


def fetch_v9_v10_body(topic, partition, offset):
    part = (kwire.i32(partition) + kwire.i32(-1) + kwire.i64(offset) + kwire.i64(-1)
            + kwire.i32(1 << 20))
    return (kwire.i32(-1) + kwire.i32(100) + kwire.i32(1) + kwire.i32(1 << 20) + kwire.i8(0)
            + kwire.i32(0) + kwire.i32(-1)
            + kwire.array([kwire.string(topic) + kwire.array([part])]) + kwire.array([]))


def parse_fetch_v9_v10(body):
    """-> (partition error code, records bytes) of the one partition asked."""
    r = kwire.Reader(body)
    r.i32()  # throttle
    assert r.i16() == 0
    r.i32()  # session id
    assert r.i32() == 1
    r.string()
    assert r.i32() == 1
    r.i32()  # index
    err = r.i16()
    r.i64(), r.i64(), r.i64()  # hw, lso, log start
    n = r.i32()
    for _ in range(max(n, 0)):
        r.i64(), r.i64()
    size = r.i32()
    return err, (b"" if size < 0 else r.take(size))


# -- 1. ApiVersions lists Produce from v0 ---------------------------------------------------------
def test_api_versions_lists_produce_from_v0_but_refuses_v0_to_v2(keel):
    versions = api_versions(keel.bootstrap)
    assert versions[0][0] == 0, "Produce must be listed from v0: %s" % (versions[0],)
    assert versions[0][1] >= 9
    topic = unique("produce-v2")
    create(keel.bootstrap, topic)
    batch = kwire.record_batch([(b"k", b"v", (), 1000)], 1000)
    # Produce v2 names the same fields as v3 less the transactional id; it is refused per
    # partition with UNSUPPORTED_VERSION and nothing is stored.
    body = (kwire.i16(-1) + kwire.i32(5000)
            + kwire.array([kwire.string(topic) + kwire.array([kwire.i32(0) + kwire.bytes_(batch)])]))
    with kwire.Conn(keel.bootstrap) as c:
        resp = c.call(0, 2, body)
    r = kwire.Reader(resp)
    assert r.i32() == 1 and r.string() == topic and r.i32() == 1
    assert r.i32() == 0
    assert r.i16() == UNSUPPORTED_VERSION
    assert stored_batches(keel, topic) == []
    # v3 still works on the same broker.
    with kwire.Conn(keel.bootstrap) as c:
        got = kwire.parse_produce_v3_response(c.call(0, 3, kwire.produce_v3_body(topic, 0, batch)))
    assert got[(topic, 0)] == (0, 0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_debian_kcat_compresses_with_every_codec(keel, codec):
    """kcat from Debian bookworm (librdkafka 2.0.2) enables gzip, snappy and lz4 only when
    ApiVersions lists Produce v0: the stored batches carry the codec asked for."""
    topic = unique("kcat-codec-%s" % codec)
    create(keel.bootstrap, topic)
    values = b"".join(b"value-%05d-%s\n" % (i, b"x" * 40) for i in range(2000))
    kcat(keel.bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec, "-X", "linger.ms=50",
         input=values)
    batches = wait_stored(keel, topic, 2000)
    assert {b[1] for b in batches} == {codec}, batches
    out = kcat(keel.bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%o %s\\n").stdout
    rows = out.decode().splitlines()
    assert rows == ["%d value-%05d-%s" % (i, i, "x" * 40) for i in range(2000)]


# -- 3. compression.type -------------------------------------------------------------------------
def test_topic_compression_type_recompresses_and_follows_alter_configs(keel):
    topic = unique("ctype")
    r = create(keel.bootstrap, topic, configs={"compression.type": "gzip",
                                                "compression.gzip.level": "9"})
    assert r == 0, r
    prod = KafkaProducer(bootstrap_servers=keel.bootstrap, acks="all", linger_ms=20,
                         compression_type=None)
    try:
        def send(tag, n):
            for i in range(n):
                prod.send(topic, key=b"%s-%d" % (tag, i), value=b"v" * 200,
                          headers=[("h", tag)], partition=0)
            prod.flush(timeout=30)

        send(b"a", 50)
        assert {b[1] for b in wait_stored(keel, topic, 50)} == {"gzip"}

        # AlterConfigs (kafka-python) replaces the topic's configs: snappy from now on (the
        # gzip level is given again, or it would go back to the default).
        a = admin(keel.bootstrap)
        try:
            a.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic,
                                              configs={"compression.type": "snappy",
                                                       "compression.gzip.level": "9"})],
                            incremental=False)
        finally:
            a.close()
        send(b"b", 50)
        # IncrementalAlterConfigs (librdkafka): lz4.
        ca = AdminClient({"bootstrap.servers": keel.bootstrap})

        def set_compression_type(value):
            res = ConfigResource("topic", topic, incremental_configs=[
                ConfigEntry("compression.type", value,
                            incremental_operation=AlterConfigOpType.SET)])
            for f in ca.incremental_alter_configs([res]).values():
                f.result(timeout=15)

        set_compression_type("lz4")
        send(b"c", 50)
        # `producer` stores the producer's codec again: kafka-python sends uncompressed here.
        set_compression_type("producer")
        send(b"d", 50)
    finally:
        prod.close(timeout=10)
    batches = wait_stored(keel, topic, 200)
    by_tag = {}
    for base, codec, count in batches:
        tag = "abcd"[base // 50]
        by_tag.setdefault(tag, set()).add(codec)
    assert by_tag == {"a": {"gzip"}, "b": {"snappy"}, "c": {"lz4"}, "d": {"none"}}, batches
    # Every record reads back intact with its key, value and header.
    recs = consume_all(keel.bootstrap, topic, [0])[0]
    assert [(r.offset, r.key, r.value, r.headers) for r in recs] == [
        (i, b"%s-%d" % (tag, i % 50), b"v" * 200, [("h", tag)])
        for i, tag in enumerate([t for t in (b"a", b"b", b"c", b"d") for _ in range(50)])]
    # DescribeConfigs reports the topic's value as a dynamic topic config.
    ca = AdminClient({"bootstrap.servers": keel.bootstrap})
    for f in ca.describe_configs([ConfigResource("topic", topic)]).values():
        entries = f.result(timeout=15)
    assert entries["compression.type"].value == "producer"
    assert entries["compression.gzip.level"].value == "9"
    assert entries["compression.zstd.level"].value == "3"


def test_compression_type_bad_values_are_invalid_config(keel):
    for configs in ({"compression.type": "brotli"}, {"compression.gzip.level": "10"},
                    {"compression.zstd.level": "23"}, {"compression.lz4.level": "0"}):
        topic = unique("ctype-bad")
        r = create(keel.bootstrap, topic, configs=configs)
        assert r == INVALID_CONFIG, (configs, r)


@pytest.mark.parametrize("codec,level", [("zstd", "10"), ("lz4", "12")])
def test_broker_compression_type_applies_to_new_topics(keel_factory, codec, level):
    """The broker's setting (at a level) for every topic; kcat (librdkafka) reads it back."""
    b = keel_factory({"compression.type": codec, "compression.%s.level" % codec: level})
    topic = unique("broker-ctype")
    kcat(b.bootstrap, "-P", "-t", topic, "-p", "0", "-z", "gzip",
         input=b"".join(b"r%d\n" % i for i in range(300)))
    batches = wait_stored(b, topic, 300)
    assert {x[1] for x in batches} == {codec}, batches
    out = kcat(b.bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%s\\n").stdout.decode()
    assert out.splitlines() == ["r%d" % i for i in range(300)]
    # The owner shard counted the work.
    m = b.metrics()
    assert m.sum("keel_produce_recompressed_bytes_in_total") > 0
    assert m.sum("keel_produce_recompress_seconds_total") > 0


def test_zstd_needs_produce_v7_and_fetch_v10(keel):
    topic = unique("zstd-versions")
    create(keel.bootstrap, topic)
    batch = zstd_batch([(b"k%d" % i, b"v%d" % i) for i in range(5)], 1000)
    with kwire.Conn(keel.bootstrap) as c:
        got = kwire.parse_produce_v3_response(c.call(0, 3, kwire.produce_v3_body(topic, 0, batch)))
    assert got[(topic, 0)][0] == UNSUPPORTED_COMPRESSION_TYPE
    assert stored_batches(keel, topic) == []
    # v7 takes it (the v3 body layout is the same up to v8).
    with kwire.Conn(keel.bootstrap) as c:
        got = kwire.parse_produce_v3_response(c.call(0, 7, kwire.produce_v3_body(topic, 0, batch)))
    assert got[(topic, 0)][0] == 0
    with kwire.Conn(keel.bootstrap) as c:
        err9, recs9 = parse_fetch_v9_v10(c.call(1, 9, fetch_v9_v10_body(topic, 0, 0)))
        err10, recs10 = parse_fetch_v9_v10(c.call(1, 10, fetch_v9_v10_body(topic, 0, 0)))
    assert (err9, recs9) == (UNSUPPORTED_COMPRESSION_TYPE, b"")
    assert err10 == 0
    assert struct.unpack_from(">h", recs10, 21)[0] & 7 == 4
    assert struct.unpack_from(">i", recs10, 57)[0] == 5


# -- 4. KIP-467 per-record errors -----------------------------------------------------------------
def test_record_errors_fail_exactly_the_unkeyed_records(keel):
    topic = unique("kip467")
    r = create(keel.bootstrap, topic, configs={"cleanup.policy": "compact"})
    assert r == 0
    reports = {}
    p = Producer({"bootstrap.servers": keel.bootstrap, "linger.ms": 500,
                  "batch.num.messages": 1000, "enable.idempotence": False, "retries": 0,
                  "compression.type": "lz4"})

    def report(err, msg):
        reports[msg.value().decode()] = err

    unkeyed = {5, 15, 25, 35, 45, 55, 65, 75, 85, 95}
    for i in range(100):
        p.produce(topic, key=None if i in unkeyed else b"k%d" % i, value=b"%d" % i,
                  partition=0, on_delivery=report)
    assert p.flush(30) == 0
    assert len(reports) == 100
    bad = {int(v) for v, e in reports.items() if e is not None and e.code() == KafkaError.INVALID_RECORD}
    assert bad == unkeyed, reports
    others = {e.code() for v, e in reports.items() if int(v) not in unkeyed}
    # librdkafka fails the rest of the batch with its own "a different record was invalid".
    assert others == {KafkaError._INVALID_DIFFERENT_RECORD}, others
    assert stored_batches(keel, topic) == []

    # On the wire (Produce v8): the batch index and message of each record, and the summary.
    batch = kwire.record_batch([(None if i % 3 == 0 else b"k%d" % i, b"v", (), 1000)
                                for i in range(7)], 1000)
    with kwire.Conn(keel.bootstrap) as c:
        body = c.call(0, 8, kwire.produce_v3_body(topic, 0, batch))
    r = kwire.Reader(body)
    assert r.i32() == 1 and r.string() == topic and r.i32() == 1
    assert r.i32() == 0
    assert r.i16() == KafkaError.INVALID_RECORD
    r.i64(), r.i64(), r.i64()  # base offset, log append time, log start offset
    record_errors = [(r.i32(), r.string()) for _ in range(r.i32())]
    message = r.string()
    assert [i for i, _ in record_errors] == [0, 3, 6]
    assert all("without key" in m for _, m in record_errors), record_errors
    assert "3 record(s) without a key" in message, message


# -- 5. group.initial.rebalance.delay.ms ------------------------------------------------------------
def test_static_members_starting_together_get_one_assignment_each(keel_factory):
    b = keel_factory({"group.initial.rebalance.delay.ms": "3000"})
    topic = unique("initial-delay")
    assert create(b.bootstrap, topic, partitions=4) == 0
    group = unique("g-initial-delay")
    events = {"a": [], "b": []}
    stop = threading.Event()
    errors = []

    def member(name):
        try:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                          "group.instance.id": "inst-" + name, "session.timeout.ms": 10000,
                          "partition.assignment.strategy": "range", "enable.auto.commit": False})
            c.subscribe([topic],
                        on_assign=lambda _c, ps: events[name].append(
                            ("assign", sorted(p.partition for p in ps))),
                        on_revoke=lambda _c, ps: events[name].append(
                            ("revoke", sorted(p.partition for p in ps))))
            deadline = time.monotonic() + 30
            while not stop.is_set() and time.monotonic() < deadline:
                c.poll(0.2)
            c.close()
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=member, args=(n,)) for n in ("a", "b")]
    threads[0].start()
    time.sleep(0.5)
    threads[1].start()
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline and not (events["a"] and events["b"]):
        time.sleep(0.1)
    time.sleep(2)  # a revoke would come within a rebalance's time
    stop.set()
    for t in threads:
        t.join(40)
    assert not errors, errors
    a = [e for e in events["a"] if e[0] == "assign"]
    bb = [e for e in events["b"] if e[0] == "assign"]
    assert len(a) == 1 and len(bb) == 1, events
    assert sorted(a[0][1] + bb[0][1]) == [0, 1, 2, 3] and len(a[0][1]) == 2, events
    # librdkafka calls on_revoke with the empty set only when closing: nothing was taken away
    # while both ran.
    revoked_while_running = [e for n in events for e in events[n][:-1] if e[0] == "revoke" and e[1]]
    assert revoked_while_running == [], events


# -- 6. authorized_operations ----------------------------------------------------------------
def test_authorized_operations_without_an_authorizer(keel):
    topic = unique("authz")
    assert create(keel.bootstrap, topic) == 0
    group = unique("g-authz")
    c = Consumer({"bootstrap.servers": keel.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    c.subscribe([topic])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    ca = AdminClient({"bootstrap.servers": keel.bootstrap})
    cluster = ca.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
        "ALTER", "DESCRIBE"}
    plain = ca.describe_cluster().result(timeout=15)
    assert plain.authorized_operations is None
    topics = ca.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    t = topics[topic].result(timeout=15)
    assert {op.name for op in t.authorized_operations} == {
        "READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS"}
    groups = ca.describe_consumer_groups([group], include_authorized_operations=True)
    g = groups[group].result(timeout=15)
    assert {op.name for op in g.authorized_operations} == {"READ", "DESCRIBE", "DELETE"}
    c.close()


# -- 2. older request versions (kafka-python forced to old protocol versions) -----------------------
@pytest.mark.parametrize("api_version", [(0, 11), (1, 0), (2, 0)])
def test_kafka_python_at_old_protocol_versions(keel, api_version):
    """kafka-python pinned to an old broker version sends that release's request versions
    (at 0.11: OffsetCommit v3, OffsetFetch v3, ListOffsets v2, CreateTopics v2, DescribeConfigs
    v0 from kafka-python's admin): produce, a committing group that resumes, admin calls."""
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient
    tag = "-".join(map(str, api_version))
    topic = unique("kp-old-%s" % tag)
    a = KafkaAdminClient(bootstrap_servers=keel.bootstrap, api_version=api_version,
                         request_timeout_ms=15000)
    try:
        r = a.create_topics({topic: {"num_partitions": 2, "replication_factor": 1,
                                     "configs": {"retention.ms": "3600000"}}}, raise_errors=False)
        assert r["topics"][0]["error_code"] == 0, r
        assert topic in a.list_topics()
        desc = a.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, topic)],
                                  config_filter="all")
        (entries,) = [v for k, v in desc.items() if "topic" in str(k).lower()]
        entry = entries[topic]["retention.ms"]
        value = entry["value"] if isinstance(entry, dict) else entry
        assert value == "3600000", entries[topic]
    finally:
        a.close()
    prod = KafkaProducer(bootstrap_servers=keel.bootstrap, api_version=api_version, acks="all",
                         compression_type="gzip", linger_ms=5)
    try:
        for i in range(20):
            prod.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)
    group = unique("g-old-%s" % tag)

    def read(n):
        c = KafkaConsumer(topic, bootstrap_servers=keel.bootstrap, api_version=api_version,
                          group_id=group, auto_offset_reset="earliest",
                          enable_auto_commit=False, session_timeout_ms=6000,
                          heartbeat_interval_ms=500, fetch_max_wait_ms=100)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
        quiet = c.poll(timeout_ms=500)
        c.commit()
        c.close()
        return got, quiet

    got, _ = read(20)
    assert sorted((r.key, r.value) for r in got) == sorted(
        (b"k%d" % i, b"v%d" % i) for i in range(20))
    assert sorted(stored_batches(keel, topic, 0))[0][1] == "gzip"
    prod = KafkaProducer(bootstrap_servers=keel.bootstrap, api_version=api_version, acks="all")
    try:
        for i in range(20, 24):
            prod.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)
    again, quiet = read(4)
    assert sorted(r.key for r in again) == [b"k20", b"k21", b"k22", b"k23"], again
    assert not quiet

