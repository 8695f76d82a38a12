"""The security matrix (issue 19): kafka-python, confluent-kafka (librdkafka) and kcat each
produce records with keys, values and headers and read them back over every security protocol
Keel serves: SSL (the broker's certificate only), mTLS (an SSL listener with
`ssl.client.auth=required`), SASL_PLAINTEXT and SASL_SSL, the last two with PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512. And each client fails as it should with a wrong password, and
without the certificate mTLS requires, writing nothing.

One broker serves the module, with StandardAuthorizer: each listener's principal may write and
read only the topics of its own prefix (User:ANONYMOUS "ssl-" on SSL, the client certificate's
User:<subject DN> "mtls-" on mTLS, the SASL user User:alice "sasl-"), so a round trip also
proves the connection got the principal it should. root, the super user (`--add-scram`), sets
up alice, the topics and the ACLs, and reads end offsets, over SASL_PLAINTEXT. Certificates are
made at test time (conftest's `certs`). Every wait is bounded."""

import logging
import os

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
from kafka.errors import KafkaTimeoutError

import kwire as w
from conftest import CLIENT_DN, _finish_broker, _make_broker, unique
from kutil import (STANDARD_AUTHORIZER, Security, ck_consume, ck_produce, ck_refused,
                   consume_all, kcat, kcat_headers, kcat_run, login_failed_text, producer,
                   records_for, wait_until)

CLIENTS = ["kafka-python", "confluent-kafka", "kcat"]
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL"]
# Listener name -> security protocol. MTLS is an SSL listener that requires client certificates.
LISTENERS = {"SSL": "SSL", "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
             "SASL_SSL": "SASL_SSL"}
# (listener, SASL mechanism or None): every way in.
CONNECTIONS = [("SSL", None), ("MTLS", None)] + [(l, m) for l in SASL_LISTENERS
                                                 for m in MECHANISMS]
USER, PASSWORD = "alice", "alice-pw"
ROOT, ROOT_PASSWORD = "root", "root-pw"
# Each listener's principal, and the topic prefix only that principal may write and read.
PRINCIPALS = {"SSL": ("User:ANONYMOUS", "ssl-"), "MTLS": ("User:" + CLIENT_DN, "mtls-"),
              "SASL_PLAINTEXT": ("User:" + USER, "sasl-"), "SASL_SSL": ("User:" + USER, "sasl-")}
FAILED_AUTH_DELAY_MS = 100
ROOT_SECURITY = Security("SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", user=ROOT,
                         password=ROOT_PASSWORD)


def case_id(listener, mechanism):
    return listener if mechanism is None else "%s-%s" % (listener, mechanism)


@pytest.fixture(scope="module")
def matrix_keel(request, certs):
    settings = {
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "connection.failed.authentication.delay.ms": FAILED_AUTH_DELAY_MS,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:" + ROOT,
    }
    b = _make_broker(request, settings, name="keel-security-matrix", listeners=LISTENERS,
                     extra_args=["--add-scram", "SCRAM-SHA-512=[name=%s,password=%s]"
                                 % (ROOT, ROOT_PASSWORD)])
    try:
        set_up_users_and_acls(b)
        yield b
    finally:
        _finish_broker(b, getattr(request.session, "_keel_failed", False))


def set_up_users_and_acls(b):
    """alice with both SCRAM credentials (PLAIN checks the SHA-256 one), and the ACLs of
    PRINCIPALS; every principal may READ every group (consumers that assign need no more)."""
    def root_logs_in():
        err, _, c = w.sasl_plain_try(b.listener_bootstrap("SASL_PLAINTEXT"), ROOT, ROOT_PASSWORD)
        c.close()
        return err == 0
    # --add-scram writes root to the metadata log after the broker starts serving.
    wait_until(root_logs_in, timeout_s=30, interval_s=0.2, msg="root's --add-scram login")
    a = root_admin(b)
    for fut in a.alter_user_scram_credentials([
            UserScramCredentialUpsertion(USER, ScramCredentialInfo(m, 4096), PASSWORD.encode())
            for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]).values():
        fut.result(timeout=30)
    acls = [AclBinding(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, principal, "*",
                       op, AclPermissionType.ALLOW)
            for principal, prefix in set(PRINCIPALS.values())
            for op in (AclOperation.WRITE, AclOperation.READ)]
    acls.append(AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:*", "*",
                           AclOperation.READ, AclPermissionType.ALLOW))
    for fut in a.create_acls(acls).values():
        fut.result(timeout=30)


def root_admin(b):
    return AdminClient(ROOT_SECURITY.ck(b.listener_bootstrap("SASL_PLAINTEXT")))


def create_topic(b, listener):
    """A one-partition topic that `listener`'s principal may write and read."""
    topic = unique(PRINCIPALS[listener][1] + "matrix")
    a = root_admin(b)  # kept alive until its futures are done
    for fut in a.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(timeout=30)
    return topic


def log_end_offset(b, topic):
    """Partition 0's log end offset, read by root."""
    c = Consumer(ROOT_SECURITY.ck(b.listener_bootstrap("SASL_PLAINTEXT"))
                 | {"group.id": unique("root-g")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
    finally:
        c.close()


def security(certs, listener, mechanism=None, password=PASSWORD, client_cert=True):
    """How a client comes in on `listener`: it trusts the test CA on a TLS listener, shows the
    client certificate on MTLS (unless client_cert is False) and logs in as alice on SASL."""
    protocol = LISTENERS[listener]
    ca = os.path.join(certs, "ca.pem") if protocol.endswith("SSL") else None
    if listener == "MTLS" and client_cert:
        return Security(protocol, ca=ca, cert=os.path.join(certs, "client.pem"),
                        key=os.path.join(certs, "client.key"))
    if mechanism is None:
        return Security(protocol, ca=ca)
    return Security(protocol, ca=ca, mechanism=mechanism, user=USER, password=password)


# -- round trips: one function per client -> (offsets the producer got, records read back) -----
def kafka_python_round_trip(b, bootstrap, sec, topic, records):
    kw = sec.kp()
    p = producer(bootstrap, **kw)
    try:
        futures = [p.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in records]
        p.flush(timeout=20)
        offsets = [f.get(timeout=20).offset for f in futures]
    finally:
        p.close(timeout=5)
    got = [(r.offset, r.key, r.value, list(r.headers))
           for r in consume_all(bootstrap, topic, [0], timeout_s=30, **kw)[0]]
    return offsets, got


def confluent_kafka_round_trip(b, bootstrap, sec, topic, records):
    conf = sec.ck(bootstrap)
    return ck_produce(conf, topic, records), ck_consume(conf, topic, len(records))


def kcat_round_trip(b, bootstrap, sec, topic, records):
    """kcat gives every record of one run the same -H headers, so each record is a run of its
    own; it prints no offsets when producing, so root reads the log end offset after each."""
    args = sec.kcat_args(bootstrap) + ["-X", "socket.timeout.ms=20000"]
    offsets = []
    for k, v, h in records:
        headers = [a for hk, hv in h for a in ("-H", "%s=%s" % (hk, hv.decode()))]
        kcat(*args, "-P", "-t", topic, "-p", "0", "-K:", *headers, input=k + b":" + v + b"\n")
        offsets.append(log_end_offset(b, topic) - 1)
    out = kcat(*args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
               "-f", "%o|%k|%s|%h\\n")
    got = []
    for line in out.splitlines():
        o, k, v, h = line.split("|")
        got.append((int(o), k.encode(), v.encode(), kcat_headers(h)))
    return offsets, got


ROUND_TRIPS = {"kafka-python": kafka_python_round_trip,
               "confluent-kafka": confluent_kafka_round_trip, "kcat": kcat_round_trip}


@pytest.mark.parametrize("listener,mechanism",
                         [pytest.param(l, m, id=case_id(l, m)) for l, m in CONNECTIONS])
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip(matrix_keel, certs, client, listener, mechanism):
    """Keys, values, headers and offsets read back exactly as written, and nothing more."""
    b = matrix_keel
    topic = create_topic(b, listener)
    records = records_for("%s-%s" % (client, listener), mechanism or "none")
    offsets, got = ROUND_TRIPS[client](b, b.listener_bootstrap(listener),
                                       security(certs, listener, mechanism), topic, records)
    assert offsets == list(range(len(records)))
    assert got == [(i, k, v, h) for i, (k, v, h) in enumerate(records)]
    assert log_end_offset(b, topic) == len(records)


def test_each_principal_is_confined_to_its_prefix(matrix_keel, certs):
    """What makes the round trips a check of principals: on a topic of another principal's
    prefix, each listener's principal gets TOPIC_AUTHORIZATION_FAILED."""
    b = matrix_keel
    for listener, other in [("SSL", "MTLS"), ("MTLS", "SASL_SSL"), ("SASL_SSL", "SSL"),
                            ("SASL_PLAINTEXT", "MTLS")]:
        topic = create_topic(b, other)
        reports = []
        mechanism = "SCRAM-SHA-256" if listener.startswith("SASL") else None
        p = Producer(security(certs, listener, mechanism).ck(b.listener_bootstrap(listener))
                     | {"message.timeout.ms": 8000})
        p.produce(topic, value=b"not-mine", partition=0,
                  on_delivery=lambda err, msg: reports.append(err and err.code()))
        assert p.flush(15) == 0
        assert reports == [KafkaError.TOPIC_AUTHORIZATION_FAILED], (listener, topic, reports)
        assert log_end_offset(b, topic) == 0


# -- refused connections: one function per client, which must see `want` and write nothing ------
class _Collect(logging.Handler):
    """Keeps the messages of the log records it is handed."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def kafka_python_is_refused(bootstrap, sec, topic, want):
    """kafka-python logs each failed connection, and its producer's constructor gives up
    bootstrapping with KafkaTimeoutError. The log has the broker's error unless its answer came
    in the same read as the broker's close: kafka-python 3.0.12's transport then logs "socket
    disconnected" and drops what it read (`_read_from_sock` aborts before `data_received`)."""
    log = _Collect()
    logging.getLogger("kafka").addHandler(log)
    try:
        with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
            producer(bootstrap, bootstrap_timeout_ms=1000, **sec.kp())
    finally:
        logging.getLogger("kafka").removeHandler(log)
    reported = "\n".join(log.messages)
    # Only a SaslAuthenticate error is an answer followed by a close (a TLS alert is not).
    dropped = sec.mechanism is not None and "socket disconnected" in reported
    assert want in reported or dropped, reported


def confluent_kafka_is_refused(bootstrap, sec, topic, want):
    errors = ck_refused(sec.ck(bootstrap), topic, want)
    assert want in errors, errors


def kcat_is_refused(bootstrap, sec, topic, want):
    """kcat logs the error and exits non-zero."""
    p = kcat_run(*sec.kcat_args(bootstrap), "-X", "message.timeout.ms=5000", "-P", "-t", topic,
                 "-p", "0", "-K:", input=b"k:must-not-be-written\n", timeout_s=30)
    stderr = p.stderr.decode()
    assert p.returncode != 0, "kcat wrote to %s: %s" % (topic, stderr[-2000:])
    assert want in stderr, stderr[-2000:]


IS_REFUSED = {"kafka-python": kafka_python_is_refused,
              "confluent-kafka": confluent_kafka_is_refused, "kcat": kcat_is_refused}


# confluent-kafka's wrong passwords on SASL_PLAINTEXT are test_sasl.py's
# test_failed_logins_with_confluent_kafka_produce_nothing (with unknown users too).
@pytest.mark.parametrize("client,listener,mechanism", [
    pytest.param(c, l, m, id="%s-%s" % (c, case_id(l, m)))
    for c in CLIENTS for l in SASL_LISTENERS for m in MECHANISMS
    if (c, l) != ("confluent-kafka", "SASL_PLAINTEXT")])
def test_wrong_password_is_refused(matrix_keel, certs, client, listener, mechanism):
    """The client sees the broker's SaslAuthenticate error text and writes nothing."""
    b = matrix_keel
    topic = create_topic(b, listener)
    IS_REFUSED[client](b.listener_bootstrap(listener),
                       security(certs, listener, mechanism, password="not-" + PASSWORD), topic,
                       login_failed_text(mechanism))
    assert log_end_offset(b, topic) == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_mtls_without_a_client_certificate_is_refused(matrix_keel, certs, client):
    """The listener requires a certificate: the broker ends the TLS 1.3 handshake with the
    certificate_required alert (116), and nothing is written."""
    b = matrix_keel
    topic = create_topic(b, "MTLS")
    want = "CERTIFICATE_REQUIRED" if client == "kafka-python" else "alert certificate required"
    IS_REFUSED[client](b.listener_bootstrap("MTLS"), security(certs, "MTLS", client_cert=False),
                       topic, want)
    assert log_end_offset(b, topic) == 0
