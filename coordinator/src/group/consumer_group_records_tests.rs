use super::*;

fn id(b: u8) -> TopicId {
    [b; 16]
}

fn keys() -> Vec<ConsumerGroupKey> {
    let (g, m) = (String::from("grp"), String::from("mem"));
    vec![
        ConsumerGroupKey::Metadata {
            group_id: g.clone(),
        },
        ConsumerGroupKey::PartitionMetadata {
            group_id: g.clone(),
        },
        ConsumerGroupKey::MemberMetadata {
            group_id: g.clone(),
            member_id: m.clone(),
        },
        ConsumerGroupKey::TargetAssignmentMetadata {
            group_id: g.clone(),
        },
        ConsumerGroupKey::TargetAssignmentMember {
            group_id: g.clone(),
            member_id: m.clone(),
        },
        ConsumerGroupKey::CurrentMemberAssignment {
            group_id: g,
            member_id: m,
        },
    ]
}

fn values() -> Vec<ConsumerGroupValue> {
    vec![
        ConsumerGroupValue::Metadata(MetadataValue { epoch: 7 }),
        ConsumerGroupValue::PartitionMetadata(PartitionMetadataValue {
            topics: vec![
                TopicMetadata {
                    topic_id: id(1),
                    topic_name: "orders".into(),
                    partition_count: 12,
                },
                TopicMetadata {
                    topic_id: id(2),
                    topic_name: "ünïcode".into(),
                    partition_count: 0,
                },
            ],
        }),
        ConsumerGroupValue::MemberMetadata(MemberMetadataValue {
            instance_id: Some("instance-1".into()),
            rack_id: None,
            client_id: "consumer-1".into(),
            client_host: "/10.0.0.1".into(),
            subscribed_topic_names: vec!["a".into(), "orders".into()],
            subscribed_topic_regex: Some("t.*".into()),
            rebalance_timeout_ms: 300_000,
            server_assignor: Some("uniform".into()),
        }),
        ConsumerGroupValue::TargetAssignmentMetadata(TargetAssignmentMetadataValue {
            assignment_epoch: 6,
        }),
        ConsumerGroupValue::TargetAssignmentMember(TargetAssignmentMemberValue {
            topic_partitions: vec![(id(1), vec![0, 3, 11]), (id(2), vec![])],
        }),
        ConsumerGroupValue::CurrentMemberAssignment(CurrentMemberAssignmentValue {
            member_epoch: 5,
            previous_member_epoch: 4,
            state: MemberState::UnrevokedPartitions,
            assigned_partitions: vec![(id(1), vec![0, 3])],
            partitions_pending_revocation: vec![(id(1), vec![5]), (id(3), vec![1, 2])],
        }),
    ]
}

#[test]
fn keys_and_values_are_kafkas_layout() {
    let key = ConsumerGroupKey::CurrentMemberAssignment {
        group_id: "g".into(),
        member_id: "m".into(),
    };
    assert_eq!(&key.encode()[..], &[0, 8, 0, 1, b'g', 0, 1, b'm']);
    let key = ConsumerGroupKey::Metadata {
        group_id: "g".into(),
    };
    assert_eq!(&key.encode()[..], &[0, 3, 0, 1, b'g']);

    let epoch = ConsumerGroupValue::Metadata(MetadataValue { epoch: 258 });
    assert_eq!(&epoch.encode()[..], &[0, 0, 0, 0, 1, 2, 0]);

    let current = ConsumerGroupValue::CurrentMemberAssignment(CurrentMemberAssignmentValue {
        member_epoch: 3,
        previous_member_epoch: 2,
        state: MemberState::UnreleasedPartitions,
        assigned_partitions: vec![(id(9), vec![1])],
        partitions_pending_revocation: vec![],
    });
    let mut want = vec![0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 2];
    want.push(2); // one topic
    want.extend([9u8; 16]);
    want.extend([2, 0, 0, 0, 1, 0]); // one partition, no tagged fields
    want.extend([1, 0]); // nothing pending; no tagged fields
    assert_eq!(&current.encode()[..], &want[..]);

    let member = ConsumerGroupValue::MemberMetadata(MemberMetadataValue {
        instance_id: None,
        rack_id: Some("r".into()),
        client_id: "c".into(),
        client_host: "h".into(),
        subscribed_topic_names: vec!["t".into()],
        subscribed_topic_regex: None,
        rebalance_timeout_ms: 1,
        server_assignor: None,
    });
    let want = [
        0, 0, 0, 2, b'r', 2, b'c', 2, b'h', 2, 2, b't', 0, 0, 0, 0, 1, 0, 0,
    ];
    assert_eq!(&member.encode()[..], &want[..]);
}

#[test]
fn every_record_round_trips() {
    for (key, value) in keys().iter().zip(values()) {
        let (k, v) = encode_record(key, &value);
        assert_eq!(decode_record(&k, &v), Some((key.clone(), value)));
        assert_eq!(record_group(&k).as_deref(), Some("grp"));
    }
    // Long strings take multi-byte varints.
    let long = "x".repeat(300);
    let value = ConsumerGroupValue::MemberMetadata(MemberMetadataValue {
        instance_id: Some(long.clone()),
        rack_id: Some(long.clone()),
        client_id: long.clone(),
        client_host: long.clone(),
        subscribed_topic_names: vec![long.clone(); 200],
        subscribed_topic_regex: Some(long.clone()),
        rebalance_timeout_ms: -1,
        server_assignor: Some(long),
    });
    let key = &keys()[2];
    assert_eq!(
        ConsumerGroupValue::decode(key, &value.encode()),
        Some(value)
    );
}

#[test]
fn tagged_fields_and_racks_are_read_past() {
    // A metadata value with Kafka 4.1's MetadataHash (tag 0, 8 bytes) and tag 1.
    let mut v = vec![0, 0, 0, 0, 0, 9, 2, 0, 8];
    v.extend(77i64.to_be_bytes());
    v.extend([1, 8]);
    v.extend((-1i64).to_be_bytes());
    let key = &keys()[0];
    assert_eq!(
        ConsumerGroupValue::decode(key, &v),
        Some(ConsumerGroupValue::Metadata(MetadataValue { epoch: 9 }))
    );
    // Partition metadata with racks, as Kafka 3.7 wrote it.
    let mut v = vec![0, 0, 2];
    v.extend(id(4));
    v.extend([2, b't', 0, 0, 0, 2]);
    v.extend([2, 0, 0, 0, 1, 3, 3, b'r', b'1', 3, b'r', b'2', 0]); // partition 1 → r1, r2
    v.extend([0, 0]); // topic, value tagged fields
    assert_eq!(
        ConsumerGroupValue::decode(&keys()[1], &v),
        Some(ConsumerGroupValue::PartitionMetadata(
            PartitionMetadataValue {
                topics: vec![TopicMetadata {
                    topic_id: id(4),
                    topic_name: "t".into(),
                    partition_count: 2,
                }],
            }
        ))
    );
}

#[test]
fn other_keys_are_not_consumer_group_records() {
    for key in [
        &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 0][..], // an offset commit
        &[0, 2, 0, 1, b'g'],                             // a classic group
        &[0, 9, 0, 1, b'g'],
        &[0, 3, 0, 1, b'g', 0], // trailing byte
        &[0, 5, 0, 1, b'g'],    // no member id
        &[0, 3, 0xff, 0xff],    // a null group id
        &[0, 3, 0, 1, 0xff],    // not UTF-8
        &[],
    ] {
        assert_eq!(record_group(&Bytes::copy_from_slice(key)), None, "{key:?}");
    }
}

#[test]
fn truncated_or_corrupt_bytes_are_none_not_a_panic() {
    for (key, value) in keys().iter().zip(values()) {
        let (k, v) = encode_record(key, &value);
        for len in 0..k.len() {
            assert_eq!(ConsumerGroupKey::decode(&k[..len]), None, "{key:?} {len}");
        }
        for len in 0..v.len() {
            assert_eq!(ConsumerGroupValue::decode(key, &v[..len]), None, "{len}");
        }
        let mut wrong_version = v.to_vec();
        wrong_version[1] = 1;
        assert_eq!(ConsumerGroupValue::decode(key, &wrong_version), None);
    }
    // Counts and lengths far beyond the bytes; an unknown member state; a varint too long.
    let key = &keys()[5];
    let hostile: [&[u8]; 5] = [
        &[
            0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f,
        ],
        &[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 127, 1, 1, 0],
        &[
            0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
        &[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0x80],
        &[
            0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 5, 0, 0xff, 0xff, 0xff, 0x0f,
        ],
    ];
    for bytes in hostile {
        assert_eq!(ConsumerGroupValue::decode(key, bytes), None, "{bytes:?}");
    }
    // Random corruption, replayable from the seed: never a panic, and whatever decodes
    // re-encodes to the same value.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let records: Vec<(Bytes, Bytes)> = keys()
        .iter()
        .zip(values())
        .map(|(k, v)| encode_record(k, &v))
        .collect();
    for _ in 0..30_000 {
        let (k, v) = &records[(next() % records.len() as u64) as usize];
        let mut key = k.to_vec();
        let mut value = v.to_vec();
        let target = if next() % 4 == 0 {
            &mut key
        } else {
            &mut value
        };
        for _ in 0..1 + next() % 3 {
            let at = (next() % target.len() as u64) as usize;
            target[at] = next() as u8;
        }
        let cut = (next() % 3) as usize;
        target.truncate(target.len().saturating_sub(cut));
        let _ = record_group(&Bytes::from(key.clone()));
        if let Some((key, value)) = decode_record(&key, &value) {
            let again = ConsumerGroupValue::decode(&key, &value.encode());
            assert_eq!(again, Some(value));
            assert_eq!(ConsumerGroupKey::decode(&key.encode()), Some(key));
        }
    }
}
