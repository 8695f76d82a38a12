"""Thread-per-core ownership seen from outside: every shard owns partitions, requests that
arrive on a non-owner shard are forwarded (cross-shard hops), and the per-shard counters add up
to what the clients did."""

import kwire
from conftest import unique
from kutil import admin, consume_all, end_offsets, wait_until

BASE_TS = 1_680_000_000_000


def test_partitions_spread_over_shards_and_requests_forwarded(fresh_keel):
    b = fresh_keel
    topic, other = unique("own"), unique("own-other")
    a = admin(b.bootstrap)
    try:
        a.create_topics({topic: {"num_partitions": 8, "replication_factor": 1},
                         other: {"num_partitions": 3, "replication_factor": 1}})
    finally:
        a.close()
    wait_until(lambda: sum(b.metrics().by_shard("keel_partitions_owned").values()) == 11, 10,
               msg="11 partitions owned")
    m0 = b.metrics()
    owned = m0.by_shard("keel_partitions_owned")
    assert set(owned) == {0, 1}, owned
    assert all(v >= 1 for v in owned.values()), "a shard owns no partition: %s" % owned
    assert sum(owned.values()) == 8 + 3

    # One connection produces to every partition, one partition per request.
    counts = {p: 5 * (p + 1) for p in range(8)}
    with kwire.Conn(b.bootstrap) as c:
        c.send(kwire.request(18, 0, 1, b""))
        assert c.recv_frame() is not None
        conns = b.metrics().by_shard("keel_connections")
        conn_shard = [s for s, v in conns.items() if v == 1]
        assert sum(conns.values()) == 1 and len(conn_shard) == 1, conns
        conn_shard = conn_shard[0]
        for p in range(8):
            recs = [(b"k%d-%d" % (p, i), b"v%d-%d" % (p, i), [("p", b"%d" % p)], BASE_TS + i)
                    for i in range(counts[p])]
            batch = kwire.record_batch(recs, BASE_TS)
            resp = kwire.parse_produce_v3_response(
                c.call(0, 3, kwire.produce_v3_body(topic, p, batch), correlation_id=100 + p))
            assert resp == {(topic, p): (0, 0)}, resp
    m1 = b.metrics()

    total = sum(counts.values())
    assert m1.sum("keel_produce_records_total") - m0.sum("keel_produce_records_total") == total
    assert m1.sum("keel_produce_batches_total") - m0.sum("keel_produce_batches_total") == 8
    produce_reqs = {s: m1.by_shard("keel_requests_total", api="Produce").get(s, 0)
                    - m0.by_shard("keel_requests_total", api="Produce").get(s, 0) for s in (0, 1)}
    assert produce_reqs == {conn_shard: 8, 1 - conn_shard: 0}, produce_reqs
    # The other shard owns owned[other] of the 11 partitions; at least one of the 8 requests
    # went to a partition it owns, and every such request was forwarded.
    hops = m1.sum("keel_cross_shard_hops_total") - m0.sum("keel_cross_shard_hops_total")
    assert hops >= 1, "no cross-shard hop although both shards own partitions of %s" % topic
    jobs = m1.by_shard("keel_cross_shard_jobs_total").get(1 - conn_shard, 0) - \
        m0.by_shard("keel_cross_shard_jobs_total").get(1 - conn_shard, 0)
    assert jobs >= 1, "the owner shard ran no call for the connection's shard"

    # The data is all there, at the offsets the owners assigned.
    assert end_offsets(b.bootstrap, topic, range(8)) == counts
    got = consume_all(b.bootstrap, topic, list(range(8)))
    for p in range(8):
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got[p]] == \
            [(i, b"k%d-%d" % (p, i), b"v%d-%d" % (p, i), [("p", b"%d" % p)], BASE_TS + i)
             for i in range(counts[p])]
    m2 = b.metrics()
    assert m2.sum("keel_fetch_bytes_total") > m1.sum("keel_fetch_bytes_total")
    assert m2.sum("keel_produce_records_total") == m1.sum("keel_produce_records_total")


def test_connections_spread_over_shards(keel):
    before = keel.metrics()
    conns = [kwire.Conn(keel.bootstrap) for _ in range(32)]
    try:
        for i, c in enumerate(conns):  # make sure each was accepted and served
            c.send(kwire.request(18, 0, 500 + i, b""))
            assert c.recv_frame() is not None
        during = keel.metrics()
        open_now = during.by_shard("keel_connections")
        assert sum(open_now.values()) >= 32
        accepted = {s: during.by_shard("keel_connections_total").get(s, 0)
                    - before.by_shard("keel_connections_total").get(s, 0) for s in (0, 1)}
        assert sum(accepted.values()) >= 32
        assert all(v >= 1 for v in accepted.values()), \
            "SO_REUSEPORT should spread 32 connections over both shards: %s" % accepted
        api = during.sum("keel_requests_total", api="ApiVersions") - before.sum("keel_requests_total", api="ApiVersions")
        assert api >= 32
    finally:
        for c in conns:
            c.close()
