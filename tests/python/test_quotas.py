"""Client quotas (issue 19): AlterClientQuotas and DescribeClientQuotas as Kafka answers them,
kept in the metadata log; producer_byte_rate holding a producer (librdkafka) to its quota and
two connections on different shards to one shared quota; a throttled Fetch answering empty;
request_percentage throttling; the throttle counters in /metrics."""

import struct
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kwire
from conftest import unique
from kwire import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED

INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35

ALICE = {"user": "alice"}
ALICE_ANY_CLIENT = {"user": "alice", "client-id": None}
DEFAULT_USER = {"user": None}
APP = {"client-id": "app"}


def create_topic(b, partitions=1):
    topic = unique("quota")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in fs.values():
        f.result(timeout=15)
    return topic


def canonical(entries):
    """Described entries as sorted ([(type, name)], values), a default entity named "<default>"."""
    return sorted(([(t, "<default>" if n is None else n) for t, n in sorted(e.items())], v)
                  for e, v in entries)


def test_quotas_are_altered_described_and_survive_a_restart(keel_factory):
    b = keel_factory()
    with kwire.Conn(b.bootstrap) as c:
        out = kwire.alter_client_quotas(c, [
            (ALICE, {"producer_byte_rate": 1048576, "request_percentage": 12.5}),
            (ALICE_ANY_CLIENT, {"consumer_byte_rate": 2048}),
            (DEFAULT_USER, {"producer_byte_rate": 4096}),
            (APP, {"consumer_byte_rate": 8192}),
        ])
        assert [e[0] for e in out] == [0, 0, 0, 0], out
        assert [e[2] for e in out] == [ALICE, ALICE_ANY_CLIENT, DEFAULT_USER, APP]

        def described(components, strict=False):
            err, msg, entries = kwire.describe_client_quotas(c, components, strict)
            assert err == 0, msg
            return canonical(entries)

        everything = described([])
        assert everything == sorted([
            ([("user", "alice")], {"producer_byte_rate": 1048576.0, "request_percentage": 12.5}),
            ([("client-id", "<default>"), ("user", "alice")], {"consumer_byte_rate": 2048.0}),
            ([("user", "<default>")], {"producer_byte_rate": 4096.0}),
            ([("client-id", "app")], {"consumer_byte_rate": 8192.0}),
        ]), everything
        # EXACT matches the name; strict refuses entities with other types.
        assert len(described([("user", MATCH_EXACT, "alice")])) == 2
        assert described([("user", MATCH_EXACT, "alice")], strict=True) == [
            ([("user", "alice")], {"producer_byte_rate": 1048576.0, "request_percentage": 12.5})]
        assert described([("user", MATCH_DEFAULT, None)]) == [
            ([("user", "<default>")], {"producer_byte_rate": 4096.0})]
        assert [e for e, _ in described([("client-id", MATCH_SPECIFIED, None)])] == [
            [("client-id", "<default>"), ("user", "alice")], [("client-id", "app")]]

        # Kafka's refusals, each for its own entity only; nothing of them is stored.
        out = kwire.alter_client_quotas(c, [
            ({"user": "bob"}, {"producer_byte_rate": 10.5}),
            ({"user": "bob"}, {"producer_byte_rate": 10}),
            ({"ip": "127.0.0.1"}, {"connection_creation_rate": 10}),
            ({"user": "carol"}, {"no_such_quota": 1}),
            ({"user": ""}, {"producer_byte_rate": 1}),
            ({"client-id": "z"}, {"producer_byte_rate": 77}),
        ])
        codes = [e[0] for e in out]
        assert codes == [INVALID_REQUEST] * 5 + [0], out
        assert "must be a Long value" in out[0][1]
        assert "duplicate entity" in out[1][1]
        assert "Invalid configuration key no_such_quota" in out[3][1]
        assert len(described([])) == 5

        # validate_only checks and writes nothing.
        out = kwire.alter_client_quotas(c, [({"user": "dave"}, {"producer_byte_rate": 5})],
                                        validate_only=True)
        assert out[0][0] == 0
        assert described([("user", MATCH_EXACT, "dave")]) == []

        # Removal: a removed quota is gone, an entity left without quotas is gone.
        out = kwire.alter_client_quotas(c, [
            (ALICE, {"request_percentage": None}),
            ({"client-id": "z"}, {"producer_byte_rate": None}),
        ])
        assert [e[0] for e in out] == [0, 0], out
        assert described([("user", MATCH_EXACT, "alice")], strict=True) == [
            ([("user", "alice")], {"producer_byte_rate": 1048576.0})]
        assert described([("client-id", MATCH_EXACT, "z")]) == []

        err, msg, _ = kwire.describe_client_quotas(c, [("user", MATCH_EXACT, None)])
        assert err == INVALID_REQUEST, msg
        err, msg, _ = kwire.describe_client_quotas(c, [("group", MATCH_DEFAULT, None)])
        assert err == UNSUPPORTED_VERSION, msg
        before = described([])

    b.restart()
    with kwire.Conn(b.bootstrap) as c:
        err, msg, entries = kwire.describe_client_quotas(c, [])
        assert err == 0, msg
        after = canonical(entries)
    assert after == before


def throttle_metrics(b):
    m = b.metrics()
    return {t: m.sum("keel_quota_throttled_responses_total", quota_type=t)
            for t in ("produce", "fetch", "request")}


def test_a_producer_stays_within_its_byte_rate(keel_factory):
    """librdkafka producing as fast as it can for 10 s under producer_byte_rate: what is
    acknowledged in those 10 s is the quota's worth within 10%, and the client is told."""
    b = keel_factory()
    quota = 200_000
    client_id = unique("quota-producer")
    with kwire.Conn(b.bootstrap) as c:
        out = kwire.alter_client_quotas(c, [({"client-id": client_id},
                                             {"producer_byte_rate": quota})])
        assert out[0][0] == 0, out
    topic = create_topic(b)
    throttles = []
    acked = []  # (time, bytes)
    lock = threading.Lock()

    def on_throttle(event):
        with lock:
            throttles.append(event.throttle_time)

    def on_delivery(err, msg):
        assert err is None, err
        with lock:
            acked.append((time.monotonic(), len(msg.value())))

    p = Producer({
        "bootstrap.servers": b.bootstrap,
        "client.id": client_id,
        "linger.ms": 5,
        "batch.size": 16384,
        "queue.buffering.max.kbytes": 512,
        "throttle_cb": on_throttle,
    })
    value = b"q" * 1000
    p.list_topics(topic, timeout=10)
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < 10.0 and sent < 100_000:
        try:
            p.produce(topic, value=value, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.02)
        p.poll(0)
    p.flush(30)
    in_window = sum(n for t, n in acked if t - start <= 10.0)
    rate = in_window / 10.0
    assert 0.9 * quota <= rate <= 1.1 * quota, (
        "acknowledged %.0f B/s in 10 s under a %d B/s quota (%d records sent, %d acked in all)"
        % (rate, quota, sent, len(acked)))
    assert throttles and max(throttles) > 0, "librdkafka saw no throttle_time_ms"
    assert throttle_metrics(b)["produce"] > 0


def shard_of_new_connection(b):
    """A new connection and the shard that accepted it (from keel_connections by shard)."""
    before = b.metrics().by_shard("keel_connections")
    c = kwire.Conn(b.bootstrap)
    c.call(18, 0, b"")  # ApiVersions: the connection is open and served
    after = b.metrics().by_shard("keel_connections")
    grew = [s for s in after if after[s] > before.get(s, 0)]
    return c, (grew[0] if len(grew) == 1 else None)


def test_connections_on_two_shards_share_one_quota(keel_factory):
    b = keel_factory()
    quota = 150_000
    client_id = unique("shared-app")
    with kwire.Conn(b.bootstrap) as c:
        out = kwire.alter_client_quotas(c, [({"client-id": client_id},
                                             {"producer_byte_rate": quota})])
        assert out[0][0] == 0, out
    topic = create_topic(b, partitions=2)
    conns = {}
    spare = []
    for _ in range(40):
        c, shard = shard_of_new_connection(b)
        if shard is not None and shard not in conns:
            conns[shard] = c
        else:
            spare.append(c)
        if len(conns) == 2:
            break
    for c in spare:
        c.close()
    assert sorted(conns) == [0, 1], "no connection landed on each shard: %s" % sorted(conns)

    value = b"s" * 1000
    totals = {}
    throttled = {}

    def produce_for_10s(shard, conn):
        conn.sock.settimeout(15)
        total = 0
        seen_throttle = 0
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < 10.0 and n < 10_000:
            batch = kwire.record_batch([(None, value, (), 0)] * 16, 0)
            body = kwire.produce_v9_body(topic, shard, batch, acks=1)
            resp = conn.call(0, 9, body, correlation_id=n, flexible=True, client_id=client_id)
            parts, throttle = kwire.parse_produce_v9_response(resp)
            n += 1
            if time.monotonic() - start > 10.0:
                break
            assert parts[(topic, shard)][0] == 0, parts
            total += len(batch)
            seen_throttle = max(seen_throttle, throttle)
        totals[shard] = total
        throttled[shard] = seen_throttle

    threads = [threading.Thread(target=produce_for_10s, args=(s, c)) for s, c in conns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in conns.values():
        c.close()
    rate = sum(totals.values()) / 10.0
    assert 0.9 * quota <= rate <= 1.1 * quota, (
        "two connections wrote %.0f B/s together under one %d B/s quota: %s"
        % (rate, quota, totals))
    assert all(v > 0 for v in totals.values()), totals
    assert all(v > 0 for v in throttled.values()), "each connection is throttled: %s" % throttled


def fetch_v12(conn, topic, offset, client_id):
    """-> (throttle_time_ms, record bytes in the answer)"""
    r = kwire.Reader(conn.call(1, 12, kwire.fetch_v12_body(topic, 0, offset), flexible=True,
                               client_id=client_id))
    throttle = r.i32()
    assert r.i16() == 0  # error_code
    r.i32()  # session_id
    record_bytes = 0
    for _ in range(r.uvarint() - 1):
        r.compact_string()
        for _ in range(r.uvarint() - 1):
            r.i32()  # partition
            assert r.i16() == 0
            r.i64()
            r.i64()
            r.i64()
            for _ in range(r.uvarint() - 1):  # aborted transactions
                r.i64()
                r.i64()
                r.skip_tags()
            r.i32()  # preferred read replica
            n = r.uvarint()
            record_bytes += max(n - 1, 0)
            r.take(max(n - 1, 0))
            r.skip_tags()
        r.skip_tags()
    return throttle, record_bytes


def test_a_throttled_fetch_answers_empty(keel_factory):
    b = keel_factory()
    topic = create_topic(b)
    # Batches of at most 10 KB: a fetch returns whole batches.
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 10_000})
    for i in range(200):
        p.produce(topic, key=b"k%d" % i, value=b"v" * 1000)
    assert p.flush(30) == 0
    quota = 20_000
    client_id = unique("slow-consumer")
    with kwire.Conn(b.bootstrap) as c:
        out = kwire.alter_client_quotas(c, [({"client-id": client_id},
                                             {"consumer_byte_rate": quota})])
        assert out[0][0] == 0, out
    answers = []  # (throttle_time_ms, record bytes)
    with kwire.Conn(b.bootstrap, timeout=20) as c:
        offset_bytes = 0
        for _ in range(12):
            throttle, got = fetch_v12(c, topic, 0, client_id)
            answers.append((throttle, got))
            offset_bytes += got
            if sum(1 for t, _ in answers if t > 0) >= 2 and any(g for _, g in answers):
                break
    # The quota bounds what a fetch asks for (the rate's span's worth, one window for a new
    # client: 20 KB, plus the rest of a batch at most).
    assert all(got <= quota + 10_500 for _, got in answers), answers
    assert any(got > 0 for _, got in answers), answers
    throttled = [got for t, got in answers if t > 0]
    assert throttled, "no fetch throttled under a %d B/s quota: %s" % (quota, answers)
    assert throttled == [0] * len(throttled), "a throttled Fetch carried records: %s" % answers
    assert throttle_metrics(b)["fetch"] >= 1
    # Another client is not throttled.
    with kwire.Conn(b.bootstrap) as c:
        throttle, got = fetch_v12(c, topic, 0, unique("other"))
        assert throttle == 0 and got > 0


def test_request_percentage_throttles_any_request(keel_factory):
    b = keel_factory()
    client_id = unique("busy")
    with kwire.Conn(b.bootstrap) as c:
        out = kwire.alter_client_quotas(c, [({"client-id": client_id},
                                             {"request_percentage": 0.001})])
        assert out[0][0] == 0, out
    throttles = []
    with kwire.Conn(b.bootstrap, timeout=10) as c:
        for i in range(20):
            body = c.call(3, 12, kwire.metadata_v12_body(None), correlation_id=i, flexible=True,
                          client_id=client_id)
            throttles.append(struct.unpack(">i", body[:4])[0])
            if throttles[-1] > 0:
                break
    assert throttles[-1] > 0, "0.001%% of a core was never exceeded: %s" % throttles
    # A request quota throttles at most one window (quota.window.size.seconds).
    assert throttles[-1] <= 1000
    assert throttle_metrics(b)["request"] >= 1
