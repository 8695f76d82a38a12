"""Classic consumer groups with kafka-python 3.0.12 against the real keel binary: a subscribing
KafkaConsumer consumes, commits and closes, and the next consumer of the group resumes after
the committed offset; DescribeGroups and ListGroups show a group's state and members;
DeleteGroups deletes an empty group (with its offsets) and refuses an active one; the sticky
and round-robin assignors form a group of two, then three, that consumes every record once and
resumes moved partitions from the committed offsets.

kafka-python 3.0.12 loses a join that completes after the `poll()` that started it returned
(it sends a new JoinGroup, or leaves its heartbeat disabled), so members of one group are each
polled by their own thread with timeouts long enough for a rebalance."""

import threading

from kafka import KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from conftest import unique
from kutil import admin, producer, wait_until

SESSION = dict(session_timeout_ms=6000, heartbeat_interval_ms=500, max_poll_interval_ms=15000)


def group_consumer(bootstrap, group_id, topic, **kw):
    kw.setdefault("request_timeout_ms", 15000)
    kw.setdefault("fetch_max_wait_ms", 100)
    kw.setdefault("enable_auto_commit", False)
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("client_id", "keel-tests-groups")
    for k, v in SESSION.items():
        kw.setdefault(k, v)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, **kw)
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
    only this thread touches it). Publishes its assignment and the records it received
    (partition, offset, key, value); commits when asked."""

    def __init__(self, bootstrap, group_id, topic, **kw):
        super().__init__(daemon=True)
        self.consumer = group_consumer(bootstrap, group_id, topic, **kw)
        self.assigned = frozenset()
        self._lock = threading.Lock()
        self._records = []
        self.error = None
        self._stop_now = threading.Event()
        self._commit_now = threading.Event()
        self.committed = threading.Event()
        self.start()

    def run(self):
        try:
            while not self._stop_now.is_set():
                got = self.consumer.poll(timeout_ms=1000)
                with self._lock:
                    for recs in got.values():
                        self._records.extend((r.partition, r.offset, r.key, r.value) for r in recs)
                self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
                if self._commit_now.is_set():
                    self.consumer.commit()
                    self._commit_now.clear()
                    self.committed.set()
        except Exception as e:  # reported by the test through `error`
            self.error = e
        finally:
            self.consumer.close()

    def records(self):
        with self._lock:
            return list(self._records)

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


def _group_offsets(a, group):
    return {tp.partition: om.offset for tp, om in a.list_group_offsets(group)[group].items()}


def _assignor_group(keel, assignor, prefix):
    """Two members with `assignor`, then a third, over six partitions. Checks the splits, that
    DescribeGroups names the assignor and shows what each member holds, and that every record
    is consumed once: the first batch by the two, committed; the second after the third joined,
    the partitions that moved resuming at the committed offsets. Returns the assignments
    [(client id, member id, partitions)] of two members and of three."""
    partitions = 6
    topic = unique("groups-" + prefix)
    create_topic(keel.bootstrap, topic, partitions)
    group = unique("g-" + prefix)
    members = []
    a = admin(keel.bootstrap)

    def join():
        i = len(members)
        members.append(Member(keel.bootstrap, group, topic, client_id="%s-%d" % (prefix, i),
                              partition_assignment_strategy=[assignor]))

    def formed():
        """Once every member holds its share and the group is Stable: the members, in join
        order, as (client id, member id, partitions)."""
        held = [m.assigned for m in members]
        n = len(members)
        if (sum(len(h) for h in held) != partitions
                or frozenset().union(*held) != frozenset(range(partitions))
                or any(len(h) != partitions // n for h in held)):
            return None
        d = a.describe_groups([group])[group]
        if d["group_state"] != "Stable" or len(d["members"]) != n:
            return None
        assert d["error"] is None, d
        assert d["protocol_type"] == "consumer", d
        assert d["protocol_data"] == assignor.name, d
        by_client = {}
        for m in d["members"]:
            described = set()
            for t in m["member_assignment"]["assigned_partitions"]:
                assert t["topic"] == topic, m
                described.update(t["partitions"])
            by_client[m["client_id"]] = (m["member_id"], frozenset(described))
        out = []
        for i, h in enumerate(held):
            member_id, described = by_client["%s-%d" % (prefix, i)]
            if described != h:
                return None  # the member has not taken its new assignment yet
            out.append(("%s-%d" % (prefix, i), member_id, h))
        return out

    def consumed(batches):
        """Waits until the members received every record of `batches` (lists of values, the
        i-th produced to partition i % 6); checks each arrived once, in place and in order."""
        expected = [(i % partitions, v) for batch in batches for i, v in enumerate(batch)]

        def all_in():
            return sum(len(m.records()) for m in members) >= len(expected)

        wait_until(all_in, 15.0, interval_s=0.05, msg="%d records" % len(expected))
        got = [r for m in members for r in m.records()]
        assert all(k == v for _p, _o, k, v in got), got
        assert sorted((p, v) for p, _o, _k, v in got) == sorted(expected)
        for p in range(partitions):
            offsets = sorted(o for q, o, _k, _v in got if q == p)
            assert offsets == list(range(len(offsets))), (p, offsets)

    try:
        for _ in range(2):
            join()
        two = wait_until(formed, 20.0, msg="a Stable group of two")
        first = [("first-%02d" % i).encode() for i in range(60)]
        produce(keel.bootstrap, topic, partitions, first)
        consumed([first])
        for m in members:
            m.commit()
        assert _group_offsets(a, group) == {p: 10 for p in range(partitions)}

        join()
        three = wait_until(formed, 20.0, msg="a Stable group of three")
        second = [("second-%02d" % i).encode() for i in range(60)]
        produce(keel.bootstrap, topic, partitions, second)
        consumed([first, second])
        for m in members:
            m.commit()
        assert _group_offsets(a, group) == {p: 20 for p in range(partitions)}
        for m in members:
            assert m.error is None, m.error
        return two, three
    finally:
        for m in members:
            m.stop()
        a.close()


def test_sticky_assignor_keeps_what_need_not_move(keel):
    two, three = _assignor_group(keel, StickyPartitionAssignor, "sticky")
    assert [len(h) for _c, _m, h in two] == [3, 3]
    # The third member takes one partition from each; the first two keep the rest.
    for (c, _m, before), (_c, _m2, after) in zip(two, three):
        assert after < before, (c, before, after)


def test_roundrobin_assignor_deals_partitions_in_member_id_order(keel):
    two, three = _assignor_group(keel, RoundRobinPartitionAssignor, "roundrobin")
    for layout in (two, three):
        n = len(layout)
        by_member_id = sorted((m, h) for _c, m, h in layout)
        assert [h for _m, h in by_member_id] == [
            frozenset(range(k, 6, n)) for k in range(n)], layout
