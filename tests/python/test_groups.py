"""Classic consumer groups with kafka-python 3.0.12 against the real keel binary: a subscribing
KafkaConsumer consumes, commits and closes, and the next consumer of the group resumes after
the committed offset; DescribeGroups and ListGroups show a group's state and members;
DeleteGroups deletes an empty group (with its offsets) and refuses an active one.

kafka-python 3.0.12 loses a join that completes after the `poll()` that started it returned
(it sends a new JoinGroup, or leaves its heartbeat disabled), so members of one group are each
polled by their own thread with timeouts long enough for a rebalance."""

import threading

from kafka import KafkaConsumer, TopicPartition

from conftest import unique
from kutil import admin, producer, wait_until

SESSION = dict(session_timeout_ms=6000, heartbeat_interval_ms=500, max_poll_interval_ms=15000)


def group_consumer(bootstrap, group_id, topic, **kw):
    kw.setdefault("request_timeout_ms", 15000)
    kw.setdefault("fetch_max_wait_ms", 100)
    kw.setdefault("enable_auto_commit", False)
    kw.setdefault("auto_offset_reset", "earliest")
    for k, v in SESSION.items():
        kw.setdefault(k, v)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id,
                      client_id="keel-tests-groups", **kw)
    c.subscribe([topic])
    return c


def create_topic(bootstrap, name, partitions):
    a = admin(bootstrap)
    try:
        r = a.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}})
    finally:
        a.close()
    assert r["topics"][0]["error_code"] == 0, r


def produce(bootstrap, topic, partitions, values):
    prod = producer(bootstrap)
    try:
        for i, v in enumerate(values):
            prod.send(topic, key=v, value=v, partition=i % partitions)
        prod.flush(timeout=60)
    finally:
        prod.close(timeout=10)


def read_values(consumer, n, timeout_s=30.0):
    """Polls until n records arrived; returns their values."""
    got = []

    def more():
        for recs in consumer.poll(timeout_ms=1000).values():
            got.extend(r.value for r in recs)
        return len(got) >= n

    wait_until(more, timeout_s, interval_s=0, msg="%d records (got %d)" % (n, len(got)))
    return got


def test_a_new_consumer_resumes_after_the_committed_offsets(keel):
    topic = unique("groups-resume")
    create_topic(keel.bootstrap, topic, 3)
    group = unique("g-resume")
    first_values = [("first-%03d" % i).encode() for i in range(30)]
    produce(keel.bootstrap, topic, 3, first_values)

    c = group_consumer(keel.bootstrap, group, topic)
    try:
        got = read_values(c, 30)
        assert sorted(got) == sorted(first_values)
        c.commit()
        assert c.assignment() == {TopicPartition(topic, p) for p in range(3)}
        assert {p: c.committed(TopicPartition(topic, p)) for p in range(3)} == {0: 10, 1: 10, 2: 10}
    finally:
        c.close()

    later_values = [("later-%03d" % i).encode() for i in range(21)]
    produce(keel.bootstrap, topic, 3, later_values)
    c = group_consumer(keel.bootstrap, group, topic)
    try:
        got = read_values(c, 21)
        # Nothing it had already consumed, nothing missing.
        assert sorted(got) == sorted(later_values)
        assert c.poll(timeout_ms=500) == {}
        c.commit()
    finally:
        c.close()
    a = admin(keel.bootstrap)
    try:
        offsets = a.list_group_offsets(group)[group]
    finally:
        a.close()
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 17, 1: 17, 2: 17}


class Member(threading.Thread):
    """One group member, polled by its own thread (kafka-python consumers are not thread-safe:
    only this thread touches it). Publishes its assignment; commits when asked."""

    def __init__(self, bootstrap, group_id, topic):
        super().__init__(daemon=True)
        self.consumer = group_consumer(bootstrap, group_id, topic)
        self.assigned = frozenset()
        self.error = None
        self._stop_now = threading.Event()
        self._commit_now = threading.Event()
        self.committed = threading.Event()
        self.start()

    def run(self):
        try:
            while not self._stop_now.is_set():
                self.consumer.poll(timeout_ms=1000)
                self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
                if self._commit_now.is_set():
                    self.consumer.commit()
                    self._commit_now.clear()
                    self.committed.set()
        except Exception as e:  # reported by the test through `error`
            self.error = e
        finally:
            self.consumer.close()

    def commit(self):
        self.committed.clear()
        self._commit_now.set()
        assert self.committed.wait(15.0), "no commit"

    def stop(self):
        self._stop_now.set()
        self.join(30.0)
        assert not self.is_alive()
        assert self.error is None, self.error


def test_describe_list_and_delete_groups(keel):
    topic = unique("groups-admin")
    create_topic(keel.bootstrap, topic, 4)
    group = unique("g-admin")
    produce(keel.bootstrap, topic, 4, [b"x%d" % i for i in range(8)])
    members = [Member(keel.bootstrap, group, topic) for _ in range(2)]
    a = admin(keel.bootstrap)
    try:
        def split():
            held = [m.assigned for m in members]
            return all(len(h) == 2 for h in held) and len(held[0] | held[1]) == 4

        wait_until(split, 30.0, msg="two members with two partitions each")

        def stable():
            d = a.describe_groups([group])[group]
            return d if d["group_state"] == "Stable" and len(d["members"]) == 2 else None

        d = wait_until(stable, 15.0, msg="a Stable group of two")
        assert d["error"] is None
        assert d["protocol_type"] == "consumer"
        assert d["protocol_data"] in ("range", "roundrobin"), d
        assert len({m["member_id"] for m in d["members"]}) == 2
        assigned = set()
        for m in d["members"]:
            assert m["client_id"] == "keel-tests-groups"
            assert m["client_host"] == "/127.0.0.1"
            assert list(m["member_metadata"]["topics"]) == [topic]
            for t in m["member_assignment"]["assigned_partitions"]:
                assert t["topic"] == topic
                assigned.update(t["partitions"])
        assert assigned == {0, 1, 2, 3}
        listed = {g["group_id"]: g for g in a.list_groups()}
        assert listed[group]["protocol_type"] == "consumer"
        assert listed[group]["group_state"] == "Stable"
        assert group not in {g["group_id"] for g in a.list_groups(states_filter=["Empty"])}
        assert group in {g["group_id"] for g in a.list_groups(states_filter=["Stable"])}

        # Members commit, so the group has offsets to lose; active, it cannot be deleted.
        for m in members:
            m.commit()
        assert a.delete_groups([group]) == {group: "NonEmptyGroupError"}

        # Both close (LeaveGroup): the group is Empty and can go, with its offsets.
        for m in members:
            m.stop()
        members = []
        d = a.describe_groups([group])[group]
        assert (d["group_state"], d["members"]) == ("Empty", []), d
        assert a.list_group_offsets(group)[group], "the group committed offsets"
        assert a.delete_groups([group]) == {group: "OK"}
        assert a.list_group_offsets(group)[group] == {}
        assert a.describe_groups([group])[group]["group_state"] == "Dead"
        assert group not in {g["group_id"] for g in a.list_groups()}
        assert a.delete_groups([group]) == {group: "GroupIdNotFoundError"}
    finally:
        for m in members:
            m.stop()
        a.close()
