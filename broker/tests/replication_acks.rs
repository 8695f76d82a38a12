//! acks=all's error answers and KIP-207 across real `keel` processes on loopback, and the
//! batching of ISR changes into AlterPartition requests: each test pauses (SIGSTOP) or kills
//! brokers at a chosen moment and asserts the exact error code, when it arrives, and what a
//! consumer reads afterwards.
//!
//! The tests share the machine's cores with the other replication tests, so they run one at
//! a time (the harness's global lock); every wait is bounded.

mod common;

use std::time::{Duration, Instant};

use common::client::{list_offsets_request, Client};
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::*;

const REQUEST_TIMED_OUT: i16 = 7;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
const OFFSET_NOT_AVAILABLE: i16 = 78;

/// [`raw_produce_within`], timed: the answer and how long it took.
fn produce_within(
    b: &Broker,
    name: &str,
    p: i32,
    acks: i16,
    values: &[&[u8]],
    timeout_ms: i32,
) -> (Result<i64, i16>, Duration) {
    let started = Instant::now();
    let answer = raw_produce_within(b, name, p, acks, values, timeout_ms);
    (answer, started.elapsed())
}

/// ListOffsets v7 for partition 0 of `name` at `timestamp` (-1 latest, -2 earliest):
/// (error code, offset).
fn list_offset(b: &Broker, name: &str, timestamp: i64, read_committed: bool) -> (i16, i64) {
    let mut c = Client::connect(&b.bootstrap());
    let req = list_offsets_request(name, 0, timestamp).with_isolation_level(read_committed as i8);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// Waits until partition 0 of `name` has a leader and all `rf` replicas in its ISR, as
/// `nodes[0]` and the leader itself both see it (the leader installs the image that names the
/// full ISR on its own time: a write it takes before would see a smaller ISR); returns
/// (leader, leader epoch, replicas in replica order).
fn wait_isr_full(nodes: &[Broker], name: &str, rf: usize) -> (i32, i32, Vec<i32>) {
    let full =
        |b: &Broker| partition(b, name, 0).filter(|(l, _, _, isr)| *l > 0 && isr.len() == rf);
    let mut seen = None;
    wait_until("the ISR has every replica", Duration::from_secs(20), || {
        seen = full(&nodes[0]).filter(|(l, e, _, _)| {
            full(&nodes[index_of(*l)]).is_some_and(|(l2, e2, _, _)| (l2, e2) == (*l, *e))
        });
        seen.is_some()
    });
    let (leader, epoch, replicas, _) = seen.expect("waited for it");
    (leader, epoch, replicas)
}

/// The values read back from partition 0 of `name`, by offset, up to offset `last`.
fn read_values(b: &Broker, name: &str, last: i64) -> Vec<(i64, String)> {
    read_all(&b.bootstrap(), name, 0, last)
        .into_iter()
        .map(|(offset, (_, value))| (offset, value))
        .collect()
}

fn strings(values: &[(i64, &str)]) -> Vec<(i64, String)> {
    values.iter().map(|(o, v)| (*o, v.to_string())).collect()
}

#[test]
fn acks_all_answers_request_timed_out_when_the_high_watermark_does_not_pass_the_batch_in_time() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    create(&nodes[0], "slow-isr", 1, 3, 2);
    let (leader, _, replicas) = wait_isr_full(&nodes, "slow-isr", 3);
    let l = index_of(leader);
    assert_eq!(
        raw_produce(&nodes[l], "slow-isr", 0, -1, &[b"before"]),
        Ok(0)
    );
    let followers: Vec<usize> = replicas
        .iter()
        .filter(|r| **r != leader)
        .map(|r| index_of(*r))
        .collect();
    // Both followers stop while they are in the ISR: the high watermark cannot pass the
    // next batch, and within 1 s (a third of replica.lag.time.max.ms and of the session
    // timeout) nobody leaves the ISR, so neither NOT_ENOUGH_REPLICAS answer applies.
    for f in &followers {
        nodes[*f].signal("STOP");
    }
    let (answer, took) = produce_within(&nodes[l], "slow-isr", 0, -1, &[b"late"], 1000);
    for f in &followers {
        nodes[*f].signal("CONT");
    }
    assert_eq!(answer, Err(REQUEST_TIMED_OUT), "answered after {took:?}");
    assert!(
        took >= Duration::from_millis(990) && took < Duration::from_millis(3000),
        "REQUEST_TIMED_OUT came after {took:?}, not at the request's timeout_ms of 1000"
    );
    // The leader kept the record it timed out on: once the followers are back it commits
    // at the next offset, and a consumer reads both.
    wait_until(
        "the high watermark passes the timed-out record",
        Duration::from_secs(30),
        || list_offset(&nodes[l], "slow-isr", -1, false) == (0, 2),
    );
    assert_eq!(
        read_values(&nodes[l], "slow-isr", 1),
        strings(&[(0, "before"), (1, "late")])
    );
}

#[test]
fn acks_all_answers_not_enough_replicas_after_append_when_the_isr_shrinks_below_the_minimum_while_it_waits(
) {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    // min.insync.replicas 3 of 3: one stopped follower takes the ISR below the minimum, and
    // the two others keep the metadata quorum, so the shrink commits while the write waits.
    create(&nodes[0], "shrinking", 1, 3, 3);
    let (leader, _, replicas) = wait_isr_full(&nodes, "shrinking", 3);
    let l = index_of(leader);
    assert_eq!(
        raw_produce(&nodes[l], "shrinking", 0, -1, &[b"before"]),
        Ok(0)
    );
    let stopped = *replicas.iter().find(|r| **r != leader).unwrap();
    nodes[index_of(stopped)].signal("STOP");
    // The timeout is far past replica.lag.time.max.ms and the session timeout (3 s each).
    let (answer, took) = produce_within(&nodes[l], "shrinking", 0, -1, &[b"after"], 20_000);
    let isr_then = partition(&nodes[l], "shrinking", 0).map(|(_, _, _, isr)| isr);
    nodes[index_of(stopped)].signal("CONT");
    assert_eq!(
        answer,
        Err(NOT_ENOUGH_REPLICAS_AFTER_APPEND),
        "answered after {took:?}"
    );
    assert!(
        took >= Duration::from_millis(2000) && took < Duration::from_secs(15),
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND came after {took:?}: not when the ISR shrank"
    );
    let isr_then = isr_then.expect("the partition exists");
    assert!(
        !isr_then.contains(&stopped) && isr_then.len() == 2,
        "the answer came with the ISR at {isr_then:?}"
    );
    // The record stays in the leader's log: once the follower is back in the ISR it is
    // committed and read at the offset after the first.
    wait_until(
        "the stopped follower rejoins and the high watermark passes the record",
        Duration::from_secs(30),
        || list_offset(&nodes[l], "shrinking", -1, false) == (0, 2),
    );
    assert_eq!(
        read_values(&nodes[l], "shrinking", 1),
        strings(&[(0, "before"), (1, "after")])
    );
}

#[test]
fn a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch_start() {
    let _serial = serial();
    // Five voters, so the metadata quorum survives the leader killed and a follower stopped.
    let mut nodes = cluster(5, &[]);
    create(&nodes[0], "kip207", 1, 3, 2);
    let (leader, epoch, replicas) = wait_isr_full(&nodes, "kip207", 3);
    let committed: Vec<String> = (0..5).map(|i| format!("committed-{i}")).collect();
    for (i, v) in committed.iter().enumerate() {
        assert_eq!(
            raw_produce(&nodes[index_of(leader)], "kip207", 0, -1, &[v.as_bytes()]),
            Ok(i as i64)
        );
    }
    // A new leader drops no follower while it takes up its partition (it did, when its ISR
    // check ran before it knew its followers, and the first write got
    // NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    assert_eq!(
        counter(&nodes[index_of(leader)], "keel_isr_shrinks_total"),
        0
    );
    // `next` precedes `stopped` in replica order, so it is the one elected from the ISR.
    let followers: Vec<i32> = replicas.iter().copied().filter(|r| *r != leader).collect();
    let (next, stopped) = (followers[0], followers[1]);
    let watcher = (1..=5)
        .find(|id| !replicas.contains(id))
        .map(index_of)
        .unwrap();
    let stopped_at = Instant::now();
    nodes[index_of(stopped)].signal("STOP");
    // acks=1: the leader and `next` hold these, but the high watermark stays at 5 while the
    // stopped follower is still in the ISR.
    assert_eq!(
        raw_produce(
            &nodes[index_of(leader)],
            "kip207",
            0,
            1,
            &[b"uncommitted-0", b"uncommitted-1"]
        ),
        Ok(5)
    );
    let lag = format!(
        "keel_follower_lag_records{{topic=\"kip207\",partition=\"0\",follower=\"{next}\"}} 0"
    );
    wait_until(
        "the next leader has the acks=1 records",
        Duration::from_secs(2),
        || nodes[index_of(leader)].metrics().lines().any(|m| m == lag),
    );
    nodes[index_of(leader)].kill9();
    assert!(
        stopped_at.elapsed() < Duration::from_millis(2500),
        "the leader died {:?} after the follower stopped: the ISR may have shrunk first",
        stopped_at.elapsed()
    );
    wait_until("the next follower leads", Duration::from_secs(30), || {
        partition(&nodes[watcher], "kip207", 0).is_some_and(|(l, e, _, _)| l == next && e > epoch)
    });
    let n = index_of(next);
    wait_until(
        "the new leader takes up its epoch",
        Duration::from_secs(10),
        || list_offset(&nodes[n], "kip207", -1, false).0 != 6,
    );
    // Its epoch starts at 7 and its high watermark is at most 5. It stays there: the ISR is
    // the new leader alone (below min.insync.replicas), or still holds the stopped follower,
    // which lacks offsets 5 and 6. So latest is not available, for either isolation level,
    // and stays so; earliest is (Kafka answers it whatever the high watermark).
    for _ in 0..3 {
        assert_eq!(
            list_offset(&nodes[n], "kip207", -1, false),
            (OFFSET_NOT_AVAILABLE, -1)
        );
        assert_eq!(
            list_offset(&nodes[n], "kip207", -1, true),
            (OFFSET_NOT_AVAILABLE, -1)
        );
        assert_eq!(list_offset(&nodes[n], "kip207", -2, false), (0, 0));
        std::thread::sleep(Duration::from_millis(300));
    }
    // The stopped follower and the old leader come back, catch up to the epoch start and
    // rejoin: latest is the epoch start, and every record is read at its offset.
    nodes[index_of(stopped)].signal("CONT");
    nodes[index_of(leader)].restart_after_stop();
    wait_until(
        "the new leader's high watermark reaches its epoch start",
        Duration::from_secs(30),
        || list_offset(&nodes[n], "kip207", -1, false) == (0, 7),
    );
    assert_eq!(list_offset(&nodes[n], "kip207", -1, true), (0, 7));
    let mut expected: Vec<(i64, String)> = committed
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v.clone()))
        .collect();
    expected.extend(strings(&[(5, "uncommitted-0"), (6, "uncommitted-1")]));
    assert_eq!(read_values(&nodes[n], "kip207", 6), expected);
}

/// Sum over `b`'s shards of a counter.
fn counter(b: &Broker, name: &str) -> u64 {
    b.metric_by_shard(name).iter().sum()
}

#[test]
fn the_isr_shrinks_of_many_partitions_travel_in_fewer_alter_partition_requests() {
    let _serial = serial();
    // The lag time well under the session timeout: the leaders shrink the ISRs (through
    // AlterPartition) long before the controller would fence the stopped broker. Short
    // follower long polls keep the partitions' last caught-up times close together, so one
    // leader shard's partitions mostly fall out of sync in the same ISR check.
    let nodes = cluster(
        3,
        &[
            "--set",
            "replica.lag.time.max.ms=2000",
            "--set",
            "broker.session.timeout.ms=15000",
            "--set",
            "replica.fetch.wait.max.ms=50",
        ],
    );
    let partitions = 24;
    create(&nodes[0], "many-isrs", partitions, 3, 1);
    wait_until(
        "every ISR has all three replicas",
        Duration::from_secs(30),
        || {
            (0..partitions).all(|p| {
                partition(&nodes[0], "many-isrs", p)
                    .is_some_and(|(l, _, _, isr)| l > 0 && isr.len() == 3)
            })
        },
    );
    // Not the metadata quorum's leader: a stopped leader would hold every AlterPartition
    // request sent to it until the controller call's 10 s deadline.
    let quorum_leader = quorum_leader(&nodes[0]);
    let victim = (1..=3).rev().find(|id| *id != quorum_leader).unwrap();
    let affected: Vec<i32> = (0..partitions)
        .filter(|p| partition(&nodes[0], "many-isrs", *p).is_some_and(|(l, ..)| l != victim))
        .collect();
    assert!(
        affected.len() >= 8,
        "{} partitions led elsewhere",
        affected.len()
    );
    let others: Vec<&Broker> = (1..=3)
        .filter(|id| *id != victim)
        .map(|id| &nodes[index_of(id)])
        .collect();
    let totals = |name: &str| -> u64 { others.iter().map(|b| counter(b, name)).sum() };
    let before = (
        totals("keel_isr_shrinks_total"),
        totals("keel_alter_partition_requests_total"),
        totals("keel_alter_partition_partitions_total"),
    );
    nodes[index_of(victim)].signal("STOP");
    wait_until(
        "every partition led elsewhere drops the stopped broker from its ISR",
        Duration::from_secs(10),
        || {
            affected.iter().all(|p| {
                partition(others[0], "many-isrs", *p)
                    .is_some_and(|(_, _, _, isr)| !isr.contains(&victim) && isr.len() == 2)
            })
        },
    );
    let shrinks = totals("keel_isr_shrinks_total") - before.0;
    let requests = totals("keel_alter_partition_requests_total") - before.1;
    let carried = totals("keel_alter_partition_partitions_total") - before.2;
    nodes[index_of(victim)].signal("CONT");
    let n = affected.len() as u64;
    eprintln!("{n} partitions shrank in {requests} AlterPartition requests ({carried} items)");
    assert_eq!(shrinks, n, "one shrink per partition led elsewhere");
    assert_eq!(carried, n, "each shrink travelled once");
    // Four leader shards each shrink theirs in one ISR check (rarely two): one request each.
    assert!(
        requests * 2 <= n,
        "{n} partitions shrank in {requests} AlterPartition requests: not batched"
    );
}
