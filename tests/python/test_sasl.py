"""SASL_PLAINTEXT listeners (issue 19, authentication): PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
against the real broker, with hand-encoded frames for what clients never send (the round trips
of every client and mechanism are in test_security_matrix.py): Kafka's error codes and texts
for a failed login (58, after connection.failed.authentication.delay.ms, then a close),
ApiVersions answered and every other request dropped before authentication, SaslHandshake for
a mechanism that is not enabled (33) and SaslAuthenticate before it (34), the legacy handshake
v0 framing, oversized frames, garbage SCRAM messages and silent clients (the authentication
timeout), per-listener mechanisms, and deleted users (new logins fail, an authenticated
connection goes on). Users are SCRAM credentials set with AdminClient on the PLAINTEXT
listener. One broker serves the module; each test uses its own topics. Every wait is bounded."""

import base64
import hashlib
import hmac
import os
import socket
import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

import kwire as w
from conftest import _finish_broker, _make_broker, unique
from kutil import (PLAIN_FAILED, SCRAM_FAILED, Security, ck_consume, ck_produce, consume_all,
                   end_offsets, records_for)

SASL = "SASL_PLAINTEXT"
SCRAM_ONLY = "SCRAMONLY"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
FAILED_AUTH_DELAY_S = 0.3
AUTH_TIMEOUT_S = 1.0
SETTINGS = {
    "sasl.enabled.mechanisms": ",".join(MECHANISMS),
    "listener.name.scramonly.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "connection.failed.authentication.delay.ms": int(FAILED_AUTH_DELAY_S * 1000),
    "sasl.server.authentication.timeout.ms": int(AUTH_TIMEOUT_S * 1000),
}
# {user: {mechanism: password}}. alice has both SCRAM credentials; bob only SHA-512 (PLAIN
# falls back to it); carol two passwords (PLAIN checks the SHA-256 one); dora is deleted.
USERS = {"alice": {"SCRAM-SHA-256": "alice-pw", "SCRAM-SHA-512": "alice-pw"},
         "bob": {"SCRAM-SHA-512": "bob-pw"},
         "carol": {"SCRAM-SHA-256": "carol-256-pw", "SCRAM-SHA-512": "carol-512-pw"},
         "dora": {"SCRAM-SHA-256": "dora-pw", "SCRAM-SHA-512": "dora-pw"}}
SCRAM_ENUM = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}

# Kafka's error codes (the texts of a failed login are kutil's PLAIN_FAILED and SCRAM_FAILED).
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58


@pytest.fixture(scope="module")
def sasl_keel(request):
    """A broker with a PLAINTEXT listener, SASL_PLAINTEXT (every mechanism) and SCRAMONLY
    (SCRAM-SHA-512 only), and the users of USERS."""
    b = _make_broker(request, SETTINGS, name="keel-sasl",
                     listeners={SASL: "SASL_PLAINTEXT", SCRAM_ONLY: "SASL_PLAINTEXT"})
    try:
        changes = [UserScramCredentialUpsertion(user, ScramCredentialInfo(SCRAM_ENUM[m], 4096),
                                                pw.encode())
                   for user, creds in USERS.items() for m, pw in creds.items()]
        a = admin_client(b)  # kept alive until its futures are done
        for fut in a.alter_user_scram_credentials(changes).values():
            fut.result(timeout=30)
        yield b
    finally:
        _finish_broker(b, getattr(request.session, "_keel_failed", False))


def admin_client(b):
    return AdminClient({"bootstrap.servers": b.bootstrap})


def create_topic(b, partitions=1):
    """A new topic, created over the PLAINTEXT listener."""
    topic = unique("sasl")
    a = admin_client(b)  # kept alive until its futures are done
    for fut in a.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(timeout=30)
    return topic


# -- hand-encoded SASL requests ----------------------------------------------------------------
def handshake(c, mechanism, version=1):
    """SaslHandshake -> (error_code, [enabled mechanisms])."""
    return parse_handshake(c.call(17, version, w.string(mechanism)))


def parse_handshake(body):
    r = w.Reader(body)
    err = r.i16()
    mechanisms = [r.string() for _ in range(r.i32())]
    assert r.rest() == b"", body
    return err, mechanisms


def authenticate(c, token, version=1):
    """SaslAuthenticate -> (error_code, error_message, auth_bytes)."""
    if version >= 2:
        body = c.call(36, version, w.compact_bytes(token) + w.TAGS, flexible=True)
    else:
        body = c.call(36, version, w.bytes_(token))
    return parse_authenticate(body, version)


def parse_authenticate(body, version):
    r = w.Reader(body)
    err = r.i16()
    if version >= 2:
        msg = r.compact_string()
        n = r.uvarint()
        auth_bytes = None if n == 0 else r.take(n - 1)
    else:
        msg = r.string()
        n = r.i32()
        auth_bytes = None if n < 0 else r.take(n)
    if version >= 1:
        assert r.i64() == 0, "session_lifetime_ms: no re-authentication is configured"
    if version >= 2:
        r.skip_tags()
    assert r.rest() == b"", body
    return err, msg, auth_bytes


def plain_token(user, password, authzid=""):
    return ("%s\0%s\0%s" % (authzid, user, password)).encode()


def read_until_closed(c, timeout_s):
    """(every byte the peer sends, True if it closed) within timeout_s."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        c.sock.settimeout(left)
        try:
            chunk = c.sock.recv(65536)
        except socket.timeout:
            return data, False
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not chunk:
            return data, True
        data += chunk


def assert_closed_silently(c, timeout_s=5.0):
    data, closed = read_until_closed(c, timeout_s)
    assert data == b"" and closed, "expected a close without an answer, got %r (closed=%s)" % (
        data, closed)


def api_versions(c):
    """ApiVersions v0 -> {api_key: (min, max)}."""
    r = w.Reader(c.call(18, 0, b""))
    assert r.i16() == 0
    out = {}
    for _ in range(r.i32()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        out[key] = (lo, hi)
    return out


class Scram:
    """The client side of RFC 5802 (SCRAM-SHA-256/512 as Kafka runs it: no channel binding)."""

    def __init__(self, mechanism, user, password):
        self.h = HASH[mechanism]
        self.user = user
        self.password = password.encode()
        self.client_nonce = base64.b64encode(os.urandom(18)).decode()

    def client_first(self):
        self.first_bare = "n=%s,r=%s" % (self.user, self.client_nonce)
        return ("n,," + self.first_bare).encode()

    def client_final(self, server_first):
        self.server_first = server_first.decode()
        attrs = dict(kv.split("=", 1) for kv in self.server_first.split(","))
        assert attrs["r"].startswith(self.client_nonce) and len(attrs["r"]) > len(
            self.client_nonce), self.server_first
        salted = hashlib.pbkdf2_hmac(self.h().name, self.password, base64.b64decode(attrs["s"]),
                                     int(attrs["i"]))
        client_key = self._hmac(salted, b"Client Key")
        stored_key = self.h(client_key).digest()
        without_proof = "c=biws,r=%s" % attrs["r"]
        self.auth_message = ",".join([self.first_bare, self.server_first, without_proof]).encode()
        signature = self._hmac(stored_key, self.auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_key = self._hmac(salted, b"Server Key")
        return ("%s,p=%s" % (without_proof, base64.b64encode(proof).decode())).encode()

    def expected_server_final(self):
        return b"v=" + base64.b64encode(self._hmac(self.server_key, self.auth_message))

    def _hmac(self, key, msg):
        return hmac.new(key, msg, self.h).digest()


def scram_login(c, mechanism, user, password, version=1):
    """A whole SCRAM exchange after a successful handshake -> the last SaslAuthenticate answer.
    A successful one carries the server signature this client computes."""
    s = Scram(mechanism, user, password)
    err, msg, server_first = authenticate(c, s.client_first(), version)
    if err != 0:
        return err, msg, server_first
    assert not msg, msg
    err, msg, server_final = authenticate(c, s.client_final(server_first), version)
    if err == 0:
        assert not msg and server_final == s.expected_server_final(), (msg, server_final)
    return err, msg or None, server_final


def login(bootstrap, mechanism, user, password, enabled=MECHANISMS):
    """A wire connection authenticated by SaslHandshake v1 and SaslAuthenticate v1."""
    c = w.Conn(bootstrap)
    try:
        assert handshake(c, mechanism) == (0, enabled)
        if mechanism == "PLAIN":
            err, msg, auth_bytes = authenticate(c, plain_token(user, password))
            assert (err, msg or None, auth_bytes) == (0, None, b"")
        else:
            err, msg, _ = scram_login(c, mechanism, user, password)
            assert (err, msg) == (0, None)
    except BaseException:
        c.close()
        raise
    return c


# -- clients ---------------------------------------------------------------------------------
def ck_conf(bootstrap, mechanism, user, password):
    return Security("SASL_PLAINTEXT", mechanism=mechanism, user=user,
                    password=password).ck(bootstrap)


# -- 1. credentials per mechanism ------------------------------------------------------------
def test_plain_checks_the_sha256_credential_else_the_sha512_one(sasl_keel):
    """PLAIN checks the password against the user's SCRAM-SHA-256 credential, else the
    SCRAM-SHA-512 one; each SCRAM mechanism needs its own credential."""
    bs = sasl_keel.listener_bootstrap(SASL)
    logins = [("PLAIN", "bob", "bob-pw"), ("SCRAM-SHA-512", "bob", "bob-pw"),
              ("PLAIN", "carol", "carol-256-pw"), ("SCRAM-SHA-256", "carol", "carol-256-pw"),
              ("SCRAM-SHA-512", "carol", "carol-512-pw")]
    for mechanism, user, password in logins:
        with login(bs, mechanism, user, password) as c:
            assert api_versions(c)[36] == (0, 2)
    refused = [("PLAIN", "bob", "alice-pw"), ("PLAIN", "carol", "carol-512-pw"),
               ("SCRAM-SHA-256", "bob", "bob-pw"), ("SCRAM-SHA-256", "carol", "carol-512-pw"),
               ("SCRAM-SHA-512", "carol", "carol-256-pw")]
    for mechanism, user, password in refused:
        with w.Conn(bs) as c:
            assert handshake(c, mechanism) == (0, MECHANISMS)
            if mechanism == "PLAIN":
                answer = authenticate(c, plain_token(user, password))
            else:
                answer = scram_login(c, mechanism, user, password)
            want = PLAIN_FAILED if mechanism == "PLAIN" else SCRAM_FAILED
            assert answer == (SASL_AUTHENTICATION_FAILED, want, b""), (mechanism, user, password)
            assert_closed_silently(c)


def test_authenticated_metadata_advertises_the_sasl_listener(sasl_keel):
    """After a SaslAuthenticate v0/v1/v2 login, Metadata answers with the broker at the SASL
    listener's port (clients reconnect there)."""
    b = sasl_keel
    topic = create_topic(b)
    bs = b.listener_bootstrap(SASL)
    for version in (0, 1, 2):
        with w.Conn(bs) as c:
            assert handshake(c, "PLAIN") == (0, MECHANISMS)
            err, msg, auth_bytes = authenticate(c, plain_token("alice", "alice-pw"), version)
            assert (err, msg or None, auth_bytes) == (0, None, b"")
            md = w.parse_metadata_v12_response(
                c.call(3, 12, w.metadata_v12_body([topic]), flexible=True))
            assert md["brokers"] == [(0, "127.0.0.1", b.listener_port(SASL))]
            assert md["topics"][topic]["error_code"] == 0
            assert sorted(md["topics"][topic]["partitions"]) == [0]


# -- 2. failed logins ------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_and_unknown_user_get_one_answer_after_the_delay(sasl_keel, mechanism):
    """The same SaslAuthenticate answer for both (58 and the mechanism's text), no sooner than
    connection.failed.authentication.delay.ms, then the connection closes."""
    bs = sasl_keel.listener_bootstrap(SASL)
    answers = []
    for user, password in (("alice", "not-alice-pw"), ("nobody", "alice-pw")):
        with w.Conn(bs) as c:
            assert handshake(c, mechanism) == (0, MECHANISMS)
            if mechanism == "PLAIN":
                token = plain_token(user, password)
            else:
                s = Scram(mechanism, user, password)
                err, msg, server_first = authenticate(c, s.client_first())
                # An unknown user gets a server-first message too; it fails at the proof.
                assert (err, msg or None) == (0, None), (user, err, msg)
                assert server_first.startswith(b"r=" + s.client_nonce.encode())
                token = s.client_final(server_first)
            t0 = time.monotonic()
            answer = authenticate(c, token)
            elapsed = time.monotonic() - t0
            assert elapsed >= FAILED_AUTH_DELAY_S, "answered after %.3f s" % elapsed
            assert_closed_silently(c)
            answers.append(answer)
    want = PLAIN_FAILED if mechanism == "PLAIN" else SCRAM_FAILED
    assert answers == [(SASL_AUTHENTICATION_FAILED, want, b"")] * 2


def test_failed_logins_with_confluent_kafka_produce_nothing(sasl_keel):
    """librdkafka reports the broker's authentication error for a wrong password and for an
    unknown user alike, and its record is never written."""
    b = sasl_keel
    topic = create_topic(b)
    bs = b.listener_bootstrap(SASL)
    cases = [(m, u, pw) for m in MECHANISMS
             for u, pw in (("alice", "not-alice-pw"), ("nobody", "alice-pw"))]
    clients = {}
    for case in cases:
        errors, reports = [], []
        p = Producer(dict(ck_conf(bs, *case), **{
            "error_cb": errors.append, "message.timeout.ms": 2500, "linger.ms": 0}))
        p.produce(topic, value=b"must-not-be-written", partition=0,
                  on_delivery=lambda err, msg, r=reports: r.append(err))
        clients[case] = (p, errors, reports)
    deadline = time.monotonic() + 20
    while not all(reports and any(e.code() == KafkaError._AUTHENTICATION for e in errors)
                  for _, errors, reports in clients.values()):
        assert time.monotonic() < deadline, {c: ([e.str() for e in v[1]], v[2])
                                             for c, v in clients.items()}
        for p, _, _ in clients.values():
            p.poll(0.05)
    texts = {}
    for (mechanism, user, _), (p, errors, reports) in clients.items():
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        want = PLAIN_FAILED if mechanism == "PLAIN" else SCRAM_FAILED
        assert "SASL authentication error: %s" % want in auth[0].str(), auth[0].str()
        assert len(reports) == 1 and reports[0] is not None, reports
        assert p.flush(1) == 0
        texts.setdefault(mechanism, set()).add(auth[0].str().split(" (after")[0])
    assert all(len(t) == 1 for t in texts.values()), texts
    assert end_offsets(b.bootstrap, topic, [0]) == {0: 0}


# -- 3. before authentication ----------------------------------------------------------------
def test_unauthenticated_connection_gets_api_versions_and_nothing_else(sasl_keel):
    """ApiVersions is answered (the PLAINTEXT listener's list, with SaslHandshake v0-1 and
    SaslAuthenticate v0-2); Metadata and Produce close the connection unanswered and reveal
    nothing (not even the topic's name), and write nothing."""
    b = sasl_keel
    topic = create_topic(b)
    bs = b.listener_bootstrap(SASL)
    with w.Conn(b.bootstrap) as c:
        plaintext_versions = api_versions(c)
    metadata_request = w.request(3, 12, 9, w.metadata_v12_body([topic]), flexible=True)
    with w.Conn(bs) as c:
        versions = api_versions(c)
        assert versions[17] == (0, 1) and versions[36] == (0, 2)
        assert versions == plaintext_versions
        c.send(metadata_request)
        data, closed = read_until_closed(c, 5.0)
        assert topic.encode() not in data
        assert (data, closed) == (b"", True)
    with w.Conn(bs) as c:  # Metadata as the first request
        c.send(metadata_request)
        assert_closed_silently(c)
    with w.Conn(bs) as c:  # after a handshake, before SaslAuthenticate
        assert handshake(c, "PLAIN") == (0, MECHANISMS)
        c.send(metadata_request)
        data, closed = read_until_closed(c, 5.0)
        assert topic.encode() not in data
        assert (data, closed) == (b"", True)
    batch = w.record_batch([(b"k", b"unauthenticated", [], 1_700_000_000_000)],
                           1_700_000_000_000)
    with w.Conn(bs) as c:
        c.send(w.request(0, 3, 11, w.produce_v3_body(topic, 0, batch)))
        assert_closed_silently(c)
    with w.Conn(bs) as c:
        assert api_versions(c)[0][1] >= 9
        c.send(w.request(0, 9, 12, w.produce_v9_body(topic, 0, batch), flexible=True))
        assert_closed_silently(c)
    assert end_offsets(b.bootstrap, topic, [0]) == {0: 0}


# -- 4. handshake errors ---------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_unknown_mechanism_gets_33_and_the_enabled_list(sasl_keel, version):
    with w.Conn(sasl_keel.listener_bootstrap(SASL)) as c:
        assert handshake(c, "GSSAPI", version) == (UNSUPPORTED_SASL_MECHANISM, MECHANISMS)
        assert_closed_silently(c)
    with w.Conn(sasl_keel.listener_bootstrap(SASL)) as c:  # names are case sensitive
        assert handshake(c, "plain", version) == (UNSUPPORTED_SASL_MECHANISM, MECHANISMS)
        assert_closed_silently(c)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_before_the_handshake_gets_34(sasl_keel, version):
    with w.Conn(sasl_keel.listener_bootstrap(SASL)) as c:
        err, msg, auth_bytes = authenticate(c, plain_token("alice", "alice-pw"), version)
        assert (err, auth_bytes) == (ILLEGAL_SASL_STATE, b""), msg
        assert msg, "an error message says why"
        assert_closed_silently(c)


# -- 5. handshake v0: bare tokens ------------------------------------------------------------
def test_handshake_v0_with_a_bare_plain_token(sasl_keel):
    """After SaslHandshake v0 the PLAIN token travels as a bare size-prefixed frame; the
    answer is a bare empty frame, then Kafka requests are served. A wrong password closes
    the connection unanswered (after the failed-authentication delay)."""
    b = sasl_keel
    topic = create_topic(b)
    bs = b.listener_bootstrap(SASL)
    with w.Conn(bs) as c:
        assert handshake(c, "PLAIN", version=0) == (0, MECHANISMS)
        c.send(w.bytes_(plain_token("alice", "alice-pw")))
        assert c._recv_exact(4) == b"\x00\x00\x00\x00"  # a bare empty frame
        # Nothing more follows: the next frame must be this Metadata answer.
        md = w.parse_metadata_v12_response(
            c.call(3, 12, w.metadata_v12_body([topic]), flexible=True))
        assert md["brokers"] == [(0, "127.0.0.1", b.listener_port(SASL))]
        assert md["topics"][topic]["error_code"] == 0
    with w.Conn(bs) as c:
        assert handshake(c, "PLAIN", version=0) == (0, MECHANISMS)
        t0 = time.monotonic()
        c.send(w.bytes_(plain_token("alice", "not-alice-pw")))
        assert_closed_silently(c)
        assert time.monotonic() - t0 >= FAILED_AUTH_DELAY_S


# -- 6. hostile input ------------------------------------------------------------------------
def test_hostile_input_before_authentication(sasl_keel):
    """Oversized and negative frame sizes close the connection; garbage SCRAM client-first
    messages get 58; silent and half-sent connections are closed after
    sasl.server.authentication.timeout.ms. The shard serves logins and records afterwards."""
    b = sasl_keel
    bs = b.listener_bootstrap(SASL)
    for size in (600000, 524289, -1):
        with w.Conn(bs) as c:
            c.send(struct.pack(">i", size) + b"\x00" * 64)
            assert_closed_silently(c)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for garbage in (b"\xff\xfe", b"n,,n=,r=", b"", b"n,,n=alice", b"x" * 4096):
            with w.Conn(bs) as c:
                assert handshake(c, mechanism) == (0, MECHANISMS)
                err, msg, auth_bytes = authenticate(c, garbage)
                assert (err, auth_bytes) == (SASL_AUTHENTICATION_FAILED, b""), (garbage, msg)
                assert msg.startswith("Authentication failed"), (garbage, msg)
                assert_closed_silently(c)

    # Three idle connections at once: nothing sent, a handshake then nothing, half a frame.
    t0 = time.monotonic()
    idle = [w.Conn(bs) for _ in range(3)]
    try:
        idle[1].send(w.request(17, 1, 5, w.string("SCRAM-SHA-512")))
        idle[2].send(b"\x00\x00")
        answer = idle[1].recv_frame()
        r = w.Reader(answer)
        assert r.i32() == 5 and parse_handshake(r.rest()) == (0, MECHANISMS)
        for c in idle:
            data, closed = read_until_closed(c, 5.0 - (time.monotonic() - t0))
            elapsed = time.monotonic() - t0
            assert (data, closed) == (b"", True), elapsed
            assert 0.8 * AUTH_TIMEOUT_S <= elapsed <= 5.0, elapsed
    finally:
        for c in idle:
            c.close()

    assert b.alive()
    topic = create_topic(b)
    conf = ck_conf(bs, "SCRAM-SHA-512", "alice", "alice-pw")
    recs = records_for("after-hostile", "SCRAM-SHA-512", 3)
    assert ck_produce(conf, topic, recs) == [0, 1, 2]
    assert ck_consume(conf, topic, 3) == [(i, k, v, h) for i, (k, v, h) in enumerate(recs)]


# -- 7. per-listener mechanisms --------------------------------------------------------------
def test_listener_with_only_scram_sha_512(sasl_keel):
    b = sasl_keel
    only = b.listener_bootstrap(SCRAM_ONLY)
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        with w.Conn(only) as c:
            assert handshake(c, mechanism) == (UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
            assert_closed_silently(c)
    topic = create_topic(b)
    with login(only, "SCRAM-SHA-512", "alice", "alice-pw", enabled=["SCRAM-SHA-512"]) as c:
        md = w.parse_metadata_v12_response(
            c.call(3, 12, w.metadata_v12_body([topic]), flexible=True))
        assert md["brokers"] == [(0, "127.0.0.1", b.listener_port(SCRAM_ONLY))]
    conf = ck_conf(only, "SCRAM-SHA-512", "bob", "bob-pw")
    recs = records_for("scram-only", "SCRAM-SHA-512", 3)
    assert ck_produce(conf, topic, recs) == [0, 1, 2]
    assert ck_consume(conf, topic, 3) == [(i, k, v, h) for i, (k, v, h) in enumerate(recs)]
    # The other SASL listener keeps its own list.
    with w.Conn(b.listener_bootstrap(SASL)) as c:
        assert handshake(c, "PLAIN") == (0, MECHANISMS)


# -- 8. deleted users ------------------------------------------------------------------------
def test_deleted_user_cannot_log_in_but_keeps_an_authenticated_connection(sasl_keel):
    """Deleting dora's credentials (each mechanism) refuses her new logins (58), while her
    connection authenticated before the deletion keeps serving (Kafka: no re-authentication)."""
    b = sasl_keel
    topic = create_topic(b)
    bs = b.listener_bootstrap(SASL)
    before = login(bs, "PLAIN", "dora", "dora-pw")
    try:
        a = admin_client(b)
        for fut in a.alter_user_scram_credentials(
                [UserScramCredentialDeletion("dora", SCRAM_ENUM[m])
                 for m in USERS["dora"]]).values():
            fut.result(timeout=30)
        with pytest.raises(KafkaException) as e:
            for fut in a.describe_user_scram_credentials(["dora"]).values():
                fut.result(timeout=30)
        assert e.value.args[0].name() == "RESOURCE_NOT_FOUND"

        for _ in range(4):  # new connections land on every shard
            with w.Conn(bs) as c:
                assert handshake(c, "PLAIN") == (0, MECHANISMS)
                assert authenticate(c, plain_token("dora", "dora-pw")) == (
                    SASL_AUTHENTICATION_FAILED, PLAIN_FAILED, b"")
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            with w.Conn(bs) as c:
                assert handshake(c, mechanism) == (0, MECHANISMS)
                assert scram_login(c, mechanism, "dora", "dora-pw") == (
                    SASL_AUTHENTICATION_FAILED, SCRAM_FAILED, b"")

        # The connection authenticated before goes on: Metadata and Produce.
        md = w.parse_metadata_v12_response(
            before.call(3, 12, w.metadata_v12_body([topic]), flexible=True))
        assert md["topics"][topic]["error_code"] == 0
        batch = w.record_batch([(b"dora-key", b"written-after-deletion", [("h", b"1")],
                                 1_700_000_000_000)], 1_700_000_000_000)
        answer = w.parse_produce_v3_response(before.call(0, 3, w.produce_v3_body(topic, 0, batch)))
        assert answer == {(topic, 0): (0, 0)}
    finally:
        before.close()
    got = consume_all(b.bootstrap, topic, [0], timeout_s=30)[0]
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in got] == [
        (0, b"dora-key", b"written-after-deletion", [("h", b"1")])]


# -- 9. the PLAINTEXT listener ---------------------------------------------------------------
def test_plaintext_listener_answers_sasl_requests_with_34_and_keeps_serving(sasl_keel):
    b = sasl_keel
    with w.Conn(b.bootstrap) as c:
        assert handshake(c, "PLAIN") == (ILLEGAL_SASL_STATE, [])
        assert api_versions(c)[17] == (0, 1)
        err, msg, auth_bytes = authenticate(c, plain_token("alice", "alice-pw"), 1)
        assert (err, auth_bytes) == (ILLEGAL_SASL_STATE, b""), msg
        assert handshake(c, "PLAIN", version=0) == (ILLEGAL_SASL_STATE, [])
        md = w.parse_metadata_v12_response(c.call(3, 12, w.metadata_v12_body(None),
                                                  flexible=True))
        assert md["brokers"] == [(0, "127.0.0.1", b.port)]
    # An authenticated SASL connection answers a second handshake the same way.
    with login(b.listener_bootstrap(SASL), "SCRAM-SHA-256", "alice", "alice-pw") as c:
        assert handshake(c, "PLAIN") == (ILLEGAL_SASL_STATE, [])
        err, _, _ = authenticate(c, plain_token("alice", "alice-pw"), 0)
        assert err == ILLEGAL_SASL_STATE
        assert api_versions(c)[36] == (0, 2)
