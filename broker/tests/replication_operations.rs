//! What an operator sees of replication, on real brokers (RF 3, min ISR 2): the
//! replication metrics, `keel topic describe`'s ISR and ELR, and `keel profile`'s replication
//! columns while followers fetch, then while both followers are stopped (the ISR shrinks to the
//! leader, the followers become eligible leader replicas) and after they come back. Also that
//! retention runs on followers: their own logs drop old segments, not only the leader's.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::replicated::*;
use common::Broker;
use serde_json::Value;

/// The sum over shards of a counter or gauge without labels other than `shard`; a gauge
/// without labels is read as is.
fn metric(b: &Broker, name: &str) -> u64 {
    let text = b.metrics();
    let by_shard: u64 = b.metric_by_shard(name).iter().sum();
    let plain = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64);
    by_shard + plain
}

/// `keel_follower_lag_records` for one follower of `topic` partition 0 (None: not reported).
fn follower_lag(b: &Broker, topic: &str, follower: i32) -> Option<u64> {
    let prefix = format!(
        "keel_follower_lag_records{{topic=\"{topic}\",partition=\"0\",follower=\"{follower}\"}} "
    );
    b.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().parse().unwrap()))
}

/// After both `followers` stopped and the ISR shrank to the leader, below min ISR 2: they are
/// eligible leader replicas (KIP-966). Both, when one ISR check dropped them together; else
/// only the one dropped last, since the first left while the ISR was still at the minimum (the
/// high watermark could then move without it). Never empty, never another broker.
fn assert_elr_of_stopped(d: &Value, followers: &[i32]) {
    let elr = ids(&d["elr"]);
    let last_or_both = !elr.is_empty()
        && elr.len() <= followers.len()
        && elr
            .iter()
            .all(|e| followers.iter().any(|f| i64::from(*f) == *e));
    assert!(last_or_both, "ELR {elr:?} of followers {followers:?}: {d}");
}

#[test]
fn replication_shows_in_metrics_describe_and_profile() {
    let _serial = serial();
    // Five voters, so the metadata quorum outlives both followers being stopped; the lag time
    // under the session timeout, so the leader shrinks the ISR before the controller fences
    // the stopped brokers (either takes them out; only the first is the leader's shrink).
    let nodes = cluster(5, &["--set", "replica.lag.time.max.ms=1500"]);
    create(&nodes[0], "ops", 1, 3, 2);
    wait_for_full_isr(&nodes[0], "ops", 0);
    let (leader, _, replicas, _) = partition(&nodes[0], "ops", 0).unwrap();
    let l = &nodes[index_of(leader)];
    let followers: Vec<i32> = replicas.iter().copied().filter(|r| *r != leader).collect();

    // A profile of the leader while acks=all writes replicate: its shard serves the followers.
    let out = tempfile::tempdir().unwrap();
    let profile = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["profile", "--duration", "3s", "--admin"])
        .arg(format!("127.0.0.1:{}", l.admin_port))
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let value = vec![b'x'; 10_000];
    for _ in 0..100 {
        raw_produce(l, "ops", 0, -1, &[&value]).unwrap();
    }
    let profiled = profile.wait_with_output().unwrap();
    assert!(
        profiled.status.success(),
        "{}",
        String::from_utf8_lossy(&profiled.stderr)
    );
    let stdout = String::from_utf8_lossy(&profiled.stdout);
    assert!(
        stdout.contains("repl-out/s") && stdout.contains("repl-in/s"),
        "{stdout}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("profile.json")).unwrap())
            .unwrap();
    let served: f64 = report["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["replication"]["served_bytes_per_s"].as_f64().unwrap())
        .sum();
    // 100 records of 10 kB to two followers inside a 3 s window.
    assert!(served > 100_000.0, "served {served} B/s: {stdout}");

    // The counters and gauges of a healthy partition.
    assert!(metric(l, "keel_replica_served_bytes_total") >= 2 * 1_000_000);
    for f in &followers {
        assert!(metric(&nodes[index_of(*f)], "keel_replica_fetch_bytes_total") >= 1_000_000);
    }
    wait_until("no follower lags", Duration::from_secs(10), || {
        followers
            .iter()
            .all(|f| follower_lag(l, "ops", *f) == Some(0))
    });
    assert_eq!(metric(l, "keel_under_replicated_partitions"), 0);
    assert_eq!(metric(l, "keel_under_min_isr_partitions"), 0);
    let d = describe(l, "ops");
    assert_eq!(ids(&d["isr"]), {
        let mut r = replicas.iter().map(|r| i64::from(*r)).collect::<Vec<_>>();
        r.sort();
        r
    });
    assert_eq!(ids(&d["elr"]), Vec::<i64>::new(), "{d}");

    // Both followers stop: the leader takes acks=1 writes they never fetch, the ISR shrinks
    // to the leader and the followers become eligible leader replicas (KIP-966).
    let shrinks_before = metric(l, "keel_isr_shrinks_total");
    for f in &followers {
        nodes[index_of(*f)].signal("STOP");
    }
    for i in 0..5 {
        raw_produce(l, "ops", 0, 1, &[format!("unreplicated-{i}").as_bytes()]).unwrap();
    }
    wait_until(
        "the ISR shrinks to the leader",
        Duration::from_secs(30),
        || partition(l, "ops", 0).is_some_and(|(_, _, _, isr)| isr == vec![leader]),
    );
    for f in &followers {
        let lag = follower_lag(l, "ops", *f).expect("lag of a stopped follower");
        assert!(lag >= 5, "follower {f} lags {lag} records");
    }
    assert!(metric(l, "keel_isr_shrinks_total") > shrinks_before);
    assert_eq!(metric(l, "keel_under_replicated_partitions"), 1);
    assert_eq!(metric(l, "keel_under_min_isr_partitions"), 1);
    let d = describe(l, "ops");
    assert_eq!(ids(&d["isr"]), vec![i64::from(leader)], "{d}");
    assert_elr_of_stopped(&d, &followers);

    // They come back, catch up and rejoin; the gauges clear.
    let expands_before = metric(l, "keel_isr_expands_total");
    for f in &followers {
        nodes[index_of(*f)].signal("CONT");
    }
    wait_until("the ISR is whole again", Duration::from_secs(30), || {
        partition(l, "ops", 0).is_some_and(|(_, _, _, isr)| isr.len() == 3)
    });
    assert!(metric(l, "keel_isr_expands_total") > expands_before);
    wait_until("the gauges clear", Duration::from_secs(10), || {
        metric(l, "keel_under_replicated_partitions") == 0
            && metric(l, "keel_under_min_isr_partitions") == 0
    });
    assert_eq!(ids(&describe(l, "ops")["elr"]), Vec::<i64>::new());
}

/// Base offsets of the segment files of `topic`-0 in `b`'s data dir.
fn segments(b: &Broker, topic: &str) -> Vec<i64> {
    let dir = b.data_dir().join(format!("{topic}-0"));
    let mut out: Vec<i64> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().to_string();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn retention_runs_on_followers_too() {
    let _serial = serial();
    let nodes = cluster(3, &["--set", "log.retention.check.interval.ms=500"]);
    create_with_configs(
        &nodes[0],
        "retained",
        1,
        3,
        &[
            ("min.insync.replicas", "2"),
            ("segment.bytes", "20000"),
            ("retention.bytes", "40000"),
        ],
    );
    wait_for_full_isr(&nodes[0], "retained", 0);
    let (leader, _, _, _) = partition(&nodes[0], "retained", 0).unwrap();
    let l = &nodes[index_of(leader)];
    // 200 records of 1 kB: ten segments of 20 kB; retention keeps about two.
    let value = vec![b'r'; 1000];
    for _ in 0..200 {
        raw_produce(l, "retained", 0, -1, &[&value]).unwrap();
    }
    for b in &nodes {
        // Retention may run while the writes still land: wait for the state after the last.
        wait_until(
            "every replica keeps only its newest segments",
            Duration::from_secs(30),
            || {
                let s = segments(b, "retained");
                s.first().is_some_and(|base| *base > 0) && s.len() <= 4
            },
        );
    }
}

#[test]
fn a_replica_that_lost_its_partition_rebuilds_it_from_a_compacted_leader() {
    let _serial = serial();
    // Five voters: the quorum outlives the leader killed and a follower stopped at the end.
    let mut nodes = cluster(5, &["--set", "log.cleaner.backoff.ms=200"]);
    create_with_configs(
        &nodes[0],
        "keyed",
        1,
        3,
        &[
            ("min.insync.replicas", "2"),
            ("cleanup.policy", "compact"),
            ("segment.bytes", "4096"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    );
    wait_for_full_isr(&nodes[0], "keyed", 0);
    let (leader, _, replicas, _) = partition(&nodes[0], "keyed", 0).unwrap();
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    // 20 keys written 30 times each: compaction keeps the last of each.
    let reports = Reports::default();
    let p = producer(&all, &reports);
    // One flush per round: 30 batches over several 4 KiB segments (one batch of all 600
    // would fill one segment, which the cleaner never touches while it is the active one).
    let round: Vec<String> = (0..20).map(|k| format!("k{k}")).collect();
    for _ in 0..30 {
        send_all(&p, "keyed", 0, &round);
    }
    let written = 600;
    let l = index_of(leader);
    let last = acked(&reports).iter().map(|(_, _, o)| *o).max().unwrap();
    // Wait until the leader's log has gaps: compaction dropped records below the last.
    wait_until("the leader compacts", Duration::from_secs(60), || {
        (read_all(&nodes[l].bootstrap(), "keyed", 0, last).len() as i64) < last + 1
    });
    // A follower loses the partition's directory (its disk), comes back empty and rebuilds it
    // from the leader, whose compacted log has offset gaps.
    let f = *replicas.iter().find(|r| **r != leader).unwrap();
    let fi = index_of(f);
    nodes[fi].kill9();
    let dir = nodes[fi].data_dir().join("keyed-0");
    std::fs::remove_dir_all(&dir).unwrap();
    nodes[fi].restart_after_stop();
    wait_until(
        "the rebuilt follower rejoins the ISR",
        Duration::from_secs(60),
        || partition(&nodes[l], "keyed", 0).is_some_and(|(_, _, _, isr)| isr.contains(&f)),
    );
    // Make the rebuilt replica the only one that can lead, and read the partition from it.
    let other = *replicas.iter().find(|r| **r != leader && **r != f).unwrap();
    nodes[index_of(other)].signal("STOP");
    nodes[l].kill9();
    wait_until("the rebuilt replica leads", Duration::from_secs(30), || {
        partition(&nodes[fi], "keyed", 0).is_some_and(|(nl, _, _, _)| nl == f)
    });
    let acked = acked(&reports);
    let read = read_all(&nodes[fi].bootstrap(), "keyed", 0, last);
    let latest: std::collections::BTreeMap<String, i64> = acked
        .iter()
        .map(|(k, _, o)| (k.clone(), *o))
        .collect::<std::collections::BTreeMap<_, _>>();
    for (key, offset) in &latest {
        assert_eq!(
            read.get(offset).map(|(k, _)| k.as_str()),
            Some(key.as_str()),
            "the latest record of {key} at {offset}"
        );
    }
    // The log has offset gaps (compaction dropped records), and they came through the
    // rebuilt replica's follower appends.
    assert!(
        read.len() < written && (read.len() as i64) < last + 1,
        "compacted: {} records over offsets 0..={last}",
        read.len()
    );
    nodes[index_of(other)].signal("CONT");
}

#[test]
fn a_static_min_insync_replicas_reaches_the_controllers_elections() {
    let _serial = serial();
    // min.insync.replicas set on every broker's command line, not on the topic: the
    // controller's KIP-966 rules read it as Kafka's controller reads its static config.
    let nodes = cluster(
        5,
        &[
            "--set",
            "min.insync.replicas=2",
            "--set",
            "replica.lag.time.max.ms=1500",
        ],
    );
    create_with_configs(&nodes[0], "static", 1, 3, &[]);
    wait_for_full_isr(&nodes[0], "static", 0);
    let (leader, _, replicas, _) = partition(&nodes[0], "static", 0).unwrap();
    let l = &nodes[index_of(leader)];
    let followers: Vec<i32> = replicas.iter().copied().filter(|r| *r != leader).collect();
    for f in &followers {
        nodes[index_of(*f)].signal("STOP");
    }
    wait_until(
        "the ISR shrinks to the leader",
        Duration::from_secs(30),
        || partition(l, "static", 0).is_some_and(|(_, _, _, isr)| isr == vec![leader]),
    );
    // Below the broker's min ISR, the members that left are eligible leader replicas (with
    // the default min ISR of 1 there would be none).
    assert_elr_of_stopped(&describe(l, "static"), &followers);
    assert_eq!(
        raw_produce(l, "static", 0, -1, &[b"refused"]),
        Err(19),
        "acks=all under the broker's min ISR: NOT_ENOUGH_REPLICAS"
    );
    for f in &followers {
        nodes[index_of(*f)].signal("CONT");
    }
}

/// `text` without ANSI color sequences (the broker's log colors its fields).
fn without_colors(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Java's `String.hashCode`, as Kafka places a group on a `__consumer_offsets` partition.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// OffsetCommit v7 of `topic` partition 0 for a simple group (no member): the error code.
fn commit_offset(b: &Broker, group: &str, topic: &str, offset: i64) -> i16 {
    use kafka_protocol::messages::offset_commit_request::*;
    use kafka_protocol::messages::*;
    let mut c = common::client::Client::connect(&b.bootstrap());
    let r: OffsetCommitResponse = c.send(
        ApiKey::OffsetCommit,
        7,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(group.to_string().into()))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(common::client::topic(topic))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]),
    );
    r.topics[0].partitions[0].error_code
}

/// OffsetFetch v5 of `topic` partition 0: (group error, partition error, committed offset).
fn fetch_offset(b: &Broker, group: &str, topic: &str) -> (i16, i16, i64) {
    use kafka_protocol::messages::offset_fetch_request::*;
    use kafka_protocol::messages::*;
    let mut c = common::client::Client::connect(&b.bootstrap());
    let r: OffsetFetchResponse = c.send(
        ApiKey::OffsetFetch,
        5,
        &OffsetFetchRequest::default()
            .with_group_id(GroupId(group.to_string().into()))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(common::client::topic(topic))
                .with_partition_indexes(vec![0])])),
    );
    match r.topics.first().and_then(|t| t.partitions.first()) {
        Some(p) => (r.error_code, p.error_code, p.committed_offset),
        None => (r.error_code, -1, -1),
    }
}

#[test]
fn a_coordinator_unloads_its_partition_when_leadership_leaves() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    create_with_configs(&nodes[0], "tracked", 1, 3, &[]);
    let group = "unload-group";
    let p = java_hash(group).unsigned_abs() as i32 % 50;
    // The group's coordinator: the leader of its __consumer_offsets partition (RF 3).
    let mut coordinator = -1;
    wait_until(
        "the group has a coordinator",
        Duration::from_secs(30),
        || {
            // The first FindCoordinator creates __consumer_offsets.
            let mut client = common::client::Client::connect(&nodes[0].bootstrap());
            let _: kafka_protocol::messages::FindCoordinatorResponse = client.send(
                kafka_protocol::messages::ApiKey::FindCoordinator,
                3,
                &kafka_protocol::messages::FindCoordinatorRequest::default()
                    .with_key(group.to_string().into())
                    .with_key_type(0),
            );
            coordinator = partition(&nodes[0], "__consumer_offsets", p)
                .filter(|(l, _, _, isr)| *l > 0 && isr.len() == 3)
                .map_or(-1, |(l, _, _, _)| l);
            coordinator > 0
                && commit_offset(&nodes[index_of(coordinator)], group, "tracked", 42) == 0
        },
    );
    let c = &nodes[index_of(coordinator)];
    assert_eq!(fetch_offset(c, group, "tracked"), (0, 0, 42));
    // The coordinator pauses past its session: another replica leads the partition; when it
    // resumes it learns so and drops the group's state.
    c.signal("STOP");
    let other = &nodes[(index_of(coordinator) + 1) % 3];
    wait_until(
        "another broker leads the group's partition",
        Duration::from_secs(30),
        || {
            partition(other, "__consumer_offsets", p)
                .is_some_and(|(l, _, _, _)| l > 0 && l != coordinator)
        },
    );
    let (successor, _, _, _) = partition(other, "__consumer_offsets", p).unwrap();
    c.signal("CONT");
    wait_until(
        "the old coordinator unloads the partition",
        Duration::from_secs(30),
        || {
            without_colors(&c.log_text()).lines().any(|l| {
                l.contains("coordinator partition unloaded")
                    && l.contains(&format!("partition={p} "))
            })
        },
    );
    // The old coordinator refuses the group; the new one has its committed offset.
    assert_eq!(commit_offset(c, group, "tracked", 7), 16, "NOT_COORDINATOR");
    assert_eq!(fetch_offset(c, group, "tracked").0, 16, "NOT_COORDINATOR");
    let s = &nodes[index_of(successor)];
    wait_until(
        "the new coordinator serves the group",
        Duration::from_secs(30),
        || fetch_offset(s, group, "tracked") == (0, 0, 42),
    );
    assert_eq!(commit_offset(s, group, "tracked", 43), 0);
    assert_eq!(fetch_offset(s, group, "tracked"), (0, 0, 43));
}
