//! librdkafka (the `rdkafka` crate) against the real `keel` binary: produce and consume
//! keys, values, headers and timestamps with every compression codec over a topic with more
//! partitions than shards; acks=all survives kill -9; partitions spread over all shards.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Broker;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 5;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

fn create_topic(b: &Broker, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .create()
        .unwrap();
    let topic =
        NewTopic::new(name, partitions, TopicReplication::Fixed(1)).set("segment.bytes", "65536");
    let res = block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
}

fn producer(b: &Broker, codec: &str, acks: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("compression.codec", codec)
        .set("acks", acks)
        .set("linger.ms", "5")
        .set("enable.idempotence", "false")
        .create()
        .unwrap()
}

/// One produced record as we expect to read it back.
#[derive(Debug, Clone, PartialEq)]
struct Rec {
    key: Vec<u8>,
    value: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
    timestamp: i64,
}

fn produce_all(
    p: &BaseProducer,
    topic: &str,
    per_partition: usize,
    tag: &str,
) -> BTreeMap<i32, Vec<Rec>> {
    let base_ts = 1_700_000_000_000i64;
    let mut sent: BTreeMap<i32, Vec<Rec>> = BTreeMap::new();
    for i in 0..per_partition {
        for part in 0..PARTITIONS {
            let rec = Rec {
                key: format!("{tag}-k-{part}-{i}").into_bytes(),
                value: format!("{tag}-value-{part}-{i}-{}", "x".repeat(i % 50)).into_bytes(),
                headers: vec![
                    ("h1".into(), format!("v{i}").into_bytes()),
                    ("tag".into(), tag.as_bytes().to_vec()),
                ],
                timestamp: base_ts + (i as i64) * 10 + i64::from(part),
            };
            let mut headers = OwnedHeaders::new();
            for (k, v) in &rec.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v),
                });
            }
            let record = BaseRecord::to(topic)
                .partition(part)
                .key(&rec.key)
                .payload(&rec.value)
                .headers(headers)
                .timestamp(rec.timestamp);
            p.send(record).map_err(|(e, _)| e).unwrap();
            p.poll(Duration::ZERO);
            sent.entry(part).or_default().push(rec);
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
    sent
}

fn consume_all(
    b: &Broker,
    topic: &str,
    expected: &BTreeMap<i32, Vec<Rec>>,
) -> BTreeMap<i32, Vec<(i64, Rec)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "unused-manual-assign")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for part in 0..PARTITIONS {
        tpl.add_partition_offset(topic, part, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let want: usize = expected.values().map(Vec::len).sum();
    let mut got: BTreeMap<i32, Vec<(i64, Rec)>> = BTreeMap::new();
    let mut n = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while n < want && std::time::Instant::now() < deadline {
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg.unwrap_or_else(|e| panic!("consume error: {e}"));
        let headers = msg
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                    .collect()
            })
            .unwrap_or_default();
        got.entry(msg.partition()).or_default().push((
            msg.offset(),
            Rec {
                key: msg.key().unwrap_or_default().to_vec(),
                value: msg.payload().unwrap_or_default().to_vec(),
                headers,
                timestamp: msg.timestamp().to_millis().unwrap(),
            },
        ));
        n += 1;
    }
    assert_eq!(n, want, "consumed {n} of {want} records");
    got
}

fn check_same(
    sent: &BTreeMap<i32, Vec<Rec>>,
    got: &BTreeMap<i32, Vec<(i64, Rec)>>,
    first_offset: i64,
) {
    for (part, recs) in sent {
        let back = &got[part];
        assert_eq!(back.len(), recs.len(), "partition {part}");
        for (i, (rec, (offset, back))) in recs.iter().zip(back).enumerate() {
            assert_eq!(
                *offset,
                first_offset + i as i64,
                "partition {part} offsets must be dense"
            );
            assert_eq!(rec, back, "partition {part} offset {offset}");
        }
    }
}

#[test]
fn every_codec_round_trips_keys_values_headers_timestamps() {
    let b = Broker::start(&[]);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("rd-{codec}");
        create_topic(&b, &topic, PARTITIONS);
        let p = producer(&b, codec, "all");
        let sent = produce_all(&p, &topic, 400, codec);
        let got = consume_all(&b, &topic, &sent);
        check_same(&sent, &got, 0);
    }
    // More partitions than shards: both shards own some, and requests crossed shards.
    let owned = b.metric_by_shard("keel_partitions_owned");
    assert_eq!(owned.len(), 2, "{owned:?}");
    assert!(
        owned.iter().all(|&n| n > 0),
        "partitions not spread over all shards: {owned:?}"
    );
    assert_eq!(owned.iter().sum::<u64>(), 5 * PARTITIONS as u64);
    let hops: u64 = b
        .metric_by_shard("keel_cross_shard_hops_total")
        .iter()
        .sum();
    assert!(hops > 0, "no request was forwarded to an owner shard");
    let records: u64 = b.metric_by_shard("keel_produce_records_total").iter().sum();
    assert_eq!(records, 5 * 400 * PARTITIONS as u64);
}

#[test]
fn acks_all_records_survive_kill_9() {
    let mut b = Broker::start(&[]);
    create_topic(&b, "durable", PARTITIONS);
    let p = producer(&b, "lz4", "all");
    let sent = produce_all(&p, "durable", 300, "before");
    drop(p);
    b.kill9_and_restart();
    let got = consume_all(&b, "durable", &sent);
    check_same(&sent, &got, 0);
    // The log goes on densely after the crash.
    let p = producer(&b, "none", "all");
    let more = produce_all(&p, "durable", 10, "after");
    drop(p);
    let mut all = sent.clone();
    for (part, recs) in &more {
        all.get_mut(part).unwrap().extend(recs.iter().cloned());
    }
    let got = consume_all(&b, "durable", &all);
    check_same(&all, &got, 0);
    // A clean restart keeps everything too, and exits 0.
    assert_eq!(b.stop(), Some(0));
    b.restart_after_stop();
    let got = consume_all(&b, "durable", &all);
    check_same(&all, &got, 0);
}
