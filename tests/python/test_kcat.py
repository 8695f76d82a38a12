"""kcat (librdkafka 2.0.x) against the real keel binary: bulk produce/consume with every codec,
keys, headers, metadata listing, start offsets, offsets by timestamp."""

import re
import shutil
import subprocess

import pytest

from conftest import unique
from kutil import admin, end_offsets, producer

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
N = 100_000
NPART = 4
BASE_TS = 1_650_000_000_000

pytestmark = pytest.mark.skipif(not shutil.which("kcat") and not __import__("os").path.exists(KCAT),
                                reason="kcat not installed")


def kcat(bootstrap, *args, input=None, timeout=120):
    cmd = [KCAT, "-b", bootstrap, "-X", "socket.timeout.ms=20000", "-X", "api.version.request=true"] + list(args)
    p = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    assert p.returncode == 0, "kcat %s failed (%d): %s" % (args, p.returncode, p.stderr.decode()[-2000:])
    return p.stdout.decode()


def create(bootstrap, topic, partitions):
    a = admin(bootstrap)
    try:
        r = a.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}})
        assert r["topics"][0]["error_code"] == 0
    finally:
        a.close()


def consume(bootstrap, topic, fmt, *extra):
    out = kcat(bootstrap, "-C", "-t", topic, "-e", "-q", "-f", fmt, *extra)
    return [line for line in out.split("\n") if line != ""]


def check_dense_per_partition(rows, nparts):
    """rows: [(partition, offset, ...)] in kcat output order -> {partition: [row...]}"""
    byp = {}
    for r in rows:
        byp.setdefault(r[0], []).append(r)
    assert set(byp) <= set(range(nparts))
    for p, rs in byp.items():
        assert [r[1] for r in rs] == list(range(len(rs))), "partition %d offsets not dense from 0" % p
    return byp


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_100k_values_with_headers(keel, codec):
    topic = unique("kcat-%s" % codec)
    create(keel.bootstrap, topic, NPART)
    data = "".join("%d\n" % i for i in range(1, N + 1)).encode()
    kcat(keel.bootstrap, "-P", "-t", topic, "-z", codec, "-H", "h1=v1", "-H", "codec=%s" % codec,
         "-X", "linger.ms=20", input=data)
    rows = []
    for line in consume(keel.bootstrap, topic, "%p|%o|%k|%s|%h\\n", "-o", "beginning"):
        p, o, k, s, h = line.split("|")
        rows.append((int(p), int(o), k, int(s), h))
    assert len(rows) == N
    assert sorted(r[3] for r in rows) == list(range(1, N + 1))
    assert all(r[2] == "" for r in rows)  # no keys
    assert all(r[4] == "h1=v1,codec=%s" % codec for r in rows)
    byp = check_dense_per_partition(rows, NPART)
    for p, rs in byp.items():  # one producer: input order is kept within each partition
        vals = [r[3] for r in rs]
        assert vals == sorted(vals), "partition %d reordered" % p
    ends = end_offsets(keel.bootstrap, topic, range(NPART))
    assert ends == {p: len(byp.get(p, [])) for p in range(NPART)}
    assert sum(ends.values()) == N


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_100k_keyed(keel, codec):
    topic = unique("kcatk-%s" % codec)
    create(keel.bootstrap, topic, NPART)
    data = "".join("key%d:val%d-%s\n" % (i % 997, i, "y" * (i % 13)) for i in range(N)).encode()
    kcat(keel.bootstrap, "-P", "-t", topic, "-z", codec, "-K:", "-X", "linger.ms=20", input=data)
    rows = []
    for line in consume(keel.bootstrap, topic, "%p|%o|%k|%s\\n", "-o", "beginning"):
        p, o, k, s = line.split("|")
        rows.append((int(p), int(o), k, s))
    assert len(rows) == N
    got = sorted((r[2], r[3]) for r in rows)
    want = sorted(("key%d" % (i % 997), "val%d-%s" % (i, "y" * (i % 13))) for i in range(N))
    assert got == want
    byp = check_dense_per_partition(rows, NPART)
    key_part = {}
    for p, o, k, s in rows:  # the key hash puts a key in exactly one partition
        assert key_part.setdefault(k, p) == p, "key %s in two partitions" % k
    assert len(byp) > 1, "all keys in one partition"
    for p, rs in byp.items():
        idx = [int(r[3].split("-")[0][3:]) for r in rs]
        assert idx == sorted(idx), "partition %d reordered" % p


def test_kcat_metadata_lists_topics(keel):
    names = {unique("meta-a"): 1, unique("meta-b"): 4, unique("meta-c"): 7}
    for t, n in names.items():
        create(keel.bootstrap, t, n)
    out = kcat(keel.bootstrap, "-L")
    assert re.search(r"1 brokers:\s*\n\s*broker 0 at 127\.0\.0\.1:%d" % keel.port, out), out
    for t, n in names.items():
        m = re.search(r'topic "%s" with (\d+) partitions:\n((?:\s+partition .*\n)*)' % re.escape(t), out)
        assert m, "topic %s missing from kcat -L:\n%s" % (t, out)
        assert int(m.group(1)) == n
        parts = re.findall(r"partition (\d+), leader (-?\d+), replicas: ([\d,]*), isrs: ([\d,]*)", m.group(2))
        assert sorted(int(p[0]) for p in parts) == list(range(n))
        assert all(p[1:] == ("0", "0", "0") for p in parts), parts
    # A single topic query lists only that topic.
    t = next(iter(names))
    one = kcat(keel.bootstrap, "-L", "-t", t)
    assert one.count('topic "') == 1 and ('topic "%s" with 1 partitions' % t) in one


def test_kcat_start_offsets(keel):
    topic = unique("kcat-offsets")
    create(keel.bootstrap, topic, 2)
    kcat(keel.bootstrap, "-P", "-t", topic, "-p", "0", "-K:",
         input="".join("k%d:m%d\n" % (i, i) for i in range(50)).encode())
    kcat(keel.bootstrap, "-P", "-t", topic, "-p", "1",
         input="".join("p1-%d\n" % i for i in range(7)).encode())
    fmt = "%p|%o|%k|%s\\n"

    def rows(*extra):
        return [tuple(l.split("|")) for l in consume(keel.bootstrap, topic, fmt, *extra)]

    assert rows("-p", "0", "-o", "beginning") == [("0", str(i), "k%d" % i, "m%d" % i) for i in range(50)]
    assert rows("-p", "0", "-o", "end") == []
    assert rows("-p", "0", "-o", "-5") == [("0", str(i), "k%d" % i, "m%d" % i) for i in range(45, 50)]
    assert rows("-p", "0", "-o", "42") == [("0", str(i), "k%d" % i, "m%d" % i) for i in range(42, 50)]
    assert rows("-p", "0", "-o", "10", "-c", "3") == [("0", str(i), "k%d" % i, "m%d" % i) for i in range(10, 13)]
    assert rows("-p", "1", "-o", "-2") == [("1", "5", "", "p1-5"), ("1", "6", "", "p1-6")]
    # -o -N on every partition: the last N of each.
    assert sorted(rows("-o", "-3")) == sorted(
        [("0", str(i), "k%d" % i, "m%d" % i) for i in range(47, 50)]
        + [("1", str(i), "", "p1-%d" % i) for i in range(4, 7)])


def test_kcat_query_offsets_by_timestamp(keel):
    topic = unique("kcat-times")
    create(keel.bootstrap, topic, 2)
    prod = producer(keel.bootstrap, acks="all")
    try:
        for i in range(30):
            prod.send(topic, value=b"t%d" % i, partition=0, timestamp_ms=BASE_TS + 100 * i)
        for i in range(5):
            prod.send(topic, value=b"u%d" % i, partition=1, timestamp_ms=BASE_TS + 1000 * i)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)

    def q(partition, ts):
        out = kcat(keel.bootstrap, "-Q", "-t", "%s:%d:%d" % (topic, partition, ts))
        m = re.search(r"%s \[%d\] offset (-?\d+)" % (re.escape(topic), partition), out)
        assert m, out
        return int(m.group(1))

    assert q(0, BASE_TS - 1) == 0
    assert q(0, BASE_TS) == 0
    assert q(0, BASE_TS + 1200) == 12
    assert q(0, BASE_TS + 1201) == 13
    assert q(0, BASE_TS + 2900) == 29
    assert q(0, BASE_TS + 2901) == -1      # nothing at or after: librdkafka reports -1 (end)
    assert q(1, BASE_TS + 2500) == 3
    assert q(1, BASE_TS + 4000) == 4
    # Consuming from the queried offset returns the record with that timestamp.
    rows = consume(keel.bootstrap, topic, "%o|%T|%s\\n", "-p", "0", "-o", str(q(0, BASE_TS + 1750)), "-c", "1")
    assert rows == ["18|%d|t18" % (BASE_TS + 1800)]
