//! The partition side of transactions against the real binary. The test plays the
//! transaction coordinator: transactional batches carry producer ids from InitProducerId,
//! and markers go through WriteTxnMarkers (Kafka's inter-broker API). A read_committed Fetch
//! stops at the last stable offset while a transaction is open, long-polls until a marker
//! moves it, and lists the aborted transactions of what it reads; ListOffsets read_committed
//! answers the last stable offset; markers are fenced by coordinator and producer epoch;
//! clients cannot write markers; a non-transactional batch inside an open transaction is
//! refused; all of it survives kill -9. librdkafka consumers see only committed records with
//! isolation.level=read_committed, and everything with read_uncommitted.

mod common;

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::client::*;
use common::Broker;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, ProducerId, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::records::RecordBatchDecoder;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

const READ_UNCOMMITTED: i8 = 0;
const READ_COMMITTED: i8 = 1;

/// A fresh producer id and epoch (InitProducerId without a transactional id).
fn init_producer_id(c: &mut Client) -> (i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let resp: InitProducerIdResponse = c.send(ApiKey::InitProducerId, 4, &req);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    (resp.producer_id.0, resp.producer_epoch)
}

/// WriteTxnMarkers (v1) of one marker into `partitions` of `topic`: each partition's error.
fn write_marker(
    c: &mut Client,
    (producer_id, producer_epoch): (i64, i16),
    commit: bool,
    coordinator_epoch: i32,
    name: &str,
    partitions: &[i32],
) -> Vec<i16> {
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(topic(name))
            .with_partition_indexes(partitions.to_vec())])]);
    let resp: WriteTxnMarkersResponse = c.send(ApiKey::WriteTxnMarkers, 1, &req);
    assert_eq!(resp.markers.len(), 1);
    let marker = &resp.markers[0];
    assert_eq!(marker.producer_id.0, producer_id);
    assert_eq!(marker.topics.len(), 1);
    assert_eq!(marker.topics[0].name.0.as_str(), name);
    let answered: Vec<i32> = marker.topics[0]
        .partitions
        .iter()
        .map(|p| p.partition_index)
        .collect();
    assert_eq!(answered, partitions);
    marker.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect()
}

/// Fetch (v12) of one partition at an isolation level.
fn fetch(
    c: &mut Client,
    name: &str,
    partition: i32,
    offset: i64,
    isolation_level: i8,
) -> PartitionData {
    let req = fetch_request(name, &[(partition, offset, 1 << 20)], 0, 0, 1 << 20)
        .with_isolation_level(isolation_level);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    assert_eq!(resp.error_code, 0);
    let p = resp.responses[0].partitions[0].clone();
    assert_eq!(p.error_code, 0, "{p:?}");
    p
}

/// ListOffsets (v7) latest of one partition at an isolation level.
fn list_latest(c: &mut Client, name: &str, partition: i32, isolation_level: i8) -> i64 {
    list_offset(c, name, partition, -1, isolation_level)
}

/// ListOffsets (v7) of one partition at `timestamp` (or -1 latest, -3 max timestamp) at an
/// isolation level: the offset found, -1 for none.
fn list_offset(
    c: &mut Client,
    name: &str,
    partition: i32,
    timestamp: i64,
    isolation_level: i8,
) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic(name))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp)])]);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{p:?}");
    p.offset
}

/// (offset, value) of every data record (markers left out) of a fetch's records.
fn data(p: &PartitionData) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let Some(mut b) = p.records.clone() else {
        return out;
    };
    while b.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut b).unwrap();
        for r in set.records.into_iter().filter(|r| !r.control) {
            let value = r.value.unwrap_or_default();
            out.push((r.offset, String::from_utf8(value.to_vec()).unwrap()));
        }
    }
    out
}

/// (offset, value) of data records, and (producer id, first offset) of aborted transactions.
type Read = (Vec<(i64, String)>, Vec<(i64, i64)>);

/// Every data record and aborted transaction a consumer at `isolation_level` reads from the
/// start of one partition, fetch after fetch, up to the last stable offset (read_committed)
/// or the high watermark.
fn read_all(c: &mut Client, name: &str, partition: i32, isolation_level: i8) -> Read {
    let (mut records, mut aborted_txns) = (Vec::new(), Vec::new());
    let mut next = 0;
    loop {
        let p = fetch(c, name, partition, next, isolation_level);
        let end = if isolation_level == READ_COMMITTED {
            p.last_stable_offset
        } else {
            p.high_watermark
        };
        if next >= end {
            return (records, aborted_txns);
        }
        let mut b = p.records.clone().expect("records below the end");
        assert!(b.has_remaining(), "no batch at {next} below {end}");
        while b.has_remaining() {
            let set = RecordBatchDecoder::decode(&mut b).unwrap();
            next = next.max(set.records.iter().map(|r| r.offset + 1).max().unwrap());
        }
        records.extend(data(&p));
        for t in aborted(&p).unwrap_or_default() {
            if !aborted_txns.contains(&t) {
                aborted_txns.push(t);
            }
        }
    }
}

/// (producer id, first offset) of a fetch's aborted transactions; `None` when absent.
fn aborted(p: &PartitionData) -> Option<Vec<(i64, i64)>> {
    p.aborted_transactions.as_ref().map(|list| {
        list.iter()
            .map(|t| (t.producer_id.0, t.first_offset))
            .collect()
    })
}

fn rows(items: &[(i64, &str)]) -> Vec<(i64, String)> {
    items.iter().map(|(o, v)| (*o, v.to_string())).collect()
}

fn txn(producer: (i64, i16), seq: i32, values: &[&[u8]]) -> Bytes {
    producer_batch(producer.0, producer.1, seq, true, values)
}

#[test]
fn read_committed_fetch_stops_at_the_last_stable_offset() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "txp", 2);
    let p1 = init_producer_id(&mut c);
    let p2 = init_producer_id(&mut c);
    assert_ne!(p1.0, p2.0);
    assert_eq!(produce(&mut c, "txp", 0, batch(&[b"p0", b"p1"])), 0);
    assert_eq!(produce(&mut c, "txp", 0, txn(p1, 0, &[b"a0", b"a1"])), 2);
    assert_eq!(produce(&mut c, "txp", 0, batch(&[b"p2"])), 4);

    // Producer 1's open transaction holds the LSO at 2.
    let rc = fetch(&mut c, "txp", 0, 0, READ_COMMITTED);
    assert_eq!(data(&rc), rows(&[(0, "p0"), (1, "p1")]));
    assert_eq!((rc.high_watermark, rc.last_stable_offset), (5, 2));
    assert_eq!(aborted(&rc), Some(vec![]));
    let ru = fetch(&mut c, "txp", 0, 0, READ_UNCOMMITTED);
    assert_eq!(data(&ru).len(), 5);
    assert_eq!((ru.high_watermark, ru.last_stable_offset), (5, 2));
    assert_eq!(aborted(&ru), None);
    assert_eq!(list_latest(&mut c, "txp", 0, READ_COMMITTED), 2);
    assert_eq!(list_latest(&mut c, "txp", 0, READ_UNCOMMITTED), 5);
    // At the LSO a read_committed fetch has nothing, however much is past it.
    assert!(data(&fetch(&mut c, "txp", 0, 2, READ_COMMITTED)).is_empty());

    // A read_committed long poll at the LSO is woken by the marker that moves it.
    let addr = b.bootstrap();
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(&addr);
        let started = Instant::now();
        let req = fetch_request("txp", &[(0, 2, 1 << 20)], 20_000, 1, 1 << 20)
            .with_isolation_level(READ_COMMITTED);
        let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
        (resp, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(write_marker(&mut c, p1, false, 0, "txp", &[0]), vec![0]);
    let (resp, waited) = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(15),
        "the read_committed fetch was not woken by the marker ({waited:?})"
    );
    let woken = &resp.responses[0].partitions[0];
    assert_eq!(data(woken), rows(&[(2, "a0"), (3, "a1"), (4, "p2")]));
    assert_eq!(aborted(woken), Some(vec![(p1.0, 2)]));
    assert_eq!((woken.high_watermark, woken.last_stable_offset), (6, 6));
    assert_eq!(list_latest(&mut c, "txp", 0, READ_COMMITTED), 6);

    // Producer 2 commits: nothing to drop.
    assert_eq!(produce(&mut c, "txp", 0, txn(p2, 0, &[b"c0"])), 6);
    assert!(data(&fetch(&mut c, "txp", 0, 6, READ_COMMITTED)).is_empty());
    assert_eq!(write_marker(&mut c, p2, true, 0, "txp", &[0]), vec![0]);
    let rc = fetch(&mut c, "txp", 0, 6, READ_COMMITTED);
    assert_eq!(data(&rc), rows(&[(6, "c0")]));
    assert_eq!(aborted(&rc), Some(vec![]));
    assert_eq!(rc.last_stable_offset, 8);
    // From the start: producer 1's aborted transaction is listed.
    assert_eq!(
        aborted(&fetch(&mut c, "txp", 0, 0, READ_COMMITTED)),
        Some(vec![(p1.0, 2)])
    );

    // Producer 1 opens another transaction; everything holds across kill -9.
    assert_eq!(produce(&mut c, "txp", 0, txn(p1, 2, &[b"a2"])), 8);
    b.kill9_and_restart();
    let mut c = Client::connect(&b.bootstrap());
    assert_eq!(list_latest(&mut c, "txp", 0, READ_COMMITTED), 8);
    assert_eq!(list_latest(&mut c, "txp", 0, READ_UNCOMMITTED), 9);
    // Read from the segments now (a fetch returns one segment's batches at most).
    let (records, aborted_txns) = read_all(&mut c, "txp", 0, READ_COMMITTED);
    assert_eq!(aborted_txns, vec![(p1.0, 2)]);
    assert_eq!(
        records,
        rows(&[
            (0, "p0"),
            (1, "p1"),
            (2, "a0"),
            (3, "a1"),
            (4, "p2"),
            (6, "c0")
        ])
    );
    assert_eq!(write_marker(&mut c, p1, true, 0, "txp", &[0]), vec![0]);
    let rc = fetch(&mut c, "txp", 0, 8, READ_COMMITTED);
    assert_eq!(data(&rc), rows(&[(8, "a2")]));
    assert_eq!(rc.last_stable_offset, 10);
    // The other partition never had a transaction: its LSO is its high watermark.
    assert_eq!(produce(&mut c, "txp", 1, batch(&[b"q"])), 0);
    assert_eq!(list_latest(&mut c, "txp", 1, READ_COMMITTED), 1);
}

#[test]
fn markers_are_fenced_and_only_coordinators_write_them() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    // More partitions than shards: one WriteTxnMarkers reaches several owner shards.
    create_topic(&mut c, "txf", 4);
    let p = init_producer_id(&mut c);
    for part in 0..4 {
        assert_eq!(produce(&mut c, "txf", part, txn(p, 0, &[b"x"])), 0);
        assert_eq!(list_latest(&mut c, "txf", part, READ_COMMITTED), 0);
    }
    assert_eq!(
        write_marker(&mut c, p, true, 5, "txf", &[0, 1, 2, 3]),
        vec![0; 4]
    );
    for part in 0..4 {
        assert_eq!(list_latest(&mut c, "txf", part, READ_COMMITTED), 2);
    }
    // An older coordinator: TRANSACTION_COORDINATOR_FENCED (52).
    assert_eq!(write_marker(&mut c, p, false, 4, "txf", &[0]), vec![52]);
    // A newer producer epoch is taken; the older one is then INVALID_PRODUCER_EPOCH (47).
    let bumped = (p.0, p.1 + 1);
    assert_eq!(write_marker(&mut c, bumped, false, 5, "txf", &[0]), vec![0]);
    assert_eq!(write_marker(&mut c, p, false, 5, "txf", &[0]), vec![47]);
    // No such topic: UNKNOWN_TOPIC_OR_PARTITION (3).
    assert_eq!(write_marker(&mut c, p, true, 5, "nope", &[0]), vec![3]);
    assert_eq!(list_latest(&mut c, "txf", 0, READ_COMMITTED), 3);

    // A client's control batch: INVALID_RECORD (87), nothing appended.
    let r = try_produce(&mut c, "txf", 1, marker_batch(p.0, p.1, true, 9));
    assert_eq!(r.error_code, 87, "{r:?}");
    assert_eq!(list_latest(&mut c, "txf", 1, READ_UNCOMMITTED), 2);

    // A non-transactional batch inside the producer's open transaction: INVALID_TXN_STATE.
    assert_eq!(produce(&mut c, "txf", 1, txn(p, 1, &[b"y"])), 2);
    let r = try_produce(
        &mut c,
        "txf",
        1,
        producer_batch(p.0, p.1, 2, false, &[b"z"]),
    );
    assert_eq!(r.error_code, 48, "{r:?}");
    assert_eq!(write_marker(&mut c, p, true, 5, "txf", &[1]), vec![0]);
    assert_eq!(
        produce(
            &mut c,
            "txf",
            1,
            producer_batch(p.0, p.1, 2, false, &[b"z"])
        ),
        4
    );
    assert_eq!(list_latest(&mut c, "txf", 1, READ_COMMITTED), 5);
}

/// A transactional batch of one record stamped `timestamp`.
fn txn_at(producer: (i64, i16), seq: i32, value: &[u8], timestamp: i64) -> Bytes {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: producer.0,
        producer_epoch: producer.1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp,
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::copy_from_slice(value)),
        headers: Default::default(),
    };
    let mut buf = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&record], &options).unwrap();
    buf.freeze()
}

#[test]
fn list_offsets_read_committed_ends_at_the_last_stable_offset() {
    const MAX_TIMESTAMP: i64 = -3;
    // Far past every other timestamp here, markers' (the broker's clock) included.
    const LATE_MS: i64 = 4_000_000_000_000;
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "txl", 1);
    let p = init_producer_id(&mut c);
    assert_eq!(produce(&mut c, "txl", 0, batch(&[b"early"])), 0);
    assert_eq!(produce(&mut c, "txl", 0, txn_at(p, 0, b"late", LATE_MS)), 1);
    // Open: the late record is past the LSO, so read_committed does not find it by time.
    for (ts, committed, uncommitted) in [(-1, 1, 2), (MAX_TIMESTAMP, -1, 1), (LATE_MS, -1, 1)] {
        assert_eq!(list_offset(&mut c, "txl", 0, ts, READ_COMMITTED), committed);
        assert_eq!(
            list_offset(&mut c, "txl", 0, ts, READ_UNCOMMITTED),
            uncommitted
        );
    }
    assert_eq!(list_offset(&mut c, "txl", 0, 0, READ_COMMITTED), 0);
    assert_eq!(write_marker(&mut c, p, true, 0, "txl", &[0]), vec![0]);
    for (ts, both) in [(-1, 3), (MAX_TIMESTAMP, 1), (LATE_MS, 1)] {
        assert_eq!(list_offset(&mut c, "txl", 0, ts, READ_COMMITTED), both);
        assert_eq!(list_offset(&mut c, "txl", 0, ts, READ_UNCOMMITTED), both);
    }
}

/// A librdkafka consumer at `isolation` reading partition 0 of `topic` from the start.
fn consumer(b: &Broker, topic: &str, isolation: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", format!("unused-{isolation}"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    consumer
}

/// Values `consumer` reads until it has `want` of them, then for `quiet` more (to see that
/// nothing else comes).
fn read(consumer: &BaseConsumer, want: usize, quiet: Duration) -> Vec<String> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < want && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.unwrap_or_else(|e| panic!("consume error: {e}"));
            out.push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap());
        }
    }
    let quiet_until = Instant::now() + quiet;
    while Instant::now() < quiet_until {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.unwrap_or_else(|e| panic!("consume error: {e}"));
            out.push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap());
        }
    }
    out
}

#[test]
fn librdkafka_read_committed_sees_only_committed_records() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "txr", 1);
    let (p1, p2, p3) = (
        init_producer_id(&mut c),
        init_producer_id(&mut c),
        init_producer_id(&mut c),
    );
    produce(&mut c, "txr", 0, batch(&[b"plain-0"]));
    produce(&mut c, "txr", 0, txn(p1, 0, &[b"commit-0", b"commit-1"]));
    produce(&mut c, "txr", 0, txn(p2, 0, &[b"abort-0", b"abort-1"]));
    produce(&mut c, "txr", 0, batch(&[b"plain-1"]));
    produce(&mut c, "txr", 0, txn(p1, 2, &[b"commit-2"]));
    assert_eq!(write_marker(&mut c, p2, false, 0, "txr", &[0]), vec![0]);
    produce(&mut c, "txr", 0, txn(p2, 2, &[b"abort-2"]));
    assert_eq!(write_marker(&mut c, p1, true, 0, "txr", &[0]), vec![0]);
    assert_eq!(write_marker(&mut c, p2, false, 0, "txr", &[0]), vec![0]);
    // Producer 3's transaction stays open for now; a plain record follows it.
    produce(&mut c, "txr", 0, txn(p3, 0, &[b"open-0"]));
    produce(&mut c, "txr", 0, batch(&[b"plain-2"]));

    let committed = consumer(&b, "txr", "read_committed");
    let seen = read(&committed, 5, Duration::from_secs(1));
    assert_eq!(
        seen,
        vec!["plain-0", "commit-0", "commit-1", "plain-1", "commit-2"],
        "read_committed: committed and plain records below the LSO"
    );
    let lso = list_latest(&mut c, "txr", 0, READ_COMMITTED);
    let (low, high) = committed
        .fetch_watermarks("txr", 0, Duration::from_secs(5))
        .unwrap();
    assert_eq!(
        (low, high),
        (0, lso),
        "librdkafka's read_committed end is the LSO"
    );
    // Producer 3 commits: the rest shows up.
    assert_eq!(write_marker(&mut c, p3, true, 0, "txr", &[0]), vec![0]);
    let more = read(&committed, 2, Duration::from_millis(500));
    assert_eq!(more, vec!["open-0", "plain-2"]);

    let everything = consumer(&b, "txr", "read_uncommitted");
    let seen = read(&everything, 10, Duration::from_millis(500));
    assert_eq!(
        seen,
        vec![
            "plain-0", "commit-0", "commit-1", "abort-0", "abort-1", "plain-1", "commit-2",
            "abort-2", "open-0", "plain-2"
        ],
        "read_uncommitted: every data record"
    );
}
