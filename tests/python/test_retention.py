"""Retention with a real client: closed segments older than retention.ms (or beyond
retention.bytes) are deleted in the background, the log start offset moves, a fetch below it
gets OFFSET_OUT_OF_RANGE and kafka-python's auto_offset_reset then works; retention.ms=-1 keeps
everything; retention.ms=0 is honoured and said at warn level."""

import time

from kafka import TopicPartition
from kafka.admin import NewTopic

from conftest import unique
from kutil import admin, consumer, producer

OLD_TS = 1_600_000_000_000  # 2020: far older than any retention.ms below


def fill(bootstrap, topic, count, ts):
    prod = producer(bootstrap, batch_size=1024, linger_ms=0)
    try:
        futs = [prod.send(topic, key=b"k%d" % i, value=b"v%05d-" % i + b"x" * 300, partition=0,
                          timestamp_ms=ts + i) for i in range(count)]
        prod.flush(timeout=30)
        return [f.get(timeout=30).offset for f in futs]
    finally:
        prod.close()


def earliest_latest(bootstrap, topic):
    c = consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp]
    finally:
        c.close()


def wait_for(what, pred, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def create(bootstrap, name, configs):
    a = admin(bootstrap)
    try:
        a.create_topics([NewTopic(name, 1, 1, topic_configs=configs)])
    finally:
        a.close()


def test_retention_by_time_moves_the_start_and_auto_offset_reset_works(keel_factory):
    b = keel_factory({"log.retention.check.interval.ms": 200})
    timed, forever = unique("ret-time"), unique("ret-forever")
    create(b.bootstrap, timed, {"segment.bytes": "4096", "retention.ms": "60000"})
    create(b.bootstrap, forever, {"segment.bytes": "4096", "retention.ms": "-1"})
    offsets = fill(b.bootstrap, timed, 100, OLD_TS)
    assert offsets == list(range(100))
    fill(b.bootstrap, forever, 100, OLD_TS)
    # Every closed segment of the old records goes; the active one stays.
    wait_for("retention to move the start offset",
             lambda: earliest_latest(b.bootstrap, timed)[0] > 0)
    start, end = earliest_latest(b.bootstrap, timed)
    assert 0 < start < end == 100
    assert "retention deleted segments" in b.log_text()
    # retention.ms=-1 keeps everything.
    assert earliest_latest(b.bootstrap, forever) == (0, 100)
    # A consumer at offset 0 is below the start: OFFSET_OUT_OF_RANGE, then earliest.
    c = consumer(b.bootstrap, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(timed, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < end - start and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(recs)
        assert [r.offset for r in got] == list(range(start, end))
        assert got[0].value.startswith(b"v%05d-" % start)
    finally:
        c.close()
    # And the records left survive a restart with the start offset where it was.
    b.restart()
    assert earliest_latest(b.bootstrap, timed) == (start, 100)


def test_retention_bytes_and_zero(keel_factory):
    b = keel_factory({"log.retention.check.interval.ms": 200})
    sized, zero = unique("ret-bytes"), unique("ret-zero")
    create(b.bootstrap, sized, {"segment.bytes": "4096", "retention.bytes": "8192",
                                "retention.ms": "-1"})
    now = int(time.time() * 1000)
    fill(b.bootstrap, sized, 100, now)
    wait_for("retention.bytes to delete old segments",
             lambda: earliest_latest(b.bootstrap, sized)[0] > 0)
    start, end = earliest_latest(b.bootstrap, sized)
    # About 8 KiB of closed segments stay, plus the active one: far fewer than 100 records.
    assert end == 100 and 20 < end - start < 60, (start, end)
    create(b.bootstrap, zero, {"segment.bytes": "4096", "retention.ms": "0"})
    fill(b.bootstrap, zero, 100, now)
    wait_for("retention.ms=0 to delete every closed segment",
             lambda: earliest_latest(b.bootstrap, zero)[0] > 0)
    assert "retention.ms=0" in b.log_text()
