//! Both ends of the version ranges. The oldest request versions Kafka 3.9 accepted and Kafka 4
//! removed, each sent as a client of that era would and checked on content: CreateTopics v0, ListOffsets v0, OffsetCommit v0
//! and v1, OffsetFetch v0, OffsetForLeaderEpoch v0 and v1, DescribeConfigs v0, DeleteTopics
//! v0, and Produce v2 refused per partition. Sarama and kafka-python exercise the same
//! versions from real programs (tests/python/test_sarama.py, test_compat.py). And the newest
//! FindCoordinator versions (v5, v6). ListOffsets v9 is in epochs_and_offsets.rs.

mod common;

use common::client::{batch, produce, topic, Client};
use common::Broker;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const UNSUPPORTED_VERSION: i16 = 35;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn list_offsets_v0(c: &mut Client, name: &str, partition: i32, timestamp: i64) -> Vec<i64> {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic(name))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp)
                .with_max_num_offsets(1)])]);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 0, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{resp:?}");
    p.old_style_offsets.clone()
}

fn commit(
    c: &mut Client,
    version: i16,
    group: &str,
    name: &str,
    offsets: &[(i32, i64)],
) -> Vec<i16> {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic(name))
            .with_partitions(
                offsets
                    .iter()
                    .map(|&(p, o)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(p)
                            .with_committed_offset(o)
                            .with_commit_timestamp(if version == 1 { 1_000 } else { -1 })
                            .with_committed_metadata(Some(s("old")))
                    })
                    .collect(),
            )]);
    let resp: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, version, &req);
    resp.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect()
}

#[test]
fn the_oldest_versions_kafka_3_9_accepted_work_on_content() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());

    // CreateTopics v0: no validate_only, no error message in the answer.
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic("old"))
            .with_num_partitions(2)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 0, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    // v1 with validate_only creates nothing.
    let req = req
        .with_validate_only(true)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic("old-validate"))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 1, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");

    for (partition, n) in [(0, 3usize), (1, 5)] {
        let values: Vec<Vec<u8>> = (0..n).map(|i| format!("v{i}").into_bytes()).collect();
        let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        produce(&mut c, "old", partition, batch(&refs));
    }

    // ListOffsets v0: the one offset found, as the "old style" list.
    assert_eq!(list_offsets_v0(&mut c, "old", 0, -1), vec![3]);
    assert_eq!(list_offsets_v0(&mut c, "old", 1, -1), vec![5]);
    assert_eq!(list_offsets_v0(&mut c, "old", 1, -2), vec![0]);

    // OffsetCommit v0 (no generation, no member) and v1 (commit timestamp), then OffsetFetch v0,
    // once the group's coordinator is up (the first FindCoordinator creates its topic).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let req = FindCoordinatorRequest::default().with_key(s("old-group"));
        let resp: FindCoordinatorResponse = c.send(ApiKey::FindCoordinator, 0, &req);
        if resp.error_code == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{resp:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut committed = |version: i16, offsets: &[(i32, i64)]| {
        // COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE / NOT_COORDINATOR are retried.
        for _ in 0..100 {
            let errors = commit(&mut c, version, "old-group", "old", offsets);
            if !errors.iter().any(|e| matches!(e, 14..=16)) {
                return errors;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the coordinator never loaded");
    };
    assert_eq!(committed(0, &[(0, 2)]), vec![0]);
    assert_eq!(committed(1, &[(1, 4)]), vec![0]);
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("old-group")))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(topic("old"))
            .with_partition_indexes(vec![0, 1])]));
    let resp: OffsetFetchResponse = c.send(ApiKey::OffsetFetch, 0, &req);
    let got: Vec<(i32, i64, i16, String)> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| {
            let metadata = p
                .metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            (
                p.partition_index,
                p.committed_offset,
                p.error_code,
                metadata,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![(0, 2, 0, "old".to_string()), (1, 4, 0, "old".to_string())]
    );

    // OffsetForLeaderEpoch v0 and v1: the end offset of epoch 0 is the log end offset.
    for version in [0, 1] {
        let req = OffsetForLeaderEpochRequest::default().with_topics(vec![
            OffsetForLeaderTopic::default()
                .with_topic(topic("old"))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(1)
                    .with_leader_epoch(0)]),
        ]);
        let resp: OffsetForLeaderEpochResponse =
            c.send(ApiKey::OffsetForLeaderEpoch, version, &req);
        let p = &resp.topics[0].partitions[0];
        assert_eq!((p.error_code, p.end_offset), (0, 5), "v{version}: {resp:?}");
        if version == 1 {
            assert_eq!(p.leader_epoch, 0);
        }
    }

    // DescribeConfigs v0: is_default instead of a config source.
    let req = AlterConfigsRequest::default().with_resources(vec![
        alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("old"))
            .with_configs(vec![alter_configs_request::AlterableConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("3600000")))]),
    ]);
    let resp: AlterConfigsResponse = c.send(ApiKey::AlterConfigs, 0, &req);
    assert_eq!(resp.responses[0].error_code, 0, "{resp:?}");
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("old"))
            .with_configuration_keys(Some(vec![s("retention.ms"), s("segment.bytes")]))]);
    let resp: DescribeConfigsResponse = c.send(ApiKey::DescribeConfigs, 0, &req);
    let got: Vec<(String, String, bool)> = resp.results[0]
        .configs
        .iter()
        .map(|e| {
            let value = e.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
            (e.name.to_string(), value, e.is_default)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("retention.ms".to_string(), "3600000".to_string(), false),
            ("segment.bytes".to_string(), "1073741824".to_string(), true),
        ]
    );

    // Produce v2 (magic 1 message sets): refused per partition, nothing appended, and the
    // connection still answers.
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic("old"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[b"refused"])))])]);
    for version in [0, 1, 2] {
        let resp: ProduceResponse = c.send(ApiKey::Produce, version, &req);
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(p.error_code, UNSUPPORTED_VERSION, "v{version}: {resp:?}");
    }
    assert_eq!(list_offsets_v0(&mut c, "old", 0, -1), vec![3]);

    // DeleteTopics v0.
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![topic("old")])
        .with_timeout_ms(10_000);
    let resp: DeleteTopicsResponse = c.send(ApiKey::DeleteTopics, 0, &req);
    assert_eq!(resp.responses[0].error_code, 0, "{resp:?}");
    let resp: MetadataResponse = c.send(
        ApiKey::Metadata,
        0,
        &MetadataRequest::default().with_topics(Some(Vec::new())),
    );
    assert!(
        resp.topics
            .iter()
            .all(|t| t.name.as_ref().map(|n| n.0.as_str()) != Some("old")),
        "{resp:?}"
    );
}

#[test]
fn find_coordinator_v5_and_v6_answer_groups_and_refuse_share_keys() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    for version in [5, 6] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let req = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![s("g5"), s("g6")]);
            let resp: FindCoordinatorResponse = c.send(ApiKey::FindCoordinator, version, &req);
            let got: Vec<(String, i16, i32, i32)> = resp
                .coordinators
                .iter()
                .map(|k| (k.key.to_string(), k.error_code, k.node_id.0, k.port))
                .collect();
            if got.iter().all(|g| g.1 == 0) {
                assert_eq!(
                    got,
                    vec![
                        ("g5".to_string(), 0, 0, i32::from(b.port)),
                        ("g6".to_string(), 0, 0, i32::from(b.port)),
                    ],
                    "v{version}"
                );
                break;
            }
            assert!(std::time::Instant::now() < deadline, "v{version}: {resp:?}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    // Key type 2 (a share group, KIP-932): Keel has none.
    let req = FindCoordinatorRequest::default()
        .with_key_type(2)
        .with_coordinator_keys(vec![s("share")]);
    let resp: FindCoordinatorResponse = c.send(ApiKey::FindCoordinator, 6, &req);
    assert_eq!(
        resp.coordinators[0].error_code, 42,
        "INVALID_REQUEST: {resp:?}"
    );
}
