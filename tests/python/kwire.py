"""Hand-encoded Kafka wire protocol, for tests that must send exact (or broken) bytes."""

import socket
import struct
import time

try:
    from crc32c import crc32c as _crc32c
except ImportError:  # table-based fallback (Castagnoli, reflected 0x82F63B78)
    _TABLE = []
    for _i in range(256):
        _c = _i
        for _ in range(8):
            _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
        _TABLE.append(_c)

    def _crc32c(data):
        c = 0xFFFFFFFF
        for b in data:
            c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF


def crc32c(data):
    return _crc32c(bytes(data)) & 0xFFFFFFFF


# -- primitive encoders ---------------------------------------------------------------------
def i8(v): return struct.pack(">b", v)
def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def u32(v): return struct.pack(">I", v)


def uvarint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v):
    return uvarint((v << 1) ^ (v >> 63))  # zigzag


def string(s):
    if s is None:
        return i16(-1)
    b = s.encode() if isinstance(s, str) else s
    return i16(len(b)) + b


def compact_string(s):
    if s is None:
        return uvarint(0)
    b = s.encode() if isinstance(s, str) else s
    return uvarint(len(b) + 1) + b


def bytes_(b):
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def compact_bytes(b):
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


def array(items):
    return i32(len(items)) + b"".join(items)


def compact_array(items):
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


TAGS = uvarint(0)  # empty tagged-field section


def request(api_key, api_version, correlation_id, body, client_id="keel-wire", flexible=False):
    """A whole frame: i32 size + request header (v1, or v2 when flexible) + body."""
    hdr = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id)
    if flexible:
        hdr += TAGS
    payload = hdr + body
    return i32(len(payload)) + payload


# -- decoding ---------------------------------------------------------------------------------
class Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0

    def take(self, n):
        if self.p + n > len(self.d):
            raise ValueError("short read: need %d at %d of %d" % (n, self.p, len(self.d)))
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def i8(self): return struct.unpack(">b", self.take(1))[0]
    def i16(self): return struct.unpack(">h", self.take(2))[0]
    def i32(self): return struct.unpack(">i", self.take(4))[0]
    def i64(self): return struct.unpack(">q", self.take(8))[0]

    def uvarint(self):
        shift = 0
        v = 0
        while True:
            b = self.take(1)[0]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7

    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def skip_tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def rest(self):
        return self.d[self.p:]


# -- record batches (magic 2) -----------------------------------------------------------------
def record(offset_delta, ts_delta, key, value, headers=()):
    body = i8(0) + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        hk = hk.encode() if isinstance(hk, str) else hk
        body += varint(len(hk)) + hk
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + body


def record_batch(records, base_timestamp, attributes=0, base_offset=0, producer_id=-1,
                 producer_epoch=-1, base_sequence=-1):
    """records: list of (key, value, headers, timestamp). Uncompressed magic-2 batch."""
    recs = b"".join(record(i, ts - base_timestamp, k, v, h) for i, (k, v, h, ts) in enumerate(records))
    max_ts = max(ts for _, _, _, ts in records)
    after_crc = (i16(attributes) + i32(len(records) - 1) + i64(base_timestamp) + i64(max_ts)
                 + i64(producer_id) + i16(producer_epoch) + i32(base_sequence) + i32(len(records))
                 + recs)
    crc = crc32c(after_crc)
    after_len = i32(-1) + i8(2) + u32(crc) + after_crc  # partitionLeaderEpoch, magic, crc, ...
    return i64(base_offset) + i32(len(after_len)) + after_len


BATCH_CRC_POS = 8 + 4 + 4 + 1  # offset of the crc field inside a batch
BATCH_ATTR_POS = BATCH_CRC_POS + 4


def produce_v3_body(topic, partition, records_bytes, acks=-1, timeout_ms=10000):
    return (string(None) + i16(acks) + i32(timeout_ms)
            + array([string(topic) + array([i32(partition) + bytes_(records_bytes)])]))


def parse_produce_v3_response(body):
    """-> {(topic, partition): (error_code, base_offset)}"""
    r = Reader(body)
    out = {}
    for _ in range(r.i32()):
        t = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            err = r.i16()
            base = r.i64()
            r.i64()  # log_append_time
            out[(t, p)] = (err, base)
    return out


def metadata_v12_body(topics, allow_auto_create=False):
    ts = None if topics is None else [b"\x00" * 16 + compact_string(t) + TAGS for t in topics]
    return compact_array(ts) + i8(1 if allow_auto_create else 0) + i8(0) + TAGS


def produce_v9_body(topic, partition, records_bytes, acks=-1, timeout_ms=5000):
    return (compact_string(None) + i16(acks) + i32(timeout_ms)
            + compact_array([compact_string(topic)
                             + compact_array([i32(partition) + compact_bytes(records_bytes) + TAGS])
                             + TAGS])
            + TAGS)


def fetch_v12_body(topic, partition, offset):
    part = i32(partition) + i32(-1) + i64(offset) + i32(-1) + i64(-1) + i32(1 << 20) + TAGS
    return (i32(-1) + i32(100) + i32(1) + i32(1 << 20) + i8(0) + i32(0) + i32(-1)
            + compact_array([compact_string(topic) + compact_array([part]) + TAGS])
            + compact_array([]) + compact_string("") + TAGS)


def fetch_v15_body(topic_id, partition, offset, replica_id=-1, replica_epoch=-1,
                   max_wait_ms=0):
    """A Fetch v15 request for one partition (topics by id); a replica id >= 0 makes it a
    follower's fetch (`replica_state`, tagged field 1), as a broker's replica fetcher sends."""
    part = (i32(partition) + i32(-1) + i64(offset) + i32(-1) + i64(-1) + i32(1 << 20) + TAGS)
    tags = TAGS
    if replica_id >= 0:
        state = i32(replica_id) + i64(replica_epoch) + TAGS
        tags = uvarint(1) + uvarint(1) + uvarint(len(state)) + state
    return (i32(max_wait_ms) + i32(1) + i32(1 << 20) + i8(0) + i32(0) + i32(-1)
            + compact_array([topic_id + compact_array([part]) + TAGS])
            + compact_array([]) + compact_string("") + tags)


def parse_fetch_v15_response(body):
    """-> (error_code, {(topic_id, partition): dict(error_code, high_watermark, records)})"""
    r = Reader(body)
    r.i32()  # throttle
    err = r.i16()
    r.i32()  # session id
    parts = {}
    for _ in range(r.uvarint() - 1):
        topic_id = r.take(16)
        for _ in range(r.uvarint() - 1):
            idx, perr, hw = r.i32(), r.i16(), r.i64()
            r.i64()  # last stable offset
            r.i64()  # log start offset
            n = r.uvarint()
            for _ in range(max(0, n - 1)):
                r.i64()
                r.i64()
                r.skip_tags()
            r.i32()  # preferred read replica
            n = r.uvarint()
            records = b"" if n == 0 else r.take(n - 1)
            r.skip_tags()
            parts[(topic_id, idx)] = dict(error_code=perr, high_watermark=hw, records=records)
        r.skip_tags()
    r.skip_tags()
    return err, parts


# -- connection -------------------------------------------------------------------------------
class Conn:
    def __init__(self, bootstrap, timeout=5.0, ssl_context=None):
        """`ssl_context`: TLS (an `ssl.SSLContext`) over the connection, checking the name
        `host` of `bootstrap`."""
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if ssl_context is not None:
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.sock.settimeout(timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self):
        """The next response frame's payload; None if the peer closed the connection.
        Raises socket.timeout if nothing arrives in time."""
        try:
            hdr = self._recv_exact(4)
            if hdr is None:
                return None
            n = struct.unpack(">i", hdr)[0]
            return self._recv_exact(n)
        except ConnectionResetError:
            return None

    def call(self, api_key, api_version, body, correlation_id=7, flexible=False, resp_flexible=None,
             client_id="keel-wire"):
        """Send one request and return the response body (after the response header)."""
        self.send(request(api_key, api_version, correlation_id, body, client_id=client_id,
                          flexible=flexible))
        payload = self.recv_frame()
        assert payload is not None, "broker closed the connection instead of answering"
        r = Reader(payload)
        assert r.i32() == correlation_id
        if flexible if resp_flexible is None else resp_flexible:
            r.skip_tags()
        return r.rest()

    def wait_closed(self, timeout_s=5.0):
        """True when the peer closes within timeout_s (any bytes it sends first are drained)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
        return False


def parse_metadata_v12_response(body):
    """-> dict(brokers=[(id, host, port)], cluster_id, controller_id,
               topics={name: dict(error_code, topic_id, partitions={idx: dict(...)})})"""
    r = Reader(body)
    r.i32()  # throttle
    brokers = []
    for _ in range(r.uvarint() - 1):
        node = r.i32()
        host = r.compact_string()
        port = r.i32()
        r.compact_string()  # rack
        r.skip_tags()
        brokers.append((node, host, port))
    cluster_id = r.compact_string()
    controller = r.i32()
    topics = {}
    for _ in range(r.uvarint() - 1):
        err = r.i16()
        name = r.compact_string()
        topic_id = r.take(16)
        r.i8()  # is_internal
        parts = {}
        for _ in range(r.uvarint() - 1):
            perr = r.i16()
            idx = r.i32()
            leader = r.i32()
            epoch = r.i32()
            lists = []
            for _ in range(3):
                lists.append([r.i32() for _ in range(r.uvarint() - 1)])
            r.skip_tags()
            parts[idx] = dict(error_code=perr, leader_id=leader, leader_epoch=epoch,
                              replicas=lists[0], isr=lists[1], offline=lists[2])
        r.i32()  # topic authorized operations
        r.skip_tags()
        topics[name] = dict(error_code=err, topic_id=topic_id, partitions=parts)
    r.skip_tags()
    return dict(brokers=brokers, cluster_id=cluster_id, controller_id=controller, topics=topics)


def metadata(bootstrap, topics, allow_auto_create=False):
    with Conn(bootstrap) as c:
        body = c.call(3, 12, metadata_v12_body(topics, allow_auto_create), flexible=True)
    return parse_metadata_v12_response(body)


def sasl_plain_try(bootstrap, user, password, ssl_context=None):
    """SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v0) -> (error code, message, connection);
    the connection is closed unless the login succeeded."""
    c = Conn(bootstrap, ssl_context=ssl_context)
    r = Reader(c.call(17, 1, string("PLAIN")))
    assert r.i16() == 0, "PLAIN is not enabled on %s" % bootstrap
    token = ("\0%s\0%s" % (user, password)).encode()
    r = Reader(c.call(36, 0, bytes_(token)))
    err, msg = r.i16(), r.string()
    if err != 0:
        c.close()
    return err, msg, c


def sasl_plain_login(bootstrap, user, password, ssl_context=None):
    """A connection authenticated with SASL/PLAIN."""
    err, msg, c = sasl_plain_try(bootstrap, user, password, ssl_context)
    assert err == 0, "login of %s failed: %s %s" % (user, err, msg)
    return c


# -- client quotas (DescribeClientQuotas v0, AlterClientQuotas v0) ----------------------------
def _quota_entity(entity):
    """entity: {type: name or None (the default entity)}"""
    return array([string(t) + string(n) for t, n in sorted(entity.items())])


def _read_quota_entity(r):
    return {r.string(): r.string() for _ in range(r.i32())}


def alter_client_quotas(conn, entries, validate_only=False):
    """entries: [(entity, {key: value or None (remove)})] -> [(error_code, message, entity)]"""
    body = array([_quota_entity(entity)
                  + array([string(k) + struct.pack(">d", 0.0 if v is None else float(v))
                           + i8(1 if v is None else 0) for k, v in ops.items()])
                  for entity, ops in entries]) + i8(1 if validate_only else 0)
    r = Reader(conn.call(49, 0, body))
    r.i32()  # throttle_time_ms
    out = []
    for _ in range(r.i32()):
        err, msg = r.i16(), r.string()
        out.append((err, msg, _read_quota_entity(r)))
    return out


MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def describe_client_quotas(conn, components, strict=False):
    """components: [(entity_type, match_type, match)] ->
    (error_code, message, [(entity, {key: value})] or None)"""
    body = array([string(t) + i8(m) + string(n) for t, m, n in components]) + i8(1 if strict else 0)
    r = Reader(conn.call(48, 0, body))
    r.i32()  # throttle_time_ms
    err, msg = r.i16(), r.string()
    n = r.i32()
    if n < 0:
        return err, msg, None
    entries = []
    for _ in range(n):
        entity = _read_quota_entity(r)
        values = {}
        for _ in range(r.i32()):
            k = r.string()
            values[k] = struct.unpack(">d", r.take(8))[0]
        entries.append((entity, values))
    return err, msg, entries


def parse_produce_v9_response(body):
    """-> ({(topic, partition): (error_code, base_offset)}, throttle_time_ms)"""
    r = Reader(body)
    out = {}
    for _ in range(r.uvarint() - 1):
        t = r.compact_string()
        for _ in range(r.uvarint() - 1):
            p = r.i32()
            err = r.i16()
            base = r.i64()
            r.i64()  # log_append_time
            r.i64()  # log_start_offset
            for _ in range(r.uvarint() - 1):  # record_errors
                r.i32()
                r.compact_string()
                r.skip_tags()
            r.compact_string()  # error_message
            r.skip_tags()
            out[(t, p)] = (err, base)
        r.skip_tags()
    throttle = r.i32()
    return out, throttle
