"""Sarama, the Go Kafka client, as Debian bookworm packages it (golang-github-shopify-sarama-dev
1.22.1), against the real keel binary. tests/sarama/keel_sarama.go is built once per module,
offline, in GOPATH mode from Debian's Go sources (scripts/test.sh installs golang-go and the
Sarama package), and driven as a subprocess that prints JSON lines.

Sarama 1.22 does not negotiate with ApiVersions: the Kafka version it is configured for fixes
the request versions it sends:
  * 0.8.2.0 (its default): Metadata v0, ListOffsets v0, Produce v0 (magic-0 message sets),
    FindCoordinator v0; ClusterAdmin refuses to start (Sarama itself, before sending anything);
    consumer groups are refused by Sarama (they need >= 0.10.2).
  * 0.11.0.0: Metadata v1, Produce v3 (record batches, headers), Fetch v4, ListOffsets v1,
    FindCoordinator v0, JoinGroup v1, SyncGroup v0, Heartbeat v0, LeaveGroup v0,
    OffsetFetch v1, OffsetCommit v1; admin: CreateTopics v1, DeleteTopics v1, Metadata v4 and
    (ListTopics) v0, DescribeConfigs v0, AlterConfigs v0.
  * 2.2.0 (the newest it knows): as 0.11 but Metadata v5, CreateTopics v2; Sarama lets zstd
    through, still over Produce v3, which Kafka (and Keel) refuse: zstd needs Produce v7.

The tests check content: what kafka-python reads back (keys, values, headers, offsets), the
codec of the stored batches (a raw Fetch v4), what a two-member group reads and commits, and
what the admin calls return."""

import json
import os
import shutil
import struct
import subprocess
import tempfile
import time

import pytest

import kwire
from conftest import unique
from kutil import admin, consume_all, end_offsets, producer

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "sarama", "keel_sarama.go"))
DEBIAN_GOPATH = "/usr/share/gocode"
SARAMA_SRC = os.path.join(DEBIAN_GOPATH, "src", "github.com", "Shopify", "sarama")

V0_8_2 = "0.8.2.0"
V0_11 = "0.11.0.0"
V2_2 = "2.2.0.0"  # the newest KafkaVersion Sarama 1.22 knows (MaxVersion 2.2.0)

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# -- building and running the Go program ----------------------------------------------------------
@pytest.fixture(scope="module")
def sarama_bin():
    go = shutil.which("go")
    if go is None:
        pytest.fail("`go` not found: install Debian's golang-go and golang-github-shopify-sarama-dev "
                    "(scripts/test.sh does)")
    if not os.path.isdir(SARAMA_SRC):
        pytest.fail("Sarama sources not found at %s: install Debian's golang-github-shopify-sarama-dev "
                    "(scripts/test.sh does)" % SARAMA_SRC)
    work = tempfile.mkdtemp(prefix="keel-sarama-")
    out = os.path.join(work, "keel_sarama")
    # Offline, GOPATH mode, only Debian's packaged sources: no module proxy, no network.
    env = dict(os.environ,
               GO111MODULE="off",
               GOPATH="%s:%s" % (DEBIAN_GOPATH, os.path.join(work, "gopath")),
               GOCACHE=os.environ.get("KEEL_SARAMA_GOCACHE")
               or os.path.join(tempfile.gettempdir(), "keel-sarama-gocache"),
               GOFLAGS="", GOPROXY="off", GOTOOLCHAIN="local", CGO_ENABLED="1",
               CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations")
    r = subprocess.run([go, "build", "-o", out, SRC], cwd=os.path.dirname(SRC), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "go build failed:\n%s\n%s" % (r.stdout, r.stderr)
    yield out
    shutil.rmtree(work, ignore_errors=True)


class Run:
    def __init__(self, args, rc, stdout, stderr):
        self.args, self.rc, self.stdout, self.stderr = args, rc, stdout, stderr
        self.events = []
        for line in stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def of(self, event):
        return [e for e in self.events if e.get("event") == event]

    @property
    def errors(self):
        return self.of("error")

    def __repr__(self):
        return "keel_sarama %s -> rc %s\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(self.args), self.rc, self.stdout[-6000:], self.stderr[-3000:])


def sarama_args(bin_path, sub, bootstrap, version, *args, timeout_s=30):
    return [bin_path, sub, "-brokers", bootstrap, "-version", version,
            "-timeout", "%ds" % timeout_s] + [str(a) for a in args]


def run_sarama(bin_path, sub, bootstrap, version, *args, timeout_s=30):
    argv = sarama_args(bin_path, sub, bootstrap, version, *args, timeout_s=timeout_s)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 15)
    return Run(argv[1:], r.returncode, r.stdout, r.stderr)


def start_sarama(bin_path, sub, bootstrap, version, *args, timeout_s=30):
    argv = sarama_args(bin_path, sub, bootstrap, version, *args, timeout_s=timeout_s)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.argv = argv
    return p


def finish(p, timeout_s):
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=10)
    return Run(p.argv[1:], p.returncode, out, err)


# -- kafka-python and raw-protocol helpers ----------------------------------------------------------
def create_topic(bootstrap, name, partitions, configs=None):
    a = admin(bootstrap)
    try:
        spec = {"num_partitions": partitions, "replication_factor": 1}
        if configs:
            spec["configs"] = configs
        r = a.create_topics({name: spec})
    finally:
        a.close()
    assert r["topics"][0]["error_code"] == 0, r


def fetch_v4_batches(bootstrap, topic, partition, offset=0):
    """One Fetch v4 (Sarama's version at 0.11+) at `offset`: the record batches as stored,
    [(base_offset, magic, attributes, record_count)], and the high watermark."""
    part = kwire.i32(partition) + kwire.i64(offset) + kwire.i32(1 << 20)
    body = (kwire.i32(-1) + kwire.i32(100) + kwire.i32(1) + kwire.i32(1 << 20) + kwire.i8(0)
            + kwire.array([kwire.string(topic) + kwire.array([part])]))
    with kwire.Conn(bootstrap) as c:
        resp = c.call(1, 4, body)
    r = kwire.Reader(resp)
    r.i32()  # throttle
    assert r.i32() == 1
    assert r.string() == topic
    assert r.i32() == 1
    assert r.i32() == partition
    err = r.i16()
    assert err == 0, "Fetch v4 error code %d" % err
    hw = r.i64()
    r.i64()  # last stable offset
    n_aborted = r.i32()
    for _ in range(max(n_aborted, 0)):
        r.i64()
        r.i64()
    size = r.i32()
    data = r.take(size) if size > 0 else b""
    batches = []
    pos = 0
    while pos + 61 <= len(data):
        base_offset, batch_len = struct.unpack(">qi", data[pos:pos + 12])
        if pos + 12 + batch_len > len(data):
            break  # a partial batch at the end of the response
        magic = data[pos + 16]
        attributes = struct.unpack(">h", data[pos + 21:pos + 23])[0]
        count = struct.unpack(">i", data[pos + 57:pos + 61])[0]
        batches.append((base_offset, magic, attributes, count))
        pos += 12 + batch_len
    return batches, hw


def check_produced_and_stored(keel, bin_path, version, codec, topic, n=40, partitions=2):
    """Produces n records with Sarama (record i to partition i % partitions), then checks what
    kafka-python reads back and the codec of the stored batches."""
    headers = version != V0_8_2
    r = run_sarama(bin_path, "produce", keel.bootstrap, version, "-topic", topic, "-codec", codec,
                   "-n", n, "-partitions", partitions)
    assert r.rc == 0 and not r.errors, r
    produced = r.of("produced")
    assert len(produced) == n, r
    assert r.of("produce-done")[0]["ok"] == n

    by_pos = {}
    for e in produced:
        i = int(e["key"].split("-")[1])
        assert e["key"] == "k-%d" % i and e["value"] == "v-%d" % i
        assert e["partition"] == i % partitions, e
        if headers:
            assert e["headers"] == {"h": str(i)}
        by_pos[(e["partition"], e["offset"])] = i
    # The acknowledged offsets are dense from 0 in each partition.
    for p in range(partitions):
        offs = sorted(o for (pp, o) in by_pos if pp == p)
        assert offs == list(range(len([i for i in range(n) if i % partitions == p]))), (p, offs)

    got = consume_all(keel.bootstrap, topic, list(range(partitions)), timeout_s=30)
    assert sum(len(v) for v in got.values()) == n
    for p, recs in got.items():
        for rec in recs:
            i = by_pos[(p, rec.offset)]
            assert rec.key == ("k-%d" % i).encode()
            assert rec.value == ("v-%d" % i).encode()
            if headers:
                assert [(hk, hv) for hk, hv in rec.headers] == [("h", str(i).encode())]
        assert [rec.offset for rec in recs] == list(range(len(recs)))

    # Stored as sent: magic-2 batches with the producer's codec.
    for p in range(partitions):
        batches, hw = fetch_v4_batches(keel.bootstrap, topic, p)
        assert hw == len(got[p])
        assert batches, "no batch in partition %d" % p
        assert sum(b[3] for b in batches) == len(got[p]), batches
        for base, magic, attrs, _count in batches:
            assert magic == 2, batches
            assert attrs & 0x7 == CODEC_IDS[codec], (
                "partition %d batch at %d stored with codec %d, Sarama sent %s"
                % (p, base, attrs & 0x7, codec))


# -- 0.11.0.0: Produce v3 with every codec 0.11 allows; a two-member group that commits ---------------
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_sarama_0_11_produce_every_codec_read_back(keel, sarama_bin, codec):
    topic = unique("sarama011-%s" % codec)
    create_topic(keel.bootstrap, topic, 2)
    check_produced_and_stored(keel, sarama_bin, V0_11, codec, topic)


def group_records(run):
    return [(e["partition"], e["offset"], e["key"], e["value"]) for e in run.of("record")]


def active_claims(run, topic):
    """The partitions of the (last) generation in which this member consumed."""
    act = [e for e in run.of("claims") if e["active"]]
    assert act, run
    return act[-1]["generation"], sorted(act[-1]["claims"].get(topic, []))


def test_sarama_0_11_two_member_group_commits_and_resumes(keel, sarama_bin):
    """Two Sarama members split a 4-partition topic 2 + 2 and read every record once; what
    they commit (OffsetCommit v1) is what a restarted group resumes from: after 10 more records,
    it reads those 10 and nothing already committed."""
    topic = unique("sarama-group")
    group = unique("sarama-g")
    create_topic(keel.bootstrap, topic, 4)
    r = run_sarama(sarama_bin, "produce", keel.bootstrap, V0_11, "-topic", topic, "-codec", "none",
                   "-n", 40, "-partitions", 4)
    assert r.rc == 0 and len(r.of("produced")) == 40, r

    barrier = tempfile.mkdtemp(prefix="keel-sarama-barrier-")
    try:
        members = [start_sarama(sarama_bin, "consume-group", keel.bootstrap, V0_11, "-topic", topic,
                                "-group", group, "-max", 20, "-commit", "-claims", 2,
                                "-barrier", barrier, "-members", 2, timeout_s=45)
                   for _ in range(2)]
        runs = [finish(m, 60) for m in members]
    finally:
        shutil.rmtree(barrier, ignore_errors=True)
    for run in runs:
        assert run.rc == 0, run

    claimed = []
    all_records = []
    for run in runs:
        _, parts = active_claims(run, topic)
        assert len(parts) == 2, run
        recs = group_records(run)
        # Each member read only its own partitions, 10 records from each.
        assert {p for p, _, _, _ in recs} == set(parts), run
        assert len(recs) == 20, run
        claimed += parts
        all_records += recs
    assert sorted(claimed) == [0, 1, 2, 3]
    assert len(set(all_records)) == len(all_records) == 40
    assert sorted(int(k.split("-")[1]) for _, _, k, _ in all_records) == list(range(40))
    for p, o, k, v in all_records:
        i = int(k.split("-")[1])
        assert (p, o, v) == (i % 4, i // 4, "v-%d" % i)

    # The commits (OffsetCommit v1) landed: Sarama's own OffsetFetch v1 after leaving, and
    # kafka-python's view.
    committed = {}
    for run in runs:
        for e in run.of("committed"):
            assert e["error"] == "", run
            committed[e["partition"]] = max(committed.get(e["partition"], -1), e["offset"])
    assert committed == {0: 10, 1: 10, 2: 10, 3: 10}, (
        "the group's commits (OffsetCommit v1) did not land; errors the members saw: %s"
        % [run.of("error-counts") for run in runs])
    a = admin(keel.bootstrap)
    try:
        offsets = a.list_group_offsets(group)[group]
    finally:
        a.close()
    assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == \
        {0: 10, 1: 10, 2: 10, 3: 10}

    # 10 more records (3, 3, 2, 2 over the partitions); the group, restarted, reads exactly those.
    r = run_sarama(sarama_bin, "produce", keel.bootstrap, V0_11, "-topic", topic, "-codec", "none",
                   "-n", 10, "-start", 40, "-partitions", 4)
    assert r.rc == 0 and len(r.of("produced")) == 10, r
    again = run_sarama(sarama_bin, "consume-group", keel.bootstrap, V0_11, "-topic", topic,
                       "-group", group, "-max", 10, "-commit", "-linger", "1500ms", timeout_s=40)
    assert again.rc == 0, again
    _, parts = active_claims(again, topic)
    assert parts == [0, 1, 2, 3]
    starts = {e["partition"]: e["initial_offset"] for e in again.of("claim-start")}
    assert starts == {0: 10, 1: 10, 2: 10, 3: 10}, again
    recs = group_records(again)
    assert sorted(int(k.split("-")[1]) for _, _, k, _ in recs) == list(range(40, 50)), again
    for p, o, k, v in recs:
        i = int(k.split("-")[1])
        assert (p, o, v) == (i % 4, i // 4, "v-%d" % i)
    assert {e["partition"]: e["offset"] for e in again.of("committed")} == {0: 13, 1: 13, 2: 12, 3: 12}


# -- 2.2.0: zstd, ClusterAdmin ------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["none", "snappy"])
def test_sarama_2_2_produce_read_back(keel, sarama_bin, codec):
    topic = unique("sarama22-%s" % codec)
    create_topic(keel.bootstrap, topic, 2)
    check_produced_and_stored(keel, sarama_bin, V2_2, codec, topic)


def test_sarama_2_2_zstd_over_produce_v3_is_refused(keel, sarama_bin):
    """Sarama 1.22 lets zstd through at 2.2 but still sends Produce v3, and zstd needs Produce
    v7 (KIP-110): Kafka answers UNSUPPORTED_COMPRESSION_TYPE, so that a client too old to read
    zstd never finds it in a topic. Keel does the same: a visible error, nothing stored."""
    topic = unique("sarama22-zstd")
    create_topic(keel.bootstrap, topic, 2)
    r = run_sarama(sarama_bin, "produce", keel.bootstrap, V2_2, "-topic", topic, "-codec", "zstd",
                   "-n", 10, "-partitions", 2)
    assert r.rc == 1 and not r.of("produced"), r
    errs = [e for e in r.errors if e["stage"] == "produce"]
    assert len(errs) == 10, r
    # Sarama's text for error code 76, UNSUPPORTED_COMPRESSION_TYPE.
    assert all("does not support the compression type" in e["error"] for e in errs), r
    assert end_offsets(keel.bootstrap, topic, [0, 1]) == {0: 0, 1: 0}


@pytest.mark.parametrize("version", [V0_11, V2_2])
def test_sarama_admin_create_list_describe_alter_delete(keel, sarama_bin, version):
    topic = unique("sarama-admin")
    r = run_sarama(sarama_bin, "admin", keel.bootstrap, version, "-topic", topic, "-partitions", 3)
    steps = {e["step"]: e for e in r.of("admin")}
    failed = [s for s, e in steps.items() if not e["ok"]]
    assert r.rc == 0 and not failed and not r.errors, "failed steps %s\n%r" % (failed, r)
    assert steps["list"]["found"] and steps["list"]["partitions"] == 3
    assert steps["list"]["replication_factor"] == 1
    # ListTopics keeps the non-default configs: the one set at creation.
    assert steps["list"]["configs"].get("retention.ms") == "3600000", steps["list"]
    assert steps["describe-topics"]["partitions"] == 3 and steps["describe-topics"]["topic_error"] == ""
    assert steps["describe-config"]["retention_ms"] == "3600000", steps["describe-config"]
    assert steps["describe-config"]["retention_ms_default"] is False
    assert steps["describe-config-after-alter"]["retention_ms"] == "7200000", \
        steps["describe-config-after-alter"]
    assert steps["gone-after-delete"]["gone"] is True
    # The broker agrees that the topic is gone (Metadata v12, no auto-creation).
    assert kwire.metadata(keel.bootstrap, [topic])["topics"][topic]["error_code"] == 3


# -- 0.8.2.0 (Sarama's default): Metadata v0, ListOffsets v0 work; Produce v0 is refused ---------------
COUNTS_082 = {0: 5, 1: 3, 2: 0}


def topic_with_records(bootstrap, prefix, counts):
    """A topic with len(counts) partitions and counts[p] records (kafka-python) in partition p."""
    topic = unique(prefix)
    create_topic(bootstrap, topic, len(counts))
    prod = producer(bootstrap)
    try:
        for p, n in counts.items():
            for i in range(n):
                prod.send(topic, key=b"k", value=b"v%d" % i, partition=p)
        prod.flush(timeout=30)
    finally:
        prod.close(timeout=10)
    return topic


def test_sarama_0_8_2_metadata_v0(keel, sarama_bin):
    topic = topic_with_records(keel.bootstrap, "sarama082-md", COUNTS_082)
    md = run_sarama(sarama_bin, "metadata", keel.bootstrap, V0_8_2, "-topic", topic)
    assert md.rc == 0 and not md.errors, md
    assert topic in md.of("topics")[0]["topics"]
    assert md.of("topic")[0]["partitions"] == [0, 1, 2]
    parts = {e["partition"]: e for e in md.of("partition")}
    assert sorted(parts) == [0, 1, 2]
    assert all(e["leader"] == 0 and e["leader_addr"] == keel.bootstrap for e in parts.values()), md
    assert [(e["id"], e["addr"]) for e in md.of("broker")] == [(0, keel.bootstrap)], md


def test_sarama_0_8_2_list_offsets_v0(keel, sarama_bin):
    """ListOffsets v0 (one offset asked per partition): oldest 0, newest = the records
    kafka-python produced."""
    topic = topic_with_records(keel.bootstrap, "sarama082-off", COUNTS_082)
    off = run_sarama(sarama_bin, "offsets", keel.bootstrap, V0_8_2, "-topic", topic)
    assert off.rc == 0 and not off.errors, off
    assert {e["partition"]: (e["oldest"], e["newest"]) for e in off.of("offsets")} == \
        {p: (0, n) for p, n in COUNTS_082.items()}, off


def test_sarama_0_8_2_admin_is_refused_by_sarama(keel, sarama_bin):
    """ClusterAdmin needs the controller (Metadata v1+): Sarama refuses at 0.8.2 itself, after
    its Metadata v0 bootstrap, before sending any admin request."""
    adm = run_sarama(sarama_bin, "admin", keel.bootstrap, V0_8_2, "-topic", unique("sarama082-admin"))
    assert adm.rc == 1, adm
    assert adm.errors and adm.errors[0]["stage"] == "new-admin", adm
    assert "version of API is not supported" in adm.errors[0]["error"], adm
    assert not adm.of("admin"), adm


def test_sarama_0_8_2_produce_v0_fails_visibly(keel, sarama_bin):
    """Produce v0 carries a magic-0 message set, which Keel does not store (nor does Kafka 4):
    the producer gets an error for every record, promptly, and nothing is appended."""
    topic = topic_with_records(keel.bootstrap, "sarama082-prod", COUNTS_082)
    pr = run_sarama(sarama_bin, "produce", keel.bootstrap, V0_8_2, "-topic", topic, "-codec", "none",
                    "-n", 3, "-partitions", 3)
    assert pr.rc == 1, pr
    errs = [e for e in pr.errors if e["stage"] == "produce"]
    assert len(errs) == 3 and all(e["error"] for e in errs), pr
    # Each partition is answered UNSUPPORTED_VERSION (the connection is not simply closed).
    assert all("version of API is not supported" in e["error"] for e in errs), pr
    assert not pr.of("produced"), pr
    assert end_offsets(keel.bootstrap, topic, [0, 1, 2]) == COUNTS_082
    # The broker is still serving after refusing it.
    md = run_sarama(sarama_bin, "metadata", keel.bootstrap, V0_8_2, "-topic", topic)
    assert md.rc == 0 and md.of("topic")[0]["partitions"] == [0, 1, 2], md
