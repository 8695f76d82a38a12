//! Broker configuration: Kafka's setting names and defaults, read from (lowest to highest
//! precedence) built-in defaults, `KEEL_*` environment variables, a TOML file (`--config`),
//! and command-line flags. Every source produces the same flat `key = value` map, checked
//! against one table of known keys, so a typo is an error at start, not a silent default.
//!
//! Topic-level settings (`retention.ms`, `segment.bytes`, ...) inherit the broker default
//! named in [`TOPIC_CONFIGS`] unless the topic overrides them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use keel_storage::{FlushPolicy, LogConfig, TimestampType};

/// One broker-level setting: its Kafka name, default and a one-line description.
pub struct BrokerKey {
    pub name: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

/// Every broker setting Keel knows. Keel-specific ones have no Kafka equivalent.
pub const BROKER_KEYS: &[BrokerKey] = &[
    BrokerKey { name: "listen", default: "127.0.0.1:9092", doc: "Kafka listener address, HOST:PORT; every shard listens on it (SO_REUSEPORT)" },
    BrokerKey { name: "advertise", default: "", doc: "address clients are told to connect to in Metadata, HOST:PORT; empty = the listen address" },
    BrokerKey { name: "listeners", default: "", doc: "Kafka's listeners, `NAME://HOST:PORT,...`; every shard serves each; empty = `PLAINTEXT://` and the `listen` address" },
    BrokerKey { name: "advertised.listeners", default: "", doc: "what clients and other brokers are told to connect to, `NAME://HOST:PORT,...` per listener; empty = `advertise`, else each listener's own address" },
    BrokerKey { name: "inter.broker.listener.name", default: "PLAINTEXT", doc: "the listener followers fetch from and transaction markers are sent to, with its security protocol (SSL: mTLS with the listener's keystore and truststore; SASL: `sasl.mechanism.inter.broker.protocol`); each shard also listens on its host at a port of its own, registered with the controller, so a follower's connection lands on the shard that owns its partitions" },
    BrokerKey { name: "inter.broker.shard.port.base", default: "0", doc: "shard N's own inter-broker port is this + N (on the inter-broker listener's host); 0 = each shard takes a free port below 32768 at start" },
    BrokerKey { name: "listener.security.protocol.map", default: "PLAINTEXT:PLAINTEXT", doc: "listener name to security protocol, `NAME:PROTOCOL,...` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); per listener, `listener.name.<name>.<key>` overrides a listener setting (`sasl.enabled.mechanisms`, `oauthbearer.sasl.jaas.config`, the `ssl.*` ones)" },
    BrokerKey { name: "sasl.enabled.mechanisms", default: "GSSAPI", doc: "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (users and passwords from AlterUserScramCredentials; PLAIN checks the SCRAM-SHA-256 credential, else the SCRAM-SHA-512 one), OAUTHBEARER (Kafka's unsecured JWTs, no signature: for development only; its options in `listener.name.<name>.oauthbearer.sasl.jaas.config`, Kafka's `OAuthBearerLoginModule` entry with `unsecuredValidatorPrincipalClaimName`, `unsecuredValidatorScopeClaimName`, `unsecuredValidatorRequiredScope`, `unsecuredValidatorAllowableClockSkewMs`). Kafka's default GSSAPI is not supported: a SASL listener needs this or `listener.name.<name>.sasl.enabled.mechanisms`" },
    BrokerKey { name: "sasl.mechanism.inter.broker.protocol", default: "GSSAPI", doc: "the SASL mechanism replica fetchers and the WriteTxnMarkers client log in with when the inter-broker listener is SASL_PLAINTEXT or SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, one of that listener's enabled mechanisms, with the username and password of `listener.name.<name>.<mechanism, lower case>.sasl.jaas.config` (Kafka's `org.apache.kafka.common.security.scram.ScramLoginModule required username=\"broker\" password=\"...\";`, or `...plain.PlainLoginModule`); that principal needs CLUSTER_ACTION on the cluster or a place in `super.users`. Kafka's default GSSAPI is not supported. On an SSL inter-broker listener the broker presents its keystore's certificate instead (mTLS)" },
    BrokerKey { name: "ssl.keystore.type", default: "PEM", doc: "an SSL or SASL_SSL listener's keystore format: PEM only (Kafka's default JKS is not supported)" },
    BrokerKey { name: "ssl.keystore.location", default: "", doc: "PEM file with the listener's private key (unencrypted) and certificate chain" },
    BrokerKey { name: "ssl.key.password", default: "", doc: "must stay empty: encrypted keys are not supported" },
    BrokerKey { name: "ssl.truststore.type", default: "PEM", doc: "PEM only" },
    BrokerKey { name: "ssl.truststore.location", default: "", doc: "PEM file of the CA certificates client certificates are checked against (with `ssl.client.auth`)" },
    BrokerKey { name: "ssl.client.auth", default: "none", doc: "client certificates: none, requested (checked when given) or required; on an SSL listener a verified one names the principal: `User:` and its subject DN, or what `ssl.principal.mapping.rules` make of it" },
    BrokerKey { name: "ssl.enabled.protocols", default: "TLSv1.2,TLSv1.3", doc: "TLS versions offered" },
    BrokerKey { name: "ssl.cipher.suites", default: "", doc: "IANA names of the suites offered (e.g. TLS13_AES_128_GCM_SHA256); empty = rustls' defaults" },
    BrokerKey { name: "ssl.principal.mapping.rules", default: "DEFAULT", doc: "how a client certificate on an SSL listener names its principal: Kafka's comma-separated rules, `RULE:pattern/replacement/` (optionally `L` or `U`: lower or upper case) where the pattern matches the whole subject DN (RFC 2253) and the replacement takes `$1`-style groups, or `DEFAULT` (the DN itself); the first rule that matches wins, and a certificate no rule matches is refused" },
    BrokerKey { name: "sasl.server.max.receive.size", default: "524288", doc: "largest frame a connection may send before it is authenticated" },
    BrokerKey { name: "connection.failed.authentication.delay.ms", default: "100", doc: "a failed SASL authentication is answered after this delay, then the connection closes" },
    BrokerKey { name: "sasl.server.authentication.timeout.ms", default: "10000", doc: "a connection to a SASL listener that has not authenticated within this time is closed (Keel's; Kafka bounds it by `connections.max.idle.ms`)" },
    BrokerKey { name: "authorizer.class.name", default: "", doc: "empty = every request is allowed (Kafka without an authorizer); `org.apache.kafka.metadata.authorizer.StandardAuthorizer` = requests are authorized against the ACLs of CreateAcls, as Kafka's StandardAuthorizer does" },
    BrokerKey { name: "super.users", default: "", doc: "principals allowed everything by the authorizer, `User:a;User:b`" },
    BrokerKey { name: "allow.everyone.if.no.acl.found", default: "false", doc: "with an authorizer: allow an operation on a resource that no ACL names" },
    BrokerKey { name: "connections.max.idle.ms", default: "600000", doc: "a connection with no request read and no answer written for this long, and none in flight, is closed" },
    BrokerKey { name: "max.connections", default: "2147483647", doc: "connections the broker accepts, every listener but the inter-broker one together; past it a new connection is closed at once (Kafka holds it back instead)" },
    BrokerKey { name: "max.connections.per.ip", default: "2147483647", doc: "connections the broker accepts from one IP address; past it a new connection is closed at once" },
    BrokerKey { name: "quota.window.num", default: "11", doc: "client quotas (AlterClientQuotas) are rates over this many windows (Keel uses at least 2)" },
    BrokerKey { name: "quota.window.size.seconds", default: "1", doc: "the length of a client quota's window; a request quota throttles at most this long" },
    BrokerKey { name: "data.dir", default: "./keel-data", doc: "directory holding the partition logs and the metadata quorum's log" },
    BrokerKey { name: "smp", default: "0", doc: "shards, one per core; 0 = every core the process may use" },
    BrokerKey { name: "admin", default: "127.0.0.1:9644", doc: "admin HTTP address, HOST:PORT (`/metrics`, `/quorum`, `/debug/stalls`); `off` = none" },
    BrokerKey { name: "node.id", default: "0", doc: "this broker's id" },
    BrokerKey { name: "controller.quorum.voters", default: "", doc: "the metadata quorum's voters, `ID@HOST:PORT,...` of their controller listeners; empty = this node alone, a one-voter quorum" },
    BrokerKey { name: "controller.listen", default: "", doc: "this node's controller (Raft) listener, HOST:PORT; required when the quorum has other voters, and for a broker outside the quorum" },
    BrokerKey { name: "controller.listener.names", default: "CONTROLLER", doc: "the name of the controller listener (`controller.listen`, not one of `listeners`): its protocol in `listener.security.protocol.map` must be SSL (mutual TLS both ways with the listener's `listener.name.<name>.ssl.*` keystore and truststore; a peer whose certificate's principal is not in `super.users` is dropped before anything is read) or, set explicitly, PLAINTEXT (unauthenticated: a warning at start). Needed once a node has controller traffic (other voters, or `controller.listen`)" },
    BrokerKey { name: "broker.rack", default: "", doc: "this broker's rack, for rack-aware replica placement and for `replica.selector.class`" },
    BrokerKey { name: "broker.session.timeout.ms", default: "9000", doc: "the controller fences a broker whose heartbeats stop for this long" },
    BrokerKey { name: "broker.heartbeat.interval.ms", default: "2000", doc: "how often a broker heartbeats to the controller; below `broker.session.timeout.ms`" },
    BrokerKey { name: "controlled.shutdown.enable", default: "true", doc: "on SIGTERM, first ask the controller to move this broker's leadership away and take it out of the ISRs (while it still serves), then stop" },
    BrokerKey { name: "controlled.shutdown.timeout.ms", default: "30000", doc: "how long a stopping broker waits for the controller to approve its controlled shutdown before it stops anyway (Keel's; Kafka waits up to 5 minutes)" },
    BrokerKey { name: "metadata.log.max.snapshot.interval.ms", default: "3600000", doc: "snapshot the metadata image at least this often when it changed" },
    BrokerKey { name: "metadata.log.snapshot.entries", default: "1000", doc: "snapshot the metadata image after this many Raft entries (Keel's; Kafka counts bytes)" },
    BrokerKey { name: "cluster.id", default: "keel-single-node", doc: "cluster id reported to clients" },
    BrokerKey { name: "io.memory.bytes", default: "4194304", doc: "io_uring registered memory per shard; counts against RLIMIT_MEMLOCK and is sized down to fit when that limit cannot be raised; derived from `io.properties.file` unless set" },
    BrokerKey { name: "io.properties.file", default: "", doc: "the disk's measured properties, written by `keel-tune iotune`; empty = `DATA_DIR/io-properties.toml` when it exists; `off` = none. A named file that is missing, or any file that is malformed, stops the start with an error naming it" },
    BrokerKey { name: "io.latency.goal.us", default: "100000", doc: "how long a shard runs tasks before it reaps I/O completions and switches task queues (glommio's preempt timer), 100 to 1000000; derived from `io.properties.file` unless set" },
    BrokerKey { name: "log.write.buffer.bytes", default: "1048576", doc: "most bytes in one DMA write of a segment, 4096 to 64 MiB; derived from `io.properties.file` unless set" },
    BrokerKey { name: "log.write.inflight.shard.max", default: "0", doc: "segment writes a shard keeps in flight at once; 0 = no bound; derived from `io.properties.file` unless set" },
    BrokerKey { name: "reactor.stall.threshold.ms", default: "10", doc: "a task holding a shard's reactor this long past its task queue's budget is logged (task queue, backtrace) and counted in `keel_reactor_stalls_total{shard}`; 0 = detector off" },
    BrokerKey { name: "replica.lag.time.max.ms", default: "30000", doc: "a follower that has not caught up with the leader's log end for this long leaves the ISR" },
    BrokerKey { name: "replica.fetch.wait.max.ms", default: "500", doc: "longest a follower's fetch waits at the leader for new data" },
    BrokerKey { name: "replica.fetch.min.bytes", default: "1", doc: "bytes a follower's fetch waits for at the leader" },
    BrokerKey { name: "replica.fetch.max.bytes", default: "1048576", doc: "bytes a follower fetches per partition per fetch (at least one batch)" },
    BrokerKey { name: "replica.fetch.response.max.bytes", default: "10485760", doc: "bytes of one follower fetch's answer, all partitions together (at least one batch)" },
    BrokerKey { name: "replica.fetch.backoff.ms", default: "1000", doc: "how long a follower waits after a failed fetch, or a partition after an error" },
    BrokerKey { name: "replica.socket.timeout.ms", default: "30000", doc: "a follower's fetch unanswered for this long is abandoned and its connection reopened" },
    BrokerKey { name: "replica.high.watermark.checkpoint.interval.ms", default: "5000", doc: "how often each partition's high watermark is written to its `replication-offset-checkpoint`" },
    BrokerKey { name: "replica.selector.class", default: "", doc: "which replica a consumer reads from (KIP-392): empty (or KIP-392's `org.apache.kafka.common.replica.LeaderSelector`) = always the leader; `org.apache.kafka.common.replica.RackAwareReplicaSelector` = a leader answers a consumer's Fetch (v11+) that names a `rack_id` (`client.rack`) with `preferred_read_replica`, an in-sync follower in that rack, unless the leader is in it; any other value stops the start" },
    BrokerKey { name: "unclean.leader.election.enable", default: "false", doc: "elect a replica outside the ISR (and ELR) when none inside is alive: available, but acknowledged records may be lost" },
    BrokerKey { name: "leader.replication.throttled.rate", default: "9223372036854775807", doc: "bytes per second this broker, as leader, serves to followers outside the ISR of the throttled replicas (`leader.replication.throttled.replicas`), split evenly across its shards; dynamic (AlterConfigs on broker `ID`, or `\"\"` for every broker)" },
    BrokerKey { name: "follower.replication.throttled.rate", default: "9223372036854775807", doc: "bytes per second this broker, as a follower outside the ISR, fetches for the throttled replicas (`follower.replication.throttled.replicas`), split evenly across its shards; dynamic like the leader's" },
    BrokerKey { name: "leader.replication.throttled.replicas", default: "", doc: "topics' default `leader.replication.throttled.replicas` (Kafka has it per topic only): `PARTITION:BROKER,...` or `*`; empty = none" },
    BrokerKey { name: "follower.replication.throttled.replicas", default: "", doc: "topics' default `follower.replication.throttled.replicas` (per topic in Kafka): `PARTITION:BROKER,...` or `*`; empty = none" },
    BrokerKey { name: "auto.leader.rebalance.enable", default: "true", doc: "the controller moves leadership back to preferred replicas (each partition's first replica) on its own: every `leader.imbalance.check.interval.seconds`, for each broker whose imbalance is above `leader.imbalance.per.broker.percentage`, where the broker is live and in the ISR (so leadership returns after a restart)" },
    BrokerKey { name: "leader.imbalance.check.interval.seconds", default: "300", doc: "how often the controller checks the leader imbalance (at least 1)" },
    BrokerKey { name: "leader.imbalance.per.broker.percentage", default: "10", doc: "a broker's imbalance: of the partitions it is the preferred replica of, the percentage that another broker (or nobody) leads; above this the controller elects it back (0 to 100)" },
    BrokerKey { name: "offsets.topic.replication.factor", default: "3", doc: "replication factor of `__consumer_offsets`; with fewer live brokers it is created with as many replicas as brokers, and a warning repeats" },
    BrokerKey { name: "transaction.state.log.replication.factor", default: "3", doc: "replication factor of `__transaction_state`; with fewer live brokers it is created with as many replicas as brokers, and a warning repeats" },
    BrokerKey { name: "transaction.state.log.min.isr", default: "2", doc: "`min.insync.replicas` of `__transaction_state` (capped at its replication factor)" },
    BrokerKey { name: "num.partitions", default: "1", doc: "partitions of an auto-created topic" },
    BrokerKey { name: "default.replication.factor", default: "1", doc: "replication factor of an auto-created topic" },
    BrokerKey { name: "auto.create.topics.enable", default: "true", doc: "create unknown topics on Metadata and Produce" },
    BrokerKey { name: "message.max.bytes", default: "1048588", doc: "largest record batch" },
    BrokerKey { name: "socket.request.max.bytes", default: "104857600", doc: "largest request frame; a larger one closes the connection" },
    BrokerKey { name: "log.segment.bytes", default: "1073741824", doc: "segment size before roll" },
    BrokerKey { name: "log.index.interval.bytes", default: "4096", doc: "log bytes between two entries of a segment's offset and time indexes" },
    BrokerKey { name: "log.roll.ms", default: "604800000", doc: "segment age before roll (record time since the segment's first batch, as Kafka)" },
    BrokerKey { name: "log.retention.ms", default: "604800000", doc: "closed segments whose newest record is older are deleted; -1 keeps forever; 0 is honoured and warned about" },
    BrokerKey { name: "log.retention.bytes", default: "-1", doc: "the oldest closed segments are deleted while the partition stays at least this big; -1 = no limit" },
    BrokerKey { name: "log.cleanup.policy", default: "delete", doc: "`delete` (retention), `compact` (latest record per key), or both (`compact,delete`)" },
    BrokerKey { name: "log.retention.check.interval.ms", default: "300000", doc: "how often each shard applies retention to its partitions" },
    BrokerKey { name: "log.cleaner.backoff.ms", default: "15000", doc: "how often each shard looks for partitions to compact" },
    BrokerKey { name: "log.cleaner.dedupe.buffer.size", default: "134217728", doc: "memory for one compaction pass's key map (at least 1 MiB)" },
    BrokerKey { name: "log.cleaner.delete.retention.ms", default: "86400000", doc: "how long compaction keeps tombstones" },
    BrokerKey { name: "log.cleaner.min.cleanable.ratio", default: "0.5", doc: "dirty share of the cleanable log that triggers compaction" },
    BrokerKey { name: "log.cleaner.min.compaction.lag.ms", default: "0", doc: "a record stays uncompacted at least this long" },
    BrokerKey { name: "log.cleaner.max.compaction.lag.ms", default: "9223372036854775807", doc: "a dirty record is compacted within about this long, whatever the ratio" },
    BrokerKey { name: "log.message.timestamp.type", default: "CreateTime", doc: "`CreateTime` or `LogAppendTime`" },
    BrokerKey { name: "compression.type", default: "producer", doc: "`producer` stores each batch in the codec the producer used; `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd` rewrites every batch in another codec into this one on the partition's owner shard (records, offsets, timestamps, producer ids and sequences unchanged; control batches never rewritten)" },
    BrokerKey { name: "compression.gzip.level", default: "-1", doc: "gzip level 1-9 when `compression.type` rewrites to gzip; -1 = zlib's default, 6" },
    BrokerKey { name: "compression.lz4.level", default: "9", doc: "lz4 level 1-17 when `compression.type` rewrites to lz4: LZ4 HC from 3 (liblz4 caps it at 12), fast mode at 1-2 (Kafka's lz4-java uses HC at every level)" },
    BrokerKey { name: "compression.zstd.level", default: "3", doc: "zstd level -131072 to 22 when `compression.type` rewrites to zstd" },
    BrokerKey { name: "min.insync.replicas", default: "1", doc: "ISR size needed for acks=all" },
    BrokerKey { name: "log.flush.policy", default: "group", doc: "`group`: fdatasync before acknowledging, one sync per partition shared by concurrent requests; `interval`: acknowledge after the write, sync every `flush.ms`" },
    BrokerKey { name: "log.flush.interval.ms", default: "1000", doc: "sync period under `flush.policy=interval`" },
    BrokerKey { name: "log.flush.offset.checkpoint.interval.ms", default: "60000", doc: "how often each partition's recovery point (the offset below which its log is known synced) is written to its `recovery-point-offset-checkpoint`; at restart a bad batch below it is corruption (the partition stays offline), one past it a torn write (cut)" },
    BrokerKey { name: "log.tail.cache.shard.bytes", default: "268435456", doc: "memory per shard for recent batches (consumers at the head read from it, at most 4 MiB per partition); beyond it the shard's oldest cached batches are evicted" },
    BrokerKey { name: "log.closed.segment.files.shard.max", default: "1024", doc: "closed segment files a shard keeps open; only active segments stay open, others open on demand (least recently used closed)" },
    BrokerKey { name: "producer.id.expiration.ms", default: "86400000", doc: "a partition forgets an idempotent producer whose last batch's timestamp (Kafka's measure) is this old and that has no open transaction; checked at each retention check and segment roll" },
    BrokerKey { name: "offsets.topic.num.partitions", default: "50", doc: "partitions of `__consumer_offsets` (the group coordinators) when the first FindCoordinator creates it" },
    BrokerKey { name: "offsets.topic.segment.bytes", default: "104857600", doc: "`segment.bytes` of `__consumer_offsets` when it is created" },
    BrokerKey { name: "offsets.retention.minutes", default: "10080", doc: "committed offsets of a group without members expire this long after its latest commit" },
    BrokerKey { name: "offsets.retention.check.interval.ms", default: "600000", doc: "how often each coordinator shard looks for expired offsets" },
    BrokerKey { name: "offset.metadata.max.bytes", default: "4096", doc: "largest metadata string of a committed offset" },
    BrokerKey { name: "group.max.size", default: "2147483647", doc: "most members of a consumer group (also bounds member ids handed out and not yet used)" },
    BrokerKey { name: "group.min.session.timeout.ms", default: "6000", doc: "shortest session timeout a group member may ask for" },
    BrokerKey { name: "group.max.session.timeout.ms", default: "1800000", doc: "longest session timeout a group member may ask for" },
    BrokerKey { name: "group.initial.rebalance.delay.ms", default: "3000", doc: "the first rebalance of an empty classic group waits this long for more members (each new member extends it by up to this much again, within the group's rebalance timeout), so members that start together form one generation; 0 = no wait" },
    BrokerKey { name: "transaction.state.log.num.partitions", default: "50", doc: "partitions of `__transaction_state` (the transaction coordinators) when it is created" },
    BrokerKey { name: "transaction.state.log.segment.bytes", default: "104857600", doc: "`segment.bytes` of `__transaction_state` when it is created" },
    BrokerKey { name: "transaction.max.timeout.ms", default: "900000", doc: "the longest `transaction.timeout.ms` a producer may ask for (INVALID_TRANSACTION_TIMEOUT beyond)" },
    BrokerKey { name: "transactional.id.expiration.ms", default: "604800000", doc: "a transactional id without an open transaction is forgotten this long after its last change" },
    BrokerKey { name: "group.consumer.session.timeout.ms", default: "45000", doc: "`group.protocol=consumer`: a member without a heartbeat for this long is removed" },
    BrokerKey { name: "group.consumer.heartbeat.interval.ms", default: "5000", doc: "`group.protocol=consumer`: the heartbeat interval told to members; below `group.consumer.session.timeout.ms`" },
    BrokerKey { name: "group.consumer.max.size", default: "2147483647", doc: "`group.protocol=consumer`: most members of a group" },
    BrokerKey { name: "group.consumer.assignors", default: "uniform,range", doc: "`group.protocol=consumer`: server-side assignors (`uniform`, `range`); the first is used when members name none" },
];

/// The text of `docs/configuration.md` before the settings table: where settings come from
/// and in which order they override each other (as `SettingsBuilder` and `keel --help` do).
const REFERENCE_PREAMBLE: &str = "\
# Configuration reference

<!-- Generated from BROKER_KEYS and TOPIC_CONFIGS in broker/src/config.rs; do not edit by hand.
     Regenerate: UPDATE_DOCS=1 cargo test -p keel-broker configuration_reference -->

`keel` and `keel serve` start the broker. Every setting has Kafka's name and default where
Kafka has the setting. Settings come from four sources, each overriding the ones before it:

1. the built-in defaults below;
2. environment variables: `KEEL_` and the name in capitals, dots as underscores
   (`KEEL_NUM_PARTITIONS=3` sets `num.partitions`); `KEEL_CONFIG` names the config file;
3. a TOML file, `--config keel.toml`, with Kafka's names: `\"num.partitions\" = 3` and the
   nested `num.partitions = 3` both set `num.partitions`;
4. flags: `--set KEY=VALUE` sets any setting (repeatable), and these set one each:

| flag | setting |
| --- | --- |
| `--listen HOST:PORT` | `listen` |
| `--advertise HOST:PORT` | `advertise` |
| `--data-dir DIR` | `data.dir` |
| `--smp N` | `smp` |
| `--admin HOST:PORT` | `admin` |
| `--node-id N` | `node.id` |
| `--controller-quorum 1@H:P,2@H:P,...` | `controller.quorum.voters` |
| `--controller-listen HOST:PORT` | `controller.listen` |
| `--rack RACK` | `broker.rack` |

An unknown setting or an invalid value, from any source, stops the start with an error naming
it. `keel --help` lists the same settings.

A topic-level setting overrides its broker setting for one topic: set it at creation
(CreateTopics, `keel topic create --config`) or later (IncrementalAlterConfigs or
AlterConfigs, `keel topic alter-config`). A topic without an override follows the broker
setting. DescribeConfigs reports each value and where it came from.

## Settings

| setting | default | environment variable | topic-level name | description |
| --- | --- | --- | --- | --- |
";

/// The configuration reference, `docs/configuration.md`: the preamble, then one row per
/// broker setting with its environment variable and the topic-level setting that inherits it.
pub fn reference_markdown() -> String {
    let mut out = String::from(REFERENCE_PREAMBLE);
    for key in BROKER_KEYS {
        let code = |v: &str| match v {
            "" => String::new(),
            v => format!("`{v}`"),
        };
        let topic = topic_name_of(key.name).unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {} | {} |\n",
            key.name,
            code(key.default),
            env_var(key.name),
            code(topic),
            key.doc.replace('|', "\\|"),
        ));
    }
    out
}

/// The topic-level setting that inherits broker setting `broker_key`, if any.
pub fn topic_name_of(broker_key: &str) -> Option<&'static str> {
    TOPIC_CONFIGS
        .iter()
        .find(|t| t.broker_key == broker_key)
        .map(|t| t.name)
}

/// The environment variable that sets `key` (`SettingsBuilder::env` reads it back).
fn env_var(key: &str) -> String {
    format!("KEEL_{}", key.to_ascii_uppercase().replace('.', "_"))
}

/// A topic-level setting and the broker setting it inherits.
pub struct TopicKey {
    pub name: &'static str,
    pub broker_key: &'static str,
    pub check: fn(&str) -> Result<()>,
}

fn check_bool(v: &str) -> Result<()> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "false" => Ok(()),
        _ => bail!("expected true or false"),
    }
}

fn check_long(v: &str) -> Result<()> {
    v.trim()
        .parse::<i64>()
        .map(|_| ())
        .map_err(|_| anyhow!("not a number: {v}"))
}
fn check_positive_long(v: &str) -> Result<()> {
    match v.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => bail!("must be a positive number: {v}"),
    }
}
fn check_segment_bytes(v: &str) -> Result<()> {
    match v.trim().parse::<i64>() {
        Ok(n) if (14..=i32::MAX as i64).contains(&n) => Ok(()),
        _ => bail!("must be between 14 and {}: {v}", i32::MAX),
    }
}
fn check_int_min1(v: &str) -> Result<()> {
    match v.trim().parse::<i32>() {
        Ok(n) if n >= 1 => Ok(()),
        _ => bail!("must be an integer >= 1: {v}"),
    }
}
/// Kafka's throttled-replicas list: empty, `*`, or `PARTITION:BROKER` pairs.
fn check_throttled_replicas(v: &str) -> Result<()> {
    let v = v.trim();
    if v.is_empty() || v == "*" {
        return Ok(());
    }
    for item in v.split(',').map(str::trim) {
        let ok = item.split_once(':').is_some_and(|(p, b)| {
            p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
        });
        if !ok {
            bail!("expected `*` or PARTITION:BROKER pairs separated by commas, not {item:?}");
        }
    }
    Ok(())
}

/// Whether `list` (a throttled-replicas value) names `broker`'s replica of `partition`.
pub fn throttled_replicas_include(list: &str, partition: i32, broker: i32) -> bool {
    let list = list.trim();
    list == "*"
        || list.split(',').any(|item| {
            item.split_once(':').is_some_and(|(p, b)| {
                p.trim().parse::<i32>() == Ok(partition) && b.trim().parse::<i32>() == Ok(broker)
            })
        })
}

/// The broker settings that change at run time (AlterConfigs and IncrementalAlterConfigs on a
/// broker resource: a broker id, or `""` for every broker), as Kafka's dynamic broker configs.
/// A broker's own value wins over the cluster-wide one, which wins over its static setting.
pub const DYNAMIC_BROKER_KEYS: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
];

fn throttle_rate(name: &str, value: &str) -> Result<i64> {
    validate_dynamic_broker_config(name, value)?;
    Ok(value.trim().parse()?)
}

/// Checks one dynamic broker config: a known name and a valid value.
pub fn validate_dynamic_broker_config(name: &str, value: &str) -> Result<()> {
    match name {
        "leader.replication.throttled.rate" | "follower.replication.throttled.rate" => {
            match value.trim().parse::<i64>() {
                Ok(n) if n >= 0 => Ok(()),
                _ => bail!("{name} must be a whole number of bytes per second >= 0, not {value:?}"),
            }
        }
        other => bail!(
            "{other} cannot change at run time; the dynamic broker configs are {}",
            DYNAMIC_BROKER_KEYS.join(", ")
        ),
    }
}

fn check_index_interval_bytes(v: &str) -> Result<()> {
    match v.trim().parse::<i32>() {
        Ok(n) if n >= 0 => Ok(()),
        _ => bail!("must be an integer >= 0: {v}"),
    }
}
fn check_max_message_bytes(v: &str) -> Result<()> {
    match v.trim().parse::<i32>() {
        Ok(n) if n >= 0 => Ok(()),
        _ => bail!("must be a non-negative integer: {v}"),
    }
}
fn check_cleanup_policy(v: &str) -> Result<()> {
    for part in v.split(',') {
        match part.trim() {
            "delete" | "compact" => {}
            other => bail!("cleanup.policy must be delete and/or compact, not {other:?}"),
        }
    }
    Ok(())
}
fn check_non_negative_long(v: &str) -> Result<()> {
    match v.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(()),
        _ => bail!("must be a number >= 0: {v}"),
    }
}
fn check_ratio(v: &str) -> Result<()> {
    match v.trim().parse::<f64>() {
        Ok(n) if (0.0..=1.0).contains(&n) => Ok(()),
        _ => bail!("must be a number between 0 and 1: {v}"),
    }
}
fn check_timestamp_type(v: &str) -> Result<()> {
    TimestampType::from_str(v.trim())
        .map(|_| ())
        .map_err(|_| anyhow!("must be CreateTime or LogAppendTime: {v}"))
}
fn check_compression_type(v: &str) -> Result<()> {
    v.trim()
        .parse::<keel_storage::codec::CompressionType>()
        .map(|_| ())
        .map_err(|e| anyhow!(e))
}
fn check_level(
    v: &str,
    name: &str,
    range: std::ops::RangeInclusive<i32>,
    extra: Option<i32>,
) -> Result<()> {
    match v.trim().parse::<i32>() {
        Ok(n) if range.contains(&n) || Some(n) == extra => Ok(()),
        _ => bail!(
            "{name} must be an integer between {} and {}{}: {v}",
            range.start(),
            range.end(),
            extra.map(|e| format!(" (or {e})")).unwrap_or_default()
        ),
    }
}
fn check_gzip_level(v: &str) -> Result<()> {
    use keel_storage::codec::{GZIP_LEVELS, GZIP_LEVEL_DEFAULT};
    check_level(
        v,
        "compression.gzip.level",
        GZIP_LEVELS,
        Some(GZIP_LEVEL_DEFAULT),
    )
}
fn check_lz4_level(v: &str) -> Result<()> {
    check_level(
        v,
        "compression.lz4.level",
        keel_storage::codec::LZ4_LEVELS,
        None,
    )
}
fn check_zstd_level(v: &str) -> Result<()> {
    check_level(
        v,
        "compression.zstd.level",
        keel_storage::codec::ZSTD_LEVELS,
        None,
    )
}
fn check_flush_policy(v: &str) -> Result<()> {
    FlushPolicy::from_str(v.trim())
        .map(|_| ())
        .map_err(|_| anyhow!("must be group or interval: {v}"))
}

/// Topic configs Keel honours, in the order DescribeConfigs lists them.
pub const TOPIC_CONFIGS: &[TopicKey] = &[
    TopicKey {
        name: "cleanup.policy",
        broker_key: "log.cleanup.policy",
        check: check_cleanup_policy,
    },
    TopicKey {
        name: "compression.gzip.level",
        broker_key: "compression.gzip.level",
        check: check_gzip_level,
    },
    TopicKey {
        name: "compression.lz4.level",
        broker_key: "compression.lz4.level",
        check: check_lz4_level,
    },
    TopicKey {
        name: "compression.type",
        broker_key: "compression.type",
        check: check_compression_type,
    },
    TopicKey {
        name: "compression.zstd.level",
        broker_key: "compression.zstd.level",
        check: check_zstd_level,
    },
    TopicKey {
        name: "delete.retention.ms",
        broker_key: "log.cleaner.delete.retention.ms",
        check: check_non_negative_long,
    },
    TopicKey {
        name: "flush.ms",
        broker_key: "log.flush.interval.ms",
        check: check_positive_long,
    },
    TopicKey {
        name: "flush.policy",
        broker_key: "log.flush.policy",
        check: check_flush_policy,
    },
    TopicKey {
        name: "follower.replication.throttled.replicas",
        broker_key: "follower.replication.throttled.replicas",
        check: check_throttled_replicas,
    },
    TopicKey {
        name: "index.interval.bytes",
        broker_key: "log.index.interval.bytes",
        check: check_index_interval_bytes,
    },
    TopicKey {
        name: "leader.replication.throttled.replicas",
        broker_key: "leader.replication.throttled.replicas",
        check: check_throttled_replicas,
    },
    TopicKey {
        name: "max.message.bytes",
        broker_key: "message.max.bytes",
        check: check_max_message_bytes,
    },
    TopicKey {
        name: "max.compaction.lag.ms",
        broker_key: "log.cleaner.max.compaction.lag.ms",
        check: check_positive_long,
    },
    TopicKey {
        name: "message.timestamp.type",
        broker_key: "log.message.timestamp.type",
        check: check_timestamp_type,
    },
    TopicKey {
        name: "min.cleanable.dirty.ratio",
        broker_key: "log.cleaner.min.cleanable.ratio",
        check: check_ratio,
    },
    TopicKey {
        name: "min.compaction.lag.ms",
        broker_key: "log.cleaner.min.compaction.lag.ms",
        check: check_non_negative_long,
    },
    TopicKey {
        name: "min.insync.replicas",
        broker_key: "min.insync.replicas",
        check: check_int_min1,
    },
    TopicKey {
        name: "retention.bytes",
        broker_key: "log.retention.bytes",
        check: check_long,
    },
    TopicKey {
        name: "retention.ms",
        broker_key: "log.retention.ms",
        check: check_long,
    },
    TopicKey {
        name: "segment.bytes",
        broker_key: "log.segment.bytes",
        check: check_segment_bytes,
    },
    TopicKey {
        name: "segment.ms",
        broker_key: "log.roll.ms",
        check: check_positive_long,
    },
    TopicKey {
        name: "unclean.leader.election.enable",
        broker_key: "unclean.leader.election.enable",
        check: check_bool,
    },
];

pub fn topic_key(name: &str) -> Option<&'static TopicKey> {
    TOPIC_CONFIGS.iter().find(|k| k.name == name)
}

/// Checks one topic config name and value; the error text goes back to the client.
pub fn validate_topic_config(name: &str, value: &str) -> Result<()> {
    let key = topic_key(name).ok_or_else(|| anyhow!("unknown topic config {name:?}"))?;
    (key.check)(value).with_context(|| format!("invalid value for {name}"))
}

/// Parses Kafka's `controller.quorum.voters`: `ID@HOST:PORT,ID@HOST:PORT`.
pub fn parse_quorum(v: &str) -> Result<BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item.split_once('@').ok_or_else(|| {
            anyhow!("controller.quorum.voters entry {item:?} is not ID@HOST:PORT")
        })?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| anyhow!("controller.quorum.voters: bad node id in {item:?}"))?;
        if !addr.contains(':') {
            bail!("controller.quorum.voters entry {item:?} is not ID@HOST:PORT");
        }
        if out.insert(id, addr.trim().to_string()).is_some() {
            bail!("controller.quorum.voters names node {id} twice");
        }
    }
    Ok(out)
}

/// One Kafka listener: its name (`PLAINTEXT`, or one mapped to PLAINTEXT) and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub addr: SocketAddr,
    /// From `listener.security.protocol.map`.
    pub protocol: SecurityProtocol,
    /// The SASL mechanisms offered (a SASL listener's `sasl.enabled.mechanisms`); empty on
    /// the others.
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// With OAUTHBEARER offered: the unsecured validator's options (the listener's
    /// `oauthbearer.sasl.jaas.config`).
    pub oauthbearer: Option<keel_auth::oauthbearer::UnsecuredValidatorOptions>,
    /// An SSL or SASL_SSL listener's TLS configuration.
    pub tls: Option<crate::tls::TlsConfig>,
    /// What clients are told: `advertised.listeners`, else `advertise`, else `addr`.
    pub advertised_host: String,
    pub advertised_port: u16,
}

/// The prefix of per-listener settings: `listener.name.<name>.<key>` (Kafka's, the listener
/// name in lower case).
pub const LISTENER_PREFIX: &str = "listener.name.";

/// The listener settings that `listener.name.<name>.` may prefix.
const PER_LISTENER_KEYS: &[&str] = &[
    "sasl.enabled.mechanisms",
    "oauthbearer.sasl.jaas.config",
    "plain.sasl.jaas.config",
    "scram-sha-256.sasl.jaas.config",
    "scram-sha-512.sasl.jaas.config",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
    "ssl.principal.mapping.rules",
];

/// A listener's security protocol (Kafka's `SecurityProtocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    fn parse(name: &str) -> Result<SecurityProtocol> {
        match name {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            other => bail!(
                "unknown security protocol {other:?} (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"
            ),
        }
    }

    /// Whether a connection authenticates with SASL before anything else.
    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Whether the connection is TLS from its first byte.
    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// A SASL mechanism Keel serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    Scram(keel_auth::scram::Mechanism),
    /// Unsecured JWTs (Kafka's `OAuthBearerUnsecuredValidatorCallbackHandler`).
    OAuthBearer,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::OAuthBearer => keel_auth::oauthbearer::MECHANISM,
        }
    }

    fn parse(name: &str) -> Result<SaslMechanism> {
        match name {
            "PLAIN" => Ok(SaslMechanism::Plain),
            keel_auth::oauthbearer::MECHANISM => Ok(SaslMechanism::OAuthBearer),
            other => match keel_auth::scram::Mechanism::from_name(other) {
                Some(m) => Ok(SaslMechanism::Scram(m)),
                None if other == "GSSAPI" => bail!(
                    "GSSAPI (Kafka's default) is not supported: set PLAIN, SCRAM-SHA-256, \
                     SCRAM-SHA-512 and/or OAUTHBEARER"
                ),
                None => {
                    bail!(
                        "unknown SASL mechanism {other:?} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, \
                         OAUTHBEARER)"
                    )
                }
            },
        }
    }
}

/// A listener's value of `key`: `listener.name.<name>.<key>` when set, else `key`.
fn listener_value(get: &dyn Fn(&str) -> String, listener: &str, key: &str) -> String {
    let own = get(&format!(
        "{LISTENER_PREFIX}{}.{key}",
        listener.to_ascii_lowercase()
    ));
    if own.is_empty() {
        get(key)
    } else {
        own
    }
}

/// Parses Kafka's `NAME://HOST:PORT,...` list.
fn parse_listener_list(key: &str, v: &str) -> Result<Vec<(String, String, u16)>> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, rest) = item
            .split_once("://")
            .ok_or_else(|| anyhow!("{key}: {item:?} is not NAME://HOST:PORT"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| anyhow!("{key}: {item:?} has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| anyhow!("{key}: invalid port in {item:?}"))?;
        let name = name.trim().to_ascii_uppercase();
        if out.iter().any(|(n, _, _)| *n == name) {
            bail!("{key}: listener {name} is named twice");
        }
        out.push((name, host.trim_matches(['[', ']']).to_string(), port));
    }
    Ok(out)
}

/// `controller.listener.names`, upper case (Kafka's listener names are case-insensitive).
fn controller_listener_names(get: &dyn Fn(&str) -> String) -> Vec<String> {
    get("controller.listener.names")
        .split(',')
        .map(|n| n.trim().to_ascii_uppercase())
        .filter(|n| !n.is_empty())
        .collect()
}

/// `listener.security.protocol.map` as listener name (upper case) to protocol.
fn protocol_map(get: &dyn Fn(&str) -> String) -> Result<BTreeMap<String, String>> {
    let mut protocols = BTreeMap::new();
    for pair in get("listener.security.protocol.map")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (name, protocol) = pair.split_once(':').ok_or_else(|| {
            anyhow!("listener.security.protocol.map: {pair:?} is not NAME:PROTOCOL")
        })?;
        protocols.insert(
            name.trim().to_ascii_uppercase(),
            protocol.trim().to_ascii_uppercase(),
        );
    }
    Ok(protocols)
}

/// The controller transport's TLS, when this node has controller traffic (`transport`): the
/// first of `controller.listener.names`, mapped to SSL (mutual TLS, peers must be super users)
/// or explicitly to PLAINTEXT (`None`). A controller listener without a protocol, or with a
/// SASL one, is refused.
fn controller_security(
    get: &dyn Fn(&str) -> String,
    transport: bool,
) -> Result<Option<keel_raft::network::ControllerTls>> {
    if !transport {
        return Ok(None);
    }
    let Some(name) = controller_listener_names(get).into_iter().next() else {
        bail!("controller.listener.names is empty: name the controller listener");
    };
    match protocol_map(get)?.get(&name).map(String::as_str) {
        None => bail!(
            "the controller listener {name} (controller.listener.names) has no protocol in \
             listener.security.protocol.map: map it to SSL (mutual TLS; only super users may \
             connect) or, explicitly, to PLAINTEXT (unauthenticated)"
        ),
        Some("PLAINTEXT") => Ok(None),
        Some("SSL") => {
            let super_users = get("super.users")
                .split(';')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            crate::tls::controller_tls(&name, &|k| listener_value(get, &name, k), super_users)
                .map(Some)
        }
        Some(other) => bail!(
            "the controller listener {name}: {other} is not supported (SSL for mutual TLS, or \
             PLAINTEXT)"
        ),
    }
}

/// Resolves `listeners`, `advertised.listeners`, `listener.security.protocol.map` and
/// `inter.broker.listener.name` against `listen` and `advertise`.
fn resolve_listeners(
    get: &dyn Fn(&str) -> String,
    explicit: &BTreeMap<String, String>,
    listen: SocketAddr,
    advertise: Option<(String, u16)>,
) -> Result<(Vec<Listener>, usize)> {
    let protocols = protocol_map(get)?;
    let declared = parse_listener_list("listeners", &get("listeners"))?;
    if !declared.is_empty() && explicit.contains_key("listen") {
        bail!("set either listen (--listen) or listeners, not both");
    }
    let declared: Vec<(String, SocketAddr)> = if declared.is_empty() {
        vec![("PLAINTEXT".to_string(), listen)]
    } else {
        declared
            .into_iter()
            .map(|(name, host, port)| {
                let host = if host.is_empty() {
                    "0.0.0.0".to_string()
                } else {
                    host
                };
                let addr = format!("{host}:{port}")
                    .parse::<SocketAddr>()
                    .map_err(|_| {
                        anyhow!("listeners: {name}://{host}:{port} needs an IP address")
                    })?;
                Ok((name, addr))
            })
            .collect::<Result<_>>()?
    };
    let controller_names = controller_listener_names(get);
    if let Some(name) = declared
        .iter()
        .map(|(n, _)| n)
        .find(|n| controller_names.contains(n))
    {
        bail!(
            "listener {name} is the controller listener (controller.listener.names); its address \
             is controller.listen, not one of listeners"
        );
    }
    let mut security = Vec::new();
    for (name, _) in &declared {
        let protocol = match protocols.get(name).map(String::as_str) {
            Some(p) => SecurityProtocol::parse(p).map_err(|e| anyhow!("listener {name}: {e}"))?,
            None if name == "PLAINTEXT" => SecurityProtocol::Plaintext,
            None => {
                bail!("listener {name} has no security protocol in listener.security.protocol.map")
            }
        };
        let mechanisms = if protocol.is_sasl() {
            let list = listener_value(get, name, "sasl.enabled.mechanisms");
            let mut mechanisms = Vec::new();
            for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let m = SaslMechanism::parse(&m.to_ascii_uppercase())
                    .map_err(|e| anyhow!("listener {name}: sasl.enabled.mechanisms: {e}"))?;
                if !mechanisms.contains(&m) {
                    mechanisms.push(m);
                }
            }
            if mechanisms.is_empty() {
                bail!("listener {name}: sasl.enabled.mechanisms is empty");
            }
            mechanisms
        } else {
            Vec::new()
        };
        let oauthbearer = if mechanisms.contains(&SaslMechanism::OAuthBearer) {
            Some(oauthbearer_options(get, name)?)
        } else {
            None
        };
        let tls = if protocol.is_tls() {
            Some(crate::tls::server_config(
                name,
                protocol.is_sasl(),
                &|key| listener_value(get, name, key),
            )?)
        } else {
            None
        };
        security.push((protocol, mechanisms, oauthbearer, tls));
    }
    for key in explicit.keys() {
        let Some(rest) = key.strip_prefix(LISTENER_PREFIX) else {
            continue;
        };
        let known = declared
            .iter()
            .map(|(name, _)| name)
            .chain(&controller_names)
            .any(|name| {
                rest.strip_prefix(&format!("{}.", name.to_ascii_lowercase()))
                    .is_some_and(|k| PER_LISTENER_KEYS.contains(&k))
            });
        if !known {
            bail!(
                "unknown setting {key:?}: per-listener settings are `listener.name.<listener, \
                 lower case>.<{}>`",
                PER_LISTENER_KEYS.join("|")
            );
        }
    }
    let advertised = parse_listener_list("advertised.listeners", &get("advertised.listeners"))?;
    for (name, _, _) in &advertised {
        if !declared.iter().any(|(n, _)| n == name) {
            bail!("advertised.listeners names {name}, which is not in listeners");
        }
    }
    let listeners: Vec<Listener> = declared
        .iter()
        .enumerate()
        .map(|(i, (name, addr))| {
            let (advertised_host, advertised_port) =
                match advertised.iter().find(|(n, _, _)| n == name) {
                    Some((_, h, p)) => (h.clone(), *p),
                    None => match (&advertise, i) {
                        (Some((h, p)), 0) => (h.clone(), *p),
                        _ => (addr.ip().to_string(), addr.port()),
                    },
                };
            Listener {
                name: name.clone(),
                addr: *addr,
                protocol: security[i].0,
                sasl_mechanisms: security[i].1.clone(),
                oauthbearer: security[i].2.clone(),
                tls: security[i].3.clone(),
                advertised_host,
                advertised_port,
            }
        })
        .collect();
    let inter = get("inter.broker.listener.name").to_ascii_uppercase();
    let inter_index = listeners
        .iter()
        .position(|l| l.name == inter)
        .ok_or_else(|| anyhow!("inter.broker.listener.name {inter} is not in listeners"))?;
    Ok((listeners, inter_index))
}

/// Kafka's login modules, by the mechanism a `<mechanism>.sasl.jaas.config` is for.
const LOGIN_MODULES: [(&str, &str); 3] = [
    (
        "PLAIN",
        "org.apache.kafka.common.security.plain.PlainLoginModule",
    ),
    (
        "SCRAM-SHA-256",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    ),
    (
        "SCRAM-SHA-512",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    ),
];

/// How this broker's own connections to the inter-broker listener of its peers (replica
/// fetchers, the WriteTxnMarkers client) secure themselves, as Kafka's: TLS when the listener
/// is SSL or SASL_SSL (the listener's truststore checks the peer, its keystore is the client
/// certificate: mTLS where the listener requires one), and on a SASL listener a login with
/// `sasl.mechanism.inter.broker.protocol` and the username and password of the listener's
/// `listener.name.<name>.<mechanism>.sasl.jaas.config`.
fn inter_broker_security(
    get: &dyn Fn(&str) -> String,
    inter: &Listener,
) -> Result<keel_client::Security> {
    let name = &inter.name;
    let lower = name.to_ascii_lowercase();
    let mut security = keel_client::Security::PLAINTEXT;
    if inter.protocol.is_tls() {
        let what = |key: &str| format!("inter-broker listener {name}: {key}");
        security.tls = Some(crate::tls::client_config(&what, &|k| {
            listener_value(get, name, k)
        })?);
    }
    if inter.protocol.is_sasl() {
        let mechanism = get("sasl.mechanism.inter.broker.protocol").to_ascii_uppercase();
        let parsed = SaslMechanism::parse(&mechanism)
            .map_err(|e| anyhow!("sasl.mechanism.inter.broker.protocol: {e}"))?;
        if parsed == SaslMechanism::OAuthBearer {
            bail!(
                "sasl.mechanism.inter.broker.protocol: OAUTHBEARER is not supported between \
                 brokers (its tokens are unsecured): use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
            );
        }
        if !inter.sasl_mechanisms.contains(&parsed) {
            bail!(
                "sasl.mechanism.inter.broker.protocol {mechanism} must be one of the inter-broker \
                 listener {name}'s sasl.enabled.mechanisms"
            );
        }
        let key = format!(
            "{LISTENER_PREFIX}{lower}.{}.sasl.jaas.config",
            mechanism.to_ascii_lowercase()
        );
        let text = get(&key);
        if text.is_empty() {
            bail!(
                "{key} is needed: the username and password this broker logs in with on the \
                 inter-broker listener {name} (Kafka's `{} required username=\"...\" \
                 password=\"...\";`)",
                login_module(&mechanism)
            );
        }
        let entries = keel_auth::jaas::parse(&text).map_err(|e| anyhow!("{key}: {e}"))?;
        let [entry] = entries.as_slice() else {
            bail!("{key}: one login module entry, not {}", entries.len());
        };
        if entry.login_module != login_module(&mechanism) {
            bail!(
                "{key}: {mechanism} logs in with {}, not {}",
                login_module(&mechanism),
                entry.login_module
            );
        }
        let option = |o: &str| {
            entry
                .options
                .get(o)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| anyhow!("{key}: no {o}"))
        };
        if entry.options.keys().any(|k| k.starts_with("user_")) {
            tracing::warn!(
                setting = %key,
                "user_<name> entries are ignored: Keel's PLAIN checks the SCRAM credentials that \
                 AlterUserScramCredentials stores (`keel user`, --add-scram)"
            );
        }
        security.sasl = Some(keel_client::SaslLogin {
            mechanism,
            username: option("username")?,
            password: option("password")?,
        });
    }
    Ok(security)
}

/// The login module of `mechanism` (one of [`LOGIN_MODULES`]').
fn login_module(mechanism: &str) -> &'static str {
    LOGIN_MODULES
        .iter()
        .find(|(m, _)| *m == mechanism)
        .map_or("", |(_, module)| module)
}

/// Listener `name`'s OAUTHBEARER validator options, from its `oauthbearer.sasl.jaas.config`
/// (none: Kafka's defaults). Warns that unsecured tokens authenticate nobody.
fn oauthbearer_options(
    get: &dyn Fn(&str) -> String,
    name: &str,
) -> Result<keel_auth::oauthbearer::UnsecuredValidatorOptions> {
    let key = "oauthbearer.sasl.jaas.config";
    let options = keel_auth::oauthbearer::UnsecuredValidatorOptions::from_jaas_config(
        &listener_value(get, name, key),
    )
    .map_err(|e| {
        anyhow!(
            "listener {name}: {LISTENER_PREFIX}{}.{key}: {e}",
            name.to_ascii_lowercase()
        )
    })?;
    tracing::warn!(
        listener = %name,
        "OAUTHBEARER takes unsecured JWTs (Kafka's OAuthBearerUnsecuredValidatorCallbackHandler): \
         tokens are not signed, so any client that reaches this listener may name any principal; \
         for development and tests only"
    );
    Ok(options)
}

/// Kafka's StandardAuthorizer class name, the one `authorizer.class.name` Keel accepts.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The authorizer's static settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizerSettings {
    pub super_users: std::collections::BTreeSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

fn authorizer_settings(get: &dyn Fn(&str) -> String) -> Result<Option<AuthorizerSettings>> {
    let class = get("authorizer.class.name");
    match class.as_str() {
        "" => return Ok(None),
        STANDARD_AUTHORIZER => {}
        "kafka.security.authorizer.AclAuthorizer" => bail!(
            "authorizer.class.name: AclAuthorizer keeps ACLs in ZooKeeper; Keel has \
             {STANDARD_AUTHORIZER}"
        ),
        other => {
            bail!("authorizer.class.name: unknown class {other:?}; Keel has {STANDARD_AUTHORIZER}")
        }
    }
    let mut super_users = std::collections::BTreeSet::new();
    for p in get("super.users")
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match p.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                super_users.insert(p.to_string());
            }
            _ => bail!("super.users: {p:?} is not a principal `Type:name`"),
        }
    }
    let allow = get("allow.everyone.if.no.acl.found");
    let allow_everyone_if_no_acl_found = allow
        .parse()
        .map_err(|_| anyhow!("invalid value {allow:?} for allow.everyone.if.no.acl.found"))?;
    Ok(Some(AuthorizerSettings {
        super_users,
        allow_everyone_if_no_acl_found,
    }))
}

/// A SCRAM user `keel serve --add-scram` writes to the metadata log when it has no credential
/// for that mechanism yet (Kafka's `kafka-storage format --add-scram`).
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapUser {
    pub mechanism: keel_auth::scram::Mechanism,
    pub name: String,
    pub password: String,
    pub iterations: u32,
}

impl std::fmt::Debug for BootstrapUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapUser")
            .field("mechanism", &self.mechanism)
            .field("name", &self.name)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Parses Kafka's `--add-scram` argument: `SCRAM-SHA-256=[name=admin,password=secret]`, with
/// `iterations=N` optional (default 4096). The password may not contain `,` or `]`.
pub fn parse_add_scram(spec: &str) -> Result<BootstrapUser> {
    let (mech, rest) = spec
        .split_once('=')
        .ok_or_else(|| anyhow!("--add-scram: expected MECHANISM=[name=...,password=...]"))?;
    let mechanism = keel_auth::scram::Mechanism::from_name(mech.trim()).ok_or_else(|| {
        anyhow!("--add-scram: unknown mechanism {mech:?} (SCRAM-SHA-256, SCRAM-SHA-512)")
    })?;
    let inner = rest
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| anyhow!("--add-scram: the credential goes in [...]"))?;
    let (mut name, mut password, mut iterations) = (None, None, keel_auth::scram::MIN_ITERATIONS);
    for field in inner.split(',') {
        let (k, v) = field
            .split_once('=')
            .ok_or_else(|| anyhow!("--add-scram: {field:?} is not key=value"))?;
        let v = v.trim().trim_matches('"');
        match k.trim() {
            "name" => name = Some(v.to_string()),
            "password" => password = Some(v.to_string()),
            "iterations" => {
                iterations = v
                    .parse()
                    .ok()
                    .filter(|i| {
                        (keel_auth::scram::MIN_ITERATIONS..=keel_auth::scram::MAX_ITERATIONS)
                            .contains(i)
                    })
                    .ok_or_else(|| anyhow!("--add-scram: iterations must be 4096 to 16384"))?
            }
            other => bail!("--add-scram: unknown key {other:?} (name, password, iterations)"),
        }
    }
    match (name, password) {
        (Some(name), Some(password)) if !name.is_empty() && !password.is_empty() => {
            Ok(BootstrapUser {
                mechanism,
                name,
                password,
                iterations,
            })
        }
        _ => bail!("--add-scram: name and password are both needed"),
    }
}

/// The resolved broker configuration. Built once at start, shared read-only by all shards.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// The first listener's address (the client listener of `listen` / `listeners`).
    pub listen: SocketAddr,
    /// Every listener: its name and address; the first is `listen`.
    pub listeners: Vec<Listener>,
    /// Before authentication: the largest frame (`sasl.server.max.receive.size`), the delay
    /// of a failure's answer (`connection.failed.authentication.delay.ms`) and the time
    /// allowed to authenticate (`sasl.server.authentication.timeout.ms`).
    pub sasl_server_max_receive_size: usize,
    pub connection_failed_authentication_delay_ms: u64,
    pub sasl_server_authentication_timeout_ms: u64,
    /// `authorizer.class.name` set: requests are authorized against the ACLs, with these
    /// `super.users` and `allow.everyone.if.no.acl.found`; `None` = everything is allowed.
    pub authorizer: Option<AuthorizerSettings>,
    /// `keel serve --add-scram`: users written to the metadata log if missing.
    pub add_scram: Vec<BootstrapUser>,
    /// `connections.max.idle.ms`, `max.connections`, `max.connections.per.ip`.
    pub connections_max_idle_ms: u64,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Client quotas' windows: `quota.window.num` of `quota.window.size.seconds`.
    pub quota_window_num: usize,
    pub quota_window_size_seconds: u64,
    /// The inter-broker listener: its name, advertised host and port.
    pub inter_broker_listener_name: String,
    /// How replica fetchers and the WriteTxnMarkers client secure their connections to the
    /// inter-broker listener (TLS, SASL login; `Security::PLAINTEXT` on a PLAINTEXT one).
    pub inter_broker_security: keel_client::Security,
    pub inter_broker_host: String,
    pub inter_broker_port: u16,
    /// The address the inter-broker listener binds (its host gets each shard's own port).
    pub inter_broker_bind: SocketAddr,
    /// Each shard's own inter-broker port, by shard (bound at start; empty until then).
    pub inter_broker_shard_ports: Vec<u16>,
    /// `inter.broker.shard.port.base`: shard N's port is this + N; 0 = a free port each.
    pub inter_broker_shard_port_base: u16,
    pub advertise_host: String,
    pub advertise_port: u16,
    pub data_dir: PathBuf,
    pub smp: usize,
    pub admin: Option<SocketAddr>,
    pub node_id: i32,
    /// Metadata quorum voters: node id -> controller address.
    pub controller_quorum: BTreeMap<u64, String>,
    pub controller_listen: Option<SocketAddr>,
    /// Mutual TLS on the controller transport (`controller.listener.names` mapped to SSL);
    /// `None`: plaintext, or no controller traffic.
    pub controller_tls: Option<keel_raft::network::ControllerTls>,
    pub rack: Option<String>,
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    pub controlled_shutdown_enable: bool,
    pub controlled_shutdown_timeout_ms: u64,
    /// Static `leader.replication.throttled.rate` (bytes/s); the image's dynamic values win.
    pub leader_replication_throttled_rate: i64,
    /// Static `follower.replication.throttled.rate` (bytes/s).
    pub follower_replication_throttled_rate: i64,
    /// The controller's automatic preferred-leader rebalance (Kafka's
    /// `auto.leader.rebalance.enable`, `leader.imbalance.check.interval.seconds`,
    /// `leader.imbalance.per.broker.percentage`).
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: u64,
    pub leader_imbalance_per_broker_percentage: u32,
    pub metadata_snapshot_interval_ms: u64,
    pub metadata_snapshot_entries: u64,
    pub cluster_id: String,
    pub io_memory_bytes: usize,
    /// Stall detector threshold past a task queue's budget; 0 = off.
    pub reactor_stall_threshold_ms: u64,
    /// `io.properties.file` as given: empty = the data dir's `io-properties.toml` if present.
    pub io_properties_file: String,
    /// glommio's preempt timer on every shard (`io.latency.goal.us`).
    pub io_latency_goal_us: u64,
    /// Most bytes in one DMA write of a segment (`log.write.buffer.bytes`).
    pub write_buffer_bytes: u64,
    /// Segment writes in flight per shard; 0 = unbounded (`log.write.inflight.shard.max`).
    pub write_inflight_shard_max: usize,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub socket_request_max_bytes: usize,
    /// Tail-cache budget of one shard, split over the partitions it owns.
    pub tail_cache_shard_bytes: usize,
    /// Closed segment files a shard keeps open.
    pub closed_segment_files_shard_max: usize,
    /// Partitions of `__consumer_offsets` when the first FindCoordinator creates it.
    pub offsets_topic_num_partitions: i32,
    /// segment.bytes of `__consumer_offsets` when it is created.
    pub offsets_topic_segment_bytes: i64,
    /// Offsets of a group without members expire this long after its latest commit.
    pub offsets_retention_minutes: i64,
    /// How often each coordinator shard looks for expired offsets.
    pub offsets_retention_check_interval_ms: u64,
    /// Largest metadata string of one committed offset, in bytes.
    pub offset_metadata_max_bytes: usize,
    /// Members one consumer group may hold (`group.max.size`).
    pub group_size_max: usize,
    /// Session timeouts a group member may ask for, inclusive.
    pub group_session_timeout_ms_min: i32,
    pub group_session_timeout_ms_max: i32,
    /// `group.initial.rebalance.delay.ms`: the first rebalance out of `Empty` waits this long.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.protocol=consumer` groups: session timeout, heartbeat interval, size limit and
    /// default assignor (the first of `group.consumer.assignors`).
    pub consumer_group_session_timeout_ms: i32,
    pub consumer_group_heartbeat_interval_ms: i32,
    pub consumer_group_size_max: usize,
    pub consumer_group_assignor: String,
    /// Transaction coordinators: `__transaction_state`'s partitions and segment size when it
    /// is created, the longest transaction timeout, and how long idle transactional ids live.
    pub transaction_state_log_num_partitions: i32,
    pub transaction_state_log_segment_bytes: i64,
    pub transaction_max_timeout_ms: i32,
    pub transactional_id_expiration_ms: i64,
    /// Replication (Kafka's `replica.*` settings).
    pub replica_lag_time_max_ms: u64,
    pub replica_fetch_wait_max_ms: i32,
    pub replica_fetch_min_bytes: i32,
    pub replica_fetch_max_bytes: i32,
    pub replica_fetch_response_max_bytes: i32,
    pub replica_fetch_backoff_ms: u64,
    pub replica_socket_timeout_ms: u64,
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`: how often recovery points are written.
    pub log_flush_offset_checkpoint_interval_ms: u64,
    /// `replica.selector.class`: which replica a leader names for a consumer (KIP-392).
    pub replica_selector: ReplicaSelector,
    /// Replication factors of the internal topics, and `min.insync.replicas` of
    /// `__transaction_state`.
    pub offsets_topic_replication_factor: i16,
    pub transaction_state_log_replication_factor: i16,
    pub transaction_state_log_min_isr: i32,
    /// Every key with its effective value (defaults filled in).
    pub values: BTreeMap<String, String>,
    /// Keys set explicitly by env, file or flag (DescribeConfigs reports them as static).
    pub explicit: BTreeMap<String, String>,
}

impl BrokerConfig {
    /// Builds the config from a flat map of explicitly set keys.
    pub fn from_settings(explicit: BTreeMap<String, String>) -> Result<Self> {
        for key in explicit.keys() {
            // Per-listener settings are checked against the listeners in `resolve_listeners`.
            if !BROKER_KEYS.iter().any(|k| k.name == key) && !key.starts_with(LISTENER_PREFIX) {
                bail!("unknown setting {key:?} (see keel --help or docs/configuration.md)");
            }
        }
        let mut values: BTreeMap<String, String> = BROKER_KEYS
            .iter()
            .map(|k| (k.name.to_string(), k.default.to_string()))
            .collect();
        values.extend(explicit.clone());
        let get = |k: &str| {
            values
                .get(k)
                .map(String::as_str)
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        fn parse<T: FromStr>(key: &str, v: &str) -> Result<T> {
            v.parse::<T>()
                .map_err(|_| anyhow!("invalid value {v:?} for {key}"))
        }
        let listen: SocketAddr = parse("listen", &get("listen"))?;
        let advertise = get("advertise");
        let advertise = if advertise.is_empty() {
            None
        } else {
            let (h, p) = advertise
                .rsplit_once(':')
                .ok_or_else(|| anyhow!("advertise must be HOST:PORT, got {advertise:?}"))?;
            Some((h.to_string(), parse("advertise port", p)?))
        };
        let (listeners, inter_index) = resolve_listeners(&get, &explicit, listen, advertise)?;
        let listen = listeners[0].addr;
        let (advertise_host, advertise_port) = (
            listeners[0].advertised_host.clone(),
            listeners[0].advertised_port,
        );
        let inter = listeners[inter_index].clone();
        let inter_broker_security = inter_broker_security(&get, &inter)?;
        let admin = get("admin");
        let admin = if admin.is_empty() || admin == "off" {
            None
        } else {
            Some(parse("admin", &admin)?)
        };
        let mut cfg = BrokerConfig {
            listen,
            inter_broker_listener_name: inter.name.clone(),
            inter_broker_security,
            inter_broker_host: inter.advertised_host.clone(),
            inter_broker_port: inter.advertised_port,
            inter_broker_bind: inter.addr,
            inter_broker_shard_ports: Vec::new(),
            inter_broker_shard_port_base: parse(
                "inter.broker.shard.port.base",
                &get("inter.broker.shard.port.base"),
            )?,
            listeners,
            sasl_server_max_receive_size: parse(
                "sasl.server.max.receive.size",
                &get("sasl.server.max.receive.size"),
            )?,
            connection_failed_authentication_delay_ms: parse(
                "connection.failed.authentication.delay.ms",
                &get("connection.failed.authentication.delay.ms"),
            )?,
            sasl_server_authentication_timeout_ms: parse(
                "sasl.server.authentication.timeout.ms",
                &get("sasl.server.authentication.timeout.ms"),
            )?,
            authorizer: authorizer_settings(&get)?,
            add_scram: Vec::new(),
            connections_max_idle_ms: parse(
                "connections.max.idle.ms",
                &get("connections.max.idle.ms"),
            )?,
            max_connections: parse("max.connections", &get("max.connections"))?,
            max_connections_per_ip: parse(
                "max.connections.per.ip",
                &get("max.connections.per.ip"),
            )?,
            quota_window_num: parse("quota.window.num", &get("quota.window.num"))?,
            quota_window_size_seconds: parse(
                "quota.window.size.seconds",
                &get("quota.window.size.seconds"),
            )?,
            advertise_host,
            advertise_port,
            data_dir: PathBuf::from(get("data.dir")),
            smp: parse("smp", &get("smp"))?,
            admin,
            node_id: parse("node.id", &get("node.id"))?,
            controller_quorum: parse_quorum(&get("controller.quorum.voters"))?,
            controller_listen: match get("controller.listen").as_str() {
                "" => None,
                v => Some(parse("controller.listen", v)?),
            },
            controller_tls: None,
            rack: Some(get("broker.rack")).filter(|r| !r.is_empty()),
            broker_session_timeout_ms: parse(
                "broker.session.timeout.ms",
                &get("broker.session.timeout.ms"),
            )?,
            broker_heartbeat_interval_ms: parse(
                "broker.heartbeat.interval.ms",
                &get("broker.heartbeat.interval.ms"),
            )?,
            controlled_shutdown_enable: parse(
                "controlled.shutdown.enable",
                &get("controlled.shutdown.enable"),
            )?,
            controlled_shutdown_timeout_ms: parse(
                "controlled.shutdown.timeout.ms",
                &get("controlled.shutdown.timeout.ms"),
            )?,
            leader_replication_throttled_rate: throttle_rate(
                "leader.replication.throttled.rate",
                &get("leader.replication.throttled.rate"),
            )?,
            follower_replication_throttled_rate: throttle_rate(
                "follower.replication.throttled.rate",
                &get("follower.replication.throttled.rate"),
            )?,
            auto_leader_rebalance_enable: parse(
                "auto.leader.rebalance.enable",
                &get("auto.leader.rebalance.enable"),
            )?,
            leader_imbalance_check_interval_seconds: parse(
                "leader.imbalance.check.interval.seconds",
                &get("leader.imbalance.check.interval.seconds"),
            )?,
            leader_imbalance_per_broker_percentage: parse(
                "leader.imbalance.per.broker.percentage",
                &get("leader.imbalance.per.broker.percentage"),
            )?,
            metadata_snapshot_interval_ms: parse(
                "metadata.log.max.snapshot.interval.ms",
                &get("metadata.log.max.snapshot.interval.ms"),
            )?,
            metadata_snapshot_entries: parse(
                "metadata.log.snapshot.entries",
                &get("metadata.log.snapshot.entries"),
            )?,
            cluster_id: get("cluster.id"),
            io_memory_bytes: parse("io.memory.bytes", &get("io.memory.bytes"))?,
            reactor_stall_threshold_ms: parse(
                "reactor.stall.threshold.ms",
                &get("reactor.stall.threshold.ms"),
            )?,
            io_properties_file: get("io.properties.file"),
            io_latency_goal_us: parse("io.latency.goal.us", &get("io.latency.goal.us"))?,
            write_buffer_bytes: parse("log.write.buffer.bytes", &get("log.write.buffer.bytes"))?,
            write_inflight_shard_max: parse(
                "log.write.inflight.shard.max",
                &get("log.write.inflight.shard.max"),
            )?,
            num_partitions: parse("num.partitions", &get("num.partitions"))?,
            default_replication_factor: parse(
                "default.replication.factor",
                &get("default.replication.factor"),
            )?,
            auto_create_topics_enable: parse(
                "auto.create.topics.enable",
                &get("auto.create.topics.enable"),
            )?,
            socket_request_max_bytes: parse(
                "socket.request.max.bytes",
                &get("socket.request.max.bytes"),
            )?,
            closed_segment_files_shard_max: parse(
                "log.closed.segment.files.shard.max",
                &get("log.closed.segment.files.shard.max"),
            )?,
            tail_cache_shard_bytes: parse(
                "log.tail.cache.shard.bytes",
                &get("log.tail.cache.shard.bytes"),
            )?,
            offsets_topic_num_partitions: parse(
                "offsets.topic.num.partitions",
                &get("offsets.topic.num.partitions"),
            )?,
            offsets_topic_segment_bytes: parse(
                "offsets.topic.segment.bytes",
                &get("offsets.topic.segment.bytes"),
            )?,
            offsets_retention_minutes: parse(
                "offsets.retention.minutes",
                &get("offsets.retention.minutes"),
            )?,
            offsets_retention_check_interval_ms: parse(
                "offsets.retention.check.interval.ms",
                &get("offsets.retention.check.interval.ms"),
            )?,
            offset_metadata_max_bytes: parse(
                "offset.metadata.max.bytes",
                &get("offset.metadata.max.bytes"),
            )?,
            group_size_max: parse::<i32>("group.max.size", &get("group.max.size"))?.max(0) as usize,
            group_session_timeout_ms_min: parse(
                "group.min.session.timeout.ms",
                &get("group.min.session.timeout.ms"),
            )?,
            group_session_timeout_ms_max: parse(
                "group.max.session.timeout.ms",
                &get("group.max.session.timeout.ms"),
            )?,
            group_initial_rebalance_delay_ms: parse(
                "group.initial.rebalance.delay.ms",
                &get("group.initial.rebalance.delay.ms"),
            )?,
            consumer_group_session_timeout_ms: parse(
                "group.consumer.session.timeout.ms",
                &get("group.consumer.session.timeout.ms"),
            )?,
            consumer_group_heartbeat_interval_ms: parse(
                "group.consumer.heartbeat.interval.ms",
                &get("group.consumer.heartbeat.interval.ms"),
            )?,
            consumer_group_size_max: parse::<i32>(
                "group.consumer.max.size",
                &get("group.consumer.max.size"),
            )?
            .max(0) as usize,
            consumer_group_assignor: get("group.consumer.assignors")
                .split(',')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
            transaction_state_log_num_partitions: parse(
                "transaction.state.log.num.partitions",
                &get("transaction.state.log.num.partitions"),
            )?,
            transaction_state_log_segment_bytes: parse(
                "transaction.state.log.segment.bytes",
                &get("transaction.state.log.segment.bytes"),
            )?,
            transaction_max_timeout_ms: parse(
                "transaction.max.timeout.ms",
                &get("transaction.max.timeout.ms"),
            )?,
            transactional_id_expiration_ms: parse(
                "transactional.id.expiration.ms",
                &get("transactional.id.expiration.ms"),
            )?,
            replica_lag_time_max_ms: parse(
                "replica.lag.time.max.ms",
                &get("replica.lag.time.max.ms"),
            )?,
            replica_fetch_wait_max_ms: parse(
                "replica.fetch.wait.max.ms",
                &get("replica.fetch.wait.max.ms"),
            )?,
            replica_fetch_min_bytes: parse(
                "replica.fetch.min.bytes",
                &get("replica.fetch.min.bytes"),
            )?,
            replica_fetch_max_bytes: parse(
                "replica.fetch.max.bytes",
                &get("replica.fetch.max.bytes"),
            )?,
            replica_fetch_response_max_bytes: parse(
                "replica.fetch.response.max.bytes",
                &get("replica.fetch.response.max.bytes"),
            )?,
            replica_fetch_backoff_ms: parse(
                "replica.fetch.backoff.ms",
                &get("replica.fetch.backoff.ms"),
            )?,
            replica_socket_timeout_ms: parse(
                "replica.socket.timeout.ms",
                &get("replica.socket.timeout.ms"),
            )?,
            replica_high_watermark_checkpoint_interval_ms: parse(
                "replica.high.watermark.checkpoint.interval.ms",
                &get("replica.high.watermark.checkpoint.interval.ms"),
            )?,
            log_flush_offset_checkpoint_interval_ms: parse(
                "log.flush.offset.checkpoint.interval.ms",
                &get("log.flush.offset.checkpoint.interval.ms"),
            )?,
            replica_selector: ReplicaSelector::from_class(&get("replica.selector.class"))?,
            offsets_topic_replication_factor: parse(
                "offsets.topic.replication.factor",
                &get("offsets.topic.replication.factor"),
            )?,
            transaction_state_log_replication_factor: parse(
                "transaction.state.log.replication.factor",
                &get("transaction.state.log.replication.factor"),
            )?,
            transaction_state_log_min_isr: parse(
                "transaction.state.log.min.isr",
                &get("transaction.state.log.min.isr"),
            )?,
            values: values.clone(),
            explicit,
        };
        if cfg.offsets_topic_replication_factor < 1
            || cfg.transaction_state_log_replication_factor < 1
            || cfg.transaction_state_log_min_isr < 1
        {
            bail!("offsets.topic.replication.factor, transaction.state.log.replication.factor and transaction.state.log.min.isr must be >= 1");
        }
        if cfg.replica_fetch_wait_max_ms < 0
            || cfg.replica_fetch_min_bytes < 0
            || cfg.replica_fetch_max_bytes < 1
            || cfg.replica_fetch_response_max_bytes < 1
        {
            bail!("replica.fetch.wait.max.ms and replica.fetch.min.bytes must be >= 0, replica.fetch.max.bytes and replica.fetch.response.max.bytes >= 1");
        }
        if cfg.replica_fetch_wait_max_ms as u64 >= cfg.replica_socket_timeout_ms {
            bail!("replica.fetch.wait.max.ms must be below replica.socket.timeout.ms");
        }
        if !(8..=cfg.socket_request_max_bytes).contains(&cfg.sasl_server_max_receive_size) {
            bail!("sasl.server.max.receive.size must be between 8 and socket.request.max.bytes");
        }
        if cfg.connections_max_idle_ms < 1
            || cfg.max_connections < 1
            || cfg.max_connections_per_ip < 1
        {
            bail!("connections.max.idle.ms, max.connections and max.connections.per.ip must be at least 1");
        }
        if cfg.quota_window_num < 1 || cfg.quota_window_size_seconds < 1 {
            bail!("quota.window.num and quota.window.size.seconds must be at least 1");
        }
        if cfg.sasl_server_authentication_timeout_ms < 1 {
            bail!("sasl.server.authentication.timeout.ms must be at least 1");
        }
        if cfg.num_partitions < 1 {
            bail!("num.partitions must be >= 1");
        }
        if !(100..=1_000_000).contains(&cfg.io_latency_goal_us) {
            bail!("io.latency.goal.us must be between 100 and 1000000");
        }
        if !(4096..=64 << 20).contains(&cfg.write_buffer_bytes) {
            bail!(
                "log.write.buffer.bytes must be between 4096 and {}",
                64 << 20
            );
        }
        if parse::<i64>(
            "producer.id.expiration.ms",
            &get("producer.id.expiration.ms"),
        )? < 1
        {
            bail!("producer.id.expiration.ms must be >= 1");
        }
        if cfg.offsets_topic_num_partitions < 1 {
            bail!("offsets.topic.num.partitions must be >= 1");
        }
        check_segment_bytes(&cfg.offsets_topic_segment_bytes.to_string())
            .context("invalid value for offsets.topic.segment.bytes")?;
        if cfg.offsets_retention_minutes < 1 {
            bail!("offsets.retention.minutes must be >= 1");
        }
        if cfg.offsets_retention_check_interval_ms < 1 {
            bail!("offsets.retention.check.interval.ms must be >= 1");
        }
        if cfg.group_size_max < 1 {
            bail!("group.max.size must be >= 1");
        }
        if cfg.group_session_timeout_ms_min < 0
            || cfg.group_session_timeout_ms_min > cfg.group_session_timeout_ms_max
        {
            bail!("group.min.session.timeout.ms must be >= 0 and <= group.max.session.timeout.ms");
        }
        if cfg.group_initial_rebalance_delay_ms < 0 {
            bail!("group.initial.rebalance.delay.ms must be >= 0");
        }
        if cfg.consumer_group_heartbeat_interval_ms < 1
            || cfg.consumer_group_heartbeat_interval_ms >= cfg.consumer_group_session_timeout_ms
        {
            bail!("group.consumer.heartbeat.interval.ms must be >= 1 and < group.consumer.session.timeout.ms");
        }
        if cfg.transaction_state_log_num_partitions < 1 {
            bail!("transaction.state.log.num.partitions must be >= 1");
        }
        check_segment_bytes(&cfg.transaction_state_log_segment_bytes.to_string())
            .context("invalid value for transaction.state.log.segment.bytes")?;
        if cfg.transaction_max_timeout_ms < 1 || cfg.transactional_id_expiration_ms < 1 {
            bail!("transaction.max.timeout.ms and transactional.id.expiration.ms must be >= 1");
        }
        if cfg.consumer_group_size_max < 1 {
            bail!("group.consumer.max.size must be >= 1");
        }
        for a in get("group.consumer.assignors").split(',') {
            if !matches!(a.trim(), "uniform" | "range") {
                bail!("group.consumer.assignors: unknown assignor {a:?} (uniform, range)");
            }
        }
        if cfg.node_id < 0 {
            bail!("node.id must be >= 0");
        }
        let others = cfg
            .controller_quorum
            .keys()
            .any(|id| *id != cfg.node_id as u64);
        if others && cfg.controller_listen.is_none() {
            bail!("controller.listen (--controller-listen) is required when the quorum has other voters");
        }
        cfg.controller_tls = controller_security(&get, others || cfg.controller_listen.is_some())?;
        if cfg.broker_heartbeat_interval_ms == 0
            || cfg.broker_heartbeat_interval_ms >= cfg.broker_session_timeout_ms
        {
            bail!("broker.heartbeat.interval.ms must be > 0 and below broker.session.timeout.ms");
        }
        if cfg.leader_imbalance_check_interval_seconds < 1 {
            bail!("leader.imbalance.check.interval.seconds must be >= 1");
        }
        if cfg.leader_imbalance_per_broker_percentage > 100 {
            bail!("leader.imbalance.per.broker.percentage must be between 0 and 100");
        }
        for tk in TOPIC_CONFIGS {
            let v = values
                .get(tk.broker_key)
                .map(String::as_str)
                .unwrap_or_default();
            (tk.check)(v).with_context(|| format!("invalid value for {}", tk.broker_key))?;
        }
        Ok(cfg)
    }

    /// The broker-level default for a topic config.
    pub fn topic_default(&self, topic_key: &TopicKey) -> &str {
        self.values
            .get(topic_key.broker_key)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The effective value of a topic config given the topic's overrides, and whether it
    /// came from the topic.
    pub fn topic_value<'a>(
        &'a self,
        overrides: &'a BTreeMap<String, String>,
        key: &TopicKey,
    ) -> (&'a str, bool) {
        match overrides.get(key.name) {
            Some(v) => (v.as_str(), true),
            None => (self.topic_default(key), false),
        }
    }

    /// The storage config of a topic with these overrides.
    pub fn log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let value = |name: &str| -> String {
            let key = topic_key(name).expect("known topic key");
            self.topic_value(overrides, key).0.trim().to_string()
        };
        let mut c = LogConfig::default();
        if let Ok(v) = value("segment.bytes").parse::<u64>() {
            c.segment_bytes = v;
        }
        if let Ok(v) = value("segment.ms").parse::<u64>() {
            c.segment_ms = v;
        }
        if let Ok(v) = value("max.message.bytes").parse::<u32>() {
            c.max_message_bytes = v;
        }
        if let Ok(v) = value("index.interval.bytes").parse::<u32>() {
            c.index_interval_bytes = v;
        }
        if let Ok(v) = FlushPolicy::from_str(&value("flush.policy")) {
            c.flush_policy = v;
        }
        if let Ok(v) = TimestampType::from_str(&value("message.timestamp.type")) {
            c.message_timestamp_type = v;
        }
        if let Ok(v) = value("compression.type").parse() {
            c.compression_type = v;
        }
        if let Ok(v) = value("compression.gzip.level").parse::<i32>() {
            c.compression_gzip_level = v;
        }
        if let Ok(v) = value("compression.lz4.level").parse::<i32>() {
            c.compression_lz4_level = v;
        }
        if let Ok(v) = value("compression.zstd.level").parse::<i32>() {
            c.compression_zstd_level = v;
        }
        if let Ok(v) = value("retention.ms").parse::<i64>() {
            c.retention_ms = v;
        }
        if let Ok(v) = value("retention.bytes").parse::<i64>() {
            c.retention_bytes = v;
        }
        let policy = value("cleanup.policy");
        c.cleanup_delete = policy.split(',').any(|p| p.trim() == "delete");
        c.cleanup_compact = policy.split(',').any(|p| p.trim() == "compact");
        if let Ok(v) = value("delete.retention.ms").parse::<i64>() {
            c.delete_retention_ms = v;
        }
        if let Ok(v) = value("min.cleanable.dirty.ratio").parse::<f64>() {
            c.min_cleanable_dirty_ratio = v;
        }
        if let Ok(v) = value("min.compaction.lag.ms").parse::<i64>() {
            c.min_compaction_lag_ms = v;
        }
        if let Ok(v) = value("max.compaction.lag.ms").parse::<i64>() {
            c.max_compaction_lag_ms = v;
        }
        // Broker settings only: the same for every topic.
        c.write_bytes_max = self.write_buffer_bytes;
        if let Some(Ok(v)) = self
            .values
            .get("producer.id.expiration.ms")
            .map(|v| v.trim().parse::<i64>())
        {
            c.producer_id_expiration_ms = v;
        }
        c
    }

    /// How often each shard looks for partitions to compact (`log.cleaner.backoff.ms`).
    pub fn cleaner_backoff_ms(&self) -> u64 {
        self.values
            .get("log.cleaner.backoff.ms")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(15_000)
            .max(1)
    }

    /// Key-map memory of one compaction pass (`log.cleaner.dedupe.buffer.size`).
    pub fn cleaner_map_bytes(&self) -> u64 {
        self.values
            .get("log.cleaner.dedupe.buffer.size")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(134_217_728)
            .max(1 << 20)
    }

    /// How often each shard runs retention (`log.retention.check.interval.ms`).
    pub fn retention_check_interval_ms(&self) -> u64 {
        self.values
            .get("log.retention.check.interval.ms")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(300_000)
            .max(1)
    }

    /// min.insync.replicas of a topic.
    pub fn min_insync_replicas(&self, overrides: &BTreeMap<String, String>) -> i32 {
        let key = topic_key("min.insync.replicas").expect("known topic key");
        self.topic_value(overrides, key)
            .0
            .trim()
            .parse()
            .unwrap_or(1)
    }

    /// flush.ms of a topic (interval policy sync period).
    pub fn flush_ms(&self, overrides: &BTreeMap<String, String>) -> u64 {
        let key = topic_key("flush.ms").expect("known topic key");
        self.topic_value(overrides, key)
            .0
            .trim()
            .parse()
            .unwrap_or(1000)
    }
}

/// Kafka's `replica.selector.class` (KIP-392), by the Kafka class names Keel implements: which
/// replica a leader tells a consumer to read from. Static, as in Kafka.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// Unset (Kafka's default): consumers read from the leader; no `preferred_read_replica`.
    #[default]
    Leader,
    /// `org.apache.kafka.common.replica.RackAwareReplicaSelector`: a replica in the client's
    /// rack, the leader if it is there.
    RackAware,
}

impl ReplicaSelector {
    pub const RACK_AWARE_CLASS: &'static str =
        "org.apache.kafka.common.replica.RackAwareReplicaSelector";
    /// The always-the-leader selector by the name KIP-392 gave it; Kafka ships no such class
    /// (its default is no selector), so this name is only an explicit spelling of the default.
    pub const LEADER_CLASS: &'static str = "org.apache.kafka.common.replica.LeaderSelector";

    /// The selector a `replica.selector.class` value names; an error for a class Keel does
    /// not have (Kafka's broker stops too when it cannot load the class).
    pub fn from_class(class: &str) -> Result<ReplicaSelector> {
        match class.trim() {
            "" | Self::LEADER_CLASS => Ok(ReplicaSelector::Leader),
            Self::RACK_AWARE_CLASS => Ok(ReplicaSelector::RackAware),
            other => bail!(
                "replica.selector.class: unknown class {other:?}; Keel has {} (and {}, the \
                 default: always the leader); custom selectors cannot be loaded",
                Self::RACK_AWARE_CLASS,
                Self::LEADER_CLASS
            ),
        }
    }
}

/// Where settings came from, merged by precedence: env < file < flags.
#[derive(Default)]
pub struct SettingsBuilder {
    map: BTreeMap<String, String>,
}

impl SettingsBuilder {
    /// `KEEL_DATA_DIR=x` sets `data.dir`: strip the prefix, lowercase, `_` becomes `.`.
    pub fn env(mut self, vars: impl Iterator<Item = (String, String)>) -> Self {
        for (k, v) in vars {
            if let Some(rest) = k.strip_prefix("KEEL_") {
                if rest == "CONFIG" {
                    continue;
                }
                self.map
                    .insert(rest.to_ascii_lowercase().replace('_', "."), v);
            }
        }
        self
    }

    /// A TOML file: `"num.partitions" = 3` and `num.partitions = 3` (a nested table) both
    /// set `num.partitions`.
    pub fn toml_text(mut self, text: &str) -> Result<Self> {
        let table: toml::Table = text.parse().context("config file is not valid TOML")?;
        fn flatten(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match v {
                    toml::Value::Table(inner) => flatten(&key, inner, out),
                    toml::Value::String(s) => {
                        out.insert(key, s.clone());
                    }
                    other => {
                        out.insert(key, other.to_string());
                    }
                }
            }
        }
        flatten("", &table, &mut self.map);
        Ok(self)
    }

    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.map.insert(key.to_string(), value.to_string());
        self
    }

    pub fn build(self) -> BTreeMap<String, String> {
        self.map
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
