//! Log compaction through the real broker with librdkafka: `cleanup.policy=compact` keeps the
//! latest record per key (every codec rewritten with itself, offsets kept, gaps appear),
//! tombstones survive `delete.retention.ms` and then go, records without a key are refused with
//! INVALID_RECORD, and the compacted log survives a restart.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::client::{topic, Client};
use common::Broker;
use futures_lite::future::block_on;
use kafka_protocol::messages::*;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "compacted";

fn create(b: &Broker) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .create()
        .unwrap();
    let t = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.bytes", "4096")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("delete.retention.ms", "2000");
    let res = block_on(admin.create_topics(&[t], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
}

/// Produces `(key, value)` records (value `None` = tombstone) with `codec`, one record per
/// batch-ish (linger 0); returns offset -> (key, value) from the delivery reports.
fn produce(
    b: &Broker,
    codec: &str,
    records: &[(String, Option<String>)],
) -> BTreeMap<i64, (String, Option<String>)> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("compression.codec", codec)
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("enable.idempotence", "false")
        .set("max.in.flight.requests.per.connection", "1")
        .create()
        .unwrap();
    for (k, v) in records {
        let mut r = BaseRecord::<String, String>::to(TOPIC).partition(0).key(k);
        if let Some(v) = v {
            r = r.payload(v);
        }
        p.send(r).map_err(|(e, _)| e).unwrap();
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(30)).unwrap();
    drop(p);
    // Offsets: read them back from the log end, in produce order (one partition, in flight 1).
    let end = read_all(b).keys().next_back().copied().unwrap_or(-1);
    let first = end + 1 - records.len() as i64;
    records
        .iter()
        .enumerate()
        .map(|(i, r)| (first + i as i64, r.clone()))
        .collect()
}

/// Everything in the partition: offset -> (key, value).
fn read_all(b: &Broker) -> BTreeMap<i64, (String, Option<String>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "unused-manual-assign")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let (_, high) = c
        .fetch_watermarks(TOPIC, 0, Duration::from_secs(10))
        .unwrap();
    let mut out = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "reading timed out at {out:?}");
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let key = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
                let value = m.payload().map(|v| String::from_utf8(v.to_vec()).unwrap());
                out.insert(m.offset(), (key, value));
                if m.offset() + 1 >= high {
                    return out;
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("{e}"),
            None if high == 0 => return out,
            None => {}
        }
    }
}

/// A batch of one record without a key.
fn unkeyed_batch(value: &[u8]) -> Bytes {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::copy_from_slice(value)),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &[record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

fn wait_for_compaction(b: &Broker, passes: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.log_text().matches("compacted").count() < passes {
        assert!(
            Instant::now() < deadline,
            "no compaction pass; log:\n{}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The latest (key -> value) of everything written.
fn latest(written: &BTreeMap<i64, (String, Option<String>)>) -> BTreeMap<String, Option<String>> {
    written.values().cloned().collect()
}

#[test]
fn compaction_keeps_the_latest_record_per_key() {
    let mut b = Broker::start(&["--set", "log.cleaner.backoff.ms=200"]);
    create(&b);
    // A record without a key is refused.
    let mut c = Client::connect(&b.bootstrap());
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(TOPIC))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(unkeyed_batch(b"no key"))),
            ])]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 87);
    // Four rounds over 30 keys, each round with another codec; then tombstones for k0..k4.
    let mut written = BTreeMap::new();
    for (round, codec) in ["none", "gzip", "lz4", "zstd", "snappy"].iter().enumerate() {
        let records: Vec<(String, Option<String>)> = (0..30)
            .map(|i| {
                (
                    format!("k{i:02}"),
                    Some(format!("{codec}-{round}-{i}-{}", "x".repeat(40))),
                )
            })
            .collect();
        written.extend(produce(&b, codec, &records));
    }
    let tombstones: Vec<(String, Option<String>)> =
        (0..5).map(|i| (format!("k{i:02}"), None)).collect();
    written.extend(produce(&b, "none", &tombstones));
    // Push the tombstones out of the active segment.
    let filler: Vec<(String, Option<String>)> = (0..60)
        .map(|i| (format!("f{i:02}"), Some("y".repeat(100))))
        .collect();
    written.extend(produce(&b, "lz4", &filler));
    wait_for_compaction(&b, 1);
    let got = read_all(&b);
    assert!(
        got.len() < written.len(),
        "{} of {} records left",
        got.len(),
        written.len()
    );
    // Every record read is one that was written, at its offset.
    for (o, rec) in &got {
        assert_eq!(written.get(o), Some(rec), "offset {o}");
    }
    // The latest value of every key is there; older values of keys in cleaned segments are not.
    let want = latest(&written);
    let mut seen: BTreeMap<String, Option<String>> = BTreeMap::new();
    for rec in got.values() {
        seen.insert(rec.0.clone(), rec.1.clone());
    }
    assert_eq!(
        seen, want,
        "the last record read per key is the last written"
    );
    let k10: Vec<&i64> = got
        .iter()
        .filter(|(_, r)| r.0 == "k10")
        .map(|(o, _)| o)
        .collect();
    assert_eq!(k10.len(), 1, "k10 once: {k10:?}");
    // Tombstones survive delete.retention.ms (2 s), then go once compaction runs again.
    assert!(got.values().any(|r| r.0 == "k00" && r.1.is_none()));
    std::thread::sleep(Duration::from_millis(2500));
    let more: Vec<(String, Option<String>)> = (0..60)
        .map(|i| (format!("f{i:02}"), Some("z".repeat(100))))
        .collect();
    written.extend(produce(&b, "zstd", &more));
    written.extend(produce(&b, "none", &more));
    wait_for_compaction(&b, 2);
    let got = read_all(&b);
    assert!(
        !got.values().any(|r| r.0 == "k00"),
        "tombstone and all of k00 gone: {:?}",
        got.values().filter(|r| r.0 == "k00").collect::<Vec<_>>()
    );
    for (o, rec) in &got {
        assert_eq!(written.get(o), Some(rec), "offset {o}");
    }
    // A restart keeps exactly this.
    b.restart();
    assert_eq!(read_all(&b), got);
}
