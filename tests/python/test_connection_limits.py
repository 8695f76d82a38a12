"""Kafka's connection limits (issue 19): `max.connections.per.ip` and `max.connections` close a
connection past the limit at once, and a place comes back when a connection closes; the
inter-broker listener is not held back by `max.connections`; `connections.max.idle.ms` closes a
connection that is silent with nothing in flight, and not one that keeps asking. Hand-encoded
ApiVersions requests; every wait bounded."""

import struct
import time

import kwire as w

CLIENT = "CLIENT"


def api_versions_answered(c):
    """True when an ApiVersions v0 is answered on the connection."""
    try:
        c.send(w.request(18, 0, 11, b""))
        payload = c.recv_frame()
    except OSError:
        return False
    return payload is not None and struct.unpack(">i", payload[:4])[0] == 11


def test_per_ip_and_broker_limits(keel_factory):
    b = keel_factory({"max.connections.per.ip": 4, "max.connections": 2},
                     listeners={CLIENT: "PLAINTEXT"})
    client = b.listener_bootstrap(CLIENT)
    # max.connections: two client connections, the third is closed at once.
    first, second = w.Conn(client), w.Conn(client)
    assert api_versions_answered(first) and api_versions_answered(second)
    third = w.Conn(client)
    assert not api_versions_answered(third)
    third.close()
    # The inter-broker listener (PLAINTEXT here) still takes connections, up to the per-IP limit.
    inter = [w.Conn(b.bootstrap) for _ in range(2)]
    assert all(api_versions_answered(c) for c in inter)
    over = w.Conn(b.bootstrap)
    assert not api_versions_answered(over), "the fifth from 127.0.0.1 is over the per-IP limit"
    over.close()
    # A place comes back when a connection closes (its close is seen by the broker first).
    first.close()
    deadline = time.monotonic() + 5
    ok = False
    while not ok and time.monotonic() < deadline:
        c = w.Conn(client)
        ok = api_versions_answered(c)
        if ok:
            assert api_versions_answered(c), "an admitted connection keeps serving"
        c.close()
        time.sleep(0.1)
    assert ok
    for c in [second] + inter:
        c.close()


def test_idle_connections_are_closed(keel_factory):
    b = keel_factory({"connections.max.idle.ms": 1500})
    silent = w.Conn(b.bootstrap)
    busy = w.Conn(b.bootstrap)
    started = time.monotonic()
    closed_at = None
    while time.monotonic() - started < 4.0:
        assert api_versions_answered(busy), "a connection that keeps asking stays open"
        if closed_at is None and silent.wait_closed(0.4):
            closed_at = time.monotonic() - started
    assert closed_at is not None and 1.3 <= closed_at <= 3.5, closed_at
    silent.close()
    busy.close()
