//! Leader epochs across restarts (Metadata, OffsetForLeaderEpoch, fencing) and ListOffsets
//! (earliest, latest, by timestamp, max timestamp), through the wire protocol.

mod common;

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

fn leader_epoch(c: &mut Client, name: &str) -> i32 {
    let req = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(topic(name))),
    ]));
    let resp: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    resp.topics[0].partitions[0].leader_epoch
}

fn epoch_end(c: &mut Client, name: &str, current: i32, asked: i32) -> (i16, i32, i64) {
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(topic(name))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(current)
                        .with_leader_epoch(asked),
                ]),
        ]);
    let resp: OffsetForLeaderEpochResponse = c.send(ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}

fn list_offset(c: &mut Client, name: &str, timestamp: i64) -> (i16, i64, i64) {
    list_offset_at(c, name, timestamp, 7)
}

fn list_offset_at(c: &mut Client, name: &str, timestamp: i64, version: i16) -> (i16, i64, i64) {
    let req = list_offsets_request(name, 0, timestamp);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, version, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset, p.timestamp)
}

#[test]
fn restart_starts_a_new_epoch_and_old_epochs_keep_their_end() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "ep", 1);
    assert_eq!(leader_epoch(&mut c, "ep"), 0);
    produce(&mut c, "ep", 0, batch(&[b"a", b"b", b"c"]));
    drop(c);
    b.restart();
    let mut c = Client::connect(&b.bootstrap());
    // A clean stop hands leadership back (controlled shutdown: leader -1, epoch + 1) and the
    // restart takes it again (epoch + 1), as KRaft does.
    let now = leader_epoch(&mut c, "ep");
    assert_eq!(now, 2, "a restart starts a new leader epoch");
    assert_eq!(produce(&mut c, "ep", 0, batch(&[b"d", b"e"])), 3);

    assert_eq!(
        epoch_end(&mut c, "ep", now, 0),
        (0, 0, 3),
        "epoch 0 ended where the new epoch began"
    );
    assert_eq!(
        epoch_end(&mut c, "ep", now, now),
        (0, now, 5),
        "the current epoch ends at the log end"
    );
    assert_eq!(
        epoch_end(&mut c, "ep", now, 1),
        (0, 0, 3),
        "an epoch this log never led in ends where the next one it holds begins (Kafka's floor)"
    );
    assert_eq!(
        epoch_end(&mut c, "ep", -1, 0),
        (0, 0, 3),
        "no current epoch given: no fencing"
    );
    assert_eq!(
        epoch_end(&mut c, "ep", 0, 0).0,
        74,
        "stale current epoch: FENCED_LEADER_EPOCH"
    );
    assert_eq!(
        epoch_end(&mut c, "ep", now + 5, 0).0,
        75,
        "future current epoch: UNKNOWN_LEADER_EPOCH"
    );

    let fetch = fetch_request("ep", &[(0, 0, 1 << 20)], 0, 0, 1 << 20);
    let mut stale = fetch.clone();
    stale.topics[0].partitions[0].current_leader_epoch = 0;
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &stale);
    assert_eq!(resp.responses[0].partitions[0].error_code, 74);
    // A fetch may return less than everything; read until all five are in.
    let mut got: Vec<(i64, Vec<u8>)> = Vec::new();
    while got.len() < 5 {
        let mut f = fetch.clone();
        f.topics[0].partitions[0].fetch_offset = got.len() as i64;
        let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &f);
        let more = values(&resp.responses[0].partitions[0].records);
        assert!(!more.is_empty(), "no progress at offset {}", got.len());
        got.extend(more);
    }
    let want: Vec<(i64, Vec<u8>)> = [b"a", b"b", b"c", b"d", b"e"]
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v.to_vec()))
        .collect();
    assert_eq!(got, want);
    // segment.ms counts record time from the segment's first batch, as Kafka does: a restart
    // does not roll a segment of old records.
    assert!(
        !b.data_dir().join("ep-0/00000000000000000003.log").exists(),
        "no roll at the restart"
    );

    let checkpoint =
        std::fs::read_to_string(b.data_dir().join("ep-0/leader-epoch-checkpoint")).unwrap();
    assert_eq!(checkpoint, "0\n2\n0 0\n2 3\n");
}

#[test]
fn list_offsets_earliest_latest_and_by_timestamp() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "lo", 1);
    assert_eq!(
        list_offset(&mut c, "lo", -1),
        (0, 0, -1),
        "empty log: latest is 0"
    );
    // batch() stamps record i with 1_700_000_000_000 + i.
    produce(&mut c, "lo", 0, batch(&[b"r0", b"r1", b"r2"]));
    produce(&mut c, "lo", 0, batch(&[b"r3", b"r4", b"r5", b"r6"]));
    assert_eq!(list_offset(&mut c, "lo", -2), (0, 0, -1));
    assert_eq!(list_offset(&mut c, "lo", -1), (0, 7, -1));
    let base = 1_700_000_000_000i64;
    // First batch covers base..base+2, second base..base+3 again: the first record with
    // timestamp >= base+2 is offset 2; >= base+3 is offset 6 (record 3 of the second batch).
    assert_eq!(list_offset(&mut c, "lo", base + 2), (0, 2, base + 2));
    assert_eq!(list_offset(&mut c, "lo", base + 3), (0, 6, base + 3));
    assert_eq!(list_offset(&mut c, "lo", base), (0, 0, base));
    assert_eq!(
        list_offset(&mut c, "lo", base + 99),
        (0, -1, -1),
        "after every record: no offset"
    );
    assert_eq!(
        list_offset(&mut c, "lo", -3),
        (0, 6, base + 3),
        "max timestamp"
    );
    // v9: earliest local (-4) is the log start offset; latest tiered (-5) is none, as Kafka
    // answers without remote storage.
    for (timestamp, expected) in [(-4, (0, 0, -1)), (-5, (0, -1, -1))] {
        assert_eq!(
            list_offset_at(&mut c, "lo", timestamp, 9),
            expected,
            "{timestamp}"
        );
    }
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic("nope"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1),
            ])]);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    assert_eq!(
        resp.topics[0].partitions[0].error_code, 3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
}
