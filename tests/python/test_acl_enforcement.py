"""ACL enforcement (issue 19): a broker with Kafka's StandardAuthorizer
(`authorizer.class.name`), users logging in with SASL/PLAIN, ACLs made with confluent-kafka's
AdminClient. The matrix: a read-only user reads but cannot produce; prefixed ACLs; DENY beats
ALLOW; a super user does everything; Metadata lists only the topics a user may DESCRIBE and
reports its real `authorized_operations`; an unauthorized acks=0 produce closes the connection;
`allow.everyone.if.no.acl.found` both ways. PLAINTEXT (`User:ANONYMOUS`) is a super user here
only to set users and ACLs up; every principal under test logs in on the SASL listener."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kwire as w
from conftest import unique

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SASL = "SASL_PLAINTEXT"
PASSWORD = "pw-%s"
TOPIC_AUTHORIZATION_FAILED = 29
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def start(keel_factory, **extra):
    settings = {"authorizer.class.name": STANDARD_AUTHORIZER,
                "super.users": "User:admin;User:ANONYMOUS",
                "sasl.enabled.mechanisms": "PLAIN"}
    settings.update(extra)
    b = keel_factory(settings, listeners={SASL: "SASL_PLAINTEXT"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    users = ["admin", "reader", "writer", "nobody"]
    changes = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                   4096), (PASSWORD % u).encode())
               for u in users]
    for fut in admin.alter_user_scram_credentials(changes).values():
        fut.result(timeout=30)
    return b, admin


def create_topics(admin, *names):
    for fut in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        fut.result(timeout=30)


def allow(admin, *bindings):
    for fut in admin.create_acls(list(bindings)).values():
        fut.result(timeout=30)


def acl(rtype, name, pattern, user, op, perm=ALLOW):
    return AclBinding(rtype, name, pattern, "User:" + user, "*", op, perm)


def conf(b, user):
    return {"bootstrap.servers": b.listener_bootstrap(SASL), "security.protocol": SASL,
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORD % user}


def produce(b, user, topic, records, **extra):
    """[(error name or None, offset)] per record, from the delivery reports."""
    results = []
    settings = dict(conf(b, user), **{"message.timeout.ms": 8000, "retries": 0})
    settings.update(extra)
    p = Producer(settings)
    for k, v in records:
        p.produce(topic, key=k, value=v, partition=0,
                  on_delivery=lambda err, m: results.append(
                      (err.name() if err else None, None if err else m.offset())))
    try:
        p.flush(20)
    except KafkaException as e:  # a fatal error (an idempotent producer refused its id)
        results.append(("fatal " + e.args[0].name(), None))
    return results


def consume(b, user, topic, group, n, timeout_s=20.0):
    c = Consumer(dict(conf(b, user), **{"group.id": group, "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False}))
    c.subscribe([topic])
    got, errors = [], []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            errors.append(m.error().name())
            if m.error().fatal() or len(errors) > 20:
                break
            continue
        got.append((m.offset(), m.key(), m.value()))
    if got:
        c.commit(asynchronous=False)
    c.close()
    return got, errors


def test_read_only_user_reads_and_cannot_produce(keel_factory):
    b, admin = start(keel_factory)
    topic = unique("ro")
    create_topics(admin, topic)
    allow(admin, acl(ResourceType.TOPIC, topic, LIT, "reader", AclOperation.READ),
          acl(ResourceType.GROUP, "readers", LIT, "reader", AclOperation.READ))
    records = [(b"k%d" % i, b"v%d" % i) for i in range(3)]
    assert produce(b, "admin", topic, records) == [(None, 0), (None, 1), (None, 2)]

    assert produce(b, "reader", topic, [(b"x", b"y")]) == [("TOPIC_AUTHORIZATION_FAILED", None)]
    got, errors = consume(b, "reader", topic, "readers", 3)
    assert got == [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (2, b"k2", b"v2")], errors
    # Another group: READ on the topic is not enough.
    got, errors = consume(b, "reader", topic, "not-mine", 1, timeout_s=6)
    assert got == [] and "GROUP_AUTHORIZATION_FAILED" in errors, errors
    # The end offset is still 3: nothing the reader sent was written.
    assert produce(b, "admin", topic, [(b"k3", b"v3")]) == [(None, 3)]


def test_prefixed_acls_and_deny_beats_allow(keel_factory):
    b, admin = start(keel_factory)
    ok, secret, other = "w-" + unique("a"), "w-secret", unique("x")
    create_topics(admin, ok, secret, other)
    allow(admin, acl(ResourceType.TOPIC, "w-", PRE, "writer", AclOperation.WRITE),
          acl(ResourceType.TOPIC, "w-secret", LIT, "writer", AclOperation.WRITE, DENY))
    assert produce(b, "writer", ok, [(b"a", b"1"), (b"b", b"2")]) == [(None, 0), (None, 1)]
    assert produce(b, "writer", secret, [(b"c", b"3")]) == [("TOPIC_AUTHORIZATION_FAILED", None)]
    assert produce(b, "writer", other, [(b"d", b"4")]) == [("TOPIC_AUTHORIZATION_FAILED", None)]
    # A DENY for every user beats the writer's own ALLOW too.
    allow(admin, acl(ResourceType.TOPIC, ok, LIT, "*", AclOperation.ALL, DENY))
    assert produce(b, "writer", ok, [(b"e", b"5")]) == [("TOPIC_AUTHORIZATION_FAILED", None)]


def test_super_user_does_everything_and_operations_are_real(keel_factory):
    b, admin = start(keel_factory)
    topic = unique("su")
    sasl_admin = AdminClient(conf(b, "admin"))
    for fut in sasl_admin.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(timeout=30)
    assert produce(b, "admin", topic, [(b"k", b"v")]) == [(None, 0)]
    got, errors = consume(b, "admin", topic, "admins", 1)
    assert got == [(0, b"k", b"v")], errors

    allow(admin, acl(ResourceType.TOPIC, topic, LIT, "reader", AclOperation.READ))
    clients = {u: AdminClient(conf(b, u)) for u in ("admin", "reader")}  # alive until done
    described = {u: a.describe_topics(TopicCollection([topic]),
                                      include_authorized_operations=True)[topic].result(timeout=30)
                 for u, a in clients.items()}
    ops = {u: sorted(o.name for o in d.authorized_operations) for u, d in described.items()}
    assert ops["reader"] == ["DESCRIBE", "READ"]  # READ implies DESCRIBE
    assert ops["admin"] == sorted(["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                                   "DESCRIBE_CONFIGS", "ALTER_CONFIGS"])
    # Cluster operations: a super user has all of them, the reader none.
    cluster = clients["reader"].describe_cluster(
        include_authorized_operations=True).result(timeout=30)
    assert not cluster.authorized_operations
    cluster = clients["admin"].describe_cluster(
        include_authorized_operations=True).result(timeout=30)
    assert sorted(o.name for o in cluster.authorized_operations) == sorted(
        ["CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
         "ALTER", "DESCRIBE"])


def test_metadata_lists_only_topics_the_user_may_describe(keel_factory):
    b, admin = start(keel_factory)
    seen, hidden = unique("seen"), unique("hidden")
    create_topics(admin, seen, hidden)
    allow(admin, acl(ResourceType.TOPIC, seen, LIT, "reader", AclOperation.DESCRIBE))
    reader = AdminClient(conf(b, "reader"))
    topics = reader.list_topics(timeout=20).topics
    assert seen in topics and hidden not in topics
    # Asked by name: TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not.
    md = reader.list_topics(topic=hidden, timeout=20).topics[hidden]
    assert md.error is not None and md.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # And nobody, with no ACLs at all, sees none of them.
    names = set(AdminClient(conf(b, "nobody")).list_topics(timeout=20).topics)
    assert not names & {seen, hidden}


def test_an_unauthorized_acks0_produce_closes_the_connection(keel_factory):
    b, admin = start(keel_factory)
    topic = unique("acks0")
    create_topics(admin, topic)
    batch = w.record_batch([(b"k", b"v", [], int(time.time() * 1000))],
                           int(time.time() * 1000))
    # acks=1: the partition's error; the connection stays.
    c = w.sasl_plain_login(b.listener_bootstrap(SASL), "reader", PASSWORD % "reader")
    body = c.call(0, 3, w.produce_v3_body(topic, 0, batch, acks=1))
    assert w.parse_produce_v3_response(body) == {(topic, 0): (TOPIC_AUTHORIZATION_FAILED, -1)}
    # acks=0: nothing can carry the error, so the connection closes (Kafka).
    c.send(w.request(0, 3, 8, w.produce_v3_body(topic, 0, batch, acks=0)))
    assert c.wait_closed(5.0)
    c.close()
    # Nothing was written.
    assert produce(b, "admin", topic, [(b"k", b"v")]) == [(None, 0)]


@pytest.mark.parametrize("allow_everyone", [False, True])
def test_allow_everyone_if_no_acl_found(keel_factory, allow_everyone):
    b, admin = start(keel_factory, **{"allow.everyone.if.no.acl.found": str(allow_everyone).lower()})
    free, guarded = unique("free"), unique("guarded")
    create_topics(admin, free, guarded)
    allow(admin, acl(ResourceType.TOPIC, guarded, LIT, "writer", AclOperation.WRITE))
    want = (None, 0) if allow_everyone else ("TOPIC_AUTHORIZATION_FAILED", None)
    assert produce(b, "nobody", free, [(b"k", b"v")]) == [want]
    # An ACL names the guarded topic: only it decides, whatever the setting.
    assert produce(b, "nobody", guarded, [(b"k", b"v")]) == [("TOPIC_AUTHORIZATION_FAILED", None)]
    assert produce(b, "writer", guarded, [(b"k", b"v")]) == [(None, 0)]


def test_an_idempotent_producer_needs_write_on_some_topic(keel_factory):
    """KIP-679: InitProducerId without a transactional id needs IDEMPOTENT_WRITE on the cluster
    or WRITE on any topic; a prefixed ALLOW counts."""
    b, admin = start(keel_factory)
    topic = "w-" + unique("idem")
    create_topics(admin, topic)
    allow(admin, acl(ResourceType.TOPIC, "w-", PRE, "writer", AclOperation.WRITE),
          acl(ResourceType.TOPIC, topic, LIT, "reader", AclOperation.READ))
    assert produce(b, "writer", topic, [(b"a", b"1"), (b"b", b"2")],
                   **{"enable.idempotence": True, "retries": 3}) == [(None, 0), (None, 1)]
    results = produce(b, "reader", topic, [(b"c", b"3")], **{"enable.idempotence": True, "retries": 3})
    assert ("fatal CLUSTER_AUTHORIZATION_FAILED", None) in results, results
    assert produce(b, "writer", topic, [(b"d", b"4")]) == [(None, 2)]
