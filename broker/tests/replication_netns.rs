//! Split brain: three brokers in their own network namespaces (one bridge; the test process,
//! which plays the clients, sits in the root namespace). The partition's leader is cut off
//! from the other two brokers — and so from the metadata quorum — but not from its clients.
//! It must acknowledge no acks=all write while cut off; the other two elect a new leader and
//! go on; once the links heal the old leader learns it was replaced, truncates what only it
//! had and rejoins the ISR. Needs root and iproute2 (scripts/test.sh installs it).

mod common;

use std::time::{Duration, Instant};

use common::netns::Net;
use common::replicated::*;
use rdkafka::producer::BaseRecord;

#[test]
fn a_leader_cut_off_from_its_peers_acknowledges_no_acks_all_write_then_truncates_and_rejoins() {
    let _serial = serial();
    let mut net = Net::create(3);
    let mut nodes = cluster_in(&net, &[]);
    create(&nodes[0], "split", 1, 3, 2);
    wait_for_full_isr(&nodes[0], "split", 0);
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let checker = Checker::default();
    let background = Background::start(&checker, &all, "split", 1);
    let reports = Reports::default();
    let p = producer(&all, &reports);
    send_all(&p, "split", 0, &keys("before", 200));
    let (leader, epoch, _, _) = partition(&nodes[0], "split", 0).unwrap();
    let l = index_of(leader);
    let others: Vec<usize> = (0..3).filter(|i| *i != l).collect();

    net.cut(l, &others);
    let cut_at = Instant::now();
    // The producer that knows all three brokers goes on sending: librdkafka keeps talking to
    // the leader it knows, which answers its metadata requests as the leader still.
    for k in keys("cut", 100) {
        let value = format!("value-of-{k}");
        p.send(BaseRecord::to("split").partition(0).key(&k).payload(&value))
            .unwrap();
        p.poll(Duration::ZERO);
    }
    // The isolated leader still serves its clients: acks=1 writes are answered by it alone,
    // acks=all writes never (its followers cannot fetch them, and it cannot shrink the ISR
    // without the quorum).
    let mut acks1 = Vec::new();
    let mut refused = std::collections::BTreeMap::<i16, usize>::new();
    let mut attempt = 0;
    while cut_at.elapsed() < Duration::from_secs(8) {
        let v = format!("isolated-acks1-{attempt}");
        if let Ok(offset) = raw_produce(&nodes[l], "split", 0, 1, &[v.as_bytes()]) {
            checker.acked(&v, "split", 0, offset, Acks::Leader);
            acks1.push((v, offset));
        }
        let v = format!("isolated-acksall-{attempt}");
        match raw_produce_within(&nodes[l], "split", 0, -1, &[v.as_bytes()], 1000) {
            Ok(offset) => panic!("the cut-off leader acknowledged acks=all {v} at {offset}"),
            Err(code) => *refused.entry(code).or_default() += 1,
        }
        p.poll(Duration::ZERO);
        attempt += 1;
    }
    eprintln!(
        "cut off: {} acks=1 writes answered by the isolated leader, acks=all refused {refused:?}",
        acks1.len()
    );
    assert!(
        !acks1.is_empty(),
        "the isolated leader still answers acks=1"
    );
    for code in refused.keys() {
        // REQUEST_TIMED_OUT while it waits for followers that never come,
        // NOT_ENOUGH_REPLICAS(_AFTER_APPEND) or NOT_LEADER_OR_FOLLOWER otherwise.
        assert!(
            matches!(code, 6 | 7 | 19 | 20),
            "acks=all refused with {code}"
        );
    }

    // The majority side fences the old leader and elects one of its followers.
    let watcher = others[0];
    wait_until(
        "the majority elects a new leader",
        Duration::from_secs(30),
        || {
            partition(&nodes[watcher], "split", 0)
                .is_some_and(|(nl, e, _, _)| nl > 0 && nl != leader && e > epoch)
        },
    );
    eprintln!(
        "new leader elected within {:?} of the cut",
        cut_at.elapsed()
    );
    // A client on the majority's side writes through the new leader meanwhile.
    let majority: String = others
        .iter()
        .map(|i| nodes[*i].bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let majority_reports = Reports::default();
    let q = producer(&majority, &majority_reports);
    send_all(&q, "split", 0, &keys("majority", 200));

    net.heal();
    let healed_at = Instant::now();
    wait_until(
        "the old leader rejoins the ISR as a follower",
        Duration::from_secs(60),
        || {
            partition(&nodes[watcher], "split", 0)
                .is_some_and(|(nl, _, _, isr)| nl != leader && isr.contains(&leader))
        },
    );
    eprintln!(
        "old leader back in the ISR {:?} after healing",
        healed_at.elapsed()
    );
    let truncations: u64 = nodes[l]
        .metric_by_shard("keel_replica_truncations_total")
        .iter()
        .sum();
    assert!(truncations >= 1, "the old leader truncated its own tail");
    // The first producer's records sent during the cut are acknowledged once it finds the
    // new leader (the old one, back as a follower, says it is not the leader any more).
    send_all(&p, "split", 0, &keys("after", 100));

    // The checker: every acks=all acknowledgement read at its offset (by the consumer that
    // read throughout and by a full pass), nothing twice; the isolated leader's acks=1 writes
    // are lost (they were never replicated), and its refused acks=all writes never show up.
    assert_eq!(checker.acked_reports(&reports, "split", Acks::All), 0);
    assert_eq!(
        checker.acked_reports(&majority_reports, "split", Acks::All),
        0
    );
    let background_reads = background.stop();
    assert!(background_reads > 0, "the consumer read during the fault");
    let (new_leader, _, _, _) = partition(&nodes[watcher], "split", 0).unwrap();
    final_pass(
        &checker,
        &nodes[index_of(new_leader)].bootstrap(),
        "split",
        0,
    );
    let r = checker.assert_clean("split brain");
    assert_eq!(r.acked_all, 600);
    assert_eq!(
        r.lost_acks_one as usize,
        acks1.len(),
        "the isolated leader's acks=1 writes are gone"
    );
    let unacked = checker.unacknowledged_reads();
    assert!(unacked.is_empty(), "read, never acknowledged: {unacked:?}");

    // The old leader holds the new leader's log: kill the new leader, let the old one or the
    // third replica lead, and read everything again.
    let survivor_epoch = partition(&nodes[watcher], "split", 0).unwrap().1;
    nodes[index_of(new_leader)].kill9();
    let alive = (0..3).find(|i| nodes[*i].running()).unwrap();
    wait_until("another leader is elected", Duration::from_secs(30), || {
        partition(&nodes[alive], "split", 0)
            .is_some_and(|(nl, e, _, _)| nl > 0 && nl != new_leader && e > survivor_epoch)
    });
    let (third, _, _, _) = partition(&nodes[alive], "split", 0).unwrap();
    final_pass(&checker, &nodes[index_of(third)].bootstrap(), "split", 0);
    checker.assert_clean("split brain, after a second failover");
}
