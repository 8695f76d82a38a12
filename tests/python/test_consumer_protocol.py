"""KIP-848 consumer groups (`group.protocol=consumer`: ConsumerGroupHeartbeat and
ConsumerGroupDescribe) with confluent-kafka 2.16.1 (librdkafka 2.16) against the real keel
binary: server-side assignment and incremental reconciliation as members join, leave and die;
commit-after-processing through rebalances; resuming from committed offsets (also across a
broker restart) and auto.offset.reset; AdminClient describe/list of consumer and classic
groups; regex subscriptions.

Every test runs its own broker with a short consumer session timeout and heartbeat interval
(members learn of a new target assignment only on their next heartbeat, so the default 5 s
interval would make each rebalance step slow). All members of a test are polled by the test's
own thread, round robin: librdkafka heartbeats from its background thread, but a member applies
(and so acknowledges) an assignment change only when its rebalance callback runs, in poll().
Every wait is bounded by a deadline."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions,
                             ConsumerGroupType, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import unique

SESSION_TIMEOUT_MS = 5000
HEARTBEAT_INTERVAL_MS = 500
BROKER_SETTINGS = {
    "group.consumer.session.timeout.ms": SESSION_TIMEOUT_MS,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
}
SESSION_S = SESSION_TIMEOUT_MS / 1000.0


# -- clients ---------------------------------------------------------------------------------

def consumer_conf(bootstrap, group, client_id, **kw):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "client.id": client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "socket.timeout.ms": 10000,
        "log.connection.close": False,
    }
    conf.update(kw)
    return conf


def admin_client(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap, "client.id": "keel-tests-admin",
                        "log.connection.close": False})


def create_topics(bootstrap, partitions_by_topic):
    a = admin_client(bootstrap)
    futures = a.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)
                               for t, n in partitions_by_topic.items()], request_timeout=15)
    for f in futures.values():
        f.result(timeout=20)


def produce(bootstrap, records, **conf):
    """records: [(topic, partition, key, value)], all acknowledged (acks=all) on return."""
    conf = dict({"bootstrap.servers": bootstrap, "client.id": "keel-tests-producer",
                 "acks": "all", "linger.ms": 5, "log.connection.close": False}, **conf)
    p = Producer(conf)
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    for topic, partition, key, value in records:
        p.produce(topic, key=key, value=value, partition=partition, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0, "records still unacknowledged after 30 s"
    assert failures == [], failures


def keyed_records(topic, partitions, per_partition, tag):
    """per_partition records in each partition; key and value name the record."""
    return [(topic, p, b"%s-k-%d-%03d" % (tag, p, i), b"%s-v-%d-%03d" % (tag, p, i))
            for i in range(per_partition) for p in range(partitions)]


class Member:
    """A consumer-protocol group member polled by the test's thread. `owned` is its assignment
    as its rebalance callbacks built it (incremental: on_assign adds, on_revoke and on_lost
    remove); `events` is their history (calls with no partitions left out); `records` what it
    consumed, as (topic, partition, offset, key, value). A fatal client error fails the test
    at once."""

    def __init__(self, bootstrap, group, topics, client_id, on_batch=None, **conf):
        self.client_id = client_id
        self.owned = set()
        self.events = []
        self.records = []
        self.errors = []
        self.anomalies = []
        self.on_batch = on_batch
        self.closed = False
        self.consumer = Consumer(consumer_conf(bootstrap, group, client_id, **conf))
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def _on_assign(self, _c, partitions):
        got = {(tp.topic, tp.partition) for tp in partitions}
        if got & self.owned:
            self.anomalies.append("assigned again: %s" % sorted(got & self.owned))
        self.owned |= got
        if got:  # librdkafka also calls on_assign with nothing new after a revocation
            self.events.append(("assign", frozenset(got)))

    def _drop(self, kind, partitions):
        gone = {(tp.topic, tp.partition) for tp in partitions}
        if gone - self.owned:
            self.anomalies.append("%s of partitions not owned: %s" % (kind, sorted(gone - self.owned)))
        self.owned -= gone
        if gone:
            self.events.append((kind, frozenset(gone)))

    def _on_revoke(self, _c, partitions):
        self._drop("revoke", partitions)

    def _on_lost(self, _c, partitions):
        self._drop("lost", partitions)

    def poll(self, timeout=0.02):
        if self.closed:
            return
        msgs = self.consumer.consume(num_messages=50, timeout=timeout)
        batch = []
        for m in msgs:
            if m.error():
                e = m.error()
                assert not (e.fatal() or e.code() == KafkaError._FATAL), "%s: %s" % (self.client_id, e)
                self.errors.append(m.error())
                continue
            batch.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        if batch:
            self.records.extend(batch)
            if self.on_batch is not None:
                self.on_batch(self, batch)

    def assignment(self):
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def close(self):
        if not self.closed:
            self.closed = True
            self.consumer.close()


CHILD_MEMBER = r"""
import json, sys, time
from confluent_kafka import Consumer
conf, topic = json.loads(sys.argv[1]), sys.argv[2]
c = Consumer(conf)
c.subscribe([topic])
last = None
deadline = time.monotonic() + 120  # never outlives a broken test by much
while time.monotonic() < deadline:
    c.poll(0.05)
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


class ChildMember:
    """A member in a child process (so that it can be SIGKILLed: it dies without leaving).
    It prints its assignment (partitions of its one topic) whenever it changes."""

    def __init__(self, bootstrap, group, topic, client_id):
        self.client_id = client_id
        self.assigned = set()
        conf = consumer_conf(bootstrap, group, client_id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD_MEMBER, json.dumps(conf), topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.assigned = set(json.loads(line))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def poll_until(members, pred, timeout_s, msg):
    """Polls every member round robin until pred() is true; returns its value."""
    deadline = time.monotonic() + timeout_s
    while True:
        for m in members:
            m.poll()
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %ss waiting for %s; owned: %s" % (
                timeout_s, msg, {m.client_id: sorted(m.owned) for m in members}))


def describe(admin, group):
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def described_assignments(d):
    """{client_id: {(topic, partition)}} of a ConsumerGroupDescription."""
    out = {}
    for m in d.members:
        assert m.client_id not in out, "two members with client id %s" % m.client_id
        out[m.client_id] = {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
    return out


def settled(admin, group, views):
    """The group's description when the coordinator calls it Stable and every member's
    assignment there is what the clients hold. views: {client_id: set of (topic, partition)}."""
    d = describe(admin, group)
    if d.state != ConsumerGroupState.STABLE:
        return None
    if described_assignments(d) != views:
        return None
    for m in d.members:
        target = {(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions}
        if target != views[m.client_id]:
            return None
    return d


def assert_partitioned(held, all_partitions):
    """held: [set]: pairwise disjoint and covering all_partitions exactly."""
    union = set()
    for h in held:
        assert not (h & union), "partitions held twice: %s" % held
        union |= h
    assert union == set(all_partitions), held


# -- 1. rebalances: join, leave, die ---------------------------------------------------------

def test_members_join_leave_and_die_with_incremental_reconciliation(keel_factory):
    broker = keel_factory(BROKER_SETTINGS)
    topic = unique("cp-rebalance")
    create_topics(broker.bootstrap, {topic: 6})
    group = unique("g-rebalance")
    all6 = {(topic, p) for p in range(6)}
    admin = admin_client(broker.bootstrap)
    members = [Member(broker.bootstrap, group, [topic], "m%d" % i) for i in range(3)]
    child = None
    try:
        # Three members: two partitions each, disjoint, all six.
        def three_settled():
            if sorted(len(m.owned) for m in members) != [2, 2, 2]:
                return None
            return settled(admin, group, {m.client_id: m.owned for m in members})

        d = poll_until(members, three_settled, 30.0, "three members with two partitions each")
        assert_partitioned([m.owned for m in members], all6)
        assert d.type == ConsumerGroupType.CONSUMER
        for m in members:
            assert m.assignment() == m.owned
            assert not any(kind == "lost" for kind, _ in m.events), m.events

        # A fourth member (a child process, killed later) joins: the others only give up
        # partitions, keeping the ones that do not move.
        before = [set(m.owned) for m in members]
        marks = [len(m.events) for m in members]
        child = ChildMember(broker.bootstrap, group, topic, "m-child")

        def four_settled():
            if not child.assigned:
                return None
            views = {m.client_id: m.owned for m in members}
            views[child.client_id] = {(topic, p) for p in child.assigned}
            return settled(admin, group, views)

        poll_until(members, four_settled, 30.0, "four members settled")
        child_held = {(topic, p) for p in child.assigned}
        assert_partitioned([m.owned for m in members] + [child_held], all6)
        sizes = sorted([len(m.owned) for m in members] + [len(child_held)])
        assert sizes == [1, 1, 2, 2], sizes
        for m, b, mark in zip(members, before, marks):
            assert m.owned <= b, (m.client_id, b, m.owned)
            assert m.assignment() == m.owned
            # Incremental: only revocations (of exactly what moved), no reassign of what stayed.
            later = m.events[mark:]
            assert all(kind == "revoke" for kind, _ in later), later
            assert set().union(*[ps for _, ps in later]) == b - m.owned
        assert child_held == set().union(*before) - set().union(*[m.owned for m in members])

        # One member closes (leaves with epoch -1): the others get its partitions at once,
        # well within the session timeout.
        leaver, stayers = members[0], members[1:]
        left_behind = set(leaver.owned)
        before = [set(m.owned) for m in stayers]
        child_before = set(child.assigned)
        marks = [len(m.events) for m in stayers]
        t0 = time.monotonic()
        leaver.close()
        assert leaver.owned == set() and leaver.events[-1] == ("revoke", frozenset(left_behind))

        def three_again():
            if set().union(*[m.owned for m in stayers]) | {(topic, p) for p in child.assigned} != all6:
                return None
            views = {m.client_id: m.owned for m in stayers}
            views[child.client_id] = {(topic, p) for p in child.assigned}
            return settled(admin, group, views)

        poll_until(stayers, three_again, 10.0, "the leaver's partitions reassigned")
        took = time.monotonic() - t0
        print("the leaver's partitions reassigned after %.2fs" % took)
        assert took < SESSION_S - 1.5, "a leave took %.1fs to rebalance" % took
        child_held = {(topic, p) for p in child.assigned}
        assert_partitioned([m.owned for m in stayers] + [child_held], all6)
        assert sorted([len(m.owned) for m in stayers] + [len(child_held)]) == [2, 2, 2]
        assert child_before <= child.assigned
        for m, b, mark in zip(stayers, before, marks):
            assert b <= m.owned
            later = m.events[mark:]
            assert all(kind == "assign" for kind, _ in later), later

        # The child is SIGKILLed: no leave. Its partitions stay its own until the session
        # timeout removes it, then go to the survivors.
        dead = {(topic, p) for p in child.assigned}
        assert dead
        before = [set(m.owned) for m in stayers]
        marks = [len(m.events) for m in stayers]
        child.kill()
        t_kill = time.monotonic()
        quiet_until = t_kill + SESSION_S - 1.5
        saw_dead_member = 0
        while time.monotonic() < quiet_until:
            for m in stayers:
                m.poll(0.05)
                assert not (m.owned & dead), "%s got %s %.1fs after the kill (session timeout %ss)" % (
                    m.client_id, sorted(m.owned & dead), time.monotonic() - t_kill, SESSION_S)
            if saw_dead_member < 3 and time.monotonic() < quiet_until - 0.5:
                d = describe(admin, group)
                views = described_assignments(d)
                assert set(views) == {"m1", "m2", "m-child"}, views
                assert views["m-child"] == dead
                saw_dead_member += 1
        assert saw_dead_member > 0

        poll_until(stayers, lambda: set().union(*[m.owned for m in stayers]) == all6,
                   SESSION_S + 8.0, "the dead member's partitions reassigned")
        took = time.monotonic() - t_kill
        print("the dead member's partitions reassigned after %.2fs" % took)
        assert SESSION_S - HEARTBEAT_INTERVAL_MS / 1000.0 - 0.5 <= took <= SESSION_S + 8.0, took
        poll_until(stayers, lambda: settled(admin, group, {m.client_id: m.owned for m in stayers}),
                   10.0, "two members settled")
        assert_partitioned([m.owned for m in stayers], all6)
        assert sorted(len(m.owned) for m in stayers) == [3, 3]
        for m, b, mark in zip(stayers, before, marks):
            assert b <= m.owned
            assert all(kind == "assign" for kind, _ in m.events[mark:]), m.events[mark:]
        for m in members:
            assert m.anomalies == [] and m.errors == [], (m.client_id, m.anomalies, m.errors)
            assert not any(kind == "lost" for kind, _ in m.events), (m.client_id, m.events)
    finally:
        if child is not None:
            child.kill()
        for m in members:
            m.close()


# -- 2. commit after processing, through rebalances ------------------------------------------

def test_commit_after_processing_through_rebalances_loses_nothing(keel_factory):
    broker = keel_factory(BROKER_SETTINGS)
    topic = unique("cp-process")
    create_topics(broker.bootstrap, {topic: 6})
    group = unique("g-process")
    produced = keyed_records(topic, 6, 100, b"p")
    # Small batches, fetched a few at a time: members process their partitions interleaved, so
    # that partitions move half processed.
    produce(broker.bootstrap, produced, **{"batch.num.messages": 4})
    small_fetches = {"max.partition.fetch.bytes": 256}
    processed = []  # (member, partition, offset, key, value), in processing order
    commit_errors = []

    def process_then_commit(member, batch):
        next_offsets = {}
        for t, p, off, k, v in batch:
            time.sleep(0.005)  # "processing"
            processed.append((member.client_id, p, off, k, v))
            next_offsets[p] = off + 1
        try:
            member.consumer.commit(offsets=[TopicPartition(topic, p, o)
                                            for p, o in sorted(next_offsets.items())],
                                   asynchronous=False)
        except KafkaException as e:  # a commit that fails means redelivery, not loss
            commit_errors.append((member.client_id, e.args[0]))

    a = Member(broker.bootstrap, group, [topic], "proc-a", on_batch=process_then_commit,
               **small_fetches)
    b = None
    try:
        poll_until([a], lambda: len(processed) >= 150, 30.0, "a to process 150 records")
        b = Member(broker.bootstrap, group, [topic], "proc-b", on_batch=process_then_commit,
                   **small_fetches)
        poll_until([a, b], lambda: b.owned and len(a.owned) == 3 and len(b.owned) == 3,
                   30.0, "a and b with three partitions each")
        moved = set(b.owned)
        assert len(processed) < len(produced), "nothing was left to process during the rebalance"
        poll_until([a, b], lambda: len(processed) >= 400, 30.0, "400 records processed")
        a.close()  # a second rebalance: b takes everything
        poll_until([b], lambda: {(r[3], r[4]) for r in processed} >= {(k, v) for _, _, k, v in produced},
                   30.0, "every record processed")
        assert len(b.owned) == 6

        # Every record processed at least once, with its content, and nothing else.
        expected = {(p, k, v) for _, p, k, v in produced}
        got = {(p, k, v) for _, p, _, k, v in processed}
        assert got == expected
        # Offsets are the record's position in its partition (keys were produced in order).
        for _, p, off, k, _ in processed:
            assert k == b"p-k-%d-%03d" % (p, off)
        # Partitions moved half processed (to b when it joined, and when a left), and the new
        # owner resumed exactly after the last record the old one processed: in processing
        # order each partition's offsets are 0..99, once each (unless a commit failed: then
        # a redelivery).
        both = {p for p in range(6) if {r[0] for r in processed if r[1] == p} == {"proc-a", "proc-b"}}
        assert both & {p for _, p in moved}, "no partition moved to b half processed"
        assert both - {p for _, p in moved}, "no partition moved from a half processed when it left"
        if not commit_errors:
            for p in range(6):
                assert [r[2] for r in processed if r[1] == p] == list(range(100)), p
        duplicates = len(processed) - len(produced)
        assert duplicates >= 0
        if not commit_errors:
            assert duplicates == 0, duplicates
        assert a.anomalies == [] and b.anomalies == []
        assert a.errors == [] and b.errors == []
        assert not any(kind == "lost" for kind, _ in a.events + b.events)
        committed = b.consumer.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == {p: 100 for p in range(6)}
    finally:
        a.close()
        if b is not None:
            b.close()


# -- 3. commits, resume, auto.offset.reset, restart -------------------------------------------

def consume_exactly(member, n, timeout_s, quiet_s=1.0):
    """Polls until member consumed n records, then quiet_s more to see that no more come."""
    poll_until([member], lambda: len(member.records) >= n, timeout_s,
               "%d records (got %d)" % (n, len(member.records)))
    end = time.monotonic() + quiet_s
    while time.monotonic() < end:
        member.poll(0.05)
    assert len(member.records) == n, len(member.records)
    return member.records


def as_content(records):
    return sorted((p, off, k, v) for _, p, off, k, v in records)


def expected_content(produced, start_offsets):
    """(partition, offset, key, value) of the produced records from start_offsets on, the
    records of each partition having been produced in order from offset 0."""
    out, next_offset = [], {}
    for _, p, k, v in produced:
        off = next_offset.get(p, 0)
        next_offset[p] = off + 1
        if off >= start_offsets.get(p, 0):
            out.append((p, off, k, v))
    return sorted(out)


def committed_offsets(admin, group, topic, partitions):
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    r = admin.list_consumer_group_offsets([req], request_timeout=10)[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in r.topic_partitions}


def test_resume_from_committed_offsets_and_auto_offset_reset(keel_factory):
    broker = keel_factory(BROKER_SETTINGS)
    topic = unique("cp-resume")
    create_topics(broker.bootstrap, {topic: 2})
    group = unique("g-resume")
    produced = keyed_records(topic, 2, 20, b"r")
    produce(broker.bootstrap, produced)
    admin = admin_client(broker.bootstrap)

    c = Member(broker.bootstrap, group, [topic], "resume-1")
    try:
        assert as_content(consume_exactly(c, 40, 30.0)) == expected_content(produced, {})
        c.consumer.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 13)],
                          asynchronous=False)
    finally:
        c.close()
    assert committed_offsets(admin, group, topic, 2) == {0: 7, 1: 13}

    # The next consumer of the group starts exactly at the committed offsets.
    c = Member(broker.bootstrap, group, [topic], "resume-2")
    try:
        got = consume_exactly(c, 13 + 7, 30.0)
        assert as_content(got) == expected_content(produced, {0: 7, 1: 13})
        assert c.owned == {(topic, 0), (topic, 1)}
    finally:
        c.close()
    assert committed_offsets(admin, group, topic, 2) == {0: 7, 1: 13}, "nothing committed since"

    # A group without commits: earliest reads everything...
    c = Member(broker.bootstrap, unique("g-earliest"), [topic], "earliest")
    try:
        assert as_content(consume_exactly(c, 40, 30.0)) == expected_content(produced, {})
    finally:
        c.close()

    # ...latest only what is produced once it is positioned at the end.
    c = Member(broker.bootstrap, unique("g-latest"), [topic], "latest",
               **{"auto.offset.reset": "latest"})
    try:
        def positioned():
            # The offset reset is done once the fetcher knows the end offsets (librdkafka's
            # position() stays unknown until a record is consumed).
            return len(c.owned) == 2 and all(
                c.consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True) == (0, 20)
                for p in range(2))

        poll_until([c], positioned, 30.0, "positioned at the end")
        assert c.records == []
        newer = keyed_records(topic, 2, 3, b"late")
        produce(broker.bootstrap, newer)
        got = consume_exactly(c, 6, 30.0)
        assert sorted((p, off, k, v) for _, p, off, k, v in got) == sorted(
            (p, 20 + i, b"late-k-%d-%03d" % (p, i), b"late-v-%d-%03d" % (p, i))
            for p in range(2) for i in range(3))
    finally:
        c.close()


def test_committed_offsets_survive_a_broker_restart(keel_factory):
    broker = keel_factory(BROKER_SETTINGS)
    topic = unique("cp-restart")
    create_topics(broker.bootstrap, {topic: 3})
    group = unique("g-restart")
    first = keyed_records(topic, 3, 10, b"a")
    produce(broker.bootstrap, first)

    c = Member(broker.bootstrap, group, [topic], "restart-1")
    try:
        assert as_content(consume_exactly(c, 30, 30.0)) == expected_content(first, {})
        c.consumer.commit(asynchronous=False)  # the positions: 10 each
        admin = admin_client(broker.bootstrap)
        assert committed_offsets(admin, group, topic, 3) == {0: 10, 1: 10, 2: 10}

        # Restart with the member still subscribed. Whether the coordinator restores the
        # membership or fences the member (UNKNOWN_MEMBER_ID: it rejoins at epoch 0), the
        # member holds all the partitions again and goes on from the commits.
        broker.restart()
        second = keyed_records(topic, 3, 2, b"b")
        produce(broker.bootstrap, second)
        c.records.clear()
        got = consume_exactly(c, 6, 45.0)
        assert sorted((p, off, k, v) for _, p, off, k, v in got) == sorted(
            (p, 10 + i, b"b-k-%d-%03d" % (p, i), b"b-v-%d-%03d" % (p, i))
            for p in range(3) for i in range(2))
        assert c.owned == {(topic, p) for p in range(3)}
        admin = admin_client(broker.bootstrap)
        d = poll_until([c], lambda: settled(admin, group, {c.client_id: c.owned}), 15.0,
                       "the rejoined member settled")
        assert [m.client_id for m in d.members] == ["restart-1"]
        c.consumer.commit(asynchronous=False)  # 12 each
    finally:
        c.close()

    broker.restart()
    admin = admin_client(broker.bootstrap)
    assert committed_offsets(admin, group, topic, 3) == {0: 12, 1: 12, 2: 12}
    c = Member(broker.bootstrap, group, [topic], "restart-2")
    try:
        poll_until([c], lambda: len(c.owned) == 3, 30.0, "an assignment")
        third = keyed_records(topic, 3, 1, b"c")
        produce(broker.bootstrap, third)
        got = consume_exactly(c, 3, 30.0)
        assert sorted((p, off, k, v) for _, p, off, k, v in got) == [
            (p, 12, b"c-k-%d-000" % p, b"c-v-%d-000" % p) for p in range(3)]
    finally:
        c.close()


# -- 4. AdminClient: describe and list ----------------------------------------------------------

def test_admin_describes_and_lists_consumer_and_classic_groups(keel_factory):
    broker = keel_factory(BROKER_SETTINGS)
    topic = unique("cp-admin")
    create_topics(broker.bootstrap, {topic: 4})
    group = unique("g-admin-consumer")
    classic_group = unique("g-admin-classic")
    admin = admin_client(broker.bootstrap)
    members = [Member(broker.bootstrap, group, [topic], "admin-%d" % i) for i in range(2)]
    classic = Member(broker.bootstrap, classic_group, [topic], "admin-classic",
                     **{"group.protocol": "classic", "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 500})
    try:
        d = poll_until(members + [classic], lambda: len(classic.owned) == 4 and sorted(
            len(m.owned) for m in members) == [2, 2] and settled(
            admin, group, {m.client_id: m.owned for m in members}), 30.0,
            "two consumer members with two partitions each and a classic member with four")
        assert d.group_id == group
        assert d.type == ConsumerGroupType.CONSUMER
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "uniform"
        assert d.is_simple_consumer_group is False
        assert d.coordinator is not None and d.coordinator.port == broker.port
        by_id = {m.member_id: m for m in d.members}
        assert len(by_id) == 2
        for m in members:
            md = by_id[m.consumer.memberid()]
            assert md.client_id == m.client_id
            assert md.host.lstrip("/") == "127.0.0.1"
            assert md.group_instance_id is None
            assert {(tp.topic, tp.partition) for tp in md.assignment.topic_partitions} == m.assignment()
            assert {(tp.topic, tp.partition) for tp in md.target_assignment.topic_partitions} == m.owned
        assert_partitioned([m.owned for m in members], {(topic, p) for p in range(4)})

        # The classic group falls back to DescribeGroups (ConsumerGroupDescribe says
        # GROUP_ID_NOT_FOUND for it).
        cd = describe(admin, classic_group)
        assert cd.type == ConsumerGroupType.CLASSIC
        assert cd.state == ConsumerGroupState.STABLE
        assert [m.client_id for m in cd.members] == ["admin-classic"]
        assert {(tp.topic, tp.partition) for tp in cd.members[0].assignment.topic_partitions} == \
            classic.owned

        def listed(**kw):
            r = admin.list_consumer_groups(request_timeout=10, **kw).result(timeout=15)
            assert r.errors == []
            return {g.group_id: g for g in r.valid}

        every = listed()
        assert every[group].type == ConsumerGroupType.CONSUMER
        assert every[group].state == ConsumerGroupState.STABLE
        assert every[classic_group].type == ConsumerGroupType.CLASSIC
        assert every[classic_group].state == ConsumerGroupState.STABLE
        consumers = listed(types={ConsumerGroupType.CONSUMER})
        assert group in consumers and classic_group not in consumers
        assert all(g.type == ConsumerGroupType.CONSUMER for g in consumers.values())
        classics = listed(types={ConsumerGroupType.CLASSIC})
        assert classic_group in classics and group not in classics
        assert all(g.type == ConsumerGroupType.CLASSIC for g in classics.values())
        both = listed(types={ConsumerGroupType.CONSUMER}, states={ConsumerGroupState.STABLE})
        assert group in both
        assert group not in listed(types={ConsumerGroupType.CONSUMER},
                                   states={ConsumerGroupState.EMPTY})

        # Members commit and leave: the consumer group is Empty, still of type CONSUMER.
        for m in members:
            m.consumer.commit(offsets=[TopicPartition(t, p, 0) for t, p in sorted(m.owned)],
                              asynchronous=False)
            m.close()
        d = describe(admin, group)
        assert (d.type, d.state, d.members) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.EMPTY, [])
        assert group in listed(types={ConsumerGroupType.CONSUMER}, states={ConsumerGroupState.EMPTY})
    finally:
        for m in members + [classic]:
            m.close()


# -- 5. regex subscriptions ---------------------------------------------------------------------

# librdkafka sends its regex subscription wrapped in parentheses ("(^prefix-.*)"; several are
# joined as "(r1)|(r2)"): the broker's matcher takes `^` and `$` anywhere, as RE2/J does.
def test_regex_subscription_follows_matching_topics(keel_factory):
    broker = keel_factory(BROKER_SETTINGS)
    prefix = unique("cprx")
    a, b, c = prefix + "-a", prefix + "-b", prefix + "-c"
    others = [prefix + "x-a", "x" + prefix + "-a", prefix]  # do not match ^prefix-.*
    create_topics(broker.bootstrap, dict({a: 2, b: 3}, **{t: 1 for t in others}))

    def one_per_partition(topic, n):
        return [(topic, p, b"%s/%d" % (topic.encode(), p), b"v") for p in range(n)]

    produce(broker.bootstrap, one_per_partition(a, 2) + one_per_partition(b, 3)
            + sum((one_per_partition(t, 1) for t in others), []))
    group = unique("g-regex")
    m = Member(broker.bootstrap, group, ["^%s-.*" % prefix], "regex")
    admin = admin_client(broker.bootstrap)
    try:
        first = {(a, 0), (a, 1), (b, 0), (b, 1), (b, 2)}
        poll_until([m], lambda: m.owned == first and len(m.records) >= 5, 30.0,
                   "the matching topics' partitions and records")
        assert sorted((t, p, k) for t, p, _, k, _ in m.records) == sorted(
            (t, p, b"%s/%d" % (t.encode(), p)) for t, p in first)

        # A matching topic created later is picked up (and a non-matching one is not).
        create_topics(broker.bootstrap, {c: 2, prefix + "_d": 1})
        produce(broker.bootstrap, one_per_partition(c, 2) + one_per_partition(prefix + "_d", 1))
        every = first | {(c, 0), (c, 1)}
        poll_until([m], lambda: m.owned == every and len(m.records) >= 7, 30.0,
                   "the new topic's partitions and records")
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            m.poll(0.05)
        assert sorted((t, p, k) for t, p, _, k, _ in m.records) == sorted(
            (t, p, b"%s/%d" % (t.encode(), p)) for t, p in every)
        assert m.anomalies == []
        d = poll_until([m], lambda: settled(admin, group, {"regex": m.owned}), 15.0, "settled")
        assert [mm.client_id for mm in d.members] == ["regex"]
    finally:
        m.close()
