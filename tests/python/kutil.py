"""Client helpers shared by the tests: kafka-python (these helpers read with assign(), so every
consumer uses group_id=None with assign()), confluent-kafka and kcat, and `Security`, one
description of how a client connects (security protocol, CA, client certificate, SASL login)
rendered for each of them."""

import shutil
import subprocess
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from conftest import unique

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# The SaslAuthenticate error messages of a failed login: PlainSaslServer's text for PLAIN; for
# SCRAM, Kafka 3.x sends "Authentication failed during authentication due to invalid
# credentials with SASL mechanism <name>" (its SaslException path), keel this text of
# ScramSaslServer's, as issue 19 asks.
PLAIN_FAILED = "Authentication failed: Invalid username or password"
SCRAM_FAILED = "Authentication failed: Invalid user credentials"


def login_failed_text(mechanism):
    return PLAIN_FAILED if mechanism == "PLAIN" else SCRAM_FAILED


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


# -- security settings for every client ---------------------------------------------------------
class Security:
    """How a client connects: Kafka's security.protocol, the CA that signed the broker's
    certificate (SSL, SASL_SSL), a client certificate and key (mTLS) and a SASL login."""

    def __init__(self, protocol, ca=None, cert=None, key=None, mechanism=None, user=None,
                 password=None):
        assert protocol in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"), protocol
        assert (ca is not None) == protocol.endswith("SSL"), "a TLS protocol needs its CA"
        assert (mechanism is not None) == protocol.startswith("SASL"), "SASL needs a mechanism"
        self.protocol = protocol
        self.ca, self.cert, self.key = ca, cert, key
        self.mechanism, self.user, self.password = mechanism, user, password

    def librdkafka(self):
        """librdkafka's properties (confluent-kafka's config, kcat's -X)."""
        conf = {"security.protocol": self.protocol}
        if self.ca:
            conf["ssl.ca.location"] = self.ca
        if self.cert:
            conf.update({"ssl.certificate.location": self.cert, "ssl.key.location": self.key})
        if self.mechanism:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.user,
                         "sasl.password": self.password})
        return conf

    def ck(self, bootstrap):
        return dict(self.librdkafka(), **{"bootstrap.servers": bootstrap})

    def kp(self):
        """kafka-python's keyword arguments."""
        kw = {"security_protocol": self.protocol}
        if self.ca:
            kw["ssl_cafile"] = self.ca
        if self.cert:
            kw.update(ssl_certfile=self.cert, ssl_keyfile=self.key)
        if self.mechanism:
            kw.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.user,
                      sasl_plain_password=self.password)
        return kw

    def kcat_args(self, bootstrap):
        args = ["-b", bootstrap]
        for k, v in self.librdkafka().items():
            args += ["-X", "%s=%s" % (k, v)]
        return args


# -- confluent-kafka ----------------------------------------------------------------------------
def records_for(client, mechanism, n=5):
    """(key, value, headers) with distinct keys, values and headers."""
    tag = "%s-%s" % (client, mechanism)
    return [(("key-%d-%s" % (i, tag)).encode(), ("value-%d-%s-%s" % (i, tag, "x" * i)).encode(),
             [("idx", str(i).encode()), ("mech", mechanism.encode())]) for i in range(n)]


def ck_produce(conf, topic, records, timeout_s=20.0):
    """Produces `records` to partition 0 -> their offsets, sorted."""
    p = Producer(dict(conf, **{"linger.ms": 5, "message.timeout.ms": int(timeout_s * 1000)}))
    reports = []
    for key, value, headers in records:
        p.produce(topic, value=value, key=key, headers=headers, partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(timeout_s + 5) == 0, "records still queued"
    failed = [e.str() for e, _ in reports if e is not None]
    assert failed == [], "delivery failed: %s" % failed
    return sorted(o for _, o in reports)


def ck_consume(conf, topic, n, timeout_s=20.0):
    """The first n records of partition 0 -> [(offset, key, value, headers)]."""
    c = Consumer(dict(conf, **{"group.id": unique("ck-g"), "enable.auto.commit": False,
                               "fetch.wait.max.ms": 100}))
    try:
        c.assign([CkTopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n:
            assert time.monotonic() < deadline, "consumed only %d of %d" % (len(out), n)
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()


# -- kcat ---------------------------------------------------------------------------------------
def kcat_run(*args, input=None, timeout_s=60):
    """kcat with `args` -> the CompletedProcess (stdout and stderr as bytes)."""
    return subprocess.run([KCAT, *args], input=input, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout_s)


def kcat(*args, input=None, timeout_s=60):
    """kcat with `args`, which must succeed -> its stdout."""
    p = kcat_run(*args, input=input, timeout_s=timeout_s)
    assert p.returncode == 0, "kcat %s failed (%d): %s" % (args, p.returncode,
                                                          p.stderr.decode()[-2000:])
    return p.stdout.decode()


def kcat_headers(text):
    """kcat's %h (k1=v1,k2=v2) -> [(key, value bytes)]."""
    pairs = [kv.split("=", 1) for kv in text.split(",")] if text else []
    return [(k, v.encode()) for k, v in pairs]


def ck_refused(conf, topic, want):
    """A confluent-kafka producer with `conf` whose login fails: librdkafka reports the error
    through error_cb (again at each retry) and holds the record until it is purged, never
    written. Waits until an error containing `want` is reported. -> every error reported."""
    errors, reports = [], []
    p = Producer(dict(conf, **{"error_cb": lambda e: errors.append(e.str()), "linger.ms": 0}))
    p.produce(topic, key=b"k", value=b"must-not-be-written", partition=0,
              on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + 15
    while not any(want in e for e in errors) and time.monotonic() < deadline:
        p.poll(0.1)
    p.purge()
    assert p.flush(5) == 0
    assert [e.code() for e in reports] == [KafkaError._PURGE_QUEUE], reports
    return "\n".join(errors)

