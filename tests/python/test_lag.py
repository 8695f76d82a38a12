"""Consumer lag with kafka-python 3.0.12 against the real keel binary, computed the way lag tools
compute it (kafka-consumer-groups, Burrow, kafka-lag-exporter): the group's committed offsets
from OffsetFetch (`KafkaAdminClient.list_group_offsets`, kafka-python 2.x's
`list_consumer_group_offsets`), the partitions' ends from ListOffsets(latest)
(`KafkaConsumer.end_offsets`), lag = end - committed. The numbers must be exact, and equal what
keel's `/metrics` shows as `keel_group_committed_offset`, `keel_group_lag`, `keel_group_lag_sum`
and `keel_group_lag_max`."""

import threading

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from conftest import unique
from kutil import admin, consumer, producer, wait_until

PARTITIONS = 3


def create_topic(bootstrap, name):
    a = admin(bootstrap)
    try:
        r = a.create_topics({name: {"num_partitions": PARTITIONS, "replication_factor": 1}})
    finally:
        a.close()
    assert r["topics"][0]["error_code"] == 0, r


def produce(bootstrap, topic, counts, tag):
    """counts[p] keyed records to partition p; acks=all, so they are below the high watermark
    once flush returns."""
    prod = producer(bootstrap)
    try:
        for p, n in enumerate(counts):
            for i in range(n):
                k = ("%s-key-%d-%d" % (tag, p, i)).encode()
                prod.send(topic, key=k, value=k, partition=p)
        prod.flush(timeout=60)
    finally:
        prod.close(timeout=10)


def lag_by_tools(bootstrap, group):
    """{partition: (committed, end, lag)} from OffsetFetch and ListOffsets(latest)."""
    a = admin(bootstrap)
    try:
        committed = a.list_group_offsets(group)[group]
    finally:
        a.close()
    c = consumer(bootstrap)
    try:
        ends = c.end_offsets(list(committed))
    finally:
        c.close()
    return {tp.partition: (om.offset, ends[tp], max(0, ends[tp] - om.offset))
            for tp, om in committed.items()}


def lag_by_metrics(keel, group, topic):
    """What /metrics says of the group: ({partition: committed}, {partition: lag}, sum, max)."""
    m = keel.metrics()

    def per_partition(name):
        out = {}
        for labels, v in m.get(name, []):
            if labels.get("group") == group:
                assert labels["topic"] == topic, labels
                p = int(labels["partition"])
                assert p not in out, (name, labels)
                out[p] = int(v)
                assert out[p] == v
        return out

    def one(name):
        vs = [v for labels, v in m.get(name, []) if labels.get("group") == group]
        assert len(vs) <= 1, (name, vs)
        return int(vs[0]) if vs else None

    return (per_partition("keel_group_committed_offset"), per_partition("keel_group_lag"),
            one("keel_group_lag_sum"), one("keel_group_lag_max"))


def assert_lag(keel, group, topic, want):
    """want: {partition: (committed, end)}; checks the tools' numbers and /metrics against it."""
    expected = {p: (c, e, max(0, e - c)) for p, (c, e) in want.items()}
    assert lag_by_tools(keel.bootstrap, group) == expected
    lags = {p: lag for p, (_, _, lag) in expected.items()}
    assert lag_by_metrics(keel, group, topic) == (
        {p: c for p, (c, _) in want.items()}, lags,
        sum(lags.values()) if lags else None, max(lags.values()) if lags else None)


class Member:
    """One subscribed KafkaConsumer, polled by its own thread (kafka-python 3.0.12 loses a join
    that completes after the poll that started it returned: it never applies that generation's
    assignment and stops heartbeating); commits when asked. It subscribes only once its
    metadata has the topic's partitions: subscribed earlier, the first generation is assigned
    nothing ("No partition metadata") and the rebalance that follows can be the lost join."""

    def __init__(self, bootstrap, group, topic):
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id="keel-tests-lag",
            enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=15000,
            fetch_max_wait_ms=100, session_timeout_ms=6000, heartbeat_interval_ms=500,
            max_poll_interval_ms=15000)
        wait_until(lambda: self.consumer.partitions_for_topic(topic), 15.0,
                   msg="the consumer's metadata for %s" % topic)
        self.consumer.subscribe([topic])
        self.read = 0
        self._lock = threading.Lock()
        self._todo = None
        self._done = threading.Event()
        self._stop = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                for recs in self.consumer.poll(timeout_ms=100).values():
                    self.read += len(recs)
                with self._lock:
                    todo, self._todo = self._todo, None
                if todo is not None:
                    self.consumer.commit(todo)
                    self._done.set()
        except Exception as e:  # reported by commit() and close()
            self._error = e
            self._done.set()

    def commit(self, topic, offsets):
        """Commits {partition: offset} synchronously (from the polling thread)."""
        self._done.clear()
        with self._lock:
            self._todo = {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                          for p, o in offsets.items()}
        assert self._done.wait(30.0), "no commit"
        assert self._error is None, self._error

    def close(self):
        self._stop.set()
        self._thread.join(timeout=30.0)
        self.consumer.close()
        assert self._error is None, self._error


def test_lag_tools_and_metrics_agree_exactly(keel):
    topic = unique("lag")
    group = unique("g-lag")
    create_topic(keel.bootstrap, topic)
    produce(keel.bootstrap, topic, [20, 30, 10], "first")

    m = Member(keel.bootstrap, group, topic)
    try:
        # Part of the records is read, then chosen offsets of two partitions are committed.
        wait_until(lambda: m.read >= 25, 30.0, msg="25 records read (got %d)" % m.read)
        m.commit(topic, {0: 5, 1: 30})
        assert_lag(keel, group, topic, {0: (5, 20), 1: (30, 30)})
        assert lag_by_metrics(keel, group, topic) == ({0: 5, 1: 30}, {0: 15, 1: 0}, 15, 15)

        # Committing more moves the lag; so do new records.
        m.commit(topic, {0: 20, 2: 4})
        assert_lag(keel, group, topic, {0: (20, 20), 1: (30, 30), 2: (4, 10)})
        produce(keel.bootstrap, topic, [0, 7, 2], "second")
        assert_lag(keel, group, topic, {0: (20, 20), 1: (30, 37), 2: (4, 12)})
        assert lag_by_metrics(keel, group, topic) == (
            {0: 20, 1: 30, 2: 4}, {0: 0, 1: 7, 2: 8}, 15, 8)
    finally:
        m.close()

    # The group outlives its member: its lag stays on /metrics.
    assert lag_by_metrics(keel, group, topic) == (
        {0: 20, 1: 30, 2: 4}, {0: 0, 1: 7, 2: 8}, 15, 8)
