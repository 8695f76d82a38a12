"""Partition reassignment (KIP-455) and manual partition placement through real admin clients,
against three keel brokers started as broker/tests/common's `cluster` starts them.

kafka-python 3.0.12 has `alter_partition_reassignments` and `list_partition_reassignments`: a
reassignment stalled by a stopped (SIGSTOP) target is listed with its adding replica, a second
one is cancelled back to its original replica, the first completes once the target runs
again (new replicas in Metadata, records readable), and the errors are Kafka's
(NO_REASSIGNMENT_IN_PROGRESS, INVALID_REPLICA_ASSIGNMENT). confluent-kafka 2.16.1, the newest
release, has no reassignment API (librdkafka has none): it reads the replicas from Metadata
and places new partitions with `create_partitions(..., replica_assignment=...)`."""

import signal

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import TopicPartition
import kafka.errors as Errors

from conftest import finish_cluster, start_cluster, unique
from kutil import admin, consume_all, producer, wait_until


@pytest.fixture(scope="module")
def cluster(request):
    nodes = start_cluster(3, name="keel-reassign")
    try:
        wait_until(lambda: len(brokers_listed(nodes[0])) == 3, timeout_s=20,
                   msg="all three brokers registered")
    except Exception:
        finish_cluster(nodes, True)
        raise
    yield nodes
    finish_cluster(nodes, getattr(request.session, "_keel_failed", False))


def bootstrap(nodes, skip=()):
    return ",".join(b.bootstrap for i, b in enumerate(nodes) if i + 1 not in skip)


def confluent_admin(servers):
    return AdminClient({"bootstrap.servers": servers, "socket.timeout.ms": 10000})


def metadata(servers, topic=None):
    """Metadata through confluent-kafka: a fresh client, so it starts at `servers`."""
    return confluent_admin(servers).list_topics(topic=topic, timeout=10)


def brokers_listed(b):
    return sorted(metadata(b.bootstrap).brokers)


def replicas(servers, topic, p):
    part = metadata(servers, topic).topics[topic].partitions[p]
    return part.leader, list(part.replicas), sorted(part.isrs)


def produce(servers, topic, p, n, tag):
    prod = producer(servers)
    try:
        for i in range(n):
            prod.send(topic, key=("%s-%d" % (tag, i)).encode(), value=("value-%s-%d" % (tag, i)).encode(),
                      partition=p).get(timeout=15)
    finally:
        prod.close()


def test_kafka_python_reassignments_listed_cancelled_and_completed(cluster):
    nodes = cluster
    t1, t2 = unique("reassign"), unique("cancel")
    a = admin(bootstrap(nodes))
    try:
        for t in (t1, t2):
            r = a.create_topics({t: {"num_partitions": 1, "replication_factor": 1}})
            assert r["topics"][0]["error_code"] == 0, r
    finally:
        a.close()
    produce(bootstrap(nodes), t1, 0, 20, "t1")
    l1 = replicas(bootstrap(nodes), t1, 0)[0]
    l2 = replicas(bootstrap(nodes), t2, 0)[0]
    stopped = next(b for b in (1, 2, 3) if b not in (l1, l2))
    running = bootstrap(nodes, skip=(stopped,))

    # The target broker stops, and is fenced: neither reassignment can complete.
    nodes[stopped - 1].proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: stopped not in sorted(metadata(running).brokers), timeout_s=15,
                   msg="broker %d fenced" % stopped)
        tp1, tp2 = TopicPartition(t1, 0), TopicPartition(t2, 0)
        a = admin(running)
        try:
            assert a.alter_partition_reassignments({tp1: [l1, stopped], tp2: [stopped]}) == {
                tp1: None, tp2: None}
            listed = a.list_partition_reassignments()
            assert listed == {
                tp1: {"replicas": [l1, stopped], "adding_replicas": [stopped], "removing_replicas": []},
                tp2: {"replicas": [stopped, l2], "adding_replicas": [stopped], "removing_replicas": [l2]},
            }, listed
            assert a.list_partition_reassignments([tp2]) == {tp2: listed[tp2]}
            # Metadata lists the target, then the replicas being removed; the ISR is unchanged.
            assert replicas(running, t1, 0) == (l1, [l1, stopped], [l1])
            assert replicas(running, t2, 0) == (l2, [stopped, l2], [l2])

            # Cancelled: the original replica alone again, nothing listed for it.
            assert a.alter_partition_reassignments({tp2: None}) == {tp2: None}
            assert set(a.list_partition_reassignments()) == {tp1}
            assert replicas(running, t2, 0) == (l2, [l2], [l2])
        finally:
            a.close()
    finally:
        nodes[stopped - 1].proc.send_signal(signal.SIGCONT)

    # The target runs again: it catches up, joins the ISR, and the reassignment completes.
    a = admin(bootstrap(nodes))
    try:
        wait_until(lambda: a.list_partition_reassignments() == {}, timeout_s=30,
                   msg="the reassignment of %s completes" % t1)
        wait_until(lambda: replicas(bootstrap(nodes), t1, 0) == (l1, [l1, stopped], sorted([l1, stopped])),
                   timeout_s=15, msg="both replicas in sync")
        got = consume_all(bootstrap(nodes), t1, [0])[0]
        assert [(m.key, m.value) for m in got] == [
            (("t1-%d" % i).encode(), ("value-t1-%d" % i).encode()) for i in range(20)]

        # Kafka's errors, each per partition; nothing changes.
        assert a.alter_partition_reassignments({tp2: None}) == {tp2: Errors.NoReassignmentInProgressError}
        # kafka-python's name for 39, INVALID_REPLICA_ASSIGNMENT.
        invalid = Errors.InvalidReplicationAssignmentError
        assert a.alter_partition_reassignments({tp1: [l1, 99]}) == {tp1: invalid}
        assert a.alter_partition_reassignments({TopicPartition(t1, 7): [l1]}) == {
            TopicPartition(t1, 7): Errors.UnknownTopicOrPartitionError}
        assert a.list_partition_reassignments() == {}
        assert replicas(bootstrap(nodes), t1, 0)[1] == [l1, stopped]
    finally:
        a.close()


def test_confluent_kafka_places_new_partitions_as_assigned(cluster):
    nodes = cluster
    servers = bootstrap(nodes)
    # No reassignment API in confluent-kafka (nor in librdkafka): when one appears, test it here.
    assert not hasattr(AdminClient, "alter_partition_reassignments")
    t = unique("assigned")
    a = confluent_admin(servers)
    a.create_topics([NewTopic(t, 1, 3)])[t].result(timeout=15)
    a.create_partitions([NewPartitions(t, 3, replica_assignment=[[3, 1, 2], [2, 3, 1]])])[t].result(timeout=15)
    for p, want in ((1, [3, 1, 2]), (2, [2, 3, 1])):
        wait_until(lambda: replicas(servers, t, p) == (want[0], want, [1, 2, 3]), timeout_s=20,
                   msg="%s-%d on %s, all in sync" % (t, p, want))
    prod = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True})
    for p in (1, 2):
        for i in range(10):
            prod.produce(t, key=b"k%d" % i, value=b"v%d-%d" % (p, i), partition=p)
    assert prod.flush(20) == 0
    del prod  # closes its connections before the cluster stops
    got = consume_all(servers, t, [1, 2])
    for p in (1, 2):
        assert [(m.key, m.value) for m in got[p]] == [(b"k%d" % i, b"v%d-%d" % (p, i)) for i in range(10)]

    # An unknown broker and a wrong replica count are refused; the topic keeps 3 partitions.
    for bad in ([[1, 2, 99]], [[1, 2]]):
        with pytest.raises(KafkaException) as e:
            a.create_partitions([NewPartitions(t, 4, replica_assignment=bad)])[t].result(timeout=15)
        assert e.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, bad
    assert sorted(metadata(servers, t).topics[t].partitions) == [0, 1, 2]
