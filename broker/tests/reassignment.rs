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
    let reports = Reports::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (all, reports, stop) = (all.clone(), reports.clone(), stop.clone());
        std::thread::spawn(move || {
            let p = producer(&all, &reports);
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sent < 4000 {
                let key = format!("k{sent}");
                let value = format!("value-of-{key}");
                let record = rdkafka::producer::BaseRecord::to("re")
                    .partition(sent % 2)
                    .key(&key)
                    .payload(&value);
                if p.send(record).is_ok() {
                    sent += 1;
                }
                p.poll(Duration::from_millis(4));
            }
            rdkafka::producer::Producer::flush(&p, Duration::from_secs(60)).unwrap();
            sent
        })
    };
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

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = writer.join().unwrap();
    let results = reports.0.lock().unwrap().clone();
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(errors.is_empty(), "the producer saw errors: {errors:?}");
    checker.acked_reports(&reports, "re", Acks::All);
    assert!(background.stop() > 0, "the consumer read during the moves");
    for p in 0..2 {
        final_pass(&checker, &nodes[0].bootstrap(), "re", p);
    }
    let r = checker.assert_clean("reassignments");
    assert_eq!(r.acked_all, sent as u64);
    assert_eq!(checker.unacknowledged_reads(), Vec::<String>::new());
}
