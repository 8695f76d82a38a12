//! Group coordinator plumbing and committed offsets through the wire protocol, against the
//! real binary: FindCoordinator (batched v4, transactions refused), OffsetCommit (simple
//! commits, member fencing, unknown partitions, metadata size), OffsetFetch (several groups
//! at once, null topics), OffsetDelete, `__consumer_offsets` itself (internal, compacted,
//! refused to producers, Kafka's record format) and offsets across a kill -9.

mod common;

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;

const NONE: i16 = keel_vocab::ErrorCode::NONE.code();
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const OFFSET_METADATA_TOO_LARGE: i16 = 12;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const INVALID_REQUEST: i16 = 42;
const NOT_COORDINATOR: i16 = 16;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const INVALID_GROUP_ID: i16 = 24;
const UNKNOWN_MEMBER_ID: i16 = 25;
const GROUP_ID_NOT_FOUND: i16 = 69;

const OFFSETS_TOPIC: &str = "__consumer_offsets";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn group(v: &str) -> GroupId {
    GroupId(s(v))
}

fn find_coordinators(c: &mut Client, key_type: i8, keys: &[&str]) -> FindCoordinatorResponse {
    let req = FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(keys.iter().map(|k| s(k)).collect());
    c.send(ApiKey::FindCoordinator, 4, &req)
}

/// Asks FindCoordinator until every group's coordinator is known (it creates the topic).
fn wait_coordinators(c: &mut Client, keys: &[&str]) -> FindCoordinatorResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = find_coordinators(c, 0, keys);
        if resp.coordinators.iter().all(|x| x.error_code == NONE) || Instant::now() > deadline {
            return resp;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (topic, [(partition, offset, leader epoch, metadata)])
type Commit<'a> = (&'a str, Vec<(i32, i64, i32, Option<String>)>);

fn commit_request(
    group_id: &str,
    generation: i32,
    member: &str,
    topics: &[Commit],
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(group(group_id))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_topics(
            topics
                .iter()
                .map(|(name, parts)| {
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic(name))
                        .with_partitions(
                            parts
                                .iter()
                                .map(|(p, o, e, m)| {
                                    offset_commit_request::OffsetCommitRequestPartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(*o)
                                        .with_committed_leader_epoch(*e)
                                        .with_committed_metadata(m.as_deref().map(s))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// Sends a commit, retrying while the coordinator loads; the error code of every partition.
fn commit(c: &mut Client, req: &OffsetCommitRequest) -> Vec<(String, i32, i16)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp: OffsetCommitResponse = c.send(ApiKey::OffsetCommit, 9, req);
        let out: Vec<(String, i32, i16)> = resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect();
        let loading = out
            .iter()
            .any(|(_, _, e)| *e == COORDINATOR_LOAD_IN_PROGRESS);
        if !loading || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn simple_commit(c: &mut Client, group_id: &str, topics: &[Commit]) {
    let errors = commit(c, &commit_request(group_id, -1, "", topics));
    assert!(
        errors.iter().all(|(_, _, e)| *e == NONE),
        "commit of {group_id} failed: {errors:?}"
    );
}

fn fetch_group(
    group_id: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> offset_fetch_request::OffsetFetchRequestGroup {
    offset_fetch_request::OffsetFetchRequestGroup::default()
        .with_group_id(group(group_id))
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(name, parts)| {
                    offset_fetch_request::OffsetFetchRequestTopics::default()
                        .with_name(topic(name))
                        .with_partition_indexes(parts.to_vec())
                })
                .collect()
        }))
}

/// One group's answer: error code and (topic, partition, offset, leader epoch, metadata).
type Fetched = (i16, Vec<(String, i32, i64, i32, String)>);

fn fetch_v8(
    c: &mut Client,
    groups: Vec<offset_fetch_request::OffsetFetchRequestGroup>,
) -> Vec<(String, Fetched)> {
    let req = OffsetFetchRequest::default().with_groups(groups);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp: OffsetFetchResponse = c.send(ApiKey::OffsetFetch, 8, &req);
        let out: Vec<(String, Fetched)> = resp
            .groups
            .iter()
            .map(|g| {
                let parts = g
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions.iter().map(|p| {
                            assert_eq!(p.error_code, NONE);
                            (
                                t.name.0.to_string(),
                                p.partition_index,
                                p.committed_offset,
                                p.committed_leader_epoch,
                                p.metadata
                                    .as_ref()
                                    .map(|m| m.to_string())
                                    .unwrap_or_default(),
                            )
                        })
                    })
                    .collect();
                (g.group_id.0.to_string(), (g.error_code, parts))
            })
            .collect();
        let loading = out
            .iter()
            .any(|(_, (e, _))| *e == COORDINATOR_LOAD_IN_PROGRESS);
        if !loading || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_string(b: &mut Bytes) -> String {
    let n = b.get_i16() as usize;
    String::from_utf8(b.split_to(n).to_vec()).unwrap()
}

fn offsets_topic_metadata(c: &mut Client) -> metadata_response::MetadataResponseTopic {
    let req = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(topic(OFFSETS_TOPIC)))]))
        .with_allow_auto_topic_creation(false);
    let resp: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    resp.topics.into_iter().next().unwrap()
}

#[test]
fn find_coordinator_batched_creates_the_internal_topic() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    let before = offsets_topic_metadata(&mut c);
    assert_eq!(
        before.error_code, UNKNOWN_TOPIC_OR_PARTITION,
        "no topic before the first FindCoordinator"
    );

    let keys = ["group-a", "group-b", "polygenelubricants", "my-group"];
    let resp = wait_coordinators(&mut c, &keys);
    assert_eq!(resp.coordinators.len(), keys.len());
    for (co, key) in resp.coordinators.iter().zip(keys) {
        assert_eq!(co.key.as_str(), key);
        assert_eq!(co.error_code, NONE, "{co:?}");
        assert_eq!(co.node_id.0, 0);
        assert_eq!(co.host.as_str(), "127.0.0.1");
        assert_eq!(co.port, i32::from(b.port));
    }

    // The topic: internal, 50 partitions, compacted, 100 MiB segments.
    let t = offsets_topic_metadata(&mut c);
    assert_eq!(t.error_code, NONE);
    assert!(t.is_internal);
    assert_eq!(t.partitions.len(), 50);
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(OFFSETS_TOPIC)),
    ]);
    let resp: DescribeConfigsResponse = c.send(ApiKey::DescribeConfigs, 4, &req);
    let value = |name: &str| {
        resp.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == name)
            .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
    };
    assert_eq!(value("cleanup.policy").as_deref(), Some("compact"));
    assert_eq!(value("segment.bytes").as_deref(), Some("104857600"));

    // v0: one key, no key type.
    let v0: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        0,
        &FindCoordinatorRequest::default().with_key(s("group-a")),
    );
    assert_eq!(
        (v0.error_code, v0.node_id.0, v0.port),
        (NONE, 0, i32::from(b.port))
    );

    // Transactions (key type 1): this broker, after creating __transaction_state; v3 too.
    let txn = find_coordinators(&mut c, 1, &["txn-1"]);
    assert_eq!(
        (txn.coordinators[0].error_code, txn.coordinators[0].port),
        (NONE, i32::from(b.port))
    );
    let v3: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(s("txn-1"))
            .with_key_type(1),
    );
    assert_eq!((v3.error_code, v3.port), (NONE, i32::from(b.port)));
    // Another key type is refused.
    let other = find_coordinators(&mut c, 7, &["x"]);
    assert_eq!(other.coordinators[0].error_code, INVALID_REQUEST);
}

#[test]
fn commit_fetch_delete_across_groups() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "orders", 4);
    create_topic(&mut c, "audit", 2);

    // Before any FindCoordinator there is no coordinator topic: clients must ask.
    let early = commit(
        &mut c,
        &commit_request("g1", -1, "", &[("orders", vec![(0, 1, -1, None)])]),
    );
    assert_eq!(early, vec![("orders".to_string(), 0, NOT_COORDINATOR)]);
    wait_coordinators(&mut c, &["g1", "g2", "g3"]);

    simple_commit(
        &mut c,
        "g1",
        &[
            (
                "orders",
                vec![(0, 10, 3, Some("m0".into())), (2, 22, -1, None)],
            ),
            ("audit", vec![(1, 5, -1, Some("".into()))]),
        ],
    );
    simple_commit(
        &mut c,
        "g2",
        &[("orders", vec![(1, 7, -1, Some("two".into()))])],
    );
    // A later commit wins.
    simple_commit(
        &mut c,
        "g1",
        &[("orders", vec![(2, 23, 4, Some("again".into()))])],
    );

    let got = fetch_v8(
        &mut c,
        vec![
            fetch_group("g1", Some(&[("orders", &[0, 1, 2]), ("audit", &[1])])),
            fetch_group("g2", None),
            fetch_group("g3", None),
            fetch_group("", None),
        ],
    );
    let o = |t: &str, p: i32, off: i64, e: i32, m: &str| (t.to_string(), p, off, e, m.to_string());
    assert_eq!(got[0].0, "g1");
    assert_eq!(
        got[0].1,
        (
            NONE,
            vec![
                o("orders", 0, 10, 3, "m0"),
                o("orders", 1, -1, -1, ""),
                o("orders", 2, 23, 4, "again"),
                o("audit", 1, 5, -1, ""),
            ]
        )
    );
    assert_eq!(
        got[1],
        ("g2".to_string(), (NONE, vec![o("orders", 1, 7, -1, "two")]))
    );
    assert_eq!(got[2], ("g3".to_string(), (NONE, vec![])));
    assert_eq!(got[3].1 .0, INVALID_GROUP_ID);

    // OffsetDelete: tombstones for committed ones, nothing for the rest.
    let del = |c: &mut Client, g: &str, parts: &[(&str, i32)]| -> OffsetDeleteResponse {
        let mut topics: Vec<offset_delete_request::OffsetDeleteRequestTopic> = Vec::new();
        for (t, p) in parts {
            let part = offset_delete_request::OffsetDeleteRequestPartition::default()
                .with_partition_index(*p);
            match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
                Some(x) => x.partitions.push(part),
                None => topics.push(
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(topic(t))
                        .with_partitions(vec![part]),
                ),
            }
        }
        c.send(
            ApiKey::OffsetDelete,
            0,
            &OffsetDeleteRequest::default()
                .with_group_id(group(g))
                .with_topics(topics),
        )
    };
    let resp = del(&mut c, "g1", &[("orders", 0), ("orders", 3), ("nope", 0)]);
    assert_eq!(resp.error_code, NONE);
    let codes: Vec<(String, i32, i16)> = resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            ("orders".to_string(), 0, NONE),
            ("orders".to_string(), 3, NONE),
            ("nope".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    let got = fetch_v8(&mut c, vec![fetch_group("g1", None)]);
    assert_eq!(
        got[0].1,
        (
            NONE,
            vec![o("audit", 1, 5, -1, ""), o("orders", 2, 23, 4, "again")]
        )
    );
    assert_eq!(
        del(&mut c, "no-such-group", &[("orders", 0)]).error_code,
        GROUP_ID_NOT_FOUND
    );
    assert_eq!(
        del(&mut c, "", &[("orders", 0)]).error_code,
        INVALID_GROUP_ID
    );

    // Deleting the last offsets forgets the group.
    del(&mut c, "g2", &[("orders", 1)]);
    assert_eq!(
        del(&mut c, "g2", &[("orders", 1)]).error_code,
        GROUP_ID_NOT_FOUND
    );

    // Everything survives a kill -9 (the coordinator replays its log).
    let mut b = b;
    b.kill9_and_restart();
    let mut c = Client::connect(&b.bootstrap());
    let got = fetch_v8(
        &mut c,
        vec![fetch_group("g1", None), fetch_group("g2", None)],
    );
    assert_eq!(
        got[0].1,
        (
            NONE,
            vec![o("audit", 1, 5, -1, ""), o("orders", 2, 23, 4, "again")]
        )
    );
    assert_eq!(got[1].1, (NONE, vec![]));

    // v1-7: one group, top-level error code from v2.
    let v7: OffsetFetchResponse = c.send(
        ApiKey::OffsetFetch,
        7,
        &OffsetFetchRequest::default()
            .with_group_id(group("g1"))
            .with_topics(None),
    );
    assert_eq!(v7.error_code, NONE);
    assert_eq!(
        v7.topics.iter().map(|t| t.partitions.len()).sum::<usize>(),
        2
    );
    let v1: OffsetFetchResponse = c.send(
        ApiKey::OffsetFetch,
        1,
        &OffsetFetchRequest::default()
            .with_group_id(group("g1"))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic("orders"))
                    .with_partition_indexes(vec![2, 3]),
            ])),
    );
    let p = &v1.topics[0].partitions;
    assert_eq!((p[0].committed_offset, p[1].committed_offset), (23, -1));
}

#[test]
fn commit_errors() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "events", 2);
    wait_coordinators(&mut c, &["errs", "members"]);

    // Metadata: 4096 bytes is the limit (offset.metadata.max.bytes); the partition over it
    // fails alone.
    let errors = commit(
        &mut c,
        &commit_request(
            "errs",
            -1,
            "",
            &[(
                "events",
                vec![
                    (0, 1, -1, Some("x".repeat(4096))),
                    (1, 2, -1, Some("y".repeat(4097))),
                ],
            )],
        ),
    );
    assert_eq!(
        errors,
        vec![
            ("events".to_string(), 0, NONE),
            ("events".to_string(), 1, OFFSET_METADATA_TOO_LARGE)
        ]
    );

    // Unknown topic and partition.
    let errors = commit(
        &mut c,
        &commit_request(
            "errs",
            -1,
            "",
            &[
                ("events", vec![(2, 1, -1, None)]),
                ("missing", vec![(0, 1, -1, None)]),
            ],
        ),
    );
    assert_eq!(
        errors,
        vec![
            ("events".to_string(), 2, UNKNOWN_TOPIC_OR_PARTITION),
            ("missing".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION)
        ]
    );

    // A member's commit to a group without members: the coordinator does not know the member.
    for (generation, member) in [(1, "consumer-1-abc"), (0, ""), (-1, "consumer-2")] {
        let errors = commit(
            &mut c,
            &commit_request(
                "members",
                generation,
                member,
                &[("events", vec![(0, 9, -1, None)])],
            ),
        );
        assert_eq!(
            errors,
            vec![("events".to_string(), 0, UNKNOWN_MEMBER_ID)],
            "{generation} {member}"
        );
    }
    let got = fetch_v8(
        &mut c,
        vec![fetch_group("members", None), fetch_group("errs", None)],
    );
    assert_eq!(got[0].1, (NONE, vec![]), "nothing was committed");
    assert_eq!(got[1].1 .1.len(), 1);
    assert_eq!(got[1].1 .1[0].4.len(), 4096);

    // An empty group id.
    let errors = commit(
        &mut c,
        &commit_request("", -1, "", &[("events", vec![(0, 1, -1, None)])]),
    );
    assert_eq!(errors, vec![("events".to_string(), 0, INVALID_GROUP_ID)]);
}

#[test]
fn the_offsets_topic_holds_kafkas_records_and_refuses_producers() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "data", 1);
    wait_coordinators(&mut c, &["fmt"]);
    simple_commit(
        &mut c,
        "fmt",
        &[("data", vec![(0, 42, 7, Some("meta".into()))])],
    );

    // Group "fmt": Utils.abs("fmt".hashCode()) % 50.
    let h = "fmt"
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let p = (h.unsigned_abs() % 50) as i32;
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request(OFFSETS_TOPIC, &[(p, 0, 1 << 20)], 0, 0, 1 << 20),
    );
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.error_code, NONE);
    let mut records = part.records.clone().expect("records");
    let set = RecordBatchDecoder::decode(&mut records).unwrap();
    assert_eq!(set.records.len(), 1);
    let mut key: Bytes = set.records[0].key.clone().unwrap();
    assert_eq!(key.get_i16(), 1, "OffsetCommitKey version 1");
    assert_eq!(read_string(&mut key), "fmt");
    assert_eq!(read_string(&mut key), "data");
    assert_eq!(key.get_i32(), 0);
    let mut value: Bytes = set.records[0].value.clone().unwrap();
    assert_eq!(value.get_i16(), 3, "OffsetCommitValue version 3");
    assert_eq!(value.get_i64(), 42);
    assert_eq!(value.get_i32(), 7);
    assert_eq!(read_string(&mut value), "meta");
    let ts = value.get_i64();
    assert!(ts > 1_700_000_000_000, "commit timestamp {ts}");
    assert!(!value.has_remaining());

    // Clients cannot write there.
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(OFFSETS_TOPIC))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(p)
                    .with_records(Some(batch(&[b"x"]))),
            ])]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code,
        INVALID_TOPIC_EXCEPTION
    );
}

#[test]
fn settings_shape_the_offsets_topic() {
    let b = Broker::start(&[
        "--set",
        "offsets.topic.num.partitions=3",
        "--set",
        "offsets.topic.segment.bytes=1048576",
    ]);
    let mut c = Client::connect(&b.bootstrap());
    wait_coordinators(&mut c, &["x"]);
    let t = offsets_topic_metadata(&mut c);
    assert_eq!(t.partitions.len(), 3);
    assert!(t.is_internal);
    // A Metadata request naming the missing topic on a fresh broker creates it the same way.
    let b2 = Broker::start(&["--set", "offsets.topic.num.partitions=2"]);
    let mut c2 = Client::connect(&b2.bootstrap());
    let req = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(topic(OFFSETS_TOPIC)))]))
        .with_allow_auto_topic_creation(true);
    let resp: MetadataResponse = c2.send(ApiKey::Metadata, 12, &req);
    assert_eq!(resp.topics[0].partitions.len(), 2);
    assert!(resp.topics[0].is_internal);
}

/// Offsets expire a minute (the smallest `offsets.retention.minutes`) after the group's latest
/// commit: tombstones go to the log and a restart does not bring them back.
///
/// It takes the minute it tests (about 62 s; the other tests of this file run meanwhile). No
/// shorter honest way exists: Kafka's retention is in minutes (at least 1), the commit
/// timestamp is the broker's clock, so a test cannot backdate a commit, and the per-commit
/// `retention_time_ms` of OffsetCommit v2-4 (Kafka's other way to a short expiry) is ignored
/// by Keel. A test-only setting in milliseconds would test a knob Kafka does not have.
#[test]
fn offsets_expire_after_the_retention() {
    let mut b = Broker::start(&[
        "--set",
        "offsets.retention.minutes=1",
        "--set",
        "offsets.retention.check.interval.ms=500",
    ]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "exp", 1);
    wait_coordinators(&mut c, &["old", "young"]);
    // Taken before the request: the broker stamps the commit after this instant, so the
    // offsets may not expire before a minute from here (taken after the answer, a check that
    // happened to run right at the expiry could see it a few milliseconds "early").
    let committed = Instant::now();
    simple_commit(&mut c, "old", &[("exp", vec![(0, 3, -1, None)])]);
    std::thread::sleep(Duration::from_secs(40));
    // Committed 40 s later: still 40 s from its own expiry when "old" expires.
    simple_commit(&mut c, "young", &[("exp", vec![(0, 4, -1, None)])]);
    let deadline = committed + Duration::from_secs(75);
    loop {
        let got = fetch_v8(&mut c, vec![fetch_group("old", None)]);
        if got[0].1 == (NONE, vec![]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old offsets did not expire: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The broker's wall clock and this monotonic one may drift apart by NTP's slew (at most
    // 500 ppm, 30 ms a minute): allowed, and nothing more.
    let waited = committed.elapsed();
    assert!(
        waited >= Duration::from_millis(60_000 - 30),
        "expired early: {waited:?} after the commit"
    );
    let got = fetch_v8(&mut c, vec![fetch_group("young", None)]);
    assert_eq!(got[0].1 .1.len(), 1, "the young group keeps its offsets");
    assert!(b.log_text().contains("expired committed offsets"));
    b.kill9_and_restart();
    let mut c = Client::connect(&b.bootstrap());
    let got = fetch_v8(
        &mut c,
        vec![fetch_group("old", None), fetch_group("young", None)],
    );
    assert_eq!(got[0].1, (NONE, vec![]));
    assert_eq!(got[1].1 .1.len(), 1);
}
