//! Transactions against the real `keel` binary.
//!
//! With librdkafka (the `rdkafka` crate, `transactional.id`): committed and aborted
//! transactions interleaved with a plain producer, read back exactly by `read_committed` and
//! `read_uncommitted` consumers, with the offsets the markers take; a zombie producer fenced by
//! a newer one with the same transactional id; a consume-transform-produce pipeline
//! (`send_offsets_to_transaction`) SIGKILLed mid-run and restarted, whose output holds every
//! input exactly once; a transaction left open past its timeout, aborted by the coordinator; a
//! broker killed (-9) with a transaction open, and right after a commit was answered.
//!
//! With the raw client: the coordinator's answers to bad input (unknown partitions, no
//! transaction, wrong producer id, old epoch at each version, too long a timeout), a whole
//! transaction down to its marker's bytes, and the idempotent produce rules (sequence gap, old
//! epoch, sequence wrap, a retried batch answered with its original offset).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const READ_COMMITTED: &str = "read_committed";
const READ_UNCOMMITTED: &str = "read_uncommitted";
/// Isolation levels on the wire (ListOffsets, Fetch).
const WIRE_READ_UNCOMMITTED: i8 = 0;
const WIRE_READ_COMMITTED: i8 = 1;

// Kafka error codes.
const NONE: i16 = keel_vocab::ErrorCode::NONE.code();
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;

/// One record as a consumer sees it: offset, key, value.
type Rec = (i64, String, String);

fn rec(offset: i64, key: &str) -> Rec {
    (offset, key.to_string(), value_of(key))
}

/// The value every test record carries for its key.
fn value_of(key: &str) -> String {
    format!("value-{key}")
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let r = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

/// Polls `done` until it holds; panics naming `what` after `timeout`. The time it took.
fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
    started.elapsed()
}

/// A transactional producer, its `init_transactions` done.
fn txn_producer(bootstrap: &str, transactional_id: &str, extra: &[(&str, &str)]) -> BaseProducer {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("transactional.id", transactional_id)
        .set("linger.ms", "5")
        .set("retry.backoff.ms", "20")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let p: BaseProducer = cfg.create().unwrap();
    p.init_transactions(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("init_transactions of {transactional_id}: {e}"));
    p
}

/// A producer without a producer id (not idempotent, not transactional).
fn plain_producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "false")
        .set("linger.ms", "0")
        .create()
        .unwrap()
}

/// Enqueues one record (key `key`, value [`value_of`]).
fn send(p: &BaseProducer, topic: &str, partition: i32, key: &str) {
    send_value(p, topic, partition, key, &value_of(key));
}

fn send_value(p: &BaseProducer, topic: &str, partition: i32, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = BaseRecord::<str, str>::to(topic)
            .partition(partition)
            .key(key)
            .payload(value);
        match p.send(r) {
            Ok(()) => return,
            Err((e, _)) => {
                assert!(Instant::now() < deadline, "cannot enqueue {key}: {e}");
                p.poll(Duration::from_millis(10));
            }
        }
    }
}

/// Enqueues one record and waits until it is in the log.
fn put(p: &BaseProducer, topic: &str, partition: i32, key: &str) {
    send(p, topic, partition, key);
    p.flush(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{key} not delivered: {e}"));
}

/// Every record of `topic` a consumer at `isolation` reads from the start up to the end it is
/// told of (partition EOF: the high watermark, or the last stable offset for read_committed),
/// per partition.
fn read_to_eof(bootstrap: &str, topic: &str, partitions: i32, isolation: &str) -> Vec<Vec<Rec>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{topic}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = vec![Vec::new(); partitions as usize];
    let mut at_end = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while at_end.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "{topic} ({isolation}): no end reached on {:?}; read so far {out:?}",
            (0..partitions)
                .filter(|p| !at_end.contains(p))
                .collect::<Vec<_>>()
        );
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap_or_default().to_vec());
                out[m.partition() as usize].push((
                    m.offset(),
                    text(m.key()).unwrap(),
                    text(m.payload()).unwrap(),
                ));
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("{topic} ({isolation}): {e}"),
        }
    }
    out
}

// ---- raw requests ------------------------------------------------------------------------------

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

/// ListOffsets (v7) latest of one partition at an isolation level: the high watermark, or the
/// last stable offset.
fn list_latest(c: &mut Client, name: &str, partition: i32, isolation_level: i8) -> i64 {
    let req = list_offsets_request(name, partition, -1).with_isolation_level(isolation_level);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, NONE, "ListOffsets {name}-{partition}: {p:?}");
    p.offset
}

/// (high watermark, last stable offset) of every partition.
fn ends(c: &mut Client, name: &str, partitions: i32) -> Vec<(i64, i64)> {
    (0..partitions)
        .map(|p| {
            (
                list_latest(c, name, p, WIRE_READ_UNCOMMITTED),
                list_latest(c, name, p, WIRE_READ_COMMITTED),
            )
        })
        .collect()
}

/// Waits until every partition's high watermark is `want` and its last stable offset too (no
/// transaction open there, every marker written).
fn wait_ends(c: &mut Client, name: &str, want: &[i64]) {
    let want_ends: Vec<(i64, i64)> = want.iter().map(|&o| (o, o)).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = ends(c, name, want.len() as i32);
        if got == want_ends {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: (high watermark, last stable offset) per partition {got:?}, want {want_ends:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Fetch (v11) of one partition from offset 0 at an isolation level.
fn fetch_all(
    c: &mut Client,
    name: &str,
    partition: i32,
    isolation_level: i8,
) -> fetch_response::PartitionData {
    let req = fetch_request(name, &[(partition, 0, 1 << 20)], 0, 0, 1 << 20)
        .with_isolation_level(isolation_level);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 11, &req);
    let p = resp.responses[0].partitions[0].clone();
    assert_eq!(p.error_code, NONE, "Fetch {name}-{partition}: {p:?}");
    p
}

/// Every record (data and control) in fetched bytes.
fn records_of(records: &Option<Bytes>) -> Vec<Record> {
    let mut out = Vec::new();
    let Some(b) = records else { return out };
    let mut b = b.clone();
    while !b.is_empty() {
        out.extend(RecordBatchDecoder::decode(&mut b).unwrap().records);
    }
    out
}

/// The control records among `records`: (offset, producer epoch, commit?), checking each is
/// Kafka's EndTxnMarker (key: version 0, type 0 abort / 1 commit; value: version 0 and a
/// coordinator epoch).
fn markers(records: &[Record]) -> Vec<(i64, i16, bool)> {
    records
        .iter()
        .filter(|r| r.control)
        .map(|r| {
            assert!(r.transactional, "a marker outside a transaction: {r:?}");
            let key = r.key.as_deref().unwrap_or_default();
            assert!(
                key == [0, 0, 0, 0] || key == [0, 0, 0, 1],
                "marker key {key:?}"
            );
            let value = r.value.as_deref().unwrap_or_default();
            assert_eq!(value.len(), 6, "marker value {value:?}");
            assert_eq!(&value[..2], &[0, 0], "marker value version");
            (r.offset, r.producer_epoch, key[3] == 1)
        })
        .collect()
}

/// The record with this key among `records`.
fn by_key<'a>(records: &'a [Record], key: &str) -> &'a Record {
    records
        .iter()
        .find(|r| !r.control && r.key.as_deref() == Some(key.as_bytes()))
        .unwrap_or_else(|| panic!("no record {key}"))
}

/// Asserts `result` is librdkafka's fatal fencing error (it reports INVALID_PRODUCER_EPOCH and
/// PRODUCER_FENCED as `_FENCED`) and the producer says it is fatally fenced.
fn assert_fenced(p: &BaseProducer, result: KafkaResult<()>, what: &str) {
    let fenced = |code: RDKafkaErrorCode| {
        matches!(
            code,
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    };
    let e = result.expect_err(what);
    if let KafkaError::Transaction(te) = &e {
        assert!(te.is_fatal(), "{what}: not fatal: {te}");
        assert!(fenced(te.code()), "{what}: {te} ({:?})", te.code());
    }
    let (code, message) = p
        .client()
        .fatal_error()
        .unwrap_or_else(|| panic!("{what}: {e}, yet no fatal error"));
    assert!(fenced(code), "{what}: fatal {code:?}: {message}");
}

// ---- 1. visibility ----------------------------------------------------------------------------

#[test]
fn commit_and_abort_visibility() {
    let b = Broker::start(&[]);
    let bs = b.bootstrap();
    let t = "visibility";
    create_topic(&bs, t, 2);
    let mut c = Client::connect(&bs);
    let plain = plain_producer(&bs);
    let txn = txn_producer(&bs, "visibility-txn", &[]);

    put(&plain, t, 0, "n0");
    put(&plain, t, 1, "n1");

    // T1, committed, with a plain record between its records on partition 0.
    txn.begin_transaction().unwrap();
    put(&txn, t, 0, "t1a");
    put(&plain, t, 0, "n2");
    // The open transaction holds partition 0's last stable offset at its first record;
    // partition 1 is not in it yet.
    assert_eq!(ends(&mut c, t, 2), [(3, 1), (1, 1)]);
    assert_eq!(
        read_to_eof(&bs, t, 2, READ_COMMITTED),
        [vec![rec(0, "n0")], vec![rec(0, "n1")]],
        "read_committed reads up to the last stable offset only"
    );
    assert_eq!(
        read_to_eof(&bs, t, 2, READ_UNCOMMITTED),
        [
            vec![rec(0, "n0"), rec(1, "t1a"), rec(2, "n2")],
            vec![rec(0, "n1")]
        ]
    );
    send(&txn, t, 0, "t1b");
    send(&txn, t, 1, "t1c");
    txn.commit_transaction(Duration::from_secs(30)).unwrap();
    // Markers at 4 and 2. (EndTxn answers once the decision is written; the markers follow.)
    wait_ends(&mut c, t, &[5, 3]);

    // T2, aborted after its records reached the log.
    txn.begin_transaction().unwrap();
    send(&txn, t, 0, "t2a");
    send(&txn, t, 0, "t2b");
    send(&txn, t, 1, "t2c");
    txn.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(ends(&mut c, t, 2), [(7, 5), (4, 3)]);
    txn.abort_transaction(Duration::from_secs(30)).unwrap();
    wait_ends(&mut c, t, &[8, 5]);

    put(&plain, t, 0, "n3");
    put(&plain, t, 1, "n4");
    wait_ends(&mut c, t, &[9, 6]);

    // T3 on partition 1 only, committed.
    txn.begin_transaction().unwrap();
    send(&txn, t, 1, "t3a");
    send(&txn, t, 1, "t3b");
    txn.commit_transaction(Duration::from_secs(30)).unwrap();
    wait_ends(&mut c, t, &[9, 9]);

    // T4 on partition 0 only, aborted.
    txn.begin_transaction().unwrap();
    put(&txn, t, 0, "t4a");
    txn.abort_transaction(Duration::from_secs(30)).unwrap();
    wait_ends(&mut c, t, &[11, 9]);

    // T5 on both, committed.
    txn.begin_transaction().unwrap();
    send(&txn, t, 0, "t5a");
    send(&txn, t, 1, "t5b");
    txn.commit_transaction(Duration::from_secs(30)).unwrap();
    wait_ends(&mut c, t, &[13, 11]);

    // Committed and plain records, in order, at offsets with gaps where the markers and the
    // aborted records are.
    let committed = read_to_eof(&bs, t, 2, READ_COMMITTED);
    assert_eq!(
        committed[0],
        [
            rec(0, "n0"),
            rec(1, "t1a"),
            rec(2, "n2"),
            rec(3, "t1b"),
            rec(8, "n3"),
            rec(11, "t5a")
        ],
        "partition 0, read_committed"
    );
    assert_eq!(
        committed[1],
        [
            rec(0, "n1"),
            rec(1, "t1c"),
            rec(5, "n4"),
            rec(6, "t3a"),
            rec(7, "t3b"),
            rec(9, "t5b")
        ],
        "partition 1, read_committed"
    );
    // Every data record, the aborted ones included; never a marker.
    let all = read_to_eof(&bs, t, 2, READ_UNCOMMITTED);
    assert_eq!(
        all[0],
        [
            rec(0, "n0"),
            rec(1, "t1a"),
            rec(2, "n2"),
            rec(3, "t1b"),
            rec(5, "t2a"),
            rec(6, "t2b"),
            rec(8, "n3"),
            rec(9, "t4a"),
            rec(11, "t5a")
        ],
        "partition 0, read_uncommitted"
    );
    assert_eq!(
        all[1],
        [
            rec(0, "n1"),
            rec(1, "t1c"),
            rec(3, "t2c"),
            rec(5, "n4"),
            rec(6, "t3a"),
            rec(7, "t3b"),
            rec(9, "t5b")
        ],
        "partition 1, read_uncommitted"
    );

    // librdkafka's watermarks agree.
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bs)
        .set("group.id", "watermarks")
        .create()
        .unwrap();
    for (p, hw) in [(0, 13), (1, 11)] {
        assert_eq!(
            reader
                .fetch_watermarks(t, p, Duration::from_secs(10))
                .unwrap(),
            (0, hw)
        );
    }

    // On the wire: the markers (type, offset, epoch) and a read_committed Fetch's last stable
    // offset and aborted transactions.
    let want_markers: [&[(i64, bool)]; 2] = [
        &[(4, true), (7, false), (10, false), (12, true)],
        &[(2, true), (4, false), (8, true), (10, true)],
    ];
    let mut txn_producer_id = None;
    for p in 0..2 {
        let data = fetch_all(&mut c, t, p, WIRE_READ_COMMITTED);
        assert_eq!(
            (data.high_watermark, data.last_stable_offset),
            (13 - 2 * i64::from(p), 13 - 2 * i64::from(p))
        );
        let records = records_of(&data.records);
        let first_txn = by_key(&records, if p == 0 { "t1a" } else { "t1c" });
        assert!(first_txn.transactional);
        let (pid, epoch) = (first_txn.producer_id, first_txn.producer_epoch);
        assert!(pid >= 0 && epoch >= 0);
        txn_producer_id.get_or_insert(pid);
        assert_eq!(txn_producer_id, Some(pid));
        for r in records.iter().filter(|r| r.transactional) {
            assert_eq!((r.producer_id, r.producer_epoch), (pid, epoch), "{r:?}");
        }
        let found: Vec<(i64, bool)> = markers(&records)
            .into_iter()
            .map(|(o, e, commit)| {
                assert_eq!(e, epoch);
                (o, commit)
            })
            .collect();
        assert_eq!(found, want_markers[p as usize], "partition {p} markers");
        let mut aborted: Vec<(i64, i64)> = data
            .aborted_transactions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        aborted.sort();
        let want: Vec<(i64, i64)> = if p == 0 {
            vec![(pid, 5), (pid, 9)]
        } else {
            vec![(pid, 3)]
        };
        assert_eq!(aborted, want, "partition {p}: aborted transactions");
        // read_uncommitted gets none.
        let data = fetch_all(&mut c, t, p, WIRE_READ_UNCOMMITTED);
        assert!(
            data.aborted_transactions
                .as_ref()
                .is_none_or(|a| a.is_empty()),
            "{data:?}"
        );
    }
}

// ---- 2. zombie fencing ------------------------------------------------------------------------

#[test]
fn zombie_fencing() {
    let b = Broker::start(&[]);
    let bs = b.bootstrap();
    let t = "zombie";
    create_topic(&bs, t, 1);
    let mut c = Client::connect(&bs);

    let a = txn_producer(&bs, "zombie-txn", &[]);
    a.begin_transaction().unwrap();
    send(&a, t, 0, "a0");
    send(&a, t, 0, "a1");
    a.flush(Duration::from_secs(10)).unwrap();

    // B takes over the transactional id: A's open transaction is aborted first.
    let started = Instant::now();
    let b_producer = txn_producer(&bs, "zombie-txn", &[]);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "init_transactions took {took:?}"
    );
    wait_ends(&mut c, t, &[3]);

    // A's next produce and its commit fail: fatally fenced. Its record never reaches the log.
    send(&a, t, 0, "a2");
    let r = a.commit_transaction(Duration::from_secs(10));
    assert_fenced(&a, r, "the zombie's commit");
    assert!(a.abort_transaction(Duration::from_secs(5)).is_err());

    b_producer.begin_transaction().unwrap();
    send(&b_producer, t, 0, "b0");
    send(&b_producer, t, 0, "b1");
    b_producer
        .commit_transaction(Duration::from_secs(30))
        .unwrap();
    wait_ends(&mut c, t, &[6]);

    assert_eq!(
        read_to_eof(&bs, t, 1, READ_COMMITTED),
        [vec![rec(3, "b0"), rec(4, "b1")]]
    );
    assert_eq!(
        read_to_eof(&bs, t, 1, READ_UNCOMMITTED),
        [vec![rec(0, "a0"), rec(1, "a1"), rec(3, "b0"), rec(4, "b1")]]
    );
    // Kafka's epochs (transactions V1): A at e, its fencing abort at e + 1, B at e + 2.
    let records = records_of(&fetch_all(&mut c, t, 0, WIRE_READ_UNCOMMITTED).records);
    let (a0, b0) = (by_key(&records, "a0"), by_key(&records, "b0"));
    assert_eq!(a0.producer_id, b0.producer_id);
    let e = a0.producer_epoch;
    assert_eq!(b0.producer_epoch, e + 2);
    assert_eq!(markers(&records), [(2, e + 1, false), (5, e + 2, true)]);

    // C takes over from B between transactions (nothing to abort): B's next transaction is
    // refused by the coordinator (AddPartitionsToTxn at an old epoch), before any record.
    let c_producer = txn_producer(&bs, "zombie-txn", &[]);
    b_producer.begin_transaction().unwrap();
    send(&b_producer, t, 0, "b2");
    let r = b_producer.commit_transaction(Duration::from_secs(10));
    assert_fenced(&b_producer, r, "the second zombie's commit");
    c_producer.begin_transaction().unwrap();
    send(&c_producer, t, 0, "c0");
    c_producer
        .commit_transaction(Duration::from_secs(30))
        .unwrap();
    wait_ends(&mut c, t, &[8]);
    assert_eq!(
        read_to_eof(&bs, t, 1, READ_COMMITTED),
        [vec![rec(3, "b0"), rec(4, "b1"), rec(6, "c0")]]
    );
    let records = records_of(&fetch_all(&mut c, t, 0, WIRE_READ_UNCOMMITTED).records);
    assert_eq!(by_key(&records, "c0").producer_epoch, e + 3);
    assert_eq!(
        markers(&records),
        [(2, e + 1, false), (5, e + 2, true), (7, e + 3, true)]
    );
}

// ---- 3. exactly once ----------------------------------------------------------------------

/// Set (to "1") in the helper process that runs the consume-transform-produce loop.
const WORKER_ROLE_ENV: &str = "TEST_TXN_ROLE";
const EOS_IN: &str = "eos-in";
const EOS_OUT: &str = "eos-out";
const EOS_GROUP: &str = "eos-group";
const EOS_TXN_ID: &str = "eos-worker";
const EOS_PARTITIONS: i32 = 2;
const EOS_RECORDS: i64 = 2_000;
/// Input records per transaction, at most.
const EOS_BATCH: usize = 50;

/// The consume-transform-produce loop, run in a helper process (see [`Worker`]): reads
/// `eos-in` read_committed in group `eos-group`, and per batch writes each record to the same
/// partition of `eos-out` (key kept, value `partition:offset:value`) and the consumer's
/// positions in one transaction. Exits once its positions sum to [`EOS_RECORDS`]. In a normal
/// test run (no `TEST_TXN_ROLE`) it does nothing.
#[test]
fn exactly_once_pipeline_worker() {
    if std::env::var(WORKER_ROLE_ENV).as_deref() != Ok("1") {
        return;
    }
    let bootstrap = std::env::var("TEST_TXN_BOOTSTRAP").unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", EOS_GROUP)
        .set("group.protocol", "classic")
        .set("session.timeout.ms", "2000")
        .set("heartbeat.interval.ms", "300")
        .set("max.poll.interval.ms", "20000")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", READ_COMMITTED)
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    consumer.subscribe(&[EOS_IN]).unwrap();
    let producer = txn_producer(&bootstrap, EOS_TXN_ID, &[]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let timeout = Duration::from_secs(20);
    let mut transactions = 0;
    // Aborts in a row: a transaction that can never commit ends the worker.
    let mut aborts = 0;
    loop {
        assert!(Instant::now() < deadline, "worker: out of time");
        // A batch: (partition, offset, key, value).
        let mut batch: Vec<(i32, i64, String, String)> = Vec::new();
        let batch_end = Instant::now() + Duration::from_millis(100);
        while batch.len() < EOS_BATCH && Instant::now() < batch_end {
            match consumer.poll(Duration::from_millis(20)) {
                None => {}
                Some(Ok(m)) => batch.push((
                    m.partition(),
                    m.offset(),
                    String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap(),
                    String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap(),
                )),
                Some(Err(e)) => eprintln!("worker: consume: {e}"),
            }
        }
        if batch.is_empty() {
            let mut consumed = 0;
            for p in 0..EOS_PARTITIONS {
                if let Some(Offset::Offset(o)) = consumer
                    .position()
                    .ok()
                    .and_then(|l| l.find_partition(EOS_IN, p).map(|e| e.offset()))
                {
                    consumed += o;
                }
            }
            if consumed == EOS_RECORDS {
                eprintln!("worker: done after {transactions} transactions");
                return;
            }
            continue;
        }
        // Where each partition of the batch starts (to rewind to on abort) and ends.
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for (p, o, _, _) in &batch {
            first.entry(*p).or_insert(*o);
            next.insert(*p, o + 1);
        }
        producer.begin_transaction().unwrap();
        for (p, o, key, value) in &batch {
            send_value(&producer, EOS_OUT, *p, key, &format!("{p}:{o}:{value}"));
        }
        // The records reach the log, then the offsets go (TxnOffsetCommit), then a pause: a
        // kill in it leaves an open transaction with records and offsets pending behind.
        producer.flush(timeout).unwrap();
        let mut offsets = TopicPartitionList::new();
        for (p, o) in &next {
            offsets
                .add_partition_offset(EOS_IN, *p, Offset::Offset(*o))
                .unwrap();
        }
        let group = consumer.group_metadata().expect("group metadata");
        let done = producer
            .send_offsets_to_transaction(&offsets, &group, timeout)
            .and_then(|()| {
                std::thread::sleep(Duration::from_millis(30));
                producer.commit_transaction(timeout)
            });
        match done {
            Ok(()) => {
                transactions += 1;
                aborts = 0;
            }
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                eprintln!("worker: aborting: {e}");
                aborts += 1;
                assert!(
                    aborts < 5,
                    "worker: {aborts} aborts in a row, the last: {e}"
                );
                producer.abort_transaction(timeout).unwrap();
                for (p, o) in first {
                    consumer
                        .seek(EOS_IN, p, Offset::Offset(o), timeout)
                        .unwrap();
                }
            }
            Err(e) => panic!("worker: transaction failed: {e}"),
        }
    }
}

/// The worker in a child process; SIGKILLed when dropped, if still running.
struct Worker(Child);

impl Worker {
    fn spawn(bootstrap: &str, log: &std::path::Path) -> Worker {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "exactly_once_pipeline_worker", "--nocapture"])
            .env(WORKER_ROLE_ENV, "1")
            .env("TEST_TXN_BOOTSTRAP", bootstrap)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        Worker(child)
    }

    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[test]
fn exactly_once_pipeline() {
    // Short sessions, so the killed worker's member leaves the group quickly; one offsets
    // partition, so the group's pending transactional offsets are seen on partition 0.
    let b = Broker::start(&[
        "--set",
        "group.min.session.timeout.ms=1000",
        "--set",
        "offsets.topic.num.partitions=1",
    ]);
    let bs = b.bootstrap();
    create_topic(&bs, EOS_IN, EOS_PARTITIONS);
    create_topic(&bs, EOS_OUT, EOS_PARTITIONS);
    let mut c = Client::connect(&bs);
    let input = plain_producer(&bs);
    for i in 0..EOS_RECORDS {
        send(&input, EOS_IN, (i % 2) as i32, &format!("key-{i:04}"));
    }
    input.flush(Duration::from_secs(30)).unwrap();
    let input_records = read_to_eof(&bs, EOS_IN, EOS_PARTITIONS, READ_UNCOMMITTED);
    assert_eq!(
        input_records.iter().map(Vec::len).sum::<usize>(),
        EOS_RECORDS as usize
    );
    let worker_log = |n: usize| b.dir.path().join(format!("worker-{n}.log"));
    let show = |n: usize| std::fs::read_to_string(worker_log(n)).unwrap_or_default();

    // First run: SIGKILLed a third of the way, inside a transaction whose records are in the
    // log if it can be caught there.
    let mut first = Worker::spawn(&bs, &worker_log(1));
    wait_until("a third of the output", Duration::from_secs(40), || {
        let written: i64 = ends(&mut c, EOS_OUT, EOS_PARTITIONS)
            .iter()
            .map(|e| e.0)
            .sum();
        written >= EOS_RECORDS / 3
    });
    // Best at the worker's pause: its records and its offsets pending (the offsets are a
    // transactional batch in __consumer_offsets, holding that partition's last stable offset).
    let offsets_pending = |c: &mut Client| {
        let (hw, lso) = ends(c, "__consumer_offsets", 1)[0];
        lso < hw
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && (ends(&mut c, EOS_OUT, EOS_PARTITIONS)
            .iter()
            .all(|(hw, lso)| lso == hw)
            || !offsets_pending(&mut c))
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        first.0.try_wait().unwrap().is_none(),
        "the worker finished before it was killed: the test did not test; its log:\n{}",
        show(1)
    );
    first.kill9();
    // A commit already sent still completes; an open transaction stays open, its records in
    // the log, until the next worker's init_transactions aborts it.
    std::thread::sleep(Duration::from_millis(500));
    let killed_at = ends(&mut c, EOS_OUT, EOS_PARTITIONS);
    let pending = offsets_pending(&mut c);
    eprintln!(
        "worker killed; output (high watermark, last stable offset) {killed_at:?}; \
         offsets pending: {pending}"
    );
    assert!(
        killed_at.iter().any(|(hw, lso)| lso < hw),
        "the worker was not killed inside a transaction: the test did not test"
    );

    // Second run, same transactional id and group: finishes the input.
    let mut second = Worker::spawn(&bs, &worker_log(2));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = second.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted worker did not finish; its log:\n{}\nthe first's:\n{}",
            show(2),
            show(1)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "the restarted worker failed ({status}); its log:\n{}\nthe first's:\n{}",
        show(2),
        show(1)
    );
    wait_until(
        "no open transaction on the output",
        Duration::from_secs(15),
        || {
            ends(&mut c, EOS_OUT, EOS_PARTITIONS)
                .iter()
                .all(|(hw, lso)| hw == lso)
        },
    );

    // Each input record exactly once, in input order per partition.
    let output = read_to_eof(&bs, EOS_OUT, EOS_PARTITIONS, READ_COMMITTED);
    for p in 0..EOS_PARTITIONS as usize {
        let mut offsets = Vec::new();
        for (_, key, value) in &output[p] {
            let mut parts = value.splitn(3, ':');
            let (in_p, in_o, in_value) = (
                parts.next().unwrap().parse::<usize>().unwrap(),
                parts.next().unwrap().parse::<i64>().unwrap(),
                parts.next().unwrap(),
            );
            assert_eq!(in_p, p, "{key}: {value}");
            let (o, in_key, v) = &input_records[p][in_o as usize];
            assert_eq!((*o, in_key, v.as_str()), (in_o, key, in_value));
            offsets.push(in_o);
        }
        let want: Vec<i64> = (0..input_records[p].len() as i64).collect();
        if offsets != want {
            let seen: BTreeSet<i64> = offsets.iter().copied().collect();
            let missing: Vec<i64> = want.iter().filter(|o| !seen.contains(o)).copied().collect();
            panic!(
                "partition {p}: {} output records for {} inputs; missing {missing:?}; \
                 as read: {offsets:?}",
                offsets.len(),
                want.len()
            );
        }
    }
    let uncommitted: usize = read_to_eof(&bs, EOS_OUT, EOS_PARTITIONS, READ_UNCOMMITTED)
        .iter()
        .map(Vec::len)
        .sum();
    eprintln!(
        "{EOS_RECORDS} inputs, {uncommitted} output records in the log (aborted ones included)"
    );
    assert!(
        uncommitted > EOS_RECORDS as usize,
        "killed inside a transaction, yet no aborted record in the log"
    );
    // The group's offsets are the input's ends.
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bs)
        .set("group.id", EOS_GROUP)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..EOS_PARTITIONS {
        tpl.add_partition(EOS_IN, p);
    }
    let committed = reader
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    for p in 0..EOS_PARTITIONS {
        assert_eq!(
            committed.find_partition(EOS_IN, p).unwrap().offset(),
            Offset::Offset(input_records[p as usize].len() as i64),
            "group offset of partition {p}"
        );
    }
}

// ---- 4. timeout ---------------------------------------------------------------------------

#[test]
fn timeout_aborts() {
    let b = Broker::start(&[]);
    let bs = b.bootstrap();
    let t = "timeout";
    create_topic(&bs, t, 1);
    let mut c = Client::connect(&bs);
    let p = txn_producer(&bs, "timeout-txn", &[("transaction.timeout.ms", "2000")]);
    p.begin_transaction().unwrap();
    let began = Instant::now();
    send(&p, t, 0, "to0");
    send(&p, t, 0, "to1");
    p.flush(Duration::from_secs(10)).unwrap();
    // Open, not aborted before its timeout (checked only while surely before it).
    std::thread::sleep(Duration::from_millis(500));
    let early = ends(&mut c, t, 1);
    if began.elapsed() < Duration::from_millis(1_500) {
        assert_eq!(early, [(2, 0)], "aborted before its timeout");
    }
    // The coordinator aborts it: the marker takes offset 2.
    wait_until("the timeout abort", Duration::from_secs(15), || {
        list_latest(&mut c, t, 0, WIRE_READ_UNCOMMITTED) == 3
    });
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(1_900),
        "aborted after {took:?}"
    );
    wait_ends(&mut c, t, &[3]);
    assert_eq!(read_to_eof(&bs, t, 1, READ_COMMITTED), [vec![]]);
    assert_eq!(
        read_to_eof(&bs, t, 1, READ_UNCOMMITTED),
        [vec![rec(0, "to0"), rec(1, "to1")]]
    );
    let records = records_of(&fetch_all(&mut c, t, 0, WIRE_READ_UNCOMMITTED).records);
    let e = by_key(&records, "to0").producer_epoch;
    assert_eq!(
        markers(&records),
        [(2, e + 1, false)],
        "an abort at a bumped epoch"
    );

    // The producer's next operation is fenced.
    send(&p, t, 0, "to2");
    let r = p.commit_transaction(Duration::from_secs(10));
    assert_fenced(&p, r, "the commit after the timeout");
    assert_eq!(
        ends(&mut c, t, 1),
        [(3, 3)],
        "nothing written after the abort"
    );
}

// ---- 5. coordinator restart ---------------------------------------------------------------

#[test]
fn coordinator_restart_mid_transaction() {
    let mut b = Broker::start(&[]);
    let bs = b.bootstrap();
    let (open_topic, done_topic) = ("restart-open", "restart-committed");
    // Many partitions, so the markers of the committed transaction take a while: the kill
    // likely lands before all are written.
    const DONE_PARTITIONS: i32 = 8;
    create_topic(&bs, open_topic, 1);
    create_topic(&bs, done_topic, DONE_PARTITIONS);
    let mut c = Client::connect(&bs);

    // (1) Killed with a transaction open: its records reached the log, no decision yet.
    let p = txn_producer(&bs, "restart-open-txn", &[]);
    p.begin_transaction().unwrap();
    send(&p, open_topic, 0, "r0");
    send(&p, open_topic, 0, "r1");
    p.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(
        ends(&mut c, open_topic, 1),
        [(2, 0)],
        "the transaction is open"
    );
    drop(p);
    // (2) Killed right after a commit was answered.
    let q = txn_producer(&bs, "restart-done-txn", &[]);
    q.begin_transaction().unwrap();
    for part in 0..DONE_PARTITIONS {
        send(&q, done_topic, part, &format!("c{part}"));
    }
    q.commit_transaction(Duration::from_secs(30)).unwrap();
    b.kill9_and_restart();
    drop(q);
    c = Client::connect(&bs);

    // (1): still open after the restart (the partition's producer state is rebuilt), until
    // the new producer's init_transactions aborts it, in bounded time.
    assert_eq!(
        ends(&mut c, open_topic, 1),
        [(2, 0)],
        "the open transaction holds the last stable offset after the restart"
    );
    let started = Instant::now();
    let p = txn_producer(&bs, "restart-open-txn", &[]);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "init_transactions took {took:?}"
    );
    wait_ends(&mut c, open_topic, &[3]);
    assert_eq!(read_to_eof(&bs, open_topic, 1, READ_COMMITTED), [vec![]]);
    p.begin_transaction().unwrap();
    send(&p, open_topic, 0, "r2");
    p.commit_transaction(Duration::from_secs(30)).unwrap();
    wait_ends(&mut c, open_topic, &[5]);
    assert_eq!(
        read_to_eof(&bs, open_topic, 1, READ_COMMITTED),
        [vec![rec(3, "r2")]]
    );
    let records = records_of(&fetch_all(&mut c, open_topic, 0, WIRE_READ_UNCOMMITTED).records);
    let e = by_key(&records, "r0").producer_epoch;
    assert_eq!(markers(&records), [(2, e + 1, false), (4, e + 2, true)]);

    // (2): the decision survived; every partition gets its commit marker (re-sent on load
    // where it was not written yet).
    wait_until(
        "the committed transaction's markers",
        Duration::from_secs(15),
        || {
            ends(&mut c, done_topic, DONE_PARTITIONS)
                .iter()
                .all(|&(hw, lso)| hw >= 2 && lso == hw)
        },
    );
    let seen = read_to_eof(&bs, done_topic, DONE_PARTITIONS, READ_COMMITTED);
    for part in 0..DONE_PARTITIONS {
        assert_eq!(
            seen[part as usize],
            [rec(0, &format!("c{part}"))],
            "partition {part}"
        );
        let records =
            records_of(&fetch_all(&mut c, done_topic, part, WIRE_READ_UNCOMMITTED).records);
        let found = markers(&records);
        assert!(
            !found.is_empty() && found.iter().all(|&(o, _, commit)| commit && o >= 1),
            "partition {part}: markers {found:?}"
        );
    }
    let hws: Vec<i64> = ends(&mut c, done_topic, DONE_PARTITIONS)
        .iter()
        .map(|e| e.0)
        .collect();
    eprintln!("committed transaction's partitions after the restart, high watermarks {hws:?}");

    // Another kill: what was aborted stays aborted (the aborted transaction index survives),
    // what was committed stays visible.
    b.kill9_and_restart();
    c = Client::connect(&bs);
    assert_eq!(ends(&mut c, open_topic, 1), [(5, 5)]);
    assert_eq!(
        read_to_eof(&bs, open_topic, 1, READ_COMMITTED),
        [vec![rec(3, "r2")]]
    );
    let data = fetch_all(&mut c, open_topic, 0, WIRE_READ_COMMITTED);
    let aborted: Vec<(i64, i64)> = data
        .aborted_transactions
        .unwrap_or_default()
        .iter()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let r0 = by_key(&records, "r0");
    assert_eq!(aborted, [(r0.producer_id, 0)]);
    let seen = read_to_eof(&bs, done_topic, DONE_PARTITIONS, READ_COMMITTED);
    for part in 0..DONE_PARTITIONS {
        assert_eq!(seen[part as usize], [rec(0, &format!("c{part}"))]);
    }
}

// ---- 6. bad input ------------------------------------------------------------------------

/// InitProducerId (v4), retried while the coordinator is not ready: (error, id, epoch).
fn init_producer_id(
    c: &mut Client,
    transactional_id: Option<&str>,
    timeout_ms: i32,
) -> (i16, i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(txn_id))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r: InitProducerIdResponse = c.send(ApiKey::InitProducerId, 4, &req);
        let retry = [
            COORDINATOR_LOAD_IN_PROGRESS,
            COORDINATOR_NOT_AVAILABLE,
            NOT_COORDINATOR,
            CONCURRENT_TRANSACTIONS,
        ];
        if !retry.contains(&r.error_code) || Instant::now() > deadline {
            return (r.error_code, r.producer_id.0, r.producer_epoch);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// AddPartitionsToTxn: the error per (topic, partition).
fn add_partitions(
    c: &mut Client,
    version: i16,
    id: &str,
    producer: (i64, i16),
    partitions: &[(&str, &[i32])],
) -> BTreeMap<(String, i32), i16> {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(ProducerId(producer.0))
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(
            partitions
                .iter()
                .map(|(t, ps)| {
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(topic(t))
                        .with_partitions(ps.to_vec())
                })
                .collect(),
        );
    let r: AddPartitionsToTxnResponse = c.send(ApiKey::AddPartitionsToTxn, version, &req);
    let mut out = BTreeMap::new();
    for t in &r.results_by_topic_v3_and_below {
        for p in &t.results_by_partition {
            out.insert(
                (t.name.0.to_string(), p.partition_index),
                p.partition_error_code,
            );
        }
    }
    out
}

fn add_partition_error(c: &mut Client, version: i16, id: &str, producer: (i64, i16)) -> i16 {
    add_partitions(c, version, id, producer, &[("raw", &[0])])[&("raw".to_string(), 0)]
}

fn end_txn(c: &mut Client, version: i16, id: &str, producer: (i64, i16), commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit);
    let r: EndTxnResponse = c.send(ApiKey::EndTxn, version, &req);
    r.error_code
}

/// Produce (v9) of one batch: (error, base offset).
fn produce_raw(
    c: &mut Client,
    transactional_id: Option<&str>,
    partition: i32,
    batch: Bytes,
) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_transactional_id(transactional_id.map(txn_id))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic("raw"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch)),
            ])]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

#[test]
fn bad_input() {
    let b = Broker::start(&["--set", "transaction.max.timeout.ms=30000"]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&b.bootstrap(), "raw", 2);
    let id = "raw-txn";
    // The first lookup of a transactional id creates __transaction_state.
    wait_until("a transaction coordinator", Duration::from_secs(15), || {
        let r: FindCoordinatorResponse = c.send(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_static_str("raw-txn"))
                .with_key_type(1),
        );
        r.error_code == NONE
    });

    // A timeout above transaction.max.timeout.ms.
    assert_eq!(
        init_producer_id(&mut c, Some(id), 30_001).0,
        INVALID_TRANSACTION_TIMEOUT
    );
    let (e, pid, epoch) = init_producer_id(&mut c, Some(id), 30_000);
    assert_eq!(e, NONE);
    let me = (pid, epoch);

    // EndTxn with no transaction.
    assert_eq!(end_txn(&mut c, 3, id, me, true), INVALID_TXN_STATE);
    assert_eq!(end_txn(&mut c, 3, id, me, false), INVALID_TXN_STATE);

    // A partition that does not exist: it gets UNKNOWN_TOPIC_OR_PARTITION, the others are
    // not attempted.
    let r = add_partitions(
        &mut c,
        3,
        id,
        me,
        &[("raw", &[0, 1]), ("no-such-topic", &[0]), ("raw", &[7])],
    );
    let want: BTreeMap<(String, i32), i16> = [
        (("raw".to_string(), 0), OPERATION_NOT_ATTEMPTED),
        (("raw".to_string(), 1), OPERATION_NOT_ATTEMPTED),
        (("no-such-topic".to_string(), 0), UNKNOWN_TOPIC_OR_PARTITION),
        (("raw".to_string(), 7), UNKNOWN_TOPIC_OR_PARTITION),
    ]
    .into();
    assert_eq!(r, want);
    // ... and nothing was added.
    assert_eq!(end_txn(&mut c, 3, id, me, true), INVALID_TXN_STATE);

    // Another producer id.
    for v in 0..=3 {
        assert_eq!(
            add_partition_error(&mut c, v, id, (pid + 1, epoch)),
            INVALID_PRODUCER_ID_MAPPING,
            "v{v}"
        );
        assert_eq!(
            end_txn(&mut c, v, id, (pid + 1, epoch), true),
            INVALID_PRODUCER_ID_MAPPING,
            "v{v}"
        );
    }
    // A transactional id never initialised.
    assert_eq!(
        add_partition_error(&mut c, 3, "raw-unknown", me),
        INVALID_PRODUCER_ID_MAPPING
    );

    // A second InitProducerId bumps the epoch: the old one is fenced (PRODUCER_FENCED from v2,
    // INVALID_PRODUCER_EPOCH before).
    let (e, pid2, epoch2) = init_producer_id(&mut c, Some(id), 30_000);
    assert_eq!((e, pid2, epoch2), (NONE, pid, epoch + 1));
    for (v, want) in [
        (0, INVALID_PRODUCER_EPOCH),
        (1, INVALID_PRODUCER_EPOCH),
        (2, PRODUCER_FENCED),
        (3, PRODUCER_FENCED),
    ] {
        assert_eq!(
            add_partition_error(&mut c, v, id, me),
            want,
            "AddPartitionsToTxn v{v}"
        );
        assert_eq!(end_txn(&mut c, v, id, me, true), want, "EndTxn v{v}");
    }

    // Idempotent produce rules, on partition 1.
    let (e, ipid, iepoch) = init_producer_id(&mut c, None, 0);
    assert_eq!((e, iepoch), (NONE, 0));
    let idempotent = |epoch: i16, seq: i32, n: usize| {
        let values: Vec<&[u8]> = (0..n).map(|_| b"i".as_slice()).collect();
        producer_batch(ipid, epoch, seq, false, &values)
    };
    assert_eq!(produce_raw(&mut c, None, 1, idempotent(0, 0, 2)), (NONE, 0));
    // A gap in the sequence.
    assert_eq!(
        produce_raw(&mut c, None, 1, idempotent(0, 5, 1)).0,
        OUT_OF_ORDER_SEQUENCE_NUMBER
    );
    assert_eq!(produce_raw(&mut c, None, 1, idempotent(0, 2, 1)), (NONE, 2));
    // A new epoch starts at sequence 0; the old one is fenced.
    assert_eq!(produce_raw(&mut c, None, 1, idempotent(1, 0, 1)), (NONE, 3));
    assert_eq!(
        produce_raw(&mut c, None, 1, idempotent(0, 3, 1)).0,
        INVALID_PRODUCER_EPOCH
    );
    // A retry answered with the original offset.
    assert_eq!(produce_raw(&mut c, None, 1, idempotent(1, 0, 1)), (NONE, 3));

    // Sequences wrap after i32::MAX: a batch across the wrap, the next after it, and a retry
    // of the first deduplicated.
    let (e, wpid, _) = init_producer_id(&mut c, None, 0);
    assert_eq!(e, NONE);
    let wrap = producer_batch(wpid, 0, i32::MAX - 1, false, &[b"w0", b"w1", b"w2"]);
    assert_eq!(produce_raw(&mut c, None, 1, wrap.clone()), (NONE, 4));
    let after = producer_batch(wpid, 0, 1, false, &[b"w3"]);
    assert_eq!(produce_raw(&mut c, None, 1, after), (NONE, 7));
    assert_eq!(produce_raw(&mut c, None, 1, wrap), (NONE, 4));
    let data = fetch_all(&mut c, "raw", 1, WIRE_READ_UNCOMMITTED);
    assert_eq!(data.high_watermark, 8);
    assert_eq!(
        values(&data.records),
        [
            (0, b"i".to_vec()),
            (1, b"i".to_vec()),
            (2, b"i".to_vec()),
            (3, b"i".to_vec()),
            (4, b"w0".to_vec()),
            (5, b"w1".to_vec()),
            (6, b"w2".to_vec()),
            (7, b"w3".to_vec()),
        ]
    );

    // A whole transaction at the new epoch, down to its marker.
    let now = (pid, epoch + 1);
    assert_eq!(add_partition_error(&mut c, 3, id, now), NONE);
    let txn_batch = producer_batch(pid, epoch + 1, 0, true, &[b"x0", b"x1"]);
    assert_eq!(produce_raw(&mut c, Some(id), 0, txn_batch), (NONE, 0));
    assert_eq!(ends(&mut c, "raw", 1), [(2, 0)]);
    assert_eq!(end_txn(&mut c, 3, id, now, true), NONE);
    wait_ends(&mut c, "raw", &[3]);
    let records = records_of(&fetch_all(&mut c, "raw", 0, WIRE_READ_COMMITTED).records);
    assert_eq!(markers(&records), [(2, epoch + 1, true)]);
    assert_eq!(records[2].producer_id, pid);
}
