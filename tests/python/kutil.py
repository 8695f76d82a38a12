"""kafka-python helpers shared by the tests (these helpers read with assign(), so every
consumer uses group_id=None with assign())."""

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition


def admin(bootstrap, **kw):
    kw.setdefault("request_timeout_ms", 15000)
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="keel-tests-admin", **kw)


def producer(bootstrap, **kw):
    # kafka-python 3 is idempotent by default (InitProducerId, sequence numbers): kept so.
    kw.setdefault("acks", "all")
    kw.setdefault("request_timeout_ms", 15000)
    kw.setdefault("max_block_ms", 15000)
    kw.setdefault("linger_ms", 5)
    return KafkaProducer(bootstrap_servers=bootstrap, client_id="keel-tests-producer", **kw)


def consumer(bootstrap, **kw):
    kw.setdefault("request_timeout_ms", 15000)
    kw.setdefault("fetch_max_wait_ms", 100)
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         client_id="keel-tests-consumer", **kw)


def consume_all(bootstrap, topic, partitions, timeout_s=60.0, **kw):
    """Read every record of `partitions` from the beginning up to the end offset measured when
    the call starts. Returns {partition: [ConsumerRecord, ...]} in offset order."""
    c = consumer(bootstrap, **kw)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out = {p: [] for p in partitions}
        deadline = time.monotonic() + timeout_s
        while True:
            if all(c.position(tp) >= ends[tp] for tp in tps):
                break
            assert time.monotonic() < deadline, (
                "timed out consuming %s: positions %s, ends %s"
                % (topic, {tp.partition: c.position(tp) for tp in tps}, ends))
            for tp, recs in c.poll(timeout_ms=500, max_records=10000).items():
                out[tp.partition].extend(recs)
        return out
    finally:
        c.close()


def end_offsets(bootstrap, topic, partitions):
    c = consumer(bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    finally:
        c.close()


def wait_until(pred, timeout_s=15.0, interval_s=0.1, msg="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout_s, msg))
        time.sleep(interval_s)
