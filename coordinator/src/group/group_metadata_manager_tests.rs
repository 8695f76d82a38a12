use super::super::classic_group as classic;
use super::super::offset_metadata_manager::{apply_change, check_member};
use super::super::records::{OffsetChange, OffsetKey};
use super::*;
use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;

fn code(e: ResponseError) -> ErrorCode {
    ErrorCode::of(e)
}

fn commit(g: &str, t: &str, i: i32, offset: i64, ts: i64) -> OffsetChange {
    OffsetChange::Commit(
        OffsetKey {
            group: g.into(),
            topic: t.into(),
            partition: i,
        },
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: ts,
        },
    )
}

fn delete(g: &str, t: &str, i: i32) -> OffsetChange {
    OffsetChange::Delete(OffsetKey {
        group: g.into(),
        topic: t.into(),
        partition: i,
    })
}

#[test]
fn replay_latest_wins_and_tombstones_delete() {
    let mut groups = HashMap::new();
    for c in [
        commit("g", "t", 0, 5, 1),
        commit("g", "t", 0, 9, 2),
        commit("g", "t", 1, 3, 2),
        delete("g", "t", 1),
        commit("h", "t", 0, 1, 1),
        delete("h", "t", 0),
    ] {
        apply_change(&mut groups, 3, c);
    }
    assert_eq!(groups.len(), 1, "h lost its only offset and is forgotten");
    let g = &groups["g"];
    assert_eq!(g.partition, 3);
    assert_eq!(g.offsets.len(), 1);
    assert_eq!(g.offsets[&("t".to_string(), 0)].offset, 9);
}

#[test]
fn simple_commits_pass_member_commits_do_not() {
    let mut g = GroupEntry::new(0);
    assert_eq!(check_member(&mut g, "", -1, None, 0), ErrorCode::NONE);
    assert_eq!(
        check_member(&mut g, "member-1", 3, None, 0),
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        check_member(&mut g, "", 0, Some("static"), 0),
        code(ResponseError::UnknownMemberId)
    );
}

fn join(member_id: &str) -> classic::JoinRequest {
    classic::JoinRequest {
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: CONSUMER_PROTOCOL_TYPE.into(),
        protocols: vec![(
            "range".into(),
            bytes::Bytes::from_static(b"\0\0\0\0\0\x02\0\x01a\0\x01b\xff\xff\xff\xff"),
        )],
        require_known_member_id: false,
    }
}

/// A group with one member at generation 1; its member id.
fn joined(g: &mut GroupEntry) -> String {
    let c = g
        .classic
        .insert(ClassicGroup::new("g", classic::GroupConfig::default()));
    match c.join(join(""), 0) {
        classic::Reply::Now(r) => {
            assert_eq!((r.error, r.generation_id), (ErrorCode::NONE, 1));
            r.member_id
        }
        classic::Reply::Later(_) => panic!("a sole member's join completes at once"),
    }
}

#[test]
fn a_classic_group_fences_commits_and_is_active_while_it_has_members() {
    let mut g = GroupEntry::new(0);
    let member = joined(&mut g);
    assert!(g.has_active_members());
    assert!(!g.is_forgettable());
    // CompletingRebalance: the member has no assignment yet.
    assert_eq!(
        check_member(&mut g, &member, 1, None, 1),
        code(ResponseError::RebalanceInProgress)
    );
    let c = g.classic.as_mut().unwrap();
    let sync = classic::SyncRequest {
        member_id: member.clone(),
        group_instance_id: None,
        generation_id: 1,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![(member.clone(), bytes::Bytes::new())],
    };
    assert!(matches!(c.sync(sync, 1), classic::Reply::Now(r) if r.error == ErrorCode::NONE));
    assert_eq!(check_member(&mut g, &member, 1, None, 2), ErrorCode::NONE);
    assert_eq!(
        check_member(&mut g, &member, 0, None, 2),
        code(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        check_member(&mut g, "stranger", 1, None, 2),
        code(ResponseError::UnknownMemberId)
    );
    // A simple commit names no member of an active group.
    assert_eq!(
        check_member(&mut g, "", -1, None, 2),
        code(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.subscribed_topics(),
        Some(["a".to_string(), "b".to_string()].into())
    );
    // Once the member leaves, the group is Empty: simple commits pass again.
    let leaving = classic::LeavingMember {
        member_id: member,
        group_instance_id: None,
    };
    let c = g.classic.as_mut().unwrap();
    assert_eq!(c.leave(&[leaving], 3), Ok(vec![ErrorCode::NONE]));
    assert!(!g.has_active_members());
    assert_eq!(g.subscribed_topics(), Some(HashSet::new()));
    assert_eq!(check_member(&mut g, "", -1, None, 3), ErrorCode::NONE);
    assert!(!g.is_forgettable());
    assert!(g.is_idle(), "no offsets, no members, no timers");
    g.offsets.insert(
        ("t".into(), 0),
        CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        },
    );
    assert!(!g.is_forgettable() && !g.is_idle());
}

#[test]
fn subscriptions_are_read_from_consumer_protocol_metadata() {
    // v0: topics ["a", "bc"], null user data.
    let v0 = b"\0\0\0\0\0\x02\0\x01a\0\x02bc\xff\xff\xff\xff";
    assert_eq!(
        subscription_topics(v0),
        Some(vec!["a".to_string(), "bc".to_string()])
    );
    // v1+ append owned partitions (and more) after the user data: not read.
    let v1 = b"\0\x01\0\0\0\x01\0\x01a\0\0\0\0\0\0\0\0";
    assert_eq!(subscription_topics(v1), Some(vec!["a".to_string()]));
    assert_eq!(subscription_topics(b"\0\0\0\0\0\0"), Some(vec![]));
    // Truncated, a count past the bytes, a negative length, a negative version.
    for bad in [
        &b""[..],
        b"\0\0\0\0",
        b"\0\0\0\0\0\x01\0\x05ab",
        b"\0\0\x7f\xff\xff\xff\0\x01a",
        b"\0\0\0\0\0\x01\xff\xffa",
        b"\xff\xff\0\0\0\0",
        b"\0\0\0\0\0\x01\0\x02\xff\xfe",
    ] {
        assert_eq!(subscription_topics(bad), None, "{bad:?}");
    }
    // Random bytes never panic; random topic lists read back as written.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2_000 {
        let len = (next() % 48) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let _ = subscription_topics(&bytes);
        let topics: Vec<String> = (0..next() % 4)
            .map(|i| format!("t{i}-{}", next() % 1000))
            .collect();
        let mut encoded = vec![0, (next() % 4) as u8];
        encoded.extend((topics.len() as i32).to_be_bytes());
        for t in &topics {
            encoded.extend((t.len() as i16).to_be_bytes());
            encoded.extend(t.as_bytes());
        }
        encoded.extend((-1i32).to_be_bytes());
        assert_eq!(subscription_topics(&encoded), Some(topics));
    }
}
