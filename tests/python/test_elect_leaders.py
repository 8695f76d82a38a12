"""ElectLeaders from kafka-python (KafkaAdminClient.elect_leaders) and confluent-kafka
(AdminClient.elect_leaders) against a three-broker cluster with the automatic rebalance off:
after a restart, leadership stays away from the preferred replica until the client's
preferred election moves it back. Asserts each partition's result and the leader after."""

import time

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KPNewTopic

from conftest import unique

ELECTION_NOT_NEEDED = 84
UNKNOWN_TOPIC_OR_PARTITION = 3


def wait_until(what, check, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("timed out after %ss waiting until %s" % (timeout_s, what))


def partitions(ca, topic):
    """{partition: (leader, isr)} as the cluster's Metadata says."""
    md = ca.list_topics(topic, timeout=10)
    t = md.topics[topic]
    assert t.error is None, t.error
    return {p.id: (p.leader, sorted(p.isrs)) for p in t.partitions.values()}


def restart_preferred(cluster, ca, topic, node_id, partition):
    """Stops broker `node_id` until another broker leads `partition`, then starts it again and
    waits until it is back in every ISR; the leader is still the other broker then."""
    cluster.node(node_id).stop()
    wait_until("leadership of %d moves away from %d" % (partition, node_id),
               lambda: partitions(ca, topic)[partition][0] not in (node_id, -1))
    cluster.node(node_id).start()
    wait_until("broker %d is back in every ISR" % node_id,
               lambda: all(isr == [1, 2, 3] for _, isr in partitions(ca, topic).values()))
    leader = partitions(ca, topic)[partition][0]
    assert leader != node_id
    return leader


def kafka_python_admin(cluster):
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="keel-tests-elect",
                            request_timeout_ms=15000)


def test_elect_leaders_from_kafka_python_and_confluent_kafka(keel_cluster):
    cluster = keel_cluster(3, {"auto.leader.rebalance.enable": "false",
                               "leader.imbalance.check.interval.seconds": 1})
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = unique("elect")
    # Partition p prefers broker 1 + p.
    kp = kafka_python_admin(cluster)
    try:
        kp.create_topics([KPNewTopic(topic, num_partitions=-1, replication_factor=-1,
                                     replica_assignments={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})])
    finally:
        kp.close()
    wait_until("every ISR is full",
               lambda: all(isr == [1, 2, 3] for _, isr in partitions(ca, topic).values()))
    assert {p: l for p, (l, _) in partitions(ca, topic).items()} == {0: 1, 1: 2, 2: 3}

    # kafka-python moves partition 0 back to broker 1.
    restart_preferred(cluster, ca, topic, 1, 0)
    time.sleep(2)  # two check intervals: the rebalance is off, nothing moves
    assert partitions(ca, topic)[0][0] != 1
    # A new client: one from before the restart may still lack broker 1 (the controller it
    # sends ElectLeaders to is whichever broker answered its Metadata).
    kp = kafka_python_admin(cluster)
    try:
        resp = kp.elect_leaders(0, {topic: [0, 1]}, raise_errors=False)
    finally:
        kp.close()
    assert resp.error_code == 0
    got = {(r[0], p[0]): p[1] for r in resp.replica_election_results for p in r[1]}
    assert got == {(topic, 0): 0, (topic, 1): ELECTION_NOT_NEEDED}, resp
    # The answering broker had the new leader installed; the others follow at once.
    wait_until("every broker names broker 1 the leader of 0",
               lambda: partitions(ca, topic)[0][0] == 1, timeout_s=5)

    # confluent-kafka moves partition 1 back to broker 2.
    restart_preferred(cluster, ca, topic, 2, 1)
    ca = AdminClient({"bootstrap.servers": cluster.node(1).bootstrap})
    result = ca.elect_leaders(ElectionType.PREFERRED,
                              [TopicPartition(topic, 1), TopicPartition(topic, 2)]).result(timeout=30)
    # Each value is None (elected) or the partition's KafkaError.
    by_partition = {tp.partition: err for tp, err in result.items()}
    assert by_partition[1] is None, by_partition
    assert by_partition[2] is not None
    assert by_partition[2].code() == ELECTION_NOT_NEEDED, by_partition
    wait_until("broker 2 leads 1 again",
               lambda: {p: l for p, (l, _) in partitions(ca, topic).items()} == {0: 1, 1: 2, 2: 3},
               timeout_s=5)

    # Unclean for a partition that has a leader, and an unknown partition.
    result = ca.elect_leaders(ElectionType.UNCLEAN,
                              [TopicPartition(topic, 0), TopicPartition(topic, 7)]).result(timeout=30)
    codes = {tp.partition: err.code() for tp, err in result.items()}
    assert codes == {0: ELECTION_NOT_NEEDED, 7: UNKNOWN_TOPIC_OR_PARTITION}

    # Every partition: nothing needs an election now.
    result = ca.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30)
    assert all(err is None for err in result.values()), result
    assert not any(tp.topic == topic for tp in result), result
