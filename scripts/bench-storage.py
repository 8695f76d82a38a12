#!/usr/bin/env python3
"""Storage benchmark: partition overhead, produce latency under retention and compaction, and
compaction throughput, each printed next to a baseline measured in the same run.

Every broker is `target/release/keel` started as a subprocess with its own temporary data dir,
free Kafka and admin ports, `--smp <usable cores>` and RUST_LOG=info,openraft=warn; it counts as
serving when its stderr log says "shard serving" once per shard (and, where noted, when a raw
Metadata v1 request answers with the expected topics).

  1. Many partitions. An empty broker (fresh data dir) is started, stopped, and started again on
     that (still empty) dir: the second start is the baseline: its start-up time (process start
     to every shard serving, and to a Metadata request answering), VmRSS (/proc/PID/status) and
     open fds (/proc/PID/fd). Then 100 topics x 100 partitions (10,000 partitions) are created
     with kafka-python's KafkaAdminClient.create_topics, 10 topics per request; VmRSS and fds
     are taken after the creation and again after producing one 16-byte record to every
     partition (kafka-python producer, acks=all, linger 100 ms, so records batch per request;
     skipped, and said so, when it does not finish in --produce-budget seconds). Reported: KiB
     of RSS and fds per partition ((after - empty) / 10,000), the shutdown time (SIGTERM to
     exit), and after a restart on the same data dir: the start-up time until every shard
     serves and until a Metadata request lists all 100 topics with 100 led partitions each,
     RSS and fds, each against the empty-broker baseline.
  2. Produce latency with retention and compaction running. One broker, started with
     log.cleaner.backoff.ms=500 and log.retention.check.interval.ms=500. keel-bench runs
     bench/workloads/fixed-rate-latency.toml at a fixed --rate (default 50,000 records/s of
     1 KiB, acks=all, 4 producers, 4 consumers, rate_fraction_of_max=0, 20 s measured after 5 s
     warm-up, no probe) four times, in this order:
       (a) alone (the baseline);
       (c) control: while a kafka-python producer thread writes the same background load as in
           (b) to two plain topics (cleanup.policy=delete, segment.bytes=1 MiB, no retention
           limit), so the CPU cost of the background writer is in both (c) and (b);
       (b) while the background thread writes (--bg-rate records/s per topic, 1 KiB) to a topic
           with cleanup.policy=compact, segment.bytes=1048576, min.cleanable.dirty.ratio=0.01,
           keyed over 1,000 keys, and to a topic with retention.bytes=2 MiB, segment.bytes=1 MiB;
       (a') alone again, last: the spread between (a) and (a') is the run-to-run noise.
     Reported: publish p50/p99/p99.9 of each (from keel-bench's result.json, publish_latency),
     p99(b)/p99(a) and p99(b)/p99(c); for the span of (b) the growth of keel_compacted_bytes_total
     and keel_compaction_seconds_total summed over shards (from /metrics; "not available" when
     the binary lacks them) and the number of broker log lines "compacted" and "retention
     deleted segments", which prove both ran.
  3. Compaction throughput. A broker started with log.cleaner.backoff.ms=3600000 (no compaction)
     is filled by keel-bench with --fill-records (default 200,000) keyed 1 KiB records over
     10,000 keys into one partition of a topic with cleanup.policy=compact, segment.bytes=8 MiB,
     min.cleanable.dirty.ratio=0.5 (about 200 MB). The broker is stopped and restarted on the
     same data dir with log.cleaner.backoff.ms=500, and /metrics is watched until
     keel_compacted_bytes_total has stopped growing (unchanged for 5 s; 180 s at most).
     Reported: compacted bytes / compaction seconds in MB/s (10^6 bytes) against the disk's
     sequential O_DIRECT write bandwidth from `keel-bench probe --quick` on a directory on the
     same disk as the data dir, and the on-disk log size before and after.

All of it takes about 3-5 minutes on a 2-core machine. Timings are only meaningful on an
otherwise idle machine: the load average is printed at the start and end of each part.

Usage: scripts/bench-storage.py [--keel target/release/keel] [--bench target/release/keel-bench]
         [--workdir DIR (default: the system temp dir)] [--rate 50000] [--bg-rate 2000]
         [--fill-records 200000] [--only 1,2,3] [--keep]
Needs: a release build (cargo build --release -p keel-broker -p keel-bench), kafka-python.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

ANSI = re.compile(rb"\x1b\[[0-9;]*m")
RUNNING = set()  # brokers to stop if the script fails
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def fmt(x, spec=".2f", unit=""):
    return "not available" if x is None else f"{x:{spec}}{unit}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


# --- a raw Metadata v1 request (all topics), to time readiness without client start-up ---

def _str(buf, pos):
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    return buf[pos:pos + n].decode(), pos + n


def metadata_v1(port, timeout=5.0):
    """{topic: (error_code, partitions, partitions_with_leader)} from a Metadata v1 request."""
    client = b"bench-storage"
    body = struct.pack(">hhih", 3, 1, 7, len(client)) + client + struct.pack(">i", -1)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                raise OSError("connection closed")
            head += chunk
        (size,) = struct.unpack(">i", head)
        buf = bytearray()
        while len(buf) < size:
            chunk = s.recv(min(1 << 20, size - len(buf)))
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
    buf = bytes(buf)
    pos = 4  # correlation id
    (nbrokers,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    for _ in range(nbrokers):
        pos += 4
        _, pos = _str(buf, pos)
        pos += 4
        _, pos = _str(buf, pos)
    pos += 4  # controller id
    (ntopics,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    topics = {}
    for _ in range(ntopics):
        (err,) = struct.unpack_from(">h", buf, pos)
        pos += 2
        name, pos = _str(buf, pos)
        pos += 1  # is_internal
        (nparts,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        led = 0
        for _ in range(nparts):
            _perr, _idx, leader = struct.unpack_from(">hii", buf, pos)
            pos += 10
            if leader >= 0:
                led += 1
            for _ in range(2):  # replicas, isr
                (n,) = struct.unpack_from(">i", buf, pos)
                pos += 4 + 4 * max(n, 0)
        topics[name] = (err, nparts, led)
    return topics


class Broker:
    def __init__(self, keel, data_dir, smp, settings=()):
        self.keel = keel
        self.data_dir = data_dir
        self.smp = smp
        self.settings = list(settings)
        self.port = free_port()
        self.admin = free_port()
        self.log = data_dir.rstrip("/") + ".log"
        self.proc = None
        self.log_start = 0

    def start(self, settings=None):
        if settings is not None:
            self.settings = list(settings)
        self.port, self.admin = free_port(), free_port()
        args = [self.keel, "--listen", f"127.0.0.1:{self.port}", "--admin",
                f"127.0.0.1:{self.admin}", "--data-dir", self.data_dir, "--smp", str(self.smp)]
        for s in self.settings:
            args += ["--set", s]
        self.log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        logf = open(self.log, "ab")
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=logf,
                                     env=dict(os.environ, RUST_LOG="info,openraft=warn"))
        logf.close()
        RUNNING.add(self)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def log_text(self, since=None, until=None):
        """The log from byte offset `since` (default: this start) to `until`, colours removed."""
        with open(self.log, "rb") as f:
            f.seek(self.log_start if since is None else since)
            raw = f.read() if until is None else f.read(max(0, until - f.tell()))
        return ANSI.sub(b"", raw).decode(errors="replace")

    def log_size(self):
        return os.path.getsize(self.log)

    def wait_ready(self, timeout=120, topics_ready=None):
        """Seconds from start until every shard logged "shard serving", and until a Metadata
        request answers (and topics_ready(topics) holds, when given)."""
        deadline = self.t_start + timeout
        serving = None
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"keel exited with {self.proc.returncode}; see {self.log}")
            if self.log_text().count("shard serving") >= self.smp:
                serving = time.perf_counter() - self.t_start
                break
            time.sleep(0.005)
        if serving is None:
            sys.exit(f"keel did not serve within {timeout} s; see {self.log}")
        last = None
        while time.perf_counter() < deadline:
            try:
                topics = metadata_v1(self.port)
                if topics_ready is None or topics_ready(topics):
                    return serving, time.perf_counter() - self.t_start
                last = f"{len(topics)} topics listed"
            except (OSError, struct.error) as e:
                last = repr(e)
            time.sleep(0.01)
        sys.exit(f"keel served but Metadata not ready within {timeout} s ({last}); see {self.log}")

    def stop(self, timeout=60):
        """SIGTERM, wait; returns the seconds it took to exit."""
        if not self.proc:
            return None
        t = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"  ! keel did not exit {timeout} s after SIGTERM: killed")
            self.proc.kill()
            self.proc.wait(10)
        took = time.perf_counter() - t
        rc = self.proc.returncode
        self.proc = None
        RUNNING.discard(self)
        if rc != 0:
            print(f"  ! keel exited with {rc} after SIGTERM")
        return took

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def metrics(self):
        """{metric name: value summed over its label sets}, or {} when /metrics fails."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics",
                                        timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            try:
                key, value = line.rsplit(" ", 1)
                name = key.split("{", 1)[0]
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                continue
        return out

    def problems(self, since=0):
        """ERROR and WARN lines of the whole log since byte offset `since`."""
        return [ln for ln in self.log_text(since).splitlines()
                if re.search(r"\b(ERROR|WARN)\b", ln)]


def dir_bytes(path, suffix=""):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(suffix):
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return total


def run_bench(bench, bootstrap, out_dir, args, timeout):
    """Runs `keel-bench run` and returns its result.json (None on failure)."""
    os.makedirs(out_dir, exist_ok=True)
    cmd = [bench, "run", "--bootstrap", bootstrap, "--no-probe", "--quiet", "--out", out_dir] + args
    with open(os.path.join(out_dir, "keel-bench.out"), "wb") as out:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                cwd=REPO).returncode
        except subprocess.TimeoutExpired:
            print(f"  ! keel-bench ran past {timeout} s: killed; see {out_dir}/keel-bench.out")
            return None
    path = os.path.join(out_dir, "result.json")
    if rc != 0 or not os.path.exists(path):
        print(f"  ! keel-bench exited {rc}; see {out_dir}/keel-bench.out")
        with open(os.path.join(out_dir, "keel-bench.out"), errors="replace") as f:
            print("    " + "\n    ".join(f.read().strip().splitlines()[-8:]))
        return None
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- part 1: many partitions

def part_many_partitions(a, work, smp, summary):
    print(f"\n== 1. many partitions (100 topics x 100 partitions) [{loadavg()}]")
    ntopics, nparts = 100, 100
    total = ntopics * nparts
    names = [f"mp-{i:03}" for i in range(ntopics)]
    b = Broker(a.keel, os.path.join(work, "p1-data"), smp)
    b.start()
    fresh_serving, fresh_ready = b.wait_ready()
    b.stop()
    b.start()
    empty_serving, empty_ready = b.wait_ready()
    time.sleep(1.0)
    rss_empty, fds_empty = b.rss_kib(), b.fds()
    print(f"  empty broker: first start {fresh_serving:.3f} s to serving; restart "
          f"{empty_serving:.3f} s to serving, {empty_ready:.3f} s to a Metadata answer; "
          f"RSS {rss_empty / 1024:.1f} MiB, {fds_empty} fds")

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=300000)
    t = time.perf_counter()
    for i in range(0, ntopics, 10):
        resp = admin.create_topics([NewTopic(n, nparts, 1) for n in names[i:i + 10]],
                                   timeout_ms=300000)
        for topic_err in getattr(resp, "topic_errors", []):
            if topic_err[1] != 0:
                print(f"  ! create_topics: {topic_err}")
    create_s = time.perf_counter() - t
    admin.close()
    time.sleep(1.0)
    rss_created, fds_created = b.rss_kib(), b.fds()
    owned = b.metrics().get("keel_partitions_owned")
    print(f"  created {total} partitions in {create_s:.2f} s (keel_partitions_owned: "
          f"{fmt(owned, '.0f')}); RSS {rss_created / 1024:.1f} MiB, {fds_created} fds")

    # One record per partition. The producer learns all 100 topics in one metadata request
    # (partitions_for one topic at a time waits out a refresh backoff for each).
    produced, produce_s, produce_note = 0, None, ""
    t = time.perf_counter()
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=100,
                             batch_size=16384, max_request_size=16 << 20,
                             request_timeout_ms=60000, max_block_ms=60000,
                             enable_idempotence=False, retry_backoff_ms=10)
    try:
        try:
            for n in names:
                producer._metadata.add_topic(n)  # private API: falls back to per-topic waits
        except AttributeError:
            pass
        futures = []
        for n in names:
            if time.perf_counter() - t > a.produce_budget:
                break
            producer.partitions_for(n)
            for p in range(nparts):
                futures.append(producer.send(n, value=b"one small record", partition=p))
        left = max(1.0, a.produce_budget - (time.perf_counter() - t))
        producer.flush(timeout=left)
        errors = 0
        for f in futures:
            try:
                f.get(timeout=0)
                produced += 1
            except Exception:  # noqa: BLE001 - counted, reported
                errors += 1
        produce_s = time.perf_counter() - t
        if produced < total:
            produce_note = (f" ({produced} of {total} acknowledged, {errors} failed or "
                            f"unfinished within {a.produce_budget:.0f} s)")
    finally:
        producer.close(timeout=10)
    time.sleep(2.0)
    rss_after, fds_after = b.rss_kib(), b.fds()
    print(f"  produced one record to each partition: {produced} acknowledged in "
          f"{produce_s:.2f} s{produce_note}; RSS {rss_after / 1024:.1f} MiB, {fds_after} fds")
    stop_s = b.stop(timeout=120)
    print(f"  shutdown (SIGTERM to exit) with {total} partitions: {stop_s:.2f} s")

    def all_topics(topics):
        return all(n in topics and topics[n][0] == 0 and topics[n][1] == nparts
                   and topics[n][2] == nparts for n in names)

    b.start()
    serving, ready = b.wait_ready(timeout=300, topics_ready=all_topics)
    time.sleep(1.0)
    rss_restart, fds_restart = b.rss_kib(), b.fds()
    owned = b.metrics().get("keel_partitions_owned")
    print(f"  restart with {total} partitions: {serving:.3f} s to serving, {ready:.3f} s "
          f"to a Metadata listing all {ntopics} topics (keel_partitions_owned: "
          f"{fmt(owned, '.0f')}); RSS {rss_restart / 1024:.1f} MiB, {fds_restart} fds")
    b.stop(timeout=120)
    problems = b.problems()
    print(f"  broker log: {len(problems)} ERROR/WARN lines" +
          "".join(f"\n    {ln[:300]}" for ln in problems[:5]))
    if not a.keep:
        shutil.rmtree(b.data_dir, ignore_errors=True)

    per_part_created = (rss_created - rss_empty) / total
    per_part = (rss_after - rss_empty) / total
    summary += [
        "1. many partitions (10,000 = 100 topics x 100)",
        f"   memory per partition      {per_part:.2f} KiB after one record each "
        f"({per_part_created:.2f} KiB created, no records)   baseline: empty broker RSS "
        f"{rss_empty / 1024:.1f} MiB; with partitions {rss_after / 1024:.1f} MiB"
        + ("" if produced == total else f"   [only {produced} records produced]"),
        f"   fds per partition         {(fds_after - fds_empty) / total:.3f}   "
        f"baseline: empty broker {fds_empty} fds; with partitions {fds_after}",
        f"   start-up to serving       {serving:.3f} s   baseline: empty {empty_serving:.3f} s "
        f"({ratio(serving, empty_serving):.1f}x)",
        f"   start-up to Metadata      {ready:.3f} s (all 100 topics listed)   baseline: "
        f"empty {empty_ready:.3f} s ({ratio(ready, empty_ready):.1f}x)",
        f"   RSS / fds after restart   {rss_restart / 1024:.1f} MiB / {fds_restart}   "
        f"baseline: empty {rss_empty / 1024:.1f} MiB / {fds_empty}",
        f"   create 10,000 partitions  {create_s:.2f} s; produce one record each "
        f"{fmt(produce_s)} s; shutdown {stop_s:.2f} s",
    ]


# ------------------------------------------------ part 2: produce p99 vs compaction/retention

class Background(threading.Thread):
    """Writes 1 KiB records to two topics at `rate` records/s each until stopped or
    `max_s` passed; keyed over `keys` keys on the first topic."""

    def __init__(self, bootstrap, topics, rate, keys, max_s):
        super().__init__(daemon=True)
        self.bootstrap, self.topics, self.rate, self.keys = bootstrap, topics, rate, keys
        self.max_s = max_s
        self.stop_event = threading.Event()
        self.sent = 0
        self.errors = 0
        self.elapsed = 0.0
        self.failure = None

    def _err(self, _exc):
        self.errors += 1

    def run(self):
        try:
            producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1, linger_ms=5,
                                     batch_size=65536, enable_idempotence=False,
                                     request_timeout_ms=30000, max_block_ms=30000)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.failure = repr(e)
            return
        value = os.urandom(512) * 2
        start = time.perf_counter()
        i = 0
        try:
            while not self.stop_event.is_set():
                now = time.perf_counter() - start
                if now > self.max_s:
                    break
                due = i / self.rate
                if due > now:
                    time.sleep(min(due - now, 0.05))
                    continue
                key = f"key-{i % self.keys:05}".encode()
                producer.send(self.topics[0], key=key, value=value).add_errback(self._err)
                producer.send(self.topics[1], value=value).add_errback(self._err)
                self.sent += 2
                i += 1
            producer.flush(timeout=30)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.failure = repr(e)
        finally:
            self.elapsed = time.perf_counter() - start
            producer.close(timeout=10)


def latency_run(a, b, out_dir):
    args = ["--workload", os.path.join(REPO, "bench/workloads/fixed-rate-latency.toml"),
            "--set", "rate_fraction_of_max=0", "--rate", str(a.rate),
            "--duration", str(a.duration), "--warmup", str(a.warmup)]
    res = run_bench(a.bench, b.bootstrap, out_dir, args, timeout=a.duration + a.warmup + 120)
    if res is None:
        return None
    lat = res.get("publish_latency", {})
    return {"p50": lat.get("p50_ms"), "p99": lat.get("p99_ms"), "p999": lat.get("p999_ms"),
            "max": lat.get("max_ms"), "rate": res.get("produce_records_per_s"),
            "errors": res.get("errors"), "samples": res.get("error_samples", [])[:3]}


def print_latency(label, r):
    if r is None:
        print(f"  {label}: keel-bench failed")
        return
    print(f"  {label}: publish p50 {fmt(r['p50'], '.3f')} ms, p99 {fmt(r['p99'], '.3f')} ms, "
          f"p99.9 {fmt(r['p999'], '.3f')} ms, max {fmt(r['max'], '.3f')} ms; "
          f"{fmt(r['rate'], '.0f')} records/s, {r['errors']} errors"
          + (f" {r['samples']}" if r["errors"] else ""))


def part_latency(a, work, smp, summary):
    print(f"\n== 2. produce latency with retention and compaction running vs not "
          f"[{loadavg()}]")
    b = Broker(a.keel, os.path.join(work, "p2-data"), smp,
               ["log.cleaner.backoff.ms=500", "log.retention.check.interval.ms=500"])
    b.start()
    b.wait_ready()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=60000)
    mib = str(1 << 20)
    admin.create_topics([
        NewTopic("bg-compact", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": mib,
            "min.cleanable.dirty.ratio": "0.01"}),
        NewTopic("bg-retention", 1, 1, topic_configs={
            "retention.bytes": str(2 << 20), "segment.bytes": mib}),
        NewTopic("bg-plain-keyed", 1, 1, topic_configs={"segment.bytes": mib}),
        NewTopic("bg-plain", 1, 1, topic_configs={"segment.bytes": mib}),
    ], timeout_ms=60000)
    bg_max = a.duration + a.warmup + 60

    res_a = latency_run(a, b, os.path.join(work, "p2-a"))
    print_latency(f"(a) alone                          [{loadavg()}]", res_a)

    def with_background(topics, label, out):
        bg = Background(b.bootstrap, topics, a.bg_rate, 1000, bg_max)
        bg.start()
        time.sleep(3.0)  # let segments roll and the cleaner start before measuring
        m0, log0 = b.metrics(), b.log_size()
        res = latency_run(a, b, out)
        m1, log1 = b.metrics(), b.log_size()
        bg.stop_event.set()
        bg.join(60)
        text = b.log_text(since=log0, until=log1)
        print_latency(f"{label} [{loadavg()}]", res)
        rate = bg.sent / bg.elapsed if bg.elapsed else 0
        print(f"      background: {bg.sent} records in {bg.elapsed:.1f} s ({rate:.0f}/s over "
              f"2 topics, target {2 * a.bg_rate}/s), {bg.errors} errors"
              + (f", failed: {bg.failure}" if bg.failure else ""))
        return res, m0, m1, text, rate

    res_c, _, _, text_c, bg_rate_c = with_background(
        ["bg-plain-keyed", "bg-plain"], "(c) plain background writes (control)",
        os.path.join(work, "p2-c"))
    res_b, m0, m1, text_b, bg_rate_b = with_background(
        ["bg-compact", "bg-retention"], "(b) compaction + retention running  ",
        os.path.join(work, "p2-b"))

    res_a2 = latency_run(a, b, os.path.join(work, "p2-a2"))
    print_latency(f"(a') alone again (noise check)     [{loadavg()}]", res_a2)

    def delta(name):
        if name not in m0 or name not in m1:
            return None
        return m1[name] - m0[name]

    cbytes, csecs = delta("keel_compacted_bytes_total"), delta("keel_compaction_seconds_total")
    compacted_lines = len(re.findall(r"\bcompacted shard=", text_b))
    retention_lines = text_b.count("retention deleted segments")
    control_lines = (len(re.findall(r"\bcompacted shard=", text_c)),
                     text_c.count("retention deleted segments"))
    print(f"  during (b): compaction read {fmt(cbytes and cbytes / 1e6, '.1f', ' MB')} in "
          f"{fmt(csecs, '.2f', ' s')} (keel_compacted_bytes_total / "
          f"keel_compaction_seconds_total); log lines: {compacted_lines} \"compacted\", "
          f"{retention_lines} \"retention deleted segments\" (during (c): {control_lines[0]} "
          f"and {control_lines[1]})")
    try:
        admin.close()
    except Exception:  # noqa: BLE001
        pass
    b.stop()
    problems = b.problems()
    print(f"  broker log: {len(problems)} ERROR/WARN lines" +
          "".join(f"\n    {ln[:300]}" for ln in problems[:5]))
    if not a.keep:
        shutil.rmtree(b.data_dir, ignore_errors=True)

    def p(r, k):
        return None if r is None else r[k]

    summary += [
        f"2. produce latency, fixed-rate-latency.toml at {a.rate} records/s (1 KiB, acks=all)",
        "   run                                  p50 ms    p99 ms  p99.9 ms",
    ]
    for label, r in (("(a) alone [baseline]", res_a),
                     (f"(c) + plain writes {bg_rate_c:.0f}/s [control]", res_c),
                     (f"(b) + compact/retention {bg_rate_b:.0f}/s", res_b),
                     ("(a') alone again [noise check]", res_a2)):
        summary.append(f"   {label:36} {fmt(p(r, 'p50'), '8.3f')}  {fmt(p(r, 'p99'), '8.3f')}"
                       f"  {fmt(p(r, 'p999'), '8.3f')}")
    summary += [
        f"   p99(b)/p99(a) = {fmt(ratio(p(res_b, 'p99'), p(res_a, 'p99')))}   "
        f"p99(b)/p99(c) = {fmt(ratio(p(res_b, 'p99'), p(res_c, 'p99')))}",
        f"   during (b): compaction read {fmt(cbytes and cbytes / 1e6, '.1f', ' MB')} in "
        f"{fmt(csecs, '.2f', ' s')}; {compacted_lines} \"compacted\" and {retention_lines} "
        f"\"retention deleted segments\" log lines",
    ]


# ---------------------------------------------------------- part 3: compaction throughput

def part_compaction(a, work, smp, summary):
    print(f"\n== 3. compaction throughput [{loadavg()}]")
    probe_dir = os.path.join(work, "p3-probe")
    os.makedirs(probe_dir, exist_ok=True)
    disk_mb_s = None
    try:
        subprocess.run([a.bench, "probe", "--quick", "--dir", probe_dir, "--out", probe_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
                       check=True)
        with open(os.path.join(probe_dir, "probe.json")) as f:
            disk_mb_s = json.load(f).get("disk_write_mb_per_s")
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        print(f"  ! probe failed: {e!r}")
    print(f"  disk sequential O_DIRECT write (keel-bench probe --quick): "
          f"{fmt(disk_mb_s, '.1f', ' MB/s')}")

    b = Broker(a.keel, os.path.join(work, "p3-data"), smp, ["log.cleaner.backoff.ms=3600000"])
    b.start()
    b.wait_ready()
    fill = ["--set", "name=compact-fill", "--set", "topics=1", "--partitions", "1",
            "--set", "key_distribution=random", "--set", "key_count=10000",
            "--set", "message_size=1024", "--set", "producers_per_topic=1",
            "--set", "consumers_per_topic=0", "--rate", "0",
            "--set", f"max_messages={a.fill_records}", "--duration", "240", "--warmup", "0",
            "--set", "batch_size=262144", "--set", "linger_ms=5",
            "--set", "delete_topics_after=false",
            "--set", "topic_configs.cleanup.policy=compact",
            "--set", "topic_configs.segment.bytes=8388608",
            "--set", "topic_configs.min.cleanable.dirty.ratio=0.5"]
    t = time.perf_counter()
    res = run_bench(a.bench, b.bootstrap, os.path.join(work, "p3-fill"), fill, timeout=300)
    fill_s = time.perf_counter() - t
    # keel-bench's max_messages counts every record a producer sent (the warm-up and the lead
    # before measuring included) while result.json counts measured ones only: count on the
    # broker instead.
    appended = b.metrics().get("keel_produce_records_total")
    if res is None:
        b.stop()
        summary += ["3. compaction throughput: the fill failed (see above)"]
        return
    part_dir = os.path.join(b.data_dir, "keel-bench-compact-fill-0-0")
    before = dir_bytes(part_dir, ".log")
    print(f"  filled: {fmt(appended, '.0f')} records appended (keel_produce_records_total) "
          f"in {fill_s:.1f} s ({res.get('errors')} keel-bench errors); segment files "
          f"{before / 1e6:.1f} MB")
    b.stop()
    b.start(["log.cleaner.backoff.ms=500"])
    serving, _ = b.wait_ready(timeout=300)
    m = b.metrics()
    if "keel_compacted_bytes_total" not in m:
        print("  keel_compacted_bytes_total: not available in this binary's /metrics")
    first_growth = last_growth = None
    last_value = m.get("keel_compacted_bytes_total", 0.0)
    deadline = time.perf_counter() + 180
    while time.perf_counter() < deadline:
        time.sleep(0.25)
        m = b.metrics()
        value = m.get("keel_compacted_bytes_total")
        now = time.perf_counter()
        if value is None:
            if now - b.t_start > 30:
                break  # no metric: watch the log for 30 s only
            continue
        if value != last_value:
            first_growth = first_growth or now
            last_growth = now
            last_value = value
        elif last_growth and now - last_growth > 5.0:
            break
    cbytes = m.get("keel_compacted_bytes_total")
    csecs = m.get("keel_compaction_seconds_total")
    text = b.log_text()
    passes = re.findall(r"\bcompacted shard=.*", text)
    done_after = None if last_growth is None else last_growth - b.t_start
    after = dir_bytes(part_dir, ".log")
    b.stop()
    problems = b.problems()
    mb_s = None if not cbytes or not csecs else cbytes / 1e6 / csecs
    print(f"  restarted in {serving:.2f} s with log.cleaner.backoff.ms=500; compaction read "
          f"{fmt(cbytes and cbytes / 1e6, '.1f', ' MB')} in {fmt(csecs, '.2f', ' s')} "
          f"= {fmt(mb_s, '.1f', ' MB/s')}; {len(passes)} \"compacted\" log lines; "
          f"segment files {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB; last growth seen "
          f"{fmt(done_after, '.1f', ' s')} after the restart began")
    for line in passes[:3]:
        print(f"    {line[:300]}")
    print(f"  broker log: {len(problems)} ERROR/WARN lines" +
          "".join(f"\n    {ln[:300]}" for ln in problems[:5]))
    if not a.keep:
        shutil.rmtree(b.data_dir, ignore_errors=True)
    summary += [
        "3. compaction throughput (1 partition, 10,000 keys, 1 KiB records, 8 MiB segments)",
        f"   compaction                {fmt(mb_s, '.1f', ' MB/s')} "
        f"({fmt(cbytes and cbytes / 1e6, '.1f', ' MB')} in {fmt(csecs, '.2f', ' s')}, "
        f"{len(passes)} passes; log {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB)   "
        f"baseline: disk O_DIRECT write {fmt(disk_mb_s, '.1f', ' MB/s')} "
        f"(ratio {fmt(ratio(mb_s, disk_mb_s), '.3f')})",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keel", default=os.path.join(REPO, "target/release/keel"))
    ap.add_argument("--bench", default=os.path.join(REPO, "target/release/keel-bench"))
    ap.add_argument("--workdir", default=None, help="parent of the temp dir (same disk as "
                    "the data dirs and the probe)")
    ap.add_argument("--rate", type=int, default=50000, help="part 2 records/s")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--bg-rate", type=int, default=2000,
                    help="part 2 background records/s per topic")
    ap.add_argument("--fill-records", type=int, default=200000)
    ap.add_argument("--produce-budget", type=float, default=120,
                    help="part 1: seconds allowed for producing one record per partition")
    ap.add_argument("--only", default="1,2,3")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    a = ap.parse_args()
    for binary in (a.keel, a.bench):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} missing: cargo build --release -p keel-broker -p keel-bench")
    smp = len(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="bench-storage-", dir=a.workdir)
    started = time.perf_counter()
    print(f"machine: {os.cpu_count()} cores ({smp} usable, --smp {smp}); keel: {a.keel}; "
          f"work dir {work}; {loadavg()}")
    summary = []
    try:
        parts = {"1": part_many_partitions, "2": part_latency, "3": part_compaction}
        for p in a.only.split(","):
            parts[p.strip()](a, work, smp, summary)
    finally:
        for b in list(RUNNING):
            b.stop(timeout=30)
        if a.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n== summary ({time.perf_counter() - started:.0f} s, {loadavg()})")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
