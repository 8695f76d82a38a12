use super::*;

fn image_with(brokers: &[(i32, Option<&str>)]) -> MetadataImage {
    let mut image = MetadataImage::default();
    for (id, rack) in brokers {
        image.brokers.insert(
            *id,
            crate::metadata::BrokerMeta {
                id: *id,
                host: "h".into(),
                port: 9092,
                rack: rack.map(String::from),
                listeners: Vec::new(),
            },
        );
    }
    image
}

#[test]
fn placement_alternates_racks_and_balances_leaders() {
    let image = image_with(&[
        (1, Some("a")),
        (2, Some("a")),
        (3, Some("b")),
        (4, Some("b")),
    ]);
    let placed = place_replicas(&image, 4, 2);
    assert_eq!(placed, vec![vec![1, 3], vec![3, 2], vec![2, 4], vec![4, 1]]);
    let rack = |b: i32| if b <= 2 { "a" } else { "b" };
    for r in &placed {
        assert_ne!(
            rack(r[0]),
            rack(r[1]),
            "replicas of a partition span racks: {r:?}"
        );
    }
    // Without racks: leaders go to the brokers leading least.
    let mut image = image_with(&[(1, None), (2, None), (3, None)]);
    image.topics.insert(
        "old".into(),
        Arc::new(TopicMeta {
            name: "old".into(),
            id: [1; 16],
            partitions: (0..2)
                .map(|i| crate::metadata::PartitionMeta {
                    index: i,
                    shard: 0,
                    leader_epoch: 0,
                    leader: 1,
                    replicas: vec![1],
                    isr: vec![1],
                    elr: Vec::new(),
                    partition_epoch: 0,
                })
                .collect(),
            replication_factor: 1,
            configs: BTreeMap::new(),
        }),
    );
    let leaders: Vec<i32> = place_replicas(&image, 4, 1).iter().map(|r| r[0]).collect();
    assert_eq!(leaders, vec![2, 3, 2, 3]);
    assert!(place_replicas(&image_with(&[]), 3, 1).is_empty());
}

#[test]
fn incremental_ops() {
    let cur: BTreeMap<String, String> = [("retention.ms".to_string(), "5".to_string())].into();
    let next = apply_change(
        &cur,
        &ConfigChange::Incremental(vec![
            ("segment.bytes".into(), 0, Some("1048576".into())),
            ("retention.ms".into(), 1, None),
            ("cleanup.policy".into(), 2, Some("compact".into())),
            ("cleanup.policy".into(), 2, Some("delete".into())),
            ("cleanup.policy".into(), 3, Some("compact".into())),
            (
                "follower.replication.throttled.replicas".into(),
                2,
                Some("0:1".into()),
            ),
            (
                "follower.replication.throttled.replicas".into(),
                2,
                Some("1:2".into()),
            ),
        ]),
        validate_topic_config,
    )
    .unwrap();
    assert_eq!(
        next.get("follower.replication.throttled.replicas")
            .map(String::as_str),
        Some("0:1,1:2")
    );
    assert_eq!(
        next.get("segment.bytes").map(String::as_str),
        Some("1048576")
    );
    assert_eq!(
        next.get("cleanup.policy").map(String::as_str),
        Some("delete")
    );
    assert!(!next.contains_key("retention.ms"));
    let err = apply_change(
        &cur,
        &ConfigChange::Incremental(vec![("retention.ms".into(), 2, Some("1".into()))]),
        validate_topic_config,
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::of(ResponseError::InvalidConfig));
    let err = apply_change(
        &cur,
        &ConfigChange::Replace([("bogus".to_string(), "1".to_string())].into()),
        validate_topic_config,
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::of(ResponseError::InvalidConfig));
    // Dynamic broker configs: the throttle rates only, never negative.
    let ok = apply_change(
        &BTreeMap::new(),
        &ConfigChange::Incremental(vec![(
            "leader.replication.throttled.rate".into(),
            0,
            Some("1000".into()),
        )]),
        validate_dynamic_broker_config,
    )
    .unwrap();
    assert_eq!(ok["leader.replication.throttled.rate"], "1000");
    for (name, value) in [
        ("leader.replication.throttled.rate", "-1"),
        ("follower.replication.throttled.rate", "fast"),
        ("log.retention.ms", "1"),
    ] {
        let err = apply_change(
            &BTreeMap::new(),
            &ConfigChange::Incremental(vec![(name.into(), 0, Some(value.into()))]),
            validate_dynamic_broker_config,
        )
        .unwrap_err();
        assert_eq!(
            err.code,
            ErrorCode::of(ResponseError::InvalidConfig),
            "{name}"
        );
    }
}

fn cluster_with(brokers: &[(i32, bool)]) -> ClusterImage {
    let mut image = ClusterImage::default();
    for (id, fenced) in brokers {
        image.brokers.insert(
            *id,
            keel_raft::image::BrokerInfo {
                broker_id: *id,
                incarnation_id: [0; 16],
                host: "h".into(),
                port: 9092,
                rack: None,
                fenced: *fenced,
                broker_epoch: 1,
                shard_count: 1,
                inter_broker_host: None,
                inter_broker_port: None,
                inter_broker_shard_ports: Vec::new(),
                previous_broker_epoch: -1,
                listeners: Vec::new(),
                offline_replicas: Default::default(),
            },
        );
    }
    image
}

#[test]
fn manual_partition_assignments_are_checked_as_kafka_checks_them() {
    // Broker 3 is registered but fenced.
    let image = cluster_with(&[(1, false), (2, false), (3, true)]);
    let ok = manual_partitions(&image, 2, 4, 2, &[vec![3, 1], vec![2, 3]]).unwrap();
    // The fenced broker is a replica, not in the ISR; the first unfenced replica leads.
    assert_eq!(ok, vec![(vec![3, 1], vec![1]), (vec![2, 3], vec![2])]);
    let records = new_partition_records([7; 16], 2, ok);
    assert!(matches!(
        &records[0],
        Record::PartitionCreated {
            partition: 2,
            leader: 1,
            ..
        }
    ));
    let refused = |assignments: &[Vec<i32>], count: i32| {
        let e = manual_partitions(&image, 2, count, 2, assignments).unwrap_err();
        assert_eq!(
            e.code,
            ErrorCode::of(ResponseError::InvalidReplicaAssignment)
        );
        e.message
    };
    assert!(refused(&[vec![1, 2]], 4).contains("add 2 additional partition(s), but only 1"));
    assert!(refused(&[vec![1, 2, 3]], 3).contains("with 3 replica(s)"));
    assert!(refused(&[vec![1, 1]], 3).contains("broker 1 more than once"));
    assert!(refused(&[vec![1, 9]], 3).contains("broker 9, but no such broker is registered"));
    assert!(refused(&[vec![]], 3).contains("empty replica list"));
    assert!(refused(&[vec![3]], 3).contains("with 1 replica(s)"));
    let e = manual_partitions(&image, 2, 3, 1, &[vec![3]]).unwrap_err();
    assert!(
        e.message.contains("partition 2 are fenced"),
        "{}",
        e.message
    );
}
