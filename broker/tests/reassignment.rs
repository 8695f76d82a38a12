//! Partition reassignment (KIP-455) against three real brokers, under an idempotent acks=all
//! producer whose every acknowledgement the checker compares with what a consumer reads:
//! replication factor 1 → 3 → 2 (the leader removed), a reassignment cancelled half way
//! (its added replica stopped), a new reassignment replacing one in progress, and the bad
//! requests that change nothing. Removed replicas delete their logs.

mod common;

use std::time::Duration;

use common::client::{topic, Client};
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::*;

fn alter(b: &Broker, name: &str, p: i32, replicas: Option<&[i32]>) -> (i16, Option<String>) {
    let mut c = Client::connect(&b.bootstrap());
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            alter_partition_reassignments_request::ReassignableTopic::default()
                .with_name(topic(name))
                .with_partitions(vec![
                    alter_partition_reassignments_request::ReassignablePartition::default()
                        .with_partition_index(p)
                        .with_replicas(replicas.map(|r| r.iter().map(|b| BrokerId(*b)).collect())),
                ]),
        ]);
    let resp: AlterPartitionReassignmentsResponse =
        c.send(ApiKey::AlterPartitionReassignments, 0, &req);
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let part = &resp.responses[0].partitions[0];
    (
        part.error_code,
        part.error_message
            .as_ref()
            .map(|m| m.to_string())
            .filter(|m| !m.is_empty()),
    )
}

/// A partition being reassigned: (partition, replicas, adding, removing).
type Ongoing = (i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// The partitions being reassigned, as `b` lists them.
fn ongoing(b: &Broker, name: &str) -> Vec<Ongoing> {
    let mut c = Client::connect(&b.bootstrap());
    let resp: ListPartitionReassignmentsResponse = c.send(
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default().with_timeout_ms(10_000),
    );
    assert_eq!(resp.error_code, 0);
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    resp.topics
        .iter()
        .filter(|t| t.name.0.as_str() == name)
        .flat_map(|t| &t.partitions)
        .map(|p| {
            (
                p.partition_index,
                ids(&p.replicas),
                ids(&p.adding_replicas),
                ids(&p.removing_replicas),
            )
        })
        .collect()
}

/// Waits until `name`-`p` has exactly `replicas` (in order), all in the ISR, and no
/// reassignment in progress, as every running broker reports it.
fn wait_assigned(nodes: &[Broker], name: &str, p: i32, replicas: &[i32]) {
    wait_until(
        &format!("{name}-{p} is on {replicas:?}, all in sync"),
        Duration::from_secs(30),
        || {
            nodes.iter().filter(|b| b.running()).all(|b| {
                ongoing(b, name).is_empty()
                    && partition(b, name, p).is_some_and(|(l, _, r, mut isr)| {
                        isr.sort();
                        let mut want = replicas.to_vec();
                        want.sort();
                        l > 0 && r == replicas && isr == want
                    })
            })
        },
    );
}

fn has_log(b: &Broker, name: &str, p: i32) -> bool {
    b.data_dir().join(format!("{name}-{p}")).exists()
}

#[test]
fn reassignments_grow_shrink_cancel_and_replace_without_losing_a_record() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    create(&nodes[0], "re", 2, 1, 1);
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let checker = Checker::default();
    let background = Background::start(&checker, &all, "re", 2);
    let writer = Writer::start(&all, "re", 2, "k", 4000, Duration::from_millis(4));
    std::thread::sleep(Duration::from_secs(1));

    // RF 1 -> 3: the two added replicas copy the log, join the ISR, and it completes.
    let (first, _, replicas, _) = partition(&nodes[0], "re", 0).unwrap();
    assert_eq!(replicas, vec![first]);
    let others: Vec<i32> = (1..=3).filter(|b| *b != first).collect();
    let three = [first, others[0], others[1]];
    assert_eq!(alter(&nodes[0], "re", 0, Some(&three)), (0, None));
    wait_assigned(&nodes, "re", 0, &three);
    assert!(nodes.iter().all(|b| has_log(b, "re", 0)));

    // RF 3 -> 2 without the leader: leadership moves to the target, the removed replica
    // deletes its log.
    let two = [others[0], others[1]];
    assert_eq!(alter(&nodes[0], "re", 0, Some(&two)), (0, None));
    wait_assigned(&nodes, "re", 0, &two);
    let (leader, _, _, _) = partition(&nodes[0], "re", 0).unwrap();
    assert_eq!(leader, others[0], "the target's first replica leads");
    wait_until(
        "the removed replica deletes its log",
        Duration::from_secs(10),
        || !has_log(&nodes[index_of(first)], "re", 0),
    );

    // Cancelled half way: the added replica is stopped, so it cannot catch up; the cancel
    // leaves exactly the original replicas, in order.
    let (p1_leader, _, p1_replicas, _) = partition(&nodes[0], "re", 1).unwrap();
    assert_eq!(p1_replicas, vec![p1_leader]);
    let stalled = (1..=3).find(|b| *b != p1_leader).unwrap();
    let live = &nodes[index_of(p1_leader)];
    nodes[index_of(stalled)].signal("STOP");
    let target = [stalled, p1_leader];
    assert_eq!(alter(live, "re", 1, Some(&target)), (0, None));
    let (_, replicas, adding, removing) = ongoing(live, "re")[0].clone();
    assert_eq!(
        (replicas, adding, removing),
        (vec![stalled, p1_leader], vec![stalled], vec![])
    );
    // A new reassignment replaces the one in progress (KIP-455), measured from the original
    // replicas; the stopped broker keeps it from completing.
    let third = (1..=3).find(|b| *b != p1_leader && *b != stalled).unwrap();
    let wider = [stalled, third, p1_leader];
    assert_eq!(alter(live, "re", 1, Some(&wider)), (0, None));
    wait_until("the replacement is listed", Duration::from_secs(10), || {
        ongoing(live, "re") == vec![(1, wider.to_vec(), vec![stalled, third], vec![])]
    });
    // Cancelled half way (`third` may have caught up, `stalled` cannot): exactly the
    // original replicas remain.
    assert_eq!(alter(live, "re", 1, None), (0, None));
    nodes[index_of(stalled)].signal("CONT");
    wait_assigned(&nodes, "re", 1, &[p1_leader]);
    wait_until(
        "the cancelled replicas delete their logs",
        Duration::from_secs(10),
        || {
            !has_log(&nodes[index_of(stalled)], "re", 1)
                && !has_log(&nodes[index_of(third)], "re", 1)
        },
    );
    // Cancelling when none is in progress.
    let (code, _) = alter(&nodes[0], "re", 1, None);
    assert_eq!(code, 85, "NO_REASSIGNMENT_IN_PROGRESS");

    // Bad input changes nothing: unknown broker, a duplicate, an empty list.
    let before = partition(&nodes[0], "re", 1).unwrap();
    for bad in [&[p1_leader, 99][..], &[p1_leader, p1_leader][..], &[][..]] {
        let (code, message) = alter(&nodes[0], "re", 1, Some(bad));
        assert_eq!(
            code, 39,
            "INVALID_REPLICA_ASSIGNMENT for {bad:?}: {message:?}"
        );
        assert!(message.is_some_and(|m| !m.is_empty()));
    }
    let (code, _) = alter(&nodes[0], "nope", 0, Some(&[1]));
    assert_eq!(code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(partition(&nodes[0], "re", 1).unwrap(), before);
    assert!(ongoing(&nodes[0], "re").is_empty());

    let errors = writer.errors();
    let reports = writer.reports.clone();
    let sent = writer.stop();
    assert_eq!(errors, Vec::<String>::new(), "the producer saw errors");
    assert_eq!(checker.acked_reports(&reports, "re", Acks::All), 0);
    assert!(background.stop() > 0, "the consumer read during the moves");
    for p in 0..2 {
        final_pass(&checker, &nodes[0].bootstrap(), "re", p);
    }
    let r = checker.assert_clean("reassignments");
    assert_eq!(r.acked_all, sent);
    assert_eq!(checker.unacknowledged_reads(), Vec::<String>::new());
}

/// IncrementalAlterConfigs SET of one config on one resource (2 = topic, 4 = broker): the
/// resource's (error code, message).
fn set_config(b: &Broker, resource_type: i8, name: &str, key: &str, value: &str) -> (i16, String) {
    let mut c = Client::connect(&b.bootstrap());
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(name.to_string().into())
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(key.to_string().into())
                    .with_config_operation(0)
                    .with_value(Some(value.to_string().into())),
            ]),
    ]);
    let resp: IncrementalAlterConfigsResponse = c.send(ApiKey::IncrementalAlterConfigs, 1, &req);
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

/// A broker config as `b` describes it: (value, config source).
fn describe_broker_config(b: &Broker, id: i32, key: &str) -> (String, i8) {
    let mut c = Client::connect(&b.bootstrap());
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(id.to_string().into())
            .with_configuration_keys(Some(vec![key.to_string().into()])),
    ]);
    let resp: DescribeConfigsResponse = c.send(ApiKey::DescribeConfigs, 4, &req);
    let r = &resp.results[0].configs[0];
    (
        r.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        r.config_source,
    )
}

#[test]
fn a_throttled_reassignment_copies_at_the_throttled_rate() {
    let _serial = serial();
    // One shard per broker, so a broker's throttle (split evenly across its shards) is the
    // whole rate for the one partition; small fetches, so the rate is kept in small steps.
    let nodes = cluster(
        3,
        &["--set", "smp=1", "--set", "replica.fetch.max.bytes=65536"],
    );
    create(&nodes[0], "thr", 1, 1, 1);
    let (leader, _, _, _) = partition(&nodes[0], "thr", 0).unwrap();
    let target = (1..=3).find(|b| *b != leader).unwrap();
    let reports = Reports::default();
    let p = producer(&nodes[0].bootstrap(), &reports);
    // Each record about 2 kB, named by its key (value `value-of-{key}`) for the checker.
    let pad = "x".repeat(990);
    for i in 0..2000 {
        let key = format!("t{i}-{pad}");
        let value = format!("value-of-{key}");
        loop {
            let record = rdkafka::producer::BaseRecord::to("thr")
                .partition(0)
                .key(&key)
                .payload(&value);
            match p.send(record) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(20));
                }
            }
        }
        p.poll(Duration::ZERO);
    }
    rdkafka::producer::Producer::flush(&p, Duration::from_secs(60)).unwrap();
    assert_eq!(acked(&reports).len(), 2000);
    let size: u64 = std::fs::read_dir(nodes[index_of(leader)].data_dir().join("thr-0"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(size > 3_000_000, "{size} bytes to copy");

    // A negative rate is refused with a clear message, and nothing changes.
    let (code, message) = set_config(
        &nodes[0],
        4,
        &leader.to_string(),
        "leader.replication.throttled.rate",
        "-5",
    );
    assert_eq!(code, 40, "INVALID_CONFIG: {message}");
    assert!(message.contains(">= 0"), "{message}");
    let rate: u64 = 1_000_000;
    for (id, key) in [
        (leader, "leader.replication.throttled.rate"),
        (target, "follower.replication.throttled.rate"),
    ] {
        assert_eq!(
            set_config(&nodes[0], 4, &id.to_string(), key, &rate.to_string()),
            (0, String::new())
        );
        // Dynamic: its own broker describes it so (DYNAMIC_BROKER_CONFIG).
        wait_until("the throttle is installed", Duration::from_secs(5), || {
            describe_broker_config(&nodes[index_of(id)], id, key) == (rate.to_string(), 2)
        });
    }
    for (key, replica) in [
        ("leader.replication.throttled.replicas", leader),
        ("follower.replication.throttled.replicas", target),
    ] {
        assert_eq!(
            set_config(&nodes[0], 2, "thr", key, &format!("0:{replica}")),
            (0, String::new())
        );
    }
    // An idempotent acks=all producer keeps writing (slowly: 20 small records/s) during the
    // copy, and a consumer reads throughout; the checker compares them at the end.
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let checker = Checker::default();
    let background = Background::start(&checker, &all, "thr", 1);
    let writer = Writer::start(&all, "thr", 1, "d", 400, Duration::from_millis(50));
    let started = std::time::Instant::now();
    assert_eq!(
        alter(&nodes[0], "thr", 0, Some(&[leader, target])),
        (0, None)
    );
    wait_until(
        "the throttled copy completes",
        Duration::from_secs(60),
        || ongoing(&nodes[0], "thr").is_empty(),
    );
    let elapsed = started.elapsed().as_secs_f64();
    // What was copied: the log as it was, and what the producer added meanwhile.
    let size: u64 = std::fs::read_dir(nodes[index_of(target)].data_dir().join("thr-0"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let copied = size as f64 / elapsed;
    eprintln!(
        "throttled copy: {size} bytes in {elapsed:.2} s = {:.0} B/s against {rate} B/s",
        copied
    );
    // Above: the throttle holds. Below: the copy runs at about the throttle, not stalled. The
    // time counts from the request, so it includes starting the reassignment (metadata, the
    // new replica's fetcher): on a loaded 2-core CI machine 0.74 of the rate was seen.
    assert!(
        copied >= 0.6 * rate as f64 && copied <= 1.2 * rate as f64,
        "copied at {copied:.0} B/s, throttle {rate} B/s"
    );
    wait_assigned(&nodes, "thr", 0, &[leader, target]);
    let during = writer.reports.clone();
    let sent = writer.stop();
    checker.acked_reports(&reports, "thr", Acks::All);
    assert_eq!(
        checker.acked_reports(&during, "thr", Acks::All),
        0,
        "no write failed"
    );
    assert!(background.stop() > 0, "the consumer read during the copy");
    final_pass(&checker, &nodes[index_of(target)].bootstrap(), "thr", 0);
    let r = checker.assert_clean("throttled reassignment");
    assert_eq!(r.acked_all, 2000 + sent);
    assert_eq!(checker.unacknowledged_reads(), Vec::<String>::new());
}
