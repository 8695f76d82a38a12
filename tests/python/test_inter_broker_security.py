"""Replica fetchers and the WriteTxnMarkers client on a secured inter-broker listener (issue
19): a 3-node cluster whose inter-broker listener is SASL_SSL (each broker logs in with
SCRAM-SHA-512 as the user of its `listener.name.repl.scram-sha-512.sasl.jaas.config`) or SSL
with client certificates required (each broker presents its keystore's certificate). With the
StandardAuthorizer on and no ACL for anyone else, replication (acks=all) and transactions
across brokers work, so the brokers' own principals are the ones fetching and writing markers.

A follower's fetch from any other principal changes no replica state: with a follower stopped
(SIGSTOP) and records past the high watermark, a Fetch v15 that claims to be that follower
from a principal without CLUSTER_ACTION gets TOPIC_AUTHORIZATION_FAILED and the high
watermark stays; the same request from a broker's principal moves it (the control)."""

import os
import re
import signal
import ssl
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kwire as w
from kutil import STANDARD_AUTHORIZER, Security, wait_until

PASSWORDS = {"admin": "admin-secret", "broker": "broker-secret", "alice": "alice-secret"}
TOPIC_AUTHORIZATION_FAILED = 29
BROKER_DN = "CN=localhost"  # the certs fixture's broker certificate
SCRAM_LOGIN = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="broker" password="%s";' % PASSWORDS["broker"])


def cluster_for(keel_cluster, certs, protocol):
    settings = {
        "inter.broker.listener.name": "REPL",
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        # A stopped follower stays registered and in the ISR for the whole test.
        "broker.session.timeout.ms": 60000,
        "replica.lag.time.max.ms": 60000,
    }
    extra_args = []
    if protocol == "SASL_SSL":
        settings.update({
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.repl.scram-sha-512.sasl.jaas.config": SCRAM_LOGIN,
            "super.users": "User:admin;User:broker",
        })
        for user, password in PASSWORDS.items():
            extra_args += ["--add-scram", "SCRAM-SHA-512=[name=%s,password=%s]" % (user, password)]
    else:
        settings.update({"listener.name.repl.ssl.client.auth": "required",
                         "super.users": "User:" + BROKER_DN})
    return keel_cluster(3, settings, listeners={"REPL": protocol}, extra_args=extra_args)


def client_security(certs, protocol):
    """A super user's connection to the REPL listener: admin over SASL_SSL, or the brokers'
    own certificate over SSL."""
    ca = os.path.join(certs, "ca.pem")
    if protocol == "SASL_SSL":
        return Security("SASL_SSL", ca=ca, mechanism="SCRAM-SHA-512", user="admin",
                        password=PASSWORDS["admin"])
    return Security("SSL", ca=ca, cert=os.path.join(certs, "broker.pem"),
                    key=os.path.join(certs, "broker.key"))


def tls_context(certs, cert=None):
    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    if cert:
        ctx.load_cert_chain(os.path.join(certs, cert + ".pem"), os.path.join(certs, cert + ".key"))
    return ctx


def repl_conn(certs, protocol, b, who):
    """A raw connection to `b`'s REPL listener as `who`: a SASL user (PLAIN) over SASL_SSL, the
    certs fixture's certificate of that name over SSL."""
    if protocol == "SASL_SSL":
        return w.sasl_plain_login(b.listener_bootstrap("REPL"), who, PASSWORDS[who],
                                  tls_context(certs))
    return w.Conn(b.listener_bootstrap("REPL"), ssl_context=tls_context(certs, who))


def topic_id_of(certs, protocol, b, topic):
    with repl_conn(certs, protocol, b, "broker") as c:
        body = c.call(3, 12, w.metadata_v12_body([topic]), flexible=True)
    return w.parse_metadata_v12_response(body)["topics"][topic]["topic_id"]


def replica_fetch_as(certs, protocol, b, who, topic_id, offset, replica_id, replica_epoch):
    """A follower's Fetch v15 to `b`'s REPL listener as `who` -> the partition's (error code,
    high watermark)."""
    with repl_conn(certs, protocol, b, who) as c:
        body = c.call(1, 15, w.fetch_v15_body(topic_id, 0, offset, replica_id, replica_epoch),
                      flexible=True)
    err, parts = w.parse_fetch_v15_response(body)
    assert err == 0, err
    p = parts[(topic_id, 0)]
    return p["error_code"], p["high_watermark"]


def broker_epoch(b):
    text = urllib.request.urlopen(b.admin_url + "/metrics", timeout=10).read().decode()
    return int(re.search(r"^keel_broker_epoch (\d+)$", text, re.M).group(1))


def consume(conf, topic, partitions, n, isolation="read_committed"):
    c = Consumer(dict(conf, **{"group.id": "checker", "enable.auto.commit": False,
                               "isolation.level": isolation}))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    return got


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SSL"])
def test_replication_and_markers_over_a_secured_inter_broker_listener(keel_cluster, certs,
                                                                      protocol):
    cluster = cluster_for(keel_cluster, certs, protocol)
    sec = client_security(certs, protocol)
    conf = sec.ck(",".join(b.listener_bootstrap("REPL") for b in cluster.brokers))
    admin = AdminClient(conf)
    # --add-scram writes the users once a node serves: wait until the admin logs in.
    wait_until(lambda: admin.list_topics(timeout=5).brokers, timeout_s=30,
               msg="the super user's first login")

    # Replication: three replicas per partition, acks=all.
    topic = "secured-%s" % protocol.lower()
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)

    def full_isr():
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        return t if t and t.partitions and all(len(p.isrs) == 3 for p in t.partitions.values()) \
            else None
    md = wait_until(full_isr, timeout_s=30, msg="full ISRs")
    assert sorted({p.leader for p in md.partitions.values()}) == [1, 2, 3], md.partitions
    p = Producer(dict(conf, **{"acks": "all", "message.timeout.ms": 30000}))
    for i in range(60):
        p.produce(topic, key=b"k%d" % i, value=b"v%d-%s" % (i, protocol.encode()), partition=i % 3)
    assert p.flush(45) == 0
    got = consume(conf, topic, 3, 60)
    assert sorted((k, v) for _, _, k, v in got) == sorted(
        (b"k%d" % i, b"v%d-%s" % (i, protocol.encode())) for i in range(60))
    assert {part: sorted(o for pp, o, _, _ in got if pp == part) for part in range(3)} == {
        part: list(range(20)) for part in range(3)}

    # Transactions over partitions led by all three brokers: the coordinator's markers reach
    # the other two over the inter-broker listener, or read_committed would see nothing.
    txn = Producer(dict(conf, **{"transactional.id": "tx-" + protocol, "acks": "all"}))
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(6):
        txn.produce(topic, key=b"aborted%d" % i, value=b"no", partition=i % 3)
    txn.abort_transaction(30)
    txn.begin_transaction()
    for i in range(6):
        txn.produce(topic, key=b"t%d" % i, value=b"yes", partition=i % 3)
    txn.commit_transaction(30)
    got = consume(conf, topic, 3, 66)
    txn_keys = sorted(k for _, _, k, _ in got if not k.startswith(b"k"))
    assert txn_keys == [b"t%d" % i for i in range(6)], got[-10:]

    # A follower's fetch from a principal without CLUSTER_ACTION changes nothing.
    victim = "victim-%s" % protocol.lower()
    admin.create_topics([NewTopic(victim, 1, replica_assignment=[[1, 2]])])[victim].result(30)
    wait_until(lambda: (lambda t: t and t.partitions and t.partitions[0].leader == 1
                        and sorted(t.partitions[0].isrs) == [1, 2])(
        admin.list_topics(victim, timeout=10).topics.get(victim)), timeout_s=30,
        msg="victim led by 1 with ISR [1, 2]")
    leader, follower = cluster.node(1), cluster.node(2)
    topic_id = topic_id_of(certs, protocol, leader, victim)
    epoch = broker_epoch(follower)
    p = Producer(dict(sec.ck(leader.listener_bootstrap("REPL")), acks="all"))
    for i in range(5):
        p.produce(victim, key=b"c%d" % i, value=b"committed", partition=0)
    assert p.flush(30) == 0
    watcher = Consumer(dict(sec.ck(leader.listener_bootstrap("REPL")), **{"group.id": "w"}))

    def high():
        return watcher.get_watermark_offsets(TopicPartition(victim, 0), timeout=10)[1]
    assert high() == 5
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        p = Producer(dict(sec.ck(leader.listener_bootstrap("REPL")), acks=1))
        for i in range(3):
            p.produce(victim, key=b"u%d" % i, value=b"uncommitted", partition=0)
        assert p.flush(30) == 0
        assert high() == 5  # the stopped follower holds the high watermark back

        stranger = "alice" if protocol == "SASL_SSL" else "client"
        err, _ = replica_fetch_as(certs, protocol, leader, stranger, topic_id, 8, 2, epoch)
        assert err == TOPIC_AUTHORIZATION_FAILED
        assert high() == 5, "a refused follower fetch moved the high watermark"

        # The control: the same fetch from a broker's principal is a follower's, and moves it.
        err, _ = replica_fetch_as(certs, protocol, leader, "broker", topic_id, 8, 2, epoch)
        assert err == 0
        wait_until(lambda: high() == 8, timeout_s=10, msg="the high watermark at 8")
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    watcher.close()
    got = consume(sec.ck(leader.listener_bootstrap("REPL")), victim, 1, 8)
    assert [(o, k) for _, o, k, _ in got] == [(i, b"c%d" % i) for i in range(5)] + [
        (5 + i, b"u%d" % i) for i in range(3)]


def test_a_broker_with_a_wrong_inter_broker_password_does_not_replicate(keel_cluster, certs):
    """The fetchers really log in: with the wrong password in every broker's JAAS entry, no
    follower fetches (each broker says why), and the ISRs shrink to their leaders."""
    settings = {
        "inter.broker.listener.name": "REPL",
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.repl.scram-sha-512.sasl.jaas.config": SCRAM_LOGIN.replace(
            PASSWORDS["broker"], "not-the-password"),
    }
    extra_args = ["--add-scram", "SCRAM-SHA-512=[name=broker,password=%s]" % PASSWORDS["broker"]]
    cluster = keel_cluster(3, settings, listeners={"REPL": "SASL_SSL"}, extra_args=extra_args)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = "unreplicated"
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    md = wait_until(lambda: (lambda t: t if t and t.partitions and all(
        len(p.isrs) == 1 for p in t.partitions.values()) else None)(
        admin.list_topics(topic, timeout=10).topics.get(topic)), timeout_s=30,
        msg="ISRs shrunk to their leaders")
    assert all(p.isrs == [p.leader] for p in md.partitions.values()), md.partitions
    for b in cluster.brokers:
        log = b.log_text()
        assert "replica fetcher cannot log in to the leader" in log, b.log_tail()
        assert "SASL_AUTHENTICATION_FAILED" in log or "SaslAuthenticationFailed" in log, \
            b.log_tail()
        assert "not-the-password" not in log.split("=====")[-1].split("\n", 1)[1]
