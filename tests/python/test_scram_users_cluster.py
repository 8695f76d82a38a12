"""SCRAM users in a 3-node cluster (issue 19): one written by `keel serve --add-scram`, one
created with confluent-kafka's AdminClient, one with `keel user create` (PBKDF2 on the client
side). Each logs in on every broker's SASL listener, including a broker whose data was wiped
while they were created and that catches up from a metadata snapshot, and after a kill -9
restart. `keel user list` shows them; `keel user delete` stops new logins everywhere."""

import json
import os
import shutil
import subprocess
import time

from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kwire as w
from conftest import KEEL_BIN

SASL = "SASL_PLAINTEXT"
SASL_AUTHENTICATION_FAILED = 58
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def keel(*args, env=None):
    out = subprocess.run([KEEL_BIN, *args], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out.stdout


def login_code(b, user):
    err, _, c = w.sasl_plain_try(b.listener_bootstrap(SASL), user, USERS[user])
    c.close()
    return err


def wait_logins(brokers, users, want, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = {(b.name, u): login_code(b, u) for b in brokers for u in users}
        if all(v == want for v in got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def test_users_log_in_on_every_broker_and_survive_restarts(keel_cluster):
    settings = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "metadata.log.snapshot.entries": 5}
    add = "SCRAM-SHA-256=[name=admin,password=%s]" % USERS["admin"]
    c = keel_cluster(3, settings, listeners={SASL: "SASL_PLAINTEXT"},
                     extra_args=["--add-scram", add])
    nodes = c.brokers
    assert wait_logins(nodes, ["admin"], 0) == {(b.name, "admin"): 0 for b in nodes}

    # Node 3 goes away and loses its data while users are made.
    late = nodes[2]
    late.stop()
    shutil.rmtree(late.data_dir)
    os.makedirs(late.data_dir)
    a = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
    for fut in a.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
            USERS["alice"].encode())]).values():
        fut.result(timeout=30)
    out = keel("user", "create", "bob", "--password-env", "BOB_PW", "-b", nodes[1].bootstrap,
               env={"BOB_PW": USERS["bob"]})
    assert "SCRAM-SHA-256, SCRAM-SHA-512 set (4096 iterations)" in out
    # More metadata than the log keeps after a snapshot: node 3 must take the snapshot.
    for fut in a.create_topics([NewTopic("filler-%d" % i, 1, 1) for i in range(8)]).values():
        fut.result(timeout=30)
    late.start()
    users = sorted(USERS)
    got = wait_logins(nodes, users, 0)
    assert got == {(b.name, u): 0 for b in nodes for u in users}
    assert "metadata snapshot installed" in late.log_text()

    listed = json.loads(keel("user", "list", "--json", "-b", nodes[2].bootstrap))
    assert {u["user"]: sorted((x["mechanism"], x["iterations"]) for x in u["credentials"])
            for u in listed} == {
        "admin": [("SCRAM-SHA-256", 4096)],
        "alice": [("SCRAM-SHA-256", 8192)],
        "bob": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]}

    # kill -9 and a restart: the users are still there.
    nodes[0].kill9_and_restart()
    assert wait_logins([nodes[0]], users, 0) == {(nodes[0].name, u): 0 for u in users}

    # Deleting a user stops new logins on every broker.
    out = keel("user", "delete", "alice", "-b", nodes[0].bootstrap)
    assert "alice: SCRAM-SHA-256 deleted" in out
    got = wait_logins(nodes, ["alice"], SASL_AUTHENTICATION_FAILED)
    assert got == {(b.name, "alice"): SASL_AUTHENTICATION_FAILED for b in nodes}
    assert wait_logins(nodes, ["bob"], 0) == {(b.name, "bob"): 0 for b in nodes}
