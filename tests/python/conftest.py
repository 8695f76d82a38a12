"""Fixtures that run the real `keel` binary for the Python integration tests.

`keel` (session scope) is one broker shared by tests that only touch their own topics.
`keel_factory` (function scope) starts dedicated brokers with extra `--set` settings, for tests
that restart, kill or reconfigure the broker. Every wait loop here is bounded.
"""

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KEEL_BIN = os.environ.get("KEEL_BIN") or os.path.normpath(
    os.path.join(HERE, "..", "..", "target", "debug", "keel"))

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

# Brokers currently running, so that a failing test can show their logs.
_LIVE_BROKERS = []


_GIVEN_PORTS = set()


def free_port():
    """A TCP port that nothing listens on right now (the kernel picks it) and that this session
    has not handed out before: the kernel may hand out one free port twice in a row, and every
    port here is bound later by a broker (a cluster needs nine)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def unique(prefix):
    """A topic name no other test uses."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def api_versions_ok(port, timeout=1.0):
    """True when an ApiVersions v0 request on the port gets its answer (error code 0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        req = struct.pack(">hhih", 18, 0, 4242, 4) + b"wait"
        s.sendall(struct.pack(">i", len(req)) + req)
        buf = b""
        while len(buf) < 10:
            chunk = s.recv(4096)
            if not chunk:
                return False
            buf += chunk
        _size, corr, err = struct.unpack(">iih", buf[:10])
        return corr == 4242 and err == 0


class Metrics(dict):
    """Parsed Prometheus text: {metric name: [(labels dict, value), ...]}."""

    def sum(self, name, **labels):
        return sum(v for l, v in self.get(name, []) if all(l.get(k) == str(x) for k, x in labels.items()))

    def by_shard(self, name, **labels):
        out = {}
        for l, v in self.get(name, []):
            if all(l.get(k) == str(x) for k, x in labels.items()):
                out[int(l["shard"])] = out.get(int(l["shard"]), 0) + v
        return out


_LINE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    m = Metrics()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        mo = _LINE_RE.match(line)
        if not mo:
            continue
        labels = dict(_LABEL_RE.findall(mo.group(3) or ""))
        m.setdefault(mo.group(1), []).append((labels, float(mo.group(4))))
    return m


class KeelBroker:
    def __init__(self, extra_settings=None, smp=2, name="keel", extra_args=None, listeners=None):
        if not os.path.exists(KEEL_BIN):
            raise RuntimeError("keel binary not found at %s (set KEEL_BIN)" % KEEL_BIN)
        self.name = name
        self.smp = smp
        self.settings = dict(extra_settings or {})
        # Flags other than settings (a cluster member's --node-id, --controller-quorum, ...).
        self.extra_args = list(extra_args or [])
        self.data_dir = tempfile.mkdtemp(prefix="keel-data-")
        self.log_path = os.path.join(tempfile.mkdtemp(prefix="keel-log-"), "keel.log")
        self.port = free_port()
        self.admin_port = free_port()
        while self.admin_port == self.port:
            self.admin_port = free_port()
        # More listeners beside PLAINTEXT on `port`: {NAME: security protocol}, each on a port
        # of its own (`listener_port(NAME)`).
        self.listeners = dict(listeners or {})
        self.listener_ports = {name: free_port() for name in self.listeners}
        self.proc = None
        self.starts = 0
        # The protocol of a cluster member's controller listener (see `spawn`).
        self.controller_protocol = "PLAINTEXT"

    @property
    def bootstrap(self):
        return "127.0.0.1:%d" % self.port

    def listener_port(self, name):
        return self.listener_ports[name]

    def listener_bootstrap(self, name):
        return "127.0.0.1:%d" % self.listener_ports[name]

    @property
    def admin_url(self):
        return "http://127.0.0.1:%d" % self.admin_port

    # -- lifecycle -------------------------------------------------------------------------
    def start(self):
        self.spawn()
        self._wait_ready()

    def spawn(self):
        """Start the process without waiting until it serves (a cluster's nodes serve only
        once their metadata quorum has a leader, so they are spawned together, then waited
        for with `wait_ready`)."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        cmd = [KEEL_BIN, "--data-dir", self.data_dir,
               "--smp", str(self.smp), "--admin", "127.0.0.1:%d" % self.admin_port]
        # A cluster member's controller listener is mapped explicitly (Keel refuses an
        # unmapped one): PLAINTEXT unless the test says otherwise (`controller_protocol`).
        controller = ([("CONTROLLER", self.controller_protocol)]
                      if "controller.listen" in self.settings
                      or "--controller-listen" in self.extra_args else [])
        if self.listeners:
            names = [("PLAINTEXT", "PLAINTEXT", self.port)] + [
                (n, p, self.listener_ports[n]) for n, p in self.listeners.items()]
            cmd += ["--set", "listeners=" + ",".join(
                        "%s://127.0.0.1:%d" % (n, port) for n, _, port in names),
                    "--set", "listener.security.protocol.map=" + ",".join(
                        "%s:%s" % (n, p) for n, p in [(n, p) for n, p, _ in names] + controller)]
        else:
            cmd += ["--listen", self.bootstrap]
            if controller and "listener.security.protocol.map" not in self.settings:
                cmd += ["--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,"
                        + ",".join("%s:%s" % c for c in controller)]
        for k, v in self.settings.items():
            cmd += ["--set", "%s=%s" % (k, v)]
        cmd += self.extra_args
        # keel reads KEEL_* variables as settings, so the test's own (KEEL_BIN) must not leak.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_")}
        # Groups form without Kafka's 3 s initial rebalance delay unless a test sets it.
        env["KEEL_GROUP_INITIAL_REBALANCE_DELAY_MS"] = "0"
        env.setdefault("RUST_LOG", "info,openraft=warn")
        env.setdefault("NO_COLOR", "1")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(("\n===== start #%d: %s\n" % (self.starts, " ".join(cmd))).encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)

    def wait_ready(self):
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        last_err = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("keel exited with %s during start-up\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                # A real ApiVersions round trip: right after a kill -9 the dead process's
                # listening socket can linger (io_uring releases files asynchronously) and still
                # accept connections that nobody answers. Only the Kafka port is probed: an HTTP
                # request to the admin port leaves a server-side TIME_WAIT there.
                if api_versions_ok(self.port):
                    return
            except OSError as e:
                last_err = e
                time.sleep(0.05)
        raise RuntimeError("keel did not accept connections on %s within %ss (%s)\n%s"
                           % (self.bootstrap, START_TIMEOUT_S, last_err, self.log_tail()))

    def stop(self, sig=signal.SIGTERM):
        """Send `sig`, wait (bounded), kill -9 if still alive. Returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
            raise RuntimeError("keel did not exit within %ss of signal %s" % (STOP_TIMEOUT_S, sig))

    def restart(self):
        """Clean shutdown (SIGTERM) and start again on the same ports and data dir."""
        rc = self.stop(signal.SIGTERM)
        self.start()
        return rc

    def kill9_and_restart(self):
        """Crash (SIGKILL) and start again on the same ports and data dir."""
        self.stop(signal.SIGKILL)
        self.start()

    def close(self):
        try:
            self.stop(signal.SIGTERM)
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)

    def cleanup_files(self):
        shutil.rmtree(self.data_dir, ignore_errors=True)
        shutil.rmtree(os.path.dirname(self.log_path), ignore_errors=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    # -- observation -----------------------------------------------------------------------
    def metrics_text(self):
        with urllib.request.urlopen(self.admin_url + "/metrics", timeout=5.0) as r:
            return r.read().decode()

    def metrics(self):
        return parse_metrics(self.metrics_text())

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return ANSI_RE.sub("", f.read().decode("utf-8", "replace"))
        except OSError:
            return ""

    def log_tail(self, lines=80):
        return "\n".join(self.log_text().splitlines()[-lines:])


def _make_broker(request, settings=None, name="keel", listeners=None, extra_args=None, smp=2):
    b = KeelBroker(settings, smp=smp, name=name, listeners=listeners, extra_args=extra_args)
    _LIVE_BROKERS.append(b)
    try:
        b.start()
    except Exception:
        _LIVE_BROKERS.remove(b)
        b.close()
        raise
    return b


def _finish_broker(b, failed):
    try:
        b.close()
    finally:
        if b in _LIVE_BROKERS:
            _LIVE_BROKERS.remove(b)
        if failed:
            sys.stdout.write("\n----- %s (%s) stderr tail (full log kept at %s) -----\n%s\n"
                             % (b.name, b.bootstrap, b.log_path, b.log_tail(40)))
        else:
            b.cleanup_files()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
    if rep.failed:
        item.session._keel_failed = True
        for b in list(_LIVE_BROKERS):
            rep.sections.append(("%s %s stderr tail" % (b.name, b.bootstrap), b.log_tail()))
            if b.proc is not None and b.proc.poll() is not None:
                rep.sections.append(("%s exit status" % b.name, str(b.proc.returncode)))


def _test_failed(node):
    return any(getattr(node, "rep_" + w, None) is not None and getattr(node, "rep_" + w).failed
               for w in ("setup", "call"))


@pytest.fixture(scope="session")
def keel(request):
    """One broker (--smp 2, defaults) shared by tests that use their own topics."""
    b = _make_broker(request, name="keel-shared")
    yield b
    _finish_broker(b, getattr(request.session, "_keel_failed", False))


@pytest.fixture
def keel_factory(request):
    """Start dedicated brokers: keel_factory({'num.partitions': 3}) -> KeelBroker."""
    made = []

    def make(settings=None, name="keel-dedicated", listeners=None):
        b = _make_broker(request, settings, name=name, listeners=listeners)
        made.append(b)
        return b

    yield make
    failed = _test_failed(request.node)
    for b in made:
        _finish_broker(b, failed)


# Settings every cluster test runs with: short fencing and lag timeouts, as the Rust harness's
# (broker/tests/common/replicated.rs).
CLUSTER_SETTINGS = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 200,
}


class KeelCluster:
    """Brokers 1..n, every one a voter of the metadata quorum (as the Rust harness's
    `cluster(n, extra)`)."""

    def __init__(self, brokers):
        self.brokers = brokers

    def node(self, node_id):
        return self.brokers[node_id - 1]

    @property
    def bootstrap(self):
        return ",".join(b.bootstrap for b in self.brokers if b.alive())


@pytest.fixture
def keel_cluster(request):
    """Start clusters: keel_cluster(3, {'auto.leader.rebalance.enable': 'false'}) -> KeelCluster."""
    made = []

    def make(n=3, settings=None, listeners=None, extra_args=None, controller_protocol="PLAINTEXT"):
        controller_ports = [free_port() for _ in range(n)]
        quorum = ",".join("%d@127.0.0.1:%d" % (i + 1, p) for i, p in enumerate(controller_ports))
        brokers = []
        for i in range(n):
            s = dict(CLUSTER_SETTINGS)
            s.update(settings or {})
            s.update({"node.id": i + 1, "controller.quorum.voters": quorum,
                      "controller.listen": "127.0.0.1:%d" % controller_ports[i]})
            b = KeelBroker(s, name="keel-node-%d" % (i + 1), listeners=listeners,
                           extra_args=extra_args)
            b.controller_protocol = controller_protocol
            _LIVE_BROKERS.append(b)
            made.append(b)
            brokers.append(b)
        for b in brokers:
            b.spawn()
        for b in brokers:
            b.wait_ready()
        return KeelCluster(brokers)

    yield make
    failed = _test_failed(request.node)
    for b in made:
        _finish_broker(b, failed)


def start_cluster(n, settings=None, name="keel-node"):
    """`n` voters (node ids 1..n) on loopback, started together as broker/tests/common's
    `cluster` starts them (each a controller voter with its own controller port), then each
    waited for. Returns the brokers, registered for log tails; `finish_cluster` stops them."""
    merged = dict(CLUSTER_SETTINGS)
    merged.update(settings or {})
    brokers = [KeelBroker(merged, name="%s-%d" % (name, i + 1)) for i in range(n)]
    taken = {p for b in brokers for p in (b.port, b.admin_port)}
    controller_ports = []
    while len(controller_ports) < n:
        port = free_port()
        if port not in taken:
            taken.add(port)
            controller_ports.append(port)
    quorum = ",".join("%d@127.0.0.1:%d" % (i + 1, p) for i, p in enumerate(controller_ports))
    for i, b in enumerate(brokers):
        b.extra_args = ["--node-id", str(i + 1), "--controller-quorum", quorum,
                        "--controller-listen", "127.0.0.1:%d" % controller_ports[i]]
        _LIVE_BROKERS.append(b)
    try:
        for b in brokers:
            b.spawn()
        for b in brokers:
            b._wait_ready()
    except Exception:
        finish_cluster(brokers, True)
        raise
    return brokers


def finish_cluster(brokers, failed):
    """Stops every member at once (one by one, the last would wait for a quorum that is
    gone), then reports and cleans up each as `_finish_broker` does."""
    running = [b for b in brokers if b.proc is not None and b.proc.poll() is None]
    for b in running:
        b.proc.send_signal(signal.SIGCONT)  # a test may have stopped it
        b.proc.send_signal(signal.SIGTERM)
    for b in running:
        try:
            b.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            b.proc.wait(timeout=STOP_TIMEOUT_S)
    for b in brokers:
        _finish_broker(b, failed)


# The subject of the `certs` client certificate, as Java writes a DN (RFC 2253, most specific
# first): an mTLS connection with it is the principal "User:" + CLIENT_DN.
CLIENT_DN = "CN=client-one,OU=Tests,O=Keel"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A directory of PEM files made with the openssl CLI at test time (no key is committed):
    ca.pem (the test CA), keystore.pem (the broker's key and certificate for 127.0.0.1 and
    localhost, Kafka's PEM keystore), client.pem and client.key (subject CLIENT_DN)."""
    d = str(tmp_path_factory.mktemp("certs"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=Keel Test CA", cwd=d)
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    with open(os.path.join(d, "client.cnf"), "w") as f:  # X.509 v3, as webpki requires
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for name, subj, ext in [("broker", "/CN=localhost", ["-extfile", "san.cnf"]),
                            ("client", "/O=Keel/OU=Tests/CN=client-one",
                             ["-extfile", "client.cnf"])]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
                name + ".csr", "-subj", subj, cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", name + ".pem", "-days", "2", *ext, cwd=d)
    # Kafka's PEM keystore: the key and the certificate chain in one file.
    with open(os.path.join(d, "keystore.pem"), "w") as out:
        for part in ("broker.key", "broker.pem"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    return d


@pytest.fixture
def fresh_keel(keel_factory):
    """A dedicated broker with default settings."""
    return keel_factory()
