#!/usr/bin/env python3
"""Operations benchmarks (issue 17), on a three-broker cluster on loopback (release build).

shutdown: a topic of 300 partitions (replication factor 3, min.insync.replicas 2) whose
  leadership is spread evenly, so each broker leads 100. An idempotent acks=all producer
  (confluent-kafka) writes at a fixed rate to every partition; after a steady phase one broker
  gets SIGTERM. Reported: the broker's own `controlled shutdown done ... elapsed_ms` (SIGTERM to
  the approval and the fencing image installed on it), the time until the others' metadata
  shows none of its partitions led by it, and the producer's p50/p99/max latency (send to
  acknowledgement) during the steady phase and during the 5 s after SIGTERM, with the ratio.
  Every send must be acknowledged.

reassign: `keel-bench probe` measures the data disk's sequential O_DIRECT write (the baseline);
  one partition of about --reassign-mb MB on one broker is then reassigned to two brokers with
  no throttle, and the copy rate (log bytes / time to completion) is reported as a ratio to the
  probe. Meanwhile the same producer writes at a fixed rate to another topic (RF 3), and its
  p99 during the copy is reported against its p99 before it.

Usage: scripts/bench-operations.py [--keel target/release/keel]
       [--bench target/release/keel-bench] [--only shutdown|reassign] [--rate 2000]
       [--reassign-mb 500]
Environment: BENCH_BROKER_EXTRA (more broker arguments, e.g. "--set replica.fetch.wait.max.ms=100"),
BENCH_PRODUCER_EXTRA (JSON of more producer settings).
Needs: cargo build --release -p keel-broker -p keel-bench; confluent-kafka and kafka-python
(tests/python/requirements.txt; kafka-python sends the AlterPartitionReassignments). Prints one JSON document.
"""

import argparse
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition

# The cluster node of the failover benchmark: one definition of how a node starts and stops.
_spec = importlib.util.spec_from_file_location(
    "bench_failover", os.path.join(os.path.dirname(__file__), "bench-failover.py"))
_failover = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_failover)
Node = _failover.Node
free_port = _failover.free_port


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(lat_ms):
    return {"count": len(lat_ms), "p50_ms": round(pct(lat_ms, 0.5), 2),
            "p99_ms": round(pct(lat_ms, 0.99), 2), "max_ms": round(max(lat_ms), 2)}


class Load:
    """A fixed-rate idempotent acks=all producer over `partitions` partitions of `topic`;
    records (send time, latency ms) of each acknowledgement and counts errors."""

    def __init__(self, bootstrap, topic, partitions, rate):
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                           "enable.idempotence": True, "linger.ms": 1,
                           "message.timeout.ms": 60000,
                           "topic.metadata.refresh.interval.ms": 1000,
                           **json.loads(os.environ.get("BENCH_PRODUCER_EXTRA", "{}"))})
        self.acks, self.errors, self.sent = [], [], 0
        self.stop_flag = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def run(self):
        start = time.perf_counter()
        value = b"v" * 100
        while not self.stop_flag:
            due = start + self.sent / self.rate
            now = time.perf_counter()
            if now < due:
                self.p.poll(min(due - now, 0.01))
                continue
            sent_at = time.perf_counter()

            def cb(err, _msg, sent_at=sent_at):
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acks.append((sent_at, (time.perf_counter() - sent_at) * 1000))

            try:
                self.p.produce(self.topic, value=value, partition=self.sent % self.partitions,
                               on_delivery=cb)
                self.sent += 1
            except BufferError:
                self.p.poll(0.01)
            self.p.poll(0)

    def finish(self):
        self.stop_flag = True
        self.thread.join()
        left = self.p.flush(60)
        return left

    def between(self, t0, t1):
        return [lat for at, lat in self.acks if t0 <= at < t1]


def cluster(keel, workdir, extra=()):
    cports = [free_port() for _ in range(3)]
    quorum = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(cports))
    nodes = [Node(keel, workdir, [
        "--node-id", str(i + 1), "--controller-quorum", quorum,
        "--controller-listen", f"127.0.0.1:{cports[i]}",
        "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "--set", "broker.session.timeout.ms=9000",
        "--set", "broker.heartbeat.interval.ms=500"] + list(extra)
        + os.environ.get("BENCH_BROKER_EXTRA", "").split()) for i in range(3)]
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_serving()
    return nodes


def bootstrap(nodes):
    return ",".join(f"127.0.0.1:{n.port}" for n in nodes if n.proc)


def wait_full_isr(admin, topic, partitions, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t and len(t.partitions) == partitions and all(
                p.leader > 0 and len(p.isrs) == len(p.replicas) for p in t.partitions.values()):
            return md
        time.sleep(0.2)
    sys.exit(f"{topic}: the ISRs did not fill within {timeout} s")


def bench_shutdown(a, workdir):
    nodes = cluster(a.keel, workdir)
    every = bootstrap(nodes)
    admin = AdminClient({"bootstrap.servers": every})
    admin.create_topics([NewTopic("ops", 300, 3, config={"min.insync.replicas": "2"})])[
        "ops"].result(60)
    md = wait_full_isr(admin, "ops", 300)
    led = {b: sum(1 for p in md.topics["ops"].partitions.values() if p.leader == b)
           for b in (1, 2, 3)}
    load = Load(every, "ops", 300, a.rate).start()
    time.sleep(a.steady_s)
    victim = nodes[1]
    others = AdminClient({"bootstrap.servers": bootstrap([nodes[0], nodes[2]])})
    log_start = os.path.getsize(victim.log)
    t0 = time.perf_counter()
    victim.proc.send_signal(signal.SIGTERM)
    moved_ms = None
    while time.perf_counter() - t0 < 30:
        try:
            t = others.list_topics("ops", timeout=2).topics["ops"]
            if all(p.leader not in (2, -1) for p in t.partitions.values()):
                moved_ms = (time.perf_counter() - t0) * 1000
                break
        except Exception:  # noqa: BLE001 - metadata during a change
            pass
        time.sleep(0.01)
    victim.proc.wait(60)
    exited_ms = (time.perf_counter() - t0) * 1000
    victim.proc = None
    time.sleep(max(0.0, 5 - (time.perf_counter() - t0)))
    with open(victim.log, "rb") as f:
        f.seek(log_start)
        text = re.sub(rb"\x1b\[[0-9;]*m", b"", f.read()).decode(errors="replace")
    m = re.search(r"controlled shutdown done.*?elapsed_ms=(\d+)", text)
    left = load.finish()
    steady = load.between(t0 - a.steady_s + 2, t0)
    during = load.between(t0, t0 + 5)
    for n in nodes:
        n.stop()
    return {
        "partitions": 300, "leaders_per_broker": led, "rate_per_s": a.rate,
        "controlled_shutdown_elapsed_ms": int(m.group(1)) if m else None,
        "leadership_moved_seen_by_others_ms": round(moved_ms) if moved_ms else None,
        "process_exit_ms": round(exited_ms),
        "producer_steady": summary(steady), "producer_after_sigterm_5s": summary(during),
        "p99_ratio": round(pct(during, 0.99) / pct(steady, 0.99), 2),
        "sent": load.sent, "acknowledged": len(load.acks), "errors": len(load.errors),
        "unflushed": left,
    }


def probe(bench, directory):
    out = subprocess.run([bench, "probe", "--dir", directory], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"sequential O_DIRECT write\s+([\d.]+) MB/s", out)
    return float(m.group(1)), out


def bench_reassign(a, workdir):
    probe_dir = tempfile.mkdtemp(dir=workdir)
    disk_mb_s, probe_out = probe(a.bench, probe_dir)
    nodes = cluster(a.keel, workdir)
    every = bootstrap(nodes)
    admin = AdminClient({"bootstrap.servers": every})
    admin.create_topics([NewTopic("big", 1, 1), NewTopic("other", 6, 3)])
    time.sleep(1)
    wait_full_isr(admin, "other", 6)
    md = admin.list_topics("big", timeout=5)
    src = md.topics["big"].partitions[0].leader
    dst = [b for b in (1, 2, 3) if b != src][0]
    # Fill: 100 KiB records, acks=1, as fast as the producer goes.
    fill = Producer({"bootstrap.servers": every, "acks": 1, "linger.ms": 5,
                     "batch.size": 1 << 20, "message.max.bytes": 2 << 20})
    value = os.urandom(100 * 1024)
    for _ in range(a.reassign_mb * 10):
        while True:
            try:
                fill.produce("big", value=value, partition=0)
                break
            except BufferError:
                fill.poll(0.05)
        fill.poll(0)
    fill.flush(120)
    part_dir = os.path.join(nodes[src - 1].dir, "data", "big-0")
    size = sum(os.path.getsize(os.path.join(part_dir, f))
               for f in os.listdir(part_dir) if f.endswith(".log"))
    load = Load(every, "other", 6, a.rate).start()
    time.sleep(a.steady_s)
    t0 = time.perf_counter()
    KafkaAdminClient(bootstrap_servers=every).alter_partition_reassignments(
        {TopicPartition("big", 0): [src, dst]})
    done_ms = None
    while time.perf_counter() - t0 < 600:
        p = admin.list_topics("big", timeout=5).topics["big"].partitions[0]
        if sorted(p.replicas) == sorted([src, dst]) and dst in p.isrs:
            done_ms = (time.perf_counter() - t0) * 1000
            break
        time.sleep(0.02)
    t1 = time.perf_counter()
    time.sleep(1)
    left = load.finish()
    before = load.between(t0 - a.steady_s + 2, t0)
    during = load.between(t0, t1)
    for n in nodes:
        n.stop()
    copy_mb_s = size / 1e6 / (done_ms / 1000) if done_ms else None
    return {
        "disk_sequential_write_mb_s": disk_mb_s,
        "copied_bytes": size, "copy_ms": round(done_ms) if done_ms else None,
        "copy_mb_s": round(copy_mb_s, 1) if copy_mb_s else None,
        "copy_to_disk_ratio": round(copy_mb_s / disk_mb_s, 2) if copy_mb_s else None,
        "other_topic_rate_per_s": a.rate,
        "producer_before": summary(before), "producer_during_copy": summary(during),
        "p99_ratio": round(pct(during, 0.99) / pct(before, 0.99), 2) if during else None,
        "errors": len(load.errors), "unflushed": left,
        "probe": probe_out.strip().splitlines()[-4:],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", default="target/release/keel")
    ap.add_argument("--bench", default="target/release/keel-bench")
    ap.add_argument("--only", choices=["shutdown", "reassign"])
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--steady-s", type=float, default=10)
    ap.add_argument("--reassign-mb", type=int, default=500)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="keel-ops-")
    out = {"cores": os.cpu_count()}
    if a.only in (None, "shutdown"):
        out["shutdown"] = bench_shutdown(a, workdir)
    if a.only in (None, "reassign"):
        out["reassign"] = bench_reassign(a, workdir)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
