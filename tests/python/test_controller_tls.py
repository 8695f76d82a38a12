"""The controller transport (issue 19): mutual TLS when the controller listener
(`controller.listener.names`) is mapped to SSL. A 3-node cluster elects, registers, creates a
replicated topic and serves it over it; a peer without a certificate, with one whose principal
is not a super user, or speaking plaintext is dropped before anything it sends is read. An
unmapped controller listener stops the start; an explicit PLAINTEXT one starts with a warning."""

import os
import socket
import ssl
import struct
import subprocess
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import CLIENT_DN, KEEL_BIN, free_port, unique
from kutil import wait_until

BROKER_PRINCIPAL = "User:CN=localhost"  # the certs fixture's broker certificate


def tls_settings(certs):
    return {
        "listener.name.controller.ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "listener.name.controller.ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "super.users": BROKER_PRINCIPAL,
    }


def controller_port(b):
    return int(b.settings["controller.listen"].rsplit(":", 1)[1])


def refused_lines(b):
    return [line for line in b.log_text().splitlines() if "controller connection refused" in line]


def intrude(port, context=None, payload=b""):
    """Connects (with TLS when `context`), sends a controller frame, and returns what came
    back before the peer closed (b"" when nothing did)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s = context.wrap_socket(raw, server_hostname="127.0.0.1") if context else raw
        frame = payload or b'{"Controller":{"Heartbeat":{"broker_id":9,"broker_epoch":1}}}'
        s.sendall(struct.pack(">I", len(frame)) + frame)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return got
            got += chunk
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        raw.close()


def test_a_cluster_runs_its_controller_traffic_over_mutual_tls(keel_cluster, certs):
    cluster = keel_cluster(3, tls_settings(certs), controller_protocol="SSL")
    for b in cluster.brokers:
        assert "controller_tls=true" in b.log_text(), b.log_tail()
        assert "the controller listener is PLAINTEXT" not in b.log_text()
    topic = unique("ctl-tls")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(30)
    md = wait_until(lambda: (lambda t: t if t and all(len(p.isrs) == 3 for p in t.partitions.values())
                             else None)(admin.list_topics(topic, timeout=10).topics.get(topic)),
                    timeout_s=30, msg="a 3-replica topic with full ISRs")
    assert sorted(md.partitions) == [0, 1]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("g"),
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got[m.key()] = m.value()
    c.close()
    assert got == {b"k%d" % i: b"v%d" % i for i in range(10)}

    port = controller_port(cluster.node(1))
    node = cluster.node(1)
    before = len(refused_lines(node))
    # Plaintext bytes on the TLS port: at most a TLS alert record (type 21), no answer.
    got = intrude(port)
    assert got == b"" or (got[0] == 21 and len(got) <= 7), got
    # TLS without a client certificate: the handshake fails.
    anonymous = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    assert intrude(port, anonymous) == b""
    # A certificate the CA signed, but not a super user's: dropped before its frame is read.
    stranger = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    stranger.load_cert_chain(os.path.join(certs, "client.pem"), os.path.join(certs, "client.key"))
    assert intrude(port, stranger) == b""
    lines = wait_until(lambda: (lambda ls: ls if len(ls) >= before + 3 else None)(
        refused_lines(node)), timeout_s=10, msg="three refusals logged")
    text = "\n".join(lines[before:])
    assert "TLS handshake failed" in text
    assert "User:%s is not a super user" % CLIENT_DN in text, text
    # The cluster still works after the intruders.
    assert admin.list_topics(topic, timeout=10).topics[topic].error is None


def run_keel(tmp_path, *settings):
    return subprocess.run(
        [KEEL_BIN, "--data-dir", str(tmp_path / "data"), "--admin", "off",
         "--listen", "127.0.0.1:%d" % free_port(),
         "--controller-listen", "127.0.0.1:%d" % free_port(), *settings],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("KEEL_")})


def test_an_unmapped_or_sasl_controller_listener_stops_the_start(tmp_path, certs):
    p = run_keel(tmp_path)
    assert p.returncode == 2, p
    assert "controller listener CONTROLLER" in p.stderr
    assert "listener.security.protocol.map" in p.stderr, p.stderr
    p = run_keel(tmp_path, "--set",
                 "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL")
    assert p.returncode == 2 and "SASL_SSL is not supported" in p.stderr, p.stderr
    # SSL needs super users: the controllers' certificates must map to one.
    p = run_keel(tmp_path, "--set",
                 "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
                 *[a for k, v in tls_settings(certs).items() if k != "super.users"
                   for a in ("--set", "%s=%s" % (k, v))])
    assert p.returncode == 2 and "super.users" in p.stderr, p.stderr


def test_an_explicit_plaintext_controller_listener_starts_with_a_warning(keel_factory):
    b = keel_factory({"controller.listen": "127.0.0.1:%d" % free_port()})
    assert "the controller listener is PLAINTEXT" in b.log_text()
