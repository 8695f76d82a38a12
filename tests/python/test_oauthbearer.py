"""SASL OAUTHBEARER with unsecured JWTs (issue 19): Kafka's OAuthBearerSaslServer with its
OAuthBearerUnsecuredValidatorCallbackHandler, against the real broker.

confluent-kafka and kcat (librdkafka's `enable.sasl.oauthbearer.unsecure.jwt`, which builds
the token from `sasl.oauthbearer.config`) produce and consume over SASL_PLAINTEXT and SASL_SSL
as `User:alice`, which StandardAuthorizer's ACLs let write and read the `oauth-` topics; a
token for another principal is refused with TOPIC_AUTHORIZATION_FAILED; kafka-python does the
same with its token provider handing unsecured JWTs. A hand-built expired
token (kafka-python's token provider) and a token without the scope a listener requires
(`unsecuredValidatorRequiredScope` in the listener's `oauthbearer.sasl.jaas.config`) fail
authentication: on the wire, the broker answers with RFC 7628's JSON error challenge, the
client's `%x01` gets SASL_AUTHENTICATION_FAILED (58) after
connection.failed.authentication.delay.ms, and the connection closes. One broker serves the
module; every wait is bounded."""

import base64
import json
import os
import subprocess
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from kafka.errors import KafkaTimeoutError

import kwire as w
from conftest import KEEL_BIN, _finish_broker, _make_broker, unique
from kutil import (STANDARD_AUTHORIZER, ck_consume, ck_produce, ck_refused, end_offsets, kcat,
                   producer, records_for)

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
REQUIRED_SCOPE = "kafka-access"
FAILED_AUTH_DELAY_S = 0.3
SASL_LISTENERS = ["SASL_PLAINTEXT", "SASL_SSL"]
# SCOPED: a SASL_PLAINTEXT listener whose validator requires REQUIRED_SCOPE.
LISTENERS = {"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL",
             "SCOPED": "SASL_PLAINTEXT"}
PREFIX = "oauth-"
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33


@pytest.fixture(scope="module")
def oauth_keel(request, certs):
    settings = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.scoped.oauthbearer.sasl.jaas.config":
            '%s required unsecuredValidatorRequiredScope="%s" '
            'unsecuredValidatorAllowableClockSkewMs="1000" ;' % (LOGIN_MODULE, REQUIRED_SCOPE),
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "ssl.truststore.location": os.path.join(certs, "ca.pem"),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        # The PLAINTEXT listener (User:ANONYMOUS) sets up topics and ACLs.
        "super.users": "User:ANONYMOUS",
        "connection.failed.authentication.delay.ms": int(FAILED_AUTH_DELAY_S * 1000),
        "sasl.server.authentication.timeout.ms": 5000,
    }
    b = _make_broker(request, settings, name="keel-oauth", listeners=LISTENERS)
    try:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        acls = [AclBinding(ResourceType.TOPIC, PREFIX, ResourcePatternType.PREFIXED,
                           "User:alice", "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ)]
        acls.append(AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL,
                               "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
        for fut in a.create_acls(acls).values():
            fut.result(timeout=30)
        yield b
    finally:
        _finish_broker(b, getattr(request.session, "_keel_failed", False))


def create_topic(b):
    topic = unique(PREFIX + "t")
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    for fut in a.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(timeout=30)
    return topic


def oauth_conf(b, certs, listener, principal="alice", scope=None):
    """librdkafka's properties for an unsecured JWT naming `principal` (confluent-kafka's
    config, kcat's -X)."""
    config = "principal=%s" % principal
    if scope:
        config += " scope=%s" % scope
    conf = {"bootstrap.servers": b.listener_bootstrap(listener),
            "security.protocol": LISTENERS[listener], "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": config}
    if LISTENERS[listener] == "SASL_SSL":
        conf["ssl.ca.location"] = os.path.join(certs, "ca.pem")
    return conf


def unsecured_jwt(claims):
    """An unsecured JWS compact serialization: base64url header and claims, no signature."""
    def b64(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return "%s.%s." % (b64({"alg": "none"}), b64(claims))


def initial_response(token):
    return ("n,,\x01auth=Bearer %s\x01\x01" % token).encode()


# -- hand-encoded SaslHandshake v1 and SaslAuthenticate v1 --------------------------------------
def handshake(c, mechanism):
    """SaslHandshake v1 -> (error code, [enabled mechanisms])."""
    r = w.Reader(c.call(17, 1, w.string(mechanism)))
    err = r.i16()
    return err, [r.string() for _ in range(r.i32())]


def authenticate(c, token):
    """SaslAuthenticate v1 -> (error code, error message, auth bytes)."""
    r = w.Reader(c.call(36, 1, w.bytes_(token)))
    err, msg = r.i16(), r.string()
    n = r.i32()
    auth_bytes = None if n < 0 else r.take(n)
    assert r.i64() == 0, "session_lifetime_ms: no re-authentication"
    assert r.rest() == b""
    return err, msg, auth_bytes


def assert_challenge_then_failure(b, listener, token, challenge):
    """The broker answers `token` with the JSON error `challenge`; the client's %x01 then gets
    SASL_AUTHENTICATION_FAILED with the challenge as its message, after the failure delay, and
    the connection closes."""
    with w.Conn(b.listener_bootstrap(listener)) as c:
        assert handshake(c, "OAUTHBEARER") == (0, ["OAUTHBEARER"])
        err, msg, auth_bytes = authenticate(c, initial_response(token))
        assert (err, auth_bytes) == (0, challenge.encode()), (err, msg, auth_bytes)
        started = time.monotonic()
        err, msg, _ = authenticate(c, b"\x01")
        assert (err, msg) == (SASL_AUTHENTICATION_FAILED, challenge)
        assert time.monotonic() - started >= FAILED_AUTH_DELAY_S - 0.05
        assert c.wait_closed(5.0)


# -- the round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_confluent_kafka_produces_and_consumes_as_the_token_principal(oauth_keel, certs,
                                                                      listener):
    topic = create_topic(oauth_keel)
    conf = oauth_conf(oauth_keel, certs, listener)
    records = records_for("ck-oauth", listener)
    assert ck_produce(conf, topic, records) == list(range(len(records)))
    assert ck_consume(conf, topic, len(records)) == [
        (i, k, v, h) for i, (k, v, h) in enumerate(records)]


@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_kcat_produces_and_consumes_as_the_token_principal(oauth_keel, certs, listener):
    topic = create_topic(oauth_keel)
    args = ["-X", "socket.timeout.ms=20000"]
    for k, v in oauth_conf(oauth_keel, certs, listener).items():
        args += ["-b", v] if k == "bootstrap.servers" else ["-X", "%s=%s" % (k, v)]
    lines = [b"key-%d:value-%d-%s" % (i, i, listener.encode()) for i in range(5)]
    kcat(*args, "-P", "-t", topic, "-p", "0", "-K:", input=b"\n".join(lines) + b"\n")
    out = kcat(*args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
               "-f", "%o|%k|%s\\n")
    assert out.splitlines() == ["%d|%s" % (i, l.decode().replace(":", "|", 1))
                                for i, l in enumerate(lines)]


def test_another_principal_is_denied_by_the_acls(oauth_keel, certs):
    """User:mallory authenticates (any unsecured token does) but no ACL lets it write."""
    topic = create_topic(oauth_keel)
    reports = []
    p = Producer(dict(oauth_conf(oauth_keel, certs, "SASL_PLAINTEXT", principal="mallory"),
                      **{"message.timeout.ms": 8000, "retries": 0}))
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda e, m: reports.append(e))
    p.flush(20)
    assert [e.name() for e in reports] == ["TOPIC_AUTHORIZATION_FAILED"]
    assert end_offsets(oauth_keel.bootstrap, topic, [0]) == {0: 0}


# -- refused tokens ----------------------------------------------------------------------------
@pytest.mark.parametrize("listener", SASL_LISTENERS)
def test_kafka_python_produces_and_consumes_as_the_token_principal(oauth_keel, certs, listener):
    """kafka-python's token provider hands an unsecured JWT for alice: her ACLs let her write
    and read back records with keys, values and headers; a token for mallory is refused."""
    from kafka.errors import TopicAuthorizationFailedError
    from kafka.net.sasl.oauth import AbstractTokenProvider
    from kutil import consume_all

    def provider(principal):
        now = int(time.time())
        token = unsecured_jwt({"sub": principal, "iat": now, "exp": now + 600})

        class Provider(AbstractTokenProvider):
            def token(self):
                return token
        return Provider()

    kw = {"security_protocol": LISTENERS[listener], "sasl_mechanism": "OAUTHBEARER"}
    if LISTENERS[listener] == "SASL_SSL":
        kw["ssl_cafile"] = os.path.join(certs, "ca.pem")
    bootstrap = oauth_keel.listener_bootstrap(listener)
    topic = create_topic(oauth_keel)
    records = records_for("kafka-python", "OAUTHBEARER")
    p = producer(bootstrap, sasl_oauth_token_provider=provider("alice"), **kw)
    try:
        futures = [p.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in records]
        p.flush(timeout=20)
        assert [f.get(timeout=20).offset for f in futures] == list(range(len(records)))
    finally:
        p.close(timeout=5)
    got = [(r.key, r.value, list(r.headers)) for r in consume_all(
        bootstrap, topic, [0], timeout_s=30, sasl_oauth_token_provider=provider("alice"),
        **kw)[0]]
    assert got == [(k, v, h) for k, v, h in records]

    p = producer(bootstrap, sasl_oauth_token_provider=provider("mallory"), retries=0, **kw)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(topic, key=b"k", value=b"mallory", partition=0).get(timeout=20)
    finally:
        p.close(timeout=5)
    assert end_offsets(oauth_keel.bootstrap, topic, [0]) == {0: len(records)}


def test_expired_token_fails_authentication(oauth_keel):
    """kafka-python sends the token its provider gives; an expired one is answered with the
    invalid_token challenge, then error 58, and the client never bootstraps."""
    from kafka.net.sasl.oauth import AbstractTokenProvider
    now = int(time.time())
    expired = unsecured_jwt({"sub": "alice", "iat": now - 120, "exp": now - 60})

    class Expired(AbstractTokenProvider):
        def token(self):
            return expired

    assert_challenge_then_failure(oauth_keel, "SASL_PLAINTEXT", expired,
                                  '{"status":"invalid_token"}')

    # kafka-python drops a response that arrives together with the connection's close (its
    # transport reads both at once and reports only the disconnect), so whether it logs the
    # 58's text is a race; the broker's log says why it refused the token.
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        producer(oauth_keel.listener_bootstrap("SASL_PLAINTEXT"), bootstrap_timeout_ms=3000,
                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                 sasl_oauth_token_provider=Expired())
    assert "minus allowable clock skew (0 ms) was on or after the Expiration Time value (%d" % (
        now - 60) in oauth_keel.log_text()
    # The same provider with a live token logs in and writes.
    live = unsecured_jwt({"sub": "alice", "iat": now, "exp": now + 600})

    class Live(AbstractTokenProvider):
        def token(self):
            return live

    topic = create_topic(oauth_keel)
    p = producer(oauth_keel.listener_bootstrap("SASL_PLAINTEXT"),
                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                 sasl_oauth_token_provider=Live())
    try:
        assert p.send(topic, key=b"k", value=b"v", partition=0).get(timeout=20).offset == 0
    finally:
        p.close(timeout=5)


def test_a_missing_required_scope_fails_authentication(oauth_keel, certs):
    """SCOPED requires REQUIRED_SCOPE: librdkafka's token without it is refused (the challenge
    names the required scope), with it the round trip works; the other listeners require
    none."""
    topic = create_topic(oauth_keel)
    now = int(time.time())
    challenge = '{"status":"insufficient_scope", "scope":"[%s]"}' % REQUIRED_SCOPE
    assert_challenge_then_failure(
        oauth_keel, "SCOPED",
        unsecured_jwt({"sub": "alice", "exp": now + 600, "scope": ["other"]}), challenge)
    reported = ck_refused(
        oauth_conf(oauth_keel, certs, "SCOPED", scope="other,more"), topic, "insufficient_scope")
    assert "insufficient_scope" in reported, reported
    assert end_offsets(oauth_keel.bootstrap, topic, [0]) == {0: 0}
    conf = oauth_conf(oauth_keel, certs, "SCOPED", scope="other,%s" % REQUIRED_SCOPE)
    records = records_for("ck-scoped", "OAUTHBEARER", n=2)
    assert ck_produce(conf, topic, records) == [0, 1]
    assert ck_consume(conf, topic, 2) == [(i, k, v, h) for i, (k, v, h) in enumerate(records)]


def test_protocol_details(oauth_keel):
    """The mechanism list answered to an unknown mechanism; a malformed initial response and a
    token signed with another algorithm; an authorization id other than the principal; the
    start-up warning."""
    with w.Conn(oauth_keel.listener_bootstrap("SASL_PLAINTEXT")) as c:
        assert handshake(c, "PLAIN") == (UNSUPPORTED_SASL_MECHANISM, ["OAUTHBEARER"])
        assert c.wait_closed(5.0)
    with w.Conn(oauth_keel.listener_bootstrap("SASL_PLAINTEXT")) as c:
        assert handshake(c, "OAUTHBEARER") == (0, ["OAUTHBEARER"])
        err, msg, _ = authenticate(c, b"n,,\x01auth=Basic abc\x01\x01")
        assert (err, msg) == (SASL_AUTHENTICATION_FAILED,
                              "Authentication failed during authentication due to invalid "
                              "credentials with SASL mechanism OAUTHBEARER")
        assert c.wait_closed(5.0)
    now = int(time.time())
    signed = "%s.%s.c2ln" % (
        base64.urlsafe_b64encode(b'{"alg":"HS256"}').rstrip(b"=").decode(),
        base64.urlsafe_b64encode(json.dumps({"sub": "alice", "exp": now + 60}).encode())
        .rstrip(b"=").decode())
    assert_challenge_then_failure(oauth_keel, "SASL_PLAINTEXT", signed,
                                  '{"status":"invalid_token"}')
    with w.Conn(oauth_keel.listener_bootstrap("SASL_PLAINTEXT")) as c:
        assert handshake(c, "OAUTHBEARER") == (0, ["OAUTHBEARER"])
        token = unsecured_jwt({"sub": "alice", "exp": now + 60})
        err, msg, _ = authenticate(c, ("n,a=bob,\x01auth=Bearer %s\x01\x01" % token).encode())
        assert err == SASL_AUTHENTICATION_FAILED
        assert "authorization id (bob)" in msg and "principal name (alice)" in msg, msg
        assert c.wait_closed(5.0)
    # A good token: authenticated, then an ordinary request is answered.
    with w.Conn(oauth_keel.listener_bootstrap("SASL_PLAINTEXT")) as c:
        assert handshake(c, "OAUTHBEARER") == (0, ["OAUTHBEARER"])
        token = unsecured_jwt({"sub": "alice", "exp": now + 60, "scope": "x"})
        assert authenticate(c, initial_response(token)) == (0, "", b"")
        r = w.Reader(c.call(18, 0, b""))
        assert r.i16() == 0
    assert "OAUTHBEARER takes unsecured JWTs" in oauth_keel.log_text()


def test_a_bad_jaas_config_stops_the_start(tmp_path):
    key = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
    for value, why in [
            ('%s required unsecuredValidatorAllowableClockSkewMs="-5";' % LOGIN_MODULE,
             "must not be negative"),
            ("%s required" % LOGIN_MODULE, "not terminated by semi-colon"),
            ("org.apache.kafka.common.security.plain.PlainLoginModule required;",
             "OAUTHBEARER needs")]:
        p = subprocess.run(
            [KEEL_BIN, "--data-dir", str(tmp_path / "data"), "--admin", "off",
             "--set", "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
             "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
                      "SASL_PLAINTEXT:SASL_PLAINTEXT",
             "--set", "sasl.enabled.mechanisms=OAUTHBEARER", "--set", "%s=%s" % (key, value)],
            capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("KEEL_")})
        assert p.returncode == 2, p
        assert key in p.stderr and why in p.stderr, p.stderr
