//! Hops between shards under load, with `--smp 2`: several librdkafka producers and consumers
//! at once, every connection sending requests for partitions both shards own, so most
//! requests cross the mesh while the shards park and wake between bursts. What must hold:
//! every acknowledged record is read back once, in order, with its key and value; every hop
//! a shard sent was run by the other (`keel_cross_shard_hops_total` summed = `..._jobs_total`
//! summed); and none was lost on the way (a lost wake-up would stall a producer past its
//! delivery timeout and fail its flush).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::client::{batch, create_topic, fetch_request, produce_request, values, Client};
use common::Broker;
use kafka_protocol::messages::{ApiKey, FetchResponse, ProduceResponse};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 8;
const PRODUCERS: usize = 4;
const CONSUMERS: usize = 2;
/// Records each producer sends to each partition.
const PER_PARTITION: usize = 1500;

fn total() -> usize {
    PRODUCERS * PER_PARTITION * PARTITIONS as usize
}

fn produce(bootstrap: String, producer: usize, start: Arc<Barrier>) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("batch.size", "4096")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap();
    start.wait();
    for i in 0..PER_PARTITION {
        for part in 0..PARTITIONS {
            let key = format!("p{producer}-{part}-{i}");
            let value = format!("v-{producer}-{part}-{i}-{}", "x".repeat(i % 200));
            loop {
                match p.send(
                    BaseRecord::to("hops")
                        .partition(part)
                        .key(&key)
                        .payload(&value),
                ) {
                    Ok(()) => break,
                    Err((e, _)) => {
                        // A full local queue: let deliveries drain, then retry.
                        assert!(format!("{e}").contains("Queue full"), "send failed: {e}");
                        p.poll(Duration::from_millis(10));
                    }
                }
            }
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(60))
        .expect("every record acknowledged");
}

/// Reads `partitions` from the beginning until `want` records came back (or a minute).
fn consume(
    bootstrap: String,
    partitions: Vec<i32>,
    want: usize,
) -> BTreeMap<i32, Vec<(i64, String, String)>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "hops-reader")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "20")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for &part in &partitions {
        tpl.add_partition_offset("hops", part, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut got: BTreeMap<i32, Vec<(i64, String, String)>> = BTreeMap::new();
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(90);
    while n < want && Instant::now() < deadline {
        let Some(msg) = c.poll(Duration::from_millis(100)) else {
            continue;
        };
        let msg = msg.unwrap_or_else(|e| panic!("consume error: {e}"));
        let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap_or_default().to_vec()).unwrap();
        got.entry(msg.partition()).or_default().push((
            msg.offset(),
            text(msg.key()),
            text(msg.payload()),
        ));
        n += 1;
    }
    got
}

#[test]
fn hops_between_two_shards_under_load_lose_nothing() {
    let b = Broker::start(&["--smp", "2"]);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .create()
        .unwrap();
    let topic = NewTopic::new("hops", PARTITIONS, TopicReplication::Fixed(1));
    let res = futures_lite::future::block_on(admin.create_topics(&[topic], &AdminOptions::new()))
        .unwrap();
    assert!(res[0].is_ok(), "{res:?}");
    let owned = b.metric_by_shard("keel_partitions_owned");
    assert_eq!(owned.len(), 2, "--smp 2 runs two shards: {owned:?}");
    assert!(
        owned.iter().all(|&n| n > 0),
        "both shards own partitions: {owned:?}"
    );

    let start = Arc::new(Barrier::new(PRODUCERS + CONSUMERS));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|i| {
            let (bootstrap, start) = (b.bootstrap(), start.clone());
            std::thread::spawn(move || produce(bootstrap, i, start))
        })
        .collect();
    // Consumers read along while the producers write, each half of the partitions.
    let per_consumer = PARTITIONS as usize / CONSUMERS;
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let (bootstrap, start) = (b.bootstrap(), start.clone());
            let parts: Vec<i32> = (0..PARTITIONS)
                .filter(|p| *p as usize % CONSUMERS == c)
                .collect();
            let want = per_consumer * PRODUCERS * PER_PARTITION;
            std::thread::spawn(move || {
                start.wait();
                consume(bootstrap, parts, want)
            })
        })
        .collect();
    for p in producers {
        p.join().expect("producer");
    }
    let mut got: BTreeMap<i32, Vec<(i64, String, String)>> = BTreeMap::new();
    for c in consumers {
        got.extend(c.join().expect("consumer"));
    }

    let read: usize = got.values().map(Vec::len).sum();
    assert_eq!(read, total(), "records read back");
    for (part, recs) in &got {
        // Offsets dense from 0; each producer's records in the order it sent them, once.
        for (i, (offset, _, _)) in recs.iter().enumerate() {
            assert_eq!(*offset, i as i64, "partition {part}: offsets dense");
        }
        for producer in 0..PRODUCERS {
            let mine: Vec<_> = recs
                .iter()
                .filter(|(_, k, _)| k.starts_with(&format!("p{producer}-")))
                .collect();
            assert_eq!(
                mine.len(),
                PER_PARTITION,
                "partition {part} producer {producer}"
            );
            for (i, (_, key, value)) in mine.iter().enumerate() {
                assert_eq!(*key, format!("p{producer}-{part}-{i}"));
                assert_eq!(
                    *value,
                    format!("v-{producer}-{part}-{i}-{}", "x".repeat(i % 200))
                );
            }
        }
    }

    let hops: u64 = b
        .metric_by_shard("keel_cross_shard_hops_total")
        .iter()
        .sum();
    let jobs: u64 = b
        .metric_by_shard("keel_cross_shard_jobs_total")
        .iter()
        .sum();
    assert!(
        hops >= 100,
        "requests for the other shard's partitions must cross the mesh: {hops} hops"
    );
    // Every hop sent was run by its target, exactly once. The /metrics scrapes read the other
    // shard's counters over the mesh too, but an observer's calls are not counted.
    assert_eq!(
        jobs, hops,
        "hops sent {hops}, jobs run {jobs}: a call went missing or ran twice"
    );
}

/// Hops sent by each shard since the last reading, `before`. A reading (a /metrics scrape,
/// which shard 0 answers by asking the other shard for its numbers) costs no counted hop.
fn hops_since(b: &Broker, before: &mut Vec<u64>) -> u64 {
    let now = b.metric_by_shard("keel_cross_shard_hops_total");
    let sent: u64 = now.iter().zip(before.iter()).map(|(n, o)| n - o).sum();
    *before = now;
    sent
}

fn produce_to(c: &mut Client, parts: &[i32], round: usize) -> Vec<(i32, i16, i64)> {
    let batches = parts
        .iter()
        .map(|&p| (p, batch(&[format!("r{round}-p{p}").as_bytes()])))
        .collect();
    let req = produce_request("split", batches);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    resp.responses[0]
        .partition_responses
        .iter()
        .map(|p| (p.index, p.error_code, p.base_offset))
        .collect()
}

/// A request is split once by owner shard and joined once: the partitions of the connection's
/// own shard cost no hop, and all of the other shard's partitions travel in one hop, however
/// many there are — for Produce and for Fetch.
#[test]
fn a_request_is_split_once_per_owner_shard() {
    const PARTS: i32 = 6;
    let b = Broker::start(&["--smp", "2"]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "split", PARTS);
    let mut before = b.metric_by_shard("keel_cross_shard_hops_total");
    assert_eq!(before.len(), 2, "--smp 2 runs two shards");
    // Quiet first (the new topic's image reaches the other shard over the mesh after
    // CreateTopics answers); then scrapes alone add no hop: three readings in a row of 0.
    let mut readings = Vec::new();
    while readings.len() < 100 && !readings.ends_with(&[0, 0, 0]) {
        std::thread::sleep(Duration::from_millis(20));
        readings.push(hops_since(&b, &mut before));
    }
    assert!(
        readings.ends_with(&[0, 0, 0]),
        "hops kept coming with no request in flight, or scrapes are counted: {readings:?}"
    );

    // Which partitions live on the connection's shard: a request for one alone hops or not.
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for p in 0..PARTS {
        assert_eq!(produce_to(&mut c, &[p], 0), vec![(p, 0, 0)]);
        match hops_since(&b, &mut before) {
            0 => local.push(p),
            1 => remote.push(p),
            n => panic!("one partition's request made {n} hops: partition {p}, local {local:?}, remote {remote:?}"),
        }
    }
    assert!(
        !local.is_empty() && remote.len() >= 2,
        "both shards own partitions: local {local:?}, remote {remote:?}"
    );

    // Every partition at once: one hop for all the remote ones.
    let all: Vec<i32> = (0..PARTS).collect();
    let answers = produce_to(&mut c, &all, 1);
    assert_eq!(answers, all.iter().map(|&p| (p, 0, 1)).collect::<Vec<_>>());
    assert_eq!(
        hops_since(&b, &mut before),
        1,
        "produce to {PARTS} partitions"
    );
    // Only the local ones: none. Only the remote ones: one.
    produce_to(&mut c, &local, 2);
    assert_eq!(hops_since(&b, &mut before), 0, "produce to {local:?}");
    produce_to(&mut c, &remote, 2);
    assert_eq!(hops_since(&b, &mut before), 1, "produce to {remote:?}");

    // Fetch of every partition: one hop, every record read back.
    let parts: Vec<(i32, i64, i32)> = all.iter().map(|&p| (p, 0, 1 << 20)).collect();
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("split", &parts, 0, 0, 1 << 24),
    );
    assert_eq!(
        hops_since(&b, &mut before),
        1,
        "fetch of {PARTS} partitions"
    );
    for part in &resp.responses[0].partitions {
        let p = part.partition_index;
        let want: Vec<(i64, Vec<u8>)> = [0, 1, 2]
            .iter()
            .map(|r| (*r as i64, format!("r{r}-p{p}").into_bytes()))
            .collect();
        assert_eq!(values(&part.records), want, "partition {p}");
    }
    assert_eq!(resp.responses[0].partitions.len(), PARTS as usize);
}
