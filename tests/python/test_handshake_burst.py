"""A burst of TLS handshakes (issue 19): the broker runs each handshake on its shard's `auth`
task queue, so 500 clients connecting to an SSL listener at once must neither fire the reactor
stall detector nor starve the plaintext clients the shard also serves.

One broker with one shard (every connection lands on it), an SSL listener and a plaintext
client listener, the stall detector at its default `reactor.stall.threshold.ms=10`. 500
asyncio clients connect to the SSL listener at once, each with a full TLS handshake (one
client SSLContext that is never handed a session, so nothing is resumed: each connection's
`session_reused` is checked), then send one ApiVersions v0 and read its whole answer. Meanwhile
a child process keeps sending ApiVersions v0 on one plaintext connection and times each round
trip. Afterwards: every TLS client got its answer; no plaintext round trip during the burst
took longer than half the burst (see PLAINTEXT_RTT_MAX_S); the auth task queue did the
handshakes' work (`keel_task_queue_busy_seconds_total{queue="auth"}`);
`keel_reactor_stalls_total` did not move and the log has no glommio stall report. Every wait
is bounded; a run takes 2-5 s.

glommio's stall detector measures wall time: on a machine where other processes take the
shard's core (a compile), a queue run that lasts its whole 100 ms slice can be reported over
budget because the kernel held the thread, not because a task did not yield. The auth queue
is paced (broker/src/frontend/auth_queue.rs: it yields after each 250 us of work), so its runs
are short and this holds with two busy loops on the machine's two cores (10 of 10 runs, the
shard thread waiting for a CPU as long as it ran; unpaced, 2 of 14 such runs failed). The
failure message gives the shard thread's time waiting for a CPU during the burst (/proc
schedstat)."""

import asyncio
import os
import select
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest

from conftest import _finish_broker, _make_broker, _test_failed

BURST = 500
# The whole burst (connect, handshake, ApiVersions, close for all 500) must end within this.
BURST_TIMEOUT_S = 40.0
# One connection's handshake, and its ApiVersions round trip, each within this.
CONNECTION_TIMEOUT_S = 30.0
# No plaintext round trip in flight during the burst may take half the burst's wall time, nor
# PLAINTEXT_RTT_MAX_S. A shard that held its reactor for the handshakes would keep a request
# sent as the burst begins until nearly its end; the whole burst takes under 1 s here (debug
# build, 2 cores), so an absolute bound alone could not fail. The auth queue keeps the reactor
# for a preempt timer's slice (io.latency.goal.us, 100 ms by default) before the default queue
# runs: round trips during the burst peak at 0.15-0.2 s (one or two slices), so the bound is
# never below PLAINTEXT_RTT_FLOOR_S (three slices and a half; a short burst, from a release
# build, is not held to less).
PLAINTEXT_RTT_MAX_S = 2.0
PLAINTEXT_RTT_FLOOR_S = 0.35
# Pause between the plaintext loop's round trips.
PLAINTEXT_INTERVAL_S = 0.005
HERE = os.path.dirname(os.path.abspath(__file__))
STALL_REPORT = "stall-detector"
API_VERSIONS = 18


@pytest.fixture
def burst_keel(request, certs):
    """One shard, so the handshakes and the plaintext client share a reactor."""
    settings = {
        "ssl.keystore.location": os.path.join(certs, "keystore.pem"),
        "reactor.stall.threshold.ms": 10,
    }
    b = _make_broker(request, settings, name="keel-handshake-burst", smp=1,
                     listeners={"SSL": "SSL", "CLIENT": "PLAINTEXT"})
    yield b
    _finish_broker(b, _test_failed(request.node))


def api_versions_frame(correlation_id):
    """ApiVersions v0: request header v1 (client id "burst"), empty body."""
    payload = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, 5) + b"burst"
    return struct.pack(">i", len(payload)) + payload


def parse_api_versions_v0(payload):
    """-> (correlation id, error code, api keys listed)."""
    corr, err, n = struct.unpack(">ihi", payload[:10])
    assert len(payload) == 10 + 6 * max(n, 0), (
        "ApiVersions v0 answer of %d bytes lists %d apis" % (len(payload), n))
    keys = [struct.unpack(">h", payload[10 + 6 * i:12 + 6 * i])[0] for i in range(max(n, 0))]
    return corr, err, keys


def plaintext_loop(port):
    """Run in a process of its own (so that the asyncio clients' CPU and the GIL do not delay
    it): ApiVersions v0 round trips on one plaintext connection until stdin closes, each
    written to stdout as "START_MONOTONIC_S SECONDS"; an error ends it with "error: ..."."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10.0) as s:
            s.settimeout(10.0)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            corr = 0
            while not select.select([sys.stdin], [], [], 0)[0]:
                corr += 1
                started = time.monotonic()
                s.sendall(api_versions_frame(corr))
                got_corr, err, _ = parse_api_versions_v0(recv_frame(s))
                if (got_corr, err) != (corr, 0):
                    raise AssertionError("ApiVersions %d answered %d, error %d"
                                         % (corr, got_corr, err))
                print("%.6f %.6f" % (started, time.monotonic() - started), flush=True)
                time.sleep(PLAINTEXT_INTERVAL_S)
    except Exception as e:
        print("error: %r" % (e,), flush=True)


class PlaintextLoop:
    """`plaintext_loop` in a child process; CLOCK_MONOTONIC is the machine's, so its start
    times compare with this process's `time.monotonic()`."""

    def __init__(self, port):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import test_handshake_burst as t; t.plaintext_loop(%d)" % port],
            cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines = []
        self._partial = ""

    def wait_for_trips(self, n, timeout_s):
        """Reads its output until n round trips are reported (or an error, or the timeout)."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while len(self.trips()) < n and self.error() is None and time.monotonic() < deadline:
            if select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                chunk = os.read(fd, 65536).decode()
                if not chunk:
                    break
                self._partial += chunk
                *done, self._partial = self._partial.split("\n")
                self.lines += done

    def stop(self):
        out, _ = self.proc.communicate(timeout=20)  # closes its stdin: the loop ends
        self.lines += (self._partial + out).splitlines()
        self._partial = ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def error(self):
        return next((l for l in self.lines if l.startswith("error")), None)

    def trips(self):
        """[(start, seconds)] of every round trip reported."""
        return [tuple(float(x) for x in l.split()) for l in self.lines
                if l and not l.startswith("error")]

    def trips_between(self, start, end):
        """The round trips in flight at some time between start and end."""
        return [rtt for t, rtt in self.trips() if t <= end and t + rtt >= start]


def recv_frame(s):
    def exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)
    return exact(struct.unpack(">i", exact(4))[0])


async def tls_setup(ctx, port, correlation_id):
    """One connection: TCP, a full TLS handshake, ApiVersions v0, close.
    -> (correlation id, error code, whether the TLS session was resumed, seconds)."""
    started = time.monotonic()
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1",
                                ssl_handshake_timeout=CONNECTION_TIMEOUT_S),
        CONNECTION_TIMEOUT_S)
    try:
        reused = writer.get_extra_info("ssl_object").session_reused
        writer.write(api_versions_frame(correlation_id))
        await writer.drain()

        async def answer():
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            return await reader.readexactly(size)
        corr, err, keys = parse_api_versions_v0(
            await asyncio.wait_for(answer(), CONNECTION_TIMEOUT_S))
        assert API_VERSIONS in keys, keys
        return corr, err, reused, time.monotonic() - started
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 5.0)
        except (OSError, ssl.SSLError, asyncio.TimeoutError):
            pass


async def burst(ca, port):
    ctx = ssl.create_default_context(cafile=ca)  # verifies the chain and 127.0.0.1
    ctx.options |= ssl.OP_NO_TICKET
    tasks = [tls_setup(ctx, port, 1000 + i) for i in range(BURST)]
    return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                  BURST_TIMEOUT_S)


def stalls(b):
    return b.metrics().by_shard("keel_reactor_stalls_total")


def shard_sched_s(b):
    """(seconds on a CPU, seconds runnable but waiting for one) of shard 0's thread, from
    /proc/PID/task/TID/schedstat; None where the kernel does not keep them. The wait tells a
    stall that the kernel caused (another process had the core) from one the shard caused."""
    try:
        tid = next(l["thread_id"] for l, _ in b.metrics()["keel_shard_info"] if l["shard"] == "0")
        with open("/proc/%d/task/%s/schedstat" % (b.proc.pid, tid)) as f:
            run_ns, wait_ns = f.read().split()[:2]
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, KeyError, StopIteration, ValueError):
        return None


def auth_busy_s(b):
    return b.metrics().sum("keel_task_queue_busy_seconds_total", queue="auth")


def test_a_burst_of_full_handshakes_neither_stalls_nor_starves_plaintext(burst_keel, certs):
    b = burst_keel
    stalls_before = stalls(b)
    assert stalls_before, "no keel_reactor_stalls_total in /metrics"
    auth_before = auth_busy_s(b)
    sched_before = shard_sched_s(b)

    loop = PlaintextLoop(b.listener_port("CLIENT"))
    try:
        loop.wait_for_trips(20, timeout_s=10)
        assert loop.error() is None and len(loop.trips()) >= 20, (loop.error(), loop.lines[-5:])
        burst_start = time.monotonic()
        results = asyncio.run(burst(os.path.join(certs, "ca.pem"), b.listener_port("SSL")))
        burst_s = time.monotonic() - burst_start
        loop.stop()
    finally:
        loop.kill()

    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert not failed, "%d of %d TLS setups failed, the first: %r" % (
        len(failed), BURST, failed[:5])
    assert [(corr, err) for corr, err, _, _ in results] == [
        (1000 + i, 0) for i in range(BURST)]
    assert not any(reused for _, _, reused, _ in results), "a TLS session was resumed"
    setup_s = sorted(s for _, _, _, s in results)

    assert loop.error() is None, "the plaintext loop failed: %s" % loop.error()
    before = [rtt for t, rtt in loop.trips() if t < burst_start]
    during = loop.trips_between(burst_start, burst_start + burst_s)
    assert during, "no plaintext round trip began during the %.2f s burst" % burst_s
    rtt_max = max(during)
    rtt_allowed = min(PLAINTEXT_RTT_MAX_S, max(PLAINTEXT_RTT_FLOOR_S, burst_s / 2))
    auth_s = auth_busy_s(b) - auth_before
    sched_after = shard_sched_s(b)
    summary = ("burst of %d in %.2f s (setup p50 %.3f s, max %.3f s); auth task queue busy "
               "%.3f s; plaintext: %d round trips during the burst, max %.3f s (allowed %.3f s; "
               "max %.4f s before it)" % (
                   BURST, burst_s, setup_s[BURST // 2], setup_s[-1], auth_s, len(during),
                   rtt_max, rtt_allowed, max(before)))
    if sched_before and sched_after:
        summary += "; shard thread on a CPU %.3f s, waiting for one %.3f s" % (
            sched_after[0] - sched_before[0], sched_after[1] - sched_before[1])
    print(summary)
    assert rtt_max < rtt_allowed, summary
    # The handshakes ran on the auth task queue (0.7-0.9 ms each in a debug build).
    assert auth_s > 0.05, summary

    time.sleep(0.2)  # glommio logs a stall when the queue's run ends; let it reach the log
    log = b.log_text()
    reports = [l[l.find(STALL_REPORT):l.find("Backtrace")] for l in log.splitlines()
               if STALL_REPORT in l]
    assert stalls(b) == stalls_before, (summary, reports)
    assert not reports, (summary, log[log.find(STALL_REPORT):][:3000])
