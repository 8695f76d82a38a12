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
    // The consumers (group.id set) asked for their group coordinator, which created
    // __consumer_offsets; its partitions are owned too.
    let metadata = producer(&b, "none", "1")
        .client()
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    let coordinator_partitions = metadata
        .topics()
        .iter()
        .find(|t| t.name() == "__consumer_offsets")
        .map_or(0, |t| t.partitions().len() as u64);
    assert_eq!(
        owned.iter().sum::<u64>(),
        5 * PARTITIONS as u64 + coordinator_partitions
    );
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

fn create_topic_with(b: &Broker, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .create()
        .unwrap();
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let res = block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
}

#[test]
fn interval_policy_is_synced_by_clean_shutdown() {
    let mut b = Broker::start(&[]);
    // flush.ms far away: only the shutdown sync makes these durable.
    create_topic_with(
        &b,
        "paged",
        PARTITIONS,
        &[("flush.policy", "interval"), ("flush.ms", "3600000")],
    );
    let p = producer(&b, "snappy", "1");
    let sent = produce_all(&p, "paged", 200, "interval");
    drop(p);
    assert_eq!(b.stop(), Some(0), "SIGTERM must exit 0");
    assert!(b.log_text().contains("logs synced"), "{}", b.log_text());
    b.restart_after_stop();
    let got = consume_all(&b, "paged", &sent);
    check_same(&sent, &got, 0);
}

#[test]
fn log_append_time_topic_stamps_broker_time() {
    let b = Broker::start(&[]);
    create_topic_with(
        &b,
        "appendtime",
        PARTITIONS,
        &[("message.timestamp.type", "LogAppendTime")],
    );
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let p = producer(&b, "zstd", "all");
    let sent = produce_all(&p, "appendtime", 20, "lat");
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let got = consume_all(&b, "appendtime", &sent);
    for (part, recs) in &got {
        for (i, (offset, rec)) in recs.iter().enumerate() {
            assert_eq!(*offset, i as i64);
            let want = &sent[part][i];
            assert_eq!(
                (&rec.key, &rec.value, &rec.headers),
                (&want.key, &want.value, &want.headers)
            );
            assert!(
                (before..=after).contains(&rec.timestamp),
                "partition {part} offset {offset}: timestamp {} is not the broker's append time ({before}..={after})",
                rec.timestamp
            );
        }
    }
}

/// A delivery report: partition and offset, or the error.
type Report = Result<(i32, i64), rdkafka::error::KafkaError>;

/// Records every delivery report.
#[derive(Clone, Default)]
struct Reports(std::sync::Arc<std::sync::Mutex<Vec<Report>>>);

impl rdkafka::ClientContext for Reports {}

impl rdkafka::producer::ProducerContext for Reports {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        let r = result
            .as_ref()
            .map(|m| (m.partition(), m.offset()))
            .map_err(|(e, _)| e.clone());
        self.0.lock().unwrap().push(r);
    }
}

#[test]
fn acks_all_needs_min_insync_replicas() {
    let b = Broker::start(&[]);
    create_topic_with(&b, "needs2", PARTITIONS, &[("min.insync.replicas", "2")]);
    let reports = Reports::default();
    let p: BaseProducer<Reports> = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("acks", "all")
        .set("message.timeout.ms", "3000")
        .set("retries", "0") // NOT_ENOUGH_REPLICAS is retriable: surface it at once
        .set("enable.idempotence", "false")
        .create_with_context(reports.clone())
        .unwrap();
    p.send(
        BaseRecord::<[u8], [u8]>::to("needs2")
            .partition(0)
            .payload(b"x".as_slice()),
    )
    .map_err(|(e, _)| e)
    .unwrap();
    p.flush(Duration::from_secs(10)).ok();
    let got = reports.0.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    let err = got[0].clone().unwrap_err();
    assert!(
        matches!(
            err,
            rdkafka::error::KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::NotEnoughReplicas
            )
        ),
        "{err:?}"
    );
    // acks=1 does not need the ISR, and the refused record was not appended: offsets start at 0.
    let p1 = producer(&b, "none", "1");
    let sent = produce_all(&p1, "needs2", 5, "acks1");
    let got = consume_all(&b, "needs2", &sent);
    check_same(&sent, &got, 0);
}
