//! Consumer lag on `/metrics` against the real `keel` binary, with librdkafka (the `rdkafka`
//! crate): keyed records go to a three-partition topic, a subscribed group consumes and commits
//! chosen offsets, and `/metrics` (parsed as Prometheus text) must show exactly those committed
//! offsets, `high watermark - committed` per partition, and the group's sum and maximum; the
//! same numbers a lag tool computes from OffsetFetch and ListOffsets. Then the group commits
//! more and the producer writes more, and the lag follows both. A second group, whose id needs
//! escaping in a label value, commits without joining (a "simple" consumer).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::Broker;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const PARTITIONS: i32 = 3;
const TOPIC: &str = "lag-orders";
const GROUP: &str = "lag-group";
/// A group id with a double quote and a backslash, which a label value must escape.
const ODD_GROUP: &str = "lag \"odd\" \\ group";

// ---- a small reader of the Prometheus text format -------------------------------------------

/// One sample line: `name{label="value",...} value`.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Reads a quoted label value after its opening quote; returns it unescaped and the rest.
fn label_value(s: &str) -> (String, &str) {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, &s[i + 1..]),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, c @ ('\\' | '"'))) => out.push(c),
                other => panic!("bad escape {other:?} in {s:?}"),
            },
            c => out.push(c),
        }
    }
    panic!("unterminated label value: {s:?}");
}

fn parse_sample(line: &str) -> Sample {
    let name_end = line.find(['{', ' ']).expect("a sample has a value");
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(body) = rest.strip_prefix('{') {
        rest = body;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest.split_once("=\"").expect("label=\"value\"");
            let (value, after) = label_value(after);
            assert!(
                labels.insert(key.to_string(), value).is_none(),
                "label {key} twice: {line}"
            );
            rest = after.strip_prefix(',').unwrap_or(after);
        }
    }
    let value = rest
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("value of {line}"));
    Sample {
        name,
        labels,
        value,
    }
}

/// Every sample; checks that each family's samples are together, after its `# TYPE` line
/// (a histogram's `_bucket`, `_sum` and `_count` samples belong to its family).
fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut typed = BTreeSet::new();
    let mut histograms = BTreeSet::new();
    let mut finished = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let name = t.split(' ').next().unwrap().to_string();
            if t.ends_with(" histogram") {
                histograms.insert(name.clone());
            }
            assert!(typed.insert(name.clone()), "two TYPE lines for {name}");
            if let Some(prev) = current.replace(name) {
                finished.insert(prev);
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let s = parse_sample(line);
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| s.name.strip_suffix(suffix))
            .filter(|f| histograms.contains(*f))
            .unwrap_or(&s.name);
        assert!(typed.contains(family), "{} has no TYPE line", s.name);
        assert!(!finished.contains(family), "{} is split: {line}", s.name);
        samples.push(s);
    }
    samples
}

/// What `/metrics` says of one group: committed offsets and lags by partition (of `TOPIC`),
/// and the group's lag sum and maximum.
#[derive(Debug, Default, PartialEq)]
struct GroupLag {
    committed: BTreeMap<i32, i64>,
    lag: BTreeMap<i32, i64>,
    sum: Option<i64>,
    max: Option<i64>,
}

fn group_lag(samples: &[Sample], group: &str) -> GroupLag {
    let mut out = GroupLag::default();
    for s in samples
        .iter()
        .filter(|s| s.labels.get("group").map(String::as_str) == Some(group))
    {
        let value = s.value as i64;
        assert_eq!(value as f64, s.value, "{s:?}");
        let partition = || -> i32 {
            assert_eq!(s.labels["topic"], TOPIC, "{s:?}");
            s.labels["partition"].parse().unwrap()
        };
        let fresh = match s.name.as_str() {
            "keel_group_committed_offset" => out.committed.insert(partition(), value).is_none(),
            "keel_group_lag" => out.lag.insert(partition(), value).is_none(),
            "keel_group_lag_sum" => out.sum.replace(value).is_none(),
            "keel_group_lag_max" => out.max.replace(value).is_none(),
            _ => true,
        };
        assert!(fresh, "a second sample: {s:?}");
    }
    out
}

fn expected(committed: &[(i32, i64)], high_watermarks: &[i64; 3]) -> GroupLag {
    let lag: BTreeMap<i32, i64> = committed
        .iter()
        .map(|&(p, c)| (p, (high_watermarks[p as usize] - c).max(0)))
        .collect();
    GroupLag {
        committed: committed.iter().copied().collect(),
        sum: (!lag.is_empty()).then(|| lag.values().sum()),
        max: lag.values().max().copied(),
        lag,
    }
}

#[test]
fn the_reader_unescapes_label_values() {
    let s = parse_sample(r#"m{group="a\"b\\c\nd",topic="t",partition="2"} -7"#);
    assert_eq!(s.name, "m");
    assert_eq!(s.labels["group"], "a\"b\\c\nd");
    assert_eq!(s.labels["partition"], "2");
    assert_eq!(s.value, -7.0);
    assert_eq!(parse_sample("plain 3").labels.len(), 0);
}

// ---- clients -----------------------------------------------------------------------------

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures_lite::future::block_on(f)
}

fn create_topic(bootstrap: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1));
    let res = block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap();
    assert!(res[0].is_ok(), "{res:?}");
}

/// Produces `count` keyed records to each partition (acks=all: each is below the high
/// watermark once `flush` returns).
fn produce(producer: &BaseProducer, counts: [usize; 3], round: &str) {
    for (p, &count) in counts.iter().enumerate() {
        for i in 0..count {
            let key = format!("{round}-key-{p}-{i}");
            let value = format!("{round}-value-{p}-{i}");
            let record = BaseRecord::to(TOPIC)
                .partition(p as i32)
                .key(&key)
                .payload(&value);
            producer.send(record).map_err(|(e, _)| e).unwrap();
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn consumer_config(bootstrap: &str, group: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", "classic")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50");
    c
}

fn offsets(committed: &[(i32, i64)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for &(p, o) in committed {
        tpl.add_partition_offset(TOPIC, p, Offset::Offset(o))
            .unwrap();
    }
    tpl
}

/// Lag as the lag tools compute it: OffsetFetch for the group, ListOffsets(latest) for the
/// end of each partition with a commit.
fn lag_from_kafka_apis(c: &BaseConsumer, group_label: &str) -> GroupLag {
    let mut all = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        all.add_partition(TOPIC, p);
    }
    let committed = c.committed_offsets(all, Duration::from_secs(10)).unwrap();
    let mut pairs = Vec::new();
    let mut ends = [0i64; 3];
    for e in committed.elements() {
        if let Offset::Offset(o) = e.offset() {
            pairs.push((e.partition(), o));
        }
        let (_, high) = c
            .fetch_watermarks(TOPIC, e.partition(), Duration::from_secs(10))
            .unwrap();
        ends[e.partition() as usize] = high;
    }
    let out = expected(&pairs, &ends);
    eprintln!("{group_label}: lag from OffsetFetch + ListOffsets: {out:?}");
    out
}

#[test]
fn lag_per_group_and_partition_follows_commits_and_produces() {
    let b = Broker::start(&[]);
    let bootstrap = b.bootstrap();
    create_topic(&bootstrap);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .set("enable.idempotence", "false")
        .create()
        .unwrap();
    let mut high_watermarks = [20i64, 30, 10];
    produce(&producer, [20, 30, 10], "first");

    // A subscribed member reads part of the records, then commits chosen offsets for two of
    // the three partitions.
    let member: BaseConsumer = consumer_config(&bootstrap, GROUP).create().unwrap();
    member.subscribe(&[TOPIC]).unwrap();
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while read < 25 {
        assert!(Instant::now() < deadline, "read {read} records of 60");
        if let Some(m) = member.poll(Duration::from_millis(50)) {
            m.unwrap();
            read += 1;
        }
    }
    let mut committed = vec![(0, 5), (1, 30)];
    member
        .commit(&offsets(&committed), CommitMode::Sync)
        .unwrap();

    // A "simple" consumer (no subscription, no generation) of another group.
    let simple: BaseConsumer = consumer_config(&bootstrap, ODD_GROUP).create().unwrap();
    let odd_committed = vec![(2, 3)];
    simple
        .commit(&offsets(&odd_committed), CommitMode::Sync)
        .unwrap();

    let check = |committed: &[(i32, i64)], odd: &[(i32, i64)], hw: &[i64; 3], what: &str| {
        let text = b.admin_get("/metrics");
        let samples = parse_metrics(&text);
        let want = expected(committed, hw);
        assert_eq!(group_lag(&samples, GROUP), want, "{what}:\n{text}");
        assert_eq!(lag_from_kafka_apis(&member, GROUP), want, "{what}");
        let want_odd = expected(odd, hw);
        assert_eq!(group_lag(&samples, ODD_GROUP), want_odd, "{what}:\n{text}");
        assert_eq!(lag_from_kafka_apis(&simple, ODD_GROUP), want_odd, "{what}");
        let omitted: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.name == "keel_group_lag_partitions_omitted")
            .collect();
        assert_eq!(omitted.len(), 1);
        assert_eq!(omitted[0].value, 0.0);
    };
    check(&committed, &odd_committed, &high_watermarks, "first commit");
    // Spelled out once, so the helper cannot hide a mistake of its own.
    let samples = parse_metrics(&b.admin_get("/metrics"));
    assert_eq!(
        group_lag(&samples, GROUP),
        GroupLag {
            committed: [(0, 5), (1, 30)].into(),
            lag: [(0, 15), (1, 0)].into(),
            sum: Some(15),
            max: Some(15),
        }
    );
    assert_eq!(
        group_lag(&samples, ODD_GROUP),
        GroupLag {
            committed: [(2, 3)].into(),
            lag: [(2, 7)].into(),
            sum: Some(7),
            max: Some(7),
        }
    );

    // The member commits further: partition 0 caught up, partition 2 now has a commit.
    committed = vec![(0, 20), (1, 30), (2, 4)];
    member
        .commit(&offsets(&committed), CommitMode::Sync)
        .unwrap();
    check(
        &committed,
        &odd_committed,
        &high_watermarks,
        "second commit",
    );

    // New records move the high watermarks: the lag grows without a commit.
    produce(&producer, [0, 7, 2], "second");
    high_watermarks = [20, 37, 12];
    check(
        &committed,
        &odd_committed,
        &high_watermarks,
        "after producing",
    );
    let samples = parse_metrics(&b.admin_get("/metrics"));
    assert_eq!(
        group_lag(&samples, GROUP),
        GroupLag {
            committed: [(0, 20), (1, 30), (2, 4)].into(),
            lag: [(0, 0), (1, 7), (2, 8)].into(),
            sum: Some(15),
            max: Some(8),
        }
    );

    // A commit past the end (allowed, as in Kafka) shows no negative lag.
    committed = vec![(0, 25), (1, 37), (2, 12)];
    member
        .commit(&offsets(&committed), CommitMode::Sync)
        .unwrap();
    check(&committed, &odd_committed, &high_watermarks, "caught up");
    let samples = parse_metrics(&b.admin_get("/metrics"));
    let g = group_lag(&samples, GROUP);
    assert_eq!(g.lag, [(0, 0), (1, 0), (2, 0)].into());
    assert_eq!((g.sum, g.max), (Some(0), Some(0)));
}
