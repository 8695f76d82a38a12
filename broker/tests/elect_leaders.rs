//! Preferred leaders on a real cluster: ElectLeaders (v0-2) and `keel cluster elect-leaders`
//! move leadership back to the preferred replica after a restart, with a new leader epoch and
//! without losing a record an acks=all producer wrote during the election; Kafka's error codes
//! per partition; an unclean election of an offline partition; and the controller's automatic
//! rebalance (`auto.leader.rebalance.enable`) returning leadership on its own, or, disabled,
//! not.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::client::{topic, Client};
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::*;
use rdkafka::producer::{BaseRecord, Producer};
use serde_json::Value;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
const ELECTION_NOT_NEEDED: i16 = 84;
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// ElectLeaders at `version` through `b`; `topics` None = every partition.
fn elect(
    b: &Broker,
    version: i16,
    election_type: i8,
    topics: Option<&[(&str, &[i32])]>,
) -> ElectLeadersResponse {
    let mut c = Client::connect(&b.bootstrap());
    let req = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_timeout_ms(10_000)
        .with_topic_partitions(topics.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    elect_leaders_request::TopicPartitions::default()
                        .with_topic(topic(t))
                        .with_partitions(ps.to_vec())
                })
                .collect()
        }));
    c.send(ApiKey::ElectLeaders, version, &req)
}

/// (topic, partition, error code) of every result, in answer order.
fn codes(resp: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
    resp.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(move |p| (t.topic.0.to_string(), p.partition_id, p.error_code))
        })
        .collect()
}

fn tp(t: &str, p: i32, code: i16) -> (String, i32, i16) {
    (t.to_string(), p, code)
}

/// Leader and leader epoch of each partition of `name`, as `b` reports them.
fn leaders(b: &Broker, name: &str, partitions: i32) -> Vec<(i32, i32)> {
    (0..partitions)
        .map(|p| {
            let (l, e, _, _) = partition(b, name, p).expect("partition");
            (l, e)
        })
        .collect()
}

/// Rotated replica lists on brokers 1-3: partition p prefers broker 1 + p % 3.
fn rotated(partitions: i32) -> Vec<Vec<i32>> {
    (0..partitions)
        .map(|p| (0..3).map(|k| 1 + (p + k) % 3).collect())
        .collect()
}

/// `keel cluster elect-leaders ARGS --json -b BROKER`: exit code and the JSON document.
fn cli_elect(b: &Broker, args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["cluster", "elect-leaders"])
        .args(args)
        .args(["--json", "-b", &b.bootstrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    (out.status.code().unwrap_or(-1), doc)
}

/// With the automatic rebalance off, leadership stays where a restart left it until
/// ElectLeaders (or the CLI) moves it back; every error code; an unclean election.
#[test]
fn elect_leaders_moves_leadership_back_and_answers_kafkas_codes() {
    let _serial = serial();
    // The check interval is short, so a rebalance that ran although disabled would show.
    let mut nodes = cluster(
        3,
        &[
            "--set",
            "auto.leader.rebalance.enable=false",
            "--set",
            "leader.imbalance.check.interval.seconds=1",
        ],
    );
    let mut four = learner(&nodes, 4, &["--set", "auto.leader.rebalance.enable=false"]);
    // 6 partitions: each broker is the preferred replica of two, and leads them.
    create_assigned(&nodes[0], "t", &rotated(6), 2);
    for p in 0..6 {
        wait_for_full_isr(&nodes[0], "t", p);
    }
    assert_eq!(
        leaders(&nodes[0], "t", 6)
            .iter()
            .map(|(l, _)| *l)
            .collect::<Vec<_>>(),
        [1, 2, 3, 1, 2, 3]
    );

    // Broker 1 (preferred for 0 and 3) stops: both move to another ISR member.
    nodes[index_of(1)].stop();
    let b2 = &nodes[index_of(2)];
    wait_until(
        "leadership of 0 and 3 moves",
        Duration::from_secs(15),
        || {
            let l = leaders(b2, "t", 6);
            l[0].0 > 1 && l[3].0 > 1
        },
    );
    // While it is down: PREFERRED_LEADER_NOT_AVAILABLE; UNCLEAN for a led partition is not
    // needed.
    let resp = elect(b2, 2, PREFERRED, Some(&[("t", &[0])]));
    assert_eq!(codes(&resp), [tp("t", 0, PREFERRED_LEADER_NOT_AVAILABLE)]);
    assert_eq!(resp.error_code, 0);
    let resp = elect(b2, 1, UNCLEAN, Some(&[("t", &[0])]));
    assert_eq!(codes(&resp), [tp("t", 0, ELECTION_NOT_NEEDED)]);

    nodes[index_of(1)].restart_after_stop();
    for p in 0..6 {
        wait_for_full_isr(&nodes[index_of(2)], "t", p);
    }
    let b2 = &nodes[index_of(2)];
    let moved = leaders(b2, "t", 6);
    assert!(moved[0].0 != 1 && moved[3].0 != 1, "{moved:?}");
    // Disabled: three check intervals pass with broker 1 in every ISR, and nothing moves.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(leaders(b2, "t", 6), moved, "the rebalance is off");

    // An acks=all producer writes to partition 0 while ElectLeaders moves it.
    let reports = Reports::default();
    let writing = Arc::new(AtomicBool::new(true));
    let sent_so_far = Arc::new(AtomicUsize::new(0));
    let producer_thread = {
        let reports = reports.clone();
        let bootstrap = b2.bootstrap();
        let writing = writing.clone();
        let sent_so_far = sent_so_far.clone();
        std::thread::spawn(move || {
            let producer = producer(&bootstrap, &reports);
            let mut sent = 0;
            // At least 300 records, and on until the election is done.
            while sent < 300 || writing.load(Ordering::Relaxed) {
                let key = format!("k-{sent}");
                let value = format!("value-of-{key}");
                if producer
                    .send(BaseRecord::to("t").partition(0).key(&key).payload(&value))
                    .is_ok()
                {
                    sent += 1;
                    sent_so_far.store(sent, Ordering::Relaxed);
                }
                producer.poll(Duration::from_millis(5));
            }
            producer.flush(Duration::from_secs(60)).unwrap();
            sent
        })
    };
    wait_until("the producer is writing", Duration::from_secs(10), || {
        sent_so_far.load(Ordering::Relaxed) > 20
    });
    // Partition 0 (named twice: both answered), 1 and 2 already preferred-led; not 3.
    let resp = elect(b2, 2, PREFERRED, Some(&[("t", &[0, 1, 2, 0])]));
    assert_eq!(resp.error_code, 0);
    assert_eq!(
        codes(&resp),
        [
            tp("t", 0, 0),
            tp("t", 1, ELECTION_NOT_NEEDED),
            tp("t", 2, ELECTION_NOT_NEEDED),
            tp("t", 0, 0),
        ]
    );
    // Answered once installed on the answering broker: its Metadata has the new leader.
    let after = leaders(b2, "t", 6);
    assert_eq!(after[0].0, 1);
    assert!(after[0].1 > moved[0].1, "{moved:?} -> {after:?}");
    assert_eq!(after[3], moved[3], "partition 3 was not asked for");
    let sent_by_then = sent_so_far.load(Ordering::Relaxed);
    wait_until(
        "the producer writes on after the election",
        Duration::from_secs(10),
        || sent_so_far.load(Ordering::Relaxed) > sent_by_then + 20,
    );
    writing.store(false, Ordering::Relaxed);
    let sent = producer_thread.join().unwrap();
    let acked = acked(&reports);
    assert_eq!(acked.len(), sent, "every record acknowledged");
    let last = acked.iter().map(|(_, _, o)| *o).max().unwrap();
    check_acknowledged(&acked, &read_all(&b2.bootstrap(), "t", 0, last));

    // v0 (preferred only, no top-level code); an unknown type; unknown topic and partition.
    let resp = elect(b2, 0, PREFERRED, Some(&[("t", &[0])]));
    assert_eq!(codes(&resp), [tp("t", 0, ELECTION_NOT_NEEDED)]);
    let resp = elect(b2, 1, 2, Some(&[("t", &[0, 1])]));
    assert_eq!(resp.error_code, INVALID_REQUEST);
    assert_eq!(
        codes(&resp),
        [tp("t", 0, INVALID_REQUEST), tp("t", 1, INVALID_REQUEST)]
    );
    let too_many: Vec<i32> = (0..100_001).map(|p| p % 6).collect();
    let resp = elect(b2, 2, PREFERRED, Some(&[("t", &too_many)]));
    assert_eq!(resp.error_code, INVALID_REQUEST);
    assert!(resp.replica_election_results.is_empty());
    let resp = elect(b2, 2, PREFERRED, Some(&[("nope", &[0]), ("t", &[6, -1])]));
    assert_eq!(
        codes(&resp),
        [
            tp("nope", 0, UNKNOWN_TOPIC_OR_PARTITION),
            tp("t", 6, UNKNOWN_TOPIC_OR_PARTITION),
            tp("t", -1, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );

    // The CLI moves the rest of topic t back (partition 3); the others need nothing.
    let (code, doc) = cli_elect(&nodes[index_of(3)], &["--topic", "t"]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["election_type"], "preferred");
    let results: BTreeMap<i64, (Value, Value)> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["topic"], "t");
            (
                r["partition"].as_i64().unwrap(),
                (r["error"].clone(), r["leader"].clone()),
            )
        })
        .collect();
    assert_eq!(results.len(), 6, "{doc}");
    for (p, (error, leader)) in &results {
        let expected = if *p == 3 {
            Value::Null
        } else {
            Value::from("ELECTION_NOT_NEEDED")
        };
        assert_eq!(*error, expected, "partition {p}: {doc}");
        assert_eq!(*leader, Value::from(1 + p % 3), "partition {p}: {doc}");
    }
    // Everything preferred-led now: null (every partition) answers no partition of t.
    let resp = elect(b2, 2, PREFERRED, None);
    assert_eq!(resp.error_code, 0);
    let t = resp
        .replica_election_results
        .iter()
        .find(|r| r.topic.0.as_str() == "t")
        .expect("every topic is answered");
    assert!(t.partition_result.is_empty(), "{resp:?}");
    assert!(
        codes(&resp)
            .iter()
            .all(|(_, _, c)| *c != ELECTION_NOT_NEEDED),
        "{resp:?}"
    );
    let (code, doc) = cli_elect(b2, &["--all", "--type", "preferred"]);
    assert_eq!(code, 0, "{doc}");

    // UNCLEAN: partition u-0 on [4, 3]. 3 stops (ISR [4]), then 4 (offline, ISR [4]).
    create_assigned(&nodes[0], "u", &[vec![4, 3]], 1);
    wait_until(
        "u-0 has both replicas in its ISR",
        Duration::from_secs(15),
        || partition(&nodes[0], "u", 0).is_some_and(|(l, _, _, isr)| l == 4 && isr.len() == 2),
    );
    nodes[index_of(3)].stop();
    four.stop();
    let b1 = &nodes[index_of(1)];
    wait_until("u-0 is offline", Duration::from_secs(15), || {
        partition(b1, "u", 0).is_some_and(|(l, _, _, isr)| l == -1 && isr == [4])
    });
    let resp = elect(b1, 1, UNCLEAN, Some(&[("u", &[0])]));
    assert_eq!(codes(&resp), [tp("u", 0, ELIGIBLE_LEADERS_NOT_AVAILABLE)]);
    // 3 comes back outside the ISR: a clean election leaves u-0 offline.
    nodes[index_of(3)].restart_after_stop();
    let b1 = &nodes[index_of(1)];
    wait_until("broker 3 is back", Duration::from_secs(15), || {
        metadata(b1).brokers.iter().any(|b| b.node_id.0 == 3)
    });
    let (_, offline_epoch, _, _) = partition(b1, "u", 0).unwrap();
    assert_eq!(partition(b1, "u", 0).unwrap().0, -1);
    let resp = elect(b1, 2, PREFERRED, Some(&[("u", &[0])]));
    assert_eq!(codes(&resp), [tp("u", 0, PREFERRED_LEADER_NOT_AVAILABLE)]);
    let (code, doc) = cli_elect(
        b1,
        &["--topic", "u", "--partition", "0", "--type", "unclean"],
    );
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["results"][0]["error"], Value::Null, "{doc}");
    assert_eq!(doc["results"][0]["leader"], 3, "{doc}");
    let (leader, epoch, _, isr) = partition(b1, "u", 0).unwrap();
    assert_eq!((leader, isr), (3, vec![3]));
    assert!(epoch > offline_epoch);
    // The partition takes writes again, at its new leader.
    let b3 = &nodes[index_of(3)];
    wait_until(
        "u-0 takes an acks=all write",
        Duration::from_secs(10),
        || raw_produce(b3, "u", 0, -1, &[b"after-unclean"]).is_ok(),
    );
}

/// With `leader.imbalance.check.interval.seconds=1`, leadership returns to the preferred
/// replica on its own once it is back in the ISR after a restart.
#[test]
fn automatic_rebalance_returns_leadership_after_a_restart() {
    let _serial = serial();
    let mut nodes = cluster(3, &["--set", "leader.imbalance.check.interval.seconds=1"]);
    create_assigned(&nodes[0], "t", &rotated(3), 2);
    for p in 0..3 {
        wait_for_full_isr(&nodes[0], "t", p);
    }
    let before = leaders(&nodes[0], "t", 3);
    assert_eq!(before.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2, 3]);

    nodes[index_of(2)].stop();
    let b1 = &nodes[index_of(1)];
    wait_until("leadership of 1 moves", Duration::from_secs(15), || {
        leaders(b1, "t", 3)[1].0 == 3
    });
    let moved = leaders(b1, "t", 3);
    nodes[index_of(2)].restart_after_stop();
    let b1 = &nodes[index_of(1)];
    wait_until("broker 2 rejoins the ISR", Duration::from_secs(20), || {
        partition(b1, "t", 1).is_some_and(|(_, _, _, isr)| isr.contains(&2))
    });
    let took = wait_until(
        "leadership returns to broker 2",
        Duration::from_secs(10),
        || leaders(b1, "t", 3)[1].0 == 2,
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let after = leaders(b1, "t", 3);
    assert!(after[1].1 > moved[1].1, "{moved:?} -> {after:?}");
    assert_eq!(after.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2, 3]);
}
