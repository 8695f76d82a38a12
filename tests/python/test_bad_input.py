"""Hostile bytes on the wire: bad frame sizes, unknown APIs and versions, garbage bodies,
corrupt record batches, invalid topic names. A malformed frame closes only that connection;
the broker keeps serving everyone else and no stored data changes."""

import os
import random
import socket
import struct
import time

import pytest
import kafka.errors as Errors

import kwire
from conftest import _finish_broker, _make_broker, api_versions_ok, unique
from kutil import admin, consume_all, end_offsets, producer

MAX_REQ = 1048576
BASE_TS = 1_660_000_000_000
PROTECTED = "protected"
FZ = "fz"


@pytest.fixture(scope="module")
def kb(request):
    """A broker with socket.request.max.bytes=1 MiB and a topic whose content must survive."""
    b = _make_broker(request, {"socket.request.max.bytes": MAX_REQ}, name="keel-bad-input")
    a = admin(b.bootstrap)
    try:
        a.create_topics({PROTECTED: {"num_partitions": 4, "replication_factor": 1},
                         FZ: {"num_partitions": 1, "replication_factor": 1}})
    finally:
        a.close()
    prod = producer(b.bootstrap, acks="all", compression_type="gzip")
    try:
        for i in range(400):
            prod.send(PROTECTED, key=b"pk%d" % i, value=b"pv%d" % i, headers=[("n", b"%d" % i)],
                      partition=i % 4, timestamp_ms=BASE_TS + i)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)
    b.protected_snapshot = snapshot(b)
    assert sum(len(v) for v in b.protected_snapshot[1].values()) == 400
    yield b
    _finish_broker(b, getattr(request.session, "_keel_failed", False))


def snapshot(b):
    ends = end_offsets(b.bootstrap, PROTECTED, range(4))
    got = consume_all(b.bootstrap, PROTECTED, list(range(4)))
    return ends, {p: [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in recs]
                  for p, recs in got.items()}


def assert_healthy(b):
    """The broker process lives, every shard still accepts and answers, data unchanged."""
    assert b.alive(), "keel died:\n" + b.log_tail()
    for _ in range(16):  # SO_REUSEPORT spreads these over both shards
        assert api_versions_ok(b.port, timeout=5.0)
    md = kwire.metadata(b.bootstrap, [PROTECTED, FZ])
    assert md["topics"][PROTECTED]["error_code"] == 0
    assert sorted(md["topics"][PROTECTED]["partitions"]) == [0, 1, 2, 3]
    assert snapshot(b) == b.protected_snapshot
    assert "panicked" not in b.log_text(), "a shard panicked:\n" + b.log_tail()


@pytest.mark.parametrize("size,payload", [
    (-1, b""),
    (0, b""),
    (3, b"\x00\x12\x00"),
    (2 * 1024 * 1024, b"\x00\x12\x00\x00\x00\x00\x00\x01"),  # claims 2 MiB > socket.request.max.bytes
    (MAX_REQ + 1, b"\x00\x12\x00\x00\x00\x00\x00\x01"),
    (-2147483648, b""),
])
def test_bad_frame_size_closes_connection(kb, size, payload):
    with kwire.Conn(kb.bootstrap) as c:
        c.send(struct.pack(">i", size) + payload)
        assert c.wait_closed(5.0), "connection not closed after a frame size of %d" % size
    assert_healthy(kb)


def test_frame_at_the_size_limit_is_served(kb):
    """A Metadata v1 request padded to exactly socket.request.max.bytes is not refused."""
    with kwire.Conn(kb.bootstrap) as c:
        hdr = kwire.i16(3) + kwire.i16(1) + kwire.i32(77) + kwire.string("pad")
        body = kwire.array([kwire.string(PROTECTED)])
        pad = MAX_REQ - len(hdr) - len(body)
        c.send(kwire.i32(MAX_REQ) + hdr + body + b"\x00" * pad)  # trailing bytes after the body
        payload = c.recv_frame()
        # A broker may answer (ignoring trailing bytes) or close on the trailing junk, but it
        # must not refuse the frame size itself: check the log says nothing about the size.
        if payload is not None:
            assert struct.unpack(">i", payload[:4])[0] == 77
    assert "frame of %d bytes is outside" % MAX_REQ not in kb.log_text()
    assert_healthy(kb)


def test_unknown_api_key_gets_unsupported_version_then_close(kb):
    with kwire.Conn(kb.bootstrap) as c:
        c.send(kwire.request(9999, 0, 4242, b""))
        payload = c.recv_frame()
        assert payload is not None, "connection closed without an answer"
        corr, err = struct.unpack(">ih", payload[:6])
        assert corr == 4242
        assert err == 35  # UNSUPPORTED_VERSION
        assert c.wait_closed(5.0)
    with kwire.Conn(kb.bootstrap) as c:  # an unknown version of a known API: same treatment
        c.send(kwire.request(3, 99, 4243, b""))
        payload = c.recv_frame()
        assert payload is not None
        assert struct.unpack(">ih", payload[:6]) == (4243, 35)
    assert_healthy(kb)


def test_api_versions_v99_answers_v0_with_the_api_list(kb):
    with kwire.Conn(kb.bootstrap) as c:
        c.send(kwire.request(18, 99, 99, b"\x00" * 7))
        payload = c.recv_frame()
        assert payload is not None
        r = kwire.Reader(payload)
        assert r.i32() == 99
        assert r.i16() == 35
        apis = {}
        for _ in range(r.i32()):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            apis[k] = (lo, hi)
        assert r.rest() == b"", "v0 format: nothing after the api list"
        # Produce is listed from v0 (librdkafka's compression check) though v0-2 are refused.
        expected = {18: (0, 4), 3: (0, 12), 0: (0, 11), 1: (4, 16), 2: (0, 9), 19: (0, 7), 20: (0, 6),
                    37: (0, 3), 32: (0, 4), 33: (0, 2), 44: (0, 1), 60: (0, 1), 23: (0, 4)}
        for k, v in expected.items():
            assert apis.get(k) == v, "api %d: advertised %s, expected %s" % (k, apis.get(k), v)
        # The client retries with a version it supports on the same connection.
        c.send(kwire.request(18, 0, 100, b""))
        payload = c.recv_frame()
        assert payload is not None, "connection closed after the v99 ApiVersions"
        assert struct.unpack(">ih", payload[:6]) == (100, 0)
    # ApiVersions v3 (flexible request; the response header stays v0).
    with kwire.Conn(kb.bootstrap) as c:
        body = kwire.compact_string("keel-tests") + kwire.compact_string("1.0") + kwire.TAGS
        resp = c.call(18, 3, body, correlation_id=101, flexible=True, resp_flexible=False)
        r = kwire.Reader(resp)
        assert r.i16() == 0
        n = r.uvarint() - 1
        got = {}
        for _ in range(n):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            r.skip_tags()
            got[k] = (lo, hi)
        assert got == apis


def _valid_bodies():
    ts = BASE_TS
    batch = kwire.record_batch([(b"fk", b"fv", [("h", b"1")], ts), (None, b"fv2", [], ts + 1)], ts)
    return {
        (0, 9): kwire.produce_v9_body(FZ, 0, batch),
        (1, 12): kwire.fetch_v12_body(FZ, 0, 0),
        (3, 12): kwire.metadata_v12_body([FZ, PROTECTED]),
    }


def test_garbage_bodies_for_known_apis(kb):
    rng = random.Random(20240601)
    valid = _valid_bodies()
    # The valid bodies are understood (so the mutations start from real requests).
    with kwire.Conn(kb.bootstrap) as c:
        for (api, ver), body in valid.items():
            resp = c.call(api, ver, body, correlation_id=1, flexible=True)
            assert len(resp) > 4
            if api == 1:  # Fetch v12: throttle, error_code, session_id (no fetch sessions: 0)
                r = kwire.Reader(resp)
                r.i32()
                assert (r.i16(), r.i32()) == (0, 0)
    deadline = time.monotonic() + 120
    answered = closed = silent = 0
    conn = None
    try:
        for it in range(200):
            for (api, ver), body in valid.items():
                assert time.monotonic() < deadline, "fuzzing took too long (%d answered, %d closed, %d silent)" % (
                    answered, closed, silent)
                if it % 2 == 0:
                    garbage = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 400)))
                else:
                    g = bytearray(body)
                    for _ in range(rng.randrange(1, 6)):
                        choice = rng.random()
                        if choice < 0.6 and g:
                            g[rng.randrange(len(g))] = rng.getrandbits(8)
                        elif choice < 0.8 and g:
                            del g[rng.randrange(len(g)):]
                        else:
                            pos = rng.randrange(len(g) + 1)
                            g[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 9)))
                    garbage = bytes(g)
                if conn is None:
                    conn = kwire.Conn(kb.bootstrap, timeout=5.0)
                corr = it * 10 + api
                conn.sock.settimeout(0.5 if api == 1 else 3.0)
                try:
                    conn.send(kwire.request(api, ver, corr, garbage, flexible=True))
                    payload = conn.recv_frame()
                except socket.timeout:
                    payload = "silent"
                except (BrokenPipeError, ConnectionResetError):
                    payload = None
                if payload is None:
                    closed += 1
                    conn.close()
                    conn = None
                elif payload == "silent":
                    silent += 1  # e.g. a long max_wait Fetch or acks=0: drop the connection
                    conn.close()
                    conn = None
                else:
                    answered += 1
                    assert struct.unpack(">i", payload[:4])[0] == corr, "answer to the wrong request"
    finally:
        if conn is not None:
            conn.close()
    print("fuzz: answered=%d closed=%d silent=%d" % (answered, closed, silent))
    assert answered + closed + silent == 600
    assert closed > 0  # garbage was refused somewhere
    assert_healthy(kb)


def _crc_topic(kb):
    topic = unique("crc")
    a = admin(kb.bootstrap)
    try:
        a.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    finally:
        a.close()
    return topic


def test_corrupt_crc_is_rejected_and_not_appended(kb):
    topic = _crc_topic(kb)
    recs = [(b"k1", b"v1", [("h", b"x")], BASE_TS), (b"k2", b"v2", [], BASE_TS + 5)]
    good = kwire.record_batch(recs, BASE_TS)
    assert kwire.crc32c(good[kwire.BATCH_ATTR_POS:]) == struct.unpack(">I", good[kwire.BATCH_CRC_POS:kwire.BATCH_ATTR_POS])[0]

    def produce(batch, corr):
        with kwire.Conn(kb.bootstrap) as c:
            return kwire.parse_produce_v3_response(
                c.call(0, 3, kwire.produce_v3_body(topic, 0, batch), correlation_id=corr))[(topic, 0)]

    # The same encoder's valid batch is accepted: offsets 0..1.
    assert produce(good, 1) == (0, 0)
    assert end_offsets(kb.bootstrap, topic, [0]) == {0: 2}

    corruptions = {
        "record byte": len(good) - 3,            # inside the last record
        "attributes": kwire.BATCH_ATTR_POS + 1,   # covered by the CRC
        "crc field": kwire.BATCH_CRC_POS,         # the checksum itself
        "base timestamp": kwire.BATCH_ATTR_POS + 2 + 4 + 3,
    }
    for i, (what, pos) in enumerate(corruptions.items()):
        bad = bytearray(good)
        bad[pos] ^= 0x5A
        err, base = produce(bytes(bad), 10 + i)
        assert err == 2, "%s corrupted: expected CORRUPT_MESSAGE (2), got %d" % (what, err)
        assert base == -1
        assert end_offsets(kb.bootstrap, topic, [0]) == {0: 2}, "%s: a corrupt batch was appended" % what

    # Broken lengths are refused too (some non-zero error) and append nothing.
    too_long = bytearray(good)
    too_long[8:12] = struct.pack(">i", len(good) - 12 + 100)
    too_short = bytearray(good)
    too_short[8:12] = struct.pack(">i", len(good) - 12 - 7)
    for i, bad in enumerate((too_long, too_short, good[:-4], good + b"\x00\x00\x00")):
        err, _ = produce(bytes(bad), 20 + i)
        assert err != 0, "malformed batch #%d accepted" % i
        assert end_offsets(kb.bootstrap, topic, [0]) == {0: 2}

    # A valid batch afterwards continues at offset 2: nothing corrupt took an offset.
    more = kwire.record_batch([(b"k3", b"v3", [], BASE_TS + 9)], BASE_TS + 9)
    assert produce(more, 30) == (0, 2)
    got = consume_all(kb.bootstrap, topic, [0])[0]
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (0, b"k1", b"v1", [("h", b"x")], BASE_TS), (1, b"k2", b"v2", [], BASE_TS + 5),
        (2, b"k3", b"v3", [], BASE_TS + 9)]
    assert_healthy(kb)


@pytest.mark.parametrize("name", ["../escape", "a/b", ".", "..", "bad name", "x" * 250, "tab\tname"])
def test_invalid_topic_names_rejected(kb, name):
    before = set(os.listdir(kb.data_dir))
    a = admin(kb.bootstrap)
    try:
        with pytest.raises(Errors.InvalidTopicError):
            a.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})
        assert name not in a.list_topics()
    finally:
        a.close()
    # Metadata with auto-creation requested must not create it either.
    md = kwire.metadata(kb.bootstrap, [name], allow_auto_create=True)
    assert md["topics"][name]["error_code"] in (17, 3), md["topics"][name]  # INVALID_TOPIC / UNKNOWN
    # And a raw Produce to it creates nothing.
    batch = kwire.record_batch([(b"k", b"v", [], BASE_TS)], BASE_TS)
    with kwire.Conn(kb.bootstrap) as c:
        err, _ = kwire.parse_produce_v3_response(c.call(0, 3, kwire.produce_v3_body(name, 0, batch)))[(name, 0)]
    assert err != 0
    assert set(os.listdir(kb.data_dir)) == before
    assert not os.path.exists(os.path.join(os.path.dirname(kb.data_dir), "escape-0"))
    assert name not in kwire.metadata(kb.bootstrap, None)["topics"]
