"""kafka-python 3.0.12 against the real keel binary: produce/consume with every codec and acks
setting, offsets by time, topic admin (create, delete, partitions, configs), auto-creation."""

import time

import pytest
from kafka import TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
import kafka.errors as Errors
from kafka.protocol.admin import DescribeConfigsRequest

import kwire
from conftest import unique
from kutil import admin, consume_all, consumer, end_offsets, producer, wait_until

BASE_TS = 1_700_000_000_000
NPART = 6


def topic_partitions_from_metadata(bootstrap, topic):
    a = admin(bootstrap)
    try:
        desc = a.describe_topics([topic])
    finally:
        a.close()
    assert len(desc) == 1 and desc[0]["name"] == topic, desc
    return sorted(p["partition_index"] for p in desc[0]["partitions"]), desc[0]


def create_topic(bootstrap, name, partitions, configs=None):
    a = admin(bootstrap)
    try:
        r = a.create_topics({name: {"num_partitions": partitions, "replication_factor": 1,
                                    "configs": configs or {}}})
    finally:
        a.close()
    assert r["topics"][0]["error_code"] == 0, r
    assert r["topics"][0]["num_partitions"] == partitions, r
    return r


def make_records(n, tag):
    """Deterministic records spread over NPART partitions: (partition, key, value, headers, ts)."""
    out = []
    for i in range(n):
        p = i % NPART
        key = None if i % 17 == 5 else ("%s-key-%05d" % (tag, i)).encode()
        value = None if (i % 23 == 7 and key is not None) else (("%s-value-%05d-" % (tag, i)) + "x" * (i % 300)).encode()
        headers = [("idx", str(i).encode()), ("tag", tag.encode())]
        if i % 3 == 0:
            headers.append(("empty", b""))
        if i % 5 == 0:
            headers.append(("bin", bytes(range(i % 256)) + b"\x00\xff"))
        ts = BASE_TS + i * 1000
        out.append((p, key, value, headers, ts))
    return out


def produce_records(bootstrap, topic, records, **kw):
    prod = producer(bootstrap, **kw)
    try:
        futures = [prod.send(topic, key=k, value=v, headers=h, partition=p, timestamp_ms=ts)
                   for (p, k, v, h, ts) in records]
        prod.flush(timeout=60)
        return [f.get(timeout=30) for f in futures]
    finally:
        prod.close(timeout=10)


def check_consumed(bootstrap, topic, records, partitions=range(NPART)):
    got = consume_all(bootstrap, topic, list(partitions))
    expected = {p: [] for p in partitions}
    for r in records:
        expected[r[0]].append(r)
    for p in partitions:
        recs = got[p]
        assert len(recs) == len(expected[p]), "partition %d: %d records, expected %d" % (
            p, len(recs), len(expected[p]))
        for off, (rec, (ep, ek, ev, eh, ets)) in enumerate(zip(recs, expected[p])):
            assert rec.topic == topic and rec.partition == p
            assert rec.offset == off, "offsets not dense from 0 in partition %d" % p
            assert rec.key == ek
            assert rec.value == ev
            assert [(hk, hv) for hk, hv in rec.headers] == eh
            assert rec.timestamp == ets
            assert rec.timestamp_type == 0  # CreateTime
    return got


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_every_codec_acks_all(keel, codec):
    topic = unique("codec-%s" % (codec or "none"))
    create_topic(keel.bootstrap, topic, NPART,
                 {"retention.ms": "86400000", "segment.bytes": "1048576", "max.message.bytes": "2000000"})
    assert topic_partitions_from_metadata(keel.bootstrap, topic)[0] == list(range(NPART))
    records = make_records(600, codec or "none")
    metas = produce_records(keel.bootstrap, topic, records, compression_type=codec, acks="all",
                            batch_size=16384)
    # The producer's acknowledgements carry the assigned offsets: dense per partition.
    next_off = {p: 0 for p in range(NPART)}
    for (p, _, _, _, ts), m in zip(records, metas):
        assert (m.topic, m.partition) == (topic, p)
        assert m.offset == next_off[p]
        assert m.timestamp == ts
        next_off[p] += 1
    check_consumed(keel.bootstrap, topic, records)
    assert end_offsets(keel.bootstrap, topic, range(NPART)) == next_off


def test_produce_acks_1_and_acks_0(keel):
    topic = unique("acks")
    create_topic(keel.bootstrap, topic, NPART)
    first = make_records(240, "acks1")
    metas = produce_records(keel.bootstrap, topic, first, acks=1, compression_type="lz4")
    per_part = {p: 0 for p in range(NPART)}
    for (p, *_), m in zip(first, metas):
        assert m.partition == p and m.offset == per_part[p]
        per_part[p] += 1
    second = [(p, k, v, h, ts + 10_000_000) for (p, k, v, h, ts) in make_records(240, "acks0")]
    # acks=0: the broker sends no answer, so the client's metadata carries no real offsets.
    produce_records(keel.bootstrap, topic, second, acks=0, compression_type="gzip")
    # acks=0 gives no confirmation, so wait until every record is visible, then check content.
    want = {p: 2 * per_part[p] for p in range(NPART)}
    wait_until(lambda: end_offsets(keel.bootstrap, topic, range(NPART)) == want, 20,
               msg="acks=0 records to be appended")
    check_consumed(keel.bootstrap, topic, first + second)


def test_offsets_by_time_and_beginning_end(keel):
    topic = unique("times")
    create_topic(keel.bootstrap, topic, 2)
    # Partition 0: 50 records, timestamps BASE_TS + 10*i (one per send: individual batches
    # for the first 10 by flushing, then batched).
    prod = producer(keel.bootstrap, acks="all", linger_ms=0)
    try:
        for i in range(50):
            prod.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp_ms=BASE_TS + 10 * i)
            if i < 10:
                prod.flush(timeout=20)
        # Partition 1: timestamps not monotonic: offset -> ts
        p1_ts = [BASE_TS + 500, BASE_TS + 100, BASE_TS + 900, BASE_TS + 300]
        for i, ts in enumerate(p1_ts):
            prod.send(topic, value=b"p1-%d" % i, partition=1, timestamp_ms=ts).get(timeout=20)
        prod.flush(timeout=20)
    finally:
        prod.close(timeout=10)
    c = consumer(keel.bootstrap)
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        assert c.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert c.end_offsets([tp0, tp1]) == {tp0: 50, tp1: 4}

        def oft(tp, ts):
            r = c.offsets_for_times({tp: ts})[tp]
            return None if r is None else (r.offset, r.timestamp)

        assert oft(tp0, 0) == (0, BASE_TS)                           # before everything
        assert oft(tp0, BASE_TS) == (0, BASE_TS)                     # exact first
        assert oft(tp0, BASE_TS + 10 * 7) == (7, BASE_TS + 70)       # exact, inside early batches
        assert oft(tp0, BASE_TS + 10 * 7 + 1) == (8, BASE_TS + 80)   # between -> next
        assert oft(tp0, BASE_TS + 10 * 33) == (33, BASE_TS + 330)    # exact inside a big batch
        assert oft(tp0, BASE_TS + 10 * 33 - 5) == (33, BASE_TS + 330)
        assert oft(tp0, BASE_TS + 10 * 49) == (49, BASE_TS + 490)    # exact last
        assert oft(tp0, BASE_TS + 10 * 49 + 1) is None               # after everything
        # First offset whose timestamp >= target.
        assert oft(tp1, BASE_TS + 50) == (0, BASE_TS + 500)
        assert oft(tp1, BASE_TS + 600) == (2, BASE_TS + 900)
        assert oft(tp1, BASE_TS + 901) is None
    finally:
        c.close()


def _topic_cfg(a, topic, filt="all"):
    d = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter=filt)
    return d["topic"][topic]


def test_describe_and_alter_configs(keel):
    topic = unique("cfg")
    create_topic(keel.bootstrap, topic, 2, {"retention.ms": "3600000", "cleanup.policy": "compact",
                                          "flush.policy": "interval", "flush.ms": "250"})
    a = admin(keel.bootstrap)
    try:
        cfg = _topic_cfg(a, topic)
        assert cfg["retention.ms"]["value"] == "3600000"
        assert cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert cfg["cleanup.policy"]["value"] == "compact"
        assert cfg["flush.policy"]["value"] == "interval"
        assert cfg["flush.ms"]["value"] == "250"
        assert cfg["retention.bytes"]["value"] == "-1"
        assert cfg["retention.bytes"]["config_source"] == "DEFAULT_CONFIG"
        for key in ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "cleanup.policy",
                    "max.message.bytes", "message.timestamp.type", "min.insync.replicas",
                    "flush.policy", "flush.ms"):
            assert key in cfg, "describe_configs lacks %s: %s" % (key, sorted(cfg))
        modified = _topic_cfg(a, topic, "modified")
        assert set(modified) == {"retention.ms", "cleanup.policy", "flush.policy", "flush.ms"}, modified

        # Non-incremental AlterConfigs (the client re-sends the other modified keys).
        r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.bytes": "1048576"})], incremental=False)
        assert r == {"topic": {topic: "OK"}}
        cfg = _topic_cfg(a, topic)
        assert cfg["retention.bytes"]["value"] == "1048576"
        assert cfg["retention.ms"]["value"] == "3600000"
        assert cfg["cleanup.policy"]["value"] == "compact"

        # IncrementalAlterConfigs: SET one key, DELETE (reset to default) another.
        r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "segment.ms": "600000",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": (AlterConfigOp.DELETE, None)})], incremental=True)
        assert r == {"topic": {topic: "OK"}}
        cfg = _topic_cfg(a, topic)
        assert cfg["segment.ms"]["value"] == "600000"
        assert cfg["message.timestamp.type"]["value"] == "LogAppendTime"
        assert cfg["cleanup.policy"]["value"] == "delete"
        assert cfg["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        assert cfg["retention.bytes"]["value"] == "1048576"  # untouched by incremental

        # validate_only changes nothing.
        r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "700000"})],
                            incremental=True, validate_only=True)
        assert r == {"topic": {topic: "OK"}}
        assert _topic_cfg(a, topic)["segment.ms"]["value"] == "600000"

        # Invalid values are rejected with INVALID_CONFIG (40) and nothing changes.
        for key, bad in [("retention.ms", "not-a-number"), ("cleanup.policy", "shred"),
                         ("flush.policy", "never"), ("message.timestamp.type", "Yesterday"),
                         ("segment.bytes", "-5"), ("min.insync.replicas", "0")]:
            for incremental in (True, False):
                r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: bad})],
                                    incremental=incremental)
                res = r["topic"][topic]
                assert res != "OK" and "InvalidConfigurationError" in res, (key, bad, incremental, res)
        # Unknown key -> INVALID_CONFIG as well.
        r = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"no.such.key": "1"})],
                            incremental=True, raise_on_unknown=False)
        assert "InvalidConfigurationError" in r["topic"][topic], r
        cfg = _topic_cfg(a, topic)
        assert cfg["retention.ms"]["value"] == "3600000"
        assert cfg["segment.ms"]["value"] == "600000"
        assert cfg["flush.policy"]["value"] == "interval"
        assert "no.such.key" not in cfg

        # A topic created with an invalid config is refused and not created.
        bad_topic = unique("badcfg")
        with pytest.raises(Errors.InvalidConfigurationError):
            a.create_topics({bad_topic: {"num_partitions": 1, "replication_factor": 1,
                                         "configs": {"cleanup.policy": "shred"}}})
        assert bad_topic not in a.list_topics()
        # Describing a topic that does not exist -> UNKNOWN_TOPIC_OR_PARTITION (3) for that
        # resource only (kafka-python's describe_configs drops per-resource errors, so send the
        # request itself).
        missing = unique("missing")
        req = DescribeConfigsRequest(resources=[(2, missing, None), (2, topic, ["retention.ms"])],
                                     include_synonyms=False)
        resp = a._manager.run(a._manager.send, req)
        res = {x.resource_name: x for x in resp.results}
        assert res[missing].error_code == 3 and list(res[missing].configs) == []
        assert res[topic].error_code == 0
        assert [(c.name, c.value) for c in res[topic].configs] == [("retention.ms", "3600000")]
    finally:
        a.close()


def test_max_message_bytes_enforced(keel):
    topic = unique("maxmsg")
    create_topic(keel.bootstrap, topic, 1, {"max.message.bytes": "2048"})
    prod = producer(keel.bootstrap, acks="all", retries=0)
    try:
        ok = prod.send(topic, value=b"s" * 100, partition=0, timestamp_ms=BASE_TS).get(timeout=20)
        assert ok.offset == 0
        with pytest.raises(Errors.MessageSizeTooLargeError):
            prod.send(topic, value=b"L" * 8000, partition=0, timestamp_ms=BASE_TS).get(timeout=20)
    finally:
        prod.close(timeout=10)
    assert end_offsets(keel.bootstrap, topic, [0]) == {0: 1}
    got = consume_all(keel.bootstrap, topic, [0])
    assert [r.value for r in got[0]] == [b"s" * 100]


def test_create_partitions_6_to_8(keel):
    topic = unique("grow")
    create_topic(keel.bootstrap, topic, NPART)
    a = admin(keel.bootstrap)
    try:
        r = a.create_partitions({topic: 8})
        assert [x.error_code for x in r.results] == [0]
        wait_until(lambda: topic_partitions_from_metadata(keel.bootstrap, topic)[0] == list(range(8)),
                   10, msg="8 partitions in metadata")
        # Shrinking is refused with INVALID_PARTITIONS (37).
        with pytest.raises(Errors.InvalidPartitionsError):
            a.create_partitions({topic: 4})
        with pytest.raises(Errors.InvalidPartitionsError):
            a.create_partitions({topic: 8})
        with pytest.raises(Errors.UnknownTopicOrPartitionError):
            a.create_partitions({unique("nothere"): 3})
    finally:
        a.close()
    assert topic_partitions_from_metadata(keel.bootstrap, topic)[0] == list(range(8))
    records = [(7, b"k7-%d" % i, b"v7-%d" % i, [("h", b"7")], BASE_TS + i) for i in range(20)]
    records += [(6, b"k6", b"v6", [], BASE_TS)]
    metas = produce_records(keel.bootstrap, topic, records)
    assert [m.offset for m in metas] == list(range(20)) + [0]
    got = consume_all(keel.bootstrap, topic, [0, 6, 7])
    assert got[0] == []
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got[7]] == \
        [(i, b"k7-%d" % i, b"v7-%d" % i, [("h", b"7")], BASE_TS + i) for i in range(20)]
    assert [(r.offset, r.value) for r in got[6]] == [(0, b"v6")]


def test_delete_topic_then_recreate_starts_at_zero(keel):
    topic = unique("del")
    create_topic(keel.bootstrap, topic, 3)
    produce_records(keel.bootstrap, topic, [(p, b"old", b"old-%d-%d" % (p, i), [], BASE_TS + i)
                                            for p in range(3) for i in range(10)])
    assert end_offsets(keel.bootstrap, topic, range(3)) == {0: 10, 1: 10, 2: 10}
    a = admin(keel.bootstrap)
    try:
        r = a.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in r["topics"]] == [(topic, 0)]
        wait_until(lambda: topic not in a.list_topics(), 10, msg="deleted topic gone from metadata")
        with pytest.raises(Errors.UnknownTopicOrPartitionError):
            a.delete_topics([topic])
        create_topic(keel.bootstrap, topic, 2)
        assert topic in a.list_topics()
    finally:
        a.close()
    assert topic_partitions_from_metadata(keel.bootstrap, topic)[0] == [0, 1]
    assert end_offsets(keel.bootstrap, topic, [0, 1]) == {0: 0, 1: 0}
    metas = produce_records(keel.bootstrap, topic, [(0, b"new", b"new-0", [], BASE_TS)])
    assert metas[0].offset == 0
    got = consume_all(keel.bootstrap, topic, [0, 1])
    assert [(r.offset, r.key, r.value) for r in got[0]] == [(0, b"new", b"new-0")]
    assert got[1] == []


def test_create_topic_errors_and_validate_only(keel):
    topic = unique("dup")
    create_topic(keel.bootstrap, topic, 2)
    a = admin(keel.bootstrap)
    try:
        with pytest.raises(Errors.TopicAlreadyExistsError):
            a.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
        # The existing topic is unchanged.
        assert topic_partitions_from_metadata(keel.bootstrap, topic)[0] == [0, 1]

        rf3 = unique("rf3")
        with pytest.raises(Errors.InvalidReplicationFactorError):
            a.create_topics({rf3: {"num_partitions": 1, "replication_factor": 3}})
        assert rf3 not in a.list_topics()

        zero = unique("zeroparts")
        with pytest.raises(Errors.InvalidPartitionsError):
            a.create_topics({zero: {"num_partitions": 0, "replication_factor": 1}})
        assert zero not in a.list_topics()

        vo = unique("validate-only")
        r = a.create_topics({vo: {"num_partitions": 4, "replication_factor": 1}}, validate_only=True)
        assert r["topics"][0]["name"] == vo and r["topics"][0]["error_code"] == 0
        assert vo not in a.list_topics()
        # validate_only still reports errors.
        with pytest.raises(Errors.TopicAlreadyExistsError):
            a.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, validate_only=True)
        # The name is still free: creating it for real works and starts empty.
        create_topic(keel.bootstrap, vo, 4)
        assert end_offsets(keel.bootstrap, vo, range(4)) == {p: 0 for p in range(4)}
    finally:
        a.close()


def test_describe_cluster(keel):
    a = admin(keel.bootstrap)
    try:
        d = a.describe_cluster()
    finally:
        a.close()
    assert d["controller_id"] == 0
    assert isinstance(d["cluster_id"], str) and d["cluster_id"]
    assert [(b["broker_id"], b["host"], b["port"]) for b in d["brokers"]] == [(0, "127.0.0.1", keel.port)]


def test_auto_create_uses_num_partitions(keel_factory):
    b = keel_factory({"num.partitions": 3}, name="keel-autocreate")
    topic = unique("auto")
    a = admin(b.bootstrap)
    try:
        assert topic not in a.list_topics()
    finally:
        a.close()
    prod = producer(b.bootstrap)
    try:
        m = prod.send(topic, key=b"ak", value=b"av", headers=[("h", b"1")], timestamp_ms=BASE_TS).get(timeout=30)
        m2 = prod.send(topic, value=b"p2", partition=2, timestamp_ms=BASE_TS + 1).get(timeout=30)
    finally:
        prod.close(timeout=10)
    parts, desc = topic_partitions_from_metadata(b.bootstrap, topic)
    assert parts == [0, 1, 2]
    assert all(p["leader_id"] == 0 for p in desc["partitions"])
    assert m.offset == 0
    assert (m2.partition, m2.offset) == (2, 0 if m.partition != 2 else 1)
    got = consume_all(b.bootstrap, topic, [0, 1, 2])
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got[m.partition] if r.key == b"ak"] == \
        [(b"ak", b"av", [("h", b"1")], BASE_TS)]
    assert sum(len(v) for v in got.values()) == 2
    # An explicit create on the same broker still honours the requested count.
    explicit = unique("explicit")
    create_topic(b.bootstrap, explicit, 5)
    assert topic_partitions_from_metadata(b.bootstrap, explicit)[0] == list(range(5))


def test_auto_create_disabled(keel_factory):
    b = keel_factory({"auto.create.topics.enable": "false"}, name="keel-noauto")
    topic = unique("noauto")
    prod = producer(b.bootstrap, max_block_ms=3000, request_timeout_ms=3000, retries=0)
    try:
        with pytest.raises((Errors.KafkaTimeoutError, Errors.UnknownTopicOrPartitionError)):
            prod.send(topic, value=b"x", timestamp_ms=BASE_TS).get(timeout=10)
    finally:
        prod.close(timeout=5)
    # A raw Produce to the missing topic gets UNKNOWN_TOPIC_OR_PARTITION (3).
    batch = kwire.record_batch([(b"k", b"v", [], BASE_TS)], BASE_TS)
    with kwire.Conn(b.bootstrap) as c:
        resp = kwire.parse_produce_v3_response(c.call(0, 3, kwire.produce_v3_body(topic, 0, batch)))
        assert resp == {(topic, 0): (3, -1)}
        # Metadata asking to auto-create is answered with the same error.
        body = c.call(3, 12, kwire.metadata_v12_body([topic], allow_auto_create=True), flexible=True)
        assert kwire.compact_string(topic) in body
    a = admin(b.bootstrap)
    try:
        assert topic not in a.list_topics()
        d = a.describe_topics()
        assert topic not in [t["name"] for t in d]
    finally:
        a.close()
    # Explicit creation still works.
    create_topic(b.bootstrap, topic, 1)
    assert produce_records(b.bootstrap, topic, [(0, b"k", b"v", [], BASE_TS)])[0].offset == 0


def test_log_append_time_topic(keel):
    """message.timestamp.type=LogAppendTime: the broker stamps records with its own clock; the
    producer's timestamp is replaced, and consumers see timestamp type 1 (LogAppendTime)."""
    topic = unique("lat")
    create_topic(keel.bootstrap, topic, 2, {"message.timestamp.type": "LogAppendTime"})
    t0 = int(time.time() * 1000)
    recs = [(i % 2, b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)], BASE_TS + i) for i in range(20)]
    metas = produce_records(keel.bootstrap, topic, recs, compression_type="snappy")
    t1 = int(time.time() * 1000)
    for m in metas:
        assert t0 - 1000 <= m.timestamp <= t1 + 1000, \
            "producer ack timestamp %d is not the log append time (%d..%d)" % (m.timestamp, t0, t1)
    got = consume_all(keel.bootstrap, topic, [0, 1])
    for p in (0, 1):
        assert [(r.key, r.value) for r in got[p]] == [(k, v) for (pp, k, v, _, _) in recs if pp == p]
        for r in got[p]:
            assert r.timestamp_type == 1, "record timestamp type %d, expected LogAppendTime" % r.timestamp_type
            assert t0 - 1000 <= r.timestamp <= t1 + 1000, (r.timestamp, t0, t1)
    # Offsets by time use the append time: nothing is at or after t1 + 60 s, offset 0 is at
    # or after the old producer timestamps.
    c = consumer(keel.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert c.offsets_for_times({tp: t1 + 60_000})[tp] is None
        assert c.offsets_for_times({tp: BASE_TS})[tp].offset == 0
    finally:
        c.close()


def test_large_values_round_trip(keel):
    topic = unique("large")
    create_topic(keel.bootstrap, topic, 2)
    sizes = [0, 1, 1000, 100_000, 500_000, 900_000]
    recs = []
    for i, n in enumerate(sizes):
        val = bytes((j * 31 + i) % 256 for j in range(n)) if n < 200_000 else (b"%07d" % i) * (n // 7)
        recs.append((i % 2, b"big-%d" % i, val, [("size", b"%d" % len(val))], BASE_TS + i))
    for codec in (None, "zstd"):
        metas = produce_records(keel.bootstrap, topic, recs, compression_type=codec,
                                max_request_size=2_000_000, batch_size=1_000_000)
        assert all(m.offset >= 0 for m in metas)
    got = consume_all(keel.bootstrap, topic, [0, 1], max_partition_fetch_bytes=1_048_576)
    for p in (0, 1):
        mine = [r for r in recs if r[0] == p]
        assert [(r.offset, r.key, r.value, r.headers) for r in got[p]] == \
            [(i, k, v, h) for i, (_, k, v, h, _) in enumerate(mine + mine)]
