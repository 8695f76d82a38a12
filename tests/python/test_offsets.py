"""Committed offsets with kafka-python 3.0.12 against the real keel binary: consumers with a
group_id but manual assign() commit offsets with metadata, read them back, resume from them
after the consumer or the broker restarts (clean stop and kill -9), fall back to
auto_offset_reset without a commit; the coordinators' internal topic __consumer_offsets."""

import pytest
import kafka.errors as Errors
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from conftest import unique
from kutil import admin, producer, wait_until

OFFSETS_TOPIC = "__consumer_offsets"


def group_consumer(bootstrap, group_id, **kw):
    kw.setdefault("request_timeout_ms", 15000)
    kw.setdefault("fetch_max_wait_ms", 100)
    kw.setdefault("enable_auto_commit", False)
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id,
                         client_id="keel-tests-offsets", **kw)


def create_topic(bootstrap, name, partitions):
    a = admin(bootstrap)
    try:
        r = a.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}})
    finally:
        a.close()
    assert r["topics"][0]["error_code"] == 0, r


def produce_values(bootstrap, topic, partition, values):
    prod = producer(bootstrap)
    try:
        futures = [prod.send(topic, value=v, partition=partition) for v in values]
        prod.flush(timeout=60)
        return [f.get(timeout=30).offset for f in futures]
    finally:
        prod.close(timeout=10)


def read_n(consumer, n, timeout_s=30.0):
    """Polls until n records arrived (or the deadline); returns them in arrival order."""
    got = []

    def more():
        for recs in consumer.poll(timeout_ms=200).values():
            got.extend(recs)
        return len(got) >= n

    wait_until(more, timeout_s, interval_s=0, msg="%d records" % n)
    return got


def test_commit_with_metadata_reads_back_exactly(keel):
    topic = unique("offsets-meta")
    create_topic(keel.bootstrap, topic, 3)
    group = unique("g-meta")
    tps = [TopicPartition(topic, p) for p in range(3)]
    c = group_consumer(keel.bootstrap, group)
    try:
        c.assign(tps)
        for tp in tps:
            assert c.committed(tp) is None, "nothing committed yet"
        wanted = {
            tps[0]: OffsetAndMetadata(17, "first: ünïcode ✓", -1),
            tps[1]: OffsetAndMetadata(0, "", -1),
            tps[2]: OffsetAndMetadata(123456789, "x" * 4096, -1),
        }
        c.commit(wanted)
        for tp, om in wanted.items():
            got = c.committed(tp, metadata=True)
            assert (got.offset, got.metadata) == (om.offset, om.metadata), (tp, got)
            assert c.committed(tp) == om.offset
        # A later commit replaces the earlier one, partition by partition.
        c.commit({tps[0]: OffsetAndMetadata(18, "second", -1)})
        assert c.committed(tps[0], metadata=True).metadata == "second"
        assert c.committed(tps[2], metadata=True).offset == 123456789
    finally:
        c.close()
    # Another consumer of the group sees the same.
    other = group_consumer(keel.bootstrap, group)
    try:
        other.assign(tps)
        assert other.committed(tps[0], metadata=True).offset == 18
    finally:
        other.close()


def test_metadata_over_the_limit_is_refused(keel):
    topic = unique("offsets-big")
    create_topic(keel.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    c = group_consumer(keel.bootstrap, unique("g-big"))
    try:
        c.assign([tp])
        with pytest.raises(Errors.OffsetMetadataTooLargeError):
            c.commit({tp: OffsetAndMetadata(1, "x" * 4097, -1)})
        assert c.committed(tp) is None
    finally:
        c.close()


def test_offsets_survive_restart_and_kill9(keel_factory):
    b = keel_factory()
    topic = unique("offsets-restart")
    create_topic(b.bootstrap, topic, 2)
    group = unique("g-restart")
    tps = [TopicPartition(topic, p) for p in range(2)]

    def commit(offsets):
        c = group_consumer(b.bootstrap, group)
        try:
            c.assign(tps)
            c.commit({tp: OffsetAndMetadata(o, m, -1) for tp, (o, m) in zip(tps, offsets)})
        finally:
            c.close()

    def committed():
        c = group_consumer(b.bootstrap, group)
        try:
            c.assign(tps)
            out = []
            for tp in tps:
                om = c.committed(tp, metadata=True)
                out.append(None if om is None else (om.offset, om.metadata))
            return out
        finally:
            c.close()

    commit([(5, "five"), (9, "nine")])
    assert committed() == [(5, "five"), (9, "nine")]
    assert b.restart() == 0
    assert committed() == [(5, "five"), (9, "nine")]
    commit([(6, "six"), (10, "ten")])
    b.kill9_and_restart()
    assert committed() == [(6, "six"), (10, "ten")]
    b.kill9_and_restart()
    assert committed() == [(6, "six"), (10, "ten")]


def test_second_consumer_resumes_after_the_committed_offset(keel):
    topic = unique("offsets-resume")
    create_topic(keel.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    values = [("record-%03d" % i).encode() for i in range(40)]
    assert produce_values(keel.bootstrap, topic, 0, values) == list(range(40))
    group = unique("g-resume")

    first = group_consumer(keel.bootstrap, group, auto_offset_reset="earliest", max_poll_records=5)
    try:
        first.assign([tp])
        got = read_n(first, 15)
        assert [r.value for r in got[:15]] == values[:15]
        first.commit({tp: OffsetAndMetadata(15, "after 15", -1)})
    finally:
        first.close()

    second = group_consumer(keel.bootstrap, group, auto_offset_reset="earliest")
    try:
        second.assign([tp])
        assert second.position(tp) == 15
        got = read_n(second, 25)
        assert [(r.offset, r.value) for r in got] == list(zip(range(15, 40), values[15:]))
        assert second.poll(timeout_ms=300) == {}, "nothing after the end"
    finally:
        second.close()


def test_auto_commit_on_close_is_resumed(keel):
    topic = unique("offsets-auto")
    create_topic(keel.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    values = [("auto-%02d" % i).encode() for i in range(20)]
    produce_values(keel.bootstrap, topic, 0, values)
    group = unique("g-auto")
    c = group_consumer(keel.bootstrap, group, enable_auto_commit=True,
                       auto_offset_reset="earliest", max_poll_records=8)
    try:
        c.assign([tp])
        got = []
        while len(got) < 8:
            for recs in c.poll(timeout_ms=500, max_records=8 - len(got)).values():
                got.extend(recs)
        assert [r.value for r in got] == values[:8]
    finally:
        c.close()  # commits the position (8)
    c = group_consumer(keel.bootstrap, group)
    try:
        c.assign([tp])
        assert c.committed(tp) == 8
        got = read_n(c, 12)
        assert [r.value for r in got] == values[8:]
    finally:
        c.close()


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_auto_offset_reset_without_a_commit(keel, reset):
    topic = unique("offsets-reset-" + reset)
    create_topic(keel.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    before = [("before-%d" % i).encode() for i in range(5)]
    produce_values(keel.bootstrap, topic, 0, before)
    c = group_consumer(keel.bootstrap, unique("g-reset"), auto_offset_reset=reset)
    try:
        c.assign([tp])
        assert c.committed(tp) is None
        assert c.position(tp) == (0 if reset == "earliest" else 5)
        after = [("after-%d" % i).encode() for i in range(3)]
        produce_values(keel.bootstrap, topic, 0, after)
        want = before + after if reset == "earliest" else after
        got = read_n(c, len(want))
        assert [r.value for r in got] == want
    finally:
        c.close()


def test_consumer_offsets_topic_is_internal_with_50_partitions(keel_factory):
    b = keel_factory()
    a = admin(b.bootstrap)
    try:
        assert OFFSETS_TOPIC not in a.list_topics(), "created by the first FindCoordinator only"
    finally:
        a.close()
    c = group_consumer(b.bootstrap, unique("g-internal"))
    try:
        topic = unique("offsets-internal")
        create_topic(b.bootstrap, topic, 1)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        assert c.committed(tp) is None  # finds the coordinator: the topic now exists
    finally:
        c.close()
    a = admin(b.bootstrap)
    try:
        wait_until(lambda: OFFSETS_TOPIC in a.list_topics(), 10, msg="__consumer_offsets listed")
        desc = a.describe_topics([OFFSETS_TOPIC])
    finally:
        a.close()
    assert len(desc) == 1 and desc[0]["error_code"] == 0, desc
    assert desc[0]["is_internal"] is True
    assert sorted(p["partition_index"] for p in desc[0]["partitions"]) == list(range(50))
