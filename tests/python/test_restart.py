"""Durability across restarts: every acknowledged record (acks=all) is read back at the same
offset with the same content after kill -9 and after a clean SIGTERM restart, and new records
continue the offsets densely."""

import kwire
from conftest import unique
from kutil import admin, consume_all, end_offsets, producer

N = 5000
NPART = 4
BASE_TS = 1_690_000_000_000


def produce(bootstrap, topic, start, count, codec=None):
    """Produce records start..start+count-1 to explicit partitions; returns
    {(partition, offset): (key, value, headers, timestamp)} built from the acknowledgements."""
    prod = producer(bootstrap, acks="all", compression_type=codec, batch_size=8192)
    try:
        sent = []
        for i in range(start, start + count):
            p = i % NPART
            key = b"key-%06d" % i
            value = b"value-%06d-" % i + bytes([i % 251]) * (i % 97)
            headers = [("i", b"%d" % i)] + ([("odd", b"")] if i % 2 else [])
            ts = BASE_TS + i
            sent.append((prod.send(topic, key=key, value=value, headers=headers, partition=p, timestamp_ms=ts),
                         (p, key, value, headers, ts)))
        prod.flush(timeout=60)
        out = {}
        for fut, (p, key, value, headers, ts) in sent:
            m = fut.get(timeout=30)
            assert m.partition == p
            assert (p, m.offset) not in out
            out[(p, m.offset)] = (key, value, headers, ts)
        return out
    finally:
        prod.close(timeout=10)


def read_all(bootstrap, topic):
    got = consume_all(bootstrap, topic, list(range(NPART)), timeout_s=90)
    out = {}
    for p, recs in got.items():
        assert [r.offset for r in recs] == list(range(len(recs))), "partition %d offsets not dense" % p
        for r in recs:
            out[(p, r.offset)] = (r.key, r.value, [tuple(h) for h in r.headers], r.timestamp)
    return out, got


def leader_epochs(bootstrap, topic):
    md = kwire.metadata(bootstrap, [topic])
    t = md["topics"][topic]
    assert t["error_code"] == 0
    return {p: v["leader_epoch"] for p, v in t["partitions"].items()}


def expected_dense(acks):
    """The acknowledged offsets of each partition must be exactly 0..n-1."""
    per = {}
    for (p, o) in acks:
        per.setdefault(p, []).append(o)
    for p, offs in per.items():
        assert sorted(offs) == list(range(len(offs))), "acked offsets of partition %d not dense" % p
    return {p: len(v) for p, v in per.items()}


def test_kill9_and_clean_restart_keep_every_acked_record(fresh_keel):
    b = fresh_keel
    topic = unique("durable")
    a = admin(b.bootstrap)
    try:
        r = a.create_topics({topic: {"num_partitions": NPART, "replication_factor": 1,
                                     "configs": {"segment.bytes": "65536"}}})
        assert r["topics"][0]["error_code"] == 0, r
    finally:
        a.close()

    acked = produce(b.bootstrap, topic, 0, N // 2)
    acked.update(produce(b.bootstrap, topic, N // 2, N - N // 2, codec="lz4"))
    assert len(acked) == N
    counts = expected_dense(acked)
    assert end_offsets(b.bootstrap, topic, range(NPART)) == counts
    before, _ = read_all(b.bootstrap, topic)
    assert before == acked
    epochs0 = leader_epochs(b.bootstrap, topic)

    # Crash: no shutdown, nothing flushed on the way out.
    b.kill9_and_restart()
    assert end_offsets(b.bootstrap, topic, range(NPART)) == counts
    after_crash, _ = read_all(b.bootstrap, topic)
    assert after_crash == acked
    epochs1 = leader_epochs(b.bootstrap, topic)
    assert all(epochs1[p] > epochs0[p] for p in range(NPART)), (epochs0, epochs1)

    # Produce across the crash boundary: offsets continue densely.
    more = produce(b.bootstrap, topic, N, 400, codec="zstd")
    for (p, o) in more:
        assert o >= counts[p]
    acked.update(more)
    counts = expected_dense(acked)

    # Clean restart.
    rc = b.restart()
    assert rc == 0, "keel exited with %s on SIGTERM" % rc
    assert end_offsets(b.bootstrap, topic, range(NPART)) == counts
    after_clean, got = read_all(b.bootstrap, topic)
    assert after_clean == acked
    epochs2 = leader_epochs(b.bootstrap, topic)
    assert all(epochs2[p] > epochs1[p] for p in range(NPART)), (epochs1, epochs2)
    # Records keep the leader epoch of the term that appended them.
    for p, recs in got.items():
        eps = [r.leader_epoch for r in recs]
        assert eps == sorted(eps), "leader epochs in partition %d go backwards" % p
        assert eps[0] == epochs0[p] and eps[-1] == epochs1[p], (p, eps[0], eps[-1], epochs0, epochs1)

    final = produce(b.bootstrap, topic, N + 400, 200)
    for (p, o) in final:
        assert o >= counts[p]
    acked.update(final)
    counts = expected_dense(acked)
    assert sum(counts.values()) == N + 600
    assert read_all(b.bootstrap, topic)[0] == acked


def test_topics_and_configs_survive_restart(fresh_keel):
    b = fresh_keel
    keep, gone = unique("keep"), unique("gone")
    a = admin(b.bootstrap)
    try:
        a.create_topics({keep: {"num_partitions": 3, "replication_factor": 1,
                                "configs": {"retention.ms": "7200000", "flush.policy": "interval"}},
                         gone: {"num_partitions": 2, "replication_factor": 1}})
        a.delete_topics([gone])
    finally:
        a.close()
    b.kill9_and_restart()
    md = kwire.metadata(b.bootstrap, None)
    assert keep in md["topics"] and gone not in md["topics"]
    assert sorted(md["topics"][keep]["partitions"]) == [0, 1, 2]
    from kafka.admin import ConfigResource, ConfigResourceType
    a = admin(b.bootstrap)
    try:
        cfg = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, keep)])["topic"][keep]
    finally:
        a.close()
    assert {k: v["value"] for k, v in cfg.items()} == {"retention.ms": "7200000", "flush.policy": "interval"}


def _produce_one(bootstrap, topic):
    return produce(bootstrap, topic, 0, NPART)


def test_clean_restart_while_a_client_is_connected(fresh_keel):
    """A SIGTERM restart with a client still connected (the usual case in production) must
    come back on the same port. The broker closes that connection on shutdown, which leaves a
    server-side TCP socket (FIN_WAIT2/TIME_WAIT) on the Kafka port for up to 60 s."""
    b = fresh_keel
    topic = unique("connected")
    a = admin(b.bootstrap)
    try:
        a.create_topics({topic: {"num_partitions": NPART, "replication_factor": 1}})
    finally:
        a.close()
    acked = _produce_one(b.bootstrap, topic)
    with kwire.Conn(b.bootstrap) as idle:
        assert kwire.metadata(b.bootstrap, [topic])["topics"][topic]["error_code"] == 0
        idle.send(kwire.request(18, 0, 1, b""))
        assert idle.recv_frame() is not None
        rc = b.restart()          # the idle client is still connected here
        assert rc == 0
        assert idle.wait_closed(5), "the broker did not close the client's connection on shutdown"
    assert read_all(b.bootstrap, topic)[0] == acked


def test_clean_restart_after_a_metrics_scrape(fresh_keel):
    """After GET /metrics (the admin endpoint closes the HTTP connection first, leaving a
    server-side TIME_WAIT on the admin port), a restart must still bind the admin port."""
    b = fresh_keel
    m = b.metrics()
    assert set(m.by_shard("keel_partitions_owned")) == {0, 1}
    rc = b.restart()
    assert rc == 0
    assert set(b.metrics().by_shard("keel_partitions_owned")) == {0, 1}
