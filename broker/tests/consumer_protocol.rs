//! KIP-848's consumer group protocol on the wire: ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe driven by hand, for the exact error codes and the reconciliation
//! steps a client library hides; OffsetCommit fencing by member epoch; ListGroups and
//! DescribeGroups of a consumer group; and a bounded flood of joins. Real-client scenarios
//! (confluent-kafka with `group.protocol=consumer`) are in
//! `tests/python/test_consumer_protocol.py`.

mod common;

use std::collections::BTreeSet;

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = keel_vocab::ErrorCode::NONE.code();
const UNKNOWN_MEMBER_ID: i16 = 25;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const INVALID_REQUEST: i16 = 42;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const GROUP_MAX_SIZE_REACHED: i16 = 81;
const FENCED_MEMBER_EPOCH: i16 = 110;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;
const INVALID_REGULAR_EXPRESSION: i16 = 128;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

/// The topic's id, from Metadata v12.
fn topic_id(c: &mut Client, name: &str) -> uuid::Uuid {
    let r: MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(topic(name))),
        ])),
    );
    assert_eq!(r.topics[0].error_code, NONE);
    r.topics[0].topic_id
}

struct Hb<'a> {
    group: &'a str,
    member_id: &'a str,
    epoch: i32,
    topics: Option<Vec<&'a str>>,
    regex: Option<&'a str>,
    assignor: Option<&'a str>,
    owned: Option<Vec<(uuid::Uuid, Vec<i32>)>>,
    rebalance_timeout_ms: i32,
}

impl<'a> Hb<'a> {
    fn join(group: &'a str, member_id: &'a str, topics: &[&'a str]) -> Hb<'a> {
        Hb {
            group,
            member_id,
            epoch: 0,
            topics: Some(topics.to_vec()),
            regex: None,
            assignor: None,
            owned: Some(vec![]),
            rebalance_timeout_ms: 30_000,
        }
    }

    fn beat(group: &'a str, member_id: &'a str, epoch: i32) -> Hb<'a> {
        Hb {
            group,
            member_id,
            epoch,
            topics: None,
            regex: None,
            assignor: None,
            owned: None,
            rebalance_timeout_ms: -1,
        }
    }

    fn send(self, c: &mut Client) -> ConsumerGroupHeartbeatResponse {
        let owned = self.owned.map(|o| {
            o.into_iter()
                .map(|(id, partitions)| {
                    consumer_group_heartbeat_request::TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect()
        });
        c.send(
            ApiKey::ConsumerGroupHeartbeat,
            1,
            &ConsumerGroupHeartbeatRequest::default()
                .with_group_id(gid(self.group))
                .with_member_id(s(self.member_id))
                .with_member_epoch(self.epoch)
                .with_rebalance_timeout_ms(self.rebalance_timeout_ms)
                .with_subscribed_topic_names(
                    self.topics.map(|t| t.into_iter().map(topic).collect()),
                )
                .with_subscribed_topic_regex(self.regex.map(s))
                .with_server_assignor(self.assignor.map(s))
                .with_topic_partitions(owned),
        )
    }
}

/// The partitions of the answer's assignment (all of one topic here).
fn assigned(r: &ConsumerGroupHeartbeatResponse) -> Option<BTreeSet<i32>> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().copied())
            .collect()
    })
}

fn commit(c: &mut Client, version: i16, group: &str, member: &str, epoch: i32, offset: i64) -> i16 {
    let r: OffsetCommitResponse = c.send(
        ApiKey::OffsetCommit,
        version,
        &OffsetCommitRequest::default()
            .with_group_id(gid(group))
            .with_member_id(s(member))
            .with_generation_id_or_member_epoch(epoch)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic("orders"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(offset),
                    ]),
            ]),
    );
    r.topics[0].partitions[0].error_code
}

fn committed(c: &mut Client, group: &str) -> i64 {
    let r: OffsetFetchResponse = c.send(
        ApiKey::OffsetFetch,
        5,
        &OffsetFetchRequest::default()
            .with_group_id(gid(group))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic("orders"))
                    .with_partition_indexes(vec![0]),
            ])),
    );
    r.topics[0].partitions[0].committed_offset
}

/// OffsetFetch v9 of partition 0 as a member: (group error, committed offset).
fn fetch_v9(c: &mut Client, group: &str, member: &str, epoch: i32) -> (i16, i64) {
    let r: OffsetFetchResponse = c.send(
        ApiKey::OffsetFetch,
        9,
        &OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(gid(group))
                .with_member_id((!member.is_empty()).then(|| s(member)))
                .with_member_epoch(epoch)
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopics::default()
                        .with_name(topic("orders"))
                        .with_partition_indexes(vec![0]),
                ])),
        ]),
    );
    let g = &r.groups[0];
    let offset = g
        .topics
        .first()
        .map_or(-1, |t| t.partitions[0].committed_offset);
    (g.error_code, offset)
}

fn describe(
    c: &mut Client,
    groups: &[&str],
) -> Vec<consumer_group_describe_response::DescribedGroup> {
    let r: ConsumerGroupDescribeResponse = c.send(
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default()
            .with_group_ids(groups.iter().map(|g| gid(g)).collect()),
    );
    r.groups
}

fn find_coordinator(c: &mut Client, group: &str) {
    let r: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default().with_key(s(group)),
    );
    assert_eq!(r.error_code, NONE);
}

#[test]
fn heartbeats_reconcile_incrementally_and_fence_by_epoch() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "orders", 4);
    let orders = topic_id(&mut c, "orders");
    let g = "kip848";
    find_coordinator(&mut c, g);

    // The first member joins (v1: it names itself) and gets every partition at epoch 1.
    let a = Hb::join(g, "member-a", &["orders"]).send(&mut c);
    assert_eq!(a.error_code, NONE, "{:?}", a.error_message);
    assert_eq!(a.member_id.as_deref(), Some("member-a"));
    assert_eq!(a.member_epoch, 1);
    assert_eq!(assigned(&a), Some(BTreeSet::from([0, 1, 2, 3])));
    assert!(a.heartbeat_interval_ms > 0);
    let all = vec![(orders, vec![0, 1, 2, 3])];

    // A second member joins: epoch 2, but it gets nothing until `a` revokes.
    let bm = Hb::join(g, "member-b", &["orders"]).send(&mut c);
    assert_eq!(bm.error_code, NONE);
    assert_eq!(bm.member_epoch, 2);
    assert_eq!(assigned(&bm), Some(BTreeSet::new()));

    // `a` heartbeats: it must revoke two partitions; its epoch stays at 1 until it has.
    let mut hb = Hb::beat(g, "member-a", 1);
    hb.owned = Some(all.clone());
    let a2 = hb.send(&mut c);
    assert_eq!(a2.error_code, NONE);
    assert_eq!(a2.member_epoch, 1);
    let kept = assigned(&a2).expect("a shrunk assignment");
    assert_eq!(kept.len(), 2);
    // While `a` still holds them, `b` waits at epoch 2 with nothing.
    let b2 = Hb::beat(g, "member-b", 2).send(&mut c);
    assert_eq!((b2.error_code, b2.member_epoch), (NONE, 2));
    assert!(assigned(&b2).is_none_or(|p| p.is_empty()));
    let describe_mid = describe(&mut c, &[g]);
    assert_eq!(describe_mid[0].group_state.to_string(), "Reconciling");

    // `a` acknowledges (owns only what it kept): epoch 2. Then `b` gets the released two.
    let mut hb = Hb::beat(g, "member-a", 1);
    hb.owned = Some(vec![(orders, kept.iter().copied().collect())]);
    let a3 = hb.send(&mut c);
    assert_eq!((a3.error_code, a3.member_epoch), (NONE, 2));
    let b3 = Hb::beat(g, "member-b", 2).send(&mut c);
    assert_eq!(b3.error_code, NONE);
    let moved = assigned(&b3).expect("b's partitions");
    assert_eq!(moved.len(), 2);
    assert!(moved.is_disjoint(&kept));
    assert_eq!(moved.union(&kept).count(), 4);

    // ConsumerGroupDescribe: Stable at epoch 2, both members with their partitions.
    let d = describe(&mut c, &[g, "no-such-group"]);
    assert_eq!(d[0].error_code, NONE);
    assert_eq!(d[0].group_state.to_string(), "Stable");
    assert_eq!((d[0].group_epoch, d[0].assignment_epoch), (2, 2));
    assert_eq!(d[0].assignor_name.to_string(), "uniform");
    let members: Vec<(String, i32, BTreeSet<i32>, String)> = d[0]
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.member_epoch,
                m.assignment.topic_partitions[0]
                    .partitions
                    .iter()
                    .copied()
                    .collect(),
                m.assignment.topic_partitions[0].topic_name.0.to_string(),
            )
        })
        .collect();
    assert_eq!(
        members,
        vec![
            ("member-a".into(), 2, kept.clone(), "orders".into()),
            ("member-b".into(), 2, moved.clone(), "orders".into())
        ]
    );
    assert_eq!(d[1].error_code, GROUP_ID_NOT_FOUND);

    // Fencing: a stale or unknown epoch, an unknown member.
    assert_eq!(
        Hb::beat(g, "member-a", 7).send(&mut c).error_code,
        FENCED_MEMBER_EPOCH
    );
    assert_eq!(
        Hb::beat(g, "nobody", 2).send(&mut c).error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        Hb::beat("no-group", "x", 3).send(&mut c).error_code,
        UNKNOWN_MEMBER_ID
    );
    // A fenced member rejoins with epoch 0 (as clients do) and is let back in.
    let rejoin = Hb::join(g, "member-a", &["orders"]).send(&mut c);
    assert_eq!(rejoin.error_code, NONE);

    // Bad requests: an unknown assignor, an invalid regex, a join without a subscription.
    let mut hb = Hb::join(g, "member-c", &["orders"]);
    hb.assignor = Some("sticky");
    assert_eq!(hb.send(&mut c).error_code, UNSUPPORTED_ASSIGNOR);
    let mut hb = Hb::join(g, "member-c", &[]);
    hb.topics = None;
    hb.regex = Some("orders(");
    assert_eq!(hb.send(&mut c).error_code, INVALID_REGULAR_EXPRESSION);
    let mut hb = Hb::join(g, "member-c", &[]);
    hb.topics = None;
    assert_eq!(hb.send(&mut c).error_code, INVALID_REQUEST);

    // OffsetCommit v9 is fenced by member epoch: the current one commits, another is stale, an
    // unknown member is unknown, and a simple commit (no member) is refused while members are in.
    let epoch_b = describe(&mut c, &[g])[0]
        .members
        .iter()
        .find(|m| m.member_id.to_string() == "member-b")
        .map(|m| m.member_epoch)
        .unwrap();
    assert_eq!(commit(&mut c, 9, g, "member-b", epoch_b, 11), NONE);
    assert_eq!(committed(&mut c, g), 11);
    assert_eq!(
        commit(&mut c, 9, g, "member-b", epoch_b - 1, 12),
        STALE_MEMBER_EPOCH
    );
    assert_eq!(
        commit(&mut c, 9, g, "member-b", epoch_b + 1, 12),
        STALE_MEMBER_EPOCH
    );
    assert_eq!(
        commit(&mut c, 9, g, "nobody", epoch_b, 12),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(commit(&mut c, 9, g, "", -1, 12), UNKNOWN_MEMBER_ID);
    assert_eq!(committed(&mut c, g), 11);
    // OffsetFetch v9 checks the member the same way; an admin's fetch (no member) passes.
    assert_eq!(fetch_v9(&mut c, g, "member-b", epoch_b), (NONE, 11));
    assert_eq!(
        fetch_v9(&mut c, g, "member-b", epoch_b + 3).0,
        STALE_MEMBER_EPOCH
    );
    assert_eq!(fetch_v9(&mut c, g, "nobody", epoch_b).0, UNKNOWN_MEMBER_ID);
    assert_eq!(fetch_v9(&mut c, g, "", -1), (NONE, 11));

    // A classic member cannot join a consumer group with members; DescribeGroups (classic)
    // calls it Dead, ListGroups v5 lists it as a consumer group, and it cannot be deleted.
    let join: JoinGroupResponse = c.send(
        ApiKey::JoinGroup,
        5,
        &JoinGroupRequest::default()
            .with_group_id(gid(g))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(s("range"))
            .with_metadata(bytes::Bytes::from_static(b"\0\0\0\0\0\0"))]),
    );
    assert_eq!(join.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let dg: DescribeGroupsResponse = c.send(
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![gid(g)]),
    );
    assert_eq!(dg.groups[0].group_state.to_string(), "Dead");
    let lg: ListGroupsResponse = c.send(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("consumer")]),
    );
    let listed: Vec<(String, String, String, String)> = lg
        .groups
        .iter()
        .map(|l| {
            (
                l.group_id.0.to_string(),
                l.protocol_type.to_string(),
                l.group_state.to_string(),
                l.group_type.to_string(),
            )
        })
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].0, g);
    assert_eq!(listed[0].1, "consumer");
    assert_eq!(listed[0].3, "consumer");
    let lg: ListGroupsResponse = c.send(
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("classic")]),
    );
    assert!(lg.groups.iter().all(|l| l.group_id.0.to_string() != g));
    let del: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid(g)]),
    );
    assert_eq!(del.results[0].error_code, NON_EMPTY_GROUP);

    // Everyone leaves (epoch -1): the group is Empty, commits without a member pass, and it
    // can be deleted with its offsets.
    for m in ["member-a", "member-b"] {
        let r = Hb::beat(g, m, -1).send(&mut c);
        assert_eq!((r.error_code, r.member_epoch), (NONE, -1), "{m}");
    }
    assert_eq!(describe(&mut c, &[g])[0].group_state.to_string(), "Empty");
    assert_eq!(commit(&mut c, 9, g, "", -1, 13), NONE);
    assert_eq!(committed(&mut c, g), 13);
    let del: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid(g)]),
    );
    assert_eq!(del.results[0].error_code, NONE);
    assert_eq!(committed(&mut c, g), -1);
    assert_eq!(describe(&mut c, &[g])[0].error_code, GROUP_ID_NOT_FOUND);
}

#[test]
fn a_classic_group_with_members_is_not_a_consumer_group() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "orders", 2);
    let g = "classic-one";
    find_coordinator(&mut c, g);
    let join = |c: &mut Client, member: &str| -> JoinGroupResponse {
        c.send(
            ApiKey::JoinGroup,
            5,
            &JoinGroupRequest::default()
                .with_group_id(gid(g))
                .with_member_id(s(member))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
                )
                .with_name(s("range"))
                .with_metadata(bytes::Bytes::from_static(b"\0\0\0\0\0\0"))]),
        )
    };
    let first = join(&mut c, "");
    let member = first.member_id.to_string();
    assert_eq!(join(&mut c, &member).error_code, NONE);
    let r = Hb::join(g, "m", &["orders"]).send(&mut c);
    assert_eq!(r.error_code, GROUP_ID_NOT_FOUND);
    assert!(r.error_message.unwrap().contains("not a consumer group"));
    let d = describe(&mut c, &[g]);
    assert_eq!(d[0].error_code, GROUP_ID_NOT_FOUND);
}

#[test]
fn a_flood_of_joins_is_bounded_by_the_group_size() {
    let b = Broker::start(&["--set", "group.consumer.max.size=5"]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "orders", 3);
    let g = "flood";
    find_coordinator(&mut c, g);
    let mut codes = Vec::new();
    for i in 0..200 {
        let id = format!("m-{i}");
        codes.push(Hb::join(g, &id, &["orders"]).send(&mut c).error_code);
    }
    assert!(codes[..5].iter().all(|&e| e == NONE), "{codes:?}");
    assert!(codes[5..].iter().all(|&e| e == GROUP_MAX_SIZE_REACHED));
    let d = describe(&mut c, &[g]);
    assert_eq!(d[0].members.len(), 5);
    // Every partition is in exactly one member's target assignment.
    let mut targets: Vec<i32> = d[0]
        .members
        .iter()
        .flat_map(|m| m.target_assignment.topic_partitions.iter())
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    targets.sort();
    assert_eq!(targets, vec![0, 1, 2]);
    // The broker still answers other requests on the same connection.
    assert_eq!(
        Hb::beat(g, "m-0", 6).send(&mut c).error_code,
        FENCED_MEMBER_EPOCH
    );
}

#[test]
fn a_silent_member_is_removed_after_the_session_timeout() {
    let b = Broker::start(&[
        "--set",
        "group.consumer.session.timeout.ms=1500",
        "--set",
        "group.consumer.heartbeat.interval.ms=200",
    ]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "orders", 2);
    let g = "silent";
    find_coordinator(&mut c, g);
    let a = Hb::join(g, "a", &["orders"]).send(&mut c);
    assert_eq!((a.error_code, a.heartbeat_interval_ms), (NONE, 200));
    let start = std::time::Instant::now();
    // Nothing more from `a`: the group's timer removes it; nobody has to heartbeat.
    loop {
        let d = describe(&mut c, &[g]);
        if d[0].members.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "never removed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let waited = start.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(1400),
        "{waited:?}"
    );
    assert!(b.log_text().contains("consumer group member removed"));
    assert_eq!(
        Hb::beat(g, "a", 1).send(&mut c).error_code,
        UNKNOWN_MEMBER_ID
    );
}

/// The group's records (Kafka's consumer-group records in `__consumer_offsets`) bring it back
/// after the coordinator is killed: same epochs, members and assignments, and the members'
/// next heartbeats at their epochs are accepted without a rebalance.
#[test]
fn membership_survives_a_coordinator_restart() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "orders", 4);
    let orders = topic_id(&mut c, "orders");
    let g = "kip848-restart";
    find_coordinator(&mut c, g);
    let a = Hb::join(g, "member-a", &["orders"]).send(&mut c);
    assert_eq!((a.error_code, a.member_epoch), (NONE, 1));
    let bm = Hb::join(g, "member-b", &["orders"]).send(&mut c);
    assert_eq!((bm.error_code, bm.member_epoch), (NONE, 2));
    // `a` revokes what moves, `b` gets it: Stable at epoch 2.
    let mut hb = Hb::beat(g, "member-a", 1);
    hb.owned = Some(vec![(orders, vec![0, 1, 2, 3])]);
    let kept: Vec<i32> = assigned(&hb.send(&mut c)).unwrap().into_iter().collect();
    let mut hb = Hb::beat(g, "member-a", 1);
    hb.owned = Some(vec![(orders, kept.clone())]);
    assert_eq!(hb.send(&mut c).member_epoch, 2);
    let moved: Vec<i32> = assigned(&Hb::beat(g, "member-b", 2).send(&mut c))
        .unwrap()
        .into_iter()
        .collect();
    let mut hb = Hb::beat(g, "member-b", 2);
    hb.owned = Some(vec![(orders, moved.clone())]);
    assert_eq!(hb.send(&mut c).error_code, NONE);
    let view = |c: &mut Client| {
        let d = describe(c, &[g]);
        let members: Vec<(String, i32, Vec<i32>)> = d[0]
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.member_epoch,
                    m.assignment
                        .topic_partitions
                        .iter()
                        .flat_map(|t| t.partitions.iter().copied())
                        .collect(),
                )
            })
            .collect();
        (
            d[0].error_code,
            d[0].group_state.to_string(),
            d[0].group_epoch,
            members,
        )
    };
    let before = view(&mut c);
    assert_eq!(
        before,
        (
            NONE,
            "Stable".to_string(),
            2,
            vec![
                ("member-a".to_string(), 2, kept.clone()),
                ("member-b".to_string(), 2, moved.clone())
            ]
        )
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    b.kill9_and_restart();

    let mut c = Client::connect(&b.bootstrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let after = loop {
        let v = view(&mut c);
        if v.0 == NONE {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "not loaded: {v:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(after, before);
    // Heartbeats go on at epoch 2 with the same assignments; nothing moves.
    for (m, owned) in [("member-a", &kept), ("member-b", &moved)] {
        let mut hb = Hb::beat(g, m, 2);
        hb.owned = Some(vec![(orders, owned.clone())]);
        let r = hb.send(&mut c);
        assert_eq!((r.error_code, r.member_epoch), (NONE, 2), "{m}");
        assert!(assigned(&r).is_none_or(|p| p.into_iter().collect::<Vec<_>>() == *owned));
    }
    assert_eq!(view(&mut c), before);

    // Deleted after everyone leaves: the tombstones keep it deleted across another restart.
    for m in ["member-a", "member-b"] {
        assert_eq!(Hb::beat(g, m, -1).send(&mut c).error_code, NONE);
    }
    let del: DeleteGroupsResponse = c.send(
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![gid(g)]),
    );
    assert_eq!(del.results[0].error_code, NONE);
    std::thread::sleep(std::time::Duration::from_millis(300));
    b.kill9_and_restart();
    let mut c = Client::connect(&b.bootstrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let d = describe(&mut c, &[g]);
        if d[0].error_code == GROUP_ID_NOT_FOUND {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the deleted group came back: {:?}",
            d[0]
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
