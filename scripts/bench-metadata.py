#!/usr/bin/env python3
"""Metadata quorum benchmark: the numbers of issue 4, each with a same-run baseline.

  1. Metadata commit latency: 1,000 AlterConfigs requests (one topic config each), one at a
     time, through kafka-python's admin client against a single node: each is committed
     through Raft (fsync'ed), applied and installed on every shard before it answers. Then
     1,000 CreateTopics of one topic each (the same, plus creating the partition's log).
     Baselines from the same run: a Metadata request's round trip through the same client
     (everything but the commit) and the disk's 4 KiB write + fdatasync latency.
  2. Time to create 1,000 topics: the sum of (1), and one CreateTopics request carrying 1,000
     topics (committed concurrently).
  3. Time to elect a controller after the leader dies: a 3-node cluster on loopback; kill -9
     the quorum leader and poll the survivors' /quorum every 5 ms until one of them is leader
     in a higher term; then until a CreateTopics through a survivor succeeds. Several rounds
     (the killed node restarts between rounds). Baseline: the election timeout (500-1000 ms).
  4. Memory per 10,000 partitions of metadata: `cargo run --release -p keel-raft --example
     image_memory` (a counting allocator around the image).

Usage: scripts/bench-metadata.py [--keel target/release/keel] [--rounds 5]
Needs: a release build (cargo build --release -p keel-broker), kafka-python
(tests/python/requirements.txt).
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


class Node:
    def __init__(self, keel, workdir, args):
        self.keel = keel
        self.port = free_port()
        self.admin = free_port()
        self.dir = tempfile.mkdtemp(dir=workdir)
        self.args = args
        self.proc = None
        self.log = os.path.join(self.dir, "keel.log")

    def start(self):
        logf = open(self.log, "ab")
        self.log_start = os.path.getsize(self.log)
        self.proc = subprocess.Popen(
            [self.keel, "--listen", f"127.0.0.1:{self.port}", "--admin",
             f"127.0.0.1:{self.admin}", "--data-dir", os.path.join(self.dir, "data")] + self.args,
            stdout=subprocess.DEVNULL, stderr=logf,
            env=dict(os.environ, RUST_LOG="info,openraft=warn"))

    def wait_serving(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.log, "rb") as f:
                f.seek(self.log_start)
                if f.read().count(b"shard serving") >= 1:
                    return
            if self.proc.poll() is not None:
                sys.exit(f"keel exited; see {self.log}")
            time.sleep(0.05)
        sys.exit(f"keel did not start; see {self.log}")

    def quorum(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/quorum", timeout=2) as r:
            return json.loads(r.read())

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


def fdatasync_latency(workdir, n=300):
    path = os.path.join(workdir, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = b"x" * 4096
    out = []
    try:
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, buf, i * 4096)
            os.fdatasync(fd)
            out.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def commit_latency(keel, workdir, topics):
    node = Node(keel, workdir, ["--smp", str(os.cpu_count())])
    node.start()
    node.wait_serving()
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{node.port}", request_timeout_ms=30000)
    admin.create_topics([NewTopic("warmup", 1, 1)])
    rtt = []
    for _ in range(200):
        t = time.perf_counter()
        admin.describe_topics(["warmup"])
        rtt.append((time.perf_counter() - t) * 1000)
    # A metadata change that creates nothing on disk: commit + apply + install only.
    alter = []
    for i in range(topics):
        t = time.perf_counter()
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "warmup",
                                            configs={"retention.ms": str(86400000 + i)})])
        alter.append((time.perf_counter() - t) * 1000)
    lat = []
    started = time.perf_counter()
    for i in range(topics):
        t = time.perf_counter()
        admin.create_topics([NewTopic(f"seq-{i:05}", 1, 1)])
        lat.append((time.perf_counter() - t) * 1000)
    sequential_s = time.perf_counter() - started
    t = time.perf_counter()
    admin.create_topics([NewTopic(f"batch-{i:05}", 1, 1) for i in range(topics)], timeout_ms=120000)
    batch_s = time.perf_counter() - t
    listed = len([n for n in admin.list_topics() if n.startswith(("seq-", "batch-"))])
    admin.close()
    node.stop()
    assert listed == 2 * topics, listed
    return alter, lat, rtt, sequential_s, batch_s


def election(keel, workdir, rounds):
    cports = [free_port() for _ in range(3)]
    quorum = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(cports))
    nodes = [Node(keel, workdir, ["--node-id", str(i + 1), "--controller-quorum", quorum,
                                  "--controller-listen", f"127.0.0.1:{cports[i]}", "--smp", "1",
                                  "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"])
             for i in range(3)]
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_serving()
    elect, create = [], []
    try:
        for r in range(rounds):
            time.sleep(1.0)
            q = nodes[0].quorum()
            leader, term = q["leader"], q["term"]
            victim = nodes[leader - 1]
            survivors = [n for n in nodes if n is not victim]
            victim.kill9()
            t0 = time.perf_counter()
            while True:
                qs = []
                for n in survivors:
                    try:
                        qs.append(n.quorum())
                    except OSError:
                        pass
                if any(x["state"] == "leader" and x["term"] > term for x in qs):
                    break
                if time.perf_counter() - t0 > 30:
                    sys.exit("no new leader within 30 s")
                time.sleep(0.005)
            elect.append((time.perf_counter() - t0) * 1000)
            # Retried until it succeeds: a client may first reach the dead broker, which
            # stays listed until its session times out.
            while True:
                try:
                    admin = KafkaAdminClient(
                        bootstrap_servers=f"127.0.0.1:{survivors[0].port}",
                        request_timeout_ms=5000)
                    admin.create_topics([NewTopic(f"after-{r}", 1, 1)])
                    admin.close()
                    break
                except Exception as e:  # noqa: BLE001 - any failure is retried, bounded
                    if time.perf_counter() - t0 > 60:
                        sys.exit(f"no CreateTopics within 60 s: {e}")
                    time.sleep(0.05)
            create.append((time.perf_counter() - t0) * 1000)
            victim.start()
            victim.wait_serving()
    finally:
        for n in nodes:
            n.stop()
    return elect, create


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", default="target/release/keel")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--topics", type=int, default=1000)
    a = ap.parse_args()
    cores = os.cpu_count()
    with tempfile.TemporaryDirectory() as work:
        sync = fdatasync_latency(work)
        alter, lat, rtt, seq_s, batch_s = commit_latency(a.keel, work, a.topics)
        elect, create = election(a.keel, work, a.rounds)
    print(f"machine: {cores} cores; keel: {a.keel}")
    print(f"baseline 4 KiB write+fdatasync: p50 {pct(sync, 50):.2f} ms, p99 {pct(sync, 99):.2f} ms")
    print(f"baseline Metadata round trip (kafka-python): p50 {pct(rtt, 50):.2f} ms, "
          f"p99 {pct(rtt, 99):.2f} ms")
    print(f"metadata commit (AlterConfigs of one topic config, {len(alter)} sequential): "
          f"p50 {pct(alter, 50):.2f} ms, p99 {pct(alter, 99):.2f} ms, max {max(alter):.2f} ms "
          f"= p50 {pct(alter, 50) / pct(sync, 50):.1f}x fdatasync p50, "
          f"{pct(alter, 50) / pct(rtt, 50):.1f}x Metadata round trip")
    print(f"topic creation (CreateTopics of 1 topic, {len(lat)} sequential; includes creating "
          f"the partition's log files): "
          f"p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, max {max(lat):.2f} ms "
          f"= p50 {pct(lat, 50) / pct(sync, 50):.1f}x fdatasync p50, "
          f"{pct(lat, 50) / pct(rtt, 50):.1f}x Metadata round trip")
    print(f"{a.topics} topics, one request each: {seq_s:.2f} s; "
          f"in one CreateTopics request: {batch_s:.2f} s")
    print(f"controller election after kill -9 of the leader (3 nodes, election timeout "
          f"500-1000 ms, {len(elect)} rounds): median {statistics.median(elect):.0f} ms, "
          f"max {max(elect):.0f} ms; first CreateTopics through a survivor answered: median "
          f"{statistics.median(create):.0f} ms, max {max(create):.0f} ms")


if __name__ == "__main__":
    main()
