"""SSL and SASL_SSL listeners (issue 19): rustls on the broker, certificates made at test time
with the openssl CLI (a CA, the broker's certificate for 127.0.0.1, a client certificate; no
key is committed). confluent-kafka, kafka-python and kcat produce and consume over SSL;
confluent-kafka over SASL_SSL with SCRAM-SHA-512 and PLAIN; a client certificate on a
listener with `ssl.client.auth=required` is the principal `User:<subject DN>` the authorizer
checks; plaintext or garbage sent to a TLS port, a missing client certificate and a handshake
left half done close the connection, and the broker goes on serving."""

import os
import shutil
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
from conftest import _finish_broker, _make_broker, unique

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CLIENT_DN = "CN=client-one,OU=Tests,O=Keel"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("certs"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=Keel Test CA", cwd=d)
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    with open(os.path.join(d, "client.cnf"), "w") as f:  # X.509 v3, as webpki requires
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for name, subj, ext in [("broker", "/CN=localhost", ["-extfile", "san.cnf"]),
                            ("client", "/O=Keel/OU=Tests/CN=client-one",
                             ["-extfile", "client.cnf"])]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
                name + ".csr", "-subj", subj, cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", name + ".pem", "-days", "2", *ext, cwd=d)
    # Kafka's PEM keystore: the key and the certificate chain in one file.
    with open(os.path.join(d, "keystore.pem"), "w") as out:
        for part in ("broker.key", "broker.pem"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    return d


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


def test_confluent_kafka_over_ssl(tls_keel, certs):
    topic = create_topic(tls_keel)
    assert ck_round_trip(ssl_conf(tls_keel, certs), topic) == want()


@pytest.mark.parametrize("mechanism,user,password", [("SCRAM-SHA-512", "admin", "admin-pw"),
                                                     ("PLAIN", "admin", "admin-pw")])
def test_confluent_kafka_over_sasl_ssl(tls_keel, certs, mechanism, user, password):
    topic = create_topic(tls_keel)
    conf = ssl_conf(tls_keel, certs, "SASL_SSL", **{
        "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
        "sasl.username": user, "sasl.password": password})
    assert ck_round_trip(conf, topic) == want()


def test_kafka_python_over_ssl(tls_keel, certs):
    from kafka import KafkaConsumer, KafkaProducer
    topic = create_topic(tls_keel)
    ssl = dict(bootstrap_servers=tls_keel.listener_bootstrap("SSL"), security_protocol="SSL",
               ssl_cafile=os.path.join(certs, "ca.pem"))
    p = KafkaProducer(**ssl)
    offsets = [p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0).get(20).offset
               for i in range(3)]
    p.close()
    assert offsets == [0, 1, 2]
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **ssl)
    got = [(m.offset, m.key, m.value) for m in c]
    c.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(3)]


def test_kcat_over_ssl(tls_keel, certs):
    topic = create_topic(tls_keel)
    ssl = ["-b", tls_keel.listener_bootstrap("SSL"), "-X", "security.protocol=ssl",
           "-X", "ssl.ca.location=" + os.path.join(certs, "ca.pem")]
    subprocess.run([KCAT, *ssl, "-P", "-t", topic, "-p", "0", "-K:"], input=b"a:1\nb:2\n",
                   check=True, timeout=60, capture_output=True)
    out = subprocess.run([KCAT, *ssl, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          "-f", "%o %k %s\n"], check=True, timeout=60, capture_output=True)
    assert out.stdout.decode().splitlines() == ["0 a 1", "1 b 2"]


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
    # Without a certificate, the required listener ends the handshake.
    errors = []
    p = Producer(dict(ssl_conf(tls_keel, certs, "MTLS"),
                      **{"message.timeout.ms": 4000, "error_cb": lambda e: errors.append(e)}))
    p.produce(allowed, value=b"y", partition=0)
    p.flush(10)
    assert errors, "a handshake without a client certificate must fail"


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
