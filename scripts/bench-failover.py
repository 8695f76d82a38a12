#!/usr/bin/env python3
"""Failover benchmark (issue 16): leader kill -9 to the first acks=all success on the new leader.

A three-broker cluster on loopback (each a metadata voter, `broker.session.timeout.ms` the
fencing timeout), one topic with replication factor 3 and min.insync.replicas 2. Each round:
wait until the ISR holds all three replicas, kill -9 the partition's leader, and from that
instant produce one record with acks=all (confluent-kafka, idempotence off, a fresh producer
per attempt bootstrapped on the survivors, 1 s message timeout) until one is acknowledged; the
time is the failover. The killed broker restarts between rounds and rejoins as a follower.

The baseline the issue sets: the fencing timeout + 1 s. The output gives p50 and max over the
rounds, and each round.

Usage: scripts/bench-failover.py [--keel target/release/keel] [--rounds 10]
       [--session-timeout-ms 3000]
Needs: a release build (cargo build --release -p keel-broker), confluent-kafka
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

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


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


def partition_state(bootstrap, topic):
    """(leader, isr) of partition 0 as the cluster reports it, or None."""
    try:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=2)
        p = md.topics[topic].partitions[0]
        return p.leader, list(p.isrs)
    except Exception:  # noqa: BLE001 - a broker being down is expected here
        return None


def produce_once(bootstrap, topic, value):
    """True when one acks=all record is acknowledged within its 1 s message timeout."""
    result = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                  "message.timeout.ms": 1000, "socket.connection.setup.timeout.ms": 1000,
                  "topic.metadata.refresh.interval.ms": 200, "retry.backoff.ms": 20})
    p.produce(topic, value=value, partition=0, on_delivery=lambda e, m: result.append(e))
    p.flush(2)
    return bool(result) and result[0] is None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", default="target/release/keel")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="keel-failover-")
    cports = [free_port() for _ in range(3)]
    quorum = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(cports))
    nodes = [Node(a.keel, workdir, [
        "--node-id", str(i + 1), "--controller-quorum", quorum,
        "--controller-listen", f"127.0.0.1:{cports[i]}", "--smp", "1",
        "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "--set", f"broker.session.timeout.ms={a.session_timeout_ms}",
        "--set", "broker.heartbeat.interval.ms=500",
        "--set", "replica.fetch.backoff.ms=200"]) for i in range(3)]
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_serving()
    every = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    admin = AdminClient({"bootstrap.servers": every})
    admin.create_topics([NewTopic("failover", 1, 3, config={"min.insync.replicas": "2"})])[
        "failover"].result(30)
    times = []
    try:
        for r in range(a.rounds):
            deadline = time.time() + 60
            while True:
                st = partition_state(every, "failover")
                if st and st[0] > 0 and len(st[1]) == 3 and produce_once(every, "failover", b"w"):
                    break
                if time.time() > deadline:
                    sys.exit(f"round {r}: the ISR did not become whole within 60 s")
                time.sleep(0.2)
            leader = st[0]
            victim = nodes[leader - 1]
            survivors = ",".join(f"127.0.0.1:{n.port}" for n in nodes if n is not victim)
            victim.kill9()
            t0 = time.perf_counter()
            while not produce_once(survivors, "failover", f"after-{r}".encode()):
                if time.perf_counter() - t0 > 60:
                    sys.exit(f"round {r}: no acks=all success within 60 s")
            ms = (time.perf_counter() - t0) * 1000
            times.append(ms)
            print(f"round {r}: leader {leader} killed; first acks=all success after {ms:.0f} ms",
                  flush=True)
            victim.start()
            victim.wait_serving()
    finally:
        for n in nodes:
            n.stop()
    bound = a.session_timeout_ms + 1000
    print(json.dumps({
        "rounds": len(times),
        "failover_ms_p50": round(statistics.median(times)),
        "failover_ms_max": round(max(times)),
        "fencing_timeout_ms": a.session_timeout_ms,
        "bound_ms": bound,
        "within_bound": max(times) <= bound,
        "each_ms": [round(t) for t in times],
    }, indent=2))


if __name__ == "__main__":
    main()
