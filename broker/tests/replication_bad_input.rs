//! Hostile replica requests against a replicated partition (three real brokers, RF 3, min ISR
//! 2): replica fetches with offsets outside the log, epochs above or below the leader's,
//! negative sizes and unknown topic ids, and OffsetForLeaderEpoch from a broker that is not a
//! replica. Each gets Kafka's error, and none of them moves the high watermark, changes the
//! ISR or stops a broker: the partition takes and serves acks=all writes afterwards.

mod common;

use common::client::{list_offsets_request, topic, Client};
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::*;

/// What a replica fetch asks for.
#[derive(Clone, Copy)]
struct Ask {
    topic_id: uuid::Uuid,
    replica_id: i32,
    broker_epoch: i64,
    fetch_offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    partition_max_bytes: i32,
}

/// A follower's fetch (v15) of partition 0: (error code, high watermark, records bytes).
fn fetch_as_replica(b: &Broker, a: &Ask) -> (i16, i64, usize) {
    let (error, hw, bytes, _) = fetch_with_divergence(b, a);
    (error, hw, bytes)
}

/// [`fetch_as_replica`] with the answer's diverging epoch (epoch, end offset; -1s: none).
fn fetch_with_divergence(b: &Broker, a: &Ask) -> (i16, i64, usize, (i32, i64)) {
    let mut c = Client::connect(&b.bootstrap());
    let req = FetchRequest::default()
        .with_replica_state(
            fetch_request::ReplicaState::default()
                .with_replica_id(BrokerId(a.replica_id))
                .with_replica_epoch(a.broker_epoch),
        )
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic_id(a.topic_id)
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(a.current_leader_epoch)
                .with_fetch_offset(a.fetch_offset)
                .with_last_fetched_epoch(a.last_fetched_epoch)
                .with_partition_max_bytes(a.partition_max_bytes)])]);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 15, &req);
    if resp.responses.is_empty() {
        return (resp.error_code, -1, 0, (-1, -1));
    }
    let p = &resp.responses[0].partitions[0];
    (
        p.error_code,
        p.high_watermark,
        p.records.as_ref().map_or(0, |r| r.len()),
        (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
    )
}

/// OffsetForLeaderEpoch (v4) for `epoch` of partition 0, sent as `replica_id`: (error code,
/// end offset).
fn offset_for_leader_epoch(b: &Broker, name: &str, replica_id: i32, epoch: i32) -> (i16, i64) {
    let mut c = Client::connect(&b.bootstrap());
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(replica_id))
        .with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(topic(name))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_leader_epoch(epoch),
                ]),
        ]);
    let resp: OffsetForLeaderEpochResponse = c.send(ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.end_offset)
}

/// The high watermark (ListOffsets latest).
fn high_watermark(b: &Broker, name: &str) -> i64 {
    let mut c = Client::connect(&b.bootstrap());
    let resp: ListOffsetsResponse =
        c.send(ApiKey::ListOffsets, 7, &list_offsets_request(name, 0, -1));
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{p:?}");
    p.offset
}

fn broker_epoch(b: &Broker) -> i64 {
    b.metrics()
        .lines()
        .find_map(|l| l.strip_prefix("keel_broker_epoch "))
        .and_then(|v| v.trim().parse().ok())
        .expect("keel_broker_epoch in /metrics")
}

#[test]
fn hostile_replica_requests_get_errors_and_change_nothing() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    create(&nodes[0], "hostile", 1, 3, 2);
    wait_for_full_isr(&nodes[0], "hostile", 0);
    let (leader, epoch, replicas, _) = partition(&nodes[0], "hostile", 0).unwrap();
    let l = &nodes[index_of(leader)];
    for i in 0..10 {
        raw_produce(l, "hostile", 0, -1, &[format!("r{i}").as_bytes()]).unwrap();
    }
    let hw = high_watermark(l, "hostile");
    assert_eq!(hw, 10);
    let follower = *replicas.iter().find(|r| **r != leader).unwrap();
    let follower_epoch = broker_epoch(&nodes[index_of(follower)]);
    assert!(follower_epoch > 0, "the follower registered");
    let id = topic_id(l, "hostile");
    let honest = Ask {
        topic_id: id,
        replica_id: follower,
        broker_epoch: follower_epoch,
        fetch_offset: hw,
        current_leader_epoch: epoch,
        last_fetched_epoch: epoch,
        partition_max_bytes: 1 << 20,
    };
    // The follower's own fetch at its log end is answered (nothing new to send).
    assert_eq!(fetch_as_replica(l, &honest), (0, hw, 0));

    // Offsets outside the log: OFFSET_OUT_OF_RANGE (without a last fetched epoch; with
    // one, an offset past the end of that epoch is a divergence, answered first, as Kafka's
    // Partition.fetchRecords does: the follower is told where the epoch ends here).
    for offset in [hw + 1, 1_000_000, -5, i64::MAX] {
        let got = fetch_as_replica(
            l,
            &Ask {
                fetch_offset: offset,
                last_fetched_epoch: -1,
                ..honest
            },
        );
        assert_eq!(
            got.0, 1,
            "fetch offset {offset}: OFFSET_OUT_OF_RANGE, got {got:?}"
        );
    }
    let past_end = fetch_with_divergence(
        l,
        &Ask {
            fetch_offset: 1_000_000,
            ..honest
        },
    );
    assert_eq!(
        (past_end.0, past_end.2, past_end.3),
        (0, 0, (epoch, hw)),
        "a fetch past the end of the follower's last epoch: the divergence point"
    );
    // An epoch above the leader's: UNKNOWN_LEADER_EPOCH (a stale one, FENCED_LEADER_EPOCH,
    // is in epochs_and_offsets.rs).
    let above = fetch_as_replica(
        l,
        &Ask {
            current_leader_epoch: epoch + 5,
            ..honest
        },
    );
    assert_eq!(
        above.0, 75,
        "current leader epoch above the leader's: {above:?}"
    );
    // A last fetched epoch above the leader's: the leader names its divergence point (or an
    // error); it never takes the follower's word for it.
    let diverging = fetch_as_replica(
        l,
        &Ask {
            last_fetched_epoch: epoch + 100,
            ..honest
        },
    );
    assert!(
        diverging.0 == 0 || diverging.0 == 75,
        "last fetched epoch above the leader's: {diverging:?}"
    );
    // A negative size: INVALID_REQUEST, no records.
    let negative = fetch_as_replica(
        l,
        &Ask {
            fetch_offset: 0,
            partition_max_bytes: -1,
            ..honest
        },
    );
    assert_eq!(
        (negative.0, negative.2),
        (42, 0),
        "a negative partition size: INVALID_REQUEST, nothing sent: {negative:?}"
    );
    // An unknown topic id: UNKNOWN_TOPIC_ID.
    let unknown = fetch_as_replica(
        l,
        &Ask {
            topic_id: uuid::Uuid::from_u128(0xdead_beef),
            ..honest
        },
    );
    assert_eq!(unknown.0, 100, "unknown topic id: {unknown:?}");
    // OffsetForLeaderEpoch: a stranger is refused; a consumer (-1) and a replica are answered.
    assert_eq!(
        offset_for_leader_epoch(l, "hostile", 42, epoch).0,
        6,
        "OffsetForLeaderEpoch from a broker that is not a replica: NOT_LEADER_OR_FOLLOWER"
    );
    assert_eq!(offset_for_leader_epoch(l, "hostile", -1, epoch), (0, hw));
    assert_eq!(
        offset_for_leader_epoch(l, "hostile", follower, epoch),
        (0, hw)
    );

    // Nothing changed: the high watermark, the leader, its epoch and the ISR; every broker
    // runs; acks=all writes go on and read back.
    assert_eq!(high_watermark(l, "hostile"), hw);
    let (leader_now, epoch_now, _, isr) = partition(l, "hostile", 0).unwrap();
    assert_eq!((leader_now, epoch_now, isr.len()), (leader, epoch, 3));
    for b in &nodes {
        assert!(b.running());
        assert_eq!(partition(b, "hostile", 0).map(|p| p.0), Some(leader));
    }
    let next = raw_produce(l, "hostile", 0, -1, &[b"after"]).unwrap();
    assert_eq!(next, hw);
    let read = read_all(&l.bootstrap(), "hostile", 0, next);
    assert_eq!(read.len(), 11);
    assert_eq!(read[&next].1, "after");
}
