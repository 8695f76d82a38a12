"""SSL and SASL_SSL listeners (issue 19): rustls on the broker, certificates made at test time
by conftest's `certs`. Here: a client certificate on a listener with `ssl.client.auth=required`
is the principal `User:<subject DN>` the authorizer checks; plaintext or garbage sent to a TLS
port and a handshake left half done close the connection, and the broker goes on serving; the
admin CLI over SASL_SSL. Every client over every protocol and SASL mechanism, and their failed
logins and missing client certificates, are in test_security_matrix.py."""

import os
import socket
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kwire as w
from conftest import CLIENT_DN, _finish_broker, _make_broker, unique
from kutil import STANDARD_AUTHORIZER


@pytest.fixture(scope="module")
def tls_keel(request, certs):
    settings = {
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.server.authentication.timeout.ms": 1500,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS;User:admin",
    }
    b = _make_broker(request, settings, name="keel-tls",
                     listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL", "MTLS": "SSL"})
    try:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        for fut in a.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                b"admin-pw")]).values():
            fut.result(timeout=30)
        yield b
    finally:
        _finish_broker(b, getattr(request.session, "_keel_failed", False))


def ssl_conf(b, certs, listener="SSL", **extra):
    conf = {"bootstrap.servers": b.listener_bootstrap(listener), "security.protocol": "SSL",
            "ssl.ca.location": os.path.join(certs, "ca.pem")}
    conf.update(extra)
    return conf


def create_topic(b):
    topic = unique("tls")
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    for fut in a.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(timeout=30)
    return topic


def ck_round_trip(conf, topic, n=5):
    """Produces n records with headers and reads them back: [(offset, key, value, headers)]."""
    reports = []
    p = Producer(dict(conf, **{"message.timeout.ms": 10000}))
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("i", str(i).encode())],
                  partition=0, on_delivery=lambda e, m: reports.append(e))
    p.flush(20)
    assert reports == [None] * n
    c = Consumer(dict(conf, **{"group.id": unique("g"), "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append((m.offset(), m.key(), m.value(), m.headers()))
    c.close()
    return got


def want(n=5):
    return [(i, b"k%d" % i, b"v%d" % i, [("i", str(i).encode())]) for i in range(n)]


def test_client_certificate_is_the_principal(tls_keel, certs):
    allowed, other = create_topic(tls_keel), create_topic(tls_keel)
    a = AdminClient({"bootstrap.servers": tls_keel.bootstrap})
    for fut in a.create_acls([
            AclBinding(ResourceType.TOPIC, allowed, ResourcePatternType.LITERAL,
                       "User:" + CLIENT_DN, "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ)]
            + [AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL,
                          "User:" + CLIENT_DN, "*", AclOperation.READ,
                          AclPermissionType.ALLOW)]).values():
        fut.result(timeout=30)
    mtls = ssl_conf(tls_keel, certs, "MTLS", **{
        "ssl.certificate.location": os.path.join(certs, "client.pem"),
        "ssl.key.location": os.path.join(certs, "client.key")})
    assert ck_round_trip(mtls, allowed, n=2) == want(2)
    reports = []
    p = Producer(dict(mtls, **{"message.timeout.ms": 8000, "retries": 0}))
    p.produce(other, value=b"x", partition=0, on_delivery=lambda e, m: reports.append(e))
    p.flush(20)
    assert [e.name() for e in reports] == ["TOPIC_AUTHORIZATION_FAILED"]


def test_hostile_input_on_a_tls_port(tls_keel, certs):
    port = tls_keel.listener_port("SSL")
    # Plaintext Kafka on a TLS port: no answer, the connection closes.
    c = w.Conn(tls_keel.listener_bootstrap("SSL"))
    c.send(w.request(18, 0, 1, b""))
    assert c.wait_closed(5.0)
    c.close()
    # Garbage that looks like a TLS record header.
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"\x16\x03\x01\xff\xff" + os.urandom(64))
    s.settimeout(5)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    assert len(data) < 64, data  # at most a TLS alert, then closed
    s.close()
    # A handshake left half done: closed after sasl.server.authentication.timeout.ms.
    started = time.monotonic()
    c = w.Conn(tls_keel.listener_bootstrap("SSL"))
    c.send(b"\x16\x03\x01\x00\x80")  # a record header promising 128 bytes that never come
    assert c.wait_closed(6.0)
    assert 1.0 <= time.monotonic() - started <= 5.0
    c.close()
    # And the broker goes on serving over TLS.
    topic = create_topic(tls_keel)
    assert ck_round_trip(ssl_conf(tls_keel, certs), topic, n=1) == want(1)


def test_an_answer_larger_than_the_socket_buffers_arrives_whole(tls_keel, certs):
    """Under TLS a write ends with rustls holding the records the socket did not take; the
    broker must flush them, not leave them for the connection's next answer. A Fetch answer of
    about 24 MiB to a client that reads nothing for a while (the socket buffers fill: the
    broker's write stops part way) must still arrive whole once the client reads, with no
    other request sent."""
    import ssl
    topic = create_topic(tls_keel)
    p = Producer({"bootstrap.servers": tls_keel.bootstrap, "linger.ms": 50,
                  "batch.size": 1 << 20})
    value = os.urandom(1000)
    n = 24 * 1024
    for i in range(n):
        p.produce(topic, key=b"%d" % i, value=value)
        if i % 2000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    max_bytes = 64 << 20
    part = (w.i32(0) + w.i32(-1) + w.i64(0) + w.i32(-1) + w.i64(-1) + w.i32(max_bytes) + w.TAGS)
    body = (w.i32(-1) + w.i32(100) + w.i32(1) + w.i32(max_bytes) + w.i8(0) + w.i32(0)
            + w.i32(-1) + w.compact_array([w.compact_string(topic) + w.compact_array([part])
                                           + w.TAGS])
            + w.compact_array([]) + w.compact_string("") + w.TAGS)
    with w.Conn(tls_keel.listener_bootstrap("SSL"), timeout=15.0, ssl_context=ctx) as c:
        c.send(w.request(1, 12, 99, body, flexible=True))
        time.sleep(2.0)  # read nothing: the broker's write fills the buffers and stops
        payload = c.recv_frame()
    assert payload is not None, "the broker closed the connection"
    r = w.Reader(payload)
    assert r.i32() == 99
    r.skip_tags()
    assert len(payload) > 20 * 1024 * 1024, len(payload)
    # The answer ends with the last record's value, its empty header count and the partition's,
    # topic's and answer's empty tagged fields.
    assert payload.endswith(value + b"\x00" * 4), "the answer's tail is not the last record"


def test_keel_cli_over_sasl_ssl(tls_keel, certs, tmp_path):
    """The admin CLI with Kafka's --command-config: SASL_SSL with SCRAM-SHA-512, the password
    from a variable."""
    from conftest import KEEL_BIN
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        "username=\"admin\";\nssl.truststore.location=%s\n" % os.path.join(certs, "ca.pem"))
    topic = unique("cli")

    def keel(*args, password="admin-pw"):
        return subprocess.run(
            [KEEL_BIN, *args, "-b", tls_keel.listener_bootstrap("SASL_SSL"),
             "--command-config", str(props), "--sasl-password-env", "ADMIN_PW"],
            capture_output=True, text=True, timeout=60,
            env=dict(os.environ, ADMIN_PW=password))

    created = keel("topic", "create", topic, "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = keel("topic", "list")
    assert listed.returncode == 0 and topic in listed.stdout.split(), listed
    refused = keel("topic", "list", password="wrong")
    assert refused.returncode == 1
    assert "SASL login of admin failed (error 58)" in refused.stderr, refused.stderr


def test_principal_mapping_rules_name_the_certificate_principal(request, certs):
    """`ssl.principal.mapping.rules` per listener (Kafka's SslPrincipalMapper): on MAPPED the
    client certificate's DN, CN=client-one,OU=Tests,O=Keel, maps to `client-one@tests`, and an
    ACL on User:client-one@tests is what authorizes it (one on the DN no longer applies); on
    NOMATCH no rule applies to the DN, and the connection is refused."""
    from kutil import end_offsets
    settings = {
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "ssl.client.auth": "required",
        "listener.name.mapped.ssl.principal.mapping.rules":
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,DEFAULT",
        "listener.name.nomatch.ssl.principal.mapping.rules": "RULE:^CN=nobody,.*$/nobody/",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:ANONYMOUS",
    }
    b = _make_broker(request, settings, name="keel-tls-mapping",
                     listeners={"MAPPED": "SSL", "NOMATCH": "SSL"})
    try:
        mapped, by_dn = create_topic(b), create_topic(b)
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        short = "User:client-one@tests"
        for fut in a.create_acls(
                [AclBinding(ResourceType.TOPIC, mapped, ResourcePatternType.LITERAL, short, "*",
                            op, AclPermissionType.ALLOW)
                 for op in (AclOperation.WRITE, AclOperation.READ)]
                + [AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, short, "*",
                              AclOperation.READ, AclPermissionType.ALLOW),
                   AclBinding(ResourceType.TOPIC, by_dn, ResourcePatternType.LITERAL,
                              "User:" + CLIENT_DN, "*", AclOperation.WRITE,
                              AclPermissionType.ALLOW)]).values():
            fut.result(timeout=30)
        client_cert = {"ssl.certificate.location": os.path.join(certs, "client.pem"),
                       "ssl.key.location": os.path.join(certs, "client.key")}
        conf = ssl_conf(b, certs, "MAPPED", **client_cert)
        assert ck_round_trip(conf, mapped, n=2) == want(2)
        reports = []
        p = Producer(dict(conf, **{"message.timeout.ms": 8000, "retries": 0}))
        p.produce(by_dn, value=b"x", partition=0, on_delivery=lambda e, m: reports.append(e))
        p.flush(20)
        assert [e.name() for e in reports] == ["TOPIC_AUTHORIZATION_FAILED"]

        errors, reports = [], []
        p = Producer(dict(ssl_conf(b, certs, "NOMATCH", **client_cert),
                          **{"error_cb": lambda e: errors.append(e), "linger.ms": 0}))
        p.produce(mapped, value=b"must-not-be-written", partition=0,
                  on_delivery=lambda e, m: reports.append(e))
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            p.poll(0.1)
        p.purge()
        assert p.flush(5) == 0
        assert errors and len(reports) == 1 and reports[0] is not None, (errors, reports)
        assert end_offsets(b.bootstrap, mapped, [0]) == {0: 2}
        assert "No rules apply to %s" % CLIENT_DN in b.log_text()
    finally:
        _finish_broker(b, getattr(request.session, "_keel_failed", False))


def test_a_bad_principal_mapping_rule_stops_the_start(tmp_path):
    """A rule Kafka refuses stops the start with an error that names it."""
    from conftest import KEEL_BIN
    bad = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U"
    p = subprocess.run(
        [KEEL_BIN, "--data-dir", str(tmp_path / "data"), "--admin", "off",
         "--set", "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
         "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL",
         "--set", "ssl.keystore.location=/nonexistent.pem",
         "--set", "listener.name.ssl.ssl.principal.mapping.rules=DEFAULT," + bad],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("KEEL_")})
    assert p.returncode == 2, p
    assert "ssl.principal.mapping.rules" in p.stderr and bad in p.stderr, p.stderr
