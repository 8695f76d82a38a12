use super::*;

fn key(g: &str, t: &str, p: i32) -> OffsetKey {
    OffsetKey {
        group: g.into(),
        topic: t.into(),
        partition: p,
    }
}

#[test]
fn key_and_value_layout_is_kafkas() {
    let k = encode_key(&key("g", "tp", 7));
    assert_eq!(&k[..], &[0, 1, 0, 1, b'g', 0, 2, b't', b'p', 0, 0, 0, 7]);
    let v = encode_value(&CommittedOffset {
        offset: 42,
        leader_epoch: 3,
        metadata: "m".into(),
        commit_timestamp_ms: 1000,
    });
    let mut want = vec![0, 3];
    want.extend(42i64.to_be_bytes());
    want.extend(3i32.to_be_bytes());
    want.extend([0, 1, b'm']);
    want.extend(1000i64.to_be_bytes());
    assert_eq!(&v[..], &want[..]);
}

#[test]
fn older_value_versions_decode() {
    // v1: offset, metadata, commit timestamp, expire timestamp.
    let mut v1 = vec![0, 1];
    v1.extend(5i64.to_be_bytes());
    v1.extend([0, 0]);
    v1.extend(77i64.to_be_bytes());
    v1.extend(99i64.to_be_bytes());
    let got = decode_value(Bytes::from(v1)).unwrap();
    assert_eq!(
        (got.offset, got.leader_epoch, got.commit_timestamp_ms),
        (5, -1, 77)
    );
    assert!(decode_value(Bytes::from_static(&[0, 9, 0])).is_none());
    assert!(decode_value(Bytes::from_static(&[0, 3, 0, 0])).is_none());
}

#[test]
fn batch_round_trip_with_tombstone() {
    let changes = vec![
        OffsetChange::Commit(
            key("g1", "a", 0),
            CommittedOffset {
                offset: 10,
                leader_epoch: -1,
                metadata: "x".repeat(100),
                commit_timestamp_ms: 5,
            },
        ),
        OffsetChange::Delete(key("g1", "a", 1)),
    ];
    let mut batch = encode_batch(&changes, 5);
    // Pretend the log stamped base offset 100.
    batch[0..8].copy_from_slice(&100i64.to_be_bytes());
    let bytes = batch.freeze();
    let mut seen = Vec::new();
    let mut bad = 0;
    let next = walk_batches(&bytes, &mut bad, |k, v| seen.push(decode_record(k, v)));
    assert_eq!(next, Some(102));
    let batch_length = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
    assert_eq!(batch_length + 12, bytes.len(), "one batch");
    assert_eq!(&bytes[53..57], &(-1i32).to_be_bytes(), "base sequence");
    assert_eq!(bad, 0);
    let want: Vec<CoordinatorRecord> = changes.into_iter().map(CoordinatorRecord::Offset).collect();
    assert_eq!(seen, want);
}

fn member(id: &str, instance: Option<&str>) -> MemberMetadata {
    MemberMetadata {
        member_id: id.into(),
        group_instance_id: instance.map(Into::into),
        client_id: format!("client-{id}"),
        client_host: "/10.0.0.1".into(),
        rebalance_timeout_ms: 60_000,
        session_timeout_ms: 45_000,
        subscription: Bytes::from(format!("sub:{id}")),
        assignment: Bytes::from(format!("assigned:{id}")),
    }
}

fn group_value() -> GroupMetadataValue {
    GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation_id: 7,
        protocol_name: Some("range".into()),
        leader_id: Some("m1".into()),
        current_state_timestamp_ms: 1_700_000_000_000,
        members: vec![member("m1", None), member("m2", Some("i2"))],
    }
}

#[test]
fn group_metadata_layout_is_kafkas() {
    let k = encode_group_metadata_key("g");
    assert_eq!(&k[..], &[0, 2, 0, 1, b'g']);
    let v = encode_group_metadata_value(&GroupMetadataValue {
        protocol_type: "c".into(),
        generation_id: 5,
        protocol_name: Some("r".into()),
        leader_id: None,
        current_state_timestamp_ms: 9,
        members: vec![MemberMetadata {
            member_id: "m".into(),
            group_instance_id: Some("i".into()),
            client_id: "c".into(),
            client_host: "h".into(),
            rebalance_timeout_ms: 3,
            session_timeout_ms: 4,
            subscription: Bytes::from_static(b"s"),
            assignment: Bytes::new(),
        }],
    });
    let mut want = vec![0, 3, 0, 1, b'c'];
    want.extend(5i32.to_be_bytes());
    want.extend([0, 1, b'r', 0xff, 0xff]);
    want.extend(9i64.to_be_bytes());
    want.extend(1i32.to_be_bytes());
    want.extend([0, 1, b'm', 0, 1, b'i', 0, 1, b'c', 0, 1, b'h']);
    want.extend(3i32.to_be_bytes());
    want.extend(4i32.to_be_bytes());
    want.extend([0, 0, 0, 1, b's', 0, 0, 0, 0]);
    assert_eq!(&v[..], &want[..]);
}

#[test]
fn group_metadata_round_trips_at_every_version_read() {
    let value = group_value();
    for version in 0..=3 {
        let bytes = encode_group_metadata_value_at(&value, version);
        let got = decode_group_metadata_value(bytes).expect("decodes");
        let mut want = value.clone();
        for m in &mut want.members {
            if version < 1 {
                m.rebalance_timeout_ms = m.session_timeout_ms;
            }
            if version < 3 {
                m.group_instance_id = None;
            }
        }
        if version < 2 {
            want.current_state_timestamp_ms = -1;
        }
        assert_eq!(got, want, "v{version}");
    }
    let empty = GroupMetadataValue {
        protocol_name: None,
        leader_id: None,
        members: Vec::new(),
        ..group_value()
    };
    let got = decode_group_metadata_value(encode_group_metadata_value(&empty));
    assert_eq!(got, Some(empty));
}

#[test]
fn group_records_and_tombstones_decode_beside_offsets() {
    let changes = [
        GroupMetadataChange::Store("g1".into(), group_value()),
        GroupMetadataChange::Delete("g2".into()),
    ];
    let offset = OffsetChange::Delete(key("g2", "a", 0));
    let mut records: Vec<_> = changes.iter().map(GroupMetadataChange::encode).collect();
    records.insert(1, offset.encode());
    let bytes = encode_records_batch(&records, 5).freeze();
    let mut seen = Vec::new();
    let mut bad = 0;
    let next = walk_batches(&bytes, &mut bad, |k, v| seen.push(decode_record(k, v)));
    assert_eq!((next, bad), (Some(3), 0));
    let [store, delete] = changes;
    assert_eq!(
        seen,
        vec![
            CoordinatorRecord::GroupMetadata(store),
            CoordinatorRecord::Offset(offset),
            CoordinatorRecord::GroupMetadata(delete),
        ]
    );
    // A value of a version this broker does not read.
    let mut v4 = encode_group_metadata_value(&group_value()).to_vec();
    v4[1] = 4;
    let key = encode_group_metadata_key("g");
    assert_eq!(
        decode_record(Some(key), Some(Bytes::from(v4))),
        CoordinatorRecord::Unreadable
    );
}

#[test]
fn hostile_group_metadata_is_none_not_a_panic() {
    let good = encode_group_metadata_value(&group_value());
    for len in 0..good.len() {
        assert_eq!(
            decode_group_metadata_value(good.slice(..len)),
            None,
            "{len}"
        );
    }
    // A member count far beyond the bytes, and negative lengths and counts.
    let mut huge = vec![0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
    huge.extend(0i64.to_be_bytes());
    let count_at = huge.len();
    huge.extend(i32::MAX.to_be_bytes());
    huge.extend([0u8; 18]);
    assert_eq!(decode_group_metadata_value(Bytes::from(huge.clone())), None);
    huge[count_at..count_at + 4].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(decode_group_metadata_value(Bytes::from(huge)), None);
    let mut null_bytes = good.to_vec();
    let at = null_bytes.len() - 4 - b"assigned:m2".len();
    null_bytes[at..at + 4].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(decode_group_metadata_value(Bytes::from(null_bytes)), None);
    // Random corruption of a good value, replayable from the seed: never a panic, and
    // whatever decodes re-encodes.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut bytes = good.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        bytes.truncate(bytes.len() - (next() % 3) as usize);
        let key = encode_group_metadata_key("g");
        let _ = decode_record(Some(key), Some(Bytes::from(bytes.clone())));
        if let Some(v) = decode_group_metadata_value(Bytes::from(bytes)) {
            let again = decode_group_metadata_value(encode_group_metadata_value(&v));
            assert_eq!(again, Some(v));
        }
    }
}

#[test]
fn garbage_is_unreadable_not_a_panic() {
    for len in 0..80 {
        let junk = Bytes::from(vec![0x7fu8; len]);
        let mut bad = 0;
        let _ = walk_batches(&junk, &mut bad, |_, _| {});
        let _ = decode_record(Some(junk.clone()), Some(junk.clone()));
    }
    assert_eq!(
        decode_record(Some(Bytes::from_static(&[0, 1, 0, 5, b'a'])), None),
        CoordinatorRecord::Unreadable
    );
    assert_eq!(decode_record(None, None), CoordinatorRecord::Unreadable);
}

/// A batch that claims i32::MAX records (the record_batch fuzz target's find) is one
/// unreadable batch for the loader, not a 200 GB allocation that aborts the process.
#[test]
fn a_batch_claiming_i32_max_records_is_unreadable_not_an_abort() {
    // The corpus entry is the fuzz target's control byte, then the batch.
    let entry =
        include_bytes!("../../../fuzz/corpus/record_batch/regression-kp-record-count-alloc");
    let bytes = Bytes::copy_from_slice(&entry[1..]);
    let mut unreadable = 0u64;
    let mut records = 0u64;
    walk_batches_with(&bytes, &mut unreadable, |_, _, _| records += 1);
    assert_eq!((unreadable, records), (1, 0));
}
