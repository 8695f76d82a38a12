"""SCRAM users and ACLs through the admin APIs (issue 19, first part), with confluent-kafka's
AdminClient (librdkafka) against the real broker: AlterUserScramCredentials and
DescribeUserScramCredentials, CreateAcls, DescribeAcls and DeleteAcls, with Kafka's error
codes, and both surviving a kill -9 restart (they live in the metadata log). The ACL APIs
need an authorizer, as in Kafka (SECURITY_DISABLED without one): that broker runs
StandardAuthorizer with the PLAINTEXT client (`User:ANONYMOUS`) as a super user; enforcement
itself is tested in test_acl_enforcement.py."""

import pytest

import kwire as w
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
    ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
    UserScramCredentialDeletion, UserScramCredentialUpsertion)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def client(b):
    return AdminClient({"bootstrap.servers": b.bootstrap})


def alter(a, changes):
    """{user: error or None} for one AlterUserScramCredentials request."""
    out = {}
    for user, fut in a.alter_user_scram_credentials(changes).items():
        try:
            fut.result(timeout=30)
            out[user] = None
        except KafkaException as e:
            out[user] = e.args[0].name()
    return out


def described(a, users=None):
    """{user: sorted [(mechanism name, iterations)]} of DescribeUserScramCredentials."""
    if users is None:
        got = a.describe_user_scram_credentials().result(timeout=30)
    else:
        got = {u: f.result(timeout=30)
               for u, f in a.describe_user_scram_credentials(users).items()}
    return {u: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
            for u, d in got.items()}


def test_scram_users_are_set_described_deleted_and_survive_a_restart(fresh_keel):
    b = fresh_keel
    a = client(b)
    assert described(a) == {}
    assert alter(a, [
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(SHA256, 4096), b"pw-a"),
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(SHA512, 8192), b"pw-a"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(SHA256, 16384), b"pw-b"),
    ]) == {"alice": None, "bob": None}
    want = {"alice": [("SCRAM_SHA_256", 4096), ("SCRAM_SHA_512", 8192)],
            "bob": [("SCRAM_SHA_256", 16384)]}
    assert described(a) == want

    # Kafka's refusals, each user answered on its own.
    assert alter(a, [
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(SHA256, 100), b"pw"),
        UserScramCredentialDeletion("dave", SHA256),
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(SHA256, 4096), b"x"),
        UserScramCredentialDeletion("erin", SHA256),
    ]) == {"carol": "UNACCEPTABLE_CREDENTIAL", "dave": "RESOURCE_NOT_FOUND",
           "erin": "DUPLICATE_RESOURCE"}
    with pytest.raises(KafkaException) as e:
        described(a, ["nobody"])
    assert e.value.args[0].name() == "RESOURCE_NOT_FOUND"
    assert described(a) == want, "refused changes changed nothing"

    # The credentials are in the metadata log: a kill -9 loses none.
    b.kill9_and_restart()
    a = client(b)
    assert described(a) == want
    assert described(a, ["bob"]) == {"bob": [("SCRAM_SHA_256", 16384)]}
    assert alter(a, [UserScramCredentialDeletion("alice", SHA512)]) == {"alice": None}
    assert described(a)["alice"] == [("SCRAM_SHA_256", 4096)]


def binding(rtype, name, ptype, principal, op, perm, host="*"):
    return AclBinding(rtype, name, ptype, principal, host, op, perm)


def as_tuples(bindings):
    return sorted((x.restype.name, x.name, x.resource_pattern_type.name, x.principal, x.host,
                   x.operation.name, x.permission_type.name) for x in bindings)


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_acl_apis_need_an_authorizer(fresh_keel):
    """Without authorizer.class.name, Kafka answers the ACL APIs SECURITY_DISABLED."""
    a = client(fresh_keel)
    acl = binding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x",
                  AclOperation.READ, AclPermissionType.ALLOW)
    for fut in a.create_acls([acl]).values():
        with pytest.raises(KafkaException) as e:
            fut.result(timeout=30)
        assert e.value.args[0].name() == "SECURITY_DISABLED"
    # DescribeAcls v1 on the wire (librdkafka drops its top-level error): ANY filter.
    with w.Conn(fresh_keel.bootstrap) as c:
        body = c.call(29, 1, w.i8(1) + w.string(None) + w.i8(1) + w.string(None)
                      + w.string(None) + w.i8(1) + w.i8(1))
    r = w.Reader(body)
    r.i32()  # throttle_time_ms
    assert (r.i16(), r.string()) == (54, "No Authorizer is configured (authorizer.class.name)")


def test_acls_are_created_filtered_deleted_and_survive_a_restart(keel_factory):
    b = keel_factory({"authorizer.class.name": STANDARD_AUTHORIZER,
                      "super.users": "User:ANONYMOUS"})
    a = client(b)
    LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
    acls = [
        binding(ResourceType.TOPIC, "orders", LIT, "User:alice", AclOperation.READ, ALLOW),
        binding(ResourceType.TOPIC, "ord", PRE, "User:bob", AclOperation.WRITE, ALLOW),
        binding(ResourceType.TOPIC, "*", LIT, "User:*", AclOperation.DESCRIBE, ALLOW),
        binding(ResourceType.GROUP, "g1", LIT, "User:alice", AclOperation.READ, DENY, "10.1.2.3"),
        binding(ResourceType.BROKER, "kafka-cluster", LIT, "User:ops", AclOperation.ALTER, ALLOW),
    ]
    for fut in a.create_acls(acls).values():
        fut.result(timeout=30)
    # The same binding again is not stored twice.
    for fut in a.create_acls(acls[:1]).values():
        fut.result(timeout=30)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert as_tuples(a.describe_acls(every).result(timeout=30)) == as_tuples(acls)

    # MATCH on a topic name: its literal ACL, the literal *, and the prefixes of the name.
    match = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)
    assert as_tuples(a.describe_acls(match).result(timeout=30)) == as_tuples(acls[:3])
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                    "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    assert as_tuples(a.describe_acls(by_principal).result(timeout=30)) == \
        as_tuples([acls[0], acls[3]])

    # A creation Kafka refuses: a cluster ACL on another name.
    bad = binding(ResourceType.BROKER, "other", LIT, "User:x", AclOperation.ALTER, ALLOW)
    with pytest.raises(KafkaException) as e:
        for fut in a.create_acls([bad]).values():
            fut.result(timeout=30)
    assert e.value.args[0].name() == "INVALID_REQUEST"

    b.kill9_and_restart()
    a = client(b)
    assert as_tuples(a.describe_acls(every).result(timeout=30)) == as_tuples(acls)
    deleted = {f: fut.result(timeout=30) for f, fut in a.delete_acls([by_principal]).items()}
    assert as_tuples(deleted[by_principal]) == as_tuples([acls[0], acls[3]])
    assert as_tuples(a.describe_acls(every).result(timeout=30)) == \
        as_tuples([acls[1], acls[2], acls[4]])
