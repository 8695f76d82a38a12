#!/usr/bin/env python3
"""Rebalance benchmark (issue 6): rebalance time of a group of 10 members over 100 partitions,
classic protocol against the new one (KIP-848, `group.protocol=consumer`).

One `keel` broker (release build, its own temporary data dir, free Kafka and admin ports,
`--smp <usable cores>`, RUST_LOG=info,openraft=warn) and one topic of 100 partitions. For each
protocol (default: classic with librdkafka's default `range,roundrobin` assignors, classic with
`cooperative-sticky`, and `group.protocol=consumer` with the broker's default server assignor)
and for each of --rounds rounds, a fresh group of confluent-kafka (librdkafka) consumers, each
polled by its own thread (`poll(0.1)`), goes through three phases:

  1. join:  10 consumers subscribe at once; time until the 100 partitions are assigned.
  2. grow:  an 11th consumer subscribes; time until the assignment is again complete.
  3. leave: one of the first 10 is closed (LeaveGroup); time until its partitions are re-owned.

"Assigned" is what the consumers themselves hold: the rebalance callbacks (on_assign, on_revoke,
on_lost) apply each change with assign/unassign (incremental_* for the cooperative protocols)
and then read `consumer.assignment()`; the moment a callback leaves every partition owned by
exactly one live member and every live member owning floor(100/n) or ceil(100/n) of them (so a
member that has not got its share yet does not count as done) ends the phase. Overlaps (a
partition held by two members at once, as the clients see it) are counted and reported. Each
phase has a deadline (--phase-timeout); a phase that misses it is reported as such and ends the
round. Auto-commit is off and the topic is empty: only the group protocol is measured. Each
phase starts as soon as the one before completed, when the members' heartbeat timers have just
restarted: a figure of one heartbeat interval is that worst case, not the average wait of a
change that arrives at a random moment (half an interval).

The numbers are bounded by the protocol's timers, which are printed with them: the classic
protocol's members learn of a rebalance from their next Heartbeat (client
`heartbeat.interval.ms`, librdkafka default 3000), KIP-848's members from their next
ConsumerGroupHeartbeat (broker `group.consumer.heartbeat.interval.ms`, Kafka default 5000).
Keel's classic coordinator has no `group.initial.rebalance.delay.ms` (Kafka's default adds 3 s
to phase 1 of the classic protocol). The table gives each median in heartbeat intervals too
(`/hb`); `--heartbeat-ms` (classic) and `--broker-set group.consumer.heartbeat.interval.ms=N`
(consumer) compare the two on equal timers.

When the broker does not offer ConsumerGroupHeartbeat (API key 68) in ApiVersions, or refuses it,
the consumer protocol is reported as not supported (with the client's error) instead of timed.

Usage: scripts/bench-rebalance.py [--keel target/release/keel] [--rounds 5]
         [--protocols classic-eager,classic-cooperative,consumer] [--phase-timeout 90]
         [--heartbeat-ms 3000] [--session-ms 45000] [--broker-set KEY=VALUE ...]
         [--json FILE] [--workdir DIR] [--keep]
Needs: a release build (cargo build --release -p keel-broker), confluent-kafka
(tests/python/requirements.txt).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, libversion
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANSI = re.compile(rb"\x1b\[[0-9;]*m")
PARTITIONS = 100
MEMBERS = 10
CONSUMER_GROUP_HEARTBEAT = 68
PHASES = ("join", "grow", "leave")
PHASE_TEXT = {
    "join": f"{MEMBERS} members subscribe -> {PARTITIONS} partitions assigned",
    "grow": f"member {MEMBERS + 1} joins -> assignment complete again",
    "leave": "one member closes -> its partitions re-owned",
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def api_versions(port, timeout=5.0):
    """{api_key: (min, max)} from a raw ApiVersions v0 request."""
    req = struct.pack(">hhih", 18, 0, 4242, 15) + b"bench-rebalance"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(req)) + req)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
    _size, corr, err, n = struct.unpack_from(">iihi", buf, 0)
    if corr != 4242 or err != 0:
        raise OSError(f"ApiVersions answered error {err}")
    out = {}
    for i in range(n):
        key, lo, hi = struct.unpack_from(">hhh", buf, 14 + 6 * i)
        out[key] = (lo, hi)
    return out


class Broker:
    def __init__(self, keel, work, smp, settings=()):
        self.keel = keel
        self.settings = list(settings)
        self.data_dir = os.path.join(work, "data")
        self.log = os.path.join(work, "keel.log")
        self.smp = smp
        self.port = free_port()
        self.admin = free_port()
        while self.admin == self.port:
            self.admin = free_port()
        self.proc = None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self, timeout=60):
        args = [self.keel, "--listen", self.bootstrap, "--admin", f"127.0.0.1:{self.admin}",
                "--data-dir", self.data_dir, "--smp", str(self.smp)]
        for kv in self.settings:
            args += ["--set", kv]
        # keel reads KEEL_* variables as settings: none of the caller's may leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
        env["RUST_LOG"] = "info,openraft=warn"
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=logf,
                                         stdin=subprocess.DEVNULL, env=env)
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"keel exited with {self.proc.returncode}; see {self.log}\n"
                         + self.log_tail())
            if self.log_text().count("shard serving") >= self.smp:
                try:
                    return api_versions(self.port)
                except OSError:
                    pass
            time.sleep(0.02)
        self.stop()
        sys.exit(f"keel did not serve within {timeout} s; see {self.log}\n" + self.log_tail())

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return ANSI.sub(b"", f.read()).decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=20):
        return "\n".join(self.log_text().splitlines()[-n:])

    def problems(self):
        return [ln for ln in self.log_text().splitlines() if re.search(r"\b(ERROR|WARN)\b", ln)]

    def stop(self, timeout=30):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"  ! keel did not exit {timeout} s after SIGTERM: killed")
            self.proc.kill()
            self.proc.wait(10)


def create_topic(bootstrap, topic, timeout=60):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)[topic]
    fut.result(timeout=timeout)
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == PARTITIONS and all(
                p.leader >= 0 for p in md.partitions.values()):
            return admin
        time.sleep(0.1)
    sys.exit(f"topic {topic} did not get {PARTITIONS} led partitions within {timeout} s")


def broker_configs(admin, names):
    """{name: value} of the broker's configs (DescribeConfigs of broker 0), {} if refused."""
    try:
        res = ConfigResource(ResourceType.BROKER, "0")
        entries = admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)
    except Exception as e:  # noqa: BLE001 - reported as unknown
        print(f"  (DescribeConfigs of the broker failed: {e})")
        return {}
    return {n: entries[n].value for n in names if n in entries}


# ------------------------------------------------------------------------- the group


class Member:
    def __init__(self, name, conf, group):
        self.name = name
        self.group = group
        self.consumer = Consumer(dict(conf, **{"client.id": name}))
        self.assigned = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors = []
        self.revoked = 0  # partitions handed back (revoked or lost), for the phase counts

    def start(self):
        self.thread.start()

    def _run(self):
        g = self.group
        try:
            self.consumer.subscribe([g.topic], on_assign=self._on_assign,
                                    on_revoke=self._on_revoke, on_lost=self._on_lost)
            while not self.stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is not None:
                    g.error(self, msg.error())
        except Exception as e:  # noqa: BLE001 - recorded, the phase then misses its deadline
            g.error(self, e)

    # Callbacks run inside poll() (or close()), on the thread that calls it.
    def _on_assign(self, c, parts):
        self._apply(c, parts, True)

    def _on_revoke(self, c, parts):
        self.revoked += len(parts)
        self._apply(c, parts, False)

    def _on_lost(self, c, parts):
        self._on_revoke(c, parts)

    def _apply(self, c, parts, add):
        try:
            if self.group.incremental:
                (c.incremental_assign if add else c.incremental_unassign)(parts)
            elif add:
                c.assign(parts)
            else:
                c.unassign()
        except:  # noqa: E722 - confluent-kafka may raise a bare KafkaError (closing consumer)
            if not self.stop.is_set():
                self.group.error(self, sys.exc_info()[1])
            return
        self.group.changed(self)

    def halt(self, timeout=5):
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout)
        return not self.thread.is_alive()


def close_all(consumers, timeout):
    """Closes consumers in parallel threads; returns the names of those still closing."""
    threads = []
    for name, c in consumers:
        t = threading.Thread(target=lambda c=c: _close_quietly(c), name=f"close-{name}",
                             daemon=True)
        t.start()
        threads.append((name, t))
    deadline = time.perf_counter() + timeout
    stuck = []
    for name, t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
        if t.is_alive():
            stuck.append(name)
    return stuck


def _close_quietly(c):
    try:
        c.close()
    except:  # noqa: E722 - best effort; confluent-kafka may raise a bare KafkaError here
        pass


class Group:
    """The members of one group and the moment their assignment becomes complete."""

    def __init__(self, topic, conf, incremental):
        self.topic = topic
        self.conf = conf
        self.incremental = incremental
        self.lock = threading.Condition()
        self.members = []
        self.live = set()
        self.t0 = None
        self.done_at = None
        self.overlaps = 0
        self.errors = []
        self.closing = False  # set for the teardown: callbacks then change nothing

    def add(self, name):
        m = Member(name, self.conf, self)
        self.members.append(m)
        return m

    def error(self, member, err):
        with self.lock:
            self.errors.append((time.perf_counter(), member.name, err))
            self.lock.notify_all()

    def changed(self, member):
        if self.closing:
            return
        try:
            assigned = {(tp.topic, tp.partition) for tp in member.consumer.assignment()}
        except:  # noqa: E722 - a consumer being closed raises a bare KafkaError
            return
        now = time.perf_counter()
        with self.lock:
            member.assigned = assigned
            self._check(now)

    def _check(self, now):
        live = [m for m in self.members if m.name in self.live]
        if not live:
            return
        total = sum(len(m.assigned) for m in live)
        owned = set().union(*(m.assigned for m in live))
        if total > len(owned):
            self.overlaps += 1
        lo, hi = PARTITIONS // len(live), -(-PARTITIONS // len(live))
        if (self.t0 is not None and self.done_at is None and len(owned) == PARTITIONS
                and total == PARTITIONS and all(lo <= len(m.assigned) <= hi for m in live)):
            self.done_at = now
            self.lock.notify_all()

    def begin(self, live):
        """Starts a phase with these live members; returns its start time."""
        with self.lock:
            self.live = set(live)
            self.done_at = None
            self.t0 = time.perf_counter()
            self._check(self.t0)
            return self.t0

    def wait(self, timeout, fatal):
        """Seconds from the phase start until complete; None after `timeout` or a fatal error."""
        deadline = self.t0 + timeout
        with self.lock:
            while self.done_at is None:
                left = deadline - time.perf_counter()
                if left <= 0 or any(fatal(e) for _, _, e in self.errors):
                    return None
                self.lock.wait(min(left, 0.25))
            return self.done_at - self.t0

    def revoked(self):
        return sum(m.revoked for m in self.members)


def is_fatal(err):
    """Errors that mean the group can never form (the protocol is refused or unsupported)."""
    if isinstance(err, KafkaException):
        err = err.args[0]
    if not isinstance(err, KafkaError):
        return True  # a Python exception in a poll thread, or a refusal from RefusalLog
    if err.fatal():
        return True
    return err.code() in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION,
                          KafkaError.INVALID_REQUEST, KafkaError.UNSUPPORTED_ASSIGNOR,
                          KafkaError.GROUP_AUTHORIZATION_FAILED)


def run_round(a, proto, bootstrap, topic, rnd, log, diagnose=False):
    gid = f"bench-rebalance-{proto['name']}-{rnd}-{os.getpid()}"
    refusals = RefusalLog()
    extra_conf = {"debug": "cgrp", "logger": refusals} if diagnose else {}
    conf = dict(proto["conf"], **extra_conf, **{
        "bootstrap.servers": bootstrap,
        "group.id": gid,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "error_cb": lambda e: group.error(_ErrSource(), e),
    })
    group = Group(topic, conf, proto["incremental"])
    refusals.group = group
    out = {"round": rnd, "group": gid}
    for i in range(MEMBERS):
        group.add(f"{proto['name']}-{rnd}-m{i:02}")
    try:
        # 1. join
        group.begin(m.name for m in group.members)
        for m in group.members:
            m.start()
        took = group.wait(a.phase_timeout, is_fatal)
        out["join"] = took
        if took is None:
            return fail(out, group, "join", a.phase_timeout)
        log(f"    round {rnd}: join {took * 1000:.0f} ms")
        # 2. grow
        extra = group.add(f"{proto['name']}-{rnd}-m{MEMBERS:02}")
        rev0 = group.revoked()
        group.begin(m.name for m in group.members)
        extra.start()
        took = group.wait(a.phase_timeout, is_fatal)
        out["grow"] = took
        out["grow_revoked"] = group.revoked() - rev0
        if took is None:
            return fail(out, group, "grow", a.phase_timeout)
        log(f"    round {rnd}: grow {took * 1000:.0f} ms "
            f"({out['grow_revoked']} partitions revoked on the way)")
        # 3. leave: the first member stops polling, then closes (LeaveGroup).
        victim = group.members[0]
        victim.halt()
        rev0 = group.revoked() - victim.revoked
        group.begin(m.name for m in group.members if m is not victim)
        tc = time.perf_counter()
        stuck = close_all([(victim.name, victim.consumer)], a.phase_timeout)
        out["leave_close_call"] = None if stuck else time.perf_counter() - tc
        took = group.wait(a.phase_timeout, is_fatal)
        out["leave"] = took
        out["leave_revoked"] = group.revoked() - victim.revoked - rev0
        if took is None:
            return fail(out, group, "leave", a.phase_timeout)
        log(f"    round {rnd}: leave {took * 1000:.0f} ms (close() returned after "
            f"{fmt_ms(out['leave_close_call'])}; {out['leave_revoked']} partitions revoked "
            f"from the others)")
        out["overlaps"] = group.overlaps
        return out
    finally:
        with group.lock:
            group.closing = True
        for m in group.members:
            m.halt()
        # The leave phase's member is closed already (or still closing: left alone).
        rest = [(m.name, m.consumer) for m in group.members
                if not (m is group.members[0] and "leave_close_call" in out)]
        stuck = close_all(rest, 60)
        if stuck:
            log(f"    ! {len(stuck)} consumers still closing after 60 s (left behind)")
        out["errors"] = sorted({f"{name}: {e}" for _, name, e in group.errors})[:10]


class _ErrSource:
    name = "client"


class RefusalLog:
    """A `logger` for librdkafka's debug=cgrp lines (used only when the broker does not offer
    ConsumerGroupHeartbeat): librdkafka then only logs, at debug level, that the broker does
    not support it, and keeps retrying; that line is turned into an error."""

    def __init__(self):
        self.group = None

    def log(self, level, fmt, *args):
        line = fmt % args if args else str(fmt)
        if "not supported" in line and self.group is not None:
            self.group.error(_ErrSource(), line.split("]: ", 1)[-1])


def fail(out, group, phase, timeout):
    fatal = [(n, e) for _, n, e in group.errors if is_fatal(e)]
    if fatal:
        out["failed"] = f"{phase}: client error: {fatal[0][1]}"
    else:
        with group.lock:
            live = [m for m in group.members if m.name in group.live]
            held = sorted(len(m.assigned) for m in live)
        out["failed"] = (f"{phase}: not complete within {timeout:.0f} s "
                         f"(partitions held per live member: {held})")
    out["overlaps"] = group.overlaps
    return out


def fmt_ms(s):
    return "-" if s is None else f"{s * 1000:.0f} ms"


# ------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keel", default=os.path.join(REPO, "target/release/keel"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--protocols", default="classic-eager,classic-cooperative,consumer",
                    help="comma-separated: classic-eager (range,roundrobin), "
                    "classic-cooperative (cooperative-sticky), consumer (KIP-848, broker's "
                    "default assignor), consumer-range, consumer-uniform")
    ap.add_argument("--phase-timeout", type=float, default=90.0,
                    help="seconds a phase may take before it counts as failed")
    ap.add_argument("--heartbeat-ms", type=int, default=3000,
                    help="classic heartbeat.interval.ms (librdkafka default 3000)")
    ap.add_argument("--session-ms", type=int, default=45000,
                    help="classic session.timeout.ms (librdkafka default 45000)")
    ap.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting (--set), e.g. group.consumer.heartbeat.interval.ms"
                    "=3000 to give both protocols the same heartbeat; repeatable")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': stdout)")
    ap.add_argument("--workdir", default=None, help="parent of the temp dir")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (data, broker log)")
    a = ap.parse_args()
    if not os.access(a.keel, os.X_OK):
        sys.exit(f"{a.keel} missing: cargo build --release -p keel-broker")
    classic = {"group.protocol": "classic", "session.timeout.ms": a.session_ms,
               "heartbeat.interval.ms": a.heartbeat_ms}
    known = {
        "classic-eager": {"conf": dict(classic, **{
            "partition.assignment.strategy": "range,roundrobin"}), "incremental": False},
        "classic-cooperative": {"conf": dict(classic, **{
            "partition.assignment.strategy": "cooperative-sticky"}), "incremental": True},
        "consumer": {"conf": {"group.protocol": "consumer"}, "incremental": True},
        "consumer-range": {"conf": {"group.protocol": "consumer",
                                    "group.remote.assignor": "range"}, "incremental": True},
        "consumer-uniform": {"conf": {"group.protocol": "consumer",
                                      "group.remote.assignor": "uniform"}, "incremental": True},
    }
    protos = []
    for name in a.protocols.split(","):
        name = name.strip()
        if name not in known:
            sys.exit(f"unknown protocol {name!r}: one of {', '.join(known)}")
        protos.append(dict(known[name], name=name))

    smp = len(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="bench-rebalance-", dir=a.workdir)
    started = time.perf_counter()
    print(f"machine: {os.cpu_count()} cores ({smp} usable, --smp {smp}); keel: {a.keel}; "
          f"confluent-kafka {confluent_kafka.__version__}, librdkafka {libversion()[0]}; "
          f"{loadavg()}")
    broker = Broker(a.keel, work, smp, a.broker_set)
    results = {"cores": os.cpu_count(), "usable_cores": smp, "keel": a.keel,
               "librdkafka": libversion()[0], "confluent_kafka": confluent_kafka.__version__,
               "partitions": PARTITIONS, "members": MEMBERS, "rounds": a.rounds,
               "phase_timeout_s": a.phase_timeout, "broker_settings": a.broker_set,
               "protocols": []}
    try:
        apis = broker.start()
        topic = "rebalance-bench"
        admin = create_topic(broker.bootstrap, topic)
        bcfg = broker_configs(admin, [
            "group.min.session.timeout.ms", "group.max.session.timeout.ms",
            "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
            "group.consumer.assignors"])
        del admin  # its connections would log errors once the broker stops
        cgh = apis.get(CONSUMER_GROUP_HEARTBEAT)
        print(f"broker {broker.bootstrap} (settings: {' '.join(a.broker_set) or 'defaults'}); "
              f"topic {topic}: {PARTITIONS} partitions; "
              f"ConsumerGroupHeartbeat (API 68) in ApiVersions: "
              f"{'v%d-%d' % cgh if cgh else 'not offered'}")
        for p in protos:
            res = {"name": p["name"], "client_config": {
                k: v for k, v in p["conf"].items()}, "rounds": []}
            if p["conf"]["group.protocol"] == "classic":
                res["settings"] = (
                    f"session.timeout.ms={a.session_ms}, heartbeat.interval.ms="
                    f"{a.heartbeat_ms} (client); assignors "
                    f"{p['conf']['partition.assignment.strategy']}")
                res["heartbeat_ms"] = a.heartbeat_ms
            else:
                hb = bcfg.get("group.consumer.heartbeat.interval.ms")
                st = bcfg.get("group.consumer.session.timeout.ms")
                res["settings"] = (
                    f"group.consumer.session.timeout.ms={st or '? (Kafka default 45000)'}, "
                    f"group.consumer.heartbeat.interval.ms={hb or '? (Kafka default 5000)'} "
                    f"(broker); assignor "
                    f"{p['conf'].get('group.remote.assignor', 'broker default')}")
                res["heartbeat_ms"] = int(hb) if hb else None
            print(f"\n== {p['name']}: {res['settings']} [{loadavg()}]")
            if p["conf"]["group.protocol"] == "consumer" and not cgh:
                res["unsupported"] = ("the broker does not offer ConsumerGroupHeartbeat "
                                      "(API key 68) in ApiVersions")
            rounds = a.rounds
            diagnose = p["conf"]["group.protocol"] == "consumer" and not cgh
            if diagnose:
                rounds = 1  # one try, to show what the client says
            for r in range(rounds):
                out = run_round(a, p, broker.bootstrap, topic, r + 1, print, diagnose)
                res["rounds"].append(out)
                if "failed" in out:
                    print(f"    round {r + 1}: FAILED {out['failed']}")
                    for e in out["errors"][:3]:
                        print(f"      {e}")
                    if p["conf"]["group.protocol"] == "consumer" and (
                            not cgh or out["failed"].split(": ", 1)[1].startswith("client")):
                        res["unsupported"] = (res.get("unsupported", "the broker refused it")
                                              + f"; client: {out['failed']}")
                        break
            for ph in PHASES:
                vals = [o[ph] for o in res["rounds"] if o.get(ph) is not None]
                res[ph] = {"n": len(vals),
                           "median_ms": statistics.median(vals) * 1000 if vals else None,
                           "max_ms": max(vals) * 1000 if vals else None}
            res["overlaps"] = sum(o.get("overlaps", 0) for o in res["rounds"])
            results["protocols"].append(res)
    finally:
        broker.stop()
        problems = broker.problems()
        results["broker_warn_error_lines"] = len(problems)
        if a.keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    report(results, a)


def report(results, a):
    print(f"\n== summary ({results['seconds']:.0f} s, machine: {results['cores']} cores, "
          f"{loadavg()}; librdkafka {results['librdkafka']}; {results['members']} members, "
          f"{results['partitions']} partitions, {results['rounds']} rounds; broker log: "
          f"{results['broker_warn_error_lines']} ERROR/WARN lines)")
    head = (f"{'protocol':<22} {'phase':<6} {'ok':>5} {'median':>9} {'max':>9} {'/hb':>5}  "
            f"settings / notes")
    print(head)
    print("-" * len(head))
    for p in results["protocols"]:
        if p.get("unsupported"):
            print(f"{p['name']:<22} {'-':<6} {'-':>5} {'-':>9} {'-':>9} {'-':>5}  NOT SUPPORTED: "
                  f"{p['unsupported']}")
            continue
        for i, ph in enumerate(PHASES):
            s = p[ph]
            tried = sum(1 for o in p["rounds"] if ph in o)
            note = p["settings"] if i == 0 else ""
            if i == 1:
                rev = [o["grow_revoked"] for o in p["rounds"] if o.get("grow") is not None]
                note = f"partitions revoked while growing: median {statistics.median(rev):g}" \
                    if rev else ""
            if i == 2:
                note = f"client-side overlaps seen: {p['overlaps']}"
            med = "-" if s["median_ms"] is None else f"{s['median_ms']:.0f} ms"
            mx = "-" if s["max_ms"] is None else f"{s['max_ms']:.0f} ms"
            hb = "-" if s["median_ms"] is None or not p.get("heartbeat_ms") else \
                f"{s['median_ms'] / p['heartbeat_ms']:.2f}"
            print(f"{p['name']:<22} {ph:<6} {s['n']:>2}/{tried:<2} {med:>9} {mx:>9} {hb:>5}  "
                  f"{note}")
        fails = [o["failed"] for o in p["rounds"] if "failed" in o]
        for f in fails:
            print(f"{'':<22} ! {f}")
    print("phases: " + "; ".join(f"{ph} = {PHASE_TEXT[ph]}" for ph in PHASES))
    print("/hb: the median in heartbeat intervals (members learn of a rebalance from their next "
          "heartbeat, so that is the unit the numbers come in)")
    classics = [p for p in results["protocols"]
                if p["name"].startswith("classic") and not p.get("unsupported")]
    for p in results["protocols"]:
        if not p["name"].startswith("consumer") or p.get("unsupported"):
            continue
        for c in classics:
            parts = [f"{ph} {p[ph]['median_ms'] / c[ph]['median_ms']:.2f}x" for ph in PHASES
                     if p[ph]["median_ms"] is not None and c[ph]["median_ms"]]
            if parts:
                print(f"ratio {p['name']} / {c['name']} (medians, same run): "
                      + ", ".join(parts))
    if a.json:
        text = json.dumps(results, indent=2, default=str)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as f:
                f.write(text + "\n")
            print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
